// et_cuda_run: load an ExecuTorch program delegated to CudaBackend, run it, and
// optionally check it against a fixture manifest or benchmark it.
//
//   et_cuda_run MODEL.pte [--data FILE.ptd ...] [--method NAME]
//               [--manifest DIR/manifest.json] [--bench N] [--warmup W]
//               [--option key=value ...] [--stats] [--verbose]
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

struct Args {
  std::string model;
  std::vector<std::string> data;
  std::string method;
  std::string manifest;
  long bench = 0, warmup = 0;
  std::vector<std::string> options;
  bool stats = false;
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: et_cuda_run MODEL.pte [--data FILE.ptd ...] [--method NAME] [--manifest DIR/manifest.json]\n"
               "                   [--bench N] [--warmup W] [--option key=value ...] [--stats] [--verbose]\n");
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
    else if (arg == "--option") a.options.push_back(next());
    else if (arg == "--stats") a.stats = true;
    else if (arg == "--verbose" || arg == "-v") g_verbose = true;
    else if (arg == "--help" || arg == "-h") usage();
    else if (!arg.empty() && arg[0] == '-') fail(arg, "unknown flag");
    else if (a.model.empty()) a.model = arg;
    else fail(arg, "more than one model given");
  }
  if (a.model.empty() && a.manifest.empty()) usage();
  return a;
}

// Copies an output to host memory if the backend left it on the device.
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

std::vector<EValue> execute(Module& module, const std::string& model, const std::string& method,
                            const std::vector<EValue>& inputs) {
  auto result = module.execute(method, inputs);
  if (!result.ok()) fail(model, "executing '" + method + "' failed: " + describe(result.error()));
  return std::move(*result);
}

