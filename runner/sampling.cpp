#include "sampling.h"

#include "executorch_cuda.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace et_cuda_run {

namespace {

using HostSampleFn = decltype(&::et_cuda_sample_host);

struct HostSampler {
  HostSampleFn fn = nullptr;
  std::string problem;
};

// The folder of the binary holding this code (the runner, or a test).
std::string own_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_dir), &info) == 0 || info.dli_fname == nullptr) return ".";
  const std::string path(info.dli_fname);
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Found once: in the process already (our backend loaded the library, or it is linked in),
// else libexecutorch_cuda.so.0 beside the binary, in ../<libdir> or by its name, opened RTLD_LOCAL so that
// another backend's generated code never binds to its shims.
const HostSampler& host_sampler() {
  static HostSampler s;
  static std::once_flag once;
  std::call_once(once, [] {
    s.fn = reinterpret_cast<HostSampleFn>(dlsym(RTLD_DEFAULT, "et_cuda_sample_host"));
    if (s.fn != nullptr) return;
    const std::string dir = own_dir();
#ifdef ET_CUDA_RUN_LIBDIR
    const std::string dirs[] = {dir, dir + "/../" + ET_CUDA_RUN_LIBDIR};
#else
    const std::string dirs[] = {dir};
#endif
    std::string tried;
    std::vector<std::string> files;
    for (const std::string& d : dirs) files.push_back(d + "/libexecutorch_cuda.so.0");
    files.push_back("libexecutorch_cuda.so.0");  // the binary's RUNPATH, then the loader's path
    for (const std::string& file : files) {
      tried += (tried.empty() ? "" : ", ") + file;
      void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) continue;
      s.fn = reinterpret_cast<HostSampleFn>(dlsym(lib, "et_cuda_sample_host"));
      if (s.fn != nullptr) return;
    }
    s.problem = "the host sampler (et_cuda_sample_host of libexecutorch_cuda.so.0) was not found; tried " + tried;
  });
  return s;
}

int32_t dtype_code(RowType type) {
  switch (type) {
    case RowType::F32:
      return 6;
    case RowType::BF16:
      return 15;
    case RowType::F16:
      return 5;
  }
  return -1;
}

// The library's choice over a row, or kNoSampler when it is missing, -1 when there is
// nothing to choose or the parameters break the rule (the library refuses them).
int64_t library_pick(const void* row, size_t n, RowType type, double temperature, double top_p, uint64_t seed,
                     uint64_t step) {
  const HostSampler& s = host_sampler();
  if (s.fn == nullptr) return kNoSampler;
  if (n == 0) return -1;
  int64_t token = -1;
  if (s.fn(row, dtype_code(type), static_cast<int64_t>(n), temperature, top_p, seed, step, &token) != 0) return -1;
  return token;
}

std::vector<float> as_floats(const std::vector<double>& logits) {
  return std::vector<float>(logits.begin(), logits.end());
}

}  // namespace

const std::string& host_sampler_problem() {
  return host_sampler().problem;
}

int64_t argmax(const std::vector<double>& logits) {
  const std::vector<float> row = as_floats(logits);
  return library_pick(row.data(), row.size(), RowType::F32, 0, 1, 0, 0);
}

int64_t argmax_row(const uint8_t* row, size_t n, RowType type) {
  return library_pick(row, n, type, 0, 1, 0, 0);
}

std::string check_sampling(const SamplingParams& p) {
  char buf[160];
  const double t = p.temperature;
  if (t != 0 && !(std::isfinite(t) && t >= kMinTemperature && t <= kMaxTemperature)) {
    std::snprintf(buf, sizeof(buf), "temperature %g is outside the rule: 0 (greedy), or finite within [%g, %g]", t,
                  kMinTemperature, kMaxTemperature);
    return buf;
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    std::snprintf(buf, sizeof(buf), "top_p %g is outside (0, 1]", p.top_p);
    return buf;
  }
  return "";
}

SampleAt sample_at(bool row_on_device, bool kernel_dtype, bool device_sampler, bool host_asked, int64_t vocab) {
  if (!row_on_device || !kernel_dtype || !device_sampler || host_asked) return SampleAt::Host;
  return vocab > kMaxDeviceVocab ? SampleAt::HostTooLong : SampleAt::Device;
}

Sampler::Sampler(const SamplingParams& p) : params_(p) {}

int64_t Sampler::pick(const std::vector<double>& logits) {
  if (greedy()) return argmax(logits);
  // Outside the rule the library refuses the row (1/T would not be a finite float).
  if (!check_sampling(params_).empty()) return -1;
  const std::vector<float> row = as_floats(logits);
  return library_pick(row.data(), row.size(), RowType::F32, params_.temperature, params_.top_p, params_.seed,
                      take_step());
}

}  // namespace et_cuda_run
