#!/usr/bin/env bash
# The benchmark, on the GPU machine, from the bundle made by scripts/gpu_bundle.sh:
#
#   bash .dev/gpu/bench/run.sh
#
# 1. installs the carried wheels (executorch 1.2 & co.) into $BENCH_SITE;
# 2. in parallel: exports the programs that $BENCH_MODELS lacks (bench/export.py,
#    $BENCH_EXPORT_JOBS lanes) and compiles PyTorch's AOTI packages (torch_bench.py);
# 3. one at a time on the GPU: et_cuda_run per model and variant, the encoder ->
#    decoder pipeline, --enqueue, PyTorch eager / CUDA graph / AOTI;
# 4. bench/table.py: $OUT/RESULTS.md, printed last.
# Every step runs even when an earlier one failed; steps that would pass the time
# budget are skipped and say so. Logs: $OUT/logs/.
#
#   OUT=<dir>             results (the device tool sets it; default /tmp/et_cuda_bench/out)
#   BENCH_MODELS=<dir>    exported programs, reused when present (default /tmp/et_cuda_bench/models)
#   BENCH_BUDGET=<s>      whole run (default 345); BENCH_PHASE1=<s> exports/compiles (default 200)
#   BENCH_EXPORT_JOBS=<n> parallel export processes (default 3; 1 = quieter GPU for autotuning)
#   BENCH_SITE=<dir>      where the wheels go (default /tmp/site)
#   BENCH_LIST=a,b        models to time (default deep_bf16,heavy_bf16,mlp_f32,conv_f32,attn_bf16)
#   BENCH_TEST_CPU=1      dry run of the script on a machine without a GPU (programs not delegated,
#                         PyTorch on the CPU); the numbers mean nothing
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUNDLE=$(cd "$BENCH/.." && pwd)
OUT=${OUT:-/tmp/et_cuda_bench/out}
MODELS=${BENCH_MODELS:-/tmp/et_cuda_bench/models}
AOTI=${BENCH_AOTI:-/tmp/et_cuda_bench/aoti}
SITE=${BENCH_SITE:-/tmp/site}
BUDGET=${BENCH_BUDGET:-345}
PHASE1=${BENCH_PHASE1:-200}
JOBS=${BENCH_EXPORT_JOBS:-3}
FIXTURES=$BUNDLE/fixtures
RUNNER=$BUNDLE/et_cuda_run
LOGS=$OUT/logs
INDEX=$OUT/runs.tsv        # model <TAB> variant <TAB> rc <TAB> log
TORCH_ROWS=$OUT/torch.jsonl
NOTES=$OUT/notes.txt
START=$(date +%s)
DEADLINE=$((START + BUDGET))

mkdir -p "$OUT" "$LOGS" "$MODELS" "$AOTI"
: >"$INDEX"
: >"$TORCH_ROWS"
: >"$NOTES"

say() { printf '[%3ds] %s\n' $(($(date +%s) - START)) "$*"; }
note() { printf '%s\n' "$*" >>"$NOTES"; say "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
# min of a cap and the time left (at least 1)
cap() {
  local l
  l=$(left)
  [ "$l" -lt "$1" ] && set -- "$l"
  [ "$1" -lt 1 ] && set -- 1
  echo "$1"
}

OUR_MODELS=(deep_bf16 heavy_bf16 encdec)
FIXTURE_MODELS=(mlp_f32 conv_f32 attn_bf16)
IFS=, read -r -a BENCH_MODELS_LIST <<<"${BENCH_LIST:-deep_bf16,heavy_bf16,mlp_f32,conv_f32,attn_bf16}"
EXPORT_FLAGS=()
TORCH_FLAGS=()
N=1000 W=50 N_HEAVY=100 W_HEAVY=10 N_PIPE=1000
if [ "${BENCH_TEST_CPU:-0}" = 1 ]; then
  EXPORT_FLAGS=(--no-delegate)
  TORCH_FLAGS=(--device cpu --n 20)
  N=20 W=2 N_HEAVY=5 W_HEAVY=1 N_PIPE=50
fi

say "bundle $BUNDLE, models $MODELS, results $OUT, budget ${BUDGET}s"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader 2>&1 | head -1)"
note "python: $(python3 -c 'import sys, importlib.metadata as m; print(sys.version.split()[0], "torch", m.version("torch"))' 2>&1 | tail -1)"
[ -x "$RUNNER" ] || note "ERROR: $RUNNER is missing: was the bundle made by scripts/gpu_bundle.sh?"

