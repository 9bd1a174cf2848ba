/* executorch_cuda.h must compile as strict C11 with -Wall -Wextra -Werror, and
 * its struct layouts are part of the ABI. */
#include "executorch_cuda.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(ET_CUDA_MAX_DIMS == 16, "ET_CUDA_MAX_DIMS");
_Static_assert(offsetof(EtCudaTensor, nbytes) == 8, "EtCudaTensor.nbytes");
_Static_assert(offsetof(EtCudaTensor, dtype) == 16, "EtCudaTensor.dtype");
_Static_assert(offsetof(EtCudaTensor, ndim) == 20, "EtCudaTensor.ndim");
_Static_assert(offsetof(EtCudaTensor, sizes) == 24, "EtCudaTensor.sizes");
_Static_assert(offsetof(EtCudaTensor, strides) == 24 + 8 * ET_CUDA_MAX_DIMS, "EtCudaTensor.strides");
_Static_assert(sizeof(EtCudaTensor) == 24 + 16 * ET_CUDA_MAX_DIMS, "EtCudaTensor size");
_Static_assert(ET_CUDA_STATUS_OK == 0 && ET_CUDA_STATUS_UNKNOWN_OPTION == 9, "EtCudaStatus values");

int main(void) {
  const char* v = et_cuda_version();
  if (v == NULL || strlen(v) == 0) {
    fprintf(stderr, "%s:%d: empty version\n", __FILE__, __LINE__);
    return 1;
  }
  printf("C11: executorch_cuda %s\n", v);
  return 0;
}
