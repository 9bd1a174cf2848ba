#include "methods.h"

#include "backend.h"
#include "compare.h"
#include "json.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace et_cuda_run {

using executorch::runtime::Error;
using executorch::runtime::Tag;

MethodMeta method_meta(Module& module, const std::string& model, const std::string& method) {
  auto names = module.method_names();
  if (!names.ok()) fail(model, "cannot list methods: " + describe(names.error()));
  if (names->count(method) == 0) {
    std::vector<std::string> sorted(names->begin(), names->end());
    std::sort(sorted.begin(), sorted.end());
    std::string known;
    for (const auto& n : sorted) known += (known.empty() ? "" : ", ") + n;
    fail(model, "no method '" + method + "' (the program has: " + known + ")");
  }
  auto meta = module.method_meta(method);
  if (!meta.ok()) fail(model, "cannot read method '" + method + "': " + describe(meta.error()));
  return *meta;
}

void load_method(Module& module, const std::string& model, const std::string& method) {
  require_cuda();
  mem_sample();  // the first one is the baseline
  const Error err = module.load_method(method);
  if (err != Error::Ok) fail(model, "cannot load method '" + method + "': " + describe(err));
  mem_sample(true);
}

std::vector<EValue> execute(Module& module, const std::string& model, const std::string& method,
                            const std::vector<EValue>& inputs) {
  auto result = module.execute(method, inputs);
  if (!result.ok()) fail(model, "executing '" + method + "' failed: " + describe(result.error()));
  return std::move(*result);
}

void require_unplanned_inputs(const MethodMeta& meta, const std::string& model, const std::string& method,
                              const std::string& why) {
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    const auto tag = meta.input_tag(i);
    if (!tag.ok() || *tag != Tag::Tensor) continue;
    const auto info = meta.input_tensor_meta(i);
    if (info.ok() && info->is_memory_planned()) {
      fail(model, why + ": input " + std::to_string(i) + " of method '" + method +
                      "' is memory-planned, so ExecuTorch would copy device memory with the host memcpy "
                      "(re-export with to_executorch(ExecutorchBackendConfig(memory_planning_pass="
                      "MemoryPlanningPass(alloc_graph_input=False))))");
    }
  }
}

void set_skip_copy(const std::string& user_list, const std::vector<std::string>& methods) {
  std::string value = user_list;
  for (const std::string& m : methods) value += (value.empty() ? "" : ",") + m;
  set_backend_option(std::string(kSkipCopy) + "=" + value);
}

// ---------------------------------------------------------------- inputs

InputSet::~InputSet() {
  for (void* p : device_) device_free(p);
}

void InputSet::add_tensor(void* host, size_t nbytes, const std::vector<SizesType>& sizes, ScalarType type,
                          bool on_device, int32_t device_index) {
  void* data = host;
  if (on_device) {
    require_cuda();
    void* p = device_alloc(device_index, std::max<size_t>(nbytes, 1));
    device_.push_back(p);
    copy_to_device(p, host, nbytes);
    data = p;
  }
  keep_.push_back(executorch::extension::from_blob(data, sizes, type));
  values.emplace_back(*keep_.back());
}

void case_inputs(Case& cs, bool on_device, int32_t device_index, InputSet& out) {
  for (TensorSpec& t : cs.inputs) {
    out.add_tensor(t.bytes.data(), t.bytes.size(), t.sizes, t.dtype->type, on_device, device_index);
  }
}

void zero_inputs(const MethodMeta& meta, const std::string& model, const std::string& method,
                 std::vector<std::vector<uint8_t>>& buffers, InputSet& out, bool on_device, int32_t device_index) {
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    const auto tag = meta.input_tag(i);
    if (!tag.ok()) fail(model, method + ": cannot read input " + std::to_string(i));
    switch (*tag) {
      case Tag::Tensor: {
        const auto info = meta.input_tensor_meta(i);
        if (!info.ok()) fail(model, method + ": cannot read input " + std::to_string(i));
        buffers.emplace_back(info->nbytes(), 0);
        std::vector<SizesType> sizes(info->sizes().begin(), info->sizes().end());
        out.add_tensor(buffers.back().data(), buffers.back().size(), sizes, info->scalar_type(), on_device,
                       device_index);
        break;
      }
      case Tag::Int: out.values.emplace_back(int64_t{0}); break;
      case Tag::Double: out.values.emplace_back(0.0); break;
      case Tag::Bool: out.values.emplace_back(false); break;
      default: fail(model, method + ": input " + std::to_string(i) + " has an unsupported type");
    }
  }
}

