#include "common.h"

#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace et_cuda_run {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Failure{where, what, kExitFailure};
}

[[noreturn]] void usage_error(const std::string& where, const std::string& what) {
  throw Failure{where, what + " (see et_cuda_run --help)", kExitUsage};
}

[[noreturn]] void no_cuda(const std::string& what) {
  throw Failure{"no CUDA device", what, kExitNoCuda};
}

std::string sanitize(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    char buf[5];
    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
    out += buf;
  };
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence of 2 to 4 bytes (no overlongs, no surrogates, <= U+10FFFF).
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (ok) {
      ok = !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
    }
    if (ok && cp >= 0x80 && cp < 0xa0) ok = false;  // C1 control characters
    if (ok) {
      out.append(text, i, len);
      i += len;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

// ---------------------------------------------------------------- ExecuTorch log

namespace {

bool g_verbose = false;
std::string g_et_errors;  // Error-level ExecuTorch log messages not yet reported

void emit_log(et_timestamp_t, et_pal_log_level_t level, const char* filename, const char*, size_t line,
              const char* message, size_t length) {
  std::string text(message, length);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  if (level == kError || level == kFatal) {
    g_et_errors += (g_et_errors.empty() ? "" : "; ") + text;
  }
  if (g_verbose) {
    std::fprintf(stderr, "[executorch %c %s:%zu] %s\n", static_cast<char>(level), sanitize(filename).c_str(), line,
                 sanitize(text).c_str());
  }
}

}  // namespace

void install_log(bool verbose) {
  g_verbose = verbose;
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(emit_log, "et_cuda_run"));
}

std::string take_logged_errors() {
  std::string s;
  s.swap(g_et_errors);
  return s;
}

std::string describe(executorch::runtime::Error err) {
  std::string s = executorch::runtime::to_string(err);
  const std::string logged = take_logged_errors();
  if (!logged.empty()) {
    s += " (" + logged + ")";
  }
  return s;
}

// ---------------------------------------------------------------- files

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    fail(path, "read error");
  }
  return ss.str();
}

void require_readable(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  }
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

std::string join(const std::string& dir, const std::string& file) {
  return file.empty() || file[0] == '/' ? file : dir + "/" + file;
}

// ---------------------------------------------------------------- dtypes

namespace {

constexpr DType kDTypes[] = {
    {"float32", ScalarType::Float, 4}, {"bfloat16", ScalarType::BFloat16, 2}, {"float16", ScalarType::Half, 2},
    {"int64", ScalarType::Long, 8},    {"int32", ScalarType::Int, 4},         {"bool", ScalarType::Bool, 1},
};

}  // namespace

const DType* dtype_by_name(const std::string& name) {
  for (const DType& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DType* dtype_by_type(ScalarType type) {
  for (const DType& d : kDTypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

std::string dtype_name(ScalarType type) {
  const DType* d = dtype_by_type(type);
  return d ? d->name : "ScalarType(" + std::to_string(static_cast<int>(type)) + ")";
}

bool is_floating(ScalarType type) {
  return type == ScalarType::Float || type == ScalarType::BFloat16 || type == ScalarType::Half;
}

double element(const uint8_t* p, ScalarType type) {
  switch (type) {
    case ScalarType::Float: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case ScalarType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case ScalarType::Half: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const int exp = (h >> 10) & 0x1F;
      const int mant = h & 0x3FF;
      double v = exp == 0 ? std::ldexp(mant, -24)
                          : exp == 31 ? (mant ? NAN : INFINITY) : std::ldexp(mant + 1024, exp - 25);
      return (h & 0x8000) ? -v : v;
    }
    case ScalarType::Long: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case ScalarType::Int: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case ScalarType::Bool:
      return *p != 0;
    default:
      return NAN;
  }
}

std::string join_ints(const std::vector<int64_t>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    s += (i ? "," : "") + std::to_string(values[i]);
  }
  return s;
}

// ---------------------------------------------------------------- clocks

double since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5))];
}

}  // namespace et_cuda_run
