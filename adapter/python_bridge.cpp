// libexecutorch_cuda_pybridge.so: a C API over ExecuTorch's C++ Module for
// Python (ctypes, python/executorch_cuda/bridge.py), with no PyTorch in it.
//
// Why: ExecuTorch's own Python runtime (executorch.runtime) is a pybind11
// module that inlines c10's TensorImpl of the PyTorch it was compiled against
// (2.13 for the pip wheel of 1.5.1); with another torch it misreads every
// tensor. This bridge takes raw buffers (numpy arrays, or any torch's
// data_ptr()) and runs the same C++ runtime (libexecutorch.so's Module and
// Method) with this project's backend. Errors: a nonzero status and a
// per-thread message (etpy_last_error); nothing here aborts on bad input.

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/core/evalue.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using executorch::aten::ScalarType;
using executorch::extension::TensorPtr;
using executorch::extension::module::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

thread_local std::string last_error;

int fail(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  last_error = buf;
  return 1;
}

constexpr int kMaxDims = 16;

}  // namespace

extern "C" {

// One tensor (or scalar) crossing the boundary. tag: 0 tensor, 1 int, 2 double,
// 3 bool, 4 none. device_type: 0 CPU, 1 CUDA (ExecuTorch's DeviceType codes).
struct EtpyValue {
  int32_t tag;
  int32_t dtype;
  int32_t ndim;
  int32_t device_type;
  int32_t device_index;
  int32_t pad;
  void* data;
  uint64_t nbytes;
  int64_t sizes[kMaxDims];
  int64_t int_value;
  double double_value;
};

__attribute__((visibility("default"))) const char* etpy_last_error() {
  return last_error.c_str();
}

__attribute__((visibility("default"))) void* etpy_load(const char* pte, const char* ptd) {
  if (pte == nullptr) {
    fail("no program path");
    return nullptr;
  }
  std::unique_ptr<Module> m = ptd != nullptr && ptd[0] != '\0' ? std::make_unique<Module>(pte, ptd)
                                                                  : std::make_unique<Module>(pte);
  const Error err = m->load();
  if (err != Error::Ok) {
    fail("cannot load program %s%s%s: error 0x%x", pte, ptd ? " with data " : "", ptd ? ptd : "",
         static_cast<unsigned>(err));
    return nullptr;
  }
  return m.release();
}

__attribute__((visibility("default"))) void etpy_destroy(void* module) {
  delete static_cast<Module*>(module);
}

// The method's inputs and outputs: counts, and per tensor input its dtype and sizes
// (a dynamic dimension's bound) in `inputs` (capacity `cap`, tag 4 for non-tensors).
__attribute__((visibility("default"))) int etpy_method_meta(void* module, const char* name, size_t* n_in,
                                                            size_t* n_out, EtpyValue* inputs, size_t cap) {
  if (module == nullptr || name == nullptr || n_in == nullptr || n_out == nullptr) return fail("null argument");
  auto meta = static_cast<Module*>(module)->method_meta(name);
  if (!meta.ok()) return fail("no method '%s' (error 0x%x)", name, static_cast<unsigned>(meta.error()));
  *n_in = meta->num_inputs();
  *n_out = meta->num_outputs();
  for (size_t i = 0; i < *n_in && i < cap && inputs != nullptr; ++i) {
    EtpyValue& v = inputs[i];
    std::memset(&v, 0, sizeof(v));
    v.tag = 4;
    auto t = meta->input_tensor_meta(i);
    if (!t.ok()) continue;
    if (t->sizes().size() > kMaxDims) return fail("method '%s' input %zu has rank > %d", name, i, kMaxDims);
    v.tag = 0;
    v.dtype = static_cast<int32_t>(t->scalar_type());
    v.ndim = static_cast<int32_t>(t->sizes().size());
    for (int32_t d = 0; d < v.ndim; ++d) v.sizes[d] = t->sizes()[d];
    v.nbytes = t->nbytes();
    v.int_value = t->is_memory_planned() ? 1 : 0;
  }
  return 0;
}

// Runs `name` on `inputs`; `outputs` (capacity `cap`) gets the method's outputs:
// tensors point at the method's memory (host or device as the program planned
// it), valid until the next execute of this module or its destroy.
__attribute__((visibility("default"))) int etpy_execute(void* module, const char* name, const EtpyValue* inputs,
                                                        size_t n_in, EtpyValue* outputs, size_t cap,
                                                        size_t* n_out) {
  if (module == nullptr || name == nullptr || n_out == nullptr || (n_in > 0 && inputs == nullptr)) {
    return fail("null argument");
  }
  auto* m = static_cast<Module*>(module);
  std::vector<TensorPtr> keep;
  std::vector<EValue> args;
  keep.reserve(n_in);
  args.reserve(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const EtpyValue& v = inputs[i];
    if (v.tag == 1) {
      args.emplace_back(v.int_value);
    } else if (v.tag == 2) {
      args.emplace_back(v.double_value);
    } else if (v.tag == 3) {
      args.emplace_back(v.int_value != 0);
    } else if (v.tag == 4) {
      args.emplace_back();
    } else if (v.tag == 0) {
      if (v.ndim < 0 || v.ndim > kMaxDims) return fail("input %zu: rank %d", i, v.ndim);
      if (v.device_type != 0 && v.device_type != 1) return fail("input %zu: device type %d", i, v.device_type);
      std::vector<executorch::aten::SizesType> sizes(v.sizes, v.sizes + v.ndim);
      const auto device = executorch::aten::Device(
          v.device_type == 1 ? executorch::aten::DeviceType::CUDA : executorch::aten::DeviceType::CPU,
          static_cast<executorch::runtime::etensor::DeviceIndex>(v.device_index));
      keep.push_back(executorch::extension::make_tensor_ptr(std::move(sizes), v.data,
                                                            static_cast<ScalarType>(v.dtype), device));
      args.emplace_back(*keep.back());
    } else {
      return fail("input %zu: unknown tag %d", i, v.tag);
    }
  }
  auto result = m->execute(name, args);
  if (!result.ok()) {
    return fail("method '%s' failed: error 0x%x (ExecuTorch's log above says why)", name,
                static_cast<unsigned>(result.error()));
  }
  *n_out = result->size();
  if (result->size() > cap || (cap > 0 && outputs == nullptr)) {
    return fail("method '%s' has %zu outputs, room for %zu", name, result->size(), cap);
  }
  for (size_t i = 0; i < result->size(); ++i) {
    const EValue& e = (*result)[i];
    EtpyValue& v = outputs[i];
    std::memset(&v, 0, sizeof(v));
    if (e.isTensor()) {
      const auto& t = e.toTensor();
      if (t.dim() > kMaxDims) return fail("output %zu: rank %zd", i, static_cast<ssize_t>(t.dim()));
      v.tag = 0;
      v.dtype = static_cast<int32_t>(t.scalar_type());
      v.ndim = static_cast<int32_t>(t.dim());
      for (int32_t d = 0; d < v.ndim; ++d) v.sizes[d] = t.size(d);
      v.data = const_cast<void*>(t.const_data_ptr());
      v.nbytes = t.nbytes();
      v.device_type = static_cast<int32_t>(t.device_type());
      v.device_index = static_cast<int32_t>(t.device_index());
    } else if (e.isInt()) {
      v.tag = 1;
      v.int_value = e.toInt();
    } else if (e.isDouble()) {
      v.tag = 2;
      v.double_value = e.toDouble();
    } else if (e.isBool()) {
      v.tag = 3;
      v.int_value = e.toBool() ? 1 : 0;
    } else {
      v.tag = 4;
    }
  }
  return 0;
}

}  // extern "C"
