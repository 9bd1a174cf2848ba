#pragma once
// --load-cycles N: load, run once on zero inputs and destroy the program N times
// in one process, and report what stays behind per cycle (the backend's own
// allocations, the generated code's modules, device memory, RSS).

#include "args.h"

#include <cstdint>

namespace et_cuda_run {

// Returns false when the backend reported allocations or modules left after a destroy.
bool run_load_cycles(const Args& a, const std::string& method, int32_t device_index);

}  // namespace et_cuda_run
