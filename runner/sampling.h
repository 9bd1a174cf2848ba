// Choosing the next token from a row of logits, on the host: greedy (the
// argmax, as torch.argmax) or sampled with a temperature and top-p, from a
// seeded generator so that a run is the same run to run for a fixed seed.
//
// No ExecuTorch here: the tests link this file alone.
#pragma once

#include <cstdint>
#include <vector>

namespace et_cuda_run {

// xoshiro256** (Blackman and Vigna), its state filled from the seed by
// splitmix64: the same sequence on every platform for a given seed.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  // Uniform in [0, 1), 53 random bits.
  double uniform();

  // One step of splitmix64 on `state` (exposed for the tests).
  static uint64_t splitmix64(uint64_t& state);

 private:
  uint64_t s_[4];
};

struct SamplingParams {
  double temperature = 0;  // 0: greedy; > 0: sample
  double top_p = 1;        // in (0, 1]: sample among the most likely tokens whose mass reaches top_p
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  bool greedy() const { return params_.temperature == 0; }
  // The next token of `logits` (one row of V values). Greedy: the first
  // maximum, NaN counting as the largest. Sampled: softmax(logits / T), NaN
  // entries never chosen, restricted to the smallest set of most likely
  // tokens (ties by lower id) whose probability reaches top_p, one draw.
  // Returns -1 when there is nothing to sample (every entry NaN or -inf).
  int64_t pick(const std::vector<double>& logits);

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<double> p_;
  std::vector<uint32_t> order_;
};

// The argmax as torch.argmax: the first maximum, NaN counting as the largest.
int64_t argmax(const std::vector<double>& logits);

}  // namespace et_cuda_run
