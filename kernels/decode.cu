// Decode-time kernels of the export companion (python/executorch_cuda/):
//
//   et_gemv_*      y[M][N] = x[M][K] . W[N][K]^T (+ bias[N]), bf16 or fp16 in and
//                  out, fp32 accumulation, for small M (decode: 1..16 rows).
//   et_attn_*      attention of a few new query tokens over a static KV cache,
//                  with GQA and split-K over the cache length (flash-decoding),
//                  plus the kernel that combines the splits.
//
// Design notes and the launch rules are in kernels/README.md (section
// "decode.cu"); the Rust side (src/kernels/gemv.rs, src/kernels/attention.rs)
// checks every shape, stride, dtype and alignment before a launch, so the
// kernels trust their arguments.
//
// Built by kernels/build.sh (sm_90 SASS + compute_80 PTX) into decode.fatbin;
// all entry points are extern "C" so that the Rust side finds them by name.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// A named namespace (not an anonymous one, whose mangled names carry a hash of
// the source path) keeps the PTX the same wherever the checkout lives.
namespace et_decode {

// ------------------------------------------------------------------ helpers

template <typename T> struct Ops;

template <> struct Ops<__nv_bfloat16> {
  static constexpr bool kBf16 = true;
  static __device__ __forceinline__ float2 pair(uint32_t u) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&u);
    return __bfloat1622float2(h);
  }
  static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
};

template <> struct Ops<__half> {
  static constexpr bool kBf16 = false;
  static __device__ __forceinline__ float2 pair(uint32_t u) {
    __half2 h = *reinterpret_cast<__half2*>(&u);
    return __half22float2(h);
  }
  static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
};

// Streaming 16-byte load: read-only, not kept in L1 (weights are read once).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// 16-byte load through L2 (coherent with this kernel's own earlier writes).
__device__ __forceinline__ uint4 ld_cg(const void* p) {
  uint4 r;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p)
               : "memory");
  return r;
}

// A KV-cache load: streaming, or through L2 when the kernel wrote the cache itself (W).
template <bool W>
__device__ __forceinline__ uint4 ld_kv(const void* p) {
  if constexpr (W) return ld_cg(p);
  else return ld_stream(p);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// No L2 prefetch of the fused linear's weights before its PDL wait: asked for every linear it took
// 5 % off linear_bench's Qwen3-0.6B layer chain but lost on whole programs (H200, graphs: Qwen3-0.6B
// -1.6 %, Gemma-3-1B -4.5 %, Llama +0.7 %; bench/results/2026-12-06-55d432e-prefetch-ab.md); asked
// only after decode attention and the add-norm, whose time leaves HBM idle, it changed nothing
// (H100: 2026-12-06-34180dc-hf-scale.md, -chain-attention.md).

// Programmatic dependent launch (sm_90): let the next kernel of the stream start launching, and
// wait until the kernel before has finished and its writes are visible. Both return at once
// when the launch was not programmatic (or before sm_90, where they are compiled out).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Thread block clusters (sm_90): a barrier of every thread of the cluster's blocks (release /
// acquire: shared-memory writes before it are visible to every block after it), and a load from
// the shared memory of the cluster's block `rank` at the address `p` has in this block. Before
// sm_90 they are never reached (the host launches clusters only on sm_90 and newer) and trap.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ float ld_cluster(const float* p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t local = (uint32_t)__cvta_generic_to_shared(p);
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
#else
  __trap();
  return 0.f;
#endif
}

// ------------------------------------------------------------------ GEMV
//
// Tensor-core GEMV for small M (decode), memory-bound: the goal is to keep
// enough bytes of W in flight on every SM and to spend as few instructions as
// possible per byte. Layout of the work:
//
// - One mma.m16n8k16 (fp32 accumulation) takes x as its A operand (16 rows of
//   x, rows past M are zero registers) and 8 rows of W as its B operand, so a
//   tile is 8 output columns (rows of W) and every row of x in the block.
// - Because the sum over k does not care which k goes to which mma slot, each
//   lane loads 16 contiguous bytes (8 k) of one W row: lane 4g + c reads row
//   n0 + g at k = 32j + 8c .. +8 for chunk j (a warp load = 8 rows x 64 bytes),
//   and the same 8 k of x rows g and g + 8; the first half of both vectors
//   feeds one mma, the second half another. No shuffles, no shared memory in
//   the loop, no conversions: 1 load of W + 1 load of x (from L1; only lanes of
//   rows < M issue it) + 2 mma per 16 bytes of W and lane.
// - The warps of a block split K into NW contiguous ranges of chunks; a warp
//   issues U chunks x RT tiles of 16-byte loads before its first mma (U * RT *
//   16 bytes per lane in flight), then accumulates. The partial tiles are
//   summed over the warps through shared memory at the end; the bias is added
//   and the result rounded once.
// - Grid: (ceil(N / (8 * RT)), ceil(M / MROWS)), MROWS = 8 (M <= 8) or 16.
//   A block row past the first reads W again (from L2 when it fits).
//
// Requirements (checked by the caller): K % 8 == 0; x and W 16-byte aligned;
// row strides sx, sw multiples of 8 elements; unit stride along K.

