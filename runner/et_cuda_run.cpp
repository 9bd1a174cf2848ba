// et_cuda_run: load an ExecuTorch program delegated to CudaBackend, run it, and
// optionally check it against a fixture manifest or benchmark it.
//
//   et_cuda_run MODEL.pte [--data FILE.ptd ...] [--method NAME]
//               [--manifest DIR/manifest.json] [--bench N] [--warmup W]
//               [--device-io] [--enqueue N] [--pipeline A,B]
//               [--option key=value ...] [--stats] [--verbose]
//
// --bench prints "<method> bench: ..." (each call as it returns) and, from the
// library's counters, "<method> bench-lib: ..." (host time inside execute,
// backend overhead, host waits per call). --device-io passes inputs as device
// pointers and leaves outputs on the device, and adds "bench-wait" lines (each
// call followed by a wait for the GPU). --enqueue and --pipeline: see usage().
//
// Every error is one line "et_cuda_run: <file>: <problem>" on stderr and exit
// status 1. ExecuTorch's own log goes to stderr only with --verbose; otherwise
// its last error message is appended to the error line.

#include <executorch_cuda.h>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::extension::TensorPtr;
using executorch::extension::module::Module;
using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Tag;

// Any failure: reported as "et_cuda_run: <where>: <what>".
struct Failure {
  std::string where;
  std::string what;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Failure{where, what};
}

// ---------------------------------------------------------------- ExecuTorch log

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
    std::fprintf(stderr, "[executorch %c %s:%zu] %s\n", static_cast<char>(level), filename, line, text.c_str());
  }
}

// "InvalidProgram" plus the errors ExecuTorch logged since the last report.
std::string describe(Error err) {
  std::string s = executorch::runtime::to_string(err);
  if (!g_et_errors.empty()) {
    s += " (" + g_et_errors + ")";
  }
  g_et_errors.clear();
  return s;
}

// ---------------------------------------------------------------- JSON

// A JSON value: just enough for the fixture manifests.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json* find(const std::string& key) const {
    for (const auto& kv : object) {
      if (kv.first == key) {
        return &kv.second;
      }
    }
    return nullptr;
  }
};

// Recursive-descent parser; errors name the line and column.
class JsonParser {
 public:
  JsonParser(const std::string& text, std::string file) : s_(text), file_(std::move(file)) {}

  Json parse_document() {
    Json v = value(0);
    skip_ws();
    if (pos_ != s_.size()) {
      error("unexpected text after the JSON value");
    }
    return v;
  }

 private:
  const std::string& s_;
  std::string file_;
  size_t pos_ = 0;

  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail(file_, "invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(const char* word) {
    const size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }

  Json value(int depth) {
    if (depth > 64) {
      error("nesting deeper than 64 levels");
    }
    skip_ws();
    if (pos_ >= s_.size()) {
      error("unexpected end of input");
    }
    Json v;
    const char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::Object;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') {
          error("expected a string key");
        }
        std::string key = string_literal();
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') {
          error("expected ':' after a key");
        }
        ++pos_;
        v.object.emplace_back(std::move(key), value(depth + 1));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
        } else if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return v;
        } else {
          error("expected ',' or '}' in an object");
        }
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.array.push_back(value(depth + 1));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
        } else if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return v;
        } else {
          error("expected ',' or ']' in an array");
        }
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      v.string = string_literal();
      return v;
    }
    if (consume("true")) {
      v.kind = Json::Bool;
      v.boolean = true;
      return v;
    }
    if (consume("false")) {
      v.kind = Json::Bool;
      return v;
    }
    if (consume("null")) {
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Number;
      v.number = number();
      return v;
    }
    error(std::string("unexpected character '") + c + "'");
  }

  // -?digits[.digits][(e|E)[+-]digits], checked here because strtod accepts more.
  double number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == from) error("malformed number");
    };
    if (s_[pos_] == '-') ++pos_;
    digits();
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    return std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
  }

  // A "..." literal; \uXXXX escapes outside ASCII are kept as UTF-8.
  std::string string_literal() {
    ++pos_;  // opening quote
    std::string out;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') {
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        error("control character in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) {
        break;
      }
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) {
            error("truncated \\u escape");
          }
          unsigned cp = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = s_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') cp |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') cp |= static_cast<unsigned>(h - 'A' + 10);
            else error("bad hex digit in \\u escape");
          }
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {  // surrogate pairs are not combined; manifests are ASCII
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          error(std::string("unknown escape '\\") + e + "'");
      }
    }
    error("unterminated string");
  }
};

// ---------------------------------------------------------------- files and dtypes

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
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

struct DType {
  const char* name;
  ScalarType type;
  size_t size;
};

constexpr DType kDTypes[] = {
    {"float32", ScalarType::Float, 4}, {"bfloat16", ScalarType::BFloat16, 2}, {"float16", ScalarType::Half, 2},
    {"int64", ScalarType::Long, 8},    {"int32", ScalarType::Int, 4},         {"bool", ScalarType::Bool, 1},
};

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

