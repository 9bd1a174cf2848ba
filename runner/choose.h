// The token loop's choices (--generate): the last row of a method's logits, where its token
// is chosen, and the choice itself, waited for (et_cuda_sample, or on the host) or queued
// (et_cuda_sample_async, the overlapped loop of generate.cpp).
#pragma once

#include "methods.h"
#include "sampling.h"

#include <string>
#include <vector>

namespace et_cuda_run {

// The last row of output 0 (logits [.., T, V]) and where its token is chosen: on the device
// when the backend left the logits there and can sample there (et_cuda_sample), unless the host
// was asked for (--sample-on-host) or the row is longer than the device sampler takes (said once
// on stderr).
struct LogitsRow {
  const uint8_t* src = nullptr;
  const DType* dtype = nullptr;
  ScalarType type = ScalarType::Float;
  size_t vocab = 0;
  bool device = false;  // in device memory
  bool kernel_dtype = false;  // float32, bfloat16 or float16
  SampleAt at = SampleAt::Host;
};

LogitsRow logits_row(const std::vector<EValue>& outputs, const std::string& model, const std::string& method,
                     bool host_asked);

// The checks of a chosen token (fails on none); the token.
int64_t checked_token(int64_t token, const std::string& model, const std::string& method);

// The next token from `row`: chosen on the device (only its id comes back) or, after reading the
// row (copied from the device when needed), by the host sampler. Both draw the same numbers (see
// sampling.h). Adds the time taken to `sampling_ms`; `on_device` says where it was chosen.
int64_t next_token(const LogitsRow& row, const std::string& model, const std::string& method, int32_t device_index,
                   Sampler& sampler, double& sampling_ms, bool& on_device);

// The choice next_token makes on the device, queued without a wait (et_cuda_sample_async): the
// ticket for sample_wait. The token also becomes the device's feed, what an execute given
// ET_CUDA_SAMPLED_TOKEN as its token id reads.
uint64_t queue_token(const LogitsRow& row, int32_t device_index, Sampler& sampler, double& sampling_ms);

// The token of a queued choice once it reached the host (et_cuda_sample_wait), checked as
// next_token's; adds the wait to `sampling_ms`.
int64_t wait_token(uint64_t ticket, int32_t device_index, const std::string& model, const std::string& method,
                   double& sampling_ms);

}  // namespace et_cuda_run
