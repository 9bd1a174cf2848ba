#!/usr/bin/env bash
# Issue 21's real-scale rows in ONE GPU call (H200; PyTorch 2.11, nvcc, ncu; no Rust, no network;
# nothing cached between calls, so every export happens inside the call). From the repository
# root of the copy:
#   bash scripts/gpu.sh real-scale [flags]      (runs this script with them)
#   bash bench/real_scale.sh [--budget S] [--export-deadline S] [--extra LIST|none] [--site et12|et15]
#                            [--no-ncu] [--dry-run]
# Carried (git-ignored): .dev/gpu.tar.xz (scripts/gpu_bundle.sh, packed: et_cuda_run and
# libexecutorch_cuda.so.0), .whl/models/sites/et15.tar.xz (tests/models/wheels.sh; et12.tar.xz with
# --site et12). Writes into $OUT (default /tmp/real_scale_out): <date>-<commit>-real-scale.md (named by
# bench/results.py, never over an existing file; rewritten by this run at each milestone so that a
# call cut short still leaves its rows), the same name with -census.md (ncu tables), raw/*.json,
# logs.tar.xz.
#
# Steps (time from the start; defaults; every step checks what is left of --budget):
#   0 s     unpack the bundle and the ExecuTorch site
#   ~5 s    in parallel, each its own process (tests/models/decode_llama.py): Llama-1B-shaped bf16
#           exported without and with the companion; PyTorch's reference (eager greedy tokens for a
#           32-token prompt + 128 new ones, then torch.compile(mode="reduce-overhead") compiled and warmed
#           up, then it waits for its timing slot); --extra (qwen06b: Qwen3-0.6B-shaped base and companion,
#           int4: Llama-1B int4 tile-packed) niced, with few compile threads, and STOPPED (SIGSTOP) during
#           every timing slot and the census
#   exports done (at most --export-deadline, 400 s): alone on the GPU, in turn:
#           the torch slot (compile and eager decode tok/s, pinned H2D bandwidth), CUDA context creation,
#           page-cache read rate of each .ptd, then et_cuda_run --generate 128 --generate-rounds 2
#           --stats --mem for base and companion, with CUDA graphs first, then eager
#   then    ncu census of one decode step per export (eager, --generate 4)
#   then    the extras (continued; their runs with graphs, then eager), while time remains
#   end     the results file, raw JSON, logs
# Site: ExecuTorch 1.5.1 (et15) by default for every variant: it writes the weights per FQN (one
# named-data entry per tensor, cuda_fqn_weight:<dev>:<FQN>), which lets the library stream them
# (lower peak RSS); 1.2 (--site et12) writes one packed blob per method. Read in the 1.5.1 wheel
# (not yet run at this scale): base is the plain bf16 decoder, as the suite's et15_qwen3_bf16 (runs
# through ours with --generate); companion: executorch_cuda.install() patches the two CudaBackend
# hooks 1.5.1 still has (get_supported_fallback_kernels, get_aoti_compile_options) and merges with
# its own custom-op table; int4: torchao 0.18's tile_packed_to_4d linear calls
# aten._weight_int4pack_mm, a supported fallback kernel of 1.5.1's CudaBackend (its
# quantize_op_dispatch rewrites only its own CudaCoalescedInt4Tensor weights); the tied head of the
# Qwen3 shape is one placeholder after torch.export, so one FQN. decode_llama.py's
# MemoryPlanningPass(alloc_graph_input=False) stays: 1.5.1 plans the delegate IO on the device and
# copies the host inputs in (et_copy::_h2d_copy). --site et12: ExecuTorch 1.2's exports (one blob).
# Environment: OUT, REAL_WORK (/tmp/real_scale), PY (python3), REAL_BUDGET, REAL_EXPORT_DEADLINE,
# REAL_EXTRA (qwen06b,int4), REAL_SITE (et15), REAL_NCU (ncu), REAL_STEPS (128), REAL_PROMPT (32), REAL_DEVICE_LOGITS (1: exports keep the logits on the device), REAL_EAGER_LOAD_MODE (mmap: the eager runs pass --load-mode mmap).
# CPU test: REAL_TEST_CPU=1 with REAL_BUNDLE_DIR, REAL_SITE_DIR, REAL_DECODE, REAL_RUNNER, REAL_NCU set to
# fakes (bench/test_table.sh does it).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/real_scale_out}
W=${REAL_WORK:-/tmp/real_scale}
PY=${PY:-python3}
BUDGET=${REAL_BUDGET:-570}
EXPORT_DEADLINE=${REAL_EXPORT_DEADLINE:-400}
EXTRA=${REAL_EXTRA:-qwen06b,int4}
SITE_NAME=${REAL_SITE:-et15}
NCU=${REAL_NCU:-ncu}
STEPS=${REAL_STEPS:-128}
PROMPT=${REAL_PROMPT:-32}
DO_NCU=1
DRY=0
usage() { sed -n '2,/^set -uo pipefail$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --export-deadline) EXPORT_DEADLINE=${2:?--export-deadline needs seconds}; shift 2 ;;
    --extra) EXTRA=${2:?--extra needs a list}; shift 2 ;;
    --site) SITE_NAME=${2:?--site needs et12 or et15}; shift 2 ;;
    --no-ncu) DO_NCU=0; shift ;;
    --dry-run) DRY=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "real_scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in BUDGET EXPORT_DEADLINE STEPS PROMPT; do
  [[ ${!n} =~ ^[0-9]+$ ]] || { echo "real_scale.sh: $n must be a number of seconds/tokens, not '${!n}'" >&2; exit 2; }
