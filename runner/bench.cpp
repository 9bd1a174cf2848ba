#include "bench.h"

#include "backend.h"
#include "compare.h"
#include "json.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace et_cuda_run {

using executorch::runtime::MethodMeta;

void bench(Module& module, const std::string& model, const std::string& method, const std::vector<EValue>& inputs,
           long warmup, long n, bool device_io, bool wait_each) {
  const char* label = wait_each ? "bench-wait" : "bench";
  for (long i = 0; i < warmup; ++i) {
    const std::vector<EValue> out = execute(module, model, method, inputs);
    if (wait_each) wait_for_gpu(out, model, method);
  }
  std::vector<double> wall;
  double cpu = 0;
  EtCudaStats s0{}, s1{};
  bool have_stats = stats_snapshot(s0);
  for (long i = 0; i < n; ++i) {
    const double c0 = thread_cpu_us();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<EValue> out = execute(module, model, method, inputs);
    if (wait_each) wait_for_gpu(out, model, method);
    wall.push_back(since_us(t0));
    cpu += thread_cpu_us() - c0;
  }
  have_stats = have_stats && stats_snapshot(s1);
  mem_sample();
  std::sort(wall.begin(), wall.end());
  const double cpu_mean = n > 0 ? cpu / static_cast<double>(n) : 0.0;
  if (json()) {
    JsonLine(label)
        .str("method", method)
        .integer("n", n)
        .integer("warmup", warmup)
        .num("min_us", wall.empty() ? 0.0 : wall.front())
        .num("p50_us", pct(wall, 0.5))
        .num("p99_us", pct(wall, 0.99))
        .num("cpu_mean_us", cpu_mean)
        .print(stdout);
  } else {
    std::printf("%s %s: n=%ld warmup=%ld min=%.1fus p50=%.1fus p99=%.1fus cpu_mean=%.1fus\n", method.c_str(), label,
                n, warmup, wall.empty() ? 0.0 : wall.front(), pct(wall, 0.5), pct(wall, 0.99), cpu_mean);
  }
  if (have_stats && n > 0) {
    const double calls = static_cast<double>(n);
    const double executes = static_cast<double>(s1.executes - s0.executes);
    const double exec_us = static_cast<double>(s1.execute_host_ns - s0.execute_host_ns) / 1e3;
    const double run_us = static_cast<double>(s1.run_host_ns - s0.run_host_ns) / 1e3;
    const double overhead = executes > 0 ? (exec_us - run_us) / executes : 0.0;
    const double waits = static_cast<double>(s1.host_waits - s0.host_waits) / calls;
    if (json()) {
      JsonLine(std::string(label) + "-lib")
          .str("method", method)
          .str("io", device_io ? "device" : "host")
          .num("executes_per_call", executes / calls)
          .num("lib_execute_us", exec_us / calls)
          .num("run_us", run_us / calls)
          .num("backend_overhead_us", overhead)
          .num("host_waits_per_call", waits)
          .print(stdout);
    } else {
      std::printf(
          "%s %s-lib: io=%s executes_per_call=%.2f lib_execute_us=%.1f run_us=%.1f backend_overhead_us=%.1f "
          "host_waits_per_call=%.2f\n",
          method.c_str(), label, device_io ? "device" : "host", executes / calls, exec_us / calls, run_us / calls,
          overhead, waits);
    }
  }
}

void enqueue(Module& module, const std::string& model, const std::string& method,
             const std::vector<EValue>& inputs, long warmup, long n) {
  std::vector<EValue> outputs;
  for (long i = 0; i < std::max(warmup, 1L); ++i) outputs = execute(module, model, method, inputs);
  host_bytes(last_tensor(outputs, model, method));  // the GPU is idle from here
  EtCudaStats s0{}, s1{};
  bool have_stats = stats_snapshot(s0);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) outputs = execute(module, model, method, inputs);
  const double enqueue_us = since_us(t0);
  have_stats = have_stats && stats_snapshot(s1);
  const auto& last = last_tensor(outputs, model, method);
  const bool on_device = is_device_pointer(last.const_data_ptr());
  host_bytes(last);
  const double total_us = since_us(t0);
  mem_sample();
  const double calls = static_cast<double>(std::max(n, 1L));
  std::printf(
      "%s enqueue: n=%ld enqueue_us=%.1f total_us=%.1f enqueue_per_call_us=%.1f total_per_call_us=%.1f "
      "enqueue_over_total=%.3f host_waits=%lld output_on_device=%s\n",
      method.c_str(), n, enqueue_us, total_us, enqueue_us / calls, total_us / calls,
      total_us > 0 ? enqueue_us / total_us : 0.0,
      have_stats ? static_cast<long long>(s1.host_waits - s0.host_waits) : -1LL, on_device ? "yes" : "no");
}

