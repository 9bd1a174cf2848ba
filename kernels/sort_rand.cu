// Device code for three fallback ops of the AOTI shim: a stable sort
// (aten.sort.stable) and a counter-based generator (aten.rand, aten.randint).
// Launched by src/kernels/sort_rand.rs; the design is in kernels/README.md
// ("sort_rand.cu").
//
// Sort: every element becomes a 64-bit unsigned key whose unsigned order is
// the order PyTorch sorts in (NaN largest, -0.0 equal to +0.0), complemented
// for a descending sort, and is paired with its 32-bit position in the row.
// Pairs compare by (key, position), so no two are equal and any correct
// sorting network gives the stable order. Rows of up to SMALL_MAX elements are
// sorted by one block in shared memory (bitonic network); longer rows are cut
// into tiles of SMALL_MAX sorted the same way, then merged pairwise in global
// memory, each element finding its place by a binary search in the other run.
//
// Generator: Philox4x32-10 (Salmon et al., SC'11). The state of a device, one
// seed and one offset, lives in device memory (et_rng_state below, one copy
// per loaded module, i.e. per device); generating kernels read it and a
// separate one-thread kernel advances the offset afterwards on the same
// stream, so a CUDA graph that captured them draws new numbers on each replay.
#include <stdint.h>

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;

// c10::ScalarType codes.
#define DT_U8 0
#define DT_I8 1
#define DT_I16 2
#define DT_I32 3
#define DT_I64 4
#define DT_F16 5
#define DT_F32 6
#define DT_F64 7
#define DT_BOOL 11
#define DT_BF16 15

// Longest row sorted by one block; also the tile of the long-row path.
#define SMALL_MAX 2048
// Dimensions besides the sorted one (the library allows rank 16).
#define MAX_OTHER_DIMS 15

// What the sort kernels need to find a row's elements: the dimensions other
// than the sorted one, row-major (the last one varies fastest), and the
// strides (in elements) of the input and of both outputs. Mirrored by
// `SortGeom` in src/kernels/sort_rand.rs.
struct SortGeom {
  int ndim;        // dimensions in sizes/in_st/val_st/idx_st
  int dtype;       // c10 ScalarType of input and values
  int esize;       // bytes per element
  int descending;  // 0 or 1
  i64 n;           // row length (size of the sorted dimension)
  i64 rows;        // number of rows
  i64 in_sd;       // input stride along the sorted dimension
  i64 val_sd;      // values output stride along the sorted dimension
  i64 idx_sd;      // indices output stride along the sorted dimension
  i64 sizes[MAX_OTHER_DIMS];
  i64 in_st[MAX_OTHER_DIMS];
  i64 val_st[MAX_OTHER_DIMS];
  i64 idx_st[MAX_OTHER_DIMS];
};

// Element offsets of row r's first element in the input and both outputs.
__device__ __forceinline__ void row_base(const SortGeom& g, i64 r, i64& in_o, i64& val_o,
                                         i64& idx_o) {
  in_o = 0;
  val_o = 0;
  idx_o = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const i64 s = g.sizes[d];
    const i64 c = r % s;
    r /= s;
    in_o += c * g.in_st[d];
    val_o += c * g.val_st[d];
    idx_o += c * g.idx_st[d];
  }
}

// Order key of a float of `bits` (sign bit `sign`, exponent mask `ex`,
// mantissa mask `man`): NaN -> all ones, -0.0 -> +0.0, negatives reversed.
__device__ __forceinline__ u64 float_key(u64 bits, u64 sign, u64 ex, u64 man) {
  if ((bits & ex) == ex && (bits & man) != 0) return ~0ull;
  if ((bits & ~sign) == 0) bits = 0;
  const u64 all = sign | ex | man;
  return (bits & sign) ? (~bits & all) : (bits | sign);
}

__device__ __forceinline__ u64 load_key(const char* p, int dt) {
  switch (dt) {
    case DT_U8:
    case DT_BOOL:
      return *(const uint8_t*)p;
    case DT_I8:
      return (u64)(i64)(*(const int8_t*)p) ^ (1ull << 63);
    case DT_I16:
      return (u64)(i64)(*(const int16_t*)p) ^ (1ull << 63);
    case DT_I32:
      return (u64)(i64)(*(const int32_t*)p) ^ (1ull << 63);
    case DT_I64:
      return (u64)(*(const i64*)p) ^ (1ull << 63);
    case DT_F16:
      return float_key(*(const uint16_t*)p, 0x8000ull, 0x7C00ull, 0x03FFull);
    case DT_BF16:
      return float_key(*(const uint16_t*)p, 0x8000ull, 0x7F80ull, 0x007Full);
    case DT_F32:
      return float_key(*(const u32*)p, 0x80000000ull, 0x7F800000ull, 0x007FFFFFull);
    case DT_F64:
    default:
      return float_key(*(const u64*)p, 0x8000000000000000ull, 0x7FF0000000000000ull,
                       0x000FFFFFFFFFFFFFull);
  }
}