done
case "$SITE_NAME" in et12 | et15) ;; *) echo "real_scale.sh: --site is et12 or et15, not '$SITE_NAME'" >&2; exit 2 ;; esac
[ "$EXTRA" = none ] && EXTRA=""
for x in ${EXTRA//,/ }; do
  case "$x" in qwen06b | int4) ;; *) echo "real_scale.sh: --extra takes qwen06b,int4 or none, not '$x'" >&2; exit 2 ;; esac
done
[ "$EXPORT_DEADLINE" -lt "$BUDGET" ] || { echo "real_scale.sh: --export-deadline must be below --budget" >&2; exit 2; }

DECODE=${REAL_DECODE:-$ROOT/tests/models/decode_llama.py}
TABLE=$ROOT/bench/real_scale_table.py
MAIN_TAGS="base companion"
EXTRA_TAGS=""
[[ ",$EXTRA," == *,qwen06b,* ]] && EXTRA_TAGS="$EXTRA_TAGS qwen06b_base qwen06b_companion"
[[ ",$EXTRA," == *,int4,* ]] && EXTRA_TAGS="$EXTRA_TAGS int4"
EXTRA_TAGS=${EXTRA_TAGS# }
if [ "$DRY" = 1 ]; then
  echo "plan: budget ${BUDGET}s, exports by ${EXPORT_DEADLINE}s, site $SITE_NAME, ${PROMPT}-token prompt, $STEPS new tokens"
  echo "plan: parallel exports: $MAIN_TAGS; reference: llama1b (eager tokens, torch.compile reduce-overhead)"
  echo "plan: extras (niced, stopped while timing): ${EXTRA_TAGS:-none}"
  echo "plan: timing slot: torch, then ours: $(for m in graphs eager; do for t in $MAIN_TAGS; do printf '%s/%s ' $t $m; done; done)"
  echo "plan: census: $([ $DO_NCU = 1 ] && echo "$MAIN_TAGS (ncu, eager, --generate 4)" || echo off)"
  echo "plan: results into $OUT"
  exit 0
fi

START=$(date +%s)
now() { echo $(($(date +%s) - START)); }
left() { echo $((BUDGET - $(now))); }
rm -rf "$W" && mkdir -p "$W/logs" "$W/export" "$OUT"
TL=$W/timeline.txt
say() { printf '[%3ds] %s\n' "$(now)" "$*" | tee -a "$TL"; }

# ---------------------------------------------------------------- 0. inputs
if [ -n "${REAL_BUNDLE_DIR:-}" ]; then
  B=$REAL_BUNDLE_DIR
else
  mkdir -p "$W/bundle" && tar -xJf .dev/gpu.tar.xz -C "$W/bundle" && B=$W/bundle/gpu ||
    { say "FATAL: cannot unpack .dev/gpu.tar.xz"; B=$W/bundle/gpu; }
fi
if [ -n "${REAL_SITE_DIR:-}" ]; then
  SITE=$REAL_SITE_DIR
else
  SITE=$W/site && mkdir -p "$SITE" && tar -xJf ".whl/models/sites/$SITE_NAME.tar.xz" -C "$SITE" ||
    say "FATAL: cannot unpack .whl/models/sites/$SITE_NAME.tar.xz"
fi
RUNNER=${REAL_RUNNER:-$B/et_cuda_run}
COMMIT=$(cat "$B/COMMIT" 2>/dev/null || echo nocommit)
TREE=$(git -C "$ROOT" rev-parse --short=7 HEAD 2>/dev/null || echo "no git")
echo "commit: $COMMIT" >>"$TL"
RES=$("$PY" bench/results.py name --dir "$OUT" --tag real-scale --commit "$COMMIT")
CENSUS=${RES%.md}-census.md
CMDLINE="bash bench/real_scale.sh --budget $BUDGET --export-deadline $EXPORT_DEADLINE --extra ${EXTRA:-none} --site $SITE_NAME$([ $DO_NCU = 0 ] && echo ' --no-ncu')"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  echo "$(nproc) CPUs, $(free -g 2>/dev/null | awk '/Mem:/{print $2}') GiB RAM"
  echo "bundle $COMMIT, scripts $TREE, ExecuTorch site $SITE_NAME"
  "$NCU" --version 2>/dev/null | tail -1 || echo "no ncu"
} >"$W/env.txt" 2>&1
say "bundle $COMMIT (scripts $TREE), results $RES"
report() {
  "$PY" "$TABLE" report "$W" --out "$RES" --census-out "$CENSUS" --command "$CMDLINE" 2>>"$W/logs/report.log" ||
    say "report failed: $(tail -1 "$W/logs/report.log")"
}