// 16-byte load of W, predicated (zeros when !p): read once, so not kept in L1;
// the L2 fetches whole 128-byte lines (the next lane quad's load hits them).
__device__ __forceinline__ uint4 ld_w(const void* ptr, bool p) {
  uint4 r;
  asm volatile(
      "{\n"
      "  .reg .pred q;\n"
      "  setp.ne.b32 q, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @q ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(ptr), "r"((int)p));
  return r;
}

// 16-byte load of x, predicated (zeros when !p); cached in L1 (every block reads x).
__device__ __forceinline__ uint4 ld_x(const void* ptr, bool p) {
  uint4 r;
  asm volatile(
      "{\n"
      "  .reg .pred q;\n"
      "  setp.ne.b32 q, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @q ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(ptr), "r"((int)p));
  return r;
}

// d += A(16x16, row) * B(16x8, col); a0..a3 and b0..b1 are the PTX fragments
// (two elements per register, the lower k in the low half).
template <typename T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

// Any strides, any alignment, any K; one warp per row of W, 16 rows of x at
// a time. Grid: (ceil(N / 8)); block 256.
template <typename T>
__device__ __forceinline__ void gemv_generic(const T* __restrict__ x, long long sxm, long long sxk,
                                             const T* __restrict__ w, long long swn, long long swk,
                                             const T* __restrict__ bias, T* __restrict__ y,
                                             int M, int N, int K) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (n >= N) return;
  const float b = bias ? Ops<T>::to_f(bias[n]) : 0.f;
  for (int m0 = 0; m0 < M; m0 += 16) {
    float acc[16];
#pragma unroll
    for (int m = 0; m < 16; ++m) acc[m] = 0.f;
    for (int k = lane; k < K; k += 32) {
      const float wk = Ops<T>::to_f(w[(long long)n * swn + (long long)k * swk]);
#pragma unroll
      for (int m = 0; m < 16; ++m)
        if (m0 + m < M) acc[m] = fmaf(wk, Ops<T>::to_f(x[(long long)(m0 + m) * sxm + (long long)k * sxk]), acc[m]);
    }
#pragma unroll
    for (int m = 0; m < 16; ++m) {
      const float s = warp_sum(acc[m]);
      if (lane == 0 && m0 + m < M) y[(long long)(m0 + m) * N + n] = Ops<T>::from_f(s + b);
    }
  }
}

// ------------------------------------------------------------------ attention

template <bool B, typename A, typename C> struct Pick { using type = A; };
template <typename A, typename C> struct Pick<false, A, C> { using type = C; };
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

constexpr int ATTN_WARPS = 4;
constexpr int ATTN_ROWS = 16;  // query rows per block: ATTN_ROWS / ATTN_WARPS per warp
constexpr int ATTN_RPW = ATTN_ROWS / ATTN_WARPS;
constexpr int ATTN_TILE = 32;  // keys per tile: one per lane for the scores

struct AttnArgs {
  const void* q;
  long long qsb, qsh, qsl, qsd;
  const void* k;
  long long ksb, ksh, ksl;
  const void* v;
  long long vsb, vsh, vsl;
  const long long* pos;  // device positions: pos_n == Lq (per query) or 1 (first query); may be null
  long long start;       // position of query 0 when pos is null
  int pos_n;
  int Hq, Hkv, Lq, Lmax;
  int chunk, nsplit, rgroups;
  float scale_log2;      // softmax scale times log2(e)
  void* out;             // [B, Hq, Lq, D] contiguous (nsplit == 1)
  float* part_o;         // [B, Hq, Lq, nsplit, D] (nsplit > 1)
  float* part_ml;        // [B, Hq, Lq, nsplit, 2]
  int window;            // > 0: query at p sees only keys p - window < j <= p (a sliding window)
  int out_bthd;          // 1: out is laid out [B, Lq, Hq, D] (else [B, Hq, Lq, D])
  // et_attention_rope: q (and the new keys) rotated by cos/sin, the new keys/values written
  // into the caches at the queries' positions (by the decode kernel itself when `write`, else
  // by et_kv_write before the attention kernel).
  const void* kn;        // new keys [B, Hkv, Lq, D] (before RoPE)
  long long kns[4];
  const void* vn;        // new values [B, Hkv, Lq, D]
  long long vns[4];
  const void* cs;        // cos, strides (b, i, d) of [B | 1, 1, Lq, D]
  long long css[3];
  const void* sn;        // sin, same
  long long sns[3];
  int rope;              // 1: rotate q
  int write;             // 1: the decode kernel writes kn/vn first
  // Optional RMSNorm of each head's row before the rotation (Qwen3's and Gemma-3's q_norm and
  // k_norm), r = rsqrt(mean(x^2) + eps) over D in fp32: mode 1: qnw * (x * r).to(T); mode 2:
  // (x * r * (norm_off + qnw)).to(T); 0: none.
  const void* qnw;       // [D] weights of the q rows
  const void* knw;       // [D] weights of the new keys' rows
  int norm_mode;
  float eps, norm_off;
};

// x * cos + rotate_half(x) * sin at dim d of row (b, i), rounded to T as the rotated tensor is
// stored (x: the value at d, xo: the value at the other half's d, D/2 away).
template <typename T>
__device__ __forceinline__ float rope_at(const AttnArgs& a, long long b, int i, int d, int half,
                                         float x, float xo) {
  const T* c = reinterpret_cast<const T*>(a.cs);
  const T* s = reinterpret_cast<const T*>(a.sn);
  const float cv = Ops<T>::to_f(c[b * a.css[0] + i * a.css[1] + d * a.css[2]]);
  const float sv = Ops<T>::to_f(s[b * a.sns[0] + i * a.sns[1] + d * a.sns[2]]);
  const float r = d < half ? -xo : xo;
  return Ops<T>::to_f(Ops<T>::from_f(fmaf(x, cv, r * sv)));
}

// rsqrt(mean(x^2) + eps) of a row of D values at stride sd, computed by one warp (every lane
// gets it); 0 when the rows are not normed.
template <typename T, int D>
__device__ __forceinline__ float row_rsqrt(const AttnArgs& a, const T* x, long long sd, int lane) {
  if (!a.norm_mode) return 0.f;
  float ss = 0.f;
  for (int d = lane; d < D; d += 32) {
    const float v = Ops<T>::to_f(x[d * sd]);
    ss = fmaf(v, v, ss);
  }
  return rsqrtf(warp_sum(ss) / D + a.eps);
}

// x at dim d of a row normed as a.norm_mode says (r: its row_rsqrt; w: the norm's weights).
template <typename T>
__device__ __forceinline__ float normed(const AttnArgs& a, const void* w, int d, float x, float r) {
  if (!a.norm_mode) return x;
  const float wd = Ops<T>::to_f(reinterpret_cast<const T*>(w)[d]);
  if (a.norm_mode == 1) return Ops<T>::to_f(Ops<T>::from_f(wd * Ops<T>::to_f(Ops<T>::from_f(x * r))));
  return Ops<T>::to_f(Ops<T>::from_f(x * r * (a.norm_off + wd)));
}

// Row (b, h, i) of q, and of the new keys (b, hkv, i).
template <typename T>
__device__ __forceinline__ const T* q_row(const AttnArgs& a, long long b, int h, int i) {
  return reinterpret_cast<const T*>(a.q) + b * a.qsb + h * a.qsh + i * a.qsl;
}
template <typename T>
__device__ __forceinline__ const T* kn_row(const AttnArgs& a, long long b, int hkv, int i) {
  return reinterpret_cast<const T*>(a.kn) + b * a.kns[0] + hkv * a.kns[1] + i * a.kns[2];
}

// Query value (b, h, i, d) as the attention reads it (normed with r, then rotated, when asked).
template <typename T, int D>
__device__ __forceinline__ float load_q(const AttnArgs& a, long long b, int h, int i, int d, float r) {
  const T* q = q_row<T>(a, b, h, i);
  const float x = normed<T>(a, a.qnw, d, Ops<T>::to_f(q[d * a.qsd]), r);
  if (!a.rope) return x;
  const int o = d < D / 2 ? d + D / 2 : d - D / 2;
  return rope_at<T>(a, b, i, d, D / 2, x, normed<T>(a, a.qnw, o, Ops<T>::to_f(q[o * a.qsd]), r));
}

// Write new key/value element (i, d) of KV head hkv into the caches at query i's position
// (positions outside the cache are not written); r: the key row's row_rsqrt.
template <typename T, int D>
__device__ __forceinline__ void kv_write_at(const AttnArgs& a, long long b, int hkv, int i, int d,
                                            float r) {
  long long p;
  if (a.pos != nullptr) p = a.pos_n == 1 ? a.pos[0] + i : a.pos[i];
  else p = a.start + i;
  if (p < 0 || p >= a.Lmax) return;
  const T* kn = kn_row<T>(a, b, hkv, i);
  const T* vn = reinterpret_cast<const T*>(a.vn) + b * a.vns[0] + hkv * a.vns[1] + i * a.vns[2];
  const int o = d < D / 2 ? d + D / 2 : d - D / 2;
  const float k = rope_at<T>(a, b, i, d, D / 2, normed<T>(a, a.knw, d, Ops<T>::to_f(kn[d * a.kns[3]]), r),
                             normed<T>(a, a.knw, o, Ops<T>::to_f(kn[o * a.kns[3]]), r));
  T* kc = const_cast<T*>(reinterpret_cast<const T*>(a.k)) + b * a.ksb + hkv * a.ksh + p * a.ksl;
  T* vc = const_cast<T*>(reinterpret_cast<const T*>(a.v)) + b * a.vsb + hkv * a.vsh + p * a.vsl;
  kc[d] = Ops<T>::from_f(k);
  vc[d] = vn[d * a.vns[3]];
}

// The cache write of et_attention_rope ahead of an attention kernel that does not write
// itself: one warp per new row. Grid: (Lq, Hkv, B); block 32.
template <typename T, int D>
__device__ __forceinline__ void kv_write(const AttnArgs& a) {
  pdl_launch_dependents();
  pdl_wait();
  const int i = blockIdx.x, hkv = blockIdx.y, b = blockIdx.z;
  const float r = row_rsqrt<T, D>(a, kn_row<T>(a, b, hkv, i), a.kns[3], threadIdx.x);
  for (int d = threadIdx.x; d < D; d += 32) kv_write_at<T, D>(a, b, hkv, i, d, r);
}

// Position the new row i is written at (kv_write_at's rule; outside [0, Lmax): not written).
__device__ __forceinline__ long long write_pos(const AttnArgs& a, int i) {
  if (a.pos != nullptr) return a.pos_n == 1 ? a.pos[0] + i : a.pos[i];
  return a.start + i;
}

// One head's row x (D values at stride sd) as the attention reads it, computed by one warp:
// lane l gets dims l + 32 e (e < D / 32), normed (row_rsqrt's sum, in its order) with the
// weights nw and rotated as the arguments ask. The rotation's partner d +- D/2 is the same
// lane's e +- D/64, so no value crosses lanes but the norm's sum.
template <typename T, int D>
__device__ __forceinline__ void head_row(const AttnArgs& a, const T* x, long long sd, const void* nw,
                                         long long b, int i, int lane, float (&v)[D / 32]) {
  constexpr int DPL = D / 32;
  static_assert(DPL % 2 == 0, "the rotation pairs dims within a lane");
  const T* w = reinterpret_cast<const T*>(nw);
  const T* cs = reinterpret_cast<const T*>(a.cs);
  const T* sn = reinterpret_cast<const T*>(a.sn);
  const bool norm = a.norm_mode != 0, rope = a.rope != 0;
  // D <= 128: every load first, so that they make one round trip (the ones under a flag
  // cannot be moved above the norm's shuffles by the compiler): the row, the norm weights, cos
  // and sin (H100, Qwen3-0.6B shape: +5.5 % decode tok/s with the early tile below). D = 256
  // loads each where it is used (the hoisted form measured 4 % slower on Gemma-3-1B's shape).
  constexpr bool HOIST = D <= 128;
  float wv[DPL], cv[DPL], sv[DPL];
  auto load_w = [&](int e) { return Ops<T>::to_f(w[lane + 32 * e]); };
  auto load_cs = [&](int e, float& c, float& sv_) {
    const int d = lane + 32 * e;
    c = Ops<T>::to_f(cs[b * a.css[0] + i * a.css[1] + d * a.css[2]]);
    sv_ = Ops<T>::to_f(sn[b * a.sns[0] + i * a.sns[1] + d * a.sns[2]]);
  };
#pragma unroll
  for (int e = 0; e < DPL; ++e) {
    v[e] = Ops<T>::to_f(x[(lane + 32 * e) * sd]);
    wv[e] = HOIST && norm ? load_w(e) : 0.f;
    cv[e] = sv[e] = 0.f;
    if (HOIST && rope) load_cs(e, cv[e], sv[e]);
  }
  if (norm) {
    if constexpr (!HOIST) {
#pragma unroll
      for (int e = 0; e < DPL; ++e) wv[e] = load_w(e);
    }
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < DPL; ++e) ss = fmaf(v[e], v[e], ss);
    const float r = rsqrtf(warp_sum(ss) / D + a.eps);
    // normed<T>'s arithmetic
#pragma unroll
    for (int e = 0; e < DPL; ++e)
      v[e] = a.norm_mode == 1 ? Ops<T>::to_f(Ops<T>::from_f(wv[e] * Ops<T>::to_f(Ops<T>::from_f(v[e] * r))))
                              : Ops<T>::to_f(Ops<T>::from_f(v[e] * r * (a.norm_off + wv[e])));
  }
  if (rope) {
    // rope_at<T>'s arithmetic; the partner of dim d is d +- D/2, the same lane's e +- DPL/2
    if constexpr (!HOIST) {
#pragma unroll
      for (int e = 0; e < DPL; ++e) load_cs(e, cv[e], sv[e]);
    }
    float o[DPL];
#pragma unroll
    for (int e = 0; e < DPL; ++e) o[e] = v[(e + DPL / 2) % DPL];
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      const float r = e < DPL / 2 ? -o[e] : o[e];
      v[e] = Ops<T>::to_f(Ops<T>::from_f(fmaf(v[e], cv[e], r * sv[e])));
    }
  }
}

// Element offset of output row (b, h, i) of D values.
__device__ __forceinline__ long long attn_out_row(int bthd, long long b, long long h, long long i,
                                                  int Hq, int Lq) {
  return bthd ? (b * Lq + i) * Hq + h : (b * Hq + h) * Lq + i;
}

// Position of query i, clamped to the cache: key j is visible to it iff j <= that.
__device__ __forceinline__ int query_pos(const AttnArgs& a, int i) {
  long long p;
  if (a.pos != nullptr) p = a.pos_n == 1 ? a.pos[0] + i : a.pos[i];
  else p = a.start + i;
  p = p < 0 ? 0 : p;
  return (int)(p >= a.Lmax ? a.Lmax - 1 : p);
}