// ---------------------------------------------------------------- outputs

std::vector<uint8_t> host_bytes(const executorch::aten::Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  if (out.empty()) return out;
  if (is_device_pointer(t.const_data_ptr())) {
    copy_to_host(out.data(), t.const_data_ptr(), out.size());
  } else {
    std::memcpy(out.data(), t.const_data_ptr(), out.size());
  }
  return out;
}

const executorch::aten::Tensor& last_tensor(const std::vector<EValue>& outputs, const std::string& model,
                                            const std::string& method) {
  for (size_t i = outputs.size(); i-- > 0;) {
    if (outputs[i].isTensor()) return outputs[i].toTensor();
  }
  fail(model, "method '" + method + "' returns no tensor");
}

void wait_for_gpu(const std::vector<EValue>& outputs, const std::string& model, const std::string& method) {
  const auto& t = last_tensor(outputs, model, method);
  uint8_t probe[16];
  const size_t n = std::min<size_t>(sizeof(probe), t.nbytes());
  if (n == 0 || !is_device_pointer(t.const_data_ptr())) return;  // host outputs: execute already waited
  // The device idle, as torch.cuda.synchronize() (what PyTorch's rows wait with); without
  // the driver's entry points, a read of the output's first bytes.
  if (synchronize_device()) return;
  copy_to_host(probe, t.const_data_ptr(), n);
}

bool run_case(Module& module, const std::string& model, const std::string& method, const std::string& label,
              Case& cs, const std::vector<EValue>* inputs) {
  InputSet host;
  if (inputs == nullptr) {
    case_inputs(cs, false, 0, host);
    inputs = &host.values;
  }
  const std::vector<EValue> outputs = execute(module, model, method, *inputs);
  Diff diff;
  if (outputs.size() != cs.outputs.size()) {
    diff.fail_with(std::to_string(outputs.size()) + " outputs, expected " + std::to_string(cs.outputs.size()));
  }
  for (size_t i = 0; diff.pass && i < outputs.size(); ++i) {
    const TensorSpec& want = cs.outputs[i];
    if (!outputs[i].isTensor()) {
      diff.fail_with("output " + std::to_string(i) + " is not a tensor");
      break;
    }
    const auto& t = outputs[i].toTensor();
    const auto sizes = t.sizes();  // what the program returned (dynamic shapes)
    if (t.scalar_type() != want.dtype->type ||
        !std::equal(sizes.begin(), sizes.end(), want.sizes.begin(), want.sizes.end())) {
      diff.fail_with("output " + std::to_string(i) + " is " + dtype_name(t.scalar_type()) + " " + shape_str(sizes) +
                     ", expected " + want.dtype->name + " " + shape_str(want.sizes));
      break;
    }
    const std::vector<uint8_t> got = host_bytes(t);
    diff.compare(got.data(), want.bytes.data(), want.numel(), *want.dtype, i,
                 cs.tolerance ? *cs.tolerance : default_tolerance(want.dtype->type));
  }
  if (json()) {
    JsonLine("case")
        .str("method", method)
        .str("case", label)
        .num("max_abs_err", diff.max_err)
        .boolean("pass", diff.pass)
        .str("problem", sanitize(diff.problem))
        .print(stdout);
  } else {
    std::printf("%s %s: max_abs_err=%.3g %s%s%s\n", method.c_str(), label.c_str(), diff.max_err,
                diff.pass ? "PASS" : "FAIL", diff.problem.empty() ? "" : ": ", sanitize(diff.problem).c_str());
  }
  mem_sample();
  return diff.pass;
}

}  // namespace et_cuda_run