__device__ __forceinline__ void copy_elem(char* dst, const char* src, int esize) {
  switch (esize) {
    case 1:
      *(uint8_t*)dst = *(const uint8_t*)src;
      break;
    case 2:
      *(uint16_t*)dst = *(const uint16_t*)src;
      break;
    case 4:
      *(u32*)dst = *(const u32*)src;
      break;
    default:
      *(u64*)dst = *(const u64*)src;
      break;
  }
}

// (ka, ia) after (kb, ib)?
__device__ __forceinline__ bool after(u64 ka, u32 ia, u64 kb, u32 ib) {
  return ka > kb || (ka == kb && ia > ib);
}

// Ascending bitonic sort of p (a power of two) pairs in shared memory, by the
// whole block. Ends with a barrier.
__device__ void bitonic(u64* keys, u32* pos, u32 p) {
  for (u32 size = 2; size <= p; size <<= 1) {
    for (u32 stride = size >> 1; stride > 0; stride >>= 1) {
      for (u32 t = threadIdx.x; t < (p >> 1); t += blockDim.x) {
        const u32 i = (t / stride) * (2 * stride) + (t % stride);
        const u32 j = i + stride;
        const bool up = (i & size) == 0;
        const u64 ki = keys[i], kj = keys[j];
        const u32 pi = pos[i], pj = pos[j];
        if (after(ki, pi, kj, pj) == up) {
          keys[i] = kj;
          keys[j] = ki;
          pos[i] = pj;
          pos[j] = pi;
        }
      }
      __syncthreads();
    }
  }
}

// Rows of n <= SMALL_MAX: one block per row (grid-stride over rows), p the
// power of two >= n; dynamic shared memory 12 * p bytes.
extern "C" __global__ void __launch_bounds__(512)
    sort_rows_small(const char* __restrict__ in, char* __restrict__ vals,
                    i64* __restrict__ idx, SortGeom g, u32 p) {
  extern __shared__ u64 sh_keys[];
  u32* sh_pos = (u32*)(sh_keys + p);
  const u64 flip = g.descending ? ~0ull : 0ull;
  for (i64 r = blockIdx.x; r < g.rows; r += gridDim.x) {
    i64 in_o, val_o, idx_o;
    row_base(g, r, in_o, val_o, idx_o);
    for (u32 k = threadIdx.x; k < p; k += blockDim.x) {
      if ((i64)k < g.n) {
        sh_keys[k] = load_key(in + (in_o + (i64)k * g.in_sd) * g.esize, g.dtype) ^ flip;
        sh_pos[k] = k;
      } else {
        sh_keys[k] = ~0ull;
        sh_pos[k] = 0xFFFFFFFFu;
      }
    }
    __syncthreads();
    bitonic(sh_keys, sh_pos, p);
    for (u32 k = threadIdx.x; (i64)k < g.n; k += blockDim.x) {
      const u32 s = sh_pos[k];
      copy_elem(vals + (val_o + (i64)k * g.val_sd) * g.esize,
                in + (in_o + (i64)s * g.in_sd) * g.esize, g.esize);
      idx[idx_o + (i64)k * g.idx_sd] = (i64)s;
    }
    __syncthreads();
  }
}

// Long rows, step 1: keys and positions of every element into row-major
// scratch ([rows][n]).
extern "C" __global__ void sort_prep(const char* __restrict__ in, u64* __restrict__ keys,
                                     u32* __restrict__ pos, SortGeom g) {
  const u64 flip = g.descending ? ~0ull : 0ull;
  const i64 total = g.rows * g.n;
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (i64)gridDim.x * blockDim.x) {
    const i64 r = e / g.n, k = e % g.n;
    i64 in_o, val_o, idx_o;
    row_base(g, r, in_o, val_o, idx_o);
    keys[e] = load_key(in + (in_o + k * g.in_sd) * g.esize, g.dtype) ^ flip;
    pos[e] = (u32)k;
  }
}

