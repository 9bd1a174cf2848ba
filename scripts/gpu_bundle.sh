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

# The Rust GPU tests: they dlopen the cdylib at rs/libexecutorch_cuda.so.
step "Rust test binaries into $out/rs"
mkdir -p "$out/rs/deps"
cargo test --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("gpu", "bad_input"):
        shutil.copy(m["executable"], sys.argv[1] + "/" + m["target"]["name"])
' "$out/rs/deps"
strip --strip-debug -o "$out/rs/libexecutorch_cuda.so" "$ROOT/target/release/libexecutorch_cuda.so"
cc -shared -fPIC -O1 -o "$out/rs/fake_aoti.so" "$ROOT/c_tests/fake_aoti.c"
du -sh "$out"
