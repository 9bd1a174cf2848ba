// et_cuda_run: load an ExecuTorch program delegated to "CudaBackend", run it,
// and check it against a manifest, benchmark it, or run a greedy token loop.
// `et_cuda_run --help` lists every flag; runner/README.md describes the tool,
// the manifest format and the output lines.
//
// Order of work: the command line, the manifest, the files' framing, the
// backend library, the program and the methods' signatures (dynamic-shape
// bounds, decoder signature) are all checked before anything is loaded onto
// the device, so that bad input is reported on machines without a GPU too.
// Then CUDA is required (exit status 77 without it), the methods are loaded
// and run.

#include "args.h"
#include "backend.h"
#include "bench.h"
#include "common.h"
#include "cycles.h"
#include "file_check.h"
#include "generate.h"
#include "json.h"
#include "manifest.h"
#include "methods.h"

#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

namespace et_cuda_run {
namespace {

using executorch::runtime::Error;
using executorch::runtime::Program;

// Loads the program (not its methods); blames the .ptd files when the program
// loads without them.
void load_program(Module& module, const Args& a) {
  const Error err = module.load(Program::Verification::InternalConsistency);
  if (err == Error::Ok) return;
  const std::string why = describe(err);
  if (!a.data.empty() && Module(a.model).load(Program::Verification::InternalConsistency) == Error::Ok) {
    std::string files;
    for (const std::string& d : a.data) files += (files.empty() ? "" : ", ") + d;
    take_logged_errors();
    fail(files, "cannot load as external data: " + why);
  }
  fail(a.model, "cannot load program: " + why);
}

// Every case of the selected methods, in file order on one loaded method per
// method (state such as a KV cache carries from one case to the next).
bool run_manifest(Module& module, const Args& a, Manifest& manifest, const std::string& user_skip,
                  int32_t device_index) {
  if (!a.method.empty() && cases_of(manifest, a.method) == nullptr) {
    fail(a.manifest, "no cases for method '" + a.method + "'");
  }
  const bool timed = a.bench > 0 || a.enqueue > 0;
  std::vector<std::pair<std::string, std::vector<Case>*>> selected;
  for (auto& [method, cases] : manifest.methods) {
    if (a.method.empty() || method == a.method) selected.emplace_back(method, &cases);
  }
  // Every check that needs no GPU, for every method, before any is loaded.
  for (auto& [method, cases] : selected) {
    const MethodMeta meta = method_meta(module, a.model, method);
    for (size_t c = 0; c < cases->size(); ++c) {
      check_case((*cases)[c], meta, a.manifest, method + " case" + std::to_string(c));
    }
    if (a.device_io && timed) require_unplanned_inputs(meta, a.model, method, "--device-io");
    if (a.cases_on_device) require_unplanned_inputs(meta, a.model, method, "--cases-on-device");
  }
  bool all_pass = true;
  for (auto& [method, cases] : selected) {
    load_method(module, a.model, method);
    if (a.cases_on_device) set_skip_copy(user_skip, {method});
    for (size_t c = 0; c < cases->size(); ++c) {
      if (a.cases_on_device) {
        // Inputs in device memory from the first execute on: for programs whose method inputs
        // must be device memory (ExecuTorch >= 1.4 exports with skip_h2d_for_method_inputs,
        // which upstream's backend refuses to receive as host memory).
        InputSet device_inputs;
        case_inputs((*cases)[c], true, device_index, device_inputs);
        all_pass = run_case(module, a.model, method, "case" + std::to_string(c) + " device-io", (*cases)[c],
                            &device_inputs.values) &&
                   all_pass;
      } else {
        all_pass = run_case(module, a.model, method, "case" + std::to_string(c), (*cases)[c]) && all_pass;
      }
    }
    if (a.cases_on_device) set_skip_copy(user_skip, {});
    if (!timed || cases->empty()) continue;
    InputSet inputs;
    case_inputs((*cases)[0], a.device_io, device_index, inputs);
    if (a.device_io && !a.cases_on_device) {
      set_skip_copy(user_skip, {method});
      all_pass = run_case(module, a.model, method, "case0 device-io", (*cases)[0], &inputs.values) && all_pass;
    }
    if (a.device_io && a.cases_on_device) set_skip_copy(user_skip, {method});
    if (a.bench > 0) bench(module, a.model, method, inputs.values, a.warmup, a.bench, a.device_io);
    if (a.bench > 0 && a.device_io) bench(module, a.model, method, inputs.values, a.warmup, a.bench, true, true);
    if (a.enqueue > 0) enqueue(module, a.model, method, inputs.values, a.warmup, a.enqueue);
    if (a.device_io) set_skip_copy(user_skip, {});
  }
  return all_pass;
}

// No manifest: one method on zero inputs shaped from its signature.
void run_zero_inputs(Module& module, const Args& a, const std::string& user_skip, int32_t device_index) {
  const bool timed = a.bench > 0 || a.enqueue > 0;
  const std::string method = a.method.empty() ? "forward" : a.method;
  const MethodMeta meta = method_meta(module, a.model, method);
  if (a.device_io && timed) require_unplanned_inputs(meta, a.model, method, "--device-io");
  std::vector<std::vector<uint8_t>> buffers;
  InputSet host;
  zero_inputs(meta, a.model, method, buffers, host, false, device_index);
  load_method(module, a.model, method);
  const std::vector<EValue> outputs = execute(module, a.model, method, host.values);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].isTensor()) {
      const auto& t = outputs[i].toTensor();
      std::printf("%s output %zu: %s %s\n", method.c_str(), i, dtype_name(t.scalar_type()).c_str(),
                  shape_str(t.sizes()).c_str());
    } else {
      std::printf("%s output %zu: (not a tensor)\n", method.c_str(), i);
    }
  }
  if (!timed) return;
  InputSet device;
  if (a.device_io) {
    zero_inputs(meta, a.model, method, buffers, device, true, device_index);
    set_skip_copy(user_skip, {method});
  }
  const std::vector<EValue>& inputs = a.device_io ? device.values : host.values;
  if (a.bench > 0) bench(module, a.model, method, inputs, a.warmup, a.bench, a.device_io);
  if (a.bench > 0 && a.device_io) bench(module, a.model, method, inputs, a.warmup, a.bench, true, true);
  if (a.enqueue > 0) enqueue(module, a.model, method, inputs, a.warmup, a.enqueue);
  if (a.device_io) set_skip_copy(user_skip, {});
}