// Grid: (nsplit, Hkv * rgroups, B); block 32 * ATTN_WARPS.
// Block (s, hg, b) takes KV head hg / rgroups, the rows (g * Lq of them per
// KV head, head-major) rg * 16 .. +16 with rg = hg % rgroups, and the keys
// s * chunk .. +chunk. Row j*WARPS + w belongs to warp w. Each key tile of 32
// is staged in shared memory (K padded by 16 bytes per row against bank
// conflicts); lane l scores key l of the tile for the warp's rows, the
// running max/sum follow the online softmax, and lane l accumulates output
// dims l*D/32 .. +D/32.
template <typename T, int D>
__device__ __forceinline__ void attn_split(const AttnArgs& a) {
  constexpr int DPL = D / 32;       // output dims per lane
  constexpr int VEC = D / 8;        // 16-byte vectors per key row
  constexpr int KPAD = D + 8;       // padded K row, elements
  constexpr int LOADS = ATTN_TILE * VEC / (32 * ATTN_WARPS);  // vectors per thread per tile, K or V
  static_assert(LOADS >= 1 && ATTN_TILE * VEC % (32 * ATTN_WARPS) == 0, "tile split");
  // D = 256: the queries are kept as T, unscaled (exact), and the scores scaled after the dot
  // product, so that the block's shared memory stays under 48 KB; smaller D: fp32, prescaled.
  constexpr bool QLOW = D > 128;
  using QT = typename Pick<QLOW, T, float>::type;
  __shared__ QT qs[ATTN_ROWS][D];
  __shared__ __align__(16) T ks[ATTN_TILE][KPAD];
  __shared__ __align__(16) T vs[ATTN_TILE][D];
  __shared__ int qpos[ATTN_ROWS];
  __shared__ int maxpos;

  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int s = blockIdx.x;
  const int hkv = blockIdx.y / a.rgroups, rg = blockIdx.y % a.rgroups;
  const int b = blockIdx.z;
  const int g = a.Hq / a.Hkv;
  const int rows = g * a.Lq;
  const int row0 = rg * ATTN_ROWS;

  __shared__ float qnr[ATTN_ROWS];
  if (threadIdx.x == 0) maxpos = -1;
  for (int rr = warp; rr < ATTN_ROWS; rr += ATTN_WARPS) {
    const int r = row0 + rr;
    if (r < rows) qnr[rr] = row_rsqrt<T, D>(a, q_row<T>(a, b, hkv * g + r / a.Lq, r % a.Lq), a.qsd, lane);
  }
  __syncthreads();
  if (threadIdx.x < ATTN_ROWS) {
    const int r = row0 + threadIdx.x;
    int p = -1;
    if (r < rows) p = query_pos(a, r % a.Lq);
    qpos[threadIdx.x] = p;
    if (p >= 0) atomicMax(&maxpos, p);
  }
  for (int t = threadIdx.x; t < ATTN_ROWS * D; t += blockDim.x) {
    const int rr = t / D, d = t % D, r = row0 + rr;
    float val = 0.f;
    if (r < rows) val = load_q<T, D>(a, b, hkv * g + r / a.Lq, r % a.Lq, d, qnr[rr]);
    if constexpr (QLOW) qs[rr][d] = Ops<T>::from_f(val);
    else qs[rr][d] = val * a.scale_log2;
  }
  __syncthreads();

  const int kbeg = s * a.chunk;
  const int kend = min(min(kbeg + a.chunk, a.Lmax), maxpos + 1);

  float m[ATTN_RPW], l[ATTN_RPW], acc[ATTN_RPW][DPL];
#pragma unroll
  for (int j = 0; j < ATTN_RPW; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[j][d] = 0.f;
  }

  const char* kb = reinterpret_cast<const char*>(a.k) + (b * a.ksb + hkv * a.ksh) * (long long)sizeof(T);
  const char* vb = reinterpret_cast<const char*>(a.v) + (b * a.vsb + hkv * a.vsh) * (long long)sizeof(T);
  uint4 kr[LOADS], vr[LOADS];
  auto fetch = [&](int base) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int e = threadIdx.x + i * 32 * ATTN_WARPS;
      const int key = e / VEC, vec = e % VEC, kk = base + key;
      if (kk < kend) {
        kr[i] = ld_stream(kb + (kk * a.ksl + vec * 8) * (long long)sizeof(T));
        vr[i] = ld_stream(vb + (kk * a.vsl + vec * 8) * (long long)sizeof(T));
      } else {
        kr[i] = make_uint4(0, 0, 0, 0);
        vr[i] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  if (kbeg < kend) fetch(kbeg);
  for (int base = kbeg; base < kend; base += ATTN_TILE) {
    __syncthreads();  // the previous tile is no longer read
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int e = threadIdx.x + i * 32 * ATTN_WARPS;
      const int key = e / VEC, vec = e % VEC;
      *reinterpret_cast<uint4*>(&ks[key][vec * 8]) = kr[i];
      *reinterpret_cast<uint4*>(&vs[key][vec * 8]) = vr[i];
    }
    __syncthreads();
    if (base + ATTN_TILE < kend) fetch(base + ATTN_TILE);  // next tile in flight while computing

    const int key = base + lane;
    float sc[ATTN_RPW];
#pragma unroll
    for (int j = 0; j < ATTN_RPW; ++j) sc[j] = 0.f;
#pragma unroll
    for (int vec = 0; vec < VEC; ++vec) {
      const uint4 kv = *reinterpret_cast<const uint4*>(&ks[lane][vec * 8]);
      const uint32_t words[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
      for (int h2 = 0; h2 < 4; ++h2) {
        const float2 kf = Ops<T>::pair(words[h2]);
#pragma unroll
        for (int j = 0; j < ATTN_RPW; ++j) {
          const int rr = j * ATTN_WARPS + warp;
          sc[j] = fmaf(to_float(qs[rr][vec * 8 + 2 * h2]), kf.x, sc[j]);
          sc[j] = fmaf(to_float(qs[rr][vec * 8 + 2 * h2 + 1]), kf.y, sc[j]);
        }
      }
    }
    if constexpr (QLOW) {
#pragma unroll
      for (int j = 0; j < ATTN_RPW; ++j) sc[j] *= a.scale_log2;
    }
#pragma unroll
    for (int j = 0; j < ATTN_RPW; ++j) {
      const int rr = j * ATTN_WARPS + warp;
      const int p = qpos[rr];
      const bool vis = p >= 0 && key < kend && key <= p && (a.window <= 0 || key > p - a.window);
      const float x = vis ? sc[j] : -INFINITY;
      const float mn = fmaxf(m[j], warp_max(x));
      if (mn == -INFINITY) continue;  // nothing visible to this row yet (uniform over the warp)
      const float corr = exp2f(m[j] - mn);
      const float pr = vis ? exp2f(x - mn) : 0.f;
      m[j] = mn;
      l[j] = l[j] * corr + pr;
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[j][d] *= corr;
#pragma unroll 8
      for (int t = 0; t < ATTN_TILE; ++t) {
        const float pt = __shfl_sync(0xffffffffu, pr, t);
        if (DPL == 2) {
          const float2 vf = Ops<T>::pair(*reinterpret_cast<const uint32_t*>(&vs[t][lane * 2]));
          acc[j][0] = fmaf(pt, vf.x, acc[j][0]);
          acc[j][DPL - 1] = fmaf(pt, vf.y, acc[j][DPL - 1]);
        } else {
#pragma unroll
          for (int d = 0; d < DPL; d += 2) {
            const float2 vf = Ops<T>::pair(*reinterpret_cast<const uint32_t*>(&vs[t][lane * DPL + d]));
            acc[j][d] = fmaf(pt, vf.x, acc[j][d]);
            acc[j][d + 1] = fmaf(pt, vf.y, acc[j][d + 1]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int j = 0; j < ATTN_RPW; ++j) {
    const int rr = j * ATTN_WARPS + warp;
    const int r = row0 + rr;
    if (r >= rows) continue;
    const float lsum = warp_sum(l[j]);
    const int h = hkv * g + r / a.Lq, i = r % a.Lq;
    const long long orow = ((long long)b * a.Hq + h) * a.Lq + i;
    if (a.nsplit == 1) {
      const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
      T* o = reinterpret_cast<T*>(a.out) + attn_out_row(a.out_bthd, b, h, i, a.Hq, a.Lq) * D;
#pragma unroll
      for (int d = 0; d < DPL; ++d) o[lane * DPL + d] = Ops<T>::from_f(acc[j][d] * inv);
    } else {
      float* po = a.part_o + (orow * a.nsplit + s) * D;
#pragma unroll
      for (int d = 0; d < DPL; ++d) po[lane * DPL + d] = acc[j][d];
      if (lane == 0) {
        a.part_ml[(orow * a.nsplit + s) * 2] = m[j];
        a.part_ml[(orow * a.nsplit + s) * 2 + 1] = lsum;
      }
    }
  }
}

// Decode attention at short contexts, one kernel: block (hkv * rgroups + rg, b) takes the rows
// rg * R .. + R of one KV head (its g * Lq rows, head-major, as above; R >= Lq, so that a block's
// new key/value rows fit its copies; rgroups = ceil(g * Lq / R), each group's blocks make and
// write the same new rows) and every visible key, split over
// its DEC_WARPS warps by tiles of 32 (warp w takes tiles w, w + DEC_WARPS, ...), so that a
// warp's whole tile (K row of key `lane` in registers, V values of the lane's output dims for
// the 32 keys) is in flight at once instead of one tile of the block at a time. Each warp keeps
// an online softmax per row; the warps' partial results are combined through shared memory.
// Keys outside [first visible, last visible] (a sliding window's past, the unwritten cache) are
// not read. Grid: (S, Hkv * rgroups, B); block 32 * DEC_WARPS. With S > 1 (sm_90) the S blocks of a
// (KV head, batch) are one thread block cluster that can split the keys: nact of them, one per
// DEC_KPB keys, at most S, take the tiles round their warps (tile t to block t % nact); each
// combines its warps as above, then the blocks combine their partial results through
// distributed shared memory, each writing 1/S of the outputs. A longer context then runs on
// up to S SMs instead of one; a short one (nact = 1) runs on one as without a cluster.
constexpr int DEC_WARPS = 8;
// Keys a block of a cluster takes at least: a cluster of S blocks lets one block in 96 keys work,
// at most S (H200, linear_attention_bench: at 81 keys one block is 1 µs a layer faster than
// two for Llama-3.2-1B's and Qwen3-0.6B's shapes; at 401 keys 4 to 8 blocks beat one by 2.3,
// 4.7 and 16 µs a layer for Llama, Qwen3 and Gemma-3; bench/results/2026-12-06-3ae692d-chain-splits.md).
constexpr int DEC_KPB = 96;

template <int DPL> struct VVec;
template <> struct VVec<2> { using type = uint32_t; };
template <> struct VVec<4> { using type = uint2; };
template <> struct VVec<8> { using type = uint4; };

// W: et_attention_rope's write first (the block's own KV head). The first tile's keys and
// values are loaded before the new rows are made, so the two round trips overlap: a key the
// block writes is then taken from the copy it keeps in shared memory (its cache row may have
// been read before it was written), in every tile. Later tiles load through L2 (the block's
// writes are visible to it after the barrier). New rows with equal positions race in the cache
// as they do in eager PyTorch's index_copy_.
template <typename T, int D, int R, bool W>
__device__ __forceinline__ void attn_decode(const AttnArgs& a) {
  constexpr int DPL = D / 32;
  constexpr int KL = D > 128 ? 2 : 1;  // lanes per key: each holds D / KL of the key's K row
  constexpr int TILE = 32 / KL;        // keys per warp tile
  constexpr int KVEC = D / 8 / KL;     // 16-byte K vectors per lane
  // The first tile before the rows: up to four rows of D <= 128 (eight rows spill registers;
  // D = 256 measured 4 % slower on Gemma-3-1B's shape at four rows, H100), and one row at any D
  // (Gemma-3-1B +10.4 % whole-program with one row a block against +7.0 % without it, H100:
  // bench/results/2026-12-07-84cf497-attn-rows-ab.md).
  constexpr bool EARLY = (R <= 4 && D <= 128) || R == 1;
  constexpr int NW = W && EARLY ? R : 1;  // new rows kept (Lq <= R)
  using V = typename VVec<DPL>::type;
  __shared__ __align__(16) float qs[R][D];
  __shared__ __align__(16) T knew[NW][D];
  __shared__ __align__(16) T vnew[NW][D];
  __shared__ int newpos[NW];
  __shared__ float wm[DEC_WARPS][R], wl[DEC_WARPS][R];
  __shared__ float wacc[DEC_WARPS][R][D];
  __shared__ float bm[R], bl[R];  // the block's maximum and sum per row (nact > 1)
  // The cluster's key splits, this block's. Every block of a cluster makes the new rows and
  // writes them into the caches: the same values, so that each block reads its own (or an
  // identical) write after its barrier, whichever block's write lands last.
  const int S = gridDim.x, s = blockIdx.x;

  pdl_launch_dependents();
  // With W, nothing this block reads before the wait is written by the kernels before it in
  // the stream: the positions are a graph input (or made by a kernel that ends before this one
  // starts: only the library's kernels launch their dependents early), and the cache rows are
  // written only by this layer's attention (earlier steps), the new rows by this very kernel
  // (taken from its shared copy below). So the keys' range and the first tile's keys and
  // values (or, without EARLY, an L2 prefetch of them) are asked for while the kernel before
  // still runs. Without W the kernel before may have written the cache: everything waits.
  if constexpr (!W) pdl_wait();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hkv = blockIdx.y / a.rgroups, rg = blockIdx.y % a.rgroups, b = blockIdx.z;
  const int g = a.Hq / a.Hkv;
  const int row0 = rg * R;                   // the block's first row of the KV head's g * Lq
  const int rows = min(R, g * a.Lq - row0);  // >= 1 (the caller's rgroups)

  // The keys the block reads, [first visible, last visible]: every thread works them out.
  int kbeg = a.Lmax, kend = 0;
  for (int i = 0; i < a.Lq; ++i) {
    const int p = query_pos(a, i);
    kend = max(kend, p + 1);
    kbeg = min(kbeg, a.window > 0 ? max(0, p - a.window + 1) : 0);
  }
  // The cluster's blocks that take keys (the same number in every block): the others leave at
  // once when one block takes them all (no cluster barrier then), else take no keys.
  const int nact = S == 1 ? 1 : min(S, max(1, (kend - kbeg + DEC_KPB - 1) / DEC_KPB));
  if (s >= nact && nact == 1) {
    if constexpr (W) pdl_wait();
    return;
  }
  const char* kb = reinterpret_cast<const char*>(a.k) + (b * a.ksb + hkv * a.ksh) * (long long)sizeof(T);
  const char* vb = reinterpret_cast<const char*>(a.v) + (b * a.vsb + hkv * a.vsh) * (long long)sizeof(T);
  const int part = lane % KL, d0 = part * (D / KL);
  uint4 kr[KVEC];
  V vr[TILE];
  auto load_tile = [&](int base) {
    const int key = base + lane / KL;
#pragma unroll
    for (int i = 0; i < KVEC; ++i)
      kr[i] = key < kend ? ld_kv<W>(kb + (key * a.ksl + d0 + i * 8) * (long long)sizeof(T)) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
      const int kt = base + t;
      vr[t] = kt < kend ? *reinterpret_cast<const V*>(vb + (kt * a.vsl + lane * DPL) * (long long)sizeof(T))
                        : V{};
    }
  };
  // Warp w of block s takes the tiles w * nact + s, (w + DEC_WARPS) * nact + s, ...
  const int step = DEC_WARPS * TILE * nact;
  int base = s < nact ? kbeg + (warp * nact + s) * TILE : kend;
  if (EARLY && base < kend) load_tile(base);
  if constexpr (W && !EARLY) {
    // The rows of the warp's first tile into L2: this lane's part of its key's K and V rows.
    const int key = base + lane / KL;
    if (key < kend) {
      const char* kp = kb + (key * a.ksl + d0) * (long long)sizeof(T);
      const char* vp = vb + (key * a.vsl + d0) * (long long)sizeof(T);
#pragma unroll
      for (int o = 0; o < (int)(D / KL * sizeof(T)); o += 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(kp + o));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vp + o));
      }
    }
  }
  if constexpr (W) pdl_wait();

  // Everything before the keys in one step (one round trip, one barrier): warp w takes the
  // rows w, w + DEC_WARPS, ... of the block's q rows (normed and rotated as asked, scaled,
  // into qs) followed, with W, by its Lq new key/value rows (written into the caches and kept).
  const int jobs = rows + (W ? a.Lq : 0);
  for (int j = warp; j < jobs; j += DEC_WARPS) {
    float x[DPL];
    if (j < rows) {
      const int h = hkv * g + (row0 + j) / a.Lq, i = (row0 + j) % a.Lq;
      head_row<T, D>(a, q_row<T>(a, b, h, i), a.qsd, a.qnw, b, i, lane, x);
#pragma unroll
      for (int e = 0; e < DPL; ++e) qs[j][lane + 32 * e] = x[e] * a.scale_log2;
    } else if constexpr (W) {
      const int i = j - rows;
      const long long p = write_pos(a, i);
      const T* vn = reinterpret_cast<const T*>(a.vn) + b * a.vns[0] + hkv * a.vns[1] + i * a.vns[2];
      T vv[DPL];
#pragma unroll
      for (int e = 0; e < DPL; ++e) vv[e] = vn[(lane + 32 * e) * a.vns[3]];
      head_row<T, D>(a, kn_row<T>(a, b, hkv, i), a.kns[3], a.knw, b, i, lane, x);
      const bool in = p >= 0 && p < a.Lmax;  // uniform over the warp
      if (EARLY && lane == 0) newpos[i] = in ? (int)p : -1;
      T* kc = const_cast<T*>(reinterpret_cast<const T*>(a.k)) + b * a.ksb + hkv * a.ksh + p * a.ksl;
      T* vc = const_cast<T*>(reinterpret_cast<const T*>(a.v)) + b * a.vsb + hkv * a.vsh + p * a.vsl;
#pragma unroll
      for (int e = 0; e < DPL; ++e) {
        const int d = lane + 32 * e;
        const T kx = Ops<T>::from_f(x[e]);
        if constexpr (EARLY) {
          knew[i][d] = kx;
          vnew[i][d] = vv[e];
        }
        if (in) {
          kc[d] = kx;
          vc[d] = vv[e];
        }
      }
    }
  }
  for (int t = rows * D + threadIdx.x; t < R * D; t += blockDim.x) qs[t / D][t % D] = 0.f;
  int pr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) pr[r] = r < rows ? query_pos(a, (row0 + r) % a.Lq) : -1;
  __syncthreads();

  float m[R], l[R], acc[R][DPL];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[r][d] = 0.f;
  }
  for (bool first = true; base < kend; base += step, first = false) {
    const int key = base + lane / KL;
    const bool kin = key < kend;
    if (!first || !EARLY) load_tile(base);
    if constexpr (W && EARLY) {
      // The block's own new rows, from its copy (uniform branches: positions are the block's).
      for (int i = 0; i < a.Lq; ++i) {
        const int p = newpos[i];
        if (p < base || p >= base + TILE) continue;
        if (key == p) {
#pragma unroll
          for (int v = 0; v < KVEC; ++v) kr[v] = *reinterpret_cast<const uint4*>(&knew[i][d0 + v * 8]);
        }
#pragma unroll
        for (int t = 0; t < TILE; ++t)
          if (base + t == p) vr[t] = *reinterpret_cast<const V*>(&vnew[i][lane * DPL]);
      }
    }
    // Every row at once, so that the rows' chains interleave: the scores (each K vector
    // unpacked once for all rows), the rows' maxima (their shuffles side by side), the
    // probabilities, then each key's V values (unpacked once) into every row. Rows past
    // `rows` have zero q and see nothing.
    float x[R];
#pragma unroll
    for (int r = 0; r < R; ++r) x[r] = 0.f;
#pragma unroll
    for (int i = 0; i < KVEC; ++i) {
      const uint32_t words[4] = {kr[i].x, kr[i].y, kr[i].z, kr[i].w};
      const float2 k0 = Ops<T>::pair(words[0]), k1 = Ops<T>::pair(words[1]);
      const float2 k2 = Ops<T>::pair(words[2]), k3 = Ops<T>::pair(words[3]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 q0 = *reinterpret_cast<const float4*>(&qs[r][d0 + i * 8]);
        const float4 q1 = *reinterpret_cast<const float4*>(&qs[r][d0 + i * 8 + 4]);
        float sc = fmaf(q0.x, k0.x, fmaf(q0.y, k0.y, fmaf(q0.z, k1.x, fmaf(q0.w, k1.y, x[r]))));
        x[r] = fmaf(q1.x, k2.x, fmaf(q1.y, k2.y, fmaf(q1.z, k3.x, fmaf(q1.w, k3.y, sc))));
      }
    }
    float mx[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if constexpr (KL == 2) x[r] += __shfl_xor_sync(0xffffffffu, x[r], 1);
      const int p = pr[r];
      const bool vis = r < rows && kin && key <= p && (a.window <= 0 || key > p - a.window);
      x[r] = vis ? x[r] : -INFINITY;
      mx[r] = x[r];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int r = 0; r < R; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], off));
    float pv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float mn = fmaxf(m[r], mx[r]);
      // Nothing visible to this row yet: nothing changes (uniform over the warp).
      const float corr = mn == -INFINITY ? 1.f : exp2f(m[r] - mn);
      pv[r] = x[r] == -INFINITY ? 0.f : exp2f(x[r] - mn);
      m[r] = mn;
      // lane-partial (one lane per key); summed over the warp at the end
      l[r] = l[r] * corr + (part == 0 ? pv[r] : 0.f);
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[r][d] *= corr;
    }
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
      const uint32_t* vw = reinterpret_cast<const uint32_t*>(&vr[t]);
      float vf[DPL];
