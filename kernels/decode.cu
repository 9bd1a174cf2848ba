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
  static __device__ __forceinline__ float2 pair(uint32_t u) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&u);
    return __bfloat1622float2(h);
  }
  static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
};

template <> struct Ops<__half> {
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

// 16-byte read-only load that may stay in L1 (activations, reused by every row).
__device__ __forceinline__ uint4 ld_cached(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// The 8 elements of a 16-byte vector of T, as fp32.
template <typename T>
__device__ __forceinline__ void unpack8(uint4 a, float (&f)[8]) {
  const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = Ops<T>::pair(w[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
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

// ------------------------------------------------------------------ GEMV

constexpr int GEMV_WARPS = 8;   // warps per block; they split K
constexpr int GEMV_RB = 4;      // rows of W per block (every warp covers all of them)
constexpr int GEMV_U = 2;       // 256-wide k chunks per warp in flight
constexpr int GEMV_CHUNK = 256; // k per chunk: 32 lanes x 8 elements (16 bytes)

// Fast path. Requirements (checked by the caller): K % 8 == 0; x, W (and y)
// 16-byte aligned; row strides sx, sw multiples of 8 elements; unit stride
// along K. Grid: (ceil(N / RB), ceil(M / MT)); block 32 * GEMV_WARPS.
// Block (bx, by) computes y[by*MT .. +MT][bx*RB .. +RB]. Warp w takes the
// k chunks w, w + WARPS, ..., GEMV_U of them at a time, each lane one
// 16-byte vector per row and chunk; partial sums are reduced over lanes by
// shuffles and over warps through shared memory.
template <typename T, int MT>
__device__ __forceinline__ void gemv_fast(const T* __restrict__ x, long long sx,
                                          const T* __restrict__ w, long long sw,
                                          const T* __restrict__ bias, T* __restrict__ y,
                                          int M, int N, int K) {
  __shared__ float red[GEMV_WARPS][MT * GEMV_RB];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * GEMV_RB;
  const int m0 = blockIdx.y * MT;
  const int mcount = min(MT, M - m0);
  const int nchunks = (K + GEMV_CHUNK - 1) / GEMV_CHUNK;

  float acc[MT][GEMV_RB];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < GEMV_RB; ++r) acc[m][r] = 0.f;

  const T* wrow[GEMV_RB];
  bool rowok[GEMV_RB];
#pragma unroll
  for (int r = 0; r < GEMV_RB; ++r) {
    rowok[r] = n0 + r < N;
    wrow[r] = w + (long long)(rowok[r] ? n0 + r : n0) * sw;
  }
  const T* xbase = x + (long long)m0 * sx;

  for (int c = warp; c < nchunks; c += GEMV_WARPS * GEMV_U) {
    uint4 wv[GEMV_U][GEMV_RB];
    int kk[GEMV_U];
    bool ok[GEMV_U];
#pragma unroll
    for (int u = 0; u < GEMV_U; ++u) {
      kk[u] = (c + u * GEMV_WARPS) * GEMV_CHUNK + lane * 8;
      ok[u] = (c + u * GEMV_WARPS) < nchunks && kk[u] < K;
#pragma unroll
      for (int r = 0; r < GEMV_RB; ++r)
        wv[u][r] = (ok[u] && rowok[r]) ? ld_stream(wrow[r] + kk[u]) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < GEMV_U; ++u) {
      if (!ok[u]) continue;
      // Each W vector is converted to fp32 once and reused for every row of x,
      // each x vector once and reused for every row of W.
      float wf[GEMV_RB][8];
#pragma unroll
      for (int r = 0; r < GEMV_RB; ++r) unpack8<T>(wv[u][r], wf[r]);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < mcount) {
          float xf[8];
          unpack8<T>(ld_cached(xbase + (long long)m * sx + kk[u]), xf);
#pragma unroll
          for (int r = 0; r < GEMV_RB; ++r)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[m][r] = fmaf(wf[r][e], xf[e], acc[m][r]);
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < GEMV_RB; ++r) {
      float s = warp_sum(acc[m][r]);
      if (lane == 0) red[warp][m * GEMV_RB + r] = s;
    }
  __syncthreads();
  for (int t = threadIdx.x; t < MT * GEMV_RB; t += blockDim.x) {
    const int m = t / GEMV_RB, r = t % GEMV_RB;
    if (m < mcount && n0 + r < N) {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < GEMV_WARPS; ++i) s += red[i][t];
      if (bias) s += Ops<T>::to_f(bias[n0 + r]);
      y[(long long)(m0 + m) * N + n0 + r] = Ops<T>::from_f(s);
    }
  }
}

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
};

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
  __shared__ float qs[ATTN_ROWS][D];
  __shared__ __align__(16) T ks[ATTN_TILE][KPAD];
  __shared__ __align__(16) T vs[ATTN_TILE][D];
  __shared__ int qpos[ATTN_ROWS];
  __shared__ int maxpos;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int s = blockIdx.x;
  const int hkv = blockIdx.y / a.rgroups, rg = blockIdx.y % a.rgroups;
  const int b = blockIdx.z;
  const int g = a.Hq / a.Hkv;
  const int rows = g * a.Lq;
  const int row0 = rg * ATTN_ROWS;

  if (threadIdx.x == 0) maxpos = -1;
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
    if (r < rows) {
      const int h = hkv * g + r / a.Lq, i = r % a.Lq;
      const T* q = reinterpret_cast<const T*>(a.q);
      val = Ops<T>::to_f(q[b * a.qsb + h * a.qsh + i * a.qsl + d * a.qsd]) * a.scale_log2;
    }
    qs[rr][d] = val;
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
          sc[j] = fmaf(qs[rr][vec * 8 + 2 * h2], kf.x, sc[j]);
          sc[j] = fmaf(qs[rr][vec * 8 + 2 * h2 + 1], kf.y, sc[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < ATTN_RPW; ++j) {
      const int rr = j * ATTN_WARPS + warp;
      const int p = qpos[rr];
      const bool vis = p >= 0 && key < kend && key <= p;
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
      T* o = reinterpret_cast<T*>(a.out) + orow * D;
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

// One warp per output row: out = sum_s o_s * 2^(m_s - M) / sum_s l_s * 2^(m_s - M).
// Grid: ceil(rows / 4); block 128.
template <typename T, int D>
__device__ __forceinline__ void attn_combine(const float* __restrict__ part_o,
                                             const float* __restrict__ part_ml, void* out,
                                             long long nrows, int nsplit) {
  constexpr int DPL = D / 32;
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
  T* o = reinterpret_cast<T*>(out) + row * D + lane * DPL;
#pragma unroll
  for (int d = 0; d < DPL; ++d) o[d] = Ops<T>::from_f(acc[d] * inv);
}

}  // namespace et_decode
using namespace et_decode;

// ------------------------------------------------------------------ entry points

#define GEMV_FAST(NAME, T, MT)                                                                  \
  extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                 \
      NAME(const T* x, long long sx, const T* w, long long sw, const T* bias, T* y, int M, int N, \
           int K) {                                                                             \
    gemv_fast<T, MT>(x, sx, w, sw, bias, y, M, N, K);                                           \
  }

GEMV_FAST(et_gemv_bf16_m1, __nv_bfloat16, 1)
GEMV_FAST(et_gemv_bf16_m2, __nv_bfloat16, 2)
GEMV_FAST(et_gemv_bf16_m4, __nv_bfloat16, 4)
GEMV_FAST(et_gemv_bf16_m8, __nv_bfloat16, 8)
GEMV_FAST(et_gemv_bf16_m16, __nv_bfloat16, 16)
GEMV_FAST(et_gemv_f16_m1, __half, 1)
GEMV_FAST(et_gemv_f16_m2, __half, 2)
GEMV_FAST(et_gemv_f16_m4, __half, 4)
GEMV_FAST(et_gemv_f16_m8, __half, 8)
GEMV_FAST(et_gemv_f16_m16, __half, 16)

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
      COMBINE(const float* part_o, const float* part_ml, void* out, long long nrows, int nsplit) { \
    attn_combine<T, D>(part_o, part_ml, out, nrows, nsplit);                                    \
  }

ATTN(et_attn_bf16_d64, et_attn_combine_bf16_d64, __nv_bfloat16, 64)
ATTN(et_attn_bf16_d128, et_attn_combine_bf16_d128, __nv_bfloat16, 128)
ATTN(et_attn_f16_d64, et_attn_combine_f16_d64, __half, 64)
ATTN(et_attn_f16_d128, et_attn_combine_f16_d128, __half, 128)