// --tokenizer loaded, and --prompt's text encoded into a.prompt_ids; null without --tokenizer.
std::unique_ptr<Tokenizer> load_tokenizer_and_prompt(Args& a) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (!a.tokenizer.empty()) {
    std::string error;
    tokenizer = Tokenizer::load(a.tokenizer, error);
    if (!tokenizer) fail(a.tokenizer, error);
  }
  if (a.have_prompt) {
    std::vector<uint32_t> ids;
    std::string error;
    if (!tokenizer->encode(a.prompt, ids, error)) fail("--prompt", error);
    if (ids.empty()) usage_error("--prompt", "the text encodes to no tokens");
    a.prompt_ids.assign(ids.begin(), ids.end());
    a.have_prompt_ids = true;
  }
  return tokenizer;
}

// The manifest of --manifest; the program and data files it names unless given on the command line.
Manifest read_manifest(Args& a) {
  Manifest manifest = parse_manifest(a.manifest);
  if (a.model.empty()) a.model = manifest.model;
  if (a.data.empty()) a.data = manifest.data;
  if (a.model.empty()) fail(a.manifest, "no \"model\" and no MODEL.pte given");
  if (!a.generating && manifest.methods.empty()) {
    usage_error(a.manifest, "the manifest has no cases, only \"generate\": pass --generate N");
  }
  return manifest;
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a run killed by a timeout keeps its lines
  Args a = parse_args(argc, argv);
  if (a.help) {
    print_help();
    return kExitOk;
  }
  install_log(a.verbose);
  set_json(a.json);
  executorch::runtime::runtime_init();
  if (a.version) {
    print_version(a);
    return kExitOk;
  }

  // The tokenizer and the prompt's ids first: a bad tokenizer.json or prompt
  // is reported before any program file is read.
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer_and_prompt(a);

  Manifest manifest;
  const bool have_manifest = !a.manifest.empty();
  if (have_manifest) manifest = read_manifest(a);
  check_program_file(a.model);
  for (const std::string& d : a.data) check_data_file(d);

  load_backend(a.backend_lib);
  for (const std::string& o : a.options) set_backend_option(o);
  const std::string user_skip = user_option(a, kSkipCopy);
  int32_t device_index = 0;
  if (const std::string d = user_option(a, "device_index"); !d.empty()) {
    device_index = static_cast<int32_t>(std::strtol(d.c_str(), nullptr, 10));
  }
  if (a.mem) mem_enable(device_index);
  if (!a.pipeline.empty()) {
    // Before any method is loaded: the stream is chosen at init.
    set_backend_option("use_shared_cuda_stream=true");
  }

  if (a.load_cycles > 0) {
    std::string method = a.method;
    if (method.empty()) method = have_manifest && !manifest.methods.empty() ? manifest.methods[0].first : "forward";
    return run_load_cycles(a, method, device_index) ? kExitOk : kExitFailure;
  }
  const double load_start_ms = steady_ms();
  Module module(a.model, a.data, a.load_mode == "mmap" ? Module::LoadMode::Mmap : Module::LoadMode::File);
  load_program(module, a);

  bool all_pass = true;
  if (a.generating) {
    Args g = a;
    if (g.prefill_method.empty()) g.prefill_method = a.method;
    if (g.decode_method.empty()) g.decode_method = a.method;
    GeneratePlan plan = plan_generate(module, g, have_manifest ? &manifest : nullptr, tokenizer.get());
    plan.device = device_index;
    // The logits stay on the device and the token is chosen there, unless asked otherwise.
    const bool device_sampling = !a.sample_on_host && can_sample_on_device();
    if (device_sampling) set_skip_copy(user_skip, {plan.prefill_method, plan.decode_method});
    all_pass = run_generate(module, a.model, plan, load_start_ms);
    if (device_sampling) set_skip_copy(user_skip, {});
  } else if (!a.pipeline.empty()) {
    all_pass = run_pipeline(module, a, manifest, user_skip);
  } else if (have_manifest) {
    all_pass = run_manifest(module, a, manifest, user_skip, device_index);
  } else {
    run_zero_inputs(module, a, user_skip, device_index);
  }
  mem_report();
  print_load_phases();
  if (a.stats) print_stats();
  return all_pass ? kExitOk : kExitFailure;
}

}  // namespace
}  // namespace et_cuda_run

int main(int argc, char** argv) {
  using et_cuda_run::sanitize;
  try {
    return et_cuda_run::run(argc, argv);
  } catch (const et_cuda_run::Failure& f) {
    if (f.code != et_cuda_run::kExitUsage) et_cuda_run::mem_report_if_started();
    std::fflush(stdout);
    std::fprintf(stderr, "et_cuda_run: %s: %s\n", sanitize(f.where).c_str(), sanitize(f.what).c_str());
    return f.code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "et_cuda_run: %s\n", sanitize(e.what()).c_str());
  } catch (...) {
    std::fflush(stdout);
    std::fprintf(stderr, "et_cuda_run: unexpected error\n");
  }
  return et_cuda_run::kExitFailure;
}
