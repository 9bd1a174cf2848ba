#!/usr/bin/env bash
# Issue 21 on the GPU machine (PyTorch 2.11, nvcc 13, no Rust, no network), from the
# repository root of the copy:
#   bash tests/models/decode_gpu.sh BUNDLE_DIR [OUT]      (bash scripts/gpu.sh unit --decode [OUT])
# BUNDLE_DIR: made by scripts/gpu_bundle.sh (et_cuda_run, libexecutorch_cuda.so.0, and
# rs/deps/decode_gpu: add "decode_gpu" to the test binaries it packs, or copy
# target/release/deps/decode_gpu-* there). Steps, each with a timeout, each reported:
#   1. the Rust GPU tests of the decode kernels (correctness, CUDA graph) and the bench
#      (GEMV GB/s per shape, attention time);
#   2. the companion's Python tests (python/tests, need torch);
#   3. the Llama-3.2-1B-shaped decoder exported without and with the companion
#      (tests/models/decode_llama.py; needs the ExecuTorch 1.2 site of tests/models/wheels.sh
#      in $SUITE_WHEELS/sites/et12.tar.xz, default .whl/models), cached in OUT/export;
#   4. et_cuda_run --generate for both: greedy tokens against eager (MATCH/MISMATCH) and
#      decode tok/s.
set -uo pipefail
BUNDLE=$(cd "${1:?usage: decode_gpu.sh BUNDLE_DIR [OUT]}" && pwd)
OUT=${2:-${OUT:-/tmp/decode_gpu}}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PY:-python3}
STEPS=${STEPS:-32}
mkdir -p "$OUT/logs"
note() { echo "[decode_gpu] $*"; }

LIB=$BUNDLE/rs/libexecutorch_cuda.so
[ -f "$LIB" ] || LIB=$BUNDLE/libexecutorch_cuda.so.0
TESTBIN=$(ls "$BUNDLE"/rs/deps/decode_gpu* 2>/dev/null | head -1)
if [ -n "$TESTBIN" ]; then
  note "1. Rust GPU tests and bench ($TESTBIN, ET_CUDA_LIB=$LIB)"
  ET_CUDA_LIB=$LIB timeout 600 "$TESTBIN" --include-ignored --test-threads=1 --nocapture 2>&1 | tee "$OUT/logs/rust.log" |
    grep -E "^test |cases|graph replay|^ +[0-9]|GEMV|decode attention|panicked|result"
else
  note "1. SKIPPED: no decode_gpu test binary in $BUNDLE/rs/deps"
fi

note "2. companion tests (python/tests)"
timeout 600 $PY -m unittest discover -s "$ROOT/python/tests" -v 2>&1 | tee "$OUT/logs/python.log" | tail -12

WHEELS=${SUITE_WHEELS:-$ROOT/.whl/models}
SITE=$OUT/site12
if [ ! -d "$SITE/executorch" ] && [ -f "$WHEELS/sites/et12.tar.xz" ]; then
  mkdir -p "$SITE" && tar -xJf "$WHEELS/sites/et12.tar.xz" -C "$SITE"
fi
if [ ! -d "$SITE/executorch" ]; then
  note "3./4. SKIPPED: no ExecuTorch 1.2 site ($WHEELS/sites/et12.tar.xz from tests/models/wheels.sh)"
  exit 0
fi
note "3. export (cached in $OUT/export)"
PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} timeout 3000 $PY "$HERE/decode_llama.py" "$OUT/export" --steps "$STEPS" \
  2>&1 | tee "$OUT/logs/export.log" | grep -vE "^\s*$" | tail -20
RUNNER=${SUITE_RUNNER:-$BUNDLE/et_cuda_run}
note "4. et_cuda_run --generate $STEPS"
for v in base companion; do
  m=$OUT/export/$v/manifest.json
  if [ ! -f "$m" ]; then note "$v: no export (see $OUT/logs/export.log)"; continue; fi
  timeout 600 "$RUNNER" --manifest "$m" --generate "$STEPS" 2>&1 | tee "$OUT/logs/run_$v.log" |
    grep -E "^generate|error|Error" | sed "s/^/$v: /"
done