// Long rows, step 2: sort each tile of SMALL_MAX elements of each row in
// place; block b takes tile b % tiles of row b / tiles (grid-stride).
extern "C" __global__ void __launch_bounds__(512)
    sort_tiles(u64* __restrict__ keys, u32* __restrict__ pos, i64 n, i64 rows) {
  __shared__ u64 sh_keys[SMALL_MAX];
  __shared__ u32 sh_pos[SMALL_MAX];
  const i64 tiles = (n + SMALL_MAX - 1) / SMALL_MAX;
  for (i64 b = blockIdx.x; b < rows * tiles; b += gridDim.x) {
    const i64 r = b / tiles, t = b % tiles;
    const i64 start = r * n + t * SMALL_MAX;
    const i64 len = min((i64)SMALL_MAX, n - t * SMALL_MAX);
    for (u32 k = threadIdx.x; k < SMALL_MAX; k += blockDim.x) {
      if ((i64)k < len) {
        sh_keys[k] = keys[start + k];
        sh_pos[k] = pos[start + k];
      } else {
        sh_keys[k] = ~0ull;
        sh_pos[k] = 0xFFFFFFFFu;
      }
    }
    __syncthreads();
    bitonic(sh_keys, sh_pos, SMALL_MAX);
    for (u32 k = threadIdx.x; (i64)k < len; k += blockDim.x) {
      keys[start + k] = sh_keys[k];
      pos[start + k] = sh_pos[k];
    }
    __syncthreads();
  }
}

// Number of pairs in [lo, lo + len) of a sorted run that come before (k, p).
__device__ __forceinline__ i64 count_before(const u64* keys, const u32* pos, i64 lo, i64 len,
                                            u64 k, u32 p) {
  i64 a = 0, b = len;
  while (a < b) {
    const i64 m = (a + b) >> 1;
    if (after(k, p, keys[lo + m], pos[lo + m])) {
      a = m + 1;
    } else {
      b = m;
    }
  }
  return a;
}

// Long rows, step 3 (repeated with w = SMALL_MAX, 2 SMALL_MAX, ...): merge
// each pair of sorted runs of w elements from (ka, pa) into (kb, pb).
extern "C" __global__ void sort_merge(const u64* __restrict__ ka, const u32* __restrict__ pa,
                                      u64* __restrict__ kb, u32* __restrict__ pb, i64 n,
                                      i64 rows, i64 w) {
  const i64 total = rows * n;
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (i64)gridDim.x * blockDim.x) {
    const i64 r = e / n, k = e % n;
    const i64 row = r * n;
    const i64 s = (k / (2 * w)) * (2 * w);  // start of the pair of runs
    const i64 mid = min(s + w, n), end = min(s + 2 * w, n);
    const u64 key = ka[e];
    const u32 p = pa[e];
    i64 dst;
    if (k < mid) {
      dst = k + count_before(ka, pa, row + mid, end - mid, key, p);
    } else {
      dst = s + (k - mid) + count_before(ka, pa, row + s, mid - s, key, p);
    }
    kb[row + dst] = key;
    pb[row + dst] = p;
  }
}

// Long rows, step 4: values (gathered from the input) and indices into the outputs.
extern "C" __global__ void sort_finish(const char* __restrict__ in, const u32* __restrict__ pos,
                                       char* __restrict__ vals, i64* __restrict__ idx,
                                       SortGeom g) {
  const i64 total = g.rows * g.n;
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (i64)gridDim.x * blockDim.x) {
    const i64 r = e / g.n, k = e % g.n;
    i64 in_o, val_o, idx_o;
    row_base(g, r, in_o, val_o, idx_o);
    const u32 s = pos[e];
    copy_elem(vals + (val_o + k * g.val_sd) * g.esize, in + (in_o + (i64)s * g.in_sd) * g.esize,
              g.esize);
    idx[idx_o + k * g.idx_sd] = (i64)s;
  }
}

// ---------------------------------------------------------------- generator

// PyTorch's default seed for a fresh generator (c10::default_rng_seed_val),
// and offset 0. [0] = seed, [1] = offset in 32-bit words drawn (a multiple of
// 4: one Philox block is 4 words).
__device__ u64 et_rng_state[2] = {67280421310721ull, 0ull};

__device__ __forceinline__ void philox4x32_10(u32 c[4], u32 k0, u32 k1) {
  const u32 M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  const u32 W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += W0;
      k1 += W1;
    }
    const u32 hi0 = __umulhi(M0, c[0]), lo0 = M0 * c[0];
    const u32 hi1 = __umulhi(M1, c[2]), lo1 = M1 * c[2];
    const u32 n0 = hi1 ^ c[1] ^ k0;
    const u32 n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
  }
}

