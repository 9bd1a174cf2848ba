#include "backend.h"

#include "common.h"

#include <executorch/runtime/backend/interface.h>

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>

#ifndef ET_CUDA_RUN_LIBDIR
#define ET_CUDA_RUN_LIBDIR "lib"
#endif

namespace et_cuda_run {

namespace {

using executorch::runtime::BackendOption;
using executorch::runtime::Error;

constexpr const char* kBackendFile = "libexecutorch_cuda_backend.so";

// This project's C API, resolved in the backend library (null when absent).
struct Extras {
  decltype(&::et_cuda_version) version = nullptr;
  decltype(&::et_cuda_last_error) last_error = nullptr;
  decltype(&::et_cuda_stats) stats = nullptr;
  decltype(&::et_cuda_alloc_device) alloc_device = nullptr;
  decltype(&::et_cuda_free_device) free_device = nullptr;
  decltype(&::et_cuda_memcpy) memcpy = nullptr;
  decltype(&::et_cuda_is_device_pointer) is_device_pointer = nullptr;
  decltype(&::et_cuda_sample) sample = nullptr;
  decltype(&::et_cuda_sample_async) sample_async = nullptr;
  decltype(&::et_cuda_sample_wait) sample_wait = nullptr;
  decltype(&::et_cuda_sample_fed) sample_fed = nullptr;

  bool has_memory() const {
    return alloc_device && free_device && memcpy && is_device_pointer && last_error;
  }
};

Extras g_extras;
std::string g_backend_path;
bool g_backend_loaded = false;

std::string last_error() {
  return g_extras.last_error ? g_extras.last_error() : std::string("unknown error");
}

// ------------------------------------------------ the CUDA runtime, for other backends

// The few CUDA runtime entry points --device-io needs (cudaError_t is an int enum).
struct Cudart {
  bool tried = false;
  std::string problem;
  int (*malloc)(void**, size_t) = nullptr;
  int (*free)(void*) = nullptr;
  int (*memcpy)(void*, const void*, size_t, int) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*pointer_attributes)(void*, const void*) = nullptr;
  const char* (*error_string)(int) = nullptr;

