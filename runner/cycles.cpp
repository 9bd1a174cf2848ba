#include "cycles.h"

#include "backend.h"
#include "common.h"
#include "methods.h"

#include <executorch/extension/module/module.h>

#include <cstdio>
#include <fstream>
#include <vector>

namespace et_cuda_run {

namespace {

using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::Program;

// Resident set size in bytes (/proc/self/statm), 0 when unknown.
uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * 4096;
}

// One cycle: the program loaded, the method run once on zero inputs, everything destroyed.
void one_cycle(const Args& a, const std::string& method, int32_t device_index) {
  Module module(a.model, a.data, a.load_mode == "mmap" ? Module::LoadMode::Mmap : Module::LoadMode::File);
  const Error err = module.load(Program::Verification::InternalConsistency);
  if (err != Error::Ok) fail(a.model, "cannot load program: " + describe(err));
  const auto meta = method_meta(module, a.model, method);
  std::vector<std::vector<uint8_t>> buffers;
  InputSet inputs;
  zero_inputs(meta, a.model, method, buffers, inputs, false, device_index);
  load_method(module, a.model, method);
  const std::vector<executorch::runtime::EValue> outputs = execute(module, a.model, method, inputs.values);
  wait_for_gpu(outputs, a.model, method);
}

}  // namespace

bool run_load_cycles(const Args& a, const std::string& method, int32_t device_index) {
  const int n = a.load_cycles;
  const int warm = std::max(1, std::min(10, n / 10));
  mem_enable(device_index);
  mem_sample();
  size_t base_used = 0, used = 0;
  uint64_t base_rss = 0;
  EtCudaStats s{};
  bool clean = true;
  for (int c = 0; c < n; ++c) {
    one_cycle(a, method, device_index);
    const bool have_stats = stats_snapshot(s);
    mem_used_bytes(used);
    const uint64_t rss = rss_bytes();
    if (c <= warm) {
      base_used = used;
      base_rss = rss;
    }
    if (have_stats && (s.live_allocs != 0 || s.generated_modules != 0)) clean = false;
    if (c < 3 || c % std::max(1, n / 20) == 0 || c + 1 == n) {
      std::printf("load-cycle %d: own live allocs %s, generated-code modules %s, device used %+.1f KiB, RSS %+.1f KiB\n",
                  c, have_stats ? std::to_string(s.live_allocs).c_str() : "n/a",
                  have_stats ? std::to_string(s.generated_modules).c_str() : "n/a",
                  (static_cast<double>(used) - static_cast<double>(base_used)) / 1024.0,
                  (static_cast<double>(rss) - static_cast<double>(base_rss)) / 1024.0);
    }
  }
  const double k = n > warm + 1 ? static_cast<double>(n - 1 - warm) : 1.0;
  std::printf(
      "load-cycles: %d cycles of %s (%s); per cycle from cycle %d: device memory %+.3f KiB, RSS %+.3f KiB; "
      "own live allocs after the last %s, generated-code modules %s\n",
      n, a.model.c_str(), method.c_str(), warm,
      (static_cast<double>(used) - static_cast<double>(base_used)) / 1024.0 / k,
      (static_cast<double>(rss_bytes()) - static_cast<double>(base_rss)) / 1024.0 / k,
      backend_has_stats() ? std::to_string(s.live_allocs).c_str() : "n/a",
      backend_has_stats() ? std::to_string(s.generated_modules).c_str() : "n/a");
  return clean;
}

}  // namespace et_cuda_run
