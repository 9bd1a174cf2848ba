// ExecuTorch BackendInterface "CudaBackend" on top of the executorch_cuda C API.
//
// Only type translation lives here: every decision (streams, output placement,
// memory) is made by libexecutorch_cuda.so. Linking this library is enough to
// register the backend and a CUDA DeviceAllocator (for programs whose inputs
// and outputs ExecuTorch plans in device memory), and to route the library's
// log into ET_LOG: static initializers do all three.

#include <executorch_cuda.h>

#include "log_split.h"

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/device_allocator.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/platform/log.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <variant>
#include <vector>

namespace {

using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::ArrayRef;
using executorch::runtime::Backend;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::BackendOption;
using executorch::runtime::BackendOptionContext;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::kMaxOptionValueLength;
using executorch::runtime::Result;
using executorch::runtime::Span;

using OptionString = std::array<char, kMaxOptionValueLength>;

// Maps a failed status to an ExecuTorch error, logging the library's message.
Error to_error(EtCudaStatus status) {
  ET_LOG(Error, "CudaBackend: %s", et_cuda_last_error());
  switch (status) {
    case ET_CUDA_STATUS_OK:
      return Error::Ok;
    case ET_CUDA_STATUS_INVALID_ARGUMENT:
      return Error::InvalidArgument;
    case ET_CUDA_STATUS_INVALID_PROGRAM:
      return Error::InvalidProgram;
    case ET_CUDA_STATUS_NO_DEVICE:
      return Error::NotSupported;
    case ET_CUDA_STATUS_OUT_OF_MEMORY:
      return Error::MemoryAllocationFailed;
    default:
      return Error::Internal;
  }
}

// The DelegateHandle: the library's handle plus, per output, the buffer the
// runtime planned for it. When outputs are left on the device the ETensor is
// repointed at library memory; remembering the planned buffer lets a later
// execute that copies to host write into it rather than into stale device
// memory, and keeps the capacity known after a dynamic-shape resize shrinks
// nbytes() (ETensor does not expose its capacity).
struct Delegate {
  EtCudaHandle* handle = nullptr;
  size_t num_inputs = 0;
  size_t num_outputs = 0;
  struct PlannedOutput {
    void* data = nullptr;      // planned buffer
    uint64_t capacity = 0;     // its size in bytes
    void* installed = nullptr; // device pointer we last pointed the ETensor at
  };
  std::vector<PlannedOutput> outputs;
};

std::mutex live_mutex;
std::unordered_set<Delegate*> live_delegates;

// Fills the shape fields of an EtCudaTensor from an ETensor.
Error describe(const Tensor& t, void* data, uint64_t nbytes, EtCudaTensor& out) {
  if (t.dim() > ET_CUDA_MAX_DIMS) {
    ET_LOG(Error, "CudaBackend: tensor rank %zd exceeds %d", static_cast<ssize_t>(t.dim()), ET_CUDA_MAX_DIMS);
    return Error::InvalidArgument;
  }
  out = EtCudaTensor{};
  out.data = data;
  out.nbytes = nbytes;
  out.dtype = static_cast<int32_t>(t.scalar_type());
  out.ndim = static_cast<int32_t>(t.dim());
  for (ssize_t d = 0; d < t.dim(); ++d) {
    out.sizes[d] = t.size(d);
    out.strides[d] = t.strides()[d];
  }
  return Error::Ok;
}

// The method's name: the "method_name" compile spec (not NUL-terminated), else
// the method being loaded.
std::string method_name(const BackendInitContext& context, ArrayRef<CompileSpec> specs) {
  for (const CompileSpec& spec : specs) {
    if (std::strcmp(spec.key, "method_name") == 0 && spec.value.buffer != nullptr) {
      return std::string(static_cast<const char*>(spec.value.buffer), spec.value.nbytes);
    }
  }
  return context.get_method_name() != nullptr ? context.get_method_name() : "";
}

// The library asks for the program's named data by key (the .so, the weights
// blob, or one storage per constant for ExecuTorch 1.5 programs): a buffer
// stays alive until the library releases it (per-constant storages, right
// after their upload, so a program's weights are never all in host memory at
// once) or init returns.
struct NamedDataFetch {
  const executorch::runtime::NamedDataMap* map = nullptr;
  struct Held {
    std::string key;
    FreeableBuffer buffer;
    bool released;
  };
  std::vector<Held> held;
  Error failure = Error::Ok;  // why the first lookup failed, returned if init fails
};

int32_t fetch_named_data(void* user, const char* key, const uint8_t** out_data, size_t* out_len) {
  auto* f = static_cast<NamedDataFetch*>(user);
  if (f->map == nullptr) {
    ET_LOG(Error, "CudaBackend: no named data map to read '%s' from", key);
    if (f->failure == Error::Ok) {
      f->failure = Error::InvalidArgument;
    }
    return 1;
  }
  Result<FreeableBuffer> b = f->map->get_data(key);
  if (!b.ok()) {
    ET_LOG(Error, "CudaBackend: named data key '%s' not found (error 0x%x)", key,
           static_cast<unsigned>(b.error()));
    if (f->failure == Error::Ok) {
      f->failure = b.error();
    }
    return 1;
  }
  *out_data = static_cast<const uint8_t*>(b->data());
  *out_len = b->size();
  f->held.push_back(NamedDataFetch::Held{key, std::move(*b), false});
  return 0;
}

void release_named_data(void* user, const char* key) {
  auto* f = static_cast<NamedDataFetch*>(user);
  for (auto& h : f->held) {
    if (!h.released && h.key == key) {
      h.buffer.Free();
      h.released = true;
      return;
    }
  }
}

// Which loaded program a method belongs to, for sharing mutable buffers
// (share_mutable_buffers_across_methods) only among the methods of one program.
// The map a method gets is not that identity: with a .ptd, ExecuTorch gives each
// method its own merged map over the Module's external map and the program's.
// Their keys are: a key's string lives in the flatbuffer of the map that holds it
// (the .ptd's, or else the program's), loaded once per Module or Program, so the
// address of key 0 is the same for every method of one loaded program and
// differs between two loaded instances of the same file.
uint64_t share_group_of(const executorch::runtime::NamedDataMap* map) {
  if (map == nullptr) return 0;
  const auto n = map->get_num_keys();
  if (n.ok() && *n > 0) {
    const auto key = map->get_key(0);
    if (key.ok() && *key != nullptr) return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*key));
  }
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(map));
}