template <typename Sizes>
std::string shape_str(const Sizes& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return s + "]";
}

// Widens one element to double; 16-bit floats are decoded from their bit patterns.
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

// ---------------------------------------------------------------- manifest

struct TensorSpec {
  const DType* dtype = nullptr;
  std::vector<SizesType> sizes;
  std::string file;  // resolved path
  std::vector<uint8_t> bytes;

  size_t numel() const {
    size_t n = 1;
    for (SizesType s : sizes) n *= static_cast<size_t>(s);
    return n;
  }
};

struct Case {
  std::vector<TensorSpec> inputs, outputs;
};

struct Manifest {
  std::string model;
  std::vector<std::string> data;
  std::vector<std::pair<std::string, std::vector<Case>>> methods;
};

const Json& member(const Json& obj, const std::string& key, Json::Kind kind, const std::string& file,
                   const std::string& where) {
  const Json* v = obj.find(key);
  static const char* kinds[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
  if (v == nullptr) fail(file, where + ": missing \"" + key + "\"");
  if (v->kind != kind) fail(file, where + ": \"" + key + "\" must be " + kinds[kind]);
  return *v;
}

TensorSpec parse_tensor(const Json& j, const std::string& file, const std::string& dir, const std::string& where) {
  if (j.kind != Json::Object) fail(file, where + " must be an object");
  TensorSpec t;
  const std::string& dtype = member(j, "dtype", Json::String, file, where).string;
  t.dtype = dtype_by_name(dtype);
  if (t.dtype == nullptr) fail(file, where + ": unsupported dtype \"" + dtype + "\"");
  for (const Json& s : member(j, "sizes", Json::Array, file, where).array) {
    if (s.kind != Json::Number || s.number < 0 || s.number != std::floor(s.number) || s.number > INT32_MAX) {
      fail(file, where + ": sizes must be non-negative integers");
    }
    t.sizes.push_back(static_cast<SizesType>(s.number));
  }
  t.file = join(dir, member(j, "file", Json::String, file, where).string);
  return t;
}

Manifest parse_manifest(const std::string& path) {
  const Json root = JsonParser(read_file(path), path).parse_document();
  if (root.kind != Json::Object) fail(path, "the manifest must be a JSON object");
  const std::string dir = dir_of(path);
  Manifest m;
  if (const Json* model = root.find("model")) {
    if (model->kind != Json::String) fail(path, "\"model\" must be a string");
    m.model = join(dir, model->string);
  }
  if (const Json* data = root.find("data")) {
    if (data->kind != Json::Array) fail(path, "\"data\" must be an array");
    for (const Json& d : data->array) {
      if (d.kind != Json::String) fail(path, "\"data\" entries must be strings");
      m.data.push_back(join(dir, d.string));
    }
  }
  const Json& methods = member(root, "methods", Json::Object, path, "manifest");
  for (const auto& kv : methods.object) {
    if (kv.second.kind != Json::Array) fail(path, "method \"" + kv.first + "\" must map to an array of cases");
    std::vector<Case> cases;
    for (size_t c = 0; c < kv.second.array.size(); ++c) {
      const Json& cj = kv.second.array[c];
      const std::string where = kv.first + " case" + std::to_string(c);
      if (cj.kind != Json::Object) fail(path, where + " must be an object");
      Case cs;
      const Json& ins = member(cj, "inputs", Json::Array, path, where);
      for (size_t i = 0; i < ins.array.size(); ++i) {
        cs.inputs.push_back(parse_tensor(ins.array[i], path, dir, where + " input " + std::to_string(i)));
      }
      const Json& outs = member(cj, "outputs", Json::Array, path, where);
      for (size_t i = 0; i < outs.array.size(); ++i) {
        cs.outputs.push_back(parse_tensor(outs.array[i], path, dir, where + " output " + std::to_string(i)));
      }
      cases.push_back(std::move(cs));
    }
    m.methods.emplace_back(kv.first, std::move(cases));
  }
  if (m.methods.empty()) fail(path, "no methods");
  return m;
}

// Loads a .bin file, which must hold exactly the tensor's bytes.
void load_bin(TensorSpec& t) {
  std::string bytes = read_file(t.file);
  const size_t expected = t.numel() * t.dtype->size;
  if (bytes.size() != expected) {
    fail(t.file, "holds " + std::to_string(bytes.size()) + " bytes, " + t.dtype->name + " " + shape_str(t.sizes) +
                     " needs " + std::to_string(expected));
  }
  t.bytes.assign(bytes.begin(), bytes.end());
}

// Checks a case against the method's signature, then loads its .bin files.
void check_case(Case& cs, const MethodMeta& meta, const std::string& manifest, const std::string& where) {
  if (cs.inputs.size() != meta.num_inputs()) {
    fail(manifest, where + ": " + std::to_string(cs.inputs.size()) + " inputs, the method takes " +
                       std::to_string(meta.num_inputs()));
  }
  if (cs.outputs.size() != meta.num_outputs()) {
    fail(manifest, where + ": " + std::to_string(cs.outputs.size()) + " outputs, the method returns " +
                       std::to_string(meta.num_outputs()));
  }
  auto check = [&](TensorSpec& t, bool input, size_t i) {
    const std::string what = where + (input ? " input " : " output ") + std::to_string(i);
    auto info = input ? meta.input_tensor_meta(i) : meta.output_tensor_meta(i);
    if (!info.ok()) fail(manifest, what + ": the method's value is not a tensor");
    if (info->scalar_type() != t.dtype->type) {
      fail(manifest, what + ": dtype " + t.dtype->name + ", the method has " + dtype_name(info->scalar_type()));
    }
    const auto sizes = info->sizes();
    // Inputs must match exactly; outputs of dynamic shape are checked after the run.
    if (sizes.size() != t.sizes.size() ||
        (input && !std::equal(sizes.begin(), sizes.end(), t.sizes.begin()))) {
      fail(manifest, what + ": sizes " + shape_str(t.sizes) + ", the method has " + shape_str(sizes));
    }
    load_bin(t);
  };
  for (size_t i = 0; i < cs.inputs.size(); ++i) check(cs.inputs[i], true, i);
  for (size_t i = 0; i < cs.outputs.size(); ++i) check(cs.outputs[i], false, i);
}

// ---------------------------------------------------------------- options

void set_backend_option(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) fail("--option " + arg, "expected key=value");
  const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
  BackendOption opt;
  if (key.size() >= sizeof(opt.key)) fail("--option " + arg, "key longer than 63 characters");
  std::memcpy(opt.key, key.c_str(), key.size() + 1);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value == "true" || value == "false") {
    opt.value = value == "true";
  } else if (!value.empty() && *end == '\0' && errno == 0 && n >= INT_MIN && n <= INT_MAX) {
    opt.value = static_cast<int>(n);
  } else {
    std::array<char, executorch::runtime::kMaxOptionValueLength> s{};
    if (value.size() >= s.size()) fail("--option " + arg, "value longer than 255 characters");
    std::memcpy(s.data(), value.c_str(), value.size());
    opt.value = s;
  }
  const Error err = executorch::runtime::set_option("CudaBackend", {&opt, 1});
  if (err != Error::Ok) fail("--option " + arg, describe(err));
}

