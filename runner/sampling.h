// Choosing the next token from a row of logits: greedy (the argmax, as
// torch.argmax) or sampled with a temperature and top-p. The choice itself is the
// library's (et_cuda_sample_host: the algorithm of its device sampler, et_cuda_sample,
// run on the host), so a row gives the same token on the host and on the device, except
// where the two exp() results differ by an ulp right at a boundary. This file holds the
// runner's side: the flags' rule, where a row is sampled, and the draw counter.
//
// No ExecuTorch here: the tests link this file with the library alone. The library is
// found in the process (our backend loads it), else opened beside the binary (RTLD_LOCAL:
// with another backend, its generated code never binds to our shims).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace et_cuda_run {

struct SamplingParams {
  double temperature = 0;  // 0: greedy; in [kMinTemperature, kMaxTemperature]: sample
  double top_p = 1;        // in (0, 1]: sample among the most likely tokens whose mass reaches top_p
  uint64_t seed = 0;
};

// The temperature rule, the same as the library's device sampler (et_cuda_sample): 0 is
// greedy; any other temperature must be finite and within [1e-6, 1e6]. (Past these bounds
// 1/T overflows or underflows a float: the host sampler's weights became NaN below about
// 3e-39 and uniform above about 1e45, where the device sampler turned greedy.)
constexpr double kMinTemperature = 1e-6;
constexpr double kMaxTemperature = 1e6;
// The largest row the device sampler takes (et_cuda_sample: 1 <= vocab <= 2^22); a longer
// row is sampled on the host.
constexpr int64_t kMaxDeviceVocab = int64_t{1} << 22;

// Where a row of logits is sampled. On the device (et_cuda_sample) only when the row is
// device memory of a dtype the kernel reads (float32, bfloat16, float16), the backend has
// the device sampler, the host was not asked for (--sample-on-host), and the row fits the
// device sampler (at most kMaxDeviceVocab); HostTooLong is the host because of the length.
enum class SampleAt { Device, Host, HostTooLong };
SampleAt sample_at(bool row_on_device, bool kernel_dtype, bool device_sampler, bool host_asked, int64_t vocab);

// "" when `p` follows the rules (the temperature rule above, top_p in (0, 1]), else a
// one-line message naming the value and the range.
std::string check_sampling(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  bool greedy() const { return params_.temperature == 0; }
  const SamplingParams& params() const { return params_; }
  // The step of the next draw (counts the sampled tokens), then advances it:
  // for a caller that samples on the device with the same sequence.
  uint64_t take_step() { return step_++; }
  // The next token of `logits` (one row of V values, read as float32). Greedy: the first
  // maximum, NaN counting as the largest. Sampled: see the top of this file;
  // NaN and -inf never chosen. Returns -1 when there is nothing to sample
  // (every entry NaN or -inf), or when the parameters break check_sampling;
  // kNoSampler when the library's host sampler is missing (host_sampler_problem()).
  int64_t pick(const std::vector<double>& logits);

 private:
  SamplingParams params_;
  uint64_t step_ = 0;
};

// What pick, argmax and argmax_row return when the library's host sampler cannot be found.
constexpr int64_t kNoSampler = -2;
// Why, or "" when it was found (or not looked for yet).
const std::string& host_sampler_problem();

// The argmax as torch.argmax: the first maximum, NaN counting as the largest.
int64_t argmax(const std::vector<double>& logits);
// The same over `n` logits stored as `type` at `row`, without converting the row first (greedy
// decoding reads one row of a 100K+ vocabulary per token).
enum class RowType { F32, BF16, F16 };
int64_t argmax_row(const uint8_t* row, size_t n, RowType type);

}  // namespace et_cuda_run
