// Fallback smoke test for a separately built "CudaBackend" library (see
// build.sh): dlopen(LIB, RTLD_GLOBAL) so its static initializers register the
// backend, set backend options, load PTE [+ PTD] with the 1.5.1 pip runtime's
// Module, run one method once on zero-filled inputs and print the first values
// of each output. Exit status 0 only if the method ran.
// Usage: smoke_main LIB PTE [PTD] [--method NAME] [--option KEY=VALUE]...
//                   [--preload SO]...   (e.g. a kernel library, loaded first)
#include <dlfcn.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/runtime.h>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace executorch;
using runtime::BackendOption;
using runtime::Error;

static double value_at(const aten::Tensor& t, size_t i) {
  const void* p = t.const_data_ptr();
  switch (t.scalar_type()) {
    case aten::ScalarType::Float: return static_cast<const float*>(p)[i];
    case aten::ScalarType::Half: return static_cast<double>(static_cast<const aten::Half*>(p)[i]);
    case aten::ScalarType::BFloat16: return static_cast<double>(static_cast<const aten::BFloat16*>(p)[i]);
    case aten::ScalarType::Long: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case aten::ScalarType::Int: return static_cast<const int32_t*>(p)[i];
    case aten::ScalarType::Bool: return static_cast<const bool*>(p)[i];
    default: return 0.0 / 0.0;
  }
}

// Host pointers can be printed; device memory cannot. cudaPointerGetAttributes
// comes from the libcudart that the backend library brought in (RTLD_GLOBAL).
static bool is_device_memory(const void* p) {
  using Fn = int (*)(void*, const void*);
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "cudaPointerGetAttributes"));
  alignas(8) unsigned char attr[64] = {};  // cudaPointerAttributes; .type is the first int
  if (fn == nullptr || fn(attr, p) != 0) return false;
  int type = 0;
  std::memcpy(&type, attr, sizeof type);
  return type == 2 || type == 3;  // cudaMemoryTypeDevice, cudaMemoryTypeManaged
}

// TensorImpl::device_type() exists from ExecuTorch 1.3 on; -1 before.
template <typename Impl>
static auto device_type_of(const Impl* impl, int) -> decltype(static_cast<int>(impl->device_type())) {
  return static_cast<int>(impl->device_type());
}
template <typename Impl>
static int device_type_of(const Impl*, long) {
  return -1;
}

// KEY=VALUE as a backend option: true/false a bool, an integer an int, else a string; false
// when there is no key or the key or value is too long.
static bool parse_option(const std::string& kv, BackendOption& o) {
  size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0 || eq >= runtime::kMaxOptionKeyLength ||
      kv.size() - eq - 1 >= runtime::kMaxOptionValueLength) {
    return false;
  }
  std::memcpy(o.key, kv.data(), eq);
  std::string v = kv.substr(eq + 1);
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v == "true" || v == "false") {
    o.value = (v == "true");
  } else if (!v.empty() && *end == '\0') {
    o.value = static_cast<int>(n);
  } else {
    std::array<char, runtime::kMaxOptionValueLength> s{};
    std::memcpy(s.data(), v.data(), v.size());
    o.value = s;
  }
  return true;
}

// dlopen's the --preload libraries, then LIB, and checks that LIB registered "CudaBackend";
// prints which object provides it. False (with a FAIL line) on any failure.
static bool load_backend_library(const std::string& lib, const std::vector<std::string>& preload) {
  for (const std::string& so : preload) {
    if (dlopen(so.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      std::fprintf(stderr, "FAIL dlopen %s: %s\n", so.c_str(), dlerror());
      return false;
    }
  }
  if (dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "FAIL dlopen %s: %s\n", lib.c_str(), dlerror());
    return false;
  }
  runtime::BackendInterface* backend = runtime::get_backend_class("CudaBackend");
  if (backend == nullptr) {
    std::fprintf(stderr, "FAIL %s registered no \"CudaBackend\"\n", lib.c_str());
    return false;
  }
  // Which object's code implements the registered "CudaBackend" (its vtable's
  // home): a second registration under the same name is refused, so this
  // proves that the run uses LIB and not another backend loaded earlier.
  Dl_info info{};
  void* vtable = *reinterpret_cast<void**>(backend);
  const char* provider = dladdr(vtable, &info) != 0 && info.dli_fname ? info.dli_fname : "?";
  std::printf("loaded %s: \"CudaBackend\" provided by %s (%zu backends registered)\n", lib.c_str(),
              provider, runtime::get_num_registered_backends());
  return true;
}

