/* A stand-in libcuda.so.1 for testing et_cuda_run --mem on a machine without a GPU
 * (bench/test_table.sh): one device, a primary context, and cuMemGetInfo_v2 whose
 * "used" memory grows by FAKE_CUDA_STEP_MIB (default 10) MiB per call after the first.
 * Everything else the backend may look up is absent, so loading a method fails after
 * the runner has taken its baseline. Not a CUDA implementation. */
#include <stddef.h>
#include <stdlib.h>

static int g_calls;
static int g_ctx_current;
static char g_ctx;

int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGetCount(int* n) { *n = 1; return 0; }
int cuGetErrorName(int rc, const char** s) { (void)rc; *s = "CUDA_ERROR_FAKE"; return 0; }
int cuDeviceGet(int* dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? 0 : 101; }
int cuCtxGetCurrent(void** ctx) { *ctx = g_ctx_current ? (void*)&g_ctx : NULL; return 0; }
int cuDevicePrimaryCtxRetain(void** ctx, int dev) { (void)dev; *ctx = &g_ctx; return 0; }
int cuCtxSetCurrent(void* ctx) { g_ctx_current = ctx == &g_ctx; return 0; }
int cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  const char* s = getenv("FAKE_CUDA_STEP_MIB");
  const size_t step = (size_t)(s ? atoi(s) : 10) << 20;
  if (!g_ctx_current) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
  *total = (size_t)1000 << 20;
  *free_bytes = *total - ((size_t)100 << 20) - step * (size_t)(g_calls > 0 ? g_calls : 0);
  ++g_calls;
  return 0;
}
