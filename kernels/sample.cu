// Next-token choice on the device: one row of logits in, one token id out
// (written to page-locked host memory), so a generation loop reads back 8
// bytes per token instead of the row. Launched by src/kernels/sample.rs; the
// design is in kernels/README.md ("sample.cu").
//
// Greedy: the first maximum, NaN counting as the largest (torch.argmax).
// et_argmax spreads the row over many blocks (one launch: each block writes
// its slice's best to a scratch, the last block to finish merges them);
// et_sample does it in one block (pass A below) and also samples.
// Sampled: weights p = exp((x - max) / T) (+inf logits share all the mass;
// NaN and -inf weigh 0), kept = the smallest set of most likely tokens whose
// mass reaches top_p of the total (ties at the threshold taken by lower id),
// then the token whose cumulative kept mass, in id order, first exceeds
// u * (kept mass) for the caller's uniform u in [0, 1).
//
// Masses are sums of fixed-point weights (p * 2^40 as 64-bit integers), so
// every sum is exact and independent of the order the threads add in: the
// same row and u give the same token on every run. The top-p threshold is
// found by a radix search on the bits of the float weight (three passes of
// 1024 buckets: bits 29..20, 19..10, 9..0; p <= 1 so bits 31..30 are 0).
#include <stdint.h>
#include <cuda_fp16.h>

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;

#define DT_F16 5
#define DT_F32 6
#define DT_BF16 15

#define THREADS 1024
#define WARPS (THREADS / 32)
#define BUCKETS 1024
#define FIXED_ONE 1099511627776.0f  // 2^40

__device__ __forceinline__ float load(const void* row, int dtype, int v) {
  switch (dtype) {
    case DT_F32:
      return ((const float*)row)[v];
    case DT_BF16:
      return __uint_as_float((u32)((const uint16_t*)row)[v] << 16);
    default:
      return __half2float(((const __half*)row)[v]);
  }
}

// The weight of logit x given the row's largest non-NaN logit `top` (finite
// or +inf; never -inf here). The same expression in every pass, so every
// pass sees the same float.
__device__ __forceinline__ float weight(float x, float top, float inv_temp) {
  if (isnan(x) || x == -INFINITY) return 0.0f;
  if (top == INFINITY) return x == INFINITY ? 1.0f : 0.0f;
  return expf(__fmul_rn(__fsub_rn(x, top), inv_temp));
}

__device__ __forceinline__ u64 fixed(float p) {
  return (u64)__fmul_rn(p, FIXED_ONE);
}

// Greedy order: NaN first, then larger values, then lower ids.
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

