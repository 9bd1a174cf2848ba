#!/usr/bin/env bash
# The runner's checks that need a GPU, on the GPU machine, from the repository
# copy (after scripts/gpu_bundle.sh made .dev/gpu here and it was carried):
#
#   bash runner/gpu/check.sh [BUNDLE]        # BUNDLE: default .dev/gpu
#
# 1. installs the bundle's wheels (executorch 1.2 & co., as bench/run.sh does)
#    into $SITE and exports runner/gpu/export_checks.py's programs (a dynamic-batch
#    MLP and a tiny stateful decoder) into $MODELS, unless they are there;
# 2. runs et_cuda_run on the fixtures, those programs and any EXTRA_MANIFESTS:
#    exit statuses, dynamic shapes, cases in file order with state, the token
#    loop (MATCH, one host wait per token, PyTorchObserver), the error paths;
# 3. with UPSTREAM_BACKEND_LIB=<upstream's CudaBackend .so>, the same programs
#    through that library (--backend-lib), with and without its CUDA graphs.
# Every check runs; the table at the end says which passed. Logs and the table:
# $OUT/runner_check.log, $OUT/runner_check.txt.
#   OUT=<dir>                  results (the device tool sets it; default /tmp/et_cuda_runner_check)
#   MODELS=<dir>               exported programs, reused when present (default /tmp/et_cuda_runner_check/models)
#   SITE=<dir>                 where the wheels go (default /tmp/site, shared with bench/run.sh)
#   UPSTREAM_BACKEND_LIB=<so>  upstream ExecuTorch's C++ CUDA backend as a shared library
#   EXTRA_MANIFESTS="a b"      more manifests (e.g. the model suite's); "generate" ones also get --generate
#   SITE15=<dir>               an ExecuTorch >= 1.4 site (default: .whl/models/sites/et15.tar.xz unpacked, when
#                              carried): exports tiny_decoder_dev, the decoder with its IO planned in device memory,
#                              for the overlapped token loop's checks (SKIPPED in the table without one)
set -uo pipefail
BUNDLE=$(cd "${1:-.dev/gpu}" && pwd) || { echo "no bundle at ${1:-.dev/gpu}" >&2; exit 1; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/et_cuda_runner_check}
MODELS=${MODELS:-/tmp/et_cuda_runner_check/models}
SITE=${SITE:-/tmp/site}
RUN=$BUNDLE/et_cuda_run
FX=$BUNDLE/fixtures
[ -d "$FX" ] || FX=$(cd "$HERE/../../tests/fixtures" && pwd) # the repository's own, where the bundle has none
LOG=$OUT/runner_check.log
TABLE=$OUT/runner_check.txt
mkdir -p "$OUT" "$MODELS"
: >"$LOG"
rows=()
failed=0

# check NAME RC REGEX -- CMD...: CMD must exit with RC and its output (stdout +
# stderr) match the extended regex REGEX ("" for none).
check() {
  local name=$1 want_rc=$2 regex=$3
  shift 4
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  {
    printf '\n==> %s\n$ %s\n' "$name" "$*"
    printf '%s\n' "$out"
    printf '(exit status %s)\n' "$rc"
  } >>"$LOG"
  local verdict=PASS why=""
  if [ "$rc" != "$want_rc" ]; then
    verdict=FAIL why="exit status $rc, expected $want_rc"
  elif [ -n "$regex" ] && ! grep -Eq -- "$regex" <<<"$out"; then
    verdict=FAIL why="output does not match /$regex/"
  fi
  [ "$verdict" = PASS ] || failed=$((failed + 1))
  local detail
  detail=$(grep -E '^(generate:|et_cuda_run:)|max_abs_err=.*FAIL' <<<"$out" | head -n1 | cut -c1-150)
  rows+=("$(printf '%-44s %-4s %s' "$name" "$verdict" "${why:-$detail}")")
  printf '%-44s %s %s\n' "$name" "$verdict" "$why"
}

echo "bundle $BUNDLE, models $MODELS, out $OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1

# ------------------------------------------------------------------ 1. programs
ET15_TAR=$HERE/../../.whl/models/sites/et15.tar.xz
if [ -z "${SITE15:-}" ] && [ -f "$ET15_TAR" ]; then
  SITE15=/tmp/et_cuda_runner_check_et15
  [ -d "$SITE15/executorch" ] || { mkdir -p "$SITE15" && tar -xJf "$ET15_TAR" -C "$SITE15"; } >>"$LOG" 2>&1
