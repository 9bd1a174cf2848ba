// What every part of et_cuda_run shares: failures and exit codes, text that
// reaches the terminal, ExecuTorch's log, files, dtypes and clocks.
#pragma once

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace et_cuda_run {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;

// Exit statuses (documented in --help and runner/README.md).
enum ExitCode : int {
  kExitOk = 0,       // every check passed
  kExitFailure = 1,  // a check failed (FAIL, MISMATCH) or an error
  kExitUsage = 2,    // the command line is wrong
  kExitNoCuda = 77,  // no CUDA driver or device: nothing was wrong with the input (automake's "skip")
};

// Any failure: reported as one line "et_cuda_run: <where>: <what>" and `code`.
struct Failure {
  std::string where;
  std::string what;
  int code = kExitFailure;
};

[[noreturn]] void fail(const std::string& where, const std::string& what);
[[noreturn]] void usage_error(const std::string& where, const std::string& what);
[[noreturn]] void no_cuda(const std::string& what);

// Text safe for a terminal: control characters, DEL and bytes that are not
// valid UTF-8 become \xNN; everything else is kept.
std::string sanitize(const std::string& text);

// ---------------------------------------------------------------- ExecuTorch log

// Routes ExecuTorch's log through the runner: error messages are kept for the
// next describe(); everything is printed to stderr with --verbose.
void install_log(bool verbose);
// "InvalidProgram" plus the errors ExecuTorch logged since the last call.
std::string describe(executorch::runtime::Error err);
// The errors ExecuTorch logged since the last call, "" when none (and forgets them).
std::string take_logged_errors();

// ---------------------------------------------------------------- files

std::string read_file(const std::string& path);
void require_readable(const std::string& path);
std::string dir_of(const std::string& path);
// `file` relative to `dir` unless it is absolute.
std::string join(const std::string& dir, const std::string& file);

// ---------------------------------------------------------------- dtypes

struct DType {
  const char* name;
  ScalarType type;
  size_t size;
};

const DType* dtype_by_name(const std::string& name);
const DType* dtype_by_type(ScalarType type);
std::string dtype_name(ScalarType type);
bool is_floating(ScalarType type);

// Widens one element to double; 16-bit floats are decoded from their bit patterns.
double element(const uint8_t* p, ScalarType type);

template <typename Sizes>
std::string shape_str(const Sizes& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return s + "]";
}

// "1,2,3"
std::string join_ints(const std::vector<int64_t>& values);

// ---------------------------------------------------------------- clocks

double since_us(std::chrono::steady_clock::time_point t0);
double thread_cpu_us();
// Milliseconds on the steady clock (as upstream's LLM runner stats count them).
double steady_ms();
// Percentile of sorted samples (nearest rank).
double pct(const std::vector<double>& sorted, double p);

}  // namespace et_cuda_run