  bool ok() const {
    return malloc && free && memcpy && set_device && pointer_attributes;
  }
  std::string error(int code) const {
    return error_string ? std::string(error_string(code)) : "cudaError " + std::to_string(code);
  }
};

constexpr int kCudaMemcpyDefault = 4;  // cudaMemcpyDefault: direction from the pointers (unified addressing)
constexpr int kCudaMemoryTypeDevice = 2;
constexpr int kCudaMemoryTypeManaged = 3;

Cudart& cudart() {
  static Cudart c;
  if (c.tried) return c;
  c.tried = true;
  void* lib = nullptr;
  for (const char* name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    c.problem = "the backend library has no et_cuda_* device memory functions and no CUDA runtime "
                "(libcudart.so.13, libcudart.so.12) could be opened";
    return c;
  }
  c.malloc = reinterpret_cast<int (*)(void**, size_t)>(dlsym(lib, "cudaMalloc"));
  c.free = reinterpret_cast<int (*)(void*)>(dlsym(lib, "cudaFree"));
  c.memcpy = reinterpret_cast<int (*)(void*, const void*, size_t, int)>(dlsym(lib, "cudaMemcpy"));
  c.set_device = reinterpret_cast<int (*)(int)>(dlsym(lib, "cudaSetDevice"));
  c.pointer_attributes = reinterpret_cast<int (*)(void*, const void*)>(dlsym(lib, "cudaPointerGetAttributes"));
  c.error_string = reinterpret_cast<const char* (*)(int)>(dlsym(lib, "cudaGetErrorString"));
  if (!c.ok()) c.problem = "the CUDA runtime library lacks cudaMalloc/cudaFree/cudaMemcpy/cudaPointerGetAttributes";
  return c;
}

Cudart& require_cudart(const std::string& where) {
  Cudart& c = cudart();
  if (!c.ok()) fail(where, c.problem);
  return c;
}

// ------------------------------------------------ the library

std::string exe_dir() {
  std::array<char, PATH_MAX> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return ".";
  return dir_of(std::string(buf.data(), static_cast<size_t>(n)));
}

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

template <typename F>
void resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

BackendSearch find_default_backend() {
  BackendSearch s;
  const std::string dir = exe_dir();
  for (const std::string& d : {dir, dir + "/../" + ET_CUDA_RUN_LIBDIR}) {
    s.searched += (s.searched.empty() ? "" : ", ") + d;
    if (s.found.empty() && is_file(d + "/" + kBackendFile)) s.found = d + "/" + kBackendFile;
  }
  return s;
}

#ifdef ET_CUDA_RUN_LINKED_BACKEND
// The backend is linked into the runner (an in-tree build on a static ExecuTorch).
void load_backend(const std::string& path) {
  if (!path.empty()) {
    usage_error("--backend-lib", "this et_cuda_run has the backend linked in (a static ExecuTorch build)");
  }
  if (g_backend_loaded) return;
  g_backend_loaded = true;
  g_backend_path = "(linked in)";
  g_extras = Extras{&::et_cuda_version, &::et_cuda_last_error,  &::et_cuda_stats,
                    &::et_cuda_alloc_device, &::et_cuda_free_device, &::et_cuda_memcpy,
                    &::et_cuda_is_device_pointer, &::et_cuda_sample,  &::et_cuda_sample_async,
                    &::et_cuda_sample_wait,       &::et_cuda_sample_fed};
}
#else
void load_backend(const std::string& path) {
  if (g_backend_loaded) return;
  std::string file = path;
  if (file.empty()) {
    const BackendSearch s = find_default_backend();
    if (s.found.empty()) {
      fail(kBackendFile, "not found in " + s.searched + " (pass the backend library with --backend-lib PATH)");
    }
    file = s.found;
  }
  if (!is_file(file)) fail(file, std::string("cannot open the backend library: ") + std::strerror(ENOENT));
  // A name without a slash would make dlopen search the library path instead.
  if (file.find('/') == std::string::npos) file = "./" + file;
  if (executorch::runtime::get_backend_class("CudaBackend") != nullptr) {
    fail(file, "\"CudaBackend\" is registered already: a second backend cannot be loaded into this process");
  }
  dlerror();
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    fail(file, std::string("cannot load the backend library: ") + (why ? why : "unknown error"));
  }
  g_backend_loaded = true;
  char real[PATH_MAX];
  g_backend_path = realpath(file.c_str(), real) ? std::string(real) : file;
  take_logged_errors();  // registration messages are reported below if it failed
  if (executorch::runtime::get_backend_class("CudaBackend") == nullptr) {
    const std::string logged = take_logged_errors();
    fail(g_backend_path, "the backend library did not register \"CudaBackend\"" +
                             (logged.empty() ? std::string() : " (" + logged + ")"));
  }
  resolve(lib, "et_cuda_version", g_extras.version);
  resolve(lib, "et_cuda_last_error", g_extras.last_error);
  resolve(lib, "et_cuda_stats", g_extras.stats);
  resolve(lib, "et_cuda_alloc_device", g_extras.alloc_device);
  resolve(lib, "et_cuda_free_device", g_extras.free_device);
  resolve(lib, "et_cuda_memcpy", g_extras.memcpy);
  resolve(lib, "et_cuda_is_device_pointer", g_extras.is_device_pointer);
  resolve(lib, "et_cuda_sample", g_extras.sample);
  resolve(lib, "et_cuda_sample_async", g_extras.sample_async);
  resolve(lib, "et_cuda_sample_wait", g_extras.sample_wait);
  resolve(lib, "et_cuda_sample_fed", g_extras.sample_fed);
}
#endif

const std::string& backend_path() {
  return g_backend_path;
}

std::string backend_library_version() {
  return g_extras.version ? std::string(g_extras.version()) : std::string();
}

bool backend_has_stats() {
  return g_extras.stats != nullptr;
}

bool stats_snapshot(EtCudaStats& s) {
  s = EtCudaStats{};
  return g_extras.stats != nullptr && g_extras.stats(nullptr, &s) == ET_CUDA_STATUS_OK;
}