namespace {

// --pipeline: A's outputs must be B's inputs, as many, each of the same dtype and shape.
void check_pipeline_values(const MethodMeta& meta_a, const MethodMeta& meta_b, const std::string& model,
                           const std::string& A, const std::string& B) {
  if (meta_a.num_outputs() != meta_b.num_inputs()) {
    fail(model, "--pipeline: '" + A + "' has " + std::to_string(meta_a.num_outputs()) + " outputs, '" + B +
                    "' takes " + std::to_string(meta_b.num_inputs()) + " inputs");
  }
  for (size_t i = 0; i < meta_a.num_outputs(); ++i) {
    const auto out = meta_a.output_tensor_meta(i);
    const auto in = meta_b.input_tensor_meta(i);
    if (!out.ok() || !in.ok()) fail(model, "--pipeline: value " + std::to_string(i) + " is not a tensor");
    const auto so = out->sizes(), si = in->sizes();
    if (out->scalar_type() != in->scalar_type() || !std::equal(so.begin(), so.end(), si.begin(), si.end())) {
      fail(model, "--pipeline: output " + std::to_string(i) + " of '" + A + "' is " +
                      dtype_name(out->scalar_type()) + " " + shape_str(so) + ", input " + std::to_string(i) +
                      " of '" + B + "' is " + dtype_name(in->scalar_type()) + " " + shape_str(si));
    }
  }
}

// One variant of --pipeline timed: wall time per iteration (sorted), totals, host waits, and
// B's last output read back.
struct PipelineTiming {
  std::vector<double> wall;
  double total_us = 0, enqueue_us = 0, waits = -1;
  std::vector<uint8_t> last;
  ScalarType type = ScalarType::Float;
  size_t numel = 0;
};

// A then B on A's outputs, warm-up then a.bench timed iterations, with both methods' outputs
// left on the device (`on_device`: skip-copy) or copied to the host.
PipelineTiming measure_pipeline(Module& module, const Args& a, const std::string& A, const std::string& B,
                                const InputSet& in_a, const std::string& user_skip, bool on_device) {
  auto iteration = [&]() {
    const std::vector<EValue> out_a = execute(module, a.model, A, in_a.values);
    return execute(module, a.model, B, out_a);  // A's outputs stay valid until A's next execute
  };
  set_skip_copy(user_skip, on_device ? std::vector<std::string>{A, B} : std::vector<std::string>{});
  std::vector<EValue> out_b;
  for (long i = 0; i < std::max(a.warmup, 1L); ++i) out_b = iteration();
  host_bytes(last_tensor(out_b, a.model, B));  // idle GPU from here
  PipelineTiming r;
  EtCudaStats s0{}, s1{};
  bool have_stats = stats_snapshot(s0);
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < a.bench; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    out_b = iteration();
    r.wall.push_back(since_us(t0));
  }
  r.enqueue_us = since_us(start);
  const auto& last = last_tensor(out_b, a.model, B);
  r.last = host_bytes(last);
  r.total_us = since_us(start);
  have_stats = have_stats && stats_snapshot(s1);
  if (have_stats) r.waits = static_cast<double>(s1.host_waits - s0.host_waits);
  r.type = last.scalar_type();
  r.numel = static_cast<size_t>(last.numel());
  std::sort(r.wall.begin(), r.wall.end());
  return r;
}

}  // namespace

