#!/usr/bin/env bash
# The GPU checks, run from a bundle made by scripts/gpu_bundle.sh (copied there
# as run.sh; bash scripts/gpu.sh unit runs it). Every check runs; the exit status says whether any failed.
set -uo pipefail
cd "$(dirname "$0")"
export ET_CUDA_FIXTURES=$PWD/fixtures
failed=()
check() {
  printf '\n==> %s\n' "$*"
  "$@" || failed+=("$*")
}

check ./header_c11
check ./header_cxx17
check ./consumer_in_tree
check ./c_api_test
check ./adapter_test
for f in mlp_f32 conv_f32 attn_bf16; do
  m=fixtures/$f/manifest.json
  check ./et_cuda_run --manifest "$m"
  check ./et_cuda_run --manifest "$m" --option use_shared_cuda_stream=true
  check ./et_cuda_run --manifest "$m" --option skip_copy_output_to_cpu_for_method=forward --stats
  check ./et_cuda_run "fixtures/$f/model.pte" --data "fixtures/$f/aoti_cuda_blob.ptd"
done
# The example program of the repository (scripts/run_example.sh), when the bundle has it.
[ -f examples/mlp/manifest.json ] && check ./et_cuda_run --manifest examples/mlp/manifest.json
# The Rust GPU tests (tests/gpu.rs, tests/gpu_features.rs, tests/bad_input.rs) through the
# cdylib; the GPU ones are #[ignore]d on plain runs, so include them here.
export ET_CUDA_LIB=$PWD/rs/libexecutorch_cuda.so ET_CUDA_FAKE_AOTI=$PWD/rs/fake_aoti.so
check ./rs/deps/gpu --include-ignored --test-threads=1 --nocapture
check ./rs/deps/gpu_features --include-ignored --test-threads=1 --nocapture
check ./rs/deps/bad_input --include-ignored --test-threads=1 --nocapture
check ./rs/deps/sort_rand_gpu --include-ignored --test-threads=1 --nocapture
check ./rs/deps/decode_gpu --include-ignored --test-threads=1 --nocapture
check ./rs/deps/sample_gpu --include-ignored --test-threads=1 --nocapture
# The GEMM's GPU tests (src/kernels/gemm/gpu_tests.rs) in the library's unit-test binary.
check ./rs/deps/lib_unit kernels::gemm::gpu_tests --include-ignored --test-threads=1 --nocapture
# The hottest shim pair, this build against the baseline build when it came along.
for lib in rs/libexecutorch_cuda.so rs/libexecutorch_cuda_baseline.so; do
  [ -f "$lib" ] && check ./shim_alloc "$lib" 1000000
done

check ./et_cuda_run --manifest fixtures/mlp_f32/manifest.json --bench 200 --warmup 20 --stats
check ./et_cuda_run --manifest fixtures/mlp_f32/manifest.json --option enable_cuda_graph_for_method=forward \
  --bench 200 --warmup 20 --stats

printf '\n%d check(s) failed\n' "${#failed[@]}"
for f in "${failed[@]}"; do echo "FAILED: $f"; done
[ "${#failed[@]}" -eq 0 ]