class CudaBackend final : public BackendInterface {
 public:
  bool is_available() const override {
    return true;
  }

  Result<DelegateHandle*> init(BackendInitContext& context, FreeableBuffer* processed,
                               ArrayRef<CompileSpec> compile_specs) const override {
    const std::string method = method_name(context, compile_specs);
    const auto* named_data = context.get_named_data_map();
    NamedDataFetch fetch;
    fetch.map = named_data;
    EtCudaInitArgs args{};
    // The library reads the payload (which names the blobs) and asks for them by key.
    args.payload_data = processed != nullptr ? static_cast<const uint8_t*>(processed->data()) : nullptr;
    args.payload_len = processed != nullptr ? processed->size() : 0;
    args.named_data = &fetch_named_data;
    args.named_data_release = &release_named_data;
    args.named_data_user = &fetch;
    args.method_name = method.empty() ? nullptr : method.c_str();
    args.share_group = share_group_of(named_data);
    args.use_backend_options = true;
    EtCudaHandle* handle = nullptr;
    const EtCudaStatus status = et_cuda_init(&args, &handle);
    // The library copied what it needs.
    for (auto& held : fetch.held) {
      held.buffer.Free();
    }
    if (processed != nullptr) {
      processed->Free();
    }
    if (status != ET_CUDA_STATUS_OK && fetch.failure != Error::Ok) {
      ET_LOG(Error, "CudaBackend: %s", et_cuda_last_error());
      return fetch.failure;  // a blob was missing: ExecuTorch's own error for it
    }
    Error err = Error::Ok;
    if (status != ET_CUDA_STATUS_OK) {
      return to_error(status);
    }

    auto* delegate = new Delegate;
    delegate->handle = handle;
    EtCudaStatus s1 = et_cuda_num_inputs(handle, &delegate->num_inputs);
    EtCudaStatus s2 = s1 == ET_CUDA_STATUS_OK ? et_cuda_num_outputs(handle, &delegate->num_outputs) : s1;
    if (s2 != ET_CUDA_STATUS_OK) {
      err = to_error(s2);
      et_cuda_destroy(handle);
      delete delegate;
      return err;
    }
    delegate->outputs.resize(delegate->num_outputs);
    std::lock_guard<std::mutex> lock(live_mutex);
    live_delegates.insert(delegate);
    return delegate;
  }