#pragma unroll
      for (int d = 0; d < DPL; d += 2) {
        const float2 f = Ops<T>::pair(vw[d / 2]);
        vf[d] = f.x;
        vf[d + 1] = f.y;
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float pt = __shfl_sync(0xffffffffu, pv[r], t * KL);
#pragma unroll
        for (int d = 0; d < DPL; ++d) acc[r][d] = fmaf(pt, vf[d], acc[r][d]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float ls = warp_sum(l[r]);
    if (lane == 0) {
      wm[warp][r] = m[r];
      wl[warp][r] = ls;
    }
#pragma unroll
    for (int d = 0; d < DPL; ++d) wacc[warp][r][lane * DPL + d] = acc[r][d];
  }
  __syncthreads();
  for (int t = threadIdx.x; t < R * D; t += blockDim.x) {
    const int r = t / D, d = t % D;
    if (r >= rows) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < DEC_WARPS; ++w) mx = fmaxf(mx, wm[w][r]);
    float ls = 0.f, o = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < DEC_WARPS; ++w) {
        if (wm[w][r] == -INFINITY) continue;
        const float f = exp2f(wm[w][r] - mx);
        ls = fmaf(wl[w][r], f, ls);
        o = fmaf(wacc[w][r][d], f, o);
      }
    }
    if (nact > 1) {
      // The block's partial result: qs (no longer read) takes the unnormalised outputs.
      qs[r][d] = o;
      if (d == 0) {
        bm[r] = mx;
        bl[r] = ls;
      }
      continue;
    }
    const int h = hkv * g + (row0 + r) / a.Lq, i = (row0 + r) % a.Lq;
    T* out = reinterpret_cast<T*>(a.out) + attn_out_row(a.out_bthd, b, h, i, a.Hq, a.Lq) * D;
    out[d] = Ops<T>::from_f(ls > 0.f ? o / ls : 0.f);
  }
  if (nact == 1) return;
  cluster_sync();
  // Block s writes the outputs s * blockDim.x + tid, stepping S * blockDim.x, from the partials
  // of the blocks that took keys (read from their shared memory); the second barrier keeps every block's
  // shared memory alive until all have read it.
  for (int t = s * blockDim.x + threadIdx.x; t < rows * D; t += S * blockDim.x) {
    const int r = t / D, d = t % D;
    float mx = -INFINITY;
    for (int c = 0; c < nact; ++c) mx = fmaxf(mx, ld_cluster(&bm[r], c));
    float ls = 0.f, o = 0.f;
    if (mx != -INFINITY) {
      for (int c = 0; c < nact; ++c) {
        const float mc = ld_cluster(&bm[r], c);
        if (mc == -INFINITY) continue;
        const float f = exp2f(mc - mx);
        ls = fmaf(ld_cluster(&bl[r], c), f, ls);
        o = fmaf(ld_cluster(&qs[r][d], c), f, o);
      }
    }
    const int h = hkv * g + (row0 + r) / a.Lq, i = (row0 + r) % a.Lq;
    T* out = reinterpret_cast<T*>(a.out) + attn_out_row(a.out_bthd, b, h, i, a.Hq, a.Lq) * D;
    out[d] = Ops<T>::from_f(ls > 0.f ? o / ls : 0.f);
  }
  cluster_sync();
}

