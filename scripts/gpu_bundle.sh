#!/usr/bin/env bash
# Pack what the GPU checks need into .dev/gpu (git-ignored) for a GPU machine
# without the toolchain: the built binaries and libraries (all found through
# $ORIGIN), ExecuTorch's libraries, the fixtures and the example program.
# There: bash scripts/gpu.sh unit (the bundle's run.sh; bash scripts/gpu.sh --help: every GPU suite).
# Also the benchmark (bench/README.md): bench/ and the Python wheels it installs
# there (bash scripts/gpu.sh bench, or bash .dev/gpu/bench/run.sh).
#   ET_CUDA_FIXTURES=<dir>   fixture programs (default tests/fixtures)
#   ET_CUDA_BUNDLE_WHEELS=0  leave out bench/ and the wheels (when they travel separately)
#   ET_CUDA_BASELINE_LIB=<f> an older libexecutorch_cuda.so for the shim_alloc comparison
#   ET_CUDA_WHEELS=<dir>     the wheels for the benchmark (default /tmp/whl, else .whl/):
#                            executorch 1.2.0 cp312, flatbuffers, ruamel.yaml(.clib), expecttest,
#                            parameterized; tabulate is downloaded into .whl/ when missing
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
FIXTURES=${ET_CUDA_FIXTURES:-$ROOT/tests/fixtures}
cmake_build

out=$ROOT/.dev/gpu
step "bundle into $out"
rm -rf "$out"
mkdir -p "$out/fixtures"
cp "$BUILD"/{et_cuda_run,c_api_test,adapter_test,header_c11,header_cxx17,consumer_in_tree} "$out/"
cp "$BUILD/libexecutorch_cuda_backend.so" "$out/"
# The Python package's bridge (python/executorch_cuda/bridge.py), for python/tests/gpu_runtime.py.
cp "$BUILD/libexecutorch_cuda_pybridge.so" "$out/"
# The binaries record the SONAME libexecutorch_cuda.so.0; the runner opens
# libexecutorch_cuda_backend.so from its own folder.
strip --strip-debug -o "$out/libexecutorch_cuda.so.0" "$BUILD/libexecutorch_cuda.so.0"
cp "$EXECUTORCH_CMAKE_DIR"/../../lib/libexecutorch{,_threadpool,_kernels_optimized}.so "$out/"
for f in mlp_f32 conv_f32 attn_bf16; do
  cp -r "$FIXTURES/$f" "$out/fixtures/"
done
chmod -R u+w "$out/fixtures"
# The example program of the repository (scripts/run_example.sh), when committed.
if [ -f "$ROOT/examples/mlp/manifest.json" ]; then
  mkdir -p "$out/examples" && cp -r "$ROOT/examples/mlp" "$out/examples/" && chmod -R u+w "$out/examples"
fi
# The tokenizer test files, for et_cuda_run --tokenizer on the suite's decoders.
mkdir -p "$out/tokenizers"
cp "$ROOT"/tokenizer/testdata/{bpe,wordpiece,unigram}.json "$out/tokenizers/"
cp "$ROOT/scripts/gpu_run.sh" "$out/run.sh"
# The commit the bundle was built from (+ "-dirty" with uncommitted changes): results files are
# named after it (bench/results.py) where the GPU machine has no git history.
c=$(git -C "$ROOT" rev-parse --short=7 HEAD 2>/dev/null || echo nocommit)
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && c=$c-dirty
echo "$c" >"$out/COMMIT"

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
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("gpu", "gpu_features", "bad_input", "sort_rand_gpu", "decode_gpu", "sample_gpu"):
        shutil.copy(m["executable"], sys.argv[1] + "/" + m["target"]["name"])
    # The library unit tests (their GPU ones: src/kernels/gemm/gpu_tests.rs, bench.rs).
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "executorch_cuda":
        shutil.copy(m["executable"], sys.argv[1] + "/lib_unit")
' "$out/rs/deps"
strip --strip-debug -o "$out/rs/libexecutorch_cuda.so" "$ROOT/target/release/libexecutorch_cuda.so"
cc -shared -fPIC -O1 -o "$out/rs/fake_aoti.so" "$ROOT/c_tests/fake_aoti.c"
# The shim allocation micro-benchmark (bench/shim_alloc.c), with an older build of the library
# to compare against when ET_CUDA_BASELINE_LIB names one.
cc -O2 -o "$out/shim_alloc" "$ROOT/bench/shim_alloc.c" -ldl
if [ -n "${ET_CUDA_BASELINE_LIB:-}" ]; then
  strip --strip-debug -o "$out/rs/libexecutorch_cuda_baseline.so" "$ET_CUDA_BASELINE_LIB"
fi

# DWARF only (31 MB -> 3 MB), so that the bundle with the benchmark stays under 64 MiB.
for f in "$out"/rs/deps/*; do strip --strip-debug "$f"; done

if [ "${ET_CUDA_BUNDLE_WHEELS:-1}" = 0 ]; then
  du -sh "$out"
  exit 0
fi
step "the benchmark (bench/ and its wheels) into $out/bench, $out/whl"
mkdir -p "$out/bench" "$out/whl"
cp "$ROOT"/bench/{run.sh,run_gpu.sh,export.py,models.py,torch_bench.py,table.py,table_read.py,table_sections.py,pack.py,results.py,README.md} "$out/bench/"
cp "$ROOT"/tests/models/runner_json.py "$out/bench/" # et_cuda_run --json's reader, for run.sh and table.py
WHEELS=${ET_CUDA_WHEELS:-/tmp/whl}
[ -d "$WHEELS" ] || WHEELS=$ROOT/.whl
if compgen -G "$WHEELS/executorch-*.whl" >/dev/null; then
  cp "$WHEELS"/*.whl "$out/whl/"
else
  echo "warning: no executorch wheel in $WHEELS: bench/run.sh will not be able to export (set ET_CUDA_WHEELS)" >&2
fi
# ExecuTorch's exir imports tabulate, which is not among the wheels above.
if ! compgen -G "$out/whl/tabulate-*.whl" >/dev/null; then
  compgen -G "$ROOT/.whl/tabulate-*.whl" >/dev/null ||
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$ROOT/.whl" tabulate ||
    echo "warning: could not download the tabulate wheel (exports need tabulate on the GPU machine)" >&2
  cp "$ROOT"/.whl/tabulate-*.whl "$out/whl/" 2>/dev/null || true
fi
du -sh "$out"
size=$(du -sb "$out" | cut -f1)
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  echo "warning: the bundle is $((size / 1024 / 1024)) MiB, over the 64 MiB that can be carried" >&2
fi
