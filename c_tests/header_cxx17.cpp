// executorch_cuda.h must compile as C++17 with -Wall -Wextra -Werror and give
// the functions C linkage.
#include "executorch_cuda.h"

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>

static_assert(std::is_standard_layout_v<EtCudaTensor> && std::is_trivially_copyable_v<EtCudaTensor>);
static_assert(sizeof(EtCudaTensor) == 24 + 16 * ET_CUDA_MAX_DIMS);
static_assert(offsetof(EtCudaTensor, strides) == 24 + 8 * ET_CUDA_MAX_DIMS);
static_assert(std::is_same_v<decltype(&et_cuda_init), EtCudaStatus (*)(const EtCudaInitArgs*, EtCudaHandle**)>);

int main() {
  const char* v = et_cuda_version();
  if (v == nullptr || std::strlen(v) == 0) {
    std::fprintf(stderr, "%s:%d: empty version\n", __FILE__, __LINE__);
    return 1;
  }
  std::printf("C++17: executorch_cuda %s\n", v);
  return 0;
}