void print_stats() {
  if (g_extras.stats == nullptr) {
    std::printf("stats: n/a (the backend library %s has no et_cuda_stats)\n", sanitize(g_backend_path).c_str());
    return;
  }
  EtCudaStats s{};
  if (g_extras.stats(nullptr, &s) != ET_CUDA_STATUS_OK) fail("--stats", last_error());
  std::printf(
      "stats: executes=%llu host_waits=%llu driver_allocs=%llu pool_allocs=%llu pool_frees=%llu live_allocs=%llu "
      "live_bytes=%llu bytes_htod=%llu bytes_dtoh=%llu bytes_dtod=%llu execute_host_ns=%llu run_host_ns=%llu "
      "graph_captures=%llu graph_replays=%llu graph_fallbacks=%llu shared_constant_bytes=%llu\n",
      (unsigned long long)s.executes, (unsigned long long)s.host_waits, (unsigned long long)s.driver_allocs,
      (unsigned long long)s.pool_allocs, (unsigned long long)s.pool_frees, (unsigned long long)s.live_allocs,
      (unsigned long long)s.live_bytes, (unsigned long long)s.bytes_htod, (unsigned long long)s.bytes_dtoh,
      (unsigned long long)s.bytes_dtod, (unsigned long long)s.execute_host_ns, (unsigned long long)s.run_host_ns,
      (unsigned long long)s.graph_captures, (unsigned long long)s.graph_replays,
      (unsigned long long)s.graph_fallbacks, (unsigned long long)s.shared_constant_bytes);
}

void print_load_phases() {
  EtCudaStats s{};
  if (!stats_snapshot(s)) return;
  if (s.load_fetch_ns + s.load_so_open_ns + s.load_container_ns + s.load_upload_ns == 0) return;
  const double upload_s = static_cast<double>(s.load_upload_ns) / 1e9;
  std::printf(
      "load_phases: fetch_ms=%.1f so_open_ms=%.1f container_ms=%.1f upload_ms=%.1f upload_bytes=%llu "
      "upload_gbps=%.2f staging=%s peak_host_staging_bytes=%llu verify_ms=%.1f\n",
      static_cast<double>(s.load_fetch_ns) / 1e6, static_cast<double>(s.load_so_open_ns) / 1e6,
      static_cast<double>(s.load_container_ns) / 1e6, static_cast<double>(s.load_upload_ns) / 1e6,
      (unsigned long long)s.load_upload_bytes,
      upload_s > 0 ? static_cast<double>(s.load_upload_bytes) / upload_s / 1e9 : 0.0,
      s.load_staging_bytes > 0 ? "pinned" : "pageable", (unsigned long long)s.load_staging_bytes,
      static_cast<double>(s.load_verify_ns) / 1e6);
}

// ---------------------------------------------------------------- device memory

void* device_alloc(int32_t device, size_t nbytes) {
  void* p = nullptr;
  if (g_extras.has_memory()) {
    if (g_extras.alloc_device(device, nbytes, &p) != ET_CUDA_STATUS_OK) {
      fail("--device-io", "cannot allocate " + std::to_string(nbytes) + " bytes of device memory: " + last_error());
    }
    return p;
  }
  Cudart& c = require_cudart("--device-io");
  int rc = c.set_device(device);
  if (rc == 0) rc = c.malloc(&p, nbytes);
  if (rc != 0) {
    fail("--device-io", "cannot allocate " + std::to_string(nbytes) + " bytes of device memory: " + c.error(rc));
  }
  return p;
}

void device_free(void* p) noexcept {
  if (p == nullptr) return;
  if (g_extras.has_memory()) {
    g_extras.free_device(p);
  } else if (cudart().ok()) {
    cudart().free(p);
  }
}

namespace {

// One copy between host and device memory (either way: the backend or the runtime API looks
// the pointers up); `context` and `direction` name it in the failure message.
void copy_bytes(void* dst, const void* src, size_t nbytes, const char* context, const char* direction) {
  if (nbytes == 0) return;
  if (g_extras.has_memory()) {
    if (g_extras.memcpy(nullptr, dst, src, nbytes) != ET_CUDA_STATUS_OK) {
      fail(context, std::string(direction) + " copy failed: " + last_error());
    }
    return;
  }
  Cudart& c = require_cudart(context);
  const int rc = c.memcpy(dst, src, nbytes, kCudaMemcpyDefault);
  if (rc != 0) fail(context, std::string(direction) + " copy failed: " + c.error(rc));
}

}  // namespace

