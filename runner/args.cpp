#include "args.h"

#include "backend.h"
#include "common.h"
#include "sampling.h"

#include <executorch/runtime/platform/runtime.h>

#include <CLI/CLI.hpp>

#include <dlfcn.h>

#include <cerrno>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstdlib>

#ifndef ET_CUDA_RUN_VERSION
#define ET_CUDA_RUN_VERSION "unknown"
#endif
#ifndef ET_CUDA_RUN_EXECUTORCH_VERSION
#define ET_CUDA_RUN_EXECUTORCH_VERSION "unknown"
#endif

namespace et_cuda_run {

namespace {

// Only the digits 0-9, at least one: strtol/strtoull would also take leading
// whitespace and a sign (" -1" became 2^64 - 1 as a seed).
bool all_digits(const char* value) {
  if (*value == '\0') return false;
  for (const char* c = value; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return false;
  }
  return true;
}

long parse_count(const std::string& flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  const long n = all_digits(value) ? std::strtol(value, &end, 10) : -1;
  if (n < 0 || *end != '\0' || errno != 0) {
    usage_error(flag, std::string("expects a count, got '") + value + "'");
  }
  return n;
}

// A count of at least 1 (--generate, --max-new-tokens, --seq_len).
long parse_positive(const std::string& flag, const char* value) {
  const long n = parse_count(flag, value);
  if (n < 1) usage_error(flag, "must be at least 1, got " + std::string(value));
  return n;
}

double parse_number(const std::string& flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(value, &end);
  if (*value == '\0' || *end != '\0' || errno != 0 || !std::isfinite(x)) {
    usage_error(flag, std::string("expects a number, got '") + value + "'");
  }
  return x;
}

uint64_t parse_seed(const std::string& flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  const bool digits = all_digits(value);
  const unsigned long long n = digits ? std::strtoull(value, &end, 10) : 0;
  if (!digits || *end != '\0' || errno != 0) {
    usage_error(flag, std::string("expects a non-negative integer, got '") + value + "'");
  }
  return n;
}

// "1,2,3" -> {1, 2, 3}: non-negative integers.
std::vector<int64_t> parse_ids(const std::string& flag, const std::string& value) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= value.size()) {
    const size_t comma = value.find(',', at);
    const std::string item = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    errno = 0;
    const long long n = all_digits(item.c_str()) ? std::strtoll(item.c_str(), &end, 10) : -1;
    if (n < 0 || *end != '\0' || errno != 0) {
      usage_error(flag, "expects comma-separated non-negative integers, got '" + value + "'");
    }
    out.push_back(n);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

constexpr const char* kHelp = R"(usage: et_cuda_run [MODEL.pte] [--data FILE.ptd ...] [--manifest FILE.json] [options]

Loads an ExecuTorch program whose methods are delegated to "CudaBackend" and
runs it: once on zero inputs, or every case of a manifest with a PASS/FAIL line
each, a benchmark, or a greedy token loop.

Program
  MODEL.pte              the program; optional with --manifest, which names it
                           et_cuda_run model.pte --data aoti_cuda_blob.ptd
  --data FILE.ptd        external named data (the weights); repeatable
  --manifest FILE.json   check every case of every method listed (format: runner/README.md);
                         prints "<method> case<i>: max_abs_err=<e> PASS|FAIL" per case
                           et_cuda_run --manifest fixtures/mlp_f32/manifest.json
  --method NAME          only this method (default: the manifest's methods, else forward)
                           et_cuda_run model.pte --method encoder

Backend
  --backend-lib PATH     the backend library to open before the program is loaded (default:
                         libexecutorch_cuda_backend.so next to et_cuda_run or in ../lib);
                         any library that registers "CudaBackend", e.g. upstream's C++ backend
                           et_cuda_run --manifest m.json --backend-lib /opt/et/libcuda_backend.so
  --option KEY=VALUE     set a "CudaBackend" option before loading, passed on unchanged
                         (true/false: bool, an integer: int, else a string); repeatable
                           --option use_shared_cuda_stream=true
                           --option skip_copy_output_to_cpu_for_method=forward
  --stats                print the backend's counters at the end (this project's backend only)
                           et_cuda_run --manifest m.json --stats
  --json                 results as JSON lines instead of text lines: one object per line, "kind"
                         first (case, bench, bench-lib, bench-wait, generate, generate-lib);
                         tests/models/runner_json.py reads them
                           et_cuda_run --manifest m.json --bench 200 --json
  --load-mode MODE       how ExecuTorch reads the .pte/.ptd files: file (default, ExecuTorch's
                         Module default: each piece read into memory) or mmap (mapped; pages come
                         from the page cache as the backend reads them)
                           et_cuda_run --manifest m.json --load-mode mmap
  --mem                  print the device memory in use (any backend; cuMemGetInfo from the driver):
                         "mem: ... context_mib= loaded_mib= peak_mib= end_mib=", beyond the CUDA
                         context, after the methods were loaded and the most seen between steps
                           et_cuda_run --manifest m.json --mem --backend-lib /opt/et/libcuda_backend.so
  --load-cycles N        load the program, run the method (--method, the manifest's first, or
                         forward) once on zero inputs and destroy it, N times in this process; prints
                         what stays behind per cycle (own allocations, generated-code modules, device
                         memory, RSS) and fails when the backend reports allocations or modules left
                           et_cuda_run --manifest m.json --load-cycles 10000

Benchmark (on the first case's inputs, or zeros without a manifest)
  --bench N              time N executes: "<method> bench: ... p50=...us", plus
                         "<method> bench-lib: ..." from the backend's counters
                           et_cuda_run --manifest m.json --bench 200 --warmup 20
  --warmup W             W untimed executes first (default 0)
  --device-io            inputs copied once to device memory and passed as device pointers,
                         outputs left on the device; adds "bench-wait" lines (each call then
                         waits for the GPU: cuCtxSynchronize, as torch.cuda.synchronize); needs a program exported with alloc_graph_input=False
                           et_cuda_run --manifest m.json --bench 200 --device-io
  --cases-on-device      run every manifest case with its inputs copied to device memory first
                         ("<method> case<i> device-io: ..." lines), for programs whose inputs must
                         be device memory (ExecuTorch >= 1.4 exports with skip_h2d_for_method_inputs
                         through upstream's backend); needs alloc_graph_input=False like --device-io
                           et_cuda_run --manifest m.json --cases-on-device --device-io --bench 200
  --enqueue N            N executes back to back without a wait, then one wait (implies --device-io)
                           et_cuda_run --manifest m.json --enqueue 50 --warmup 5
  --pipeline A,B         feed method A's device outputs to method B on one shared stream,
                         against the same chain through host memory (needs --manifest, --bench)
                           et_cuda_run --manifest m.json --pipeline encoder,decoder --bench 100

Token loop (decoders: input_ids int64 [1,T] [, cache_position int64 [T]] -> logits [1,T,V])
  --generate N           prefill the prompt, then N-1 single-token steps feeding back the chosen
                         token (greedy: the argmax; N >= 1); prints the tokens, time to first token, prefill and decode
                         tokens/s, host waits per token and a "PyTorchObserver {...}" line
                           et_cuda_run --manifest m.json --generate 16
  --prompt-ids I,J,...   the prompt (default: the manifest's generate.prompt_ids)
                           et_cuda_run model.pte --generate 8 --prompt-ids 1,15043,29892
  --expect-tokens I,...  compare with these tokens (default: the manifest's generate.tokens);
                         prints MATCH or MISMATCH
                           et_cuda_run model.pte --generate 3 --prompt-ids 1,2 --expect-tokens 7,7,9
  --generate-rounds R    run the whole loop R times on the loaded methods, each from position 0
                         (the cache is overwritten; every round is checked); the last round's
                         figures are the "generate:" line, steady state without first-call costs
                           et_cuda_run --manifest m.json --generate 48 --generate-rounds 3
  --prefill-method NAME  the method run on the prompt (default: manifest, --method, forward)
  --decode-method NAME   the method run per new token (default: manifest, --method, forward)
                           --prefill-method prefill --decode-method decode

Text generation (the token loop with a tokenizer.json: text on stdout, figures on stderr)
  --tokenizer FILE       a HuggingFace tokenizer.json (BPE, WordPiece or Unigram): the new tokens
                         are printed as text as they come, the loop stops at an end-of-sequence
                         token (<|endoftext|>, </s>, <|im_end|>, <eos>, ...: runner/README.md)
                           et_cuda_run model.pte --data w.ptd --tokenizer tokenizer.json --prompt "Hello"
  --prompt TEXT          the prompt as text, encoded with --tokenizer (instead of --prompt-ids)
  --max-new-tokens N     at most N new tokens (N >= 1; default 128, or what --seq_len leaves);
                         the same as --generate N
  --seq_len L            the prompt plus the new tokens at most L tokens
  --temperature T        0 (default): greedy, the argmax; T in [1e-6, 1e6]: sample from
                         softmax(logits / T) (the rule of the device sampler too).
                         With this project's backend the logits stay on the device and the token
                         is chosen there (et_cuda_sample): one host wait and 8 bytes per token
                           et_cuda_run m.pte --tokenizer t.json --prompt "Once" --temperature 0.8 --top-p 0.9 --seed 7
  --top-p P              with --temperature > 0: sample among the most likely tokens whose
                         probability reaches P, in (0, 1] (default 1: all)
  --seed S               the sampler's seed (default 0): the same seed gives the same text
  --sample-on-host       copy each row of logits to the host and choose there (same algorithm and
                         draws as on the device; the default with another backend, and for a
                         row longer than the device sampler takes: 2^22 logits)
  --no-overlap           wait for each token on the host before queueing the next step (by default,
                         where the token is chosen on the device, step i + 1 is queued with its id
                         read on the device from step i's choice before that token reaches the host:
                         et_cuda_sample_async; the "generate" line says overlap=yes|no)
  --overlap              the default, said explicitly (not with --no-overlap)
  --stop STRING          stop when the text contains STRING (not printed); repeatable
                           --stop "User:" --stop $'\n\n'   (bash: $'..' for a newline)
  --model_path FILE      the same as MODEL.pte (the spellings of ExecuTorch's LLM runner)
  --data_path FILE       the same as --data
  --tokenizer_path FILE  the same as --tokenizer

Other
  --verbose, -v          print ExecuTorch's log to stderr
                           et_cuda_run --manifest m.json -v
  --version              print the versions of this tool, ExecuTorch, the backend and the driver
                           et_cuda_run --version --backend-lib /opt/et/libcuda_backend.so
  --help, -h             this text

Every error is one line "et_cuda_run: <where>: <what>" on stderr. Checks that
need no GPU (files, manifest, signatures, dynamic-shape bounds) run before
anything is loaded onto the device.

Exit status
  0    everything ran and every check passed
  1    a check failed (FAIL, MISMATCH) or an error
  2    usage error (a wrong command line)
  77   no CUDA driver or device (the checks above ran and passed)
)";

}  // namespace

namespace {

// The raw values of the flags whose text parse_count & co. read after CLI11 has split the
// command line (their messages name the flag as given and quote the value as given).
struct Raw {
  std::string model, model_path, bench, warmup, enqueue, load_cycles, generate, max_new_tokens, seq_len;
  std::string temperature, top_p, seed, generate_rounds, prompt_ids, expect_tokens;
};

// CLI11's errors as ours: "<flag>: <what>" (exit status 2). Its messages start with the
// option's name and a colon where they concern one option.
[[noreturn]] void cli11_error(const CLI::ParseError& e) {
  const std::string msg = e.what();
  const size_t colon = msg.find(": ");
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && colon != std::string::npos &&
      msg.compare(0, 1, "-") == 0) {
    usage_error(msg.substr(0, colon), "missing value");
  }
  usage_error("usage", msg);
}

// The flags and their targets, as --help lists them; every flag may come again (the last
// value wins) except the repeatable ones, which keep every value.
void declare(CLI::App& app, Args& a, Raw& r, bool& have_prefill, bool& have_decode) {
  app.set_help_flag();  // --help prints kHelp, not CLI11's text
  app.allow_extras();   // a second model or an unknown flag: our messages, below
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto each = [&](const char* name, std::vector<std::string>& to) {
    app.add_option(name, to)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  };
  app.add_option("model", r.model);
  app.add_option("--model_path", r.model_path);
  each("--data,--data_path", a.data);
  app.add_option("--method", a.method);
  app.add_option("--manifest", a.manifest);
  app.add_option("--backend-lib", a.backend_lib);
  app.add_option("--bench", r.bench);
  app.add_option("--warmup", r.warmup);
  app.add_option("--enqueue", r.enqueue);
  app.add_flag("--device-io", a.device_io);
  app.add_flag("--cases-on-device", a.cases_on_device);
  app.add_option("--pipeline", a.pipeline);
  each("--option", a.options);
  app.add_flag("--stats", a.stats);
  app.add_flag("--json", a.json);
  app.add_option("--load-mode", a.load_mode);
  app.add_flag("--mem", a.mem);
  app.add_option("--load-cycles", r.load_cycles);
  app.add_option("--generate", r.generate);
  app.add_option("--max-new-tokens", r.max_new_tokens);
  app.add_option("--tokenizer,--tokenizer_path", a.tokenizer);
  app.add_option("--prompt", a.prompt);
  app.add_option("--seq_len", r.seq_len);
  app.add_option("--temperature", r.temperature);
  app.add_option("--top-p", r.top_p);
  app.add_option("--seed", r.seed);
  each("--stop", a.stop);
  app.add_flag("--sample-on-host", a.sample_on_host);
  app.add_flag("--overlap", a.overlap);
  app.add_flag("--no-overlap", a.no_overlap);
  app.add_option("--generate-rounds", r.generate_rounds);
  app.add_option("--prompt-ids", r.prompt_ids);
  app.add_option("--expect-tokens", r.expect_tokens);
  app.add_option("--prefill-method", a.prefill_method)->each([&](const std::string&) { have_prefill = true; });
  app.add_option("--decode-method", a.decode_method)->each([&](const std::string&) { have_decode = true; });
  app.add_flag("-v,--verbose", a.verbose);
  app.add_flag("-h,--help", a.help);
  app.add_flag("--version", a.version);
}

// The values CLI11 left as text, read with this file's parsers.
void read_values(const CLI::App& app, Args& a, const Raw& r) {
  const std::vector<std::string> extra = app.remaining();
  for (const std::string& e : extra) {
    if (!e.empty() && e[0] == '-') usage_error(e, "unknown flag");
  }
  if (!extra.empty() || (!r.model.empty() && !r.model_path.empty())) {
    usage_error(extra.empty() ? "--model_path" : extra[0], "more than one model given");
  }
  a.model = r.model.empty() ? r.model_path : r.model;
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--bench")) a.bench = parse_count("--bench", r.bench.c_str());
  if (given("--warmup")) a.warmup = parse_count("--warmup", r.warmup.c_str());
  if (given("--enqueue")) a.enqueue = parse_count("--enqueue", r.enqueue.c_str());
  if (given("--load-cycles")) a.load_cycles = parse_count("--load-cycles", r.load_cycles.c_str());
  if (a.load_mode != "file" && a.load_mode != "mmap") usage_error("--load-mode", "is file or mmap, not '" + a.load_mode + "'");
  // --generate and --max-new-tokens are one count: the second one given is refused.
  int counts = 0;
  for (const CLI::Option* o : app.parse_order()) {
    const std::string name = o->get_name();
    if (name != "--generate" && name != "--max-new-tokens") continue;
    if (++counts > 1) usage_error(name, "the number of new tokens was given already (--generate/--max-new-tokens)");
    a.generate = parse_positive(name, (name == "--generate" ? r.generate : r.max_new_tokens).c_str());
  }
  a.have_prompt = given("--prompt");
  if (given("--seq_len")) a.seq_len = parse_positive("--seq_len", r.seq_len.c_str());
  if (given("--temperature")) a.temperature = parse_number("--temperature", r.temperature.c_str());
  if (given("--top-p")) a.top_p = parse_number("--top-p", r.top_p.c_str());
  if (given("--seed")) a.seed = parse_seed("--seed", r.seed.c_str()), a.have_seed = true;
  if (given("--generate-rounds")) a.generate_rounds = parse_count("--generate-rounds", r.generate_rounds.c_str());
  if (given("--prompt-ids")) a.prompt_ids = parse_ids("--prompt-ids", r.prompt_ids), a.have_prompt_ids = true;
  if (given("--expect-tokens")) {
    a.expect_tokens = parse_ids("--expect-tokens", r.expect_tokens), a.have_expect_tokens = true;
  }
}

// The rules between flags (runner/README.md).
void check_rules(Args& a, bool have_prefill, bool have_decode) {
  if (a.model.empty() && a.manifest.empty()) usage_error("usage", "no MODEL.pte and no --manifest given");
  const bool text_flags = a.have_prompt || a.seq_len > 0 || a.temperature != 0 || a.top_p != 1 || a.have_seed ||
                          !a.stop.empty() || !a.tokenizer.empty();
  a.generating = a.generate > 0 || a.have_prompt;
  const bool generating = a.generating;
  if (a.overlap && a.no_overlap) usage_error("--overlap/--no-overlap", "give one of them");
  if (a.overlap && !generating) usage_error("--overlap", "only with a token loop: --generate N or --prompt TEXT");
  if (a.no_overlap && !generating) usage_error("--no-overlap", "only with a token loop: --generate N or --prompt TEXT");
  if (text_flags && !generating) {
    usage_error("--tokenizer/--seq_len/--temperature/--top-p/--seed/--stop",
                "only with a token loop: --prompt TEXT, --generate N or --max-new-tokens N");
  }
  if (a.have_prompt && a.tokenizer.empty()) usage_error("--prompt", "needs --tokenizer tokenizer.json to encode it");
  if (a.have_prompt && a.have_prompt_ids) usage_error("--prompt", "and --prompt-ids: give one prompt");
  if (!(a.top_p > 0 && a.top_p <= 1)) usage_error("--top-p", "must be in (0, 1]");
  {
    SamplingParams sp;
    sp.temperature = a.temperature;  // the rule of the host and the device samplers (sampling.h)
    const std::string bad = check_sampling(sp);
    if (!bad.empty()) usage_error("--temperature", bad);
  }
  if (!a.stop.empty() && a.tokenizer.empty()) usage_error("--stop", "needs --tokenizer (stop strings are text)");
  for (const std::string& s : a.stop) {
    if (s.empty()) usage_error("--stop", "an empty stop string would stop at once");
  }
  if (!a.tokenizer.empty() && a.generate_rounds != 1) {
    usage_error("--generate-rounds", "does not combine with --tokenizer (one text per run)");
  }
  if ((a.have_prompt_ids || a.have_expect_tokens || have_prefill || have_decode || a.generate_rounds != 1) &&
      !generating) {
    usage_error("--prompt-ids/--expect-tokens/--prefill-method/--decode-method/--generate-rounds",
                "only with --generate N (or --prompt TEXT)");
  }
  if (a.generate_rounds < 1) usage_error("--generate-rounds", "must be at least 1");
  if (a.load_cycles > 0 && (generating || a.bench > 0 || a.enqueue > 0 || !a.pipeline.empty() || a.device_io)) {
    usage_error("--load-cycles", "cannot be combined with --generate, --bench, --enqueue, --pipeline or --device-io");
  }
  if (generating && (a.bench > 0 || a.enqueue > 0 || !a.pipeline.empty() || a.device_io)) {
    usage_error("--generate", "cannot be combined with --bench, --enqueue, --pipeline or --device-io");
  }
  if (have_prefill && a.prefill_method.empty()) usage_error("--prefill-method", "empty method name");
  if (have_decode && a.decode_method.empty()) usage_error("--decode-method", "empty method name");
  if (!a.pipeline.empty() && (a.manifest.empty() || a.bench <= 0)) {
    usage_error("--pipeline", "needs --manifest (A's input is its first case's) and --bench N");
  }
  if (a.cases_on_device && (a.manifest.empty() || generating || !a.pipeline.empty())) {
    usage_error("--cases-on-device", "needs --manifest and does not combine with --generate or --pipeline");
  }
  if (a.enqueue > 0) a.device_io = true;
}

}  // namespace

Args parse_args(int argc, char** argv) {
  Args a;
  Raw r;
  bool have_prefill = false, have_decode = false;
  CLI::App app{"et_cuda_run", "et_cuda_run"};
  declare(app, a, r, have_prefill, have_decode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    cli11_error(e);
  }
  if (a.help || a.version) return a;
  read_values(app, a, r);
  check_rules(a, have_prefill, have_decode);
  return a;
}

std::string user_option(const Args& a, const std::string& key) {
  std::string value;
  const std::string prefix = key + "=";
  for (const std::string& o : a.options) {
    if (o.compare(0, prefix.size(), prefix) == 0) value = o.substr(prefix.size());
  }
  return value;
}

void print_help() {
  std::fputs(kHelp, stdout);
}

void print_version(const Args& a) {
  std::printf("et_cuda_run %s\n", ET_CUDA_RUN_VERSION);
  Dl_info info{};
  const bool where = dladdr(reinterpret_cast<void*>(&executorch::runtime::runtime_init), &info) != 0 &&
                     info.dli_fname != nullptr;
  std::string loaded;
  if (where) {
    char real[PATH_MAX];
    loaded = realpath(info.dli_fname, real) != nullptr ? real : info.dli_fname;
  }
  std::printf("ExecuTorch runtime: %s (built against)%s%s\n", ET_CUDA_RUN_EXECUTORCH_VERSION,
              where ? ", loaded from " : "", sanitize(loaded).c_str());
  try {
    load_backend(a.backend_lib);
    const std::string v = backend_library_version();
    std::printf("backend library: %s (%s)\n", sanitize(backend_path()).c_str(),
                v.empty() ? "no et_cuda_version: not this project's backend" : ("executorch-cuda " + sanitize(v)).c_str());
  } catch (const Failure& f) {
    std::printf("backend library: not loaded: %s: %s\n", sanitize(f.where).c_str(), sanitize(f.what).c_str());
  }
  const DriverInfo d = probe_driver();
  if (!d.loaded) {
    std::printf("CUDA driver: none: %s\n", sanitize(d.problem).c_str());
  } else {
    std::printf("CUDA driver: %s (libcuda.so.1), %d device(s)%s%s\n",
                d.version > 0 ? driver_version_string(d.version).c_str() : "unknown version", d.device_count,
                d.problem.empty() ? "" : ": ", sanitize(d.problem).c_str());
  }
}

}  // namespace et_cuda_run
