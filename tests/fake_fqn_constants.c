/* Appended to c_tests/fake_aoti.c by tests/gpu_features.rs: the constant-management entry
 * points, so that the fake model loads ExecuTorch 1.5's per-FQN weights. One constant,
 * "w" (original FQN "w"): float32, 16 bytes, a parameter, not folded. The tensors handed
 * over are not used by the model (output = clone(input)). */
#include <stdbool.h>

int32_t AOTInductorModelContainerGetNumConstants(void* h, size_t* n) { (void)h; *n = 1; return 0; }
int32_t AOTInductorModelContainerGetConstantName(void* h, size_t i, const char** s) {
  (void)h; (void)i; *s = "w"; return 0;
}
int32_t AOTInductorModelContainerGetConstantOriginalFQN(void* h, size_t i, const char** s) {
  (void)h; (void)i; *s = "w"; return 0;
}
int32_t AOTInductorModelContainerGetConstantFromFolded(void* h, size_t i, bool* v) {
  (void)h; (void)i; *v = false; return 0;
}
int32_t AOTInductorModelContainerGetConstantType(void* h, size_t i, int32_t* v) { (void)h; (void)i; *v = 1; return 0; }
int32_t AOTInductorModelContainerGetConstantDtype(void* h, size_t i, int32_t* v) { (void)h; (void)i; *v = 6; return 0; }
int32_t AOTInductorModelContainerGetConstantDataSize(void* h, size_t i, size_t* v) { (void)h; (void)i; *v = 16; return 0; }
int32_t AOTInductorModelContainerUpdateUserManagedConstantBufferPairs(void* h, const void* pairs, size_t n, bool a,
                                                                      bool b) {
  (void)h; (void)pairs; (void)n; (void)a; (void)b; return 0;
}