// ---------------------------------------------------------------- running

constexpr const char* kSkipCopy = "skip_copy_output_to_cpu_for_method";

struct Args {
  std::string model;
  std::vector<std::string> data;
  std::string method;
  std::string manifest;
  long bench = 0, warmup = 0, enqueue = 0;
  std::vector<std::string> options;
  bool stats = false;
  bool device_io = false;
  std::string pipeline;  // "A,B"
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: et_cuda_run MODEL.pte [--data FILE.ptd ...] [--method NAME] [--manifest DIR/manifest.json]\n"
               "                   [--bench N] [--warmup W] [--device-io] [--enqueue N] [--pipeline A,B]\n"
               "                   [--option key=value ...] [--stats] [--verbose]\n"
               "  --device-io     bench/enqueue with inputs copied once to device memory and outputs left on\n"
               "                  the device (needs a program exported with alloc_graph_input=False)\n"
               "  --enqueue N     time N back-to-back executes without a wait, then the wait for the GPU\n"
               "                  (implies --device-io)\n"
               "  --pipeline A,B  with --manifest and --bench N: feed method A's device outputs to method B\n"
               "                  (shared stream), against the same chain through host memory\n");
  std::exit(1);
}

long parse_count(const char* flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || errno != 0 || n < 0) fail(flag, std::string("expects a count, got '") + value + "'");
  return n;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) fail(arg, "missing value");
      return argv[++i];
    };
    if (arg == "--data") a.data.push_back(next());
    else if (arg == "--method") a.method = next();
    else if (arg == "--manifest") a.manifest = next();
    else if (arg == "--bench") a.bench = parse_count("--bench", next());
    else if (arg == "--warmup") a.warmup = parse_count("--warmup", next());
    else if (arg == "--enqueue") a.enqueue = parse_count("--enqueue", next());
    else if (arg == "--device-io") a.device_io = true;
    else if (arg == "--pipeline") a.pipeline = next();
    else if (arg == "--option") a.options.push_back(next());
    else if (arg == "--stats") a.stats = true;
    else if (arg == "--verbose" || arg == "-v") g_verbose = true;
    else if (arg == "--help" || arg == "-h") usage();
    else if (!arg.empty() && arg[0] == '-') fail(arg, "unknown flag");
    else if (a.model.empty()) a.model = arg;
    else fail(arg, "more than one model given");
  }
  if (a.model.empty() && a.manifest.empty()) usage();
  if (a.enqueue > 0) a.device_io = true;
  return a;
}

// The value the user gave an option with --option (the last one wins), or "".
std::string user_option(const Args& a, const std::string& key) {
  std::string value;
  const std::string prefix = key + "=";
  for (const std::string& o : a.options) {
    if (o.compare(0, prefix.size(), prefix) == 0) value = o.substr(prefix.size());
  }
  return value;
}