// One warp per output row: out = sum_s o_s * 2^(m_s - M) / sum_s l_s * 2^(m_s - M).
// Grid: ceil(rows / 4); block 128.
template <typename T, int D>
__device__ __forceinline__ void attn_combine(const float* __restrict__ part_o,
                                             const float* __restrict__ part_ml, void* out,
                                             long long nrows, int nsplit, int hq, int lq,
                                             int bthd) {
  constexpr int DPL = D / 32;
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (row >= nrows) return;
  const float* ml = part_ml + row * nsplit * 2;
  float mx = -INFINITY;
  for (int s = lane; s < nsplit; s += 32) mx = fmaxf(mx, ml[2 * s]);
  mx = warp_max(mx);
  float acc[DPL];
#pragma unroll
  for (int d = 0; d < DPL; ++d) acc[d] = 0.f;
  float lsum = 0.f;
  if (mx != -INFINITY) {
    for (int s = 0; s < nsplit; ++s) {
      const float ms = ml[2 * s];
      if (ms == -INFINITY) continue;
      const float f = exp2f(ms - mx);
      lsum = fmaf(ml[2 * s + 1], f, lsum);
      const float* po = part_o + (row * nsplit + s) * D + lane * DPL;
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[d] = fmaf(po[d], f, acc[d]);
    }
  }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  const long long i = row % lq, h = (row / lq) % hq, b = row / ((long long)lq * hq);
  T* o = reinterpret_cast<T*>(out) + attn_out_row(bthd, b, h, i, hq, lq) * D + lane * DPL;
#pragma unroll
  for (int d = 0; d < DPL; ++d) o[d] = Ops<T>::from_f(acc[d] * inv);
}

// ------------------------------------------------------------------ fused linear (et_linear)
//
// The GEMV above with what a decoder layer puts around its linears, in one kernel:
//   y = act( rmsnorm(x) . W^T + bias ) + residual
// - norm (optional): each row of x is scaled by r = rsqrt(mean(x^2) + eps) and by the norm
//   weight g, as the companion found it in the graph: mode 1 rounds x*r to T and multiplies by
//   g in T (Llama, Qwen3: `g * (x * r).to(T)`); mode 2 multiplies by (norm_add + g) in fp32 and
//   rounds once (Gemma: `(x * r * (1 + g)).to(T)`). r is computed by every block (x is a few KB,
//   read from L2); the scaled x is formed in registers as the A fragments are loaded.
// - act (template): 0 none; 1 SiLU(gate) * up; 2 GELU-tanh(gate) * up, where W holds the gate
//   rows [0, N) then the up rows [N, 2N) and a block reads both halves for its columns. Each
//   value is rounded to T where eager PyTorch rounds it (the gate, the up, the activation).
// - residual (optional): the rounded result plus residual[m][n], rounded again.
// - PDL: the block lets the next kernel launch at once (griddepcontrol.launch_dependents), issues
//   its first batch of weight loads, and only then waits for the kernel before it
//   (griddepcontrol.wait) before reading x, the residual or writing y. The weights and the norm
//   weight must not be written by the kernel before (the companion passes program constants).
//   Without a programmatic launch both instructions return at once. Every block reaches the wait.
struct LinArgs {
  const void* x;
  long long sx;
  const void* w;
  long long sw;
  const void* bias;   // [Nw] or null
  const void* norm;   // [K] or null
  const void* res;    // [M][N] rows of stride sr, or null
  long long sr;
  void* y;            // [M][N] contiguous
  float eps;
  float norm_add;
  int M, N, K;        // N output columns (W has N rows, or 2N with act != 0)
  int norm_mode;      // 0 none, 1, 2 (above)
  // PRE kernels (et_add_rmsnorm_linear): the product's input is h = x + rmsnorm(p) first, as
  // et_add_rmsnorm computes it (x is then the residual), p rows of stride sp, pn its [K] weight
  // (mode p_mode, p_eps, p_add); the first block of each block row writes h [M][K] (contiguous).
  const void* p;
  long long sp;
  const void* pn;
  void* h;
  float p_eps, p_add;
  int p_mode;
};

template <typename T> __device__ __forceinline__ float rnd(float v) {
  return Ops<T>::to_f(Ops<T>::from_f(v));
}
template <typename T> __device__ __forceinline__ uint32_t pack2(float a, float b) {
  T lo = Ops<T>::from_f(a), hi = Ops<T>::from_f(b);
  return (uint32_t)(*reinterpret_cast<uint16_t*>(&lo)) |
         ((uint32_t)(*reinterpret_cast<uint16_t*>(&hi)) << 16);
}