fi
# export_with SITE [NAME...]: export_checks.py's programs with the ExecuTorch installed in SITE
export_with() {
  local site=$1 flatc=$1/executorch/data/bin/flatc
  shift
  echo "exporting ${*:-the check programs} into $MODELS with the ExecuTorch of $site"
  chmod +x "$flatc" 2>/dev/null
  [ -x "$flatc" ] || flatc=''
  env ${flatc:+FLATC_EXECUTABLE=$flatc} PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" \
    timeout -k 5 300 python3 "$HERE/export_checks.py" "$MODELS" "$@" >>"$LOG" 2>&1 ||
    echo "export_checks.py failed for ${*:-some program} (see $LOG)"
}
if [ ! -f "$MODELS/dyn_mlp/manifest.json" ] || [ ! -f "$MODELS/tiny_decoder/manifest.json" ]; then
  if [ ! -f "$SITE/executorch/exir/__init__.py" ] && compgen -G "$BUNDLE/whl/*.whl" >/dev/null; then
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$BUNDLE"/whl/*.whl \
      >>"$LOG" 2>&1 || echo "pip install of the bundle's wheels failed (see $LOG)"
  fi
  # Without the bundle's ExecuTorch 1.2, the >= 1.4 site exports them (host IO, as 1.2 plans it).
  if [ -f "$SITE/executorch/exir/__init__.py" ] || [ -z "${SITE15:-}" ]; then
    export_with "$SITE" dyn_mlp tiny_decoder
  else
    export_with "$SITE15" dyn_mlp tiny_decoder
  fi
fi
DYN=$MODELS/dyn_mlp/manifest.json
DEC=$MODELS/tiny_decoder/manifest.json
DEV=$MODELS/tiny_decoder_dev/manifest.json
[ -n "${SITE15:-}" ] && [ ! -f "$DEV" ] && export_with "$SITE15" tiny_decoder_dev

# ------------------------------------------------------------------ 2. our backend
check "version (driver and devices)" 0 'CUDA driver: [0-9]+\.[0-9]+ \(libcuda\.so\.1\), [1-9][0-9]* device' -- "$RUN" --version
for f in mlp_f32 conv_f32 attn_bf16; do
  check "fixture $f" 0 'case0: max_abs_err=.* PASS' -- "$RUN" --manifest "$FX/$f/manifest.json"
done
check "fixture mlp_f32, --backend-lib ours" 0 'PASS' -- \
  "$RUN" --manifest "$FX/mlp_f32/manifest.json" --backend-lib "$BUNDLE/libexecutorch_cuda_backend.so"
check "fixture mlp_f32 --generate (not a decoder)" 1 "input 0 is float32 \[4, 64\], not int64 token ids" -- \
  "$RUN" --manifest "$FX/mlp_f32/manifest.json" --generate 4 --prompt-ids 1,2

# A static method given a smaller input: the runner's checks pass, ExecuTorch refuses it.
tmp=$OUT/tmp
mkdir -p "$tmp"
head -c 768 "$FX/mlp_f32/forward.case0.in0.bin" >"$tmp/in_3x64.bin"
head -c 120 "$FX/mlp_f32/forward.case0.out0.bin" >"$tmp/out_3x10.bin"
cat >"$tmp/static_smaller.json" <<EOF
{"model": "$FX/mlp_f32/model.pte", "data": ["$FX/mlp_f32/aoti_cuda_blob.ptd"], "methods": {"forward": [
 {"inputs": [{"dtype": "float32", "sizes": [3, 64], "file": "$tmp/in_3x64.bin"}],
  "outputs": [{"dtype": "float32", "sizes": [3, 10], "file": "$tmp/out_3x10.bin"}]}]}}
EOF
check "static mlp_f32, batch 3 < 4 (refused)" 1 "executing 'forward' failed" -- "$RUN" --manifest "$tmp/static_smaller.json"

if [ -f "$DYN" ]; then
  check "dyn_mlp: batch 4, 7, 33, 1" 0 'case3: max_abs_err=.* PASS' -- "$RUN" --manifest "$DYN"
  check "dyn_mlp: shared stream" 0 'case3: max_abs_err=.* PASS' -- "$RUN" --manifest "$DYN" --option use_shared_cuda_stream=true
  check "dyn_mlp: outputs left on the device" 0 'case3: max_abs_err=.* PASS' -- \
    "$RUN" --manifest "$DYN" --option skip_copy_output_to_cpu_for_method=forward
  python3 - "$DYN" "$tmp/dyn_over.json" <<'EOF'
import json, os, sys
m = json.load(open(sys.argv[1])); d = os.path.dirname(os.path.abspath(sys.argv[1]))
m["model"] = os.path.join(d, m["model"]); m["data"] = [os.path.join(d, x) for x in m["data"]]
case = m["methods"]["forward"][0]
for t in case["inputs"] + case["outputs"]:
    t["file"] = os.path.join(d, t["file"])
