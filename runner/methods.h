// Loading and running one method through ExecuTorch's Module, with inputs from
// a case (host or device memory) and outputs checked against it.
#pragma once

#include "common.h"
#include "manifest.h"

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <string>
#include <vector>

namespace et_cuda_run {

using executorch::extension::TensorPtr;
using executorch::extension::module::Module;
using executorch::runtime::EValue;
using executorch::runtime::MethodMeta;

constexpr const char* kSkipCopy = "skip_copy_output_to_cpu_for_method";

// The method's signature; fails naming the program's methods when it has none of that name.
MethodMeta method_meta(Module& module, const std::string& model, const std::string& method);
// Loads the method onto the device (needs CUDA: call require_cuda() first).
void load_method(Module& module, const std::string& model, const std::string& method);
std::vector<EValue> execute(Module& module, const std::string& model, const std::string& method,
                            const std::vector<EValue>& inputs);

// Device pointers can only be passed to a method whose tensor inputs are not
// memory-planned: for a planned input, Method::set_input copies the caller's
// data into the planned buffer with the host memcpy.
void require_unplanned_inputs(const MethodMeta& meta, const std::string& model, const std::string& method,
                              const std::string& why);

// Sets skip_copy_output_to_cpu_for_method to the user's list plus `methods`.
// The backend reads it at every execute, so it can change between executes.
void set_skip_copy(const std::string& user_list, const std::vector<std::string>& methods);

// Inputs of one method call: EValues over host buffers, or over device copies
// of them (made once).
class InputSet {
 public:
  InputSet() = default;
  InputSet(const InputSet&) = delete;
  InputSet& operator=(const InputSet&) = delete;
  ~InputSet();

  void add_tensor(void* host, size_t nbytes, const std::vector<SizesType>& sizes, ScalarType type, bool on_device,
                  int32_t device_index);

  std::vector<EValue> values;

 private:
  std::vector<TensorPtr> keep_;
  std::vector<void*> device_;
};

void case_inputs(Case& cs, bool on_device, int32_t device_index, InputSet& out);
// Zero-filled inputs shaped from the method's signature (its upper bounds).
void zero_inputs(const MethodMeta& meta, const std::string& model, const std::string& method,
                 std::vector<std::vector<uint8_t>>& buffers, InputSet& out, bool on_device, int32_t device_index);

// An output's bytes in host memory (copied back if the backend left it on the device).
std::vector<uint8_t> host_bytes(const executorch::aten::Tensor& t);
// The last tensor among a method's outputs (what --enqueue and --pipeline wait on).
const executorch::aten::Tensor& last_tensor(const std::vector<EValue>& outputs, const std::string& model,
                                            const std::string& method);
// Waits until the GPU has finished everything queued so far: cuCtxSynchronize
// (synchronize_device); without the driver's entry points, by copying the first
// bytes of the last output to the host (the legacy default stream waits for the
// backend's blocking streams).
void wait_for_gpu(const std::vector<EValue>& outputs, const std::string& model, const std::string& method);

// Runs one case and compares its outputs (at the sizes the program returns,
// which must be the expected ones); prints "<method> <label>: max_abs_err=<e> PASS|FAIL".
// `inputs` replaces the case's host inputs (for --device-io) when given.
bool run_case(Module& module, const std::string& model, const std::string& method, const std::string& label,
              Case& cs, const std::vector<EValue>* inputs = nullptr);

}  // namespace et_cuda_run
