#!/usr/bin/env bash
# Every test: Rust format/lint/tests, the CMake build, ctest, the install and a
# separate consumer project built against the installed tree.
#   EXECUTORCH_DIR=<executorch package>  use this ExecuTorch instead of .deps/py
#   BUILD_DIR=<dir>                     build folder (default build/)
#   ET_CUDA_FIXTURES=<dir>              fixture programs (default ../shared/fixtures)
#   SKIP_CARGO_CHECKS=1                 skip cargo fmt/clippy/test (the crate is still built)
#   SKIP_VALGRIND=1                     skip the Valgrind run of the CPU-reachable tests
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

if [ "${SKIP_CARGO_CHECKS:-0}" != 1 ]; then
  step "cargo fmt --check"
  cargo fmt --check
  step "cargo clippy --all-targets -- -D warnings"
  cargo clippy --all-targets -- -D warnings
  step "cargo test"
  # --nocapture shows the GPU tests' "SKIPPED ...: no CUDA device" lines.
  cargo test -- --nocapture
fi

cmake_build

if [ "${SKIP_VALGRIND:-0}" != 1 ]; then
  scripts/valgrind.sh
fi

step "ctest"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS")

step "cmake --install $BUILD/install"
rm -rf "$BUILD/install"
cmake --install "$BUILD" --prefix "$BUILD/install"

# The consumer links with --as-needed on purpose: its main uses no adapter
# symbol, so this proves the package keeps the adapter (and its registration).
step "consumer project against the installed tree"
rm -rf "$BUILD/consumer"
cmake -S c_tests/consumer -B "$BUILD/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$BUILD/install" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed
cmake --build "$BUILD/consumer" -j "$JOBS"
readelf -d "$BUILD/consumer/app" | grep -q 'NEEDED.*\[libexecutorch_cuda_backend\.so\]' ||
  die "the consumer lost its DT_NEEDED on libexecutorch_cuda_backend.so"
"$BUILD/consumer/app"

step "all tests passed"
