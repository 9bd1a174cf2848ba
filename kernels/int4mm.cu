// int4 weight-only matrix multiply for the tile-packed layout that
// aten._weight_int4pack_mm uses on CUDA:
//
//   y[M][N] (bf16) = x[M][K] (bf16) . dequant(w)^T,  fp32 accumulation,
//   dequant(q) = bf16_fma(bf16(q - 8), scale[k / G][n], zero[k / G][n]).
//
// The layout, the dequantisation rule and the design are described in
// kernels/README.md. In short: the packed words are, lane for lane, the B
// operand fragments of the tensor-core instruction mma.m16n8k16 (one n-tile
// of 8 columns, two k-tiles of 16 per 32-bit word), so every kernel here
// streams the words straight from global memory into registers (one 16-byte
// load per lane and n-tile per 128 k when innerKTiles = 8), turns nibbles
// into bf16 with an exponent trick plus one bf16 fma for scale and zero,
// and feeds mma.sync with activations staged through shared memory
// (cp.async, zero-filled outside the matrix) and read back with ldmatrix.
//
// Two kernels:
// - int4mm_skinny_*: small M (decode). A block takes a chunk of R = 8 or 16
//   rows and a group of NT n-tiles; its warps split K between them (warp w
//   takes the 128-k steps w, w + warps, ...), each warp stages its own
//   activation rows; a block-wide reduction in shared memory sums the warps'
//   partial tiles at the end. Several row chunks (M up to 64) are several
//   blocks, which read the same weights (from L2 after the first).
//   Many warps per n-tile keep enough loads in flight for a memory-bound
//   GEMV; B and the scales of the next step are loaded into registers while
//   the current step computes.
// - int4mm_tiled_*: M > 64 (prefill). Four warps split a 32*NT-column tile,
//   share one staged activation tile of 16*MT rows, and walk all of K.
//
// Built by kernels/build.sh (sm_90 SASS + compute_80 PTX); entry points are
// extern "C" so the Rust side finds them by name. No host code lives here.

typedef unsigned int u32;
typedef unsigned short u16;

namespace {

constexpr int kStepK = 128;                  // k per pipeline step
constexpr int kRowBytes = kStepK * 2;        // one staged bf16 row of a step
constexpr int kVecPerRow = kRowBytes / 16;   // 16-byte vectors per staged row

__device__ __forceinline__ u32 smem_u32(const void* p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// 16 bytes global -> shared; src_bytes = 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all_but_one() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

// c += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 bf16x2_fma(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Nibbles i (bits 4i..4i+3) and i + 4 (bits 16+4i..) of a packed word as the
// bf16 pair (q_i - 8, q_{i+4} - 8), low half first. OR-ing a nibble into the
// mantissa of bf16 128.0 (0x4300) gives 128 + q exactly; one bf16 fma
// subtracts 136 (0xC308) exactly.
__device__ __forceinline__ u32 centred_pair(u32 word, int i) {
  u32 biased;
  // (a & b) | c in one LOP3 (lookup table 0xEA).
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n"
      : "=r"(biased)
      : "r"(word >> (4 * i)), "n"(0x000F000F), "n"(0x43004300));
  return bf16x2_fma(biased, 0x3F803F80u, 0xC308C308u);
}

// A scale/zero word {lo: scale, hi: zero} as the pairs (s, s) and (z, z).
__device__ __forceinline__ u32 lo_pair(u32 v) { return __byte_perm(v, 0, 0x1010); }
__device__ __forceinline__ u32 hi_pair(u32 v) { return __byte_perm(v, 0, 0x3232); }

// Dequantised B fragments of one packed word: f[0], f[1] for its first
// k-tile, f[2], f[3] for its second.
__device__ __forceinline__ void dequant_word(u32 word, u32 sz, u32 (&f)[4]) {
  const u32 s2 = lo_pair(sz);
  const u32 z2 = hi_pair(sz);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = bf16x2_fma(centred_pair(word, i), s2, z2);
}

__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

template <int N>
__device__ __forceinline__ void load_words(const u32* p, u32* out);
template <>
__device__ __forceinline__ void load_words<1>(const u32* p, u32* out) {
  asm("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];\n" : "=r"(out[0]) : "l"(p));
}
template <>
__device__ __forceinline__ void load_words<2>(const u32* p, u32* out) {
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];\n"
      : "=r"(out[0]), "=r"(out[1])
      : "l"(p));
}
template <>
__device__ __forceinline__ void load_words<4>(const u32* p, u32* out) {
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
      : "l"(p));
}

