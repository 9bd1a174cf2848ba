// Uses no adapter symbol: "CudaBackend" is registered only because linking
// executorch_cuda::backend kept the adapter library loaded.
#include <executorch_cuda.h>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>

int main() {
  executorch::runtime::runtime_init();
  if (executorch::runtime::get_backend_class("CudaBackend") == nullptr) {
    std::fprintf(stderr, "consumer: CudaBackend is not registered\n");
    return 1;
  }
  std::printf("consumer: CudaBackend registered, executorch_cuda %s\n", et_cuda_version());
  return 0;
}
