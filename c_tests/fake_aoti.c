/* A stand-in for an AOTInductor .so, for bad-input and lifetime tests that
 * need control over what the "model" does. It exports the container entry
 * points and calls back into the aoti_torch_* shim from the global scope,
 * exactly like a generated .so compiled with link_libtorch=False.
 *
 * Model: one input, one output; output = clone(input). Behaviour is chosen
 * by the input's dtype:
 *   float32 / bfloat16: success;
 *   int32: Run fails (as if the model threw);
 *   int64: asks the shim for a 1 TiB device tensor (out of memory) and fails;
 *   float16: reads element 0 on the host first (a wait, which a CUDA graph capture
 *            cannot contain), then succeeds.
 * Creating a container fails when FAKE_AOTI_CREATE_FAILS is set in the
 * environment; the model wants FAKE_AOTI_BLOB_SIZE (default 16) weight bytes. */
#include <stdint.h>
#include <stdlib.h>

typedef void* AtenTensorHandle;
extern int32_t aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret);
extern int32_t aoti_torch_delete_tensor_object(AtenTensorHandle t);
extern int32_t aoti_torch_get_dtype(AtenTensorHandle t, int32_t* ret);
extern int32_t aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes, const int64_t* strides, int32_t dtype,
                                        int32_t device_type, int32_t device_index, AtenTensorHandle* ret);
extern int32_t aoti_torch_create_cuda_stream_guard(void* stream, int32_t device_index, void** ret);
extern int32_t aoti_torch_delete_cuda_stream_guard(void* guard);
extern int32_t aoti_torch__reinterpret_tensor(AtenTensorHandle self, int64_t ndim, const int64_t* sizes,
                                              const int64_t* strides, int64_t offset, AtenTensorHandle* ret);
extern int32_t aoti_torch_item_float16(AtenTensorHandle t, uint16_t* ret);

static int containers;

int32_t AOTInductorModelContainerCreateWithDevice(void** h, size_t n, const char* dev, const char* dir) {
  (void)n; (void)dev; (void)dir;
  if (getenv("FAKE_AOTI_CREATE_FAILS")) return 1;
  *h = malloc(1);
  containers++;
  return 0;
}
int32_t AOTInductorModelContainerDelete(void* h) { free(h); containers--; return 0; }
int32_t AOTInductorModelContainerGetNumInputs(void* h, size_t* n) { (void)h; *n = 1; return 0; }
int32_t AOTInductorModelContainerGetNumOutputs(void* h, size_t* n) { (void)h; *n = 1; return 0; }
int32_t AOTInductorModelContainerGetConstantsBlobSize(void* h, uint64_t* n) {
  (void)h;
  const char* s = getenv("FAKE_AOTI_BLOB_SIZE");
  *n = s ? strtoull(s, 0, 10) : 16;
  return 0;
}
int32_t AOTInductorModelUpdateConstantsFromBlob(void* h, const uint8_t* blob) { (void)h; (void)blob; return 0; }

static int32_t run(void* h, AtenTensorHandle* in, size_t n_in, AtenTensorHandle* out, size_t n_out, void* stream,
                   void* proxy) {
  (void)h; (void)proxy;
  if (n_in != 1 || n_out != 1) return 1;
  void* guard = 0;
  if (aoti_torch_create_cuda_stream_guard(stream, 0, &guard)) return 1;
  int32_t dtype = -1, rc = 0;
  aoti_torch_get_dtype(in[0], &dtype);
  if (dtype == 3) {
    rc = 1;
  } else if (dtype == 4) {
    int64_t size = (int64_t)1 << 38, stride = 1;
    AtenTensorHandle big = 0;
    rc = aoti_torch_empty_strided(1, &size, &stride, 6, 1, 0, &big) ? 1 : 0;
    if (big) aoti_torch_delete_tensor_object(big);
    if (rc == 0) rc = 1;
  } else {
    if (dtype == 5) {
      int64_t one = 1, stride = 1;
      AtenTensorHandle first = 0;
      uint16_t v = 0;
      rc = aoti_torch__reinterpret_tensor(in[0], 1, &one, &stride, 0, &first) ? 1 : 0;
      if (rc == 0) rc = aoti_torch_item_float16(first, &v) ? 1 : 0;
      if (first) aoti_torch_delete_tensor_object(first);
    }
    if (rc == 0) rc = aoti_torch_clone(in[0], &out[0]) ? 1 : 0;
  }
  aoti_torch_delete_tensor_object(in[0]);  /* inputs are stolen */
  in[0] = 0;
  aoti_torch_delete_cuda_stream_guard(guard);
  return rc;
}
int32_t AOTInductorModelContainerRun(void* h, AtenTensorHandle* in, size_t n_in, AtenTensorHandle* out, size_t n_out,
                                     void* stream, void* proxy) {
  return run(h, in, n_in, out, n_out, stream, proxy);
}
int32_t AOTInductorModelContainerRunSingleThreaded(void* h, AtenTensorHandle* in, size_t n_in, AtenTensorHandle* out,
                                                   size_t n_out, void* stream, void* proxy) {
  return run(h, in, n_in, out, n_out, stream, proxy);
}
int fake_aoti_live_containers(void) { return containers; }
