#!/usr/bin/env bash
# The Python package as a wheel carrying the native libraries (README.md,
# "Python"): builds the project (cargo + CMake, as scripts/run_example.sh does),
# then `pip wheel` with EXECUTORCH_CUDA_NATIVE_DIR=<build> into .whl/
# (executorch_cuda-<version>-py3-none-linux_x86_64.whl). Install it with
# `pip install .whl/executorch_cuda-*.whl` next to executorch==1.5.1.
#   WHEEL_DIR=<dir>   where the wheel goes (default .whl/)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
check_prereqs
cmake_build
out=${WHEEL_DIR:-$ROOT/.whl}
step "pip wheel (native libraries from $BUILD) into $out"
mkdir -p "$out"
EXECUTORCH_CUDA_NATIVE_DIR=$BUILD python3 -m pip wheel --quiet --no-deps -w "$out" "$ROOT"
ls -1 "$out"/executorch_cuda-*.whl