struct Shape {
  int m, n, k;
  int gshift;      // log2(group size)
  int ntiles;      // n / 8
  int ksuper;      // k / (16 * IKT): k super-tiles per n-tile
  int steps;       // ceil(k / 128)
};

// The packed words and scale/zero words one lane needs for one 128-k step of
// NT n-tiles: word j of n-tile t covers the step's k-tiles 2j and 2j + 1
// (whatever IKT is), and its scale/zero word is that of group
// (128 * step + 32 * j) / G. Out-of-range n-tiles and super-tiles read
// nothing and give word 0 with scale 0 and zero 0, which dequantise to 0.
template <int IKT, int NT>
__device__ __forceinline__ void load_step_b(const u32* __restrict__ w, const u32* __restrict__ qsz,
                                            const Shape& s, int nt0, int step, int lane,
                                            u32 (&bw)[NT][4], u32 (&sz)[NT][4]) {
  constexpr int U = 8 / IKT;   // super-tiles per step
  constexpr int WPS = IKT / 2; // words per lane per super-tile
  const int n_in_tile = lane >> 2;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int nt = nt0 + t;
    const bool nt_ok = nt < s.ntiles;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int st = step * U + u;
      const bool ok = nt_ok && st < s.ksuper;
      if (ok) {
        const u32* p = w + ((size_t(nt) * s.ksuper + st) * 32 + lane) * WPS;
        load_words<WPS>(p, &bw[t][u * WPS]);
      } else {
#pragma unroll
        for (int j = 0; j < WPS; ++j) bw[t][u * WPS + j] = 0;
      }
#pragma unroll
      for (int j = 0; j < WPS; ++j) {
        const int word = u * WPS + j;
        const int group = (step * kStepK + 32 * word) >> s.gshift;
        sz[t][word] = ok ? __ldg(qsz + size_t(group) * s.n + nt * 8 + n_in_tile) : 0u;
      }
    }
  }
}

// load_step_b for a step that lies inside K, for NT n-tiles that all exist:
// no checks, pointers from per-lane bases. `wl` = this lane's words of n-tile
// nt0 at step 0 (w + nt0 * K + lane * IKT/2: an n-tile is K words, a step 128
// words, a super-tile 16 * IKT words); `ql` = this lane's column of the
// scale/zero words (qsz + nt0 * 8 + lane / 4).
// `qrow[j]` = byte offset, from the step's first group row, of the group row
// of the step's word j: ((32 * j) >> log2(G)) * N * 4 (the same for every step,
// as a step starts on a multiple of 128 and G is a power of two >= 32).
template <int IKT, int NT>
__device__ __forceinline__ void load_step_b_full(const u32* __restrict__ wl,
                                                 const u32* __restrict__ ql, const Shape& s,
                                                 const u32 (&qrow)[4], int step,
                                                 u32 (&bw)[NT][4], u32 (&sz)[NT][4]) {
  constexpr int U = 8 / IKT;
  constexpr int WPS = IKT / 2;
  const u32* p = wl + u32(step) * u32(kStepK);
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int u = 0; u < U; ++u)
      load_words<WPS>(p + size_t(t) * s.k + u * 16 * IKT, &bw[t][u * WPS]);
  const char* q0 = reinterpret_cast<const char*>(ql + (u32(step * kStepK) >> s.gshift) * u32(s.n));
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u32* q = reinterpret_cast<const u32*>(q0 + qrow[j]);
#pragma unroll
    for (int t = 0; t < NT; ++t) sz[t][j] = __ldg(q + 8 * t);
  }
}