// Sets skip_copy_output_to_cpu_for_method to the user's list plus `methods`.
// The backend reads it at every execute, so it can change between executes.
void set_skip_copy(const std::string& user_list, const std::vector<std::string>& methods) {
  std::string value = user_list;
  for (const std::string& m : methods) value += (value.empty() ? "" : ",") + m;
  set_backend_option(std::string(kSkipCopy) + "=" + value);
}

// Copies an output to host memory if the backend left it on the device. A
// device copy uses the legacy default stream, which waits for the backend's
// (blocking) streams: when it returns, all work queued before it is done.
std::vector<uint8_t> host_bytes(const executorch::aten::Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  bool on_device = false;
  if (et_cuda_is_device_pointer(t.const_data_ptr(), &on_device) != ET_CUDA_STATUS_OK) {
    on_device = false;  // no driver: it cannot be device memory
  }
  if (on_device) {
    if (et_cuda_memcpy(nullptr, out.data(), t.const_data_ptr(), out.size()) != ET_CUDA_STATUS_OK) {
      fail("output", std::string("device to host copy failed: ") + et_cuda_last_error());
    }
  } else if (!out.empty()) {
    std::memcpy(out.data(), t.const_data_ptr(), out.size());
  }
  return out;
}

bool is_on_device(const void* p) {
  bool on_device = false;
  return et_cuda_is_device_pointer(p, &on_device) == ET_CUDA_STATUS_OK && on_device;
}

std::vector<EValue> execute(Module& module, const std::string& model, const std::string& method,
                            const std::vector<EValue>& inputs) {
  auto result = module.execute(method, inputs);
  if (!result.ok()) fail(model, "executing '" + method + "' failed: " + describe(result.error()));
  return std::move(*result);
}

// The last tensor among a method's outputs (what --enqueue and --pipeline wait on).
const executorch::aten::Tensor& last_tensor(const std::vector<EValue>& outputs, const std::string& model,
                                            const std::string& method) {
  for (size_t i = outputs.size(); i-- > 0;) {
    if (outputs[i].isTensor()) return outputs[i].toTensor();
  }
  fail(model, "method '" + method + "' returns no tensor");
}

// Inputs of one method call: EValues over host buffers, or over device copies
// of them (made once, with et_cuda_alloc_device + et_cuda_memcpy).
class InputSet {
 public:
  InputSet() = default;
  InputSet(const InputSet&) = delete;
  InputSet& operator=(const InputSet&) = delete;
  ~InputSet() {
    for (void* p : device_) et_cuda_free_device(p);
  }

  void add_tensor(void* host, size_t nbytes, const std::vector<SizesType>& sizes, ScalarType type, bool on_device,
                  int32_t device_index) {
    void* data = host;
    if (on_device) {
      void* p = nullptr;
      if (et_cuda_alloc_device(device_index, std::max<size_t>(nbytes, 1), &p) != ET_CUDA_STATUS_OK) {
        fail("--device-io", "cannot allocate " + std::to_string(nbytes) + " bytes of device memory: " +
                                et_cuda_last_error());
      }
      device_.push_back(p);
      if (nbytes > 0 && et_cuda_memcpy(nullptr, p, host, nbytes) != ET_CUDA_STATUS_OK) {
        fail("--device-io", std::string("host to device copy failed: ") + et_cuda_last_error());
      }
      data = p;
    }
    keep_.push_back(executorch::extension::from_blob(data, sizes, type));
    values.emplace_back(*keep_.back());
  }

  std::vector<EValue> values;

 private:
  std::vector<TensorPtr> keep_;
  std::vector<void*> device_;
};

void case_inputs(Case& cs, bool on_device, int32_t device_index, InputSet& out) {
  for (TensorSpec& t : cs.inputs) {
    out.add_tensor(t.bytes.data(), t.bytes.size(), t.sizes, t.dtype->type, on_device, device_index);
  }
}

// Device pointers can only be passed to a method whose tensor inputs are not
// memory-planned: for a planned input, Method::set_input copies the caller's
// data into the planned buffer with the host memcpy.
void require_unplanned_inputs(const MethodMeta& meta, const std::string& model, const std::string& method,
                              const std::string& why) {
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    const auto tag = meta.input_tag(i);
    if (!tag.ok() || *tag != Tag::Tensor) continue;
    const auto info = meta.input_tensor_meta(i);
    if (info.ok() && info->is_memory_planned()) {
      fail(model, why + ": input " + std::to_string(i) + " of method '" + method +
                      "' is memory-planned, so ExecuTorch would copy device memory with the host memcpy "
                      "(re-export with to_executorch(ExecutorchBackendConfig(memory_planning_pass="
                      "MemoryPlanningPass(alloc_graph_input=False))))");
    }
  }
}

// Compares elements of one output; keeps the first problem.
struct Diff {
  bool pass = true;
  double max_err = 0;
  std::string problem;