// Compares one case's outputs with the expected ones; prints and returns PASS/FAIL.
bool run_case(Module& module, const std::string& model, const std::string& method, const std::string& label,
              Case& cs) {
  std::vector<TensorPtr> keep;
  std::vector<EValue> inputs;
  for (TensorSpec& t : cs.inputs) {
    keep.push_back(executorch::extension::from_blob(t.bytes.data(), t.sizes, t.dtype->type));
    inputs.emplace_back(*keep.back());
  }
  const std::vector<EValue> outputs = execute(module, model, method, inputs);
  bool pass = outputs.size() == cs.outputs.size();
  double max_err = 0;
  std::string problem;
  for (size_t i = 0; pass && i < outputs.size(); ++i) {
    const TensorSpec& want = cs.outputs[i];
    if (!outputs[i].isTensor()) {
      problem = "output " + std::to_string(i) + " is not a tensor";
      pass = false;
      break;
    }
    const auto& t = outputs[i].toTensor();
    const auto sizes = t.sizes();
    if (t.scalar_type() != want.dtype->type || !std::equal(sizes.begin(), sizes.end(), want.sizes.begin(), want.sizes.end())) {
      problem = "output " + std::to_string(i) + " is " + dtype_name(t.scalar_type()) + " " + shape_str(sizes) +
                ", expected " + want.dtype->name + " " + shape_str(want.sizes);
      pass = false;
      break;
    }
    const std::vector<uint8_t> got = host_bytes(t);
    const bool is_float = want.dtype->type == ScalarType::Float;
    const bool is_half = want.dtype->type == ScalarType::BFloat16 || want.dtype->type == ScalarType::Half;
    const double tol = is_float ? 1e-4 : is_half ? 2e-2 : 0;
    for (size_t e = 0; e < want.numel(); ++e) {
      const double g = element(got.data() + e * want.dtype->size, want.dtype->type);
      const double r = element(want.bytes.data() + e * want.dtype->size, want.dtype->type);
      if (std::isnan(r) && std::isnan(g)) continue;
      const double d = std::fabs(g - r);
      if (std::isnan(d) || d > tol + tol * std::fabs(r)) {
        if (pass) problem = "output " + std::to_string(i) + " element " + std::to_string(e) + ": got " +
                            std::to_string(g) + ", expected " + std::to_string(r);
        pass = false;
      }
      if (!std::isnan(d)) max_err = std::max(max_err, d);
    }
  }
  if (outputs.size() != cs.outputs.size()) {
    problem = std::to_string(outputs.size()) + " outputs, expected " + std::to_string(cs.outputs.size());
  }
  std::printf("%s %s: max_abs_err=%.3g %s%s%s\n", method.c_str(), label.c_str(), max_err, pass ? "PASS" : "FAIL",
              problem.empty() ? "" : ": ", problem.c_str());
  return pass;
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

void bench(Module& module, const std::string& model, const std::string& method, const std::vector<EValue>& inputs,
           long warmup, long n) {
  for (long i = 0; i < warmup; ++i) execute(module, model, method, inputs);
  std::vector<double> wall;
  double cpu = 0;
  for (long i = 0; i < n; ++i) {
    const double c0 = thread_cpu_us();
    const auto t0 = std::chrono::steady_clock::now();
    execute(module, model, method, inputs);
    const auto t1 = std::chrono::steady_clock::now();
    cpu += thread_cpu_us() - c0;
    wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(wall.begin(), wall.end());
  auto pct = [&](double p) { return wall[std::min(wall.size() - 1, static_cast<size_t>(p * (wall.size() - 1) + 0.5))]; };
  std::printf("%s bench: n=%ld warmup=%ld min=%.1fus p50=%.1fus p99=%.1fus cpu_mean=%.1fus\n", method.c_str(), n,
              warmup, wall.front(), pct(0.5), pct(0.99), cpu / static_cast<double>(n));
}

// Zero-filled inputs shaped from the method's signature.
std::vector<EValue> zero_inputs(const MethodMeta& meta, const std::string& model, const std::string& method,
                                std::vector<std::vector<uint8_t>>& buffers, std::vector<TensorPtr>& keep) {
  std::vector<EValue> inputs;
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    const auto tag = meta.input_tag(i);
    if (!tag.ok()) fail(model, method + ": cannot read input " + std::to_string(i));
    switch (*tag) {
      case Tag::Tensor: {
        const auto info = meta.input_tensor_meta(i);
        if (!info.ok()) fail(model, method + ": cannot read input " + std::to_string(i));
        buffers.emplace_back(info->nbytes(), 0);
        std::vector<SizesType> sizes(info->sizes().begin(), info->sizes().end());
        keep.push_back(executorch::extension::from_blob(buffers.back().data(), sizes, info->scalar_type()));
        inputs.emplace_back(*keep.back());
        break;
      }
      case Tag::Int: inputs.emplace_back(int64_t{0}); break;
      case Tag::Double: inputs.emplace_back(0.0); break;
      case Tag::Bool: inputs.emplace_back(false); break;
      default: fail(model, method + ": input " + std::to_string(i) + " has an unsupported type");
    }
  }
  return inputs;
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

int run(int argc, char** argv) {
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

  bool all_pass = true;
  if (!a.manifest.empty()) {
    if (!a.method.empty() && std::none_of(manifest.methods.begin(), manifest.methods.end(),
                                          [&](const auto& m) { return m.first == a.method; })) {
      fail(a.manifest, "no cases for method '" + a.method + "'");
    }
    for (auto& [method, cases] : manifest.methods) {
      if (!a.method.empty() && method != a.method) continue;
      const MethodMeta meta = method_meta(module, a.model, method);
      for (size_t c = 0; c < cases.size(); ++c) check_case(cases[c], meta, a.manifest, method + " case" + std::to_string(c));
      load_method(module, a.model, method);
      for (size_t c = 0; c < cases.size(); ++c) {
        all_pass = run_case(module, a.model, method, "case" + std::to_string(c), cases[c]) && all_pass;
      }
      if (a.bench > 0 && !cases.empty()) {
        std::vector<TensorPtr> keep;
        std::vector<EValue> inputs;
        for (TensorSpec& t : cases[0].inputs) {
          keep.push_back(executorch::extension::from_blob(t.bytes.data(), t.sizes, t.dtype->type));
          inputs.emplace_back(*keep.back());
        }
        bench(module, a.model, method, inputs, a.warmup, a.bench);
      }
    }
  } else {
    const std::string method = a.method.empty() ? "forward" : a.method;
    const MethodMeta meta = method_meta(module, a.model, method);
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<TensorPtr> keep;
    const std::vector<EValue> inputs = zero_inputs(meta, a.model, method, buffers, keep);
    load_method(module, a.model, method);
    const std::vector<EValue> outputs = execute(module, a.model, method, inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].isTensor()) {
        const auto& t = outputs[i].toTensor();
        std::printf("%s output %zu: %s %s\n", method.c_str(), i, dtype_name(t.scalar_type()).c_str(),
                    shape_str(t.sizes()).c_str());
      } else {
        std::printf("%s output %zu: (not a tensor)\n", method.c_str(), i);
      }
    }
    if (a.bench > 0) bench(module, a.model, method, inputs, a.warmup, a.bench);
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