__device__ __forceinline__ void group_rows(const Shape& s, u32 (&qrow)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) qrow[j] = (u32(32 * j) >> s.gshift) * u32(s.n) * 4u;
}

__device__ __forceinline__ void st_shared_zero16(u32 addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%1,%1,%1};\n" ::"r"(addr), "r"(0u) : "memory");
}

// ------------------------------------------------------------------ skinny

// Per warp: 2 stages x R rows x 256 B of staged activations.
template <int IKT, int NT, int R>
__device__ __forceinline__ void skinny_body(const u16* __restrict__ x, const u32* __restrict__ w,
                                            const u32* __restrict__ qsz, u16* __restrict__ y,
                                            const Shape s) {
  static_assert(R == 8 || R == 16, "R");
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const int nt0 = blockIdx.y * NT;
  const u32 stage0 = smem_u32(smem) + warp * (2 * R * kRowBytes);

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[t][r] = 0.f;

  // Stage rows 0..R-1 of step `step` into buffer `buf` (zeros outside x).
  auto stage_a = [&](int step, int buf) {
    const int kbase = step * kStepK;
#pragma unroll
    for (int i = 0; i < R * kVecPerRow / 32; ++i) {
      const int v_id = lane + 32 * i;
      const int r = v_id / kVecPerRow;
      const int v = v_id % kVecPerRow;
      const int kk = kbase + v * 8;
      const bool ok = r < s.m && kk < s.k;
      const u16* src = ok ? x + size_t(r) * s.k + kk : x;
      cp_async16(stage0 + buf * (R * kRowBytes) + r * kRowBytes + ((v ^ (r & 7)) << 4), src, ok);
    }
    cp_async_commit();
  };

  // Full steps (inside K, all n-tiles present) take a cheaper path: lane
  // copies vector lane % 16 of rows lane / 16 + 2i (the same mapping as
  // stage_a), from precomputed addresses; rows >= m are zeroed once, in both
  // buffers, and never copied.
  constexpr int NV = R / 2;
  const int r0 = lane >> 4;
  const int v16 = lane & 15;
  const int nvalid = s.m > r0 ? (s.m - r0 + 1) / 2 : 0;
  u32 dst[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + 2 * i;
    dst[i] = stage0 + r * kRowBytes + ((v16 ^ (r & 7)) << 4);
  }
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    if (i >= nvalid) {
      st_shared_zero16(dst[i & 3] + (i >> 2) * 8 * kRowBytes);
      st_shared_zero16(dst[i & 3] + (i >> 2) * 8 * kRowBytes + R * kRowBytes);
    }
  }
  const u16* xl = x + size_t(r0) * s.k + v16 * 8;
  const u32* wl = w + size_t(nt0) * s.k + lane * (IKT / 2);
  const u32* ql = qsz + nt0 * 8 + (lane >> 2);
  const bool all_tiles = nt0 + NT <= s.ntiles;
  u32 qrow[4];
  group_rows(s, qrow);

  auto load_step = [&](int step, int buf, u32 (&bw)[NT][4], u32 (&sz)[NT][4]) {
    if (all_tiles && (step + 1) * kStepK <= s.k) {
      const u16* p = xl + size_t(step) * kStepK;
#pragma unroll
      for (int i = 0; i < NV; ++i)
        if (i < nvalid)
          cp_async16(dst[i & 3] + (i >> 2) * 8 * kRowBytes + buf * (R * kRowBytes),
                     p + size_t(2 * i) * s.k, true);
      cp_async_commit();
      load_step_b_full<IKT, NT>(wl, ql, s, qrow, step, bw, sz);
    } else {
      stage_a(step, buf);
      load_step_b<IKT, NT>(w, qsz, s, nt0, step, lane, bw, sz);
    }
  };

  auto compute = [&](int buf, const u32 (&bw)[NT][4], const u32 (&sz)[NT][4]) {
    const u32 base = stage0 + buf * (R * kRowBytes);
    const int q = lane >> 3;
    const int i8 = lane & 7;
#pragma unroll
    for (int j = 0; j < 4; ++j) {   // packed word j = k-tiles 2j, 2j+1 of the step
      // A fragments of k-tiles 2j and 2j + 1. With 8 staged rows, rows 8-15
      // of the mma repeat rows 0-7 (their outputs, c[2] and c[3], are never
      // stored), which lets ldmatrix fill the fragment registers in place.
      u32 a[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = (R == 8 ? 0 : (q & 1) * 8) + i8;
        const int v = 2 * (2 * j + h) + (q >> 1);
        ldmatrix_x4(base + r * kRowBytes + ((v ^ (r & 7)) << 4), a[h][0], a[h][1], a[h][2],
                    a[h][3]);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        u32 f[4];
        dequant_word(bw[t][j], sz[t][j], f);
        mma_16816(acc[t], a[0], f[0], f[1]);
        mma_16816(acc[t], a[1], f[2], f[3]);
      }
    }
  };

  u32 bw0[NT][4], sz0[NT][4], bw1[NT][4], sz1[NT][4];
  int step = warp;
  int buf = 0;
  if (step < s.steps) load_step(step, 0, bw0, sz0);
  // Two steps per trip so the register double buffer needs no copies.
  while (step < s.steps) {
    int next = step + nwarps;
    if (next < s.steps) {
      load_step(next, buf ^ 1, bw1, sz1);
    } else {
      cp_async_commit();
    }
    cp_async_wait_all_but_one();
    __syncwarp();
    compute(buf, bw0, sz0);
    __syncwarp();
    step = next;
    buf ^= 1;
    if (step >= s.steps) break;
    next = step + nwarps;
    if (next < s.steps) {
      load_step(next, buf ^ 1, bw0, sz0);
    } else {
      cp_async_commit();
    }
    cp_async_wait_all_but_one();
    __syncwarp();
    compute(buf, bw1, sz1);
    __syncwarp();
    step = next;
    buf ^= 1;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");

  // Sum the warps' partial tiles: red[warp][t][r][lane].
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int r = 0; r < 4; ++r) red[((warp * NT + t) * 4 + r) * 32 + lane] = acc[t][r];
  __syncthreads();
  for (int idx = threadIdx.x; idx < NT * 32; idx += blockDim.x) {
    const int t = idx >> 5;
    const int l = idx & 31;
    const int nt = nt0 + t;
    if (nt >= s.ntiles) continue;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    for (int wv = 0; wv < nwarps; ++wv)
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] += red[((wv * NT + t) * 4 + r) * 32 + l];
    const int g = l >> 2;
    const int n = nt * 8 + 2 * (l & 3);
    if (g < s.m) *reinterpret_cast<u32*>(y + size_t(g) * s.n + n) = pack_bf16x2(v[0], v[1]);
    if (R == 16 && g + 8 < s.m)
      *reinterpret_cast<u32*>(y + size_t(g + 8) * s.n + n) = pack_bf16x2(v[2], v[3]);
  }
}