  void compare(const uint8_t* got, const uint8_t* want, size_t numel, const DType& dtype, size_t output) {
    const bool is_float = dtype.type == ScalarType::Float;
    const bool is_half = dtype.type == ScalarType::BFloat16 || dtype.type == ScalarType::Half;
    const double tol = is_float ? 1e-4 : is_half ? 2e-2 : 0;
    for (size_t e = 0; e < numel; ++e) {
      const double g = element(got + e * dtype.size, dtype.type);
      const double r = element(want + e * dtype.size, dtype.type);
      if (std::isnan(r) && std::isnan(g)) continue;
      const double d = std::fabs(g - r);
      if (std::isnan(d) || d > tol + tol * std::fabs(r)) {
        if (pass) problem = "output " + std::to_string(output) + " element " + std::to_string(e) + ": got " +
                            std::to_string(g) + ", expected " + std::to_string(r);
        pass = false;
      }
      if (!std::isnan(d)) max_err = std::max(max_err, d);
    }
  }
};

// Compares one case's outputs with the expected ones; prints and returns PASS/FAIL.
// `inputs` replaces the case's host inputs (for --device-io) when given.
bool run_case(Module& module, const std::string& model, const std::string& method, const std::string& label,
              Case& cs, const std::vector<EValue>* inputs = nullptr) {
  InputSet host;
  if (inputs == nullptr) {
    case_inputs(cs, false, 0, host);
    inputs = &host.values;
  }
  const std::vector<EValue> outputs = execute(module, model, method, *inputs);
  Diff diff;
  diff.pass = outputs.size() == cs.outputs.size();
  for (size_t i = 0; diff.pass && i < outputs.size(); ++i) {
    const TensorSpec& want = cs.outputs[i];
    if (!outputs[i].isTensor()) {
      diff.problem = "output " + std::to_string(i) + " is not a tensor";
      diff.pass = false;
      break;
    }
    const auto& t = outputs[i].toTensor();
    const auto sizes = t.sizes();
    if (t.scalar_type() != want.dtype->type || !std::equal(sizes.begin(), sizes.end(), want.sizes.begin(), want.sizes.end())) {
      diff.problem = "output " + std::to_string(i) + " is " + dtype_name(t.scalar_type()) + " " + shape_str(sizes) +
                     ", expected " + want.dtype->name + " " + shape_str(want.sizes);
      diff.pass = false;
      break;
    }
    const std::vector<uint8_t> got = host_bytes(t);
    diff.compare(got.data(), want.bytes.data(), want.numel(), *want.dtype, i);
  }
  if (outputs.size() != cs.outputs.size()) {
    diff.problem = std::to_string(outputs.size()) + " outputs, expected " + std::to_string(cs.outputs.size());
  }
  std::printf("%s %s: max_abs_err=%.3g %s%s%s\n", method.c_str(), label.c_str(), diff.max_err,
              diff.pass ? "PASS" : "FAIL", diff.problem.empty() ? "" : ": ", diff.problem.c_str());
  return diff.pass;
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

double since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// Percentile of sorted samples (nearest rank).
double pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * (sorted.size() - 1) + 0.5))];
}

// Process-wide counters; false when the library cannot report them (no driver).
bool snapshot(EtCudaStats& s) {
  s = EtCudaStats{};
  return et_cuda_stats(nullptr, &s) == ET_CUDA_STATUS_OK;
}

// Waits until the GPU has finished everything queued so far by copying the
// first bytes of the last output to the host (the legacy default stream waits
// for the backend's streams). Costs one small copy and one host wait.
void wait_for_gpu(const std::vector<EValue>& outputs, const std::string& model, const std::string& method) {
  const auto& t = last_tensor(outputs, model, method);
  uint8_t probe[16];
  const size_t n = std::min<size_t>(sizeof(probe), t.nbytes());
  if (n == 0 || !is_on_device(t.const_data_ptr())) return;  // host outputs: execute already waited
  if (et_cuda_memcpy(nullptr, probe, t.const_data_ptr(), n) != ET_CUDA_STATUS_OK) {
    fail("output", std::string("device to host copy failed: ") + et_cuda_last_error());
  }
}

