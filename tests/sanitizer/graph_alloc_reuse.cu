// Does compute-sanitizer memcheck report a CUDA graph's in-bounds writes when two
// allocation nodes with disjoint lifetimes share an address?
//
// The pattern of whisper_bf16's decoder (README "Known problem"): a 16,384-byte
// buffer is allocated, written in full and freed; then a 16,000-byte buffer is
// allocated (the driver may give it the same address) and written in full. Every
// write is in bounds of the allocation live at the time. Captured from one stream,
// so the graph orders the first free before the second allocation.
// Two variants: `freed` frees the second buffer in the graph too; `output` leaves it
// allocated at the end of the graph, as a graph output is, and instantiates with
// auto-free-on-launch (the driver frees it when the graph is launched again, before
// the first buffer is allocated anew at the same address).
//
//   nvcc -O2 -o graph_alloc_reuse graph_alloc_reuse.cu
//   ./graph_alloc_reuse freed|output         # prints both addresses; exit 0
//   compute-sanitizer --tool memcheck ./graph_alloc_reuse output
//
// Exit status: 0 when the run (without the sanitizer: the outputs) is right, 1 otherwise.
#include <cstdio>
#include <string>
#include <cuda_runtime.h>

#define CHECK(x)                                                                 \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,            \
                   cudaGetErrorString(e_));                                      \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

__global__ void fill(unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}

__global__ void sum_into(const unsigned char* p, size_t n, unsigned long long* out) {
  unsigned long long s = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += p[i];
  atomicAdd(out, s);
}

int main(int argc, char** argv) {
  const bool output = argc > 1 && std::string(argv[1]) == "output";
  const size_t first = 16384, second = 16000;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long* sums = nullptr;
  CHECK(cudaMalloc(&sums, 2 * sizeof(unsigned long long)));
  CHECK(cudaMemset(sums, 0, 2 * sizeof(unsigned long long)));

  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  unsigned char *a = nullptr, *b = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&a), first, s));
  fill<<<4, 256, 0, s>>>(a, first, 1);
  sum_into<<<1, 256, 0, s>>>(a, first, &sums[0]);
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&b), second, s));
  fill<<<4, 256, 0, s>>>(b, second, 2);
  sum_into<<<1, 256, 0, s>>>(b, second, &sums[1]);
  if (!output) CHECK(cudaFreeAsync(b, s));
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, output ? cudaGraphInstantiateFlagAutoFreeOnLaunch : 0));
  std::printf("%s: first allocation node %p (%zu bytes), second %p (%zu bytes): %s address\n",
              output ? "output" : "freed", (void*)a, first, (void*)b, second, a == b ? "same" : "different");
  const int launches = 3;
  for (int i = 0; i < launches; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  unsigned long long h[2];
  CHECK(cudaMemcpy(h, sums, sizeof h, cudaMemcpyDeviceToHost));
  const bool ok = h[0] == launches * first * 1ull && h[1] == launches * second * 2ull;
  std::printf("sums %llu %llu (expected %llu %llu): %s\n", h[0], h[1], launches * first * 1ull,
              launches * second * 2ull, ok ? "right" : "WRONG");
  if (output) CHECK(cudaFree(b));  // the last launch's output
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(sums));
  CHECK(cudaStreamDestroy(s));
  return ok ? 0 : 1;
}