// The 4 words of Philox block `block` (counter = offset/4 + block, 64-bit, in
// counter words 0 and 1; words 2 and 3 zero) under key = seed.
__device__ __forceinline__ void draw(u64 block, u32 out[4]) {
  const u64 seed = et_rng_state[0];
  const u64 ctr = et_rng_state[1] / 4 + block;
  out[0] = (u32)ctr;
  out[1] = (u32)(ctr >> 32);
  out[2] = 0;
  out[3] = 0;
  philox4x32_10(out, (u32)seed, (u32)(seed >> 32));
}

// fp16 bits of k * 2^-11 for k < 2048 (exact: all such values are normal or 0).
__device__ __forceinline__ uint16_t half_of_k11(u32 k) {
  if (k == 0) return 0;
  const int m = 31 - __clz(k);  // 0..10
  return (uint16_t)(((m - 11 + 15) << 10) | ((k << (10 - m)) & 0x3FFu));
}

// Uniform [0, 1) in `dtype` (f32, f64, f16, bf16) with PyTorch's precision
// per dtype: the low 24 / 53 / 11 / 8 bits of a draw times 2^-bits. Element e
// takes word e % 4 of block e / 4 (f64: words 2(e%2), 2(e%2)+1 of block e / 2).
extern "C" __global__ void rng_uniform(char* __restrict__ out, i64 n, int dtype) {
  const int per = dtype == DT_F64 ? 2 : 4;
  const i64 blocks = (n + per - 1) / per;
  for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
       b += (i64)gridDim.x * blockDim.x) {
    u32 w[4];
    draw(b, w);
    for (int j = 0; j < per; ++j) {
      const i64 e = b * per + j;
      if (e >= n) break;
      switch (dtype) {
        case DT_F64: {
          const u64 x = ((u64)w[2 * j + 1] << 32) | w[2 * j];
          ((double*)out)[e] = (double)(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
          break;
        }
        case DT_F16:
          ((uint16_t*)out)[e] = half_of_k11(w[j] & 0x7FFu);
          break;
        case DT_BF16:
          ((uint16_t*)out)[e] =
              (uint16_t)(__float_as_uint((float)(w[j] & 0xFFu) * 0.00390625f) >> 16);
          break;
        default:
          ((float*)out)[e] = (float)(w[j] & 0xFFFFFFu) * 5.9604644775390625e-08f;
          break;
      }
    }
  }
}

// Integers low + (x mod range) into an integer tensor of `dtype`; x is one
// 32-bit word when range <= 2^32, else two (64-bit), as PyTorch's CUDA
// random_from_to does. range is high - low as an unsigned 64-bit number (so
// [INT64_MIN, INT64_MAX) is range 2^64 - 1), never 0.
extern "C" __global__ void rng_randint(char* __restrict__ out, i64 n, int dtype, i64 low,
                                       u64 range) {
  const bool wide = range > 0x100000000ull;
  const int per = wide ? 2 : 4;
  const i64 blocks = (n + per - 1) / per;
  for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
       b += (i64)gridDim.x * blockDim.x) {
    u32 w[4];
    draw(b, w);
    for (int j = 0; j < per; ++j) {
      const i64 e = b * per + j;
      if (e >= n) break;
      const u64 x = wide ? (((u64)w[2 * j + 1] << 32) | w[2 * j]) : (u64)w[j];
      const u64 v = (u64)low + x % range;
      switch (dtype) {
        case DT_U8:
        case DT_I8:
          ((uint8_t*)out)[e] = (uint8_t)v;
          break;
        case DT_I16:
          ((uint16_t*)out)[e] = (uint16_t)v;
          break;
        case DT_I32:
          ((u32*)out)[e] = (u32)v;
          break;
        default:
          ((u64*)out)[e] = v;
          break;
      }
    }
  }
}

// Advance the offset by `words` (launched after a generating kernel, same stream).
extern "C" __global__ void rng_advance(u64 words) {
  if (blockIdx.x == 0 && threadIdx.x == 0) et_rng_state[1] += words;
}

// Set seed and offset (stream-ordered with the kernels around it).
extern "C" __global__ void rng_set(u64 seed, u64 offset) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    et_rng_state[0] = seed;
    et_rng_state[1] = offset;
  }
}
