// The manifest: which program to load, and per method the cases to check
// (runner/README.md describes the format, including the extensions:
// tolerance, reference, known_failure, generate).
#pragma once

#include "common.h"

#include <executorch/runtime/executor/method_meta.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace et_cuda_run {

// An element passes when |out - ref| <= atol + rtol * |ref| (NaN never passes).
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// The per-dtype defaults used when the manifest gives no tolerance.
Tolerance default_tolerance(ScalarType type);

struct TensorSpec {
  const DType* dtype = nullptr;
  std::vector<SizesType> sizes;
  std::string file;  // resolved path
  std::vector<uint8_t> bytes;

  // The number of elements; SIZE_MAX when the product overflows (parse_manifest refuses
  // such sizes, so a parsed spec never gets there).
  size_t numel() const {
    size_t n = 1;
    for (SizesType s : sizes) {
      if (s < 0 || __builtin_mul_overflow(n, static_cast<size_t>(s), &n)) return SIZE_MAX;
    }
    return n;
  }
};

struct Case {
  std::vector<TensorSpec> inputs, outputs;
  std::optional<Tolerance> tolerance;  // the case's, else the manifest's
};

// "generate": defaults for --generate.
struct GenerateSpec {
  bool present = false;
  std::string prefill_method = "forward";
  std::string decode_method = "forward";
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> tokens;  // eager's greedy tokens after the prompt
  int64_t max_seq_len = 0;      // 0: not given
};

struct Manifest {
  std::string path;
  std::string model;
  std::vector<std::string> data;
  // In file order: cases of a method run in this order on one loaded method.
  std::vector<std::pair<std::string, std::vector<Case>>> methods;
  std::string reference;      // informational
  std::string known_failure;  // informational: the suite reports FAIL(known)
  GenerateSpec generate;
};

Manifest parse_manifest(const std::string& path);

std::vector<Case>* cases_of(Manifest& manifest, const std::string& method);

// Checks a case against the method's signature (count, dtype, rank, each size
// within the method's upper bound), then loads its .bin files. Made before
// anything is loaded onto the device.
void check_case(Case& cs, const executorch::runtime::MethodMeta& meta, const std::string& manifest,
                const std::string& where);

}  // namespace et_cuda_run