// --pipeline A,B: A runs on the host input of its first case and its outputs
// feed B. Round trip: every output goes to host memory and B reads it from
// there. Device chain: A's and B's outputs stay on the device (skip-copy) and
// B reads A's device outputs in place; only B's last output is copied to the
// host, after N iterations, and compared with the round trip's. Both methods
// share one stream (use_shared_cuda_stream, set before loading), so B's reads
// of A's outputs are ordered before A's next execute releases them (the backend
// keeps device outputs until that method's next execute).
bool run_pipeline(Module& module, const Args& a, Manifest& manifest, const std::string& user_skip) {
  const size_t comma = a.pipeline.find(',');
  if (comma == std::string::npos || comma == 0 || comma + 1 == a.pipeline.size() ||
      a.pipeline.find(',', comma + 1) != std::string::npos) {
    usage_error("--pipeline " + a.pipeline, "expected two method names, A,B");
  }
  const std::string A = a.pipeline.substr(0, comma), B = a.pipeline.substr(comma + 1);
  if (A == B) usage_error("--pipeline " + a.pipeline, "A and B must be different methods");
  std::vector<Case>* cases_a = cases_of(manifest, A);
  if (cases_a == nullptr || cases_a->empty()) fail(a.manifest, "no cases for method '" + A + "'");
  std::vector<Case>* cases_b = cases_of(manifest, B);

  const MethodMeta meta_a = method_meta(module, a.model, A);
  const MethodMeta meta_b = method_meta(module, a.model, B);
  for (size_t c = 0; c < cases_a->size(); ++c) {
    check_case((*cases_a)[c], meta_a, a.manifest, A + " case" + std::to_string(c));
  }
  if (cases_b != nullptr) {
    for (size_t c = 0; c < cases_b->size(); ++c) {
      check_case((*cases_b)[c], meta_b, a.manifest, B + " case" + std::to_string(c));
    }
  }
  require_unplanned_inputs(meta_b, a.model, B, "--pipeline");
  check_pipeline_values(meta_a, meta_b, a.model, A, B);
  load_method(module, a.model, A);
  load_method(module, a.model, B);

  bool all_pass = true;
  for (size_t c = 0; c < cases_a->size(); ++c) {
    all_pass = run_case(module, a.model, A, "case" + std::to_string(c), (*cases_a)[c]) && all_pass;
  }
  if (cases_b != nullptr) {
    for (size_t c = 0; c < cases_b->size(); ++c) {
      all_pass = run_case(module, a.model, B, "case" + std::to_string(c), (*cases_b)[c]) && all_pass;
    }
  }

  InputSet in_a;
  case_inputs((*cases_a)[0], false, 0, in_a);
  const PipelineTiming trip = measure_pipeline(module, a, A, B, in_a, user_skip, false);
  const PipelineTiming chain = measure_pipeline(module, a, A, B, in_a, user_skip, true);
  set_skip_copy(user_skip, {});

  const double n = static_cast<double>(a.bench);
  auto line = [&](const char* name, const PipelineTiming& r) {
    std::printf("pipeline %s: methods=%s,%s n=%ld warmup=%ld p50=%.1fus p99=%.1fus per_iter_total=%.1fus "
                "enqueue_total=%.1fus host_waits_per_iter=%.2f\n",
                name, A.c_str(), B.c_str(), a.bench, a.warmup, pct(r.wall, 0.5), pct(r.wall, 0.99), r.total_us / n,
                r.enqueue_us, r.waits >= 0 ? r.waits / n : -1.0);
  };
  line("round-trip", trip);
  line("device-chain", chain);
  const double p50_chain = pct(chain.wall, 0.5);
  std::printf("pipeline speedup: p50=%.2fx per_iter_total=%.2fx\n",
              p50_chain > 0 ? pct(trip.wall, 0.5) / p50_chain : 0.0,
              chain.total_us > 0 ? trip.total_us / chain.total_us : 0.0);
  Diff diff;
  const DType* dtype = dtype_by_type(chain.type);
  if (dtype == nullptr || chain.type != trip.type || chain.last.size() != trip.last.size()) {
    diff.fail_with("the two variants' last outputs differ in type or size");
  } else {
    diff.compare(chain.last.data(), trip.last.data(), chain.numel, *dtype, 0, default_tolerance(dtype->type));
  }
  std::printf("pipeline check: device chain vs round trip, last output of '%s': max_abs_err=%.3g %s%s%s\n",
              B.c_str(), diff.max_err, diff.pass ? "PASS" : "FAIL", diff.problem.empty() ? "" : ": ",
              diff.problem.c_str());
  return all_pass && diff.pass;
}

}  // namespace et_cuda_run
