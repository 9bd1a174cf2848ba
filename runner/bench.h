// Timing: --bench (per-call latency), --enqueue (back-to-back throughput) and
// --pipeline (one method's device outputs feeding another). Their output lines
// are read by bench/table.py: keep their format.
#pragma once

#include "args.h"
#include "manifest.h"
#include "methods.h"

#include <string>
#include <vector>

namespace et_cuda_run {

// Times n executes. "bench": each call as it returns; with wait_each,
// "bench-wait": each call followed by wait_for_gpu (device IO: the latency
// until the result is ready, comparable with a synchronize per call).
void bench(Module& module, const std::string& model, const std::string& method, const std::vector<EValue>& inputs,
           long warmup, long n, bool device_io, bool wait_each = false);

// N executes queued back to back, then one copy of the last output to the
// host, which waits for the GPU.
void enqueue(Module& module, const std::string& model, const std::string& method,
             const std::vector<EValue>& inputs, long warmup, long n);

// --pipeline A,B; returns whether every check passed.
bool run_pipeline(Module& module, const Args& a, Manifest& manifest, const std::string& user_skip);

}  // namespace et_cuda_run