// ------------------------------------------------------------------- tiled

// Block: 4 warps; tile of 16*MT rows x 32*NT columns; 2 stages of 16*MT x 256 B.
template <int IKT, int MT, int NT>
__device__ __forceinline__ void tiled_body(const u16* __restrict__ x, const u32* __restrict__ w,
                                           const u32* __restrict__ qsz, u16* __restrict__ y,
                                           const Shape s) {
  constexpr int BM = 16 * MT;
  constexpr int kThreads = 128;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int m0 = blockIdx.y * BM;
  const int nt0 = (blockIdx.x * 4 + warp) * NT;
  const u32 stage0 = smem_u32(smem);

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mt][t][r] = 0.f;

  auto stage_a = [&](int step, int buf) {
    const int kbase = step * kStepK;
#pragma unroll
    for (int i = 0; i < BM * kVecPerRow / kThreads; ++i) {
      const int v_id = threadIdx.x + kThreads * i;
      const int r = v_id / kVecPerRow;
      const int v = v_id % kVecPerRow;
      const int row = m0 + r;
      const int kk = kbase + v * 8;
      const bool ok = row < s.m && kk < s.k;
      const u16* src = ok ? x + size_t(row) * s.k + kk : x;
      cp_async16(stage0 + buf * (BM * kRowBytes) + r * kRowBytes + ((v ^ (r & 7)) << 4), src, ok);
    }
    cp_async_commit();
  };

  auto compute = [&](int buf, const u32 (&bw)[NT][4], const u32 (&sz)[NT][4]) {
    const u32 base = stage0 + buf * (BM * kRowBytes);
    const int q = lane >> 3;
    const int i8 = lane & 7;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      u32 f[NT][4];
#pragma unroll
      for (int t = 0; t < NT; ++t) dequant_word(bw[t][j], sz[t][j], f[t]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          u32 a[4];
          const int r = mt * 16 + (q & 1) * 8 + i8;
          const int v = 2 * (2 * j + h) + (q >> 1);
          ldmatrix_x4(base + r * kRowBytes + ((v ^ (r & 7)) << 4), a[0], a[1], a[2], a[3]);
#pragma unroll
          for (int t = 0; t < NT; ++t) mma_16816(acc[mt][t], a, f[t][2 * h], f[t][2 * h + 1]);
        }
      }
    }
  };

  // Full steps (inside K, all of the warp's n-tiles present): thread copies
  // vector tid % 16 of tile rows tid / 16 + 8i (the mapping of stage_a, one
  // swizzle for all i) from precomputed addresses; tile rows past m are
  // zeroed once in both buffers and never copied.
  constexpr int NV = BM / 8;
  const int r0 = threadIdx.x >> 4;
  const int v16 = threadIdx.x & 15;
  const int nvalid = s.m - m0 > r0 ? (s.m - m0 - r0 + 7) / 8 : 0;
  const u32 dst0 = stage0 + r0 * kRowBytes + ((v16 ^ (r0 & 7)) << 4);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    if (i >= nvalid) {
      st_shared_zero16(dst0 + i * 8 * kRowBytes);
      st_shared_zero16(dst0 + i * 8 * kRowBytes + BM * kRowBytes);
    }
  }
  const u16* xl = x + size_t(m0 + r0) * s.k + v16 * 8;
  const u32* wl = w + size_t(nt0) * s.k + lane * (IKT / 2);
  const u32* ql = qsz + nt0 * 8 + (lane >> 2);
  const bool all_tiles = nt0 + NT <= s.ntiles;
  u32 qrow[4];
  group_rows(s, qrow);

  auto load_step = [&](int step, int buf, u32 (&bw)[NT][4], u32 (&sz)[NT][4]) {
    if ((step + 1) * kStepK <= s.k) {
      const u16* p = xl + size_t(step) * kStepK;
#pragma unroll
      for (int i = 0; i < NV; ++i)
        if (i < nvalid)
          cp_async16(dst0 + i * 8 * kRowBytes + buf * (BM * kRowBytes), p + size_t(8 * i) * s.k,
                     true);
      cp_async_commit();
    } else {
      stage_a(step, buf);
    }
    if (all_tiles && (step + 1) * kStepK <= s.k)
      load_step_b_full<IKT, NT>(wl, ql, s, qrow, step, bw, sz);
    else
      load_step_b<IKT, NT>(w, qsz, s, nt0, step, lane, bw, sz);
  };

  u32 bw0[NT][4], sz0[NT][4], bw1[NT][4], sz1[NT][4];
  load_step(0, 0, bw0, sz0);
  int step = 0;
  int buf = 0;
  while (step < s.steps) {
    int next = step + 1;
    if (next < s.steps) {
      load_step(next, buf ^ 1, bw1, sz1);
    } else {
      cp_async_commit();
    }
    cp_async_wait_all_but_one();
    __syncthreads();
    compute(buf, bw0, sz0);
    __syncthreads();
    step = next;
    buf ^= 1;
    if (step >= s.steps) break;
    next = step + 1;
    if (next < s.steps) {
      load_step(next, buf ^ 1, bw0, sz0);
    } else {
      cp_async_commit();
    }
    cp_async_wait_all_but_one();
    __syncthreads();
    compute(buf, bw1, sz1);
    __syncthreads();
    step = next;
    buf ^= 1;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");

  const int g = lane >> 2;
  const int c2 = 2 * (lane & 3);
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int nt = nt0 + t;
    if (nt >= s.ntiles) continue;
    const int n = nt * 8 + c2;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row = m0 + mt * 16 + g;
      if (row < s.m)
        *reinterpret_cast<u32*>(y + size_t(row) * s.n + n) =
            pack_bf16x2(acc[mt][t][0], acc[mt][t][1]);
      if (row + 8 < s.m)
        *reinterpret_cast<u32*>(y + size_t(row + 8) * s.n + n) =
            pack_bf16x2(acc[mt][t][2], acc[mt][t][3]);
    }
  }
}