  // Not reentrant for one handle, like the Method that calls it.
  Error execute(BackendExecutionContext& /*context*/, DelegateHandle* opaque,
                Span<EValue*> args) const override {
    auto* delegate = static_cast<Delegate*>(opaque);
    const size_t n_in = delegate->num_inputs;
    const size_t n_out = delegate->num_outputs;
    if (args.size() != n_in + n_out) {
      ET_LOG(Error, "CudaBackend: got %zu arguments, the method has %zu inputs and %zu outputs",
             args.size(), n_in, n_out);
      return Error::InvalidArgument;
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i]->isTensor()) {
        ET_LOG(Error, "CudaBackend: argument %zu is not a tensor (tag %d)", i,
               static_cast<int>(args[i]->tag));
        return Error::InvalidArgument;
      }
    }

    std::vector<EtCudaTensor> ins(n_in), outs(n_out);
    for (size_t i = 0; i < n_in; ++i) {
      const Tensor& t = args[i]->toTensor();
      Error err = describe(t, const_cast<void*>(t.const_data_ptr()), t.nbytes(), ins[i]);
      if (err != Error::Ok) {
        return err;
      }
    }
    for (size_t i = 0; i < n_out; ++i) {
      const Tensor& t = args[n_in + i]->toTensor();
      Delegate::PlannedOutput& planned = delegate->outputs[i];
      void* data = t.mutable_data_ptr();
      if (data != planned.installed && data != planned.data) {
        // First execute, or the runtime/user gave the output a new buffer.
        planned.data = data;
        planned.capacity = t.nbytes();
      }
      Error err = describe(t, planned.data, planned.capacity, outs[i]);
      if (err != Error::Ok) {
        return err;
      }
    }

    const EtCudaStatus status = et_cuda_execute(delegate->handle, ins.data(), n_in, outs.data(), n_out,
                                                ET_CUDA_OUTPUT_PLACEMENT_FROM_CONFIG);
    if (status != ET_CUDA_STATUS_OK) {
      return to_error(status);
    }

    for (size_t i = 0; i < n_out; ++i) {
      const Tensor& t = args[n_in + i]->toTensor();
      const EtCudaTensor& out = outs[i];
      if (out.ndim != t.dim()) {
        ET_LOG(Error, "CudaBackend: output %zu has rank %d, the program expects %zd", i, out.ndim,
               static_cast<ssize_t>(t.dim()));
        return Error::Internal;
      }
      std::array<SizesType, ET_CUDA_MAX_DIMS> sizes{};
      bool same = true;
      for (int32_t d = 0; d < out.ndim; ++d) {
        sizes[d] = static_cast<SizesType>(out.sizes[d]);
        same = same && sizes[d] == t.size(d);
      }
      if (!same) {
        Error err = executorch::runtime::resize_tensor(t, {sizes.data(), static_cast<size_t>(out.ndim)});
        if (err != Error::Ok) {
          ET_LOG(Error, "CudaBackend: cannot resize output %zu to the shape the model produced", i);
          return err;
        }
      }
      Delegate::PlannedOutput& planned = delegate->outputs[i];
      if (out.data != t.mutable_data_ptr()) {
        // Device placement (or back to the planned buffer after one).
        Error err = executorch::runtime::internal::set_tensor_data(t, out.data, t.nbytes());
        if (err != Error::Ok) {
          ET_LOG(Error, "CudaBackend: cannot point output %zu at its data", i);
          return err;
        }
      }
      planned.installed = out.data == planned.data ? nullptr : out.data;
    }
    return Error::Ok;
  }

  void destroy(DelegateHandle* opaque) const override {
    auto* delegate = static_cast<Delegate*>(opaque);
    {
      std::lock_guard<std::mutex> lock(live_mutex);
      if (live_delegates.erase(delegate) == 0) {
        ET_LOG(Error, "CudaBackend: destroy of an unknown or already destroyed handle %p ignored", opaque);
        return;
      }
    }
    if (et_cuda_destroy(delegate->handle) != ET_CUDA_STATUS_OK) {
      ET_LOG(Error, "CudaBackend: %s", et_cuda_last_error());
    }
    delete delegate;
  }

  Error set_option(BackendOptionContext& /*context*/, const Span<BackendOption>& options) override {
    for (const BackendOption& option : options) {
      EtCudaStatus status = ET_CUDA_STATUS_OK;
      if (const bool* b = std::get_if<bool>(&option.value)) {
        status = et_cuda_set_option_bool(option.key, *b);
      } else if (const int* i = std::get_if<int>(&option.value)) {
        status = et_cuda_set_option_int(option.key, *i);
      } else if (const auto* s = std::get_if<OptionString>(&option.value)) {
        const std::string value(s->data(), strnlen(s->data(), s->size()));
        status = et_cuda_set_option_str(option.key, value.c_str());
      }
      if (status != ET_CUDA_STATUS_OK) {
        ET_LOG(Error, "CudaBackend: option '%s': %s", option.key, et_cuda_last_error());
        return Error::InvalidArgument;
      }
    }
    return Error::Ok;
  }

  Error get_option(BackendOptionContext& /*context*/, Span<BackendOption>& options) override {
    for (BackendOption& option : options) {
      bool b = false;
      int64_t i = 0;
      OptionString s{};
      // A key has exactly one type: the other two getters fail.
      if (et_cuda_get_option_bool(option.key, &b) == ET_CUDA_STATUS_OK) {
        option.value = b;
      } else if (et_cuda_get_option_int(option.key, &i) == ET_CUDA_STATUS_OK) {
        option.value = static_cast<int>(i);
      } else if (et_cuda_get_option_str(option.key, s.data(), s.size()) == ET_CUDA_STATUS_OK) {
        option.value = s;
      }
      // Unknown keys are left as they are.
    }
    return Error::Ok;
  }
};