case["inputs"][0]["sizes"][0] = 65
json.dump(m, open(sys.argv[2], "w"))
EOF
  check "dyn_mlp: batch 65 > bound 64" 1 "exceed the method's upper bound \[64, 64\]" -- "$RUN" --manifest "$tmp/dyn_over.json"
else
  rows+=("dyn_mlp                                      MISSING (export failed, see the log)")
  failed=$((failed + 1))
fi

if [ -f "$DEC" ]; then
  check "tiny_decoder: prefill + 2 steps (state)" 0 'case2: max_abs_err=.* PASS' -- "$RUN" --manifest "$DEC"
  check "tiny_decoder: state, shared stream" 0 'case2: max_abs_err=.* PASS' -- \
    "$RUN" --manifest "$DEC" --option use_shared_cuda_stream=true
  check "tiny_decoder: state, outputs on the device" 0 'case2: max_abs_err=.* PASS' -- \
    "$RUN" --manifest "$DEC" --option skip_copy_output_to_cpu_for_method=forward
  python3 - "$DEC" "$tmp/dec_reversed.json" <<'EOF'
import json, os, sys
m = json.load(open(sys.argv[1])); d = os.path.dirname(os.path.abspath(sys.argv[1]))
m["model"] = os.path.join(d, m["model"]); m["data"] = [os.path.join(d, x) for x in m["data"]]
for c in m["methods"]["forward"]:
    for t in c["inputs"] + c["outputs"]:
        t["file"] = os.path.join(d, t["file"])
m["methods"]["forward"] = [m["methods"]["forward"][i] for i in (1, 2, 0)]
json.dump(m, open(sys.argv[2], "w"))
EOF
  check "tiny_decoder: cases out of order (FAIL, no crash)" 1 'case0: max_abs_err=.* FAIL' -- \
    "$RUN" --manifest "$tmp/dec_reversed.json"
  check "tiny_decoder: --generate 8" 0 'generate: .*host_waits_per_token=1\.00 .*MATCH$' -- "$RUN" --manifest "$DEC" --generate 8
  # The overlapped loop (the default, et_cuda_sample_async) runs exactly where the token is chosen on the device.
  check "tiny_decoder: overlap iff on the device" 0 '(sampler=device overlap=yes|sampler=host overlap=no) .*MATCH$' -- \
    "$RUN" --manifest "$DEC" --generate 8
  check "tiny_decoder: --generate 8 --no-overlap" 0 'overlap=no .*MATCH$' -- "$RUN" --manifest "$DEC" --generate 8 --no-overlap
  sampled() { "$RUN" --manifest "$DEC" --generate 8 --temperature 0.8 --seed 3 "$@" 2>&1 | grep -oE ' tokens=[0-9,]+'; }
  s_on=$(sampled) s_off=$(sampled --no-overlap)
  echo "sampled tokens: overlapped '$s_on', --no-overlap '$s_off'" >>"$LOG"
  check "tiny_decoder: sampled, overlap or not alike" 0 '' -- test -n "$s_on" -a "$s_on" = "$s_off"
  check "tiny_decoder: --generate 8, PyTorchObserver" 0 '^PyTorchObserver \{"prompt_tokens":5,"generated_tokens":8,' -- \
    "$RUN" --manifest "$DEC" --generate 8
  check "tiny_decoder: --generate 8, shared stream" 0 'MATCH$' -- \
    "$RUN" --manifest "$DEC" --generate 8 --option use_shared_cuda_stream=true
  check "tiny_decoder: --generate 8, logits on the device" 0 'MATCH$' -- \
    "$RUN" --manifest "$DEC" --generate 8 --option skip_copy_output_to_cpu_for_method=forward
  check "tiny_decoder: --generate, wrong expectation" 1 'MISMATCH$' -- \
    "$RUN" --manifest "$DEC" --generate 3 --expect-tokens 0,0,0
  check "tiny_decoder: --generate 40 > max_seq_len" 1 'need 44 cache positions, max_seq_len is 32' -- \
    "$RUN" --manifest "$DEC" --generate 40
  check "tiny_decoder: prompt of 17 > T bound 16" 1 'takes at most 16 tokens per call' -- \
    "$RUN" --manifest "$DEC" --generate 2 --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
else
  rows+=("tiny_decoder                                 MISSING (export failed, see the log)")
  failed=$((failed + 1))
fi