# ---------------------------------------------------------------- 1. exports and the reference, in parallel
source "$ROOT/bench/jobs.sh" # PID, job_start, alive, signal_group, end_job
spawn() { # name nice threads args...: decode_llama.py as a job (its own process group)
  local name=$1 nice=$2 threads=$3
  shift 3
  ARGS[$name]="$nice $threads $*"
  job_start "$name" "$nice" "$threads" "$W/logs/$name.log" "${SPAWN_SITE:-$SITE}" "$PY" "$DECODE" "$@"
}
# An ExecuTorch 1.5.1 export that fails before REAL_FALLBACK_BY seconds (default 200) is
# exported again, once, with ExecuTorch 1.2 (packed blob), so that a 1.5.1-specific failure
# costs its row's load figures, not the row.
declare -A ARGS RETRIED
FALLBACK_BY=${REAL_FALLBACK_BY:-200}
retry_et12() { # name: 0 when respawned
  local n=$1
  [ "$SITE_NAME" = et15 ] && [[ $n == export_* ]] && [ -z "${RETRIED[$n]:-}" ] || return 1
  [ "$(now)" -lt "$FALLBACK_BY" ] || return 1
  RETRIED[$n]=1
  if [ -z "${SITE12:-}" ]; then
    SITE12=${REAL_SITE12_DIR:-$W/site12}
    [ -n "${REAL_SITE12_DIR:-}" ] || { mkdir -p "$SITE12" && tar -xJf .whl/models/sites/et12.tar.xz -C "$SITE12"; } ||
      { say "fallback: cannot unpack .whl/models/sites/et12.tar.xz"; return 1; }
  fi
  local a
  read -r -a a <<<"${ARGS[$n]}"
  echo "== retried with ExecuTorch 1.2 (site et12) after the 1.5.1 export failed" >>"$W/logs/$n.log"
  SPAWN_SITE=$SITE12 spawn "$n" "${a[@]}"
  echo et12 >"$W/site_$n"
  say "fallback: $n exported again with ExecuTorch 1.2 (the 1.5.1 export failed)"
}
stop_extras() { [ -n "$EXTRA_JOBS" ] && signal_group STOP $EXTRA_JOBS && sleep 1; }
cont_extras() { [ -n "$EXTRA_JOBS" ] && signal_group CONT $EXTRA_JOBS; }

COMMON=(--prompt-len "$PROMPT" --steps "$STEPS")
# Exports leave the logits on the device (ExecuTorch >= 1.4), so the runner picks each token there
# (et_cuda_sample) as an application of this backend would; REAL_DEVICE_LOGITS=0: on the host.
XO=()
[ "${REAL_DEVICE_LOGITS:-1}" = 1 ] && XO=(--device-logits)
EX=$W/export
spawn export_base 0 8 "$EX" --mode export --model llama1b --variants base "${COMMON[@]}" "${XO[@]}"
spawn export_companion 0 8 "$EX" --mode export --model llama1b --variants companion "${COMMON[@]}" "${XO[@]}"
spawn ref_llama1b 0 4 "$EX" --mode ref --model llama1b --go "$W/go_llama1b" "${COMMON[@]}"
EXTRA_JOBS=""
for t in $EXTRA_TAGS; do
  case $t in
    qwen06b_base) spawn export_qwen06b_base 19 3 "$EX" --mode export --model qwen06b --variants base "${COMMON[@]}" "${XO[@]}" ;;
    qwen06b_companion) spawn export_qwen06b_companion 19 3 "$EX" --mode export --model qwen06b --variants companion "${COMMON[@]}" "${XO[@]}" ;;
    int4) spawn export_int4 19 3 "$EX" --mode export --model llama1b --variants int4 "${COMMON[@]}" "${XO[@]}" ;;
  esac
  EXTRA_JOBS="$EXTRA_JOBS export_$t"
