// The backend library and the CUDA pieces the runner touches directly.
//
// et_cuda_run links ExecuTorch only. The backend that registers "CudaBackend"
// is a shared library opened at start-up (dlopen RTLD_NOW | RTLD_GLOBAL, so
// that the AOTInductor .so files it loads later resolve the aoti_torch_*
// shims it exports): this project's libexecutorch_cuda_backend.so by default,
// or any other with --backend-lib (e.g. upstream ExecuTorch's C++ CUDA
// backend built as a shared library). Two backends cannot share a process:
// both register "CudaBackend".
//
// This project's extras (et_cuda_version, et_cuda_stats, device memory) are
// looked up with dlsym in the opened library and its dependencies; with
// another backend they are absent: counters print as n/a, and device memory
// for --device-io goes through the CUDA runtime (libcudart.so.13 or .12,
// dlopen'ed; the one the backend loaded, if it did).
#pragma once

#include <executorch_cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace et_cuda_run {

// Where the default backend library was looked for and found.
struct BackendSearch {
  std::string found;     // "" when not found
  std::string searched;  // "<dir1>, <dir2>" for the error message
};
BackendSearch find_default_backend();

// Opens the backend library (`path`, or the default when empty) and checks
// that it registered "CudaBackend". Once per process.
void load_backend(const std::string& path);

// The library opened by load_backend ("" before).
const std::string& backend_path();
// et_cuda_version() of the backend library, or "" when it has none.
std::string backend_library_version();
// Whether the backend library has this project's counters (et_cuda_stats).
bool backend_has_stats();
// Process-wide counters; false when the backend has none or cannot report them.
bool stats_snapshot(EtCudaStats& s);
// The counters, for --stats (fails when the backend has them but the call fails).
void print_stats();
// One line with the library's load phases (named-data reads, .so open, containers, weight upload).
void print_load_phases();

// ---------------------------------------------------------------- device memory

// Device memory for --device-io and copies of outputs left on the device:
// through this project's library when it is loaded, else the CUDA runtime.
void* device_alloc(int32_t device, size_t nbytes);
void device_free(void* p) noexcept;
// Host to device; returns after the copy.
void copy_to_device(void* dst, const void* src, size_t nbytes);
// Device to host; waits for all work queued before it (legacy default stream).
void copy_to_host(void* dst, const void* src, size_t nbytes);
// Whether p is device memory (false when no CUDA library can tell).
bool is_device_pointer(const void* p);
// Whether the backend library has et_cuda_sample (this project's library does).
bool can_sample_on_device();
// The next token chosen on the device from `vocab` logits of `dtype` (c10::ScalarType code) at
// `logits` (device memory of cuda:`device`): et_cuda_sample; one host wait, 8 bytes read back.
// -1: nothing to sample.
int64_t sample_on_device(const void* logits, int32_t dtype, int64_t vocab, int32_t device, double temperature,
                         double top_p, uint64_t seed, uint64_t step);
// Whether the backend library also has et_cuda_sample_async, et_cuda_sample_wait and et_cuda_sample_fed.
bool can_sample_async();
// The same choice queued without a host wait (et_cuda_sample_async): its ticket. The token also
// becomes the device's feed: the next execute given ET_CUDA_SAMPLED_TOKEN as its token id reads it.
uint64_t sample_async_on_device(const void* logits, int32_t dtype, int64_t vocab, int32_t device,
                                double temperature, double top_p, uint64_t seed, uint64_t step);
// The token of a ticket once it reached the host (et_cuda_sample_wait); -1: nothing to sample.
int64_t sample_wait(int32_t device, uint64_t ticket);
// Whether an execute's input took the ticket's token from the device's feed (et_cuda_sample_fed).
bool sample_fed(int32_t device, uint64_t ticket);

// ---------------------------------------------------------------- options

// --option key=value: true/false -> bool, an integer -> int, else a string;
// passed to ExecuTorch's set_option("CudaBackend", ...) unchanged.
void set_backend_option(const std::string& key_value);

// ---------------------------------------------------------------- CUDA driver

struct DriverInfo {
  bool loaded = false;   // libcuda.so.1 could be opened
  int version = 0;       // cuDriverGetVersion, e.g. 13000
  int device_count = 0;  // after cuInit; 0 when cuInit failed
  std::string problem;   // why there is no usable device ("" when device_count > 0)
};
// Asks the driver directly (dlopen libcuda.so.1; no link dependency).
DriverInfo probe_driver();
// "13.0"
std::string driver_version_string(int version);
// Stops with exit status 77 and one line when there is no CUDA driver or device.
void require_cuda();

// Waits until the device (device 0's primary context) is idle, like
// torch.cuda.synchronize(); false when the driver cannot be used (callers then
// read an output back instead).
bool synchronize_device();

// ---------------------------------------------------------------- --mem

// Device memory in use on one device, from the CUDA driver (cuMemGetInfo through
// libcuda.so.1, like probe_driver): device-wide, so it sees whatever the backend
// allocated (weights, kernels, pools, graphs), whichever backend it is. The
// first sample (before the first method is loaded) makes the device's primary
// context current on this thread and is the baseline; later samples are taken
// between steps (after each method load, case, benchmark loop, token loop),
// never inside a timed loop, so "peak" is the largest of those samples.
void mem_enable(int32_t device);
// Takes a sample when --mem is on (the baseline the first time); `after_load`
// marks the sample taken right after a method was loaded.
void mem_sample(bool after_load = false);
// Device memory in use now (after mem_enable and a first mem_sample); false without figures.
bool mem_used_bytes(size_t& used);
// "mem: device=... total_mib=... context_mib=... loaded_mib=... peak_mib=... end_mib=... samples=N",
// or "mem: n/a (why)"; nothing when --mem is off.
void mem_report();
// The same, only when a baseline was taken (for a run that stops with an error).
void mem_report_if_started();

}  // namespace et_cuda_run
