#!/usr/bin/env bash
# Every test: Rust format/lint/tests, the CMake build, the Valgrind pass, ctest,
# and the install test (scripts/install_test.sh: a relocated install used by
# the installed runner and by a separate consumer project).
#   EXECUTORCH_DIR=<executorch package>  use this ExecuTorch instead of .deps/py
#   BUILD_DIR=<dir>                     build folder (default build/)
#   ET_CUDA_FIXTURES=<dir>              fixture programs (default tests/fixtures)
#   SKIP_CARGO_CHECKS=1                 skip cargo fmt/clippy/test (the crate is still built)
#   SKIP_VALGRIND=1                     skip the Valgrind run of the CPU-reachable tests
#   SKIP_INSTALL_TEST=1                 skip the install test
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
check_prereqs --tests
# The tests read the fixture programs (tests/fixtures, README.md "Set-up").
FIXTURES=${ET_CUDA_FIXTURES:-$ROOT/tests/fixtures}
for f in mlp_f32 conv_f32 attn_bf16; do
  [ -f "$FIXTURES/$f/manifest.json" ] ||
    die "the tests need the fixture programs: no $FIXTURES/$f/manifest.json (ET_CUDA_FIXTURES=<dir>, default tests/fixtures)"
done

valgrind_note=""
if [ "${SKIP_VALGRIND:-0}" = 1 ]; then
  valgrind_note="the Valgrind pass was skipped (SKIP_VALGRIND=1)"
elif ! command -v valgrind >/dev/null 2>&1; then
  valgrind_note="the Valgrind pass was skipped: valgrind is not installed (apt-get install valgrind)"
fi
[ -z "$valgrind_note" ] || printf '\n==> NOTE: %s\n' "$valgrind_note"

if [ "${SKIP_CARGO_CHECKS:-0}" != 1 ]; then
  step "cargo fmt --check"
  cargo fmt --check
  step "cargo clippy --all-targets -- -D warnings -D clippy::undocumented_unsafe_blocks"
  cargo clippy --all-targets -- -D warnings -D clippy::undocumented_unsafe_blocks
  step "cargo test"
  # --nocapture shows what the GPU tests print where there is no GPU.
  cargo test -- --nocapture
  step "size limits (scripts/size_check.py)"; python3 scripts/size_check.py
  step "import rules (scripts/layers_check.py)"; python3 scripts/layers_check.py
  step "the int4 kernels' index math, emulated on the CPU (kernels/emulate_int4.py)"
  python3 kernels/emulate_int4.py | tail -1
  step "the GEMV kernel's lanes and mma fragments, emulated on the CPU (kernels/emulate_gemv.py)"
  python3 kernels/emulate_gemv.py | tail -1
fi

cmake_build

if [ -z "$valgrind_note" ]; then
  scripts/valgrind.sh
fi

step "ctest (tests that need a GPU are reported as skipped without one)"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS")

step "the benchmark's plumbing without a GPU (bench/test_table.sh)"
ET_CUDA_RUN=$BUILD/et_cuda_run bash bench/test_table.sh >"$BUILD/bench_test.log" 2>&1 ||
  { cat "$BUILD/bench_test.log"; die "bench/test_table.sh failed"; }
tail -1 "$BUILD/bench_test.log"

if [ "${SKIP_INSTALL_TEST:-0}" != 1 ]; then
  scripts/install_test.sh
fi

step "all tests passed"
[ -z "$valgrind_note" ] || printf '==> NOTE: %s\n' "$valgrind_note"
