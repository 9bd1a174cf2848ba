// The "CudaBackend" adapter seen through ExecuTorch: registration, options,
// named-data lookup and, with a GPU, running each fixture through Module.
//
//   adapter_test [FIXTURES_DIR]     (the ET_CUDA_FIXTURES environment variable wins)
//
// Without a GPU, loading a fixture must reach our backend and fail in
// et_cuda_init with "no CUDA": that proves the registration and that both blobs
// were found (the library rejects empty blobs before it looks for a device).

#include <executorch_cuda.h>

#include "../adapter/log_split.h"

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/named_data_map.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

using executorch::aten::ScalarType;
using executorch::extension::module::Module;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendOption;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::NamedDataMap;
using executorch::runtime::Result;

// The library's warning shim (the ABI the generated code imports; not in the public header).
extern "C" void aoti_torch_warn(const char* func, const char* file, uint32_t line, const char* msg);

namespace {

int failures = 0;
std::string g_log;  // everything ExecuTorch logged, for checking messages

#define CHECK(cond)                                                                                   \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s (et_cuda_last_error: \"%s\")\n", __FILE__, __LINE__, \
                   #cond, et_cuda_last_error());                                                      \
      ++failures;                                                                                     \
    }                                                                                                 \
  } while (0)

void emit_log(et_timestamp_t, et_pal_log_level_t level, const char*, const char*, size_t, const char* message,
              size_t length) {
  g_log.append(message, length);
  g_log += '\n';
  std::fprintf(stderr, "[executorch %c] %.*s\n", static_cast<char>(level), static_cast<int>(length), message);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(1);
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

BackendOption bool_option(const char* key, bool v) {
  BackendOption o;
  std::strncpy(o.key, key, sizeof(o.key) - 1);
  o.value = v;
  return o;
}

BackendOption int_option(const char* key, int v) {
  BackendOption o = bool_option(key, false);
  o.value = v;
  return o;
}

BackendOption str_option(const char* key, const char* v) {
  BackendOption o = bool_option(key, false);
  std::array<char, executorch::runtime::kMaxOptionValueLength> s{};
  std::strncpy(s.data(), v, s.size() - 1);
  o.value = s;
  return o;
}

Error set_options(std::vector<BackendOption> opts) {
  return executorch::runtime::set_option("CudaBackend", {opts.data(), opts.size()});
}

void test_registration() {
  auto* backend = executorch::runtime::get_backend_class("CudaBackend");
  CHECK(backend != nullptr);
  CHECK(backend != nullptr && backend->is_available());
}

void test_options() {
  CHECK(et_cuda_reset_options() == ET_CUDA_STATUS_OK);
  CHECK(set_options({bool_option("use_shared_cuda_stream", true), int_option("device_index", 2),
                     str_option("skip_copy_output_to_cpu_for_method", "forward,decode"),
                     str_option("enable_cuda_graph_for_method", "decode"), bool_option("not_an_option", true)}) ==
        Error::Ok);

  // Read back through the C API...
  bool b = false;
  int64_t i = 0;
  char buf[256];
  CHECK(et_cuda_get_option_bool("use_shared_cuda_stream", &b) == ET_CUDA_STATUS_OK && b);
  CHECK(et_cuda_get_option_int("device_index", &i) == ET_CUDA_STATUS_OK && i == 2);
  CHECK(et_cuda_get_option_str("skip_copy_output_to_cpu_for_method", buf, sizeof buf) == ET_CUDA_STATUS_OK &&
        std::strcmp(buf, "forward,decode") == 0);

  // ...and through ExecuTorch: each value comes back with its own type, unknown keys untouched.
  std::vector<BackendOption> got = {bool_option("use_shared_cuda_stream", false), bool_option("device_index", false),
                                    bool_option("skip_copy_output_to_cpu_for_method", false),
                                    bool_option("enable_cuda_graph_for_method", false), int_option("not_an_option", 42)};
  CHECK(executorch::runtime::get_option("CudaBackend", {got.data(), got.size()}) == Error::Ok);
  using Str = std::array<char, executorch::runtime::kMaxOptionValueLength>;
  CHECK(std::get_if<bool>(&got[0].value) && *std::get_if<bool>(&got[0].value));
  CHECK(std::get_if<int>(&got[1].value) && *std::get_if<int>(&got[1].value) == 2);
  CHECK(std::get_if<Str>(&got[2].value) && std::strcmp(std::get_if<Str>(&got[2].value)->data(), "forward,decode") == 0);
  CHECK(std::get_if<Str>(&got[3].value) && std::strcmp(std::get_if<Str>(&got[3].value)->data(), "decode") == 0);
  CHECK(std::get_if<int>(&got[4].value) && *std::get_if<int>(&got[4].value) == 42);

  // Wrong types are rejected and leave the value alone.
  CHECK(set_options({int_option("use_shared_cuda_stream", 0)}) == Error::InvalidArgument);
  CHECK(set_options({str_option("device_index", "1")}) == Error::InvalidArgument);
  CHECK(set_options({bool_option("skip_copy_output_to_cpu_for_method", true)}) == Error::InvalidArgument);
  CHECK(set_options({int_option("cuda_graph_cache_size", 0)}) == Error::InvalidArgument);
  CHECK(et_cuda_get_option_bool("use_shared_cuda_stream", &b) == ET_CUDA_STATUS_OK && b);
  CHECK(et_cuda_reset_options() == ET_CUDA_STATUS_OK);
}

// A NamedDataMap over in-memory blobs that counts the buffers it hands out and
// the ones freed.
class BlobMap final : public NamedDataMap {
 public:
  std::map<std::string, std::vector<uint8_t>> blobs;
  mutable int handed_out = 0;
  static int freed;

  Result<const executorch::runtime::TensorLayout> get_tensor_layout(std::string_view) const override {
    return Error::NotImplemented;
  }
  Result<FreeableBuffer> get_data(std::string_view key) const override {
    auto it = blobs.find(std::string(key));
    if (it == blobs.end()) return Error::NotFound;
    ++handed_out;
    return FreeableBuffer(it->second.data(), it->second.size(), [](void*, void*, size_t) { ++freed; });
  }
  Error load_data_into(std::string_view, void*, size_t) const override {
    return Error::NotImplemented;
  }
  Result<uint32_t> get_num_keys() const override {
    return static_cast<uint32_t>(blobs.size());
  }
  Result<const char*> get_key(uint32_t) const override {
    return Error::NotImplemented;
  }
};
int BlobMap::freed = 0;

// Calls the backend's init() directly, as Method would, with a processed
// payload and a method_name compile spec that is not NUL-terminated.
Result<DelegateHandle*> direct_init(const BlobMap* map, const std::string& payload, const char* method) {
  BackendInitContext context(nullptr, nullptr, "forward", map);
  FreeableBuffer processed(payload.data(), payload.size(), [](void*, void*, size_t) { ++BlobMap::freed; });
  std::string spec_value = std::string(method) + "XYZ";  // the runtime passes a length, not a C string
  CompileSpec spec{"method_name", {spec_value.data(), std::strlen(method)}};
  auto* backend = executorch::runtime::get_backend_class("CudaBackend");
  return backend->init(context, &processed, {&spec, 1});
}

// init() reads the right keys in both payload formats, reports bad ones, and
// frees every buffer it was given.
void test_direct_init(const std::string& dir, bool have_device) {
  BlobMap map;
  map.blobs["forward_so_blob"] = read_bytes(dir + "/forward_so_blob.bin");
  map.blobs["forward_weights_blob"] = read_bytes(dir + "/forward_weights_blob.bin");
  map.blobs["k_so_blob"] = map.blobs["forward_so_blob"];
  map.blobs["k_weights_blob"] = map.blobs["forward_weights_blob"];
  auto* backend = executorch::runtime::get_backend_class("CudaBackend");

  auto expect_loaded = [&](Result<DelegateHandle*> r) {
    if (have_device) {
      CHECK(r.ok());
      if (r.ok()) {
        backend->destroy(*r);
        g_log.clear();
        backend->destroy(*r);  // a second destroy is caught, not a double free
        CHECK(g_log.find("already destroyed") != std::string::npos);
      }
    } else {
      CHECK(!r.ok() && r.error() == Error::NotSupported);
      CHECK(std::strstr(et_cuda_last_error(), "no CUDA") != nullptr);
    }
  };

  BlobMap::freed = 0;
  map.handed_out = 0;
  expect_loaded(direct_init(&map, "", "forward"));  // ExecuTorch 1.2: keys from method_name
  CHECK(map.handed_out == 2 && BlobMap::freed == 3);  // both blobs and the payload
  expect_loaded(direct_init(&map, "k_so_blob\nk_weights_blob", "forward"));  // later: keys in the payload
  expect_loaded(direct_init(&map, "k_so_blob\nk_weights_blob\n", "forward"));  // trailing newline tolerated

  g_log.clear();
  auto malformed = direct_init(&map, "k_so_blob", "forward");
  CHECK(!malformed.ok() && malformed.error() == Error::InvalidProgram);
  CHECK(g_log.find("delegate payload is malformed") != std::string::npos);

  g_log.clear();
  auto missing = direct_init(&map, "", "decode");
  CHECK(!missing.ok() && missing.error() == Error::NotFound);
  CHECK(g_log.find("decode_so_blob") != std::string::npos);

  g_log.clear();
  auto no_map = direct_init(nullptr, "k_so_blob\nk_weights_blob", "forward");
  CHECK(!no_map.ok());
  CHECK(g_log.find("k_so_blob") != std::string::npos);

  g_log.clear();
  int not_a_handle = 0;
  backend->destroy(&not_a_handle);
  CHECK(g_log.find("unknown or already destroyed") != std::string::npos);
}

// Whether `s` is valid UTF-8 (no character cut).
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// A long record is forwarded in pieces of at most 180 bytes, each cut on a character
// boundary (a record of 2-byte characters after an odd-length prefix used to be cut inside
// one), and the pieces joined give the record back.
void test_log_split() {
  using et_cuda_adapter::log_piece_end;
  const std::string e = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x9a\x80";  // a, é, €, 🚀: 1 to 4 bytes
  for (size_t max = 4; max <= 12; ++max) {
    std::string text;
    for (int i = 0; i < 20; ++i) text += e;
    std::string joined;
    for (size_t from = 0; from < text.size();) {
      const size_t end = log_piece_end(text.data(), text.size(), from, max);
      CHECK(end > from && end - from <= max);
      CHECK(valid_utf8(text.substr(from, end - from)));
      joined += text.substr(from, end - from);
      from = end;
    }
    CHECK(joined == text);
  }
  // Bytes that are not UTF-8 are cut at the limit, never looped on.
  const std::string junk(50, '\x80');
  CHECK(log_piece_end(junk.data(), junk.size(), 0, 8) == 8);

  // Through the library's log: its warning shim, as generated code calls it.
  std::string msg;
  for (int i = 0; i < 300; ++i) msg += "\xc3\xa9";  // é
  g_log.clear();
  aoti_torch_warn("f", "x.c", 1, msg.c_str());
  CHECK(g_log.find("CudaBackend: warning: ") != std::string::npos);
  size_t lines = 0;
  std::string joined;
  for (size_t at = 0; at < g_log.size();) {
    const size_t nl = g_log.find('\n', at);
    std::string line = g_log.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("CudaBackend: ", 0) != 0) continue;
    ++lines;
    CHECK(valid_utf8(line));
    line = line.substr(std::strlen("CudaBackend: "));
    for (const char* prefix : {"warning: ", "... "}) {
      if (line.rfind(prefix, 0) == 0) line = line.substr(std::strlen(prefix));
    }
    if (line.size() >= 4 && line.compare(line.size() - 4, 4, " ...") == 0) line.resize(line.size() - 4);
    joined += line;
  }
  CHECK(lines >= 4);
  CHECK(joined == "x.c:1 f: " + msg);
}

