// The CUDA driver through libcuda.so.1 (dlopen'ed; declared in backend.h): the probe
// (exit 77 without a device), waiting for the device, and --mem's samples of device memory.
#include "backend.h"

#include "common.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace et_cuda_run {

// ---------------------------------------------------------------- CUDA driver

DriverInfo probe_driver() {
  DriverInfo info;
  dlerror();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    info.problem = std::string("no CUDA driver (") + (why ? why : "libcuda.so.1 cannot be opened") + ")";
    return info;
  }
  info.loaded = true;
  using IntFn = int (*)(int*);
  auto get_version = reinterpret_cast<IntFn>(dlsym(lib, "cuDriverGetVersion"));
  auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<IntFn>(dlsym(lib, "cuDeviceGetCount"));
  auto error_name = reinterpret_cast<int (*)(int, const char**)>(dlsym(lib, "cuGetErrorName"));
  if (get_version != nullptr && get_version(&info.version) != 0) info.version = 0;
  if (init == nullptr || count == nullptr) {
    info.problem = "libcuda.so.1 lacks cuInit/cuDeviceGetCount";
    return info;
  }
  auto name = [&](int rc) {
    const char* s = nullptr;
    if (error_name != nullptr && error_name(rc, &s) == 0 && s != nullptr) return std::string(s);
    return "CUresult " + std::to_string(rc);
  };
  if (const int rc = init(0); rc != 0) {
    info.problem = "cuInit failed: " + name(rc);
    return info;
  }
  if (const int rc = count(&info.device_count); rc != 0) {
    info.device_count = 0;
    info.problem = "cuDeviceGetCount failed: " + name(rc);
    return info;
  }
  if (info.device_count <= 0) info.problem = "the CUDA driver reports no device";
  // The library stays loaded: the backend uses the same driver.
  return info;
}

std::string driver_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

void require_cuda() {
  static bool checked = false;
  if (checked) return;
  const DriverInfo info = probe_driver();
  if (info.device_count <= 0) no_cuda(info.problem);
  checked = true;
}

// ---------------------------------------------------------------- the driver's context

namespace {

// libcuda.so.1 (opened once, never closed) and the entry points that make a primary context
// current; `lib` or a function is null when the driver or the symbol is missing.
struct DriverContext {
  void* lib = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*ctx_get)(void**) = nullptr;
  int (*retain)(void**, int) = nullptr;
  int (*set_current)(void*) = nullptr;
  bool complete() const { return device_get && ctx_get && retain && set_current; }
};

const DriverContext& driver_context() {
  static const DriverContext d = [] {
    DriverContext c;
    c.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (c.lib == nullptr) return c;
    c.device_get = reinterpret_cast<int (*)(int*, int)>(dlsym(c.lib, "cuDeviceGet"));
    c.ctx_get = reinterpret_cast<int (*)(void**)>(dlsym(c.lib, "cuCtxGetCurrent"));
    c.retain = reinterpret_cast<int (*)(void**, int)>(dlsym(c.lib, "cuDevicePrimaryCtxRetain"));
    c.set_current = reinterpret_cast<int (*)(void*)>(dlsym(c.lib, "cuCtxSetCurrent"));
    return c;
  }();
  return d;
}

// Makes `ordinal`'s primary context current on this thread when no context is (the primary
// context is the one both backends use: the runtime API's and this project's). Returns 0 or
// the failing CUresult; `d` must be complete().
int make_primary_current(const DriverContext& d, int32_t ordinal) {
  void* current = nullptr;
  if (d.ctx_get(&current) == 0 && current != nullptr) return 0;
  int dev = 0;
  void* ctx = nullptr;
  int rc = d.device_get(&dev, ordinal);
  if (rc == 0) rc = d.retain(&ctx, dev);
  if (rc == 0) rc = d.set_current(ctx);
  return rc;
}

}  // namespace

// ---------------------------------------------------------------- waiting for the GPU

bool synchronize_device() {
  // Resolved once: cuCtxSynchronize on the primary context of device 0 (the one both
  // backends use), made current on this thread when none is.
  static int (*const ctx_sync)() = []() -> int (*)() {
    const DriverContext& d = driver_context();
    if (d.lib == nullptr || !d.complete()) return nullptr;
    auto sync = reinterpret_cast<int (*)()>(dlsym(d.lib, "cuCtxSynchronize"));
    if (sync == nullptr || make_primary_current(d, 0) != 0) return nullptr;
    return sync;
  }();
  return ctx_sync != nullptr && ctx_sync() == 0;
}

