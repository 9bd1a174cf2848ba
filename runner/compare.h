// Element-wise comparison of an output with its expected values.
#pragma once

#include "common.h"
#include "manifest.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace et_cuda_run {

// Compares outputs one at a time; keeps the first problem and the largest
// absolute difference. An element passes when |got - want| <= atol + rtol * |want|;
// NaN (in either) never passes.
struct Diff {
  bool pass = true;
  double max_err = 0;
  std::string problem;

  void compare(const uint8_t* got, const uint8_t* want, size_t numel, const DType& dtype, size_t output,
               const Tolerance& tol);
  void fail_with(const std::string& why);
};

}  // namespace et_cuda_run