void copy_to_device(void* dst, const void* src, size_t nbytes) {
  copy_bytes(dst, src, nbytes, "--device-io", "host to device");
}

void copy_to_host(void* dst, const void* src, size_t nbytes) {
  copy_bytes(dst, src, nbytes, "output", "device to host");
}

bool can_sample_on_device() {
  return g_extras.sample != nullptr && g_extras.last_error != nullptr;
}

int64_t sample_on_device(const void* logits, int32_t dtype, int64_t vocab, int32_t device, double temperature,
                         double top_p, uint64_t seed, uint64_t step) {
  int64_t token = -1;
  if (g_extras.sample(logits, dtype, vocab, device, temperature, top_p, seed, step, &token) != ET_CUDA_STATUS_OK) {
    fail("--generate", "sampling on the device failed: " + last_error());
  }
  return token;
}

bool can_sample_async() {
  return can_sample_on_device() && g_extras.sample_async != nullptr && g_extras.sample_wait != nullptr &&
         g_extras.sample_fed != nullptr;
}

uint64_t sample_async_on_device(const void* logits, int32_t dtype, int64_t vocab, int32_t device, double temperature,
                                double top_p, uint64_t seed, uint64_t step) {
  uint64_t ticket = 0;
  if (g_extras.sample_async(logits, dtype, vocab, device, temperature, top_p, seed, step, &ticket) !=
      ET_CUDA_STATUS_OK) {
    fail("--generate", "sampling on the device failed: " + last_error());
  }
  return ticket;
}

int64_t sample_wait(int32_t device, uint64_t ticket) {
  int64_t token = -1;
  if (g_extras.sample_wait(device, ticket, &token) != ET_CUDA_STATUS_OK) {
    fail("--generate", "waiting for a token chosen on the device failed: " + last_error());
  }
  return token;
}

bool sample_fed(int32_t device, uint64_t ticket) {
  bool fed = false;
  if (g_extras.sample_fed(device, ticket, &fed) != ET_CUDA_STATUS_OK) {
    fail("--generate", "asking whether a step took the token chosen on the device failed: " + last_error());
  }
  return fed;
}

bool is_device_pointer(const void* p) {
  if (g_extras.is_device_pointer != nullptr) {
    bool on_device = false;
    return g_extras.is_device_pointer(p, &on_device) == ET_CUDA_STATUS_OK && on_device;
  }
  Cudart& c = cudart();
  if (!c.ok()) return false;  // no CUDA runtime: it cannot be device memory we can read
  // cudaPointerAttributes starts with `int type`; the struct has grown across
  // CUDA versions, so the buffer is larger than any of them.
  alignas(16) unsigned char attributes[256] = {};
  if (c.pointer_attributes(attributes, p) != 0) return false;
  int type = 0;
  std::memcpy(&type, attributes, sizeof(type));
  return type == kCudaMemoryTypeDevice || type == kCudaMemoryTypeManaged;
}

// ---------------------------------------------------------------- options

void set_backend_option(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) usage_error("--option " + arg, "expected key=value");
  const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
  BackendOption opt;
  if (key.size() >= sizeof(opt.key)) usage_error("--option " + arg, "key longer than 63 characters");
  std::memcpy(opt.key, key.c_str(), key.size() + 1);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value == "true" || value == "false") {
    opt.value = value == "true";
  } else if (!value.empty() && *end == '\0' && errno == 0 && n >= INT_MIN && n <= INT_MAX) {
    opt.value = static_cast<int>(n);
  } else {
    std::array<char, executorch::runtime::kMaxOptionValueLength> s{};
    if (value.size() >= s.size()) usage_error("--option " + arg, "value longer than 255 characters");
    std::memcpy(s.data(), value.c_str(), value.size());
    opt.value = s;
  }
  const Error err = executorch::runtime::set_option("CudaBackend", {&opt, 1});
  if (err != Error::Ok) fail("--option " + arg, describe(err));
}

}  // namespace et_cuda_run