# The decoder planned in device memory (ExecuTorch >= 1.4): token ids through _h2d_copy, logits on the
# device, so the overlapped loop (the default) queues step n+1 (its input the fed token) before it waits for token n.
if [ -f "$DEV" ]; then
  G=(--option enable_cuda_graph_for_method=forward)
  check "tiny_decoder_dev: --generate 8 --no-overlap" 0 'sampler=device overlap=no .*MATCH$' -- \
    "$RUN" --manifest "$DEV" --generate 8 --no-overlap
  check "tiny_decoder_dev: overlap (default)" 0 'sampler=device overlap=yes .*MATCH$' -- "$RUN" --manifest "$DEV" --generate 8
  check "tiny_decoder_dev: overlap, graphs" 0 'overlap=yes .*MATCH$' -- \
    "$RUN" --manifest "$DEV" --generate 8 "${G[@]}"
  check "tiny_decoder_dev: overlap, graphs, shared" 0 'overlap=yes .*MATCH$' -- \
    "$RUN" --manifest "$DEV" --generate 8 "${G[@]}" --option use_shared_cuda_stream=true
  sampled_dev() { "$RUN" --manifest "$DEV" --generate 8 --temperature 0.8 --seed 3 "${G[@]}" "$@" 2>&1 | grep -oE ' tokens=[0-9,]+'; }
  d_on=$(sampled_dev) d_off=$(sampled_dev --no-overlap)
  echo "tiny_decoder_dev sampled tokens: overlapped '$d_on', --no-overlap '$d_off'" >>"$LOG"
  check "tiny_decoder_dev: sampled, overlap or not" 0 '' -- test -n "$d_on" -a "$d_on" = "$d_off"
elif [ -n "${SITE15:-}" ]; then
  rows+=("tiny_decoder_dev                             MISSING (export failed, see the log)")
  failed=$((failed + 1))
else
  rows+=("tiny_decoder_dev                             SKIPPED (no SITE15: no ExecuTorch >= 1.4 site)")
  echo "tiny_decoder_dev: SKIPPED (no SITE15, no $ET15_TAR)"
fi

for m in ${EXTRA_MANIFESTS:-}; do
  check "extra $(basename "$(dirname "$m")")" 0 'PASS' -- "$RUN" --manifest "$m"
  n=$(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("generate") or {}; print(len(g.get("tokens", [])))' "$m" 2>/dev/null)
  if [ -n "$n" ] && [ "$n" -gt 0 ]; then
    check "extra $(basename "$(dirname "$m")") --generate $n" 0 'MATCH$' -- "$RUN" --manifest "$m" --generate "$n"
  fi
done

# ------------------------------------------------------------------ 3. upstream's backend
if [ -n "${UPSTREAM_BACKEND_LIB:-}" ]; then
  U=(--backend-lib "$UPSTREAM_BACKEND_LIB")
  check "upstream: --version" 0 'no et_cuda_version' -- "$RUN" --version "${U[@]}"
  for f in mlp_f32 conv_f32 attn_bf16; do
    check "upstream: fixture $f" 0 'case0: max_abs_err=.* PASS' -- "$RUN" --manifest "$FX/$f/manifest.json" "${U[@]}"
  done
  check "upstream: mlp_f32 --stats (n/a)" 0 'stats: n/a' -- "$RUN" --manifest "$FX/mlp_f32/manifest.json" --stats "${U[@]}"
  check "upstream: mlp_f32, CUDA graph" 0 'PASS' -- \
    "$RUN" --manifest "$FX/mlp_f32/manifest.json" --option enable_cuda_graph_for_method=forward --bench 20 "${U[@]}"
  check "upstream: mlp_f32, outputs on the device" 0 'PASS' -- \
    "$RUN" --manifest "$FX/mlp_f32/manifest.json" --option skip_copy_output_to_cpu_for_method=forward "${U[@]}"
  [ -f "$DYN" ] && check "upstream: dyn_mlp" 0 'case3: max_abs_err=.* PASS' -- "$RUN" --manifest "$DYN" "${U[@]}"
  if [ -f "$DEC" ]; then
    check "upstream: tiny_decoder cases" 0 'case2: max_abs_err=.* PASS' -- "$RUN" --manifest "$DEC" "${U[@]}"
    check "upstream: tiny_decoder --generate 8" 0 'host_waits_per_token=n/a .*MATCH$' -- \
      "$RUN" --manifest "$DEC" --generate 8 "${U[@]}"
  fi
fi

{
  echo "et_cuda_run GPU checks ($(date -u +%Y-%m-%dT%H:%MZ)), bundle $BUNDLE"
  printf '%s\n' "${rows[@]}"
  echo "$failed check(s) failed"
} >"$TABLE"
echo
cat "$TABLE"
[ "$failed" -eq 0 ]
