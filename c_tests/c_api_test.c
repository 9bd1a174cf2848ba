/* The executorch_cuda C ABI, exercised from C.
 *
 *   c_api_test [FIXTURES_DIR]     (the ET_CUDA_FIXTURES environment variable wins)
 *
 * Without a CUDA driver it checks argument validation, the no-device path of
 * et_cuda_init on real program blobs, and the options. With a device it also
 * runs mlp_f32 through the C API and compares with the expected output. */
#include "executorch_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: \"%s\")\n", __FILE__, __LINE__, \
              #cond, et_cuda_last_error());                                                \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)

/* A call that must fail with `status` and a last error mentioning `word`. */
#define CHECK_FAILS(call, status, word)                                                          \
  do {                                                                                           \
    EtCudaStatus s_ = (call);                                                                    \
    const char* e_ = et_cuda_last_error();                                                       \
    if (s_ != (status) || e_ == NULL || strstr(e_, (word)) == NULL) {                            \
      fprintf(stderr, "%s:%d: %s returned %d \"%s\", expected %d mentioning \"%s\"\n", __FILE__, \
              __LINE__, #call, (int)s_, e_ ? e_ : "(null)", (int)(status), (word));              \
      ++failures;                                                                                \
    }                                                                                            \
  } while (0)

#define OK(call) CHECK((call) == ET_CUDA_STATUS_OK)

/* Like CHECK_FAILS; without a device, NO_DEVICE is accepted too: the header
 * does not order the null checks of these calls before the driver lookup. */
#define CHECK_FAILS_OR_NO_DEVICE(have_device, call, status, word)                   \
  do {                                                                              \
    if (!(have_device) && (call) == ET_CUDA_STATUS_NO_DEVICE) {                     \
      CHECK(strstr(et_cuda_last_error(), "no CUDA") != NULL);                       \
    } else {                                                                        \
      CHECK_FAILS(call, status, word);                                              \
    }                                                                               \
  } while (0)

typedef struct {
  unsigned char* data;
  size_t len;
} Blob;

static Blob read_blob(const char* dir, const char* name) {
  char path[4096];
  Blob b = {NULL, 0};
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  b.len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  b.data = malloc(b.len ? b.len : 1);
  if (b.data == NULL || fread(b.data, 1, b.len, f) != b.len) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  fclose(f);
  return b;
}

static EtCudaInitArgs init_args(const Blob* so, const Blob* weights) {
  EtCudaInitArgs a;
  memset(&a, 0, sizeof a);
  a.so_data = so->data;
  a.so_len = so->len;
  a.weights_data = weights->data;
  a.weights_len = weights->len;
  a.method_name = "forward";
  a.so_key = "forward_so_blob";
  if (et_cuda_default_method_config(&a.config) != ET_CUDA_STATUS_OK) abort();
  return a;
}

static void test_null_arguments(bool have_device) {
  EtCudaHandle* h = (EtCudaHandle*)&failures; /* non-null garbage: must be reset */
  EtCudaInitArgs a;
  memset(&a, 0, sizeof a);
  size_t n;
  void* p;
  bool b;
  char buf[8];
  float x = 0;
  EtCudaStats st;

  CHECK_FAILS_OR_NO_DEVICE(have_device, et_cuda_device_count(NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out_count");
  CHECK_FAILS(et_cuda_init(NULL, &h), ET_CUDA_STATUS_INVALID_ARGUMENT, "args");
  CHECK(h == NULL);
  CHECK_FAILS(et_cuda_init(&a, NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out_handle");
  a.so_len = 16; /* null data with a length */
  h = (EtCudaHandle*)&failures;
  CHECK_FAILS(et_cuda_init(&a, &h), ET_CUDA_STATUS_INVALID_ARGUMENT, "so_data");
  CHECK(h == NULL);
  CHECK_FAILS(et_cuda_num_inputs(NULL, &n), ET_CUDA_STATUS_INVALID_ARGUMENT, "handle");
  CHECK_FAILS(et_cuda_num_outputs(NULL, &n), ET_CUDA_STATUS_INVALID_ARGUMENT, "handle");
  CHECK_FAILS(et_cuda_execute(NULL, NULL, 0, NULL, 0, ET_CUDA_OUTPUT_PLACEMENT_COPY),
              ET_CUDA_STATUS_INVALID_ARGUMENT, "handle");
  CHECK_FAILS(et_cuda_handle_stream(NULL, &p), ET_CUDA_STATUS_INVALID_ARGUMENT, "handle");
  CHECK_FAILS(et_cuda_synchronize(NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "handle");
  /* A null handle is allowed for et_cuda_memcpy; null buffers are not. */
  CHECK_FAILS_OR_NO_DEVICE(have_device, et_cuda_memcpy(NULL, NULL, &x, sizeof x), ET_CUDA_STATUS_INVALID_ARGUMENT,
                           "dst");
  CHECK_FAILS_OR_NO_DEVICE(have_device, et_cuda_memcpy(NULL, &x, NULL, sizeof x), ET_CUDA_STATUS_INVALID_ARGUMENT,
                           "src");
  CHECK_FAILS_OR_NO_DEVICE(have_device, et_cuda_is_device_pointer(&x, NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out");
  CHECK_FAILS(et_cuda_stats(NULL, NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out");
  CHECK_FAILS(et_cuda_set_option_bool(NULL, true), ET_CUDA_STATUS_INVALID_ARGUMENT, "key");
  CHECK_FAILS(et_cuda_set_option_int(NULL, 1), ET_CUDA_STATUS_INVALID_ARGUMENT, "key");
  CHECK_FAILS(et_cuda_set_option_str(NULL, "x"), ET_CUDA_STATUS_INVALID_ARGUMENT, "key");
  CHECK_FAILS(et_cuda_set_option_str("skip_copy_output_to_cpu_for_method", NULL),
              ET_CUDA_STATUS_INVALID_ARGUMENT, "value");
  CHECK_FAILS(et_cuda_get_option_bool(NULL, &b), ET_CUDA_STATUS_INVALID_ARGUMENT, "key");
  CHECK_FAILS(et_cuda_get_option_bool("use_shared_cuda_stream", NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out");
  CHECK_FAILS(et_cuda_get_option_int("device_index", NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out");
  CHECK_FAILS(et_cuda_get_option_str("enable_cuda_graph_for_method", NULL, sizeof buf), ET_CUDA_STATUS_INVALID_ARGUMENT,
              "buf");
  /* The asynchronous sampler: argument checks before any driver call. */
  uint64_t ticket = 0;
  int64_t token = 0;
  CHECK_FAILS(et_cuda_sample_async(&x, 6, 1, 0, 0.0, 1.0, 0, 0, NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out_ticket");
  CHECK_FAILS(et_cuda_sample_async(&x, 6, 1, -1, 0.0, 1.0, 0, 0, &ticket), ET_CUDA_STATUS_INVALID_ARGUMENT,
              "negative");
  CHECK_FAILS(et_cuda_sample_wait(0, 0, NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out_token");
  CHECK_FAILS(et_cuda_sample_wait(-1, 0, &token), ET_CUDA_STATUS_INVALID_ARGUMENT, "negative");
  /* No asynchronous call has run in this process: no ticket to wait for. */
  CHECK_FAILS(et_cuda_sample_wait(0, 0, &token), ET_CUDA_STATUS_INVALID_ARGUMENT, "et_cuda_sample_async");
  bool fed = true;
  CHECK_FAILS(et_cuda_sample_fed(0, 0, NULL), ET_CUDA_STATUS_INVALID_ARGUMENT, "out_fed");
  CHECK_FAILS(et_cuda_sample_fed(-1, 0, &fed), ET_CUDA_STATUS_INVALID_ARGUMENT, "negative");
  CHECK_FAILS(et_cuda_sample_fed(0, 0, &fed), ET_CUDA_STATUS_INVALID_ARGUMENT, "et_cuda_sample_async");
  CHECK(ET_CUDA_SAMPLED_TOKEN == INT64_MIN);

  /* Success clears the message. */
  OK(et_cuda_destroy(NULL));
  CHECK(strcmp(et_cuda_last_error(), "") == 0);
  OK(et_cuda_stats(NULL, &st));
}

static void test_options(void) {
  bool b = true;
  int64_t i = -1;
  char buf[256];

  OK(et_cuda_reset_options());
  OK(et_cuda_get_option_bool("use_shared_cuda_stream", &b));
  CHECK(!b);
  OK(et_cuda_get_option_int("device_index", &i));
  CHECK(i == 0);
  OK(et_cuda_get_option_str("skip_copy_output_to_cpu_for_method", buf, sizeof buf));
  CHECK(strcmp(buf, "") == 0);
  OK(et_cuda_get_option_str("enable_cuda_graph_for_method", buf, sizeof buf));
  CHECK(strcmp(buf, "") == 0);

  /* Round trips. */
  OK(et_cuda_set_option_bool("use_shared_cuda_stream", true));
  OK(et_cuda_get_option_bool("use_shared_cuda_stream", &b));
  CHECK(b);
  OK(et_cuda_set_option_int("device_index", 3));
  OK(et_cuda_get_option_int("device_index", &i));
  CHECK(i == 3);
  OK(et_cuda_set_option_str("skip_copy_output_to_cpu_for_method", "forward,decode"));
  OK(et_cuda_get_option_str("skip_copy_output_to_cpu_for_method", buf, sizeof buf));
  CHECK(strcmp(buf, "forward,decode") == 0);
  OK(et_cuda_get_option_str("skip_copy_output_to_cpu_for_method", buf, 4)); /* truncated */
  CHECK(strcmp(buf, "for") == 0);
  static const char* lists[] = {"", "forward", "prefill,decode"};
  for (size_t m = 0; m < sizeof lists / sizeof lists[0]; ++m) {
    OK(et_cuda_set_option_str("enable_cuda_graph_for_method", lists[m]));
    OK(et_cuda_get_option_str("enable_cuda_graph_for_method", buf, sizeof buf));
    CHECK(strcmp(buf, lists[m]) == 0);
  }

  /* Known keys with the wrong type or a bad value. */
  CHECK_FAILS(et_cuda_set_option_int("use_shared_cuda_stream", 1), ET_CUDA_STATUS_INVALID_ARGUMENT,
              "use_shared_cuda_stream");
  CHECK_FAILS(et_cuda_set_option_str("use_shared_cuda_stream", "true"), ET_CUDA_STATUS_INVALID_ARGUMENT,
              "use_shared_cuda_stream");
  CHECK_FAILS(et_cuda_set_option_bool("device_index", true), ET_CUDA_STATUS_INVALID_ARGUMENT, "device_index");
  CHECK_FAILS(et_cuda_set_option_str("device_index", "1"), ET_CUDA_STATUS_INVALID_ARGUMENT, "device_index");
  CHECK_FAILS(et_cuda_set_option_bool("skip_copy_output_to_cpu_for_method", true),
              ET_CUDA_STATUS_INVALID_ARGUMENT, "skip_copy_output_to_cpu_for_method");
  CHECK_FAILS(et_cuda_set_option_int("enable_cuda_graph_for_method", 2), ET_CUDA_STATUS_INVALID_ARGUMENT,
              "enable_cuda_graph_for_method");
  CHECK_FAILS(et_cuda_set_option_int("cuda_graph_cache_size", 0), ET_CUDA_STATUS_INVALID_ARGUMENT,
              "cuda_graph_cache_size");
  /* A failed set leaves the value alone. */
  OK(et_cuda_get_option_bool("use_shared_cuda_stream", &b));
  CHECK(b);

  /* Unknown keys: ignored on set, reported on get. */
  OK(et_cuda_set_option_bool("no_such_option", true));
  OK(et_cuda_set_option_int("no_such_option", 1));
  OK(et_cuda_set_option_str("no_such_option", "x"));
  CHECK_FAILS(et_cuda_get_option_bool("no_such_option", &b), ET_CUDA_STATUS_UNKNOWN_OPTION, "no_such_option");
  CHECK_FAILS(et_cuda_get_option_int("no_such_option", &i), ET_CUDA_STATUS_UNKNOWN_OPTION, "no_such_option");
  CHECK_FAILS(et_cuda_get_option_str("no_such_option", buf, sizeof buf), ET_CUDA_STATUS_UNKNOWN_OPTION,
              "no_such_option");

  OK(et_cuda_reset_options());
  OK(et_cuda_get_option_bool("use_shared_cuda_stream", &b));
  CHECK(!b);
  OK(et_cuda_get_option_int("device_index", &i));
  CHECK(i == 0);
}

/* Blobs that are not a program: an error, and never a handle. Without a device
 * the library may report either problem first. */
static void test_bad_blobs(bool have_device, const Blob* weights) {
  static const unsigned char garbage[64] = "this is not an ELF shared object";
  Blob g = {(unsigned char*)garbage, sizeof garbage};
  Blob empty = {(unsigned char*)garbage, 0};
  EtCudaInitArgs a = init_args(&g, weights);
  EtCudaHandle* h = NULL;
  EtCudaStatus s = et_cuda_init(&a, &h);
  CHECK(s == ET_CUDA_STATUS_INVALID_PROGRAM || (!have_device && s == ET_CUDA_STATUS_NO_DEVICE));
  CHECK(h == NULL);
  a = init_args(&empty, weights);
  s = et_cuda_init(&a, &h);
  CHECK(s != ET_CUDA_STATUS_OK);
  CHECK(strlen(et_cuda_last_error()) > 0);
  CHECK(h == NULL);
}

static int check_close(const float* got, const float* want, size_t n, const char* what) {
  double max_err = 0;
  int ok = 1;
  for (size_t k = 0; k < n; ++k) {
    const double d = fabs((double)got[k] - (double)want[k]);
    if (!(d <= 1e-4 + 1e-4 * fabs((double)want[k]))) ok = 0;
    if (d > max_err) max_err = d;
  }
  printf("mlp_f32 %s: max_abs_err=%.3g %s\n", what, max_err, ok ? "PASS" : "FAIL");
  return ok;
}

/* mlp_f32 on the device: float32 [4,64] -> float32 [4,10]. */
static void test_run_mlp(const char* dir, const Blob* so, const Blob* weights) {
  Blob in = read_blob(dir, "forward.case0.in0.bin");
  Blob want = read_blob(dir, "forward.case0.out0.bin");
  CHECK(in.len == 4 * 64 * sizeof(float));
  CHECK(want.len == 4 * 10 * sizeof(float));
  EtCudaInitArgs a = init_args(so, weights);
  EtCudaHandle* h = NULL;
  OK(et_cuda_init(&a, &h));
  if (h == NULL) return;
  size_t n_in = 0, n_out = 0;
  OK(et_cuda_num_inputs(h, &n_in));
  OK(et_cuda_num_outputs(h, &n_out));
  CHECK(n_in == 1 && n_out == 1);
  void* stream = NULL;
  OK(et_cuda_handle_stream(h, &stream));
  CHECK(stream != NULL);

  EtCudaTensor x;
  memset(&x, 0, sizeof x);
  x.data = in.data;
  x.nbytes = in.len;
  x.dtype = 6; /* float32 */
  x.ndim = 2;
  x.sizes[0] = 4;
  x.sizes[1] = 64;
  x.strides[0] = 64;
  x.strides[1] = 1;

  float out[40];
  EtCudaTensor y;
  memset(&y, 0, sizeof y);
  y.data = out;
  y.nbytes = sizeof out;
  y.dtype = 6;
  y.ndim = 2;
  y.sizes[0] = 4;
  y.sizes[1] = 10;
  y.strides[0] = 10;
  y.strides[1] = 1;

  /* Copied to host memory. */
  memset(out, 0, sizeof out);
  OK(et_cuda_execute(h, &x, 1, &y, 1, ET_CUDA_OUTPUT_PLACEMENT_COPY));
  CHECK(y.ndim == 2 && y.sizes[0] == 4 && y.sizes[1] == 10);
  CHECK(y.data == (void*)out);
  CHECK(check_close(out, (const float*)want.data, 40, "copy"));

  /* Left on the device, then copied back by the caller. */
  y.data = NULL;
  y.nbytes = 0;
  OK(et_cuda_execute(h, &x, 1, &y, 1, ET_CUDA_OUTPUT_PLACEMENT_DEVICE));
  bool on_device = false;
  OK(et_cuda_is_device_pointer(y.data, &on_device));
  CHECK(on_device);
  memset(out, 0, sizeof out);
  OK(et_cuda_memcpy(NULL, out, y.data, sizeof out));
  CHECK(check_close(out, (const float*)want.data, 40, "device"));
  OK(et_cuda_synchronize(h));

  EtCudaStats st;
  OK(et_cuda_stats(h, &st));
  CHECK(st.executes == 2);
  OK(et_cuda_destroy(h));
  free(in.data);
  free(want.data);
}

int main(int argc, char** argv) {
  const char* fixtures = getenv("ET_CUDA_FIXTURES");
  if (fixtures == NULL || *fixtures == '\0') fixtures = argc > 1 ? argv[1] : NULL;
  if (fixtures == NULL) {
    fprintf(stderr, "usage: c_api_test FIXTURES_DIR (or set ET_CUDA_FIXTURES)\n");
    return 2;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/mlp_f32", fixtures);

  const char* version = et_cuda_version();
  CHECK(version != NULL && strlen(version) > 0);
  printf("executorch_cuda %s\n", version);

  int32_t count = 0;
  const EtCudaStatus dc = et_cuda_device_count(&count);
  CHECK(dc == ET_CUDA_STATUS_OK || dc == ET_CUDA_STATUS_NO_DEVICE);
  const bool have_device = dc == ET_CUDA_STATUS_OK && count > 0;
  printf("CUDA devices: %d\n", have_device ? (int)count : 0);

  test_null_arguments(have_device);
  test_options();

  Blob so = read_blob(dir, "forward_so_blob.bin");
  Blob weights = read_blob(dir, "forward_weights_blob.bin");
  test_bad_blobs(have_device, &weights);
  if (have_device) {
    test_run_mlp(dir, &so, &weights);
  } else {
    EtCudaInitArgs a = init_args(&so, &weights);
    EtCudaHandle* h = (EtCudaHandle*)&failures;
    CHECK_FAILS(et_cuda_init(&a, &h), ET_CUDA_STATUS_NO_DEVICE, "no CUDA");
    CHECK(h == NULL);
    bool on_device = true;
    CHECK(et_cuda_is_device_pointer(&count, &on_device) == ET_CUDA_STATUS_NO_DEVICE);
  }
  free(so.data);
  free(weights.data);

  if (failures) {
    fprintf(stderr, "c_api_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
