// The command line: flags, --help and --version.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace et_cuda_run {

struct Args {
  std::string model;
  std::vector<std::string> data;
  std::string method;
  std::string manifest;
  std::string backend_lib;
  long bench = 0, warmup = 0, enqueue = 0;
  std::vector<std::string> options;
  bool stats = false;
  bool json = false;  // --json: results as JSON lines (runner/json.h)
  std::string load_mode = "file";  // --load-mode: file or mmap
  bool mem = false;  // --mem: device memory in use after load and the peak seen
  bool device_io = false;
  bool cases_on_device = false;  // --cases-on-device: the manifest's cases run on device inputs
  bool verbose = false;
  bool help = false;
  bool version = false;
  std::string pipeline;  // "A,B"

  // --generate
  long generate = 0;  // N new tokens (--generate N or --max-new-tokens N, N >= 1); 0: not given
  bool generating = false;  // a token loop: --generate, --max-new-tokens or --prompt
  long load_cycles = 0;      // --load-cycles N: load, run once and destroy N times
  long generate_rounds = 1;  // the whole loop this many times (prompt from position 0 each time)
  bool have_prompt_ids = false, have_expect_tokens = false;
  std::vector<int64_t> prompt_ids, expect_tokens;
  std::string prefill_method, decode_method;

  // Text generation (runner/README.md "Text generation")
  std::string tokenizer;  // tokenizer.json: text out (and --prompt in)
  bool have_prompt = false;
  std::string prompt;
  long seq_len = 0;  // --seq_len: prompt plus new tokens at most; 0: not given
  double temperature = 0;  // 0: greedy
  double top_p = 1;
  uint64_t seed = 0;
  bool have_seed = false;
  std::vector<std::string> stop;
  bool sample_on_host = false;  // --sample-on-host: logits copied back, token chosen on the host
  bool overlap = false;     // --overlap: the default (queue each step before the previous token reaches the host)
  bool no_overlap = false;  // --no-overlap: each step waits for the previous token on the host
};

// Parses argv; a wrong command line is a usage error (exit status 2).
Args parse_args(int argc, char** argv);

// The value the user gave an option with --option (the last one wins), or "".
std::string user_option(const Args& a, const std::string& key);

// --help: every flag with an example, on stdout.
void print_help();
// --version: this tool, the ExecuTorch runtime, the backend library, the CUDA driver.
void print_version(const Args& a);

}  // namespace et_cuda_run