// Eight elements of one x row (one 16-byte vector) times r, then the norm weight gv.
template <typename T>
__device__ __forceinline__ uint4 norm8(uint4 v, uint4 gv, float r, int mode, float add) {
  uint32_t in[4] = {v.x, v.y, v.z, v.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w}, out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = Ops<T>::pair(in[i]), g = Ops<T>::pair(gw[i]);
    if (mode == 1) {
      out[i] = pack2<T>(rnd<T>(f.x * r) * g.x, rnd<T>(f.y * r) * g.y);
    } else {
      out[i] = pack2<T>(f.x * r * (add + g.x), f.y * r * (add + g.y));
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Eight elements of h = res + rmsnorm(p): p times its row's r, then its norm weight gv (mode 1:
// rounded, times gv, rounded; mode 2: times (add + gv) in fp32, rounded), plus the residual rv,
// rounded: et_add_rmsnorm's arithmetic (add_rmsnorm_rows).
template <typename T>
__device__ __forceinline__ uint4 add_norm8(uint4 pv, uint4 gv, uint4 rv, float r, int mode, float add) {
  const uint32_t in[4] = {pv.x, pv.y, pv.z, pv.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
  const uint32_t rw[4] = {rv.x, rv.y, rv.z, rv.w};
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = Ops<T>::pair(in[i]), g = Ops<T>::pair(gw[i]), q = Ops<T>::pair(rw[i]);
    const float n0 = mode == 1 ? rnd<T>(rnd<T>(f.x * r) * g.x) : rnd<T>(f.x * r * (add + g.x));
    const float n1 = mode == 1 ? rnd<T>(rnd<T>(f.y * r) * g.y) : rnd<T>(f.y * r * (add + g.y));
    out[i] = pack2<T>(n0 + q.x, n1 + q.y);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Sum of the squares of eight elements (fp32).
template <typename T> __device__ __forceinline__ float sumsq8(uint4 v) {
  const uint32_t in[4] = {v.x, v.y, v.z, v.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = Ops<T>::pair(in[i]);
    s = fmaf(f.x, f.x, fmaf(f.y, f.y, s));
  }
  return s;
}

// Eight elements of x times the norm weight (mode 1: g; mode 2: add + g), rounded to T.
template <typename T>
__device__ __forceinline__ uint4 gmul8(uint4 v, uint4 gv, int mode, float add) {
  const uint32_t in[4] = {v.x, v.y, v.z, v.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
  uint32_t out[4];
  const float ad = mode == 1 ? 0.f : add;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = Ops<T>::pair(in[i]), g = Ops<T>::pair(gw[i]);
    out[i] = pack2<T>(f.x * (ad + g.x), f.y * (ad + g.y));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

template <int ACT> __device__ __forceinline__ float act_fn(float g) {
  if (ACT == 1) return g / (1.f + expf(-g));
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * g * (1.f + tanhf(c * (g + 0.044715f * g * g * g)));
}

// NW warps, RT output tiles of 8 columns per block (2 RT weight tiles with an act), U chunks
// of 32 k per load batch (halved with X16, which loads twice the x), X16: 16 rows of x per
// block row (else 8). The lane layout and requirements are the GEMV's (above); the plain GEMV
// entry points (et_gemv_*) are this kernel with no norm, act or residual.
template <typename T, int NW, int RT, int U0, bool X16, int ACT, bool PRE = false>
__device__ __forceinline__ void linear_mma(const LinArgs& a) {
  constexpr int MROWS = X16 ? 16 : 8;
  constexpr int RTW = ACT ? 2 * RT : RT;
  constexpr int U = X16 && U0 > 2 ? U0 / 2 : U0;
  // bf16 takes the norm late: the loop multiplies x by the norm weight (rounded to T, as the
  // MMA reads it) and sums x's squares from the same loads; the row's r scales the sums at
  // the end. No pass over x before the loop (a round trip and two barriers less on the
  // block's critical path). fp16 keeps the pass (x * g could overflow fp16 before r scales it).
  constexpr bool LATE = Ops<T>::kBf16;
  // PRE: bf16 (the late norm) and up to 8 rows (the companion's decode steps) only.
  static_assert(!PRE || (LATE && !X16), "PRE kernels are bf16 with 8-row blocks");
  __shared__ float red[NW][RTW][MROWS][8];
  __shared__ float rs[MROWS];
  __shared__ float rss[NW][MROWS];
  pdl_launch_dependents();
  const T* __restrict__ x = reinterpret_cast<const T*>(a.x);
  const T* __restrict__ w = reinterpret_cast<const T*>(a.w);
  const int M = a.M, N = a.N, K = a.K;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const long long n0 = (long long)blockIdx.x * (8 * RT);
  const int m0 = blockIdx.y * MROWS;
  const int mcount = min(MROWS, M - m0);
  const int chunks = (int)(((long long)K + 31) >> 5);
  const int per = (chunks + NW - 1) / NW;
  const int jb = min(chunks, warp * per), je = min(chunks, jb + per);
  const int jlim = min(je, (int)(((long long)K - c * 8 + 31) >> 5));

  const char* wp[RTW];
  bool wok[RTW];
#pragma unroll
  for (int t = 0; t < RTW; ++t) {
    const long long col = n0 + 8 * (t % RT) + g;
    wok[t] = col < N;
    const long long row = (t >= RT ? (long long)N : 0) + (wok[t] ? col : 0);
    wp[t] = reinterpret_cast<const char*>(w + row * a.sw) + c * 16;
  }
  uint4 wv[U][RTW];
  auto load_w = [&](int j) {
    const int nvalid = jlim - j;
    const long long off = (long long)j * 64;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int t = 0; t < RTW; ++t) wv[u][t] = ld_w(wp[t] + off + u * 64, u < nvalid && wok[t]);
  };
  // The weights do not depend on the kernel before: their first batch is in flight first.
  if (jb < je) load_w(jb);
  pdl_wait();
  // The epilogue's operands (bias, residual) in registers before the loop, in the same round
  // trip as the first x loads, so that the block's end makes none after its reduction (H100,
  // whole programs with graphs: Llama-3.2-1B +2.1 %, Qwen3-0.6B +1.4 %, Gemma-3-1B, whose
  // linears add no residual, -0.5 %: bench/results/2026-12-07-84cf497-attn-rows-ab.md). Thread
  // i takes the outputs i, i + 32 * NW, ... of the block's RT * MROWS * 8 (the loop at the end).
  constexpr int EPI = (RT * MROWS * 8 + 32 * NW - 1) / (32 * NW);
  const T* bias = reinterpret_cast<const T*>(a.bias);
  const T* res = reinterpret_cast<const T*>(a.res);
  float bv0[EPI], bv1[EPI], rv[EPI];
#pragma unroll
  for (int e = 0; e < EPI; ++e) {
    const int i = threadIdx.x + e * 32 * NW;
    const int t = i / (MROWS * 8), m = (i >> 3) % MROWS, r = i & 7;
    const long long n = n0 + 8 * t + r;
    const bool in = i < RT * MROWS * 8 && m < mcount && n < N;
    bv0[e] = in && bias ? Ops<T>::to_f(bias[n]) : 0.f;
    bv1[e] = ACT != 0 && in && bias ? Ops<T>::to_f(bias[N + n]) : 0.f;
    rv[e] = in && res ? Ops<T>::to_f(res[(long long)(m0 + m) * a.sr + n]) : 0.f;
  }

  const int mode = a.norm_mode;
  if (mode != 0 && !LATE) {
    // One row at a time (rows past M cost nothing; few registers, as the first batch of
    // weights is held in registers meanwhile): every thread of the block takes 8 k per load,
    // two loads in flight, then the block sums the row's squares through shared memory.
#pragma unroll 1
    for (int m = 0; m < mcount; ++m) {
      const T* xr = x + (long long)(m0 + m) * a.sx;
      float part = 0.f;
      for (int k = threadIdx.x * 8; k < K; k += 2 * 32 * NW * 8) {
        const int k2 = k + 32 * NW * 8;
        const uint4 v0 = ld_x(xr + k, true), v1 = ld_x(xr + (k2 < K ? k2 : k), k2 < K);
        const uint32_t ws[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float2 f = Ops<T>::pair(ws[i]);
          part = fmaf(f.x, f.x, fmaf(f.y, f.y, part));
        }
      }
      const float sum = warp_sum(part);
      if (lane == 0) red[warp][0][m][0] = sum;
    }
    __syncthreads();
    if (threadIdx.x < mcount) {
      float s = 0.f;
#pragma unroll
      for (int q = 0; q < NW; ++q) s += red[q][0][threadIdx.x][0];
      rs[threadIdx.x] = rsqrtf(s / (float)K + a.eps);
    }
    __syncthreads();
  }
  if constexpr (PRE) {
    // r of each row of p, as the fp16 pass above does for x (the sum of h's squares is then
    // taken late, from the h the loop forms).
    const T* pr = reinterpret_cast<const T*>(a.p);
#pragma unroll 1
    for (int m = 0; m < mcount; ++m) {
      const T* xr = pr + (long long)(m0 + m) * a.sp;
      float part = 0.f;
      for (int k = threadIdx.x * 8; k < K; k += 32 * NW * 8) part += sumsq8<T>(ld_x(xr + k, true));
      const float sum = warp_sum(part);
      if (lane == 0) red[warp][0][m][0] = sum;
    }
    __syncthreads();
    if (threadIdx.x < mcount) {
      float q = 0.f;
#pragma unroll
      for (int w = 0; w < NW; ++w) q += red[w][0][threadIdx.x][0];
      rs[threadIdx.x] = rsqrtf(q / (float)K + a.p_eps);
    }
    __syncthreads();
  }
  const bool aok = g < mcount, bok = X16 && g + 8 < mcount;
  const float ra = mode != 0 && !LATE && aok ? rs[g] : 0.f;
  const float rb = mode != 0 && !LATE && bok ? rs[g + 8] : 0.f;
  float ssa = 0.f, ssb = 0.f;  // LATE: this lane's sums of x's squares, rows g and g + 8
  const char* ap = reinterpret_cast<const char*>(x + (long long)(m0 + (aok ? g : 0)) * a.sx) + c * 16;
  const char* bp = reinterpret_cast<const char*>(x + (long long)(m0 + (bok ? g + 8 : 0)) * a.sx) + c * 16;
  const char* gp = reinterpret_cast<const char*>(a.norm) + c * 16;
  // PRE: this lane's row of p, the p norm weight, and (first block of the row) of h.
  const char* ppp = PRE ? reinterpret_cast<const char*>(a.p) +
                              (long long)(m0 + (aok ? g : 0)) * a.sp * (long long)sizeof(T) + c * 16
                        : nullptr;
  const char* pnp = PRE ? reinterpret_cast<const char*>(a.pn) + c * 16 : nullptr;
  char* hp = PRE ? reinterpret_cast<char*>(a.h) + (long long)(m0 + (aok ? g : 0)) * K * (long long)sizeof(T) + c * 16
                 : nullptr;
  const float rpa = PRE && aok ? rs[g] : 0.f;
  const bool hwrite = PRE && blockIdx.x == 0 && aok;

  constexpr int NACC = RTW == 1 ? 2 : 1;
  float acc[NACC][RTW][4];
#pragma unroll
  for (int e = 0; e < NACC; ++e)
#pragma unroll
    for (int t = 0; t < RTW; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[e][t][i] = 0.f;

  const uint32_t never = (uint32_t)(K >> 31);
  for (int j = jb; j < je; j += U) {
    if (j != jb) load_w(j);
    const int nvalid = jlim - j;
    const long long off = (long long)j * 64;
    uint4 av[U], bv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      av[u] = ld_x(ap + off + u * 64, u < nvalid && aok);
      bv[u] = X16 ? ld_x(bp + off + u * 64, u < nvalid && bok) : make_uint4(0, 0, 0, 0);
    }
    if constexpr (PRE) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const bool in = u < nvalid && aok;
        const uint4 pv = ld_x(ppp + off + u * 64, in), gv = ld_x(pnp + off + u * 64, in);
        av[u] = in ? add_norm8<T>(pv, gv, av[u], rpa, a.p_mode, a.p_add) : make_uint4(0, 0, 0, 0);
        if (hwrite && u < nvalid) *reinterpret_cast<uint4*>(hp + off + u * 64) = av[u];
      }
    }
    if (mode != 0) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint4 gv = ld_x(gp + off + u * 64, u < nvalid && (aok || bok));
        if constexpr (LATE) {
          ssa += sumsq8<T>(av[u]);
          av[u] = gmul8<T>(av[u], gv, mode, a.norm_add);
          if (X16) {
            ssb += sumsq8<T>(bv[u]);
            bv[u] = gmul8<T>(bv[u], gv, mode, a.norm_add);
          }
        } else {
          av[u] = norm8<T>(av[u], gv, ra, mode, a.norm_add);
          if (X16) bv[u] = norm8<T>(bv[u], gv, rb, mode, a.norm_add);
        }
      }
    }
    uint32_t dep = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int t = 0; t < RTW; ++t) dep |= wv[u][t].x;
      dep |= av[u].x | bv[u].x;
    }
    acc[0][0][0] += __uint_as_float(dep & never);
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int t = 0; t < RTW; ++t) {
        float(&d)[4] = acc[u % NACC][t];
        Mma<T>::run(d, av[u].x, bv[u].x, av[u].y, bv[u].y, wv[u][t].x, wv[u][t].y);
        Mma<T>::run(d, av[u].z, bv[u].z, av[u].w, bv[u].w, wv[u][t].z, wv[u][t].w);
      }
  }