// Without a GPU: every way of loading fails cleanly, with the reason logged.
void test_load_without_gpu(const std::string& dir) {
  {
    Module m(dir + "/model.pte", std::vector<std::string>{dir + "/aoti_cuda_blob.ptd"});
    const Error err = m.load_method("forward");
    CHECK(err == Error::NotSupported);
    CHECK(std::strstr(et_cuda_last_error(), "no CUDA") != nullptr);
  }
  {
    // No .ptd: the weights key is missing and the message names it.
    g_log.clear();
    Module m(dir + "/model.pte");
    CHECK(m.load_method("forward") != Error::Ok);
    CHECK(g_log.find("forward_weights_blob") != std::string::npos);
  }
  {
    // A .ptd that does not exist: an error, not a crash.
    Module m(dir + "/model.pte", std::vector<std::string>{dir + "/no_such_file.ptd"});
    CHECK(m.load_method("forward") != Error::Ok);
  }
}

double element(const uint8_t* p, ScalarType t) {
  if (t == ScalarType::Float) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;  // bfloat16
  std::memcpy(&h, p, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Compares an output (host or device memory) with the expected bytes.
bool matches(const executorch::aten::Tensor& t, const std::vector<uint8_t>& want, const char* what) {
  if (t.nbytes() != want.size()) {
    std::fprintf(stderr, "%s: output has %zu bytes, expected %zu\n", what, t.nbytes(), want.size());
    return false;
  }
  std::vector<uint8_t> got(t.nbytes());
  bool on_device = false;
  if (et_cuda_is_device_pointer(t.const_data_ptr(), &on_device) == ET_CUDA_STATUS_OK && on_device) {
    if (et_cuda_memcpy(nullptr, got.data(), t.const_data_ptr(), got.size()) != ET_CUDA_STATUS_OK) return false;
  } else {
    std::memcpy(got.data(), t.const_data_ptr(), got.size());
  }
  const ScalarType type = t.scalar_type();
  const size_t esize = type == ScalarType::Float ? 4 : 2;
  const double tol = type == ScalarType::Float ? 1e-4 : 2e-2;
  double max_err = 0;
  bool ok = type == ScalarType::Float || type == ScalarType::BFloat16;
  for (size_t k = 0; ok && k < got.size() / esize; ++k) {
    const double g = element(got.data() + k * esize, type), r = element(want.data() + k * esize, type);
    const double d = std::fabs(g - r);
    ok = d <= tol + tol * std::fabs(r);
    max_err = std::max(max_err, d);
  }
  std::printf("%s: %s max_abs_err=%.3g %s\n", what, on_device ? "device" : "host", max_err, ok ? "PASS" : "FAIL");
  return ok;
}

// With a GPU: run case0 through Module with the given options.
void run_fixture(const std::string& dir, const std::vector<BackendOption>& options, bool expect_device,
                 const char* label) {
  CHECK(et_cuda_reset_options() == ET_CUDA_STATUS_OK);
  CHECK(set_options(options) == Error::Ok);
  Module m(dir + "/model.pte", std::vector<std::string>{dir + "/aoti_cuda_blob.ptd"});
  CHECK(m.load_method("forward") == Error::Ok);
  auto meta = m.method_meta("forward");
  CHECK(meta.ok() && meta->num_inputs() == 1 && meta->num_outputs() == 1);
  if (!meta.ok()) return;
  auto info = meta->input_tensor_meta(0);
  CHECK(info.ok());
  if (!info.ok()) return;

  std::vector<uint8_t> input = read_bytes(dir + "/forward.case0.in0.bin");
  const std::vector<uint8_t> want = read_bytes(dir + "/forward.case0.out0.bin");
  CHECK(input.size() == info->nbytes());
  std::vector<executorch::aten::SizesType> sizes(info->sizes().begin(), info->sizes().end());
  auto x = executorch::extension::from_blob(input.data(), sizes, info->scalar_type());
  const std::string what = dir.substr(dir.find_last_of('/') + 1) + " " + label;

  for (int run = 0; run < 2; ++run) {  // twice: outputs must be right on a reused method
    auto out = m.execute("forward", std::vector<EValue>{*x});
    CHECK(out.ok() && out->size() == 1 && (*out)[0].isTensor());
    if (!out.ok() || out->empty() || !(*out)[0].isTensor()) return;
    const auto& t = (*out)[0].toTensor();
    bool on_device = false;
    CHECK(et_cuda_is_device_pointer(t.const_data_ptr(), &on_device) == ET_CUDA_STATUS_OK);
    CHECK(on_device == expect_device);
    CHECK(matches(t, want, what.c_str()));
  }
  if (expect_device) {
    // Back to host outputs on the same method: the planned buffer must be used again.
    CHECK(set_options({str_option("skip_copy_output_to_cpu_for_method", "")}) == Error::Ok);
    auto out = m.execute("forward", std::vector<EValue>{*x});
    CHECK(out.ok() && out->size() == 1);
    if (out.ok() && out->size() == 1) CHECK(matches((*out)[0].toTensor(), want, (what + " then copy").c_str()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(emit_log, __FILE__));
  executorch::runtime::runtime_init();
  const char* fixtures = std::getenv("ET_CUDA_FIXTURES");
  if (fixtures == nullptr || *fixtures == '\0') fixtures = argc > 1 ? argv[1] : nullptr;
  if (fixtures == nullptr) {
    std::fprintf(stderr, "usage: adapter_test FIXTURES_DIR (or set ET_CUDA_FIXTURES)\n");
    return 2;
  }

  int32_t count = 0;
  const bool have_device = et_cuda_device_count(&count) == ET_CUDA_STATUS_OK && count > 0;
  std::printf("CUDA devices: %d\n", have_device ? static_cast<int>(count) : 0);

  test_registration();
  test_options();
  test_log_split();
  test_direct_init(std::string(fixtures) + "/mlp_f32", have_device);
  for (const char* name : {"mlp_f32", "conv_f32", "attn_bf16"}) {
    const std::string dir = std::string(fixtures) + "/" + name;
    if (have_device) {
      run_fixture(dir, {}, false, "default");
      run_fixture(dir, {bool_option("use_shared_cuda_stream", true)}, false, "shared stream");
      run_fixture(dir, {str_option("skip_copy_output_to_cpu_for_method", "forward")}, true, "skip copy");
    } else {
      test_load_without_gpu(dir);
    }
  }

  if (failures) {
    std::fprintf(stderr, "adapter_test: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("adapter_test: all checks passed\n");
  return 0;
}