// ---------------------------------------------------------------- --mem

namespace {

struct MemState {
  bool enabled = false;
  int32_t device = 0;
  bool started = false;
  std::string problem;  // why there are no figures ("" when fine)
  int (*get_info)(size_t*, size_t*) = nullptr;
  size_t total = 0, baseline = 0, after_load = 0, peak = 0, last = 0;
  int samples = 0;
  bool have_load = false;
};

MemState g_mem;

// The driver's entry points, the device's primary context made current, the baseline.
void mem_start() {
  g_mem.started = true;
  const DriverContext& d = driver_context();
  if (d.lib == nullptr) {
    g_mem.problem = "libcuda.so.1 cannot be opened";
    return;
  }
  g_mem.get_info = reinterpret_cast<int (*)(size_t*, size_t*)>(dlsym(d.lib, "cuMemGetInfo_v2"));
  if (!d.complete() || g_mem.get_info == nullptr) {
    g_mem.problem = "libcuda.so.1 lacks cuDeviceGet/cuCtxGetCurrent/cuDevicePrimaryCtxRetain/cuCtxSetCurrent/cuMemGetInfo_v2";
    g_mem.get_info = nullptr;
    return;
  }
  if (const int rc = make_primary_current(d, g_mem.device); rc != 0) {
    g_mem.problem = "cannot make device " + std::to_string(g_mem.device) + "'s primary context current: CUresult " +
                    std::to_string(rc);
    g_mem.get_info = nullptr;
    return;
  }
  size_t free_bytes = 0;
  if (const int rc = g_mem.get_info(&free_bytes, &g_mem.total); rc != 0) {
    g_mem.problem = "cuMemGetInfo failed: CUresult " + std::to_string(rc);
    g_mem.get_info = nullptr;
    return;
  }
  g_mem.baseline = g_mem.total - free_bytes;
  g_mem.peak = g_mem.last = g_mem.baseline;
}

double mib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

double mib_over(size_t used, size_t base) {
  return used >= base ? mib(used - base) : -mib(base - used);
}

}  // namespace

void mem_enable(int32_t device) {
  g_mem.enabled = true;
  g_mem.device = device;
}

void mem_sample(bool after_load) {
  if (!g_mem.enabled) return;
  if (!g_mem.started) {
    require_cuda();
    mem_start();
    return;  // the baseline
  }
  if (g_mem.get_info == nullptr) return;
  size_t free_bytes = 0, total = 0;
  if (g_mem.get_info(&free_bytes, &total) != 0) return;
  const size_t used = total - free_bytes;
  g_mem.last = used;
  if (used > g_mem.peak) g_mem.peak = used;
  if (after_load) {
    g_mem.after_load = used;
    g_mem.have_load = true;
  }
  ++g_mem.samples;
}

bool mem_used_bytes(size_t& used) {
  if (!g_mem.started || g_mem.get_info == nullptr) return false;
  size_t free_bytes = 0, total = 0;
  if (g_mem.get_info(&free_bytes, &total) != 0) return false;
  used = total - free_bytes;
  return true;
}

void mem_report() {
  if (!g_mem.enabled) return;
  if (!g_mem.started) {
    std::printf("mem: n/a (nothing was loaded onto the device)\n");
    return;
  }
  if (g_mem.get_info == nullptr) {
    std::printf("mem: n/a (%s)\n", sanitize(g_mem.problem).c_str());
    return;
  }
  mem_sample();
  std::printf("mem: device=%d total_mib=%.1f context_mib=%.1f loaded_mib=%.1f peak_mib=%.1f end_mib=%.1f samples=%d\n",
              g_mem.device, mib(g_mem.total), mib(g_mem.baseline),
              g_mem.have_load ? mib_over(g_mem.after_load, g_mem.baseline) : 0.0, mib_over(g_mem.peak, g_mem.baseline),
              mib_over(g_mem.last, g_mem.baseline), g_mem.samples);
}

void mem_report_if_started() {
  if (g_mem.enabled && g_mem.started) mem_report();
}

}  // namespace et_cuda_run
