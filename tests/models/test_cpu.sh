#!/usr/bin/env bash
# CPU test of the model suite's scripts (no GPU): runs gpu_suite.sh end to end with
# SUITE_TEST_CPU=1 (exports with a stub AOTInductor, sdpa_check --self-test, the runner
# replaced by fake_runner.py with planted crash/hang/unknown-flag behaviours), then checks
# the summary it wrote. Needs a Python with torch 2.11, transformers, torchvision
# (SUITE_PYTHON, default python3) and the pruned sites for that Python
# (PYVER=311 DEST=/tmp/whl311 bash tests/models/wheels.sh; SUITE_WHEELS=/tmp/whl311).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=${T:-/tmp/et_models_cputest}
rm -rf "$T"
mkdir -p "$T/bundle"
: >"$T/bundle/libexecutorch_cuda.so" # unreadable as ELF: the symbol report must say so and go on
export OUT=$T/out MODELS_DIR=$T/models SUITE_WORK=$T/work SUITE_SITE12=$T/site12 SUITE_SITE15=$T/site15
export SUITE_TEST_CPU=1 SUITE_EXPORT_JOBS=2 SUITE_EXPORT_JOBS15=1 SUITE_RUN_TIMEOUT=5
export SUITE_ONLY=${SUITE_ONLY:-mlp_dyn_f32,attn_blocks_triton,attn_blocks_notriton,qwen3_pd_bf16,linear_int4tp_bf16,et15_encdec,et15_mlp_devio_f32}
export SUITE_BACKENDS="ours old=/nonexistent/old_backend.so"
export SUITE_EXTRA_MODES="graphs:--option enable_cuda_graph_for_method={methods}"
export FAKE_CRASH=et15_encdec FAKE_SLEEP=mlp_dyn_f32
bash "$HERE/gpu_suite.sh" "$T/bundle" >"$T/suite.log" 2>&1
echo "gpu_suite.sh rc=$?"
S=$OUT/summary.md
fail=0
check() { if grep -qE "$2" "$S"; then echo "ok: $1"; else echo "MISSING: $1 ($2)"; fail=1; fi; }
check "PASS row" '\| attn_blocks_notriton \| ours \| 0.02 \+ 0.02 \| PASS 0.00195 \(8/8\) \|'
check "known failure" '\| attn_blocks_triton \| ours \| 0.02 \+ 0.02 \| FAIL\(known\) 0.5 \(0/8\) \|'
check "known failure reason" 'attn_blocks_triton / ours / host: FAIL\(known\): ExecuTorch 1.2.s Triton SDPA kernel'
check "n/a device_io for stateful" 'device_io on .*qwen3_pd_bf16.*: n/a: stateful'
check "generate mismatch" '\| qwen3_pd_bf16 \| ours \| generate \| MISMATCH \|'
check "generate needs shared state" '\| qwen3_pd_bf16 \| ours \|.*\| FAIL\(shared state\) \|'
check "generate metrics" '\| qwen3_pd_bf16 \| ours \| generate \| MISMATCH \| 1 \| 3.000 \| \? \| 500 \| 1.00 \|'
check "unsupported flag" '\| attn_blocks_triton \| old \| [^|]* \| UNSUPPORTED \|'
check "unsupported note" 'old / host: UNSUPPORTED: --backend-lib: unknown flag'
check "crash" '\| et15_encdec \| ours \| [^|]* \| CRASH\(SIGSEGV\) 0 \(1/1\) \|'
check "timeout" '\| mlp_dyn_f32 \| ours \| [^|]* \| TIMEOUT \|'
check "extra mode" '\| program \| backend \| tolerance \| host \| shared_stream \| device_out \| device_io \| generate \| graphs \|'
check "extra mode ran" '\| attn_blocks_notriton \| ours \|.*\| n/a \| PASS 0.00195 \(8/8\) \|$'
check "device_io on unplanned inputs" '\| et15_mlp_devio_f32 \| ours \|([^|]*\|){4} PASS 0.00195 \(3/3\) \|'
check "device_io n/a on planned inputs" 'device_io on et15_encdec: n/a: inputs are memory-planned'
check "failed export reported" 'linear_int4tp_bf16 \| et12 \| FAILED'
check "symbol report" 'cannot read'
check "sdpa table" 'Part A: .* PASS, .* FAIL'
check "models packed" 'models.tar.xz: [0-9]+ program'
for f in summary.md results.json logs.tar.xz models.tar.xz; do
  [ -s "$OUT/$f" ] && echo "ok: $OUT/$f" || { echo "MISSING: $OUT/$f"; fail=1; }
done
mkdir -p "$T/unpack" && tar -xJif "$OUT/models.tar.xz" -C "$T/unpack" && ls "$T/unpack" | tr '\n' ' ' && echo
[ "$fail" = 0 ] && echo "test_cpu: OK" || { echo "test_cpu: FAILED (see $T/suite.log, $S)"; exit 1; }