// Times n executes. label "bench": each call as it returns; "bench-wait": each
// call followed by wait_for_gpu (device IO: the latency until the result is
// ready, comparable with a synchronize per call).
void bench(Module& module, const std::string& model, const std::string& method, const std::vector<EValue>& inputs,
           long warmup, long n, bool device_io, bool wait_each = false) {
  const char* label = wait_each ? "bench-wait" : "bench";
  for (long i = 0; i < warmup; ++i) {
    const std::vector<EValue> out = execute(module, model, method, inputs);
    if (wait_each) wait_for_gpu(out, model, method);
  }
  std::vector<double> wall;
  double cpu = 0;
  EtCudaStats s0{}, s1{};
  bool have_stats = snapshot(s0);
  for (long i = 0; i < n; ++i) {
    const double c0 = thread_cpu_us();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<EValue> out = execute(module, model, method, inputs);
    if (wait_each) wait_for_gpu(out, model, method);
    wall.push_back(since_us(t0));
    cpu += thread_cpu_us() - c0;
  }
  have_stats = have_stats && snapshot(s1);
  std::sort(wall.begin(), wall.end());
  std::printf("%s %s: n=%ld warmup=%ld min=%.1fus p50=%.1fus p99=%.1fus cpu_mean=%.1fus\n", method.c_str(), label,
              n, warmup, wall.front(), pct(wall, 0.5), pct(wall, 0.99), cpu / static_cast<double>(n));
  if (have_stats) {
    const double calls = static_cast<double>(n);
    const double executes = static_cast<double>(s1.executes - s0.executes);
    const double exec_us = static_cast<double>(s1.execute_host_ns - s0.execute_host_ns) / 1e3;
    const double run_us = static_cast<double>(s1.run_host_ns - s0.run_host_ns) / 1e3;
    std::printf(
        "%s %s-lib: io=%s executes_per_call=%.2f lib_execute_us=%.1f run_us=%.1f backend_overhead_us=%.1f "
        "host_waits_per_call=%.2f\n",
        method.c_str(), label, device_io ? "device" : "host", executes / calls, exec_us / calls, run_us / calls,
        executes > 0 ? (exec_us - run_us) / executes : 0.0,
        static_cast<double>(s1.host_waits - s0.host_waits) / calls);
  }
}

// N executes queued back to back, then one copy of the last output to the host,
// which waits for the GPU. enqueue_over_total near 1 means the host was the
// bottleneck (or waited); small means the GPU was still busy when the host was done.
void enqueue(Module& module, const std::string& model, const std::string& method,
             const std::vector<EValue>& inputs, long warmup, long n) {
  std::vector<EValue> outputs;
  for (long i = 0; i < std::max(warmup, 1L); ++i) outputs = execute(module, model, method, inputs);
  host_bytes(last_tensor(outputs, model, method));  // the GPU is idle from here
  EtCudaStats s0{}, s1{};
  bool have_stats = snapshot(s0);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) outputs = execute(module, model, method, inputs);
  const double enqueue_us = since_us(t0);
  have_stats = have_stats && snapshot(s1);
  const auto& last = last_tensor(outputs, model, method);
  const bool on_device = is_on_device(last.const_data_ptr());
  host_bytes(last);
  const double total_us = since_us(t0);
  const double calls = static_cast<double>(std::max(n, 1L));
  std::printf(
      "%s enqueue: n=%ld enqueue_us=%.1f total_us=%.1f enqueue_per_call_us=%.1f total_per_call_us=%.1f "
      "enqueue_over_total=%.3f host_waits=%lld output_on_device=%s\n",
      method.c_str(), n, enqueue_us, total_us, enqueue_us / calls, total_us / calls,
      total_us > 0 ? enqueue_us / total_us : 0.0,
      have_stats ? static_cast<long long>(s1.host_waits - s0.host_waits) : -1LL, on_device ? "yes" : "no");
}

// Zero-filled inputs shaped from the method's signature.
void zero_inputs(const MethodMeta& meta, const std::string& model, const std::string& method,
                 std::vector<std::vector<uint8_t>>& buffers, InputSet& out, bool on_device, int32_t device_index) {
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    const auto tag = meta.input_tag(i);
    if (!tag.ok()) fail(model, method + ": cannot read input " + std::to_string(i));
    switch (*tag) {
      case Tag::Tensor: {
        const auto info = meta.input_tensor_meta(i);
        if (!info.ok()) fail(model, method + ": cannot read input " + std::to_string(i));
        buffers.emplace_back(info->nbytes(), 0);
        std::vector<SizesType> sizes(info->sizes().begin(), info->sizes().end());
        out.add_tensor(buffers.back().data(), buffers.back().size(), sizes, info->scalar_type(), on_device,
                       device_index);
        break;
      }
      case Tag::Int: out.values.emplace_back(int64_t{0}); break;
      case Tag::Double: out.values.emplace_back(0.0); break;
      case Tag::Bool: out.values.emplace_back(false); break;
      default: fail(model, method + ": input " + std::to_string(i) + " has an unsupported type");
    }
  }
}

MethodMeta method_meta(Module& module, const std::string& model, const std::string& method) {
  auto names = module.method_names();
  if (!names.ok()) fail(model, "cannot list methods: " + describe(names.error()));
  if (names->count(method) == 0) {
    std::string known;
    for (const auto& n : *names) known += (known.empty() ? "" : ", ") + n;
    fail(model, "no method '" + method + "' (the program has: " + known + ")");
  }
  auto meta = module.method_meta(method);
  if (!meta.ok()) fail(model, "cannot read method '" + method + "': " + describe(meta.error()));
  return *meta;
}

void load_method(Module& module, const std::string& model, const std::string& method) {
  const Error err = module.load_method(method);
  if (err != Error::Ok) fail(model, "cannot load method '" + method + "': " + describe(err));
}

std::vector<Case>* cases_of(Manifest& manifest, const std::string& method) {
  for (auto& [name, cases] : manifest.methods) {
    if (name == method) return &cases;
  }
  return nullptr;
}

