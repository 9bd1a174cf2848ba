/* Host cost of the generated code's hottest shim pair: aoti_torch_empty_strided
 * on the device + aoti_torch_delete_tensor_object, per call, through a given
 * build of libexecutorch_cuda.so (so two builds compare in one run).
 *
 *   cc -O2 -o shim_alloc bench/shim_alloc.c -ldl
 *   ./shim_alloc path/to/libexecutorch_cuda.so [iterations]
 *
 * Prints "shim_alloc <lib>: <ns> ns per empty_strided+delete (device, 4 KiB)"
 * and the same for a host (CPU) tensor. Exit 77 without a CUDA device. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int32_t (*empty_fn)(int64_t, const int64_t*, const int64_t*, int32_t, int32_t, int32_t, void**);
typedef int32_t (*del_fn)(void*);

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static double bench(empty_fn empty, del_fn del, int device_type, long n) {
  const int64_t size = 1024, stride = 1;
  void* h = 0;
  for (long i = 0; i < 1000; ++i) { /* warm-up: device state, pool */
    if (empty(1, &size, &stride, 6, device_type, 0, &h)) return -1;
    del(h);
  }
  const double t0 = now_ns();
  for (long i = 0; i < n; ++i) {
    empty(1, &size, &stride, 6, device_type, 0, &h);
    del(h);
  }
  return (now_ns() - t0) / n;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: shim_alloc LIB [iterations]\n");
    return 2;
  }
  const long n = argc > 2 ? atol(argv[2]) : 1000000;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "shim_alloc: %s\n", dlerror());
    return 1;
  }
  empty_fn empty = (empty_fn)dlsym(lib, "aoti_torch_empty_strided");
  del_fn del = (del_fn)dlsym(lib, "aoti_torch_delete_tensor_object");
  if (!empty || !del) {
    fprintf(stderr, "shim_alloc: missing shim symbols\n");
    return 1;
  }
  const double host = bench(empty, del, 0, n);
  const double dev = bench(empty, del, 1, n);
  printf("shim_alloc %s: host tensor %.1f ns per empty_strided+delete\n", argv[1], host);
  if (dev < 0) {
    printf("shim_alloc %s: device tensor: no CUDA device\n", argv[1]);
    return 77;
  }
  printf("shim_alloc %s: device tensor %.1f ns per empty_strided+delete (4 KiB, stream-ordered pool)\n", argv[1], dev);
  return 0;
}