__device__ __forceinline__ u64 warp_sum(u64 x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ u64 warp_inclusive(u64 x, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const u64 y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

struct Shared {
  u64 hist[BUCKETS];
  u32 count[BUCKETS];
  float best[WARPS];
  int best_id[WARPS];
  u64 warp_mass[WARPS];
  u32 warp_ties[WARPS];
  // Results of one thread, read by all after a barrier.
  float top;
  u64 above;  // mass above the bucket being refined
  u32 key;    // the bucket found
  int warp;   // the warp whose range holds the target
  u64 start;  // cumulative kept mass before that warp's range
  u32 ties_before;
};

// Warp 0: the bucket, from the top, where `above` + the mass of the buckets
// above it stays below `target` and adding the bucket's own reaches it.
// Sets s.key and adds the mass above that bucket to s.above.
__device__ void find_bucket(Shared& s, u64 target, int tid) {
  if (tid >= 32) return;
  const int lane = tid;
  // Lane l sums buckets hi_l down to hi_l - 31 (lane 0 the highest keys).
  const int hi = BUCKETS - 1 - 32 * lane;
  u64 seg = 0;
  for (int j = 0; j < 32; ++j) seg += s.hist[hi - j];
  const u64 incl = warp_inclusive(seg, lane);
  const u64 excl = incl - seg;
  const u64 above = s.above;
  const bool here = above + excl < target && target <= above + incl;
  const u32 who = __ballot_sync(0xffffffffu, here);
  if (who == 0) {
    // Unreachable when target <= the total mass; keep the lowest bucket with mass.
    if (lane == 0) {
      int k = 0;
      while (k < BUCKETS - 1 && s.hist[k] == 0) ++k;
      u64 sum = 0;
      for (int j = BUCKETS - 1; j > k; --j) sum += s.hist[j];
      s.key = (u32)k;
      s.above = above + sum;
    }
    return;
  }
  if (lane == __ffs(who) - 1) {
    u64 acc = above + excl;
    int k = hi;
    while (k > hi - 31 && acc + s.hist[k] < target) acc += s.hist[k--];
    s.key = (u32)k;
    s.above = acc;
  }
}

// One row of `vocab` logits (dtype f32, bf16 or f16) -> *out (a token id, or
// -1 when every logit is NaN or -inf while sampling). inv_temp == 0: greedy.
// top_p in (0, 1]; u in [0, 1). One block of THREADS threads.
extern "C" __global__ void __launch_bounds__(THREADS)
    et_sample(const void* __restrict__ row, int dtype, int vocab, float inv_temp, float top_p,
              double u, i64* __restrict__ out) {
  __shared__ Shared s;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Warp w owns ids [w * span, (w + 1) * span), its lanes strided by 32.
  const int span = ((vocab + WARPS - 1) / WARPS + 31) & ~31;
  const int lo = min(warp * span, vocab), hi = min(lo + span, vocab);

  // Pass A: the argmax (greedy) and the largest non-NaN logit.
  float best = NAN;
  int best_id = INT32_MAX;
  float top = -INFINITY;
  for (int v = lo + lane; v < hi; v += 32) {
    const float x = load(row, dtype, v);
    if (best_id == INT32_MAX || better(x, v, best, best_id)) {
      best = x;
      best_id = v;
    }
    if (!isnan(x)) top = fmaxf(top, x);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float b = __shfl_xor_sync(0xffffffffu, best, o);
    const int bi = __shfl_xor_sync(0xffffffffu, best_id, o);
    const float t = __shfl_xor_sync(0xffffffffu, top, o);
    if (bi != INT32_MAX && (best_id == INT32_MAX || better(b, bi, best, best_id))) {
      best = b;
      best_id = bi;
    }
    top = fmaxf(top, t);
  }
  if (lane == 0) {
    s.best[warp] = best;
    s.best_id[warp] = best_id;
    s.warp_mass[warp] = __float_as_uint(top);
  }
  __syncthreads();
  if (tid == 0) {
    float b = s.best[0], t = __uint_as_float((u32)s.warp_mass[0]);
    int bi = s.best_id[0];
    for (int w = 1; w < WARPS; ++w) {
      if (s.best_id[w] != INT32_MAX && (bi == INT32_MAX || better(s.best[w], s.best_id[w], b, bi))) {
        b = s.best[w];
        bi = s.best_id[w];
      }
      t = fmaxf(t, __uint_as_float((u32)s.warp_mass[w]));
    }
    s.top = t;
    if (inv_temp == 0.0f) *out = bi;
    else if (t == -INFINITY) *out = -1;
  }
  __syncthreads();
  top = s.top;
  if (inv_temp == 0.0f || top == -INFINITY) return;

  // The threshold: weights with bits > tau_bits are kept, and the first
  // n_ties (in id order) of those equal to it. Without top-p: every weight > 0.
  u32 tau_bits = 0;
  u64 n_ties = 0;
  if (top_p < 1.0f) {
    u64 total = 0;
    u32 prefix = 0;
    u64 target = 0;
    for (int level = 0; level < 3; ++level) {
      const int shift = 20 - 10 * level;
      for (int k = tid; k < BUCKETS; k += THREADS) {
        s.hist[k] = 0;
        s.count[k] = 0;
      }
      if (level == 0 && tid == 0) s.above = 0;
      __syncthreads();
      u64 mine = 0;
      for (int v = lo + lane; v < hi; v += 32) {
        const float p = weight(load(row, dtype, v), top, inv_temp);
        const u32 bits = __float_as_uint(p);
        if (level > 0 && (bits >> (shift + 10)) != prefix) continue;
        const u64 f = fixed(p);
        if (f == 0) continue;
        const u32 k = (bits >> shift) & (BUCKETS - 1);
        atomicAdd(&s.hist[k], f);
        if (level == 2) atomicAdd(&s.count[k], 1u);
        mine += f;
      }
      if (level == 0) {
        mine = warp_sum(mine);
        if (lane == 0) s.warp_mass[warp] = mine;
        __syncthreads();
        total = 0;
        for (int w = 0; w < WARPS; ++w) total += s.warp_mass[w];
        // Keep adding until the kept mass reaches top_p of the total.
        target = (u64)ceil((double)top_p * (double)total);
        if (target == 0) target = 1;
      }
      __syncthreads();
      find_bucket(s, target, tid);
      __syncthreads();
      prefix = (prefix << 10) | s.key;
    }
    tau_bits = prefix;
    const u64 tie = fixed(__uint_as_float(tau_bits));
    const u64 ties = s.count[s.key];
    const u64 need = s.above < target ? (target - s.above + tie - 1) / tie : 1;
    n_ties = need < 1 ? 1 : (need > ties ? ties : need);
    __syncthreads();
  }

  // Pass C1: kept mass strictly above the threshold and the ties, per warp.
  u64 mass = 0;
  u32 ties = 0;
  for (int v = lo + lane; v < hi; v += 32) {
    const float p = weight(load(row, dtype, v), top, inv_temp);
    const u32 bits = __float_as_uint(p);
    if (bits > tau_bits) mass += fixed(p);
    else if (top_p < 1.0f && bits == tau_bits) ++ties;
  }
  mass = warp_sum(mass);
  for (int o = 16; o > 0; o >>= 1) ties += __shfl_xor_sync(0xffffffffu, ties, o);
  if (lane == 0) {
    s.warp_mass[warp] = mass;
    s.warp_ties[warp] = ties;
  }
  __syncthreads();
  const u64 tie_w = top_p < 1.0f ? fixed(__uint_as_float(tau_bits)) : 0;
  if (tid == 0) {
    u64* kept = s.warp_mass;  // from here: each warp's kept mass, ties included
    u64 sum = 0, ties_seen = 0;
    for (int w = 0; w < WARPS; ++w) {
      const u64 left = n_ties > ties_seen ? n_ties - ties_seen : 0;
      const u64 in = left < s.warp_ties[w] ? left : s.warp_ties[w];
      kept[w] += in * tie_w;
      ties_seen += s.warp_ties[w];
      sum += kept[w];
    }
    u64 target = (u64)(u * (double)sum);
    if (target >= sum) target = sum - 1;  // sum > 0: the top weight is 2^40
    u64 acc = 0, seen = 0;
    int w = 0;
    while (w < WARPS - 1 && acc + kept[w] <= target) {
      acc += kept[w];
      seen += s.warp_ties[w];
      ++w;
    }
    s.warp = w;
    s.start = acc;
    s.ties_before = (u32)seen;
    s.above = target;  // reused: the target
  }
  __syncthreads();

  // Pass C2: the chosen warp walks its range in id order.
  if (warp != s.warp) return;
  const u64 target = s.above;
  u64 acc = s.start;
  u64 ties_seen = s.ties_before;
  int last_kept = -1;
  for (int base = lo; base < hi; base += 32) {
    const int v = base + lane;
    float p = 0.0f;
    if (v < hi) p = weight(load(row, dtype, v), top, inv_temp);
    const u32 bits = __float_as_uint(p);
    const bool tie = v < hi && top_p < 1.0f && bits == tau_bits;
    const u32 tie_mask = __ballot_sync(0xffffffffu, tie);
    const u64 rank = ties_seen + __popc(tie_mask & ((1u << lane) - 1));
    const bool kept = v < hi && (bits > tau_bits || (tie && rank < n_ties));
    const u64 w = kept ? fixed(p) : 0;
    const u64 incl = warp_inclusive(w, lane);
    const u32 hit = __ballot_sync(0xffffffffu, w > 0 && acc + incl > target);
    const u32 any = __ballot_sync(0xffffffffu, w > 0);
    if (any != 0) last_kept = base + 31 - __clz(any);
    if (hit != 0) {
      if (lane == 0) *out = base + __ffs(hit) - 1;
      return;
    }
    acc += __shfl_sync(0xffffffffu, incl, 31);
    ties_seen += __popc(tie_mask);
  }
  // Rounding cannot leave the target past the warp's kept mass, but stay in range.
  if (lane == 0) *out = last_kept >= 0 ? last_kept : s.warp * span;
}

// ---- Greedy over many blocks: et_argmax ----

#define ARGMAX_THREADS 256
#define ARGMAX_WARPS (ARGMAX_THREADS / 32)
#define ARGMAX_LOADS 4  // loads in flight per thread

// A best entry so far. (-INFINITY, INT32_MAX) is below every real entry of the
// greedy order (ids are < 2^22), so it starts every reduction.
struct __align__(8) Best {
  float value;
  int id;
};

__device__ __forceinline__ void keep_better(float& b, int& bi, float c, int ci) {
  if (better(c, ci, b, bi)) {
    b = c;
    bi = ci;
  }
}

template <int DT>
__device__ __forceinline__ float load_as(const void* row, int v) {
  if (DT == DT_F32) return ((const float*)row)[v];
  if (DT == DT_BF16) return __uint_as_float((u32)((const uint16_t*)row)[v] << 16);
  return __half2float(((const __half*)row)[v]);
}

// This thread's best of ids lo + threadIdx.x + k * ARGMAX_THREADS below hi.
// `better` is a strict total order, so the order of the comparisons is free.
template <int DT>
__device__ __forceinline__ void thread_best(const void* row, int lo, int hi, float& b, int& bi) {
  for (int base = lo + (int)threadIdx.x; base < hi; base += ARGMAX_LOADS * ARGMAX_THREADS) {
    float x[ARGMAX_LOADS];
#pragma unroll
    for (int k = 0; k < ARGMAX_LOADS; ++k) {
      const int v = base + k * ARGMAX_THREADS;
      x[k] = v < hi ? load_as<DT>(row, v) : -INFINITY;
    }
#pragma unroll
    for (int k = 0; k < ARGMAX_LOADS; ++k) {
      const int v = base + k * ARGMAX_THREADS;
      keep_better(b, bi, x[k], v < hi ? v : INT32_MAX);
    }
  }
}

// Every thread's (b, bi) -> the block's best, in thread 0's (b, bi).
__device__ __forceinline__ void block_best(float& b, int& bi, Best* warp_best) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float c = __shfl_xor_sync(0xffffffffu, b, o);
    const int ci = __shfl_xor_sync(0xffffffffu, bi, o);
    keep_better(b, bi, c, ci);
  }
  if (lane == 0) warp_best[warp] = Best{b, bi};
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < ARGMAX_WARPS; ++w) keep_better(b, bi, warp_best[w].value, warp_best[w].id);
  }
}

