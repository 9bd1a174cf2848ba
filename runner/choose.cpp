#include "choose.h"

#include "backend.h"

#include <cstdio>

namespace et_cuda_run {

LogitsRow logits_row(const std::vector<EValue>& outputs, const std::string& model, const std::string& method,
                     bool host_asked) {
  if (outputs.empty() || !outputs[0].isTensor()) fail(model, "--generate: '" + method + "' returned no logits tensor");
  const auto& t = outputs[0].toTensor();
  LogitsRow r;
  r.dtype = dtype_by_type(t.scalar_type());
  if (r.dtype == nullptr || !is_floating(t.scalar_type()) || t.dim() < 1) {
    fail(model, "--generate: '" + method + "' returned " + dtype_name(t.scalar_type()) + " " + shape_str(t.sizes()) +
                    ", not float logits");
  }
  r.vocab = static_cast<size_t>(t.size(t.dim() - 1));
  const auto numel = static_cast<size_t>(t.numel());
  if (r.vocab == 0 || numel < r.vocab) fail(model, "--generate: '" + method + "' returned empty logits");
  r.src = static_cast<const uint8_t*>(t.const_data_ptr()) + (numel - r.vocab) * r.dtype->size;
  r.device = is_device_pointer(t.const_data_ptr());
  r.type = t.scalar_type();
  r.kernel_dtype = r.type == ScalarType::Float || r.type == ScalarType::BFloat16 || r.type == ScalarType::Half;
  r.at = sample_at(r.device, r.kernel_dtype, can_sample_on_device(), host_asked, static_cast<int64_t>(r.vocab));
  static bool said_too_long = false;
  if (r.at == SampleAt::HostTooLong && !said_too_long) {
    std::fprintf(stderr,
                 "et_cuda_run: note: a row of %zu logits is longer than the device sampler takes (%lld): sampling on the "
                 "host\n",
                 r.vocab, static_cast<long long>(kMaxDeviceVocab));
    said_too_long = true;
  }
  return r;
}

int64_t checked_token(int64_t token, const std::string& model, const std::string& method) {
  if (token == kNoSampler) fail(model, "--generate: " + host_sampler_problem());
  if (token < 0) fail(model, "--generate: '" + method + "' returned logits that are all NaN or -inf: nothing to sample");
  return token;
}

int64_t next_token(const LogitsRow& row, const std::string& model, const std::string& method, int32_t device_index,
                   Sampler& sampler, double& sampling_ms, bool& on_device) {
  const double t0 = steady_ms();
  int64_t token = -1;
  on_device = row.at == SampleAt::Device;
  if (on_device) {
    const SamplingParams& p = sampler.params();
    const uint64_t step = sampler.greedy() ? 0 : sampler.take_step();
    token = sample_on_device(row.src, static_cast<int32_t>(row.type), static_cast<int64_t>(row.vocab), device_index,
                             p.temperature, p.top_p, p.seed, step);
  } else {
    std::vector<uint8_t> copy;
    const uint8_t* data = row.src;
    if (row.device) {
      copy.resize(row.vocab * row.dtype->size);
      copy_to_host(copy.data(), row.src, copy.size());
      data = copy.data();
    }
    if (sampler.greedy() && row.kernel_dtype) {
      // The same rule as argmax over doubles, read straight from the row.
      token = argmax_row(data, row.vocab,
                         row.type == ScalarType::Float      ? RowType::F32
                         : row.type == ScalarType::BFloat16 ? RowType::BF16
                                                            : RowType::F16);
    } else {
      std::vector<double> logits(row.vocab);
      for (size_t v = 0; v < row.vocab; ++v) logits[v] = element(data + v * row.dtype->size, row.dtype->type);
      token = sampler.pick(logits);
    }
  }
  sampling_ms += steady_ms() - t0;
  return checked_token(token, model, method);
}

uint64_t queue_token(const LogitsRow& row, int32_t device_index, Sampler& sampler, double& sampling_ms) {
  const double t0 = steady_ms();
  const SamplingParams& p = sampler.params();
  const uint64_t step = sampler.greedy() ? 0 : sampler.take_step();
  const uint64_t ticket = sample_async_on_device(row.src, static_cast<int32_t>(row.type),
                                                 static_cast<int64_t>(row.vocab), device_index, p.temperature,
                                                 p.top_p, p.seed, step);
  sampling_ms += steady_ms() - t0;
  return ticket;
}

int64_t wait_token(uint64_t ticket, int32_t device_index, const std::string& model, const std::string& method,
                   double& sampling_ms) {
  const double t0 = steady_ms();
  const int64_t token = sample_wait(device_index, ticket);
  sampling_ms += steady_ms() - t0;
  return checked_token(token, model, method);
}

}  // namespace et_cuda_run
