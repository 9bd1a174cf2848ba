#include "compare.h"

#include <algorithm>
#include <cmath>

namespace et_cuda_run {

void Diff::compare(const uint8_t* got, const uint8_t* want, size_t numel, const DType& dtype, size_t output,
                   const Tolerance& tol) {
  for (size_t e = 0; e < numel; ++e) {
    const double g = element(got + e * dtype.size, dtype.type);
    const double r = element(want + e * dtype.size, dtype.type);
    const double d = std::fabs(g - r);
    if (std::isnan(d) || d > tol.atol + tol.rtol * std::fabs(r)) {
      if (pass) {
        problem = "output " + std::to_string(output) + " element " + std::to_string(e) + ": got " +
                  std::to_string(g) + ", expected " + std::to_string(r);
      }
      pass = false;
    }
    if (!std::isnan(d)) max_err = std::max(max_err, d);
  }
}

void Diff::fail_with(const std::string& why) {
  if (pass) problem = why;
  pass = false;
}

}  // namespace et_cuda_run