# ------------------------------------------------------------------ 1. wheels
if [ -f "$SITE/executorch/exir/__init__.py" ]; then
  say "executorch already installed in $SITE"
else
  say "installing $(ls "$BUNDLE"/whl/*.whl 2>/dev/null | wc -l) wheel(s) into $SITE"
  if python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$BUNDLE"/whl/*.whl \
    >"$LOGS/pip.log" 2>&1; then
    say "wheels installed"
  else
    note "ERROR: pip install of the wheels failed (exports will fail): $(tail -3 "$LOGS/pip.log" | tr '\n' ' ')"
  fi
fi
chmod +x "$SITE/executorch/data/bin/flatc" 2>/dev/null
export FLATC_EXECUTABLE=$SITE/executorch/data/bin/flatc
# Several compiling processes share 16 cores.
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-4}

# ------------------------------------------------------------------ 2. exports + AOTI compiles (parallel)
missing=()
for m in heavy_bf16 deep_bf16 encdec "${FIXTURE_MODELS[@]}"; do # heaviest first
  [[ " ${BENCH_MODELS_LIST[*]} encdec " == *" $m "* ]] || continue
  [ -f "$MODELS/$m/manifest.json" ] || missing+=("$m")
done
pids=()
if [ "${#missing[@]}" -gt 0 ]; then
  say "exporting ${missing[*]} ($JOBS lane(s), at most ${PHASE1}s)"
  for ((lane = 0; lane < JOBS; lane++)); do
    names=()
    for ((i = lane; i < ${#missing[@]}; i += JOBS)); do names+=("${missing[$i]}"); done
    [ "${#names[@]}" -gt 0 ] || continue
    PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} timeout -k 5 "$(cap "$PHASE1")" \
      python3 "$BENCH/export.py" "$MODELS" "${names[@]}" "${EXPORT_FLAGS[@]}" \
      >"$LOGS/export.lane$lane.log" 2>&1 &
    pids+=($!)
  done
else
  say "all programs already exported in $MODELS"
fi
say "compiling PyTorch AOTI packages (at most ${PHASE1}s)"
timeout -k 5 "$(cap $((PHASE1 + 10)))" python3 "$BENCH/torch_bench.py" aoti --compile-only \
  --models "$(IFS=,; echo "${BENCH_MODELS_LIST[*]}")" --pkg-dir "$AOTI" --fixtures "$FIXTURES" --models-dir "$MODELS" \
  --compile-timeout "$PHASE1" --deadline "$DEADLINE" --out "$TORCH_ROWS" --log "$LOGS/aoti_children.log" "${TORCH_FLAGS[@]}" \
  >"$LOGS/aoti_compile.log" 2>&1 &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
grep -h '^export ' "$LOGS"/export.lane*.log 2>/dev/null | while read -r line; do note "$line"; done
grep -h '^aoti-compile ' "$LOGS/aoti_compile.log" 2>/dev/null | while read -r line; do note "$line"; done
for m in "${missing[@]}"; do
  [ -f "$MODELS/$m/manifest.json" ] || note "not exported: $m (see $LOGS/export.lane*.log)"
done

# ------------------------------------------------------------------ 3. GPU runs, one at a time
# et ROW_MODEL VARIANT CAP ARGS...: one et_cuda_run, logged and indexed.
et() {
  local model=$1 variant=$2 limit=$3
  shift 3
  local log
  log=$LOGS/et.$model.$(printf '%s' "$variant" | tr -c 'A-Za-z0-9.-' '_').log
  if [ "$(left)" -lt 8 ]; then
    printf '%s\t%s\t%s\t%s\n' "$model" "$variant" "skipped" "" >>"$INDEX"
    say "skip  $model / $variant (time)"
    return
  fi
  echo "\$ et_cuda_run $*" >"$log"
  timeout -k 5 "$(cap "$limit")" "$RUNNER" "$@" >>"$log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$model" "$variant" "$rc" "$log" >>"$INDEX"
  local summary
  summary=$(grep -E ' bench: |enqueue: |^pipeline (speedup|check)' "$log" | head -2 | tr '\n' ' ')
  [ -n "$summary" ] || summary=$(tail -1 "$log")
  say "rc=$rc $model / $variant: ${summary:0:150}"
}

for m in "${BENCH_MODELS_LIST[@]}"; do
  if [ "$m" = heavy_bf16 ]; then n=$N_HEAVY w=$W_HEAVY; else n=$N w=$W; fi
  bench=(--bench "$n" --warmup "$w")
  ours=$MODELS/$m/manifest.json
  if [[ " ${FIXTURE_MODELS[*]} " == *" $m "* ]]; then
    host=$FIXTURES/$m/manifest.json # the shared fixture (graph inputs memory-planned)
    dev=$ours                       # the same module re-exported with alloc_graph_input=False
    [ -f "$dev" ] || dev=$host      # then the runner reports the planned inputs
  else
    host=$ours dev=$ours
  fi
  if [ ! -f "$host" ]; then
    note "no program for $m: its et_cuda_run rows are skipped"
    continue
  fi
  et "$m" "et default device-io" 60 --manifest "$dev" "${bench[@]}" --device-io
  et "$m" "et default host-io" 60 --manifest "$host" "${bench[@]}"
  if [ "$dev" != "$host" ]; then
    et "$m" "et default host-io (re-export)" 60 --manifest "$dev" "${bench[@]}"
  fi
  et "$m" "et sync-always host-io" 60 --manifest "$host" "${bench[@]}" --option execution_mode=sync-always
  et "$m" "et upstream-1.2 host-io" 90 --manifest "$host" "${bench[@]}" --option execution_mode=upstream-1.2
done
# The runner refuses device IO on a program whose inputs are memory-planned.
et mlp_f32 "check: device-io refused on planned inputs" 30 \
  --manifest "$FIXTURES/mlp_f32/manifest.json" --bench 10 --device-io

if [ -f "$MODELS/encdec/manifest.json" ]; then
  et encdec "pipeline encoder,decoder" 60 --manifest "$MODELS/encdec/manifest.json" \
    --pipeline encoder,decoder --bench "$N_PIPE" --warmup "$W"
else
  note "no encdec program: pipeline skipped"
fi
for m in heavy_bf16 deep_bf16; do
  [[ " ${BENCH_MODELS_LIST[*]} " == *" $m "* ]] || continue
  if [ -f "$MODELS/$m/manifest.json" ]; then
    et "$m" "enqueue 50" 60 --manifest "$MODELS/$m/manifest.json" --enqueue 50 --warmup "$W_HEAVY"
  else
    note "no $m program: enqueue skipped"
  fi
done

if [ "$(left)" -gt 30 ]; then
  say "torch eager + CUDA graph"
  timeout -k 5 "$(cap 120)" python3 "$BENCH/torch_bench.py" eager \
    --models "$(IFS=,; echo "${BENCH_MODELS_LIST[*]}")" --fixtures "$FIXTURES" --models-dir "$MODELS" \
    --out "$TORCH_ROWS" "${TORCH_FLAGS[@]}" >"$LOGS/torch_eager.log" 2>&1 || note "torch_bench eager: exit status $? (see $LOGS/torch_eager.log)"
  say "torch eager done"
else
  note "torch eager + CUDA graph skipped: $(left)s left"
fi
if [ "$(left)" -gt 30 ]; then
  say "torch AOTI (load + run in subprocesses; cuda-gdb on the first crash)"
  timeout -k 5 "$(cap 200)" python3 "$BENCH/torch_bench.py" aoti --gdb \
    --models "$(IFS=,; echo "${BENCH_MODELS_LIST[*]}")" --pkg-dir "$AOTI" --fixtures "$FIXTURES" --models-dir "$MODELS" \
    --deadline $((DEADLINE - 12)) --run-timeout 90 --gdb-timeout 120 --out "$TORCH_ROWS" \
    --log "$LOGS/aoti_children.log" "${TORCH_FLAGS[@]}" \
    >"$LOGS/torch_aoti.log" 2>&1 ||
    note "torch_bench aoti: exit status $? (see $LOGS/torch_aoti.log)"
  grep -E '^(aoti-run|cuda-gdb) ' "$LOGS/torch_aoti.log" | head -8 | while read -r line; do say "$line"; done
else
  note "torch AOTI skipped: $(left)s left"
fi

# ------------------------------------------------------------------ 4. the table
note "elapsed: $(($(date +%s) - START))s"
python3 "$BENCH/table.py" --index "$INDEX" --torch "$TORCH_ROWS" --notes "$NOTES" --out "$OUT/RESULTS.md" \
  >"$LOGS/table.log" 2>&1 || {
  echo "table.py failed:"
  tail -20 "$LOGS/table.log"
}
echo
echo "==================== $OUT/RESULTS.md"
cat "$OUT/RESULTS.md" 2>/dev/null || echo "(no RESULTS.md)"