done
if [[ " $EXTRA_TAGS " == *" qwen06b_base "* ]]; then
  spawn ref_qwen06b 19 2 "$EX" --mode ref --model qwen06b --no-compile --go "$W/go_qwen06b" --go-timeout 0 "${COMMON[@]}"
  EXTRA_JOBS="$EXTRA_JOBS ref_qwen06b"
fi
[ "$HAVE_SETSID" = 1 ] || say "no setsid: the extras cannot be stopped while timing"
say "started: ${!PID[*]}"

done_msg() { # name: one line on how a job ended
  local n=$1
  if [ -f "$EX/${n#export_}/export.json" ] || [ -f "$EX/${n#export_}/manifest.json" ]; then echo "$n: exported"
  else echo "$n: $(grep -vE '^\s*$' "$W/logs/$n.log" 2>/dev/null | tail -1 | cut -c1-200)"; fi
}
# Wait for the main exports (and say when any job ends) until the deadline.
declare -A SAID
watch_jobs() {
  local n
  for n in "${!PID[@]}"; do
    if [ -z "${SAID[$n]:-}" ] && ! alive "$n"; then
      SAID[$n]=1
      wait "${PID[$n]}" 2>/dev/null
      local rc=$?
      say "ended ($rc): $(done_msg "$n")"
      if [[ "$(done_msg "$n")" != *": exported" ]] && retry_et12 "$n"; then unset "SAID[$n]"; fi
    fi
  done
}
while alive export_base || alive export_companion; do
  watch_jobs
  if [ "$(now)" -ge "$EXPORT_DEADLINE" ]; then
    say "export deadline (${EXPORT_DEADLINE}s): ending $(for n in export_base export_companion; do alive $n && printf '%s ' $n; done)"
    end_job export_base
    end_job export_companion
    break
  fi
  sleep 1
done
watch_jobs
report

