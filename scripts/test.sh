#!/usr/bin/env bash
# Every test CI runs: Rust format/lint/tests, the README check, the CMake build,
# the Valgrind pass, ctest, the benchmark's plumbing, the GPU suites' dispatcher (scripts/gpu.sh,
# without a GPU), the install test
# (scripts/install_test.sh: a relocated install used by the installed runner and
# by a separate consumer project), and the Python package's tests with the
# export companion's (scripts/python_test.sh; those needing torch skip without
# it). One "==>" line per step; a step's own output goes to build/logs/ and is
# shown when it fails.
#   EXECUTORCH_DIR=<executorch package>  use this ExecuTorch instead of .deps/py
#   BUILD_DIR=<dir>                     build folder (default build/)
#   ET_CUDA_FIXTURES=<dir>              fixture programs (default tests/fixtures)
#   SKIP_CARGO_CHECKS=1                 skip cargo fmt/clippy/test (the crate is still built)
#   SKIP_VALGRIND=1                     skip the Valgrind run of the CPU-reachable tests
#   SKIP_INSTALL_TEST=1                 skip the install test
#   SKIP_PYTHON_TEST=1                  skip the Python package's tests (scripts/python_test.sh)
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
[ -z "$valgrind_note" ] || printf '==> NOTE: %s\n' "$valgrind_note"

# cargo_test NAME ARGS...: cargo test ARGS, logged; prints the sums of its
# "test result:" lines and how many tests are ignored for want of a GPU.
cargo_test() {
  local name=$1
  shift
  logged "$name" cargo test "$@"
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { v = $(i - 1) + 0
         if ($i ~ /^passed/) p += v; if ($i ~ /^failed/) f += v; if ($i ~ /^ignored/) g += v }; n++ }
       /ignored, needs a CUDA device/ { gpu++ }
       END { printf "    %d passed, %d failed, %d ignored (%d need a CUDA device); %d test targets\n", p, f, g, gpu, n }' \
    "$LOGS/$name.log"
}

if [ "${SKIP_CARGO_CHECKS:-0}" != 1 ]; then
  step "cargo fmt --check (and rustfmt --check on the tests' include!d pieces, which cargo fmt does not reach)"
  logged cargo_fmt cargo fmt --check
  logged rustfmt_pieces rustfmt --edition 2021 --check tests/*/*.rs
  step "cargo clippy --all-targets -- -D warnings -D clippy::undocumented_unsafe_blocks (log ${LOGS#"$ROOT/"}/clippy.log)"
  logged clippy cargo clippy --all-targets -- -D warnings -D clippy::undocumented_unsafe_blocks
  # --nocapture keeps what the GPU tests print where there is no GPU (in the log); the
  # doctests run without it, so the compile_fail examples' expected errors are not printed.
  step "cargo test --all-targets -- --nocapture (log ${LOGS#"$ROOT/"}/cargo_test.log)"
  cargo_test cargo_test --all-targets -- --nocapture
  step "cargo test --doc (log ${LOGS#"$ROOT/"}/cargo_doctest.log)"
  cargo_test cargo_doctest --doc
  step "size limits (scripts/size_check.py; its self-test scripts/size_check_test.py)"
  python3 scripts/size_check.py | sed 's/^/    /'
  python3 scripts/size_check_test.py | sed 's/^/    /'
  step "import rules (scripts/layers_check.py)"; python3 scripts/layers_check.py
  step "the int4 kernels' index math, emulated on the CPU (kernels/emulate_int4.py)"
  python3 kernels/emulate_int4.py | tail -1
  step "the GEMV kernel's lanes and mma fragments, emulated on the CPU (kernels/emulate_gemv.py)"
  python3 kernels/emulate_gemv.py | tail -1
fi

step "README.md against the tree: the layout lists every file of src/, the sizes it states (scripts/readme_check.py)"
python3 scripts/readme_check.py | sed 's/^/    /'
python3 scripts/readme_check_test.py | sed 's/^/    /'


cmake_build

if [ "${SKIP_CARGO_CHECKS:-0}" != 1 ]; then
  # Issue 31's target is for an optimised build on this machine: the release profile reuses
  # the crate cmake_build just built, so only the test is compiled. One test at a time: the two
  # 2^20-entry payloads side by side contend for memory (2.08 s of CPU instead of 1.23 s here).
  step "a 2^20-entry per-FQN payload refused in under 2 s, optimised build (tests/linear_load.rs; log ${LOGS#"$ROOT/"}/linear_load.log)"
  cargo_test linear_load --release --test linear_load -- --nocapture --test-threads=1
  { grep -oE "[0-9]+ entries, [0-9]+ per storage: [^ ]+ of CPU" "$LOGS/linear_load.log" || true; } | sed 's/^/    /'
fi

if [ -z "$valgrind_note" ]; then
  scripts/valgrind.sh
fi

step "ctest (tests that need a GPU are reported as skipped without one; log ${LOGS#"$ROOT/"}/ctest.log)"
logged ctest ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
echo "    $(grep -E "tests passed|tests failed" "$LOGS/ctest.log"); $(grep -c "(Skipped)$" "$LOGS/ctest.log" || true) skipped (they need a GPU)"

step "the benchmark's plumbing without a GPU (bench/test_table.sh; log ${LOGS#"$ROOT/"}/bench_test.log)"
ET_CUDA_RUN=$BUILD/et_cuda_run logged bench_test bash bench/test_table.sh
tail -1 "$LOGS/bench_test.log" | sed 's/^/    /'
step "the GPU suites' dispatcher without a GPU (scripts/gpu_sh_test.sh; log ${LOGS#"$ROOT/"}/gpu_sh_test.log)"
logged gpu_sh_test bash scripts/gpu_sh_test.sh
tail -1 "$LOGS/gpu_sh_test.log" | sed 's/^/    /'

if [ "${SKIP_INSTALL_TEST:-0}" != 1 ]; then
  scripts/install_test.sh
fi

if [ "${SKIP_PYTHON_TEST:-0}" != 1 ]; then
  scripts/python_test.sh
fi

step "all tests passed in $(elapsed)"
[ -z "$valgrind_note" ] || printf '==> NOTE: %s\n' "$valgrind_note"
