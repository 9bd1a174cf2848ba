#include "manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>

namespace et_cuda_run {

namespace {

// ordered_json keeps the file's key order: methods run in the order written.
using Json = nlohmann::ordered_json;
using executorch::runtime::MethodMeta;

const char* kind_word(Json::value_t kind) {
  switch (kind) {
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a number";
  }
}

const Json& member(const Json& obj, const char* key, Json::value_t kind, const std::string& file,
                   const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(file, where + ": missing \"" + key + "\"");
  if (it->type() != kind) fail(file, where + ": \"" + key + "\" must be " + kind_word(kind));
  return *it;
}

std::string string_member(const Json& obj, const char* key, const std::string& file, const std::string& where) {
  return member(obj, key, Json::value_t::string, file, where).get<std::string>();
}

int64_t integer(const Json& v, int64_t min, int64_t max, const std::string& file, const std::string& what) {
  if (!v.is_number_integer()) fail(file, what + " must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(file, what + " is out of range");
  }
  const int64_t n = v.get<int64_t>();
  if (n < min || n > max) {
    fail(file, what + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                   std::to_string(n));
  }
  return n;
}

std::vector<int64_t> int_list(const Json& v, const std::string& file, const std::string& what) {
  if (!v.is_array()) fail(file, what + " must be an array of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(integer(v[i], 0, INT64_MAX, file, what + "[" + std::to_string(i) + "]"));
  }
  return out;
}

Tolerance parse_tolerance(const Json& v, const std::string& file, const std::string& where) {
  if (!v.is_object()) fail(file, where + ": \"tolerance\" must be an object {\"atol\": A, \"rtol\": R}");
  Tolerance t;
  for (const char* key : {"atol", "rtol"}) {
    const auto it = v.find(key);
    if (it == v.end()) fail(file, where + ": \"tolerance\" needs \"" + key + "\"");
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
      fail(file, where + ": tolerance \"" + key + "\" must be a non-negative number");
    }
    (key[0] == 'a' ? t.atol : t.rtol) = it->get<double>();
  }
  return t;
}

TensorSpec parse_tensor(const Json& j, const std::string& file, const std::string& dir, const std::string& where) {
  if (!j.is_object()) fail(file, where + " must be an object");
  TensorSpec t;
  const std::string dtype = string_member(j, "dtype", file, where);
  t.dtype = dtype_by_name(dtype);
  if (t.dtype == nullptr) fail(file, where + ": unsupported dtype \"" + dtype + "\"");
  for (const Json& s : member(j, "sizes", Json::value_t::array, file, where)) {
    t.sizes.push_back(static_cast<SizesType>(integer(s, 0, INT32_MAX, file, where + ": sizes")));
  }
  // Each size fits an int32; their product, and its bytes, must fit a size_t.
  size_t bytes = t.dtype->size;
  for (SizesType s : t.sizes) {
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(s), &bytes)) {
      fail(file, where + ": sizes " + shape_str(t.sizes) + " of " + t.dtype->name +
                     " hold more bytes than a 64-bit count holds");
    }
  }
  t.file = join(dir, string_member(j, "file", file, where));
  return t;
}

GenerateSpec parse_generate(const Json& g, const std::string& file) {
  if (!g.is_object()) fail(file, "\"generate\" must be an object");
  GenerateSpec s;
  s.present = true;
  if (g.contains("prefill_method")) s.prefill_method = string_member(g, "prefill_method", file, "generate");
  if (g.contains("decode_method")) s.decode_method = string_member(g, "decode_method", file, "generate");
  if (g.contains("prompt_ids")) s.prompt_ids = int_list(g["prompt_ids"], file, "generate: \"prompt_ids\"");
  if (g.contains("tokens")) s.tokens = int_list(g["tokens"], file, "generate: \"tokens\"");
  if (g.contains("max_seq_len")) {
    s.max_seq_len = integer(g["max_seq_len"], 1, INT32_MAX, file, "generate: \"max_seq_len\"");
  }
  return s;
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

}  // namespace