#pragma unroll
  for (int e = 1; e < NACC; ++e)
#pragma unroll
    for (int t = 0; t < RTW; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[0][t][i] += acc[e][t][i];
  if (LATE && mode != 0) {
    // The four lanes of a row hold different k: sum them, then one lane per row writes.
    ssa += __shfl_xor_sync(0xffffffffu, ssa, 1);
    ssa += __shfl_xor_sync(0xffffffffu, ssa, 2);
    ssb += __shfl_xor_sync(0xffffffffu, ssb, 1);
    ssb += __shfl_xor_sync(0xffffffffu, ssb, 2);
    if (c == 0) {
      rss[warp][g] = ssa;
      if constexpr (X16) rss[warp][g + 8] = ssb;
    }
  }
#pragma unroll
  for (int t = 0; t < RTW; ++t) {
    red[warp][t][g][2 * c] = acc[0][t][0];
    red[warp][t][g][2 * c + 1] = acc[0][t][1];
    if constexpr (X16) {
      red[warp][t][g + 8][2 * c] = acc[0][t][2];
      red[warp][t][g + 8][2 * c + 1] = acc[0][t][3];
    }
  }
  __syncthreads();
  T* y = reinterpret_cast<T*>(a.y);
#pragma unroll
  for (int e = 0; e < EPI; ++e) {
    const int i = threadIdx.x + e * 32 * NW;
    if (i >= RT * MROWS * 8) break;
    const int t = i / (MROWS * 8), m = (i >> 3) % MROWS, r = i & 7;
    const long long n = n0 + 8 * t + r;
    if (m < mcount && n < N) {
      float s = 0.f;
#pragma unroll
      for (int q = 0; q < NW; ++q) s += red[q][t][m][r];
      float rm = 1.f;
      if (LATE && mode != 0) {
        float q2 = 0.f;
#pragma unroll
        for (int q = 0; q < NW; ++q) q2 += rss[q][m];
        rm = rsqrtf(q2 / (float)K + a.eps);
      }
      s *= rm;
      if (bias) s += bv0[e];
      if constexpr (ACT != 0) {
        float u = 0.f;
#pragma unroll
        for (int q = 0; q < NW; ++q) u += red[q][RT + t][m][r];
        u *= rm;
        if (bias) u += bv1[e];
        s = rnd<T>(act_fn<ACT>(rnd<T>(s))) * rnd<T>(u);
      }
      if (res) s = rnd<T>(s) + rv[e];
      y[(long long)(m0 + m) * N + n] = Ops<T>::from_f(s);
    }
  }
}

// The sum of every thread's s over a block of at most 8 warps, through part[8] in shared memory;
// every thread gets it. One barrier: call it once per part.
__device__ __forceinline__ float block_sum(float s, float* part) {
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  float tot = 0.f;
  for (int i = 0; i < (int)(blockDim.x >> 5); ++i) tot += part[i];
  return tot;
}

// The pieces of et_linear for rows the GEMV does not take (prefill): the norm alone, then the
// act and residual over a finished product. One block of 256 threads per row.
template <typename T>
__device__ __forceinline__ void rmsnorm_rows(const LinArgs& a) {
  __shared__ float part[8];
  pdl_wait();
  const T* x = reinterpret_cast<const T*>(a.x) + (long long)blockIdx.x * a.sx;
  const T* g = reinterpret_cast<const T*>(a.norm);
  T* y = reinterpret_cast<T*>(a.y) + (long long)blockIdx.x * a.K;
  float s = 0.f;
  for (int k = threadIdx.x; k < a.K; k += blockDim.x) {
    const float v = Ops<T>::to_f(x[k]);
    s = fmaf(v, v, s);
  }
  const float r = rsqrtf(block_sum(s, part) / (float)a.K + a.eps);
  for (int k = threadIdx.x; k < a.K; k += blockDim.x) {
    const float v = Ops<T>::to_f(x[k]), gk = Ops<T>::to_f(g[k]);
    y[k] = a.norm_mode == 1 ? Ops<T>::from_f(rnd<T>(v * r) * gk)
                            : Ops<T>::from_f(v * r * (a.norm_add + gk));
  }
}

// et_add_rmsnorm: y = residual + rmsnorm(x), row by row, the norm rounded to T before the add
// (as `residual + norm(x)` rounds in eager PyTorch: Gemma's and OLMo-2's norms after the
// attention and the MLP). a.x rows of stride sx, a.res rows of stride sr, a.norm the [K]
// weight, y [M][K] contiguous; a.K columns. One block of 256 threads per row. Rows of K % 8 == 0
// and at most 256 * 8 * ADD_NORM_VPT elements, 16-byte aligned, keep their x in registers
// between the two passes; others take a plain loop. PDL: the weight is loaded before the wait.
constexpr int ADD_NORM_VPT = 4;
template <typename T>
__device__ __forceinline__ void add_rmsnorm_rows(const LinArgs& a) {
  __shared__ float part[8];
  pdl_launch_dependents();
  const int K = a.K;
  const T* x = reinterpret_cast<const T*>(a.x) + (long long)blockIdx.x * a.sx;
  const T* res = reinterpret_cast<const T*>(a.res) + (long long)blockIdx.x * a.sr;
  const T* g = reinterpret_cast<const T*>(a.norm);
  T* y = reinterpret_cast<T*>(a.y) + (long long)blockIdx.x * K;
  const bool vec = K % 8 == 0 && K <= 256 * 8 * ADD_NORM_VPT &&
                   ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(res) |
                     reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  const int mode = a.norm_mode;
  const float add = mode == 1 ? 0.f : a.norm_add;
  auto finish = [&](float v, float r, float gk, float rk) {
    const float n = mode == 1 ? rnd<T>(rnd<T>(v * r) * gk) : rnd<T>(v * r * (add + gk));
    return Ops<T>::from_f(n + rk);
  };
  if (vec) {
    uint4 gv[ADD_NORM_VPT], xv[ADD_NORM_VPT], rv[ADD_NORM_VPT];
#pragma unroll
    for (int i = 0; i < ADD_NORM_VPT; ++i) {
      const int k = (threadIdx.x + i * blockDim.x) * 8;
      gv[i] = k < K ? *reinterpret_cast<const uint4*>(g + k) : make_uint4(0, 0, 0, 0);
    }
    pdl_wait();
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ADD_NORM_VPT; ++i) {
      const int k = (threadIdx.x + i * blockDim.x) * 8;
      xv[i] = k < K ? *reinterpret_cast<const uint4*>(x + k) : make_uint4(0, 0, 0, 0);
      rv[i] = k < K ? *reinterpret_cast<const uint4*>(res + k) : make_uint4(0, 0, 0, 0);
      s += sumsq8<T>(xv[i]);
    }
    const float r = rsqrtf(block_sum(s, part) / (float)K + a.eps);
#pragma unroll
    for (int i = 0; i < ADD_NORM_VPT; ++i) {
      const int k = (threadIdx.x + i * blockDim.x) * 8;
      if (k >= K) continue;
      const uint32_t xw[4] = {xv[i].x, xv[i].y, xv[i].z, xv[i].w};
      const uint32_t gw[4] = {gv[i].x, gv[i].y, gv[i].z, gv[i].w};
      const uint32_t rw[4] = {rv[i].x, rv[i].y, rv[i].z, rv[i].w};
      uint32_t out[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = Ops<T>::pair(xw[j]), gg = Ops<T>::pair(gw[j]), rr = Ops<T>::pair(rw[j]);
        T lo = finish(f.x, r, gg.x, rr.x), hi = finish(f.y, r, gg.y, rr.y);
        out[j] = (uint32_t)(*reinterpret_cast<uint16_t*>(&lo)) |
                 ((uint32_t)(*reinterpret_cast<uint16_t*>(&hi)) << 16);
      }
      *reinterpret_cast<uint4*>(y + k) = make_uint4(out[0], out[1], out[2], out[3]);
    }
    return;
  }
  pdl_wait();
  float s = 0.f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const float v = Ops<T>::to_f(x[k]);
    s = fmaf(v, v, s);
  }
  const float r = rsqrtf(block_sum(s, part) / (float)K + a.eps);
  for (int k = threadIdx.x; k < K; k += blockDim.x)
    y[k] = finish(Ops<T>::to_f(x[k]), r, Ops<T>::to_f(g[k]), Ops<T>::to_f(res[k]));
}

// a.x: the product [M][Nw] (rounded, bias included), contiguous; writes y [M][N].
template <typename T, int ACT>
__device__ __forceinline__ void linear_epilogue(const LinArgs& a) {
  pdl_wait();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)a.M * a.N) return;
  const long long m = i / a.N, n = i % a.N;
  const T* p = reinterpret_cast<const T*>(a.x);
  const int nw = ACT ? 2 * a.N : a.N;
  float s = Ops<T>::to_f(p[m * nw + n]);
  if constexpr (ACT != 0) s = rnd<T>(act_fn<ACT>(s)) * Ops<T>::to_f(p[m * nw + a.N + n]);
  const T* res = reinterpret_cast<const T*>(a.res);
  if (res) s = rnd<T>(s) + Ops<T>::to_f(res[m * a.sr + n]);
  reinterpret_cast<T*>(a.y)[m * a.N + n] = Ops<T>::from_f(s);
}

}  // namespace et_decode
using namespace et_decode;