// ExecuTorch's DeviceAllocator for CUDA: planned device buffers come from the
// library's stream-ordered pool; copies are ordered with the backend's streams
// (the device-to-host copy is where the one host wait happens).
class CudaDeviceAllocator final : public executorch::runtime::DeviceAllocator {
 public:
  Result<void*> allocate(size_t nbytes, executorch::runtime::etensor::DeviceIndex index,
                         size_t alignment) override {
    void* p = nullptr;
    const EtCudaStatus s = et_cuda_device_allocate(index, nbytes, alignment, &p);
    if (s != ET_CUDA_STATUS_OK) {
      return to_error(s);
    }
    return p;
  }

  void deallocate(void* ptr, executorch::runtime::etensor::DeviceIndex /*index*/) override {
    if (et_cuda_device_deallocate(ptr) != ET_CUDA_STATUS_OK) {
      ET_LOG(Error, "CudaBackend: %s", et_cuda_last_error());
    }
  }

  Error copy_host_to_device(void* dst, const void* src, size_t nbytes,
                            executorch::runtime::etensor::DeviceIndex index) override {
    const EtCudaStatus s = et_cuda_copy_host_to_device(dst, src, nbytes, index);
    return s == ET_CUDA_STATUS_OK ? Error::Ok : to_error(s);
  }