Tolerance default_tolerance(ScalarType type) {
  if (type == ScalarType::Float) return {1e-4, 1e-4};
  if (type == ScalarType::BFloat16 || type == ScalarType::Half) return {2e-2, 2e-2};
  return {0, 0};
}

Manifest parse_manifest(const std::string& path) {
  const std::string text = read_file(path);
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 26: ..." -> "parse error at ..."
    std::string why = e.what();
    if (const size_t close = why.find("] "); why.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      why = why.substr(close + 2);
    }
    fail(path, "invalid JSON: " + why);
  }
  if (!root.is_object()) fail(path, "the manifest must be a JSON object");
  const std::string dir = dir_of(path);
  Manifest m;
  m.path = path;
  if (root.contains("model")) m.model = join(dir, string_member(root, "model", path, "manifest"));
  if (root.contains("data")) {
    for (const Json& d : member(root, "data", Json::value_t::array, path, "manifest")) {
      if (!d.is_string()) fail(path, "\"data\" entries must be strings");
      m.data.push_back(join(dir, d.get<std::string>()));
    }
  }
  if (root.contains("reference")) m.reference = string_member(root, "reference", path, "manifest");
  if (root.contains("known_failure")) m.known_failure = string_member(root, "known_failure", path, "manifest");
  std::optional<Tolerance> top_tolerance;
  if (root.contains("tolerance")) top_tolerance = parse_tolerance(root["tolerance"], path, "manifest");
  if (root.contains("generate")) m.generate = parse_generate(root["generate"], path);

  const Json& methods = member(root, "methods", Json::value_t::object, path, "manifest");
  for (const auto& kv : methods.items()) {
    if (!kv.value().is_array()) fail(path, "method \"" + kv.key() + "\" must map to an array of cases");
    std::vector<Case> cases;
    for (size_t c = 0; c < kv.value().size(); ++c) {
      const Json& cj = kv.value()[c];
      const std::string where = kv.key() + " case" + std::to_string(c);
      if (!cj.is_object()) fail(path, where + " must be an object");
      Case cs;
      const Json& ins = member(cj, "inputs", Json::value_t::array, path, where);
      for (size_t i = 0; i < ins.size(); ++i) {
        cs.inputs.push_back(parse_tensor(ins[i], path, dir, where + " input " + std::to_string(i)));
      }
      const Json& outs = member(cj, "outputs", Json::value_t::array, path, where);
      for (size_t i = 0; i < outs.size(); ++i) {
        cs.outputs.push_back(parse_tensor(outs[i], path, dir, where + " output " + std::to_string(i)));
      }
      cs.tolerance = cj.contains("tolerance") ? parse_tolerance(cj["tolerance"], path, where) : top_tolerance;
      cases.push_back(std::move(cs));
    }
    m.methods.emplace_back(kv.key(), std::move(cases));
  }
  if (m.methods.empty() && !m.generate.present) fail(path, "no methods");
  return m;
}

std::vector<Case>* cases_of(Manifest& manifest, const std::string& method) {
  for (auto& [name, cases] : manifest.methods) {
    if (name == method) return &cases;
  }
  return nullptr;
}

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
    // The method's sizes are the upper bounds of its dynamic dimensions (equal
    // to the sizes for static ones, where ExecuTorch refuses any other size).
    const auto bound = info->sizes();
    if (bound.size() != t.sizes.size()) {
      fail(manifest, what + ": sizes " + shape_str(t.sizes) + " have rank " + std::to_string(t.sizes.size()) +
                         ", the method's " + shape_str(bound) + " rank " + std::to_string(bound.size()));
    }
    for (size_t d = 0; d < bound.size(); ++d) {
      if (t.sizes[d] > bound[d]) {
        fail(manifest, what + ": sizes " + shape_str(t.sizes) + " exceed the method's upper bound " +
                           shape_str(bound) + " in dimension " + std::to_string(d));
      }
    }
    load_bin(t);
  };
  for (size_t i = 0; i < cs.inputs.size(); ++i) check(cs.inputs[i], true, i);
  for (size_t i = 0; i < cs.outputs.size(); ++i) check(cs.outputs[i], false, i);
}

}  // namespace et_cuda_run
