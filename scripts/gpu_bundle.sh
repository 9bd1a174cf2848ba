#!/usr/bin/env bash
# Pack what the GPU checks need into .dev/gpu (git-ignored) for a GPU machine
# without the toolchain: the built binaries and libraries (all found through
# $ORIGIN), ExecuTorch's libraries and the fixtures. There: bash .dev/gpu/run.sh
#   ET_CUDA_FIXTURES=<dir>   fixture programs (default ../shared/fixtures)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
FIXTURES=${ET_CUDA_FIXTURES:-$ROOT/../shared/fixtures}
cmake_build

out=$ROOT/.dev/gpu
step "bundle into $out"
rm -rf "$out"
mkdir -p "$out/fixtures"
cp "$BUILD"/{et_cuda_run,c_api_test,adapter_test,header_c11,header_cxx17,consumer_in_tree} "$out/"
cp "$BUILD/libexecutorch_cuda_backend.so" "$out/"
strip --strip-debug -o "$out/libexecutorch_cuda.so" "$BUILD/libexecutorch_cuda.so" # DWARF only: 26 MB -> 1 MB
cp "$EXECUTORCH_CMAKE_DIR"/../../lib/libexecutorch{,_threadpool,_kernels_optimized}.so "$out/"
for f in "$FIXTURES"/*/; do
  cp -r "$f" "$out/fixtures/"
done
chmod -R u+w "$out/fixtures"
cp "$ROOT/scripts/gpu_run.sh" "$out/run.sh"
du -sh "$out"
