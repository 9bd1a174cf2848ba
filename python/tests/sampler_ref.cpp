// The runner's host sampler (runner/sampling.cpp) over rows read from a file, for
// test_package.py's parity test of executorch_cuda.sampling. Usage:
//   sampler_ref ROWS.f32 V TEMPERATURE TOP_P SEED  -> one token id per row on stdout
#include "sampling.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: sampler_ref ROWS.f32 V TEMPERATURE TOP_P SEED\n");
    return 2;
  }
  FILE* f = std::fopen(argv[1], "rb");
  if (f == nullptr) {
    std::perror(argv[1]);
    return 1;
  }
  const size_t v = std::strtoull(argv[2], nullptr, 10);
  et_cuda_run::SamplingParams p;
  p.temperature = std::strtod(argv[3], nullptr);
  p.top_p = std::strtod(argv[4], nullptr);
  p.seed = std::strtoull(argv[5], nullptr, 10);
  et_cuda_run::Sampler sampler(p);
  std::vector<float> row(v);
  std::vector<double> logits(v);
  while (std::fread(row.data(), sizeof(float), v, f) == v) {
    for (size_t i = 0; i < v; ++i) logits[i] = row[i];
    std::printf("%lld\n", static_cast<long long>(sampler.pick(logits)));
  }
  std::fclose(f);
  return 0;
}