// Greedy over one row: block k owns ids [k * chunk, min((k + 1) * chunk, vocab))
// (no block is empty) and writes its best to partials[k]; the last block to
// count itself in `done` merges the gridDim.x partials and writes the id to
// *out. `done` is 0 before the launch and wraps back to 0 with the last
// block's increment, so the next launch (stream-ordered after this one) finds
// it at 0 again. gridDim.x <= the partials' capacity (src/kernels/sample.rs).
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    et_argmax(const void* __restrict__ row, int dtype, int vocab, int chunk, Best* partials,
              u32* done, i64* __restrict__ out) {
  __shared__ Best warp_best[ARGMAX_WARPS];
  __shared__ bool last;
  const int lo = blockIdx.x * chunk, hi = min(lo + chunk, vocab);
  float b = -INFINITY;
  int bi = INT32_MAX;
  switch (dtype) {
    case DT_F32:
      thread_best<DT_F32>(row, lo, hi, b, bi);
      break;
    case DT_BF16:
      thread_best<DT_BF16>(row, lo, hi, b, bi);
      break;
    default:
      thread_best<DT_F16>(row, lo, hi, b, bi);
  }
  block_best(b, bi, warp_best);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = Best{b, bi};
    // The partial is visible device-wide before the count says it is there.
    __threadfence();
    last = atomicInc(done, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  b = -INFINITY;
  bi = INT32_MAX;
  for (int k = threadIdx.x; k < (int)gridDim.x; k += ARGMAX_THREADS) {
    // From L2: the other blocks wrote them.
    const uint2 p = __ldcg(reinterpret_cast<const uint2*>(partials) + k);
    keep_better(b, bi, __uint_as_float(p.x), (int)p.y);
  }
  // warp_best is free again: thread 0 read it before the barrier above.
  block_best(b, bi, warp_best);
  if (threadIdx.x == 0) *out = bi;
}