// --pipeline A,B: A runs on the host input of its first case and its outputs
// feed B. Round trip: every output goes to host memory and B reads it from
// there. Device chain: A's and B's outputs stay on the device (skip-copy) and
// B reads A's device outputs in place; only B's last output is copied to the
// host, after N iterations, and compared with the round trip's. Both methods
// share one stream (use_shared_cuda_stream, set before loading), so B's reads
// of A's outputs are ordered before A's next execute releases them (the backend
// keeps device outputs until that method's next execute).
bool run_pipeline(Module& module, Args& a, Manifest& manifest, const std::string& user_skip) {
  const size_t comma = a.pipeline.find(',');
  if (comma == std::string::npos || comma == 0 || comma + 1 == a.pipeline.size() ||
      a.pipeline.find(',', comma + 1) != std::string::npos) {
    fail("--pipeline " + a.pipeline, "expected two method names, A,B");
  }
  const std::string A = a.pipeline.substr(0, comma), B = a.pipeline.substr(comma + 1);
  if (A == B) fail("--pipeline " + a.pipeline, "A and B must be different methods");
  if (a.manifest.empty()) fail("--pipeline", "needs --manifest (A's input is its first case's)");
  if (a.bench <= 0) fail("--pipeline", "needs --bench N");
  std::vector<Case>* cases_a = cases_of(manifest, A);
  if (cases_a == nullptr || cases_a->empty()) fail(a.manifest, "no cases for method '" + A + "'");
  std::vector<Case>* cases_b = cases_of(manifest, B);

  const MethodMeta meta_a = method_meta(module, a.model, A);
  const MethodMeta meta_b = method_meta(module, a.model, B);
  for (size_t c = 0; c < cases_a->size(); ++c) check_case((*cases_a)[c], meta_a, a.manifest, A + " case" + std::to_string(c));
  if (cases_b != nullptr) {
    for (size_t c = 0; c < cases_b->size(); ++c) check_case((*cases_b)[c], meta_b, a.manifest, B + " case" + std::to_string(c));
  }
  require_unplanned_inputs(meta_b, a.model, B, "--pipeline");
  if (meta_a.num_outputs() != meta_b.num_inputs()) {
    fail(a.model, "--pipeline: '" + A + "' has " + std::to_string(meta_a.num_outputs()) + " outputs, '" + B +
                      "' takes " + std::to_string(meta_b.num_inputs()) + " inputs");
  }
  for (size_t i = 0; i < meta_a.num_outputs(); ++i) {
    const auto out = meta_a.output_tensor_meta(i);
    const auto in = meta_b.input_tensor_meta(i);
    if (!out.ok() || !in.ok()) fail(a.model, "--pipeline: value " + std::to_string(i) + " is not a tensor");
    const auto so = out->sizes(), si = in->sizes();
    if (out->scalar_type() != in->scalar_type() || !std::equal(so.begin(), so.end(), si.begin(), si.end())) {
      fail(a.model, "--pipeline: output " + std::to_string(i) + " of '" + A + "' is " +
                        dtype_name(out->scalar_type()) + " " + shape_str(so) + ", input " + std::to_string(i) +
                        " of '" + B + "' is " + dtype_name(in->scalar_type()) + " " + shape_str(si));
    }
  }
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
  auto iteration = [&]() {
    const std::vector<EValue> out_a = execute(module, a.model, A, in_a.values);
    return execute(module, a.model, B, out_a);  // A's outputs stay valid until A's next execute
  };
  struct Timing {
    std::vector<double> wall;
    double total_us = 0, enqueue_us = 0, waits = -1;
    std::vector<uint8_t> last;
    ScalarType type = ScalarType::Float;
    size_t numel = 0;
  };
  auto measure = [&](bool on_device) {
    set_skip_copy(user_skip, on_device ? std::vector<std::string>{A, B} : std::vector<std::string>{});
    std::vector<EValue> out_b;
    for (long i = 0; i < std::max(a.warmup, 1L); ++i) out_b = iteration();
    host_bytes(last_tensor(out_b, a.model, B));  // idle GPU from here
    Timing r;
    EtCudaStats s0{}, s1{};
    bool have_stats = snapshot(s0);
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
    have_stats = have_stats && snapshot(s1);
    if (have_stats) r.waits = static_cast<double>(s1.host_waits - s0.host_waits);
    r.type = last.scalar_type();
    r.numel = static_cast<size_t>(last.numel());
    std::sort(r.wall.begin(), r.wall.end());
    return r;
  };
  const Timing trip = measure(false);
  const Timing chain = measure(true);
  set_skip_copy(user_skip, {});

  const double n = static_cast<double>(a.bench);
  auto line = [&](const char* name, const Timing& r) {
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
    diff.pass = false;
    diff.problem = "the two variants' last outputs differ in type or size";
  } else {
    diff.compare(chain.last.data(), trip.last.data(), chain.numel, *dtype, 0);
  }
  std::printf("pipeline check: device chain vs round trip, last output of '%s': max_abs_err=%.3g %s%s%s\n",
              B.c_str(), diff.max_err, diff.pass ? "PASS" : "FAIL", diff.problem.empty() ? "" : ": ",
              diff.problem.c_str());
  return all_pass && diff.pass;
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a run killed by a timeout keeps its lines
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(emit_log, __FILE__));
  executorch::runtime::runtime_init();
  Args a = parse_args(argc, argv);

  Manifest manifest;
  if (!a.manifest.empty()) {
    manifest = parse_manifest(a.manifest);
    if (a.model.empty()) a.model = manifest.model;
    if (a.data.empty()) a.data = manifest.data;
    if (a.model.empty()) fail(a.manifest, "no \"model\" and no MODEL.pte given");
  }
  require_readable(a.model);
  for (const std::string& d : a.data) require_readable(d);

  for (const std::string& o : a.options) set_backend_option(o);
  const std::string user_skip = user_option(a, kSkipCopy);
  int32_t device_index = 0;
  if (const std::string d = user_option(a, "device_index"); !d.empty()) {
    device_index = static_cast<int32_t>(std::strtol(d.c_str(), nullptr, 10));
  }
  if (!a.pipeline.empty()) {
    // Before any method is loaded: the stream is chosen at init.
    set_backend_option("use_shared_cuda_stream=true");
  }

  Module module(a.model, a.data);
  const Error err = module.load(Program::Verification::InternalConsistency);
  if (err != Error::Ok) {
    const std::string why = describe(err);
    // Blame the .ptd files when the program loads without them.
    if (!a.data.empty() && Module(a.model).load(Program::Verification::InternalConsistency) == Error::Ok) {
      std::string files;
      for (const std::string& d : a.data) files += (files.empty() ? "" : ", ") + d;
      fail(files, "cannot load as external data: " + why);
    }
    fail(a.model, "cannot load program: " + why);
  }

  const bool timed = a.bench > 0 || a.enqueue > 0;
  bool all_pass = true;
  if (!a.pipeline.empty()) {
    all_pass = run_pipeline(module, a, manifest, user_skip);
  } else if (!a.manifest.empty()) {
    if (!a.method.empty() && std::none_of(manifest.methods.begin(), manifest.methods.end(),
                                          [&](const auto& m) { return m.first == a.method; })) {
      fail(a.manifest, "no cases for method '" + a.method + "'");
    }
    for (auto& [method, cases] : manifest.methods) {
      if (!a.method.empty() && method != a.method) continue;
      const MethodMeta meta = method_meta(module, a.model, method);
      for (size_t c = 0; c < cases.size(); ++c) check_case(cases[c], meta, a.manifest, method + " case" + std::to_string(c));
      if (a.device_io && timed) require_unplanned_inputs(meta, a.model, method, "--device-io");
      load_method(module, a.model, method);
      for (size_t c = 0; c < cases.size(); ++c) {
        all_pass = run_case(module, a.model, method, "case" + std::to_string(c), cases[c]) && all_pass;
      }
      if (!timed || cases.empty()) continue;
      InputSet inputs;
      case_inputs(cases[0], a.device_io, device_index, inputs);
      if (a.device_io) {
        set_skip_copy(user_skip, {method});
        all_pass = run_case(module, a.model, method, "case0 device-io", cases[0], &inputs.values) && all_pass;
      }
      if (a.bench > 0) bench(module, a.model, method, inputs.values, a.warmup, a.bench, a.device_io);
      if (a.bench > 0 && a.device_io) bench(module, a.model, method, inputs.values, a.warmup, a.bench, true, true);
      if (a.enqueue > 0) enqueue(module, a.model, method, inputs.values, a.warmup, a.enqueue);
      if (a.device_io) set_skip_copy(user_skip, {});
    }
  } else {
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
    if (timed) {
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
  }

  if (a.stats) {
    EtCudaStats s{};
    if (et_cuda_stats(nullptr, &s) != ET_CUDA_STATUS_OK) fail("--stats", et_cuda_last_error());
    std::printf(
        "stats: executes=%llu host_waits=%llu driver_allocs=%llu pool_allocs=%llu pool_frees=%llu live_allocs=%llu "
        "live_bytes=%llu bytes_htod=%llu bytes_dtoh=%llu bytes_dtod=%llu execute_host_ns=%llu run_host_ns=%llu\n",
        (unsigned long long)s.executes, (unsigned long long)s.host_waits, (unsigned long long)s.driver_allocs,
        (unsigned long long)s.pool_allocs, (unsigned long long)s.pool_frees, (unsigned long long)s.live_allocs,
        (unsigned long long)s.live_bytes, (unsigned long long)s.bytes_htod, (unsigned long long)s.bytes_dtoh,
        (unsigned long long)s.bytes_dtod, (unsigned long long)s.execute_host_ns, (unsigned long long)s.run_host_ns);
  }
  return all_pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Failure& f) {
    std::fflush(stdout);
    std::fprintf(stderr, "et_cuda_run: %s: %s\n", f.where.c_str(), f.what.c_str());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "et_cuda_run: %s\n", e.what());
  }
  return 1;
}