// Each output's dtype, size and device type, and its first values when in host memory.
static void print_outputs(const std::vector<runtime::EValue>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].isTensor()) {
      std::printf("  out%zu: not a tensor (tag %d)\n", i, static_cast<int>(out[i].tag));
      continue;
    }
    const aten::Tensor& t = out[i].toTensor();
    std::printf("  out%zu: dtype %d numel %zd device_type %d:", i, static_cast<int>(t.scalar_type()),
                static_cast<ssize_t>(t.numel()), device_type_of(t.unsafeGetTensorImpl(), 0));
    if (is_device_memory(t.const_data_ptr())) {
      std::printf(" (device memory, not printed)\n");
      continue;
    }
    for (size_t j = 0; j < static_cast<size_t>(t.numel()) && j < 8; ++j) std::printf(" %g", value_at(t, j));
    std::printf("\n");
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LIB PTE [PTD] [--method NAME] [--option KEY=VALUE]...\n", argv[0]);
    return 2;
  }
  std::string lib = argv[1], pte = argv[2], ptd, method = "forward";
  std::vector<BackendOption> options;
  std::vector<std::string> preload;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--method" && i + 1 < argc) {
      method = argv[++i];
    } else if (a == "--preload" && i + 1 < argc) {
      preload.push_back(argv[++i]);
    } else if (a == "--option" && i + 1 < argc) {
      std::string kv = argv[++i];
      BackendOption o;
      if (!parse_option(kv, o)) {
        std::fprintf(stderr, "bad --option '%s' (KEY=VALUE)\n", kv.c_str());
        return 2;
      }
      options.push_back(o);
    } else if (ptd.empty() && a.rfind("--", 0) != 0) {
      ptd = a;
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }

  runtime::runtime_init();
  if (!load_backend_library(lib, preload)) return 1;
  if (!options.empty()) {
    Error e = runtime::set_option("CudaBackend", {options.data(), options.size()});
    std::printf("set_option(%zu options) -> 0x%x\n", options.size(), static_cast<unsigned>(e));
    if (e != Error::Ok) return 1;
  }

  extension::Module m = ptd.empty() ? extension::Module(pte) : extension::Module(pte, ptd);
  auto meta = m.method_meta(method);
  if (!meta.ok()) {
    std::fprintf(stderr, "FAIL method_meta(%s): error 0x%x\n", method.c_str(), static_cast<unsigned>(meta.error()));
    return 1;
  }
  std::vector<extension::TensorPtr> keep;
  std::vector<runtime::EValue> inputs;
  std::vector<std::vector<uint8_t>> buffers;
  for (size_t i = 0; i < meta->num_inputs(); ++i) {
    auto info = meta->input_tensor_meta(i);
    if (!info.ok()) {
      std::fprintf(stderr, "FAIL input %zu is not a tensor (only tensor inputs are supported)\n", i);
      return 1;
    }
    buffers.emplace_back(info->nbytes(), 0);
    std::vector<aten::SizesType> sizes(info->sizes().begin(), info->sizes().end());
    keep.push_back(extension::make_tensor_ptr(sizes, buffers.back().data(), info->scalar_type()));
    inputs.emplace_back(*keep.back());
  }
  auto t0 = std::chrono::steady_clock::now();
  Error le = m.load_method(method);
  auto t1 = std::chrono::steady_clock::now();
  std::printf("load_method(%s) -> 0x%x (%.1f ms)\n", method.c_str(), static_cast<unsigned>(le),
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  if (le != Error::Ok) {
    std::fprintf(stderr, "FAIL load_method(%s): error 0x%x\n", method.c_str(), static_cast<unsigned>(le));
    return 1;
  }
  auto out = m.execute(method, inputs);
  auto t2 = std::chrono::steady_clock::now();
  if (!out.ok()) {
    std::fprintf(stderr, "FAIL execute(%s): error 0x%x\n", method.c_str(), static_cast<unsigned>(out.error()));
    return 1;
  }
  std::printf("execute(%s) OK (%.1f ms), %zu outputs\n", method.c_str(),
              std::chrono::duration<double, std::milli>(t2 - t1).count(), out->size());
  print_outputs(*out);
  return 0;
}