  Error copy_device_to_host(void* dst, const void* src, size_t nbytes,
                            executorch::runtime::etensor::DeviceIndex index) override {
    const EtCudaStatus s = et_cuda_copy_device_to_host(dst, src, nbytes, index);
    return s == ET_CUDA_STATUS_OK ? Error::Ok : to_error(s);
  }

  executorch::runtime::etensor::DeviceType device_type() const override {
    return executorch::runtime::etensor::DeviceType::CUDA;
  }
};

// The library's log records, into ExecuTorch's log (which has no warning level:
// warnings go to Info with a prefix, info and below to Debug). ExecuTorch cuts a
// log line at a fixed buffer size, so a long record goes out in pieces of at most
// 180 bytes joined by "...", each cut on a UTF-8 character boundary (log_split.h).
void forward_log(EtCudaLogLevel level, const char* message, void* /*user*/) {
  constexpr size_t kPiece = 180;
  const size_t n = std::strlen(message);
  size_t from = 0;
  do {
    const size_t end = et_cuda_adapter::log_piece_end(message, n, from, kPiece);
    const int len = static_cast<int>(end - from);
    const char* p = message + from;
    const bool first = from == 0;
    const char* more = end < n ? " ..." : "";
    switch (level) {
      case ET_CUDA_LOG_ERROR:
        ET_LOG(Error, "CudaBackend: %s%.*s%s", first ? "" : "... ", len, p, more);
        break;
      case ET_CUDA_LOG_WARN:
        ET_LOG(Info, "CudaBackend: %s%.*s%s", first ? "warning: " : "... ", len, p, more);
        break;
      default:
        ET_LOG(Debug, "CudaBackend: %s%.*s%s", first ? "" : "... ", len, p, more);
        break;
    }
    from = end;
  } while (from < n);
}

CudaBackend backend_instance;
CudaDeviceAllocator allocator_instance;

#ifndef ET_CUDA_BUILT_AGAINST_EXECUTORCH
#define ET_CUDA_BUILT_AGAINST_EXECUTORCH "unknown"
#endif
// Which ExecuTorch this adapter was compiled against, readable from the file's
// bytes without loading it: the Python package (python/executorch_cuda/native.py)
// refuses to load the adapter into a process with another ExecuTorch, whose
// runtime ABI may differ. The marker ends at the NUL.
[[gnu::used]] const char built_against[] = "executorch_cuda:built-against-executorch=" ET_CUDA_BUILT_AGAINST_EXECUTORCH;

const bool registered = [] {
  if (et_cuda_set_log_callback(&forward_log, nullptr, ET_CUDA_LOG_INFO) != ET_CUDA_STATUS_OK) {
    ET_LOG(Error, "CudaBackend: %s", et_cuda_last_error());
  }
  if (executorch::runtime::get_device_allocator(executorch::runtime::etensor::DeviceType::CUDA) == nullptr) {
    executorch::runtime::register_device_allocator(&allocator_instance);
  } else {
    ET_LOG(Error, "CudaBackend: another CUDA device allocator is registered; keeping it");
  }
  const Error err = executorch::runtime::register_backend(Backend{"CudaBackend", &backend_instance});
  if (err != Error::Ok) {
    ET_LOG(Error, "CudaBackend: registration failed (error 0x%x): is another CudaBackend linked in?",
           static_cast<unsigned>(err));
  }
  return err == Error::Ok;
}();

}  // namespace