__device__ __forceinline__ Shape make_shape(int m, int n, int k, int gshift, int ikt) {
  Shape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.gshift = gshift;
  s.ntiles = n >> 3;
  s.ksuper = k / (16 * ikt);
  s.steps = (k + kStepK - 1) / kStepK;
  return s;
}

}  // namespace

// Entry points. Arguments: x [m][k] bf16, w packed int32 words, qsz [k/G][n]
// (scale, zero) bf16 pairs, y [m][n] bf16, m, n, k, log2(G).
#define INT4MM_ARGS                                                                  \
  const u16 *__restrict__ x, const u32 *__restrict__ w, const u32 *__restrict__ qsz, \
      u16 *__restrict__ y, int m, int n, int k, int gshift

// Skinny grid: x = chunk of R rows, y = group of NT n-tiles. The chunks of one
// n-tile group are consecutive blocks, so the weights they all read come from
// L2 after the first.
#define SKINNY(IKT, NT, R)                                                              \
  extern "C" __global__ void __launch_bounds__(512) int4mm_skinny_k##IKT##_n##NT##_r##R( \
      INT4MM_ARGS) {                                                                    \
    const int row0 = blockIdx.x * R;                                                    \
    const int rows = m - row0 < R ? m - row0 : R;                                       \
    skinny_body<IKT, NT, R>(x + size_t(row0) * k, w, qsz, y + size_t(row0) * n,         \
                            make_shape(rows, n, k, gshift, IKT));                       \
  }

#define TILED(IKT, MT, NT)                                                              \
  extern "C" __global__ void __launch_bounds__(128) int4mm_tiled_k##IKT##_m##MT##_n##NT( \
      INT4MM_ARGS) {                                                                    \
    tiled_body<IKT, MT, NT>(x, w, qsz, y, make_shape(m, n, k, gshift, IKT));            \
  }

#define ALL_IKT(MACRO, A, B) MACRO(2, A, B) MACRO(4, A, B) MACRO(8, A, B)

ALL_IKT(SKINNY, 2, 8)
ALL_IKT(SKINNY, 4, 8)
ALL_IKT(SKINNY, 2, 16)
ALL_IKT(SKINNY, 4, 16)
ALL_IKT(TILED, 2, 2)
ALL_IKT(TILED, 2, 4)
ALL_IKT(TILED, 4, 2)
ALL_IKT(TILED, 4, 4)