# ---------------------------------------------------------------- 2./3. timing slot: torch, then ours
tokens_of() { # ref json -> comma-separated tokens
  "$PY" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1])).get("tokens") or [])))' "$1" 2>/dev/null
}
torch_slot() { # model max_wait: the reference's timing, alone on the GPU
  local m=$1 wait_s=$2 t0
  t0=$(now)
  while [ ! -f "$EX/ref_$m.ready" ] && alive "ref_$m" && [ $(($(now) - t0)) -lt "$wait_s" ]; do sleep 1; done
  if [ ! -f "$EX/ref_$m.ready" ]; then say "torch slot $m: reference not ready ($(done_msg ref_$m))"; return 1; fi
  touch "$W/go_$m"
  t0=$(now)
  while [ ! -f "$EX/ref_$m.done" ] && alive "ref_$m" && [ "$(left)" -gt 20 ] && [ $(($(now) - t0)) -lt 90 ]; do sleep 1; done
  [ -f "$EX/ref_$m.done" ] || { say "torch slot $m: not done after $(($(now) - t0))s, ending it"; end_job "ref_$m"; }
  say "torch slot $m: $(grep -E '^ref ' "$W/logs/ref_$m.log" | tail -1 | cut -c1-300)"
}
run_ours() { # tag mode
  local tag=$1 mode=$2 m=$EX/$1/manifest.json model=llama1b exp args t
  [ -f "$m" ] || return 0
  [[ $tag == qwen06b_* ]] && model=qwen06b
  t=$(($(left) - 15))
  [ "$t" -ge 20 ] || { say "run $tag/$mode: skipped, ${t}s left"; return 0; }
  [ "$t" -le 120 ] || t=120
  args=(--manifest "$m" --generate "$STEPS" --generate-rounds 2 --stats --mem --json)
  [ "$mode" = graphs ] && args+=(--option enable_cuda_graph_for_method=forward)
  # The eager runs read the files mapped (REAL_EAGER_LOAD_MODE, default mmap): the Load table then
  # compares the two ways ExecuTorch can read the named data.
  [ "$mode" = eager ] && [ "${REAL_EAGER_LOAD_MODE:-mmap}" != file ] && args+=(--load-mode "${REAL_EAGER_LOAD_MODE:-mmap}")
  if [ "$tag" != int4 ] && [ -f "$EX/ref_$model.json" ]; then
    exp=$(tokens_of "$EX/ref_$model.json")
    [ -n "$exp" ] && args+=(--expect-tokens "$exp")
  fi
  "$PY" "$TABLE" run "$W/logs/run_${tag}_$mode.log" --timeout "$t" -- "$RUNNER" "${args[@]}"
  say "run $tag/$mode (rc $?): $("$PY" "$TABLE" brief "$W/logs/run_${tag}_$mode.log")"
}
load_inputs() { # tag: page-cache read rate of its .ptd files
  local d=$EX/$1
  compgen -G "$d/*.ptd" >/dev/null && "$PY" "$TABLE" readbw "$d"/*.ptd >"$W/logs/readbw_$1.txt" 2>&1
}

stop_extras
TORCH_DONE=0
if [ -f "$EX/ref_llama1b.ready" ]; then
  torch_slot llama1b 5 && TORCH_DONE=1
else # still compiling: stopped while ours are timed, its slot comes after
  say "torch slot llama1b: reference not ready yet, stopped while ours run"
  signal_group STOP ref_llama1b
fi
"$PY" "$TABLE" ctx >"$W/logs/ctx.txt" 2>&1
say "$(cat "$W/logs/ctx.txt")"
for tag in $MAIN_TAGS; do load_inputs "$tag"; done
for mode in graphs eager; do
  for tag in $MAIN_TAGS; do run_ours "$tag" "$mode"; done
  report
done
if [ "$TORCH_DONE" = 0 ]; then
  signal_group CONT ref_llama1b
  torch_slot llama1b $(($(left) - 120 > 30 ? $(left) - 120 : 30)) && TORCH_DONE=1
fi
report

# ---------------------------------------------------------------- 4. census (ncu), one decode step per export
census() { # tag
  local tag=$1 m=$EX/$1/manifest.json t
  [ -f "$m" ] || return 0
  t=$(($(left) - 25))
  [ "$t" -ge 45 ] || { say "census $tag: skipped, ${t}s left"; return 0; }
  [ "$t" -le 200 ] || t=200
  "$PY" "$TABLE" run "$W/logs/ncu_$tag.csv" --timeout "$t" -- "$NCU" --csv --print-units base --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$RUNNER" --manifest "$m" --generate 4
  say "census $tag: $("$PY" "$TABLE" census "$W/logs/ncu_$tag.csv" 2>&1 | cut -c1-300)"
}
if [ "$DO_NCU" = 1 ]; then
  if command -v "$NCU" >/dev/null; then
    for tag in $MAIN_TAGS; do census "$tag"; done
  else
    say "census: no $NCU on PATH"
  fi
  report
fi

# ---------------------------------------------------------------- 5. the extras, while time remains
if [ -n "$EXTRA_JOBS" ]; then
  cont_extras
  say "extras continued: $(for n in $EXTRA_JOBS; do alive $n && printf '%s ' $n; done)"
  while [ "$(left)" -gt 75 ]; do
    watch_jobs
    busy=0
    for n in $EXTRA_JOBS; do alive "$n" && busy=1; done
    [ "$busy" = 0 ] && break
    sleep 1
  done
  watch_jobs
  for n in $EXTRA_JOBS; do alive "$n" && { say "ending $n (time)"; end_job "$n"; }; done
  for mode in graphs eager; do
    for tag in $EXTRA_TAGS; do
      load_inputs "$tag"
      run_ours "$tag" "$mode"
    done
    report
  done
  if [ "$DO_NCU" = 1 ] && command -v "$NCU" >/dev/null; then
    for tag in $EXTRA_TAGS; do census "$tag"; done
  fi
fi

# ---------------------------------------------------------------- the end
for n in "${!PID[@]}"; do alive "$n" && end_job "$n"; done
say "done"
report
mkdir -p "$OUT/raw"
cp "$EX"/ref_*.json "$OUT/raw/" 2>/dev/null
for t in $MAIN_TAGS $EXTRA_TAGS; do
  [ -f "$EX/$t/export.json" ] && cp "$EX/$t/export.json" "$OUT/raw/export_$t.json"
  [ -f "$EX/$t/manifest.json" ] && cp "$EX/$t/manifest.json" "$OUT/raw/manifest_$t.json"
done
tar -cJf "$OUT/logs.tar.xz" -C "$W" logs timeline.txt env.txt 2>/dev/null
echo "results: $RES"
[ -f "$CENSUS" ] && echo "census: $CENSUS"
exit 0