// ------------------------------------------------------------------ entry points

// Tensor-core GEMV: et_gemv_<dtype>_v<variant>_m<8|16> (variant: NW warps, RT tiles of 8 rows,
// U chunks per batch; src/kernels/gemv.rs names them and picks one).
#define GEMV_MMA(NAME, T, NW, RT, U, X16, MINB)                                                  \
  extern "C" __global__ void __launch_bounds__(32 * NW, MINB)                                    \
      NAME(const T* x, long long sx, const T* w, long long sw, const T* bias, T* y, int M, int N, \
           int K) {                                                                             \
    LinArgs a{x, sx, w, sw, bias, nullptr, nullptr, 0, y, 0.f, 0.f, M, N, K, 0};                \
    linear_mma<T, NW, RT, U, X16, 0>(a);                                                        \
  }
#define GEMV_VARIANTS(DT, T)                                                                    \
  GEMV_MMA(et_gemv_##DT##_v0_m8, T, 8, 1, 8, false, 2)                                          \
  GEMV_MMA(et_gemv_##DT##_v0_m16, T, 8, 1, 8, true, 2)                                          \
  GEMV_MMA(et_gemv_##DT##_v1_m8, T, 8, 2, 4, false, 3)                                          \
  GEMV_MMA(et_gemv_##DT##_v1_m16, T, 8, 2, 4, true, 3)                                          \
  GEMV_MMA(et_gemv_##DT##_v2_m8, T, 8, 4, 4, false, 2)                                          \
  GEMV_MMA(et_gemv_##DT##_v2_m16, T, 8, 4, 4, true, 2)

GEMV_VARIANTS(bf16, __nv_bfloat16)
GEMV_VARIANTS(f16, __half)

#define GEMV_GENERIC(NAME, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(256)                                             \
      NAME(const T* x, long long sxm, long long sxk, const T* w, long long swn, long long swk,   \
           const T* bias, T* y, int M, int N, int K) {                                          \
    gemv_generic<T>(x, sxm, sxk, w, swn, swk, bias, y, M, N, K);                                \
  }

GEMV_GENERIC(et_gemv_generic_bf16, __nv_bfloat16)
GEMV_GENERIC(et_gemv_generic_f16, __half)

#define ATTN(NAME, COMBINE, T, D)                                                               \
  extern "C" __global__ void __launch_bounds__(32 * ATTN_WARPS) NAME(AttnArgs a) {              \
    attn_split<T, D>(a);                                                                        \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(128)                                             \
      COMBINE(const float* part_o, const float* part_ml, void* out, long long nrows, int nsplit, \
              int hq, int lq, int bthd) {                                                       \
    attn_combine<T, D>(part_o, part_ml, out, nrows, nsplit, hq, lq, bthd);                      \
  }

// Short-context decode attention: et_attn_dec_<dtype>_d<D>_r<R> (at most R rows per KV head).
// et_attn_decw_...: the same with et_attention_rope's cache write first.
// 256 threads with as many registers as they need (ptxas, sm_90: 123 to 219). Capped at 128
// (__launch_bounds__(256, 2), so that a block fits beside one block of the linear before it), the
// d128 kernels spill and the layers with attention got slower (H100 linear_bench: Qwen3-0.6B
// 20.80 -> 24.18 µs a layer, Llama 49.24 -> 50.35; bench/results/2026-12-06-34180dc-chain-attention.md).
#define ATTN_DEC(NAME, T, D, R)                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * DEC_WARPS) et_attn_dec_##NAME(AttnArgs a) { \
    attn_decode<T, D, R, false>(a);                                                             \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(32 * DEC_WARPS) et_attn_decw_##NAME(AttnArgs a) {\
    attn_decode<T, D, R, true>(a);                                                              \
  }
ATTN_DEC(bf16_d64_r2, __nv_bfloat16, 64, 2)
ATTN_DEC(bf16_d128_r2, __nv_bfloat16, 128, 2)
ATTN_DEC(f16_d64_r2, __half, 64, 2)
ATTN_DEC(f16_d128_r2, __half, 128, 2)
ATTN_DEC(bf16_d64_r4, __nv_bfloat16, 64, 4)
ATTN_DEC(bf16_d64_r8, __nv_bfloat16, 64, 8)
ATTN_DEC(bf16_d128_r4, __nv_bfloat16, 128, 4)
ATTN_DEC(bf16_d128_r8, __nv_bfloat16, 128, 8)
ATTN_DEC(f16_d64_r4, __half, 64, 4)
ATTN_DEC(f16_d64_r8, __half, 64, 8)
ATTN_DEC(f16_d128_r4, __half, 128, 4)
ATTN_DEC(f16_d128_r8, __half, 128, 8)
ATTN_DEC(bf16_d256_r4, __nv_bfloat16, 256, 4)
ATTN_DEC(f16_d256_r4, __half, 256, 4)
// One row a block (row groups, bf16 only until measured: each kernel pair is about 60 KB of the
// library): a KV head's rows over several blocks, each with less work on its critical path.
ATTN_DEC(bf16_d64_r1, __nv_bfloat16, 64, 1)
ATTN_DEC(bf16_d128_r1, __nv_bfloat16, 128, 1)
ATTN_DEC(bf16_d256_r1, __nv_bfloat16, 256, 1)

// et_kv_write_<dtype>_d<D>: et_attention_rope's cache write before the split kernel.
#define KV_WRITE(DT, T, D)                                                                      \
  extern "C" __global__ void __launch_bounds__(256) et_kv_write_##DT##_d##D(AttnArgs a) {       \
    kv_write<T, D>(a);                                                                          \
  }
KV_WRITE(bf16, __nv_bfloat16, 64)
KV_WRITE(bf16, __nv_bfloat16, 128)
KV_WRITE(bf16, __nv_bfloat16, 256)
KV_WRITE(f16, __half, 64)
KV_WRITE(f16, __half, 128)
KV_WRITE(f16, __half, 256)

ATTN(et_attn_bf16_d64, et_attn_combine_bf16_d64, __nv_bfloat16, 64)
ATTN(et_attn_bf16_d128, et_attn_combine_bf16_d128, __nv_bfloat16, 128)
ATTN(et_attn_f16_d64, et_attn_combine_f16_d64, __half, 64)
ATTN(et_attn_f16_d128, et_attn_combine_f16_d128, __half, 128)
ATTN(et_attn_bf16_d256, et_attn_combine_bf16_d256, __nv_bfloat16, 256)
ATTN(et_attn_f16_d256, et_attn_combine_f16_d256, __half, 256)

// Fused linear: et_lin_<dtype>_v<variant>_m<8|16>_a<act> (src/kernels/linear.rs names and picks them).
#define LIN(NAME, T, NW, RT, U, X16, ACT, MINB)                                                 \
  extern "C" __global__ void __launch_bounds__(32 * NW, MINB) NAME(LinArgs a) {               \
    linear_mma<T, NW, RT, U, X16, ACT>(a);                                                      \
  }
#define LIN_ACT(DT, T, ACT)                                                                     \
  LIN(et_lin_##DT##_v0_m8_a##ACT, T, 8, 1, 8, false, ACT, 2)                                    \
  LIN(et_lin_##DT##_v0_m16_a##ACT, T, 8, 1, 8, true, ACT, 2)                                    \
  LIN(et_lin_##DT##_v1_m8_a##ACT, T, 8, 2, 4, false, ACT, 2)                                    \
  LIN(et_lin_##DT##_v1_m16_a##ACT, T, 8, 2, 4, true, ACT, 2)                                    \
  LIN(et_lin_##DT##_v2_m8_a##ACT, T, 8, 4, 4, false, ACT, 1)                                    \
  LIN(et_lin_##DT##_v2_m16_a##ACT, T, 8, 4, 4, true, ACT, 1)
#define LIN_DT(DT, T)                                                                           \
  LIN_ACT(DT, T, 0)                                                                             \
  LIN_ACT(DT, T, 1)                                                                             \
  LIN_ACT(DT, T, 2)                                                                             \
  extern "C" __global__ void __launch_bounds__(256) et_lin_norm_##DT(LinArgs a) {              \
    rmsnorm_rows<T>(a);                                                                         \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(256) et_add_norm_##DT(LinArgs a) {             \
    add_rmsnorm_rows<T>(a);                                                                     \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(256) et_lin_epi_##DT##_a0(LinArgs a) {          \
    linear_epilogue<T, 0>(a);                                                                   \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(256) et_lin_epi_##DT##_a1(LinArgs a) {          \
    linear_epilogue<T, 1>(a);                                                                   \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(256) et_lin_epi_##DT##_a2(LinArgs a) {          \
    linear_epilogue<T, 2>(a);                                                                   \
  }

LIN_DT(bf16, __nv_bfloat16)
LIN_DT(f16, __half)

// et_add_rmsnorm followed by et_linear, in one kernel: et_lin_bf16_v<variant>_m8_a<act>_pre. Half the
// chunks a load batch of the plain kernels (U 4/2/2): with 8/4/4 ptxas spilled 112-164 bytes in the
// v0 ones, and Gemma-3-1B with ET_CUDA_FUSED_ADD_NORM=1 ran 10.8 % slower than the two kernels,
// 6.4 % with these (H100, bench/results/2026-12-07-84cf497-attn-rows-ab.md): still off by default.
#define LIN_PRE(NAME, NW, RT, U, ACT, MINB)                                                     \
  extern "C" __global__ void __launch_bounds__(32 * NW, MINB) NAME(LinArgs a) {               \
    linear_mma<__nv_bfloat16, NW, RT, U, false, ACT, true>(a);                                  \
  }
#define LIN_PRE_ACT(ACT)                                                                        \
  LIN_PRE(et_lin_bf16_v0_m8_a##ACT##_pre, 8, 1, 4, ACT, 2)                                      \
  LIN_PRE(et_lin_bf16_v1_m8_a##ACT##_pre, 8, 2, 2, ACT, 2)                                      \
  LIN_PRE(et_lin_bf16_v2_m8_a##ACT##_pre, 8, 4, 2, ACT, 1)
LIN_PRE_ACT(0)
LIN_PRE_ACT(1)
LIN_PRE_ACT(2)
