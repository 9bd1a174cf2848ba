/* executorch-cuda: order ExecuTorch executes on a CUDA stream of the caller's.
 *
 *   {
 *     executorch_cuda::CallerStreamGuard guard(my_stream);  // cudaStream_t / CUstream
 *     method.execute();   // starts after my_stream's queued work; my_stream waits for its end
 *   }
 *
 * The guard is thread-local (like ExecuTorch's extension/cuda caller-stream guard) and nests;
 * on destruction the previous caller stream (or none) is restored. A stream of another device
 * than the method's makes the execute fail with an InvalidArgument error. */
#ifndef EXECUTORCH_CUDA_CALLER_STREAM_H
#define EXECUTORCH_CUDA_CALLER_STREAM_H

#include <executorch_cuda.h>

#ifdef __cplusplus
namespace executorch_cuda {

class CallerStreamGuard {
 public:
  explicit CallerStreamGuard(void* stream) {
    et_cuda_caller_stream(&prev_, &had_prev_);
    ok_ = et_cuda_set_caller_stream(stream) == ET_CUDA_STATUS_OK;
  }
  ~CallerStreamGuard() {
    if (had_prev_) {
      et_cuda_set_caller_stream(prev_);
    } else {
      et_cuda_clear_caller_stream();
    }
  }
  CallerStreamGuard(const CallerStreamGuard&) = delete;
  CallerStreamGuard& operator=(const CallerStreamGuard&) = delete;
  /* Whether the stream was set. */
  bool ok() const { return ok_; }

 private:
  void* prev_ = nullptr;
  bool had_prev_ = false;
  bool ok_ = false;
};

}  // namespace executorch_cuda
#endif /* __cplusplus */
#endif /* EXECUTORCH_CUDA_CALLER_STREAM_H */
