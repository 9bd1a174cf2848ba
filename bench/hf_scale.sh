#!/usr/bin/env bash
# Issue 28 item 6: HuggingFace `transformers` decoders at real scale in ONE GPU call (H200; PyTorch
# 2.11, transformers, nvcc, ncu; no Rust, no network; nothing cached between calls). From the
# repository root of the copy:
#   bash scripts/gpu.sh hf-scale [flags]        (runs this script with them)
#   bash bench/hf_scale.sh [--models llama1b,qwen06b,gemma1b] [--variants base,companion]
#                          [--max-t 128|512] [--max-cache 512] [--prompt 32] [--steps 64]
#                          [--budget S] [--export-deadline S] [--ncu base,companion|none]
#                          [--ab VAR | --ab VAR=VALUE | --ab --RUNNER-FLAG]
#                          [--dry-run]
# Carried (git-ignored), as for bench/real_scale.sh: .dev/gpu.tar.xz (scripts/gpu_bundle.sh, packed:
# et_cuda_run, libexecutorch_cuda.so.0) and .whl/models/sites/et15.tar.xz (tests/models/wheels.sh:
# ExecuTorch 1.5.1). Writes into $OUT (default /tmp/hf_scale_out): <date>-<commit>-hf-scale.md (named
# by bench/results.py, never over an existing file; rewritten at each milestone, so a call cut short
# still leaves its rows), -census.md beside it when ncu ran, raw/*.json, logs.tar.xz.
#
# The models (tests/models/hf_models.py): Llama-3.2-1B, Qwen3-0.6B and Gemma-3-1B shapes, the HF
# modeling code with random weights (planted greedy margins), exported by tests/models/decode_llama.py
# through TorchExportableModuleForDecoderOnlyLM (static cache --max-cache, prefill T in 1..--max-t),
# bf16, logits left on the device; variant base: ExecuTorch's CudaPartitioner as it is; companion:
# executorch_cuda.prepare(ep, positions="cache_position") with its defaults first; companion_norope:
# the same with rope=False (RoPE and the cache write left to Inductor, a comparison row).
# Steps (time from the start; every step checks what is left of --budget):
#   0 s    unpack the bundle and the site
#   ~3 s   in parallel: every export (one process per model and variant), and per model the reference
#          (decode_llama.py --mode ref: eager greedy tokens for a --prompt-token prompt, written at once;
#          torch.compile(mode="reduce-overhead") compiled and warmed up; then it waits for its slot)
#   then   each model as soon as its exports have ended and its eager tokens are written, every other
#          job STOPPED (SIGSTOP) meanwhile: the torch slot (eager and compiled decode tok/s), then
#          et_cuda_run --generate STEPS --generate-rounds 2 --stats --mem --expect-tokens <eager's> per
#          variant in three modes: graphs (enable_cuda_graph_for_method=forward), graphs + shared stream
#          (use_shared_cuda_stream=true too), plain; then per variant a 128-token prefill (plain, 3 rounds);
#          with --ab VAR, then per variant graphs runs with VAR=0 and VAR=1 in turn, two of each (an A/B of
#          one of the library's environment switches on the same programs; its table in the results file);
#          --ab VAR=VALUE: the built-in setting (VAR unset) against VAR=VALUE, e.g. a variant decode image,
#          --ab ET_CUDA_DECODE_KERNELS_PTX=.dev/variant.fatbin (carried beside the bundle); --ab --FLAG:
#          et_cuda_run without and with that flag of its own, e.g. --ab --no-overlap
#   --export-deadline (430 s): exports still running are ended ("not exported"); the rest is timed
#   then   ncu census of one decode step (plain, --generate 4) per program of the --ncu variants, while
#          more than 60 s are left
#   end    the results file, raw JSON, logs
# Environment: OUT, HFS_WORK (/tmp/hf_scale), PY (python3), HFS_BUDGET (570), HFS_EXPORT_DEADLINE (430),
# HFS_NCU_BIN (ncu). CPU test (bench/testdata/hf_scale/test.sh): HFS_BUNDLE_DIR, HFS_SITE_DIR, HFS_DECODE,
# HFS_RUNNER, HFS_NCU_BIN set to fakes; HFS_DECODE_ARGS is added to every decode_llama.py call.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hf_scale_out}
W=${HFS_WORK:-/tmp/hf_scale}
PY=${PY:-python3}
BUDGET=${HFS_BUDGET:-570}
EXPORT_DEADLINE=${HFS_EXPORT_DEADLINE:-430}
NCU=${HFS_NCU_BIN:-ncu}
MODELS=llama1b,qwen06b,gemma1b
VARIANTS=base,companion
MAX_T=128
MAX_CACHE=512
PROMPT=32
STEPS=64
PREFILL=128
NCU_VARIANTS=companion
AB=""
DRY=0
usage() { sed -n '2,/^set -uo pipefail$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --models) MODELS=${2:?--models needs a list}; shift 2 ;;
    --variants) VARIANTS=${2:?--variants needs a list}; shift 2 ;;
    --max-t) MAX_T=${2:?--max-t needs a number}; shift 2 ;;
    --max-cache) MAX_CACHE=${2:?--max-cache needs a number}; shift 2 ;;
    --prompt) PROMPT=${2:?--prompt needs a number}; shift 2 ;;
    --steps) STEPS=${2:?--steps needs a number}; shift 2 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --export-deadline) EXPORT_DEADLINE=${2:?--export-deadline needs seconds}; shift 2 ;;
    --ncu) NCU_VARIANTS=${2:?--ncu needs a list or none}; shift 2 ;;
    --ab) AB=${2:?--ab needs a variable name}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "hf_scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "hf_scale.sh: $*" >&2; exit 2; }
for n in BUDGET EXPORT_DEADLINE MAX_T MAX_CACHE PROMPT STEPS; do
  [[ ${!n} =~ ^[0-9]+$ ]] && [ "${!n}" -gt 0 ] || die "$n must be a positive number, not '${!n}'"
done
[ "$EXPORT_DEADLINE" -lt "$BUDGET" ] || die "--export-deadline must be below --budget"
[ "$PROMPT" -le "$MAX_T" ] || die "--prompt ($PROMPT) must be at most --max-t ($MAX_T)"
[ "$PREFILL" -le "$MAX_T" ] || PREFILL=$MAX_T
[ $((PROMPT + STEPS)) -le "$MAX_CACHE" ] && [ $((PREFILL + 1)) -le "$MAX_CACHE" ] ||
  die "--prompt + --steps and the $PREFILL-token prefill must fit --max-cache ($MAX_CACHE)"
MS="" VS=""
for m in ${MODELS//,/ }; do
  case "$m" in llama1b | qwen06b | gemma1b) MS="$MS hf_$m" ;; *) die "--models takes llama1b,qwen06b,gemma1b, not '$m'" ;; esac
done
for v in ${VARIANTS//,/ }; do
  case "$v" in base | companion | companion_norope) VS="$VS $v" ;; *) die "--variants takes base,companion,companion_norope, not '$v'" ;; esac
done
[ -z "$AB" ] || [[ $AB =~ ^ET_CUDA_[A-Z0-9_]+(=[^[:space:]]+)?$ || $AB =~ ^--[a-z][a-z0-9-]*$ ]] ||
  die "--ab takes a switch of the library (ET_CUDA_..., or ET_CUDA_...=VALUE) or a flag of et_cuda_run (--no-overlap), not '$AB'"
# The two sides of the A/B: VAR=0 and VAR=1, the built-in setting and VAR=VALUE, or et_cuda_run
# without and with a flag.
if [[ $AB == *=* || $AB == --* ]]; then AB_SIDES=("" "$AB"); else AB_SIDES=("$AB=0" "$AB=1"); fi
[ "$NCU_VARIANTS" = none ] && NCU_VARIANTS=""
for v in ${NCU_VARIANTS//,/ }; do [[ " $VS " == *" $v "* ]] || die "--ncu: '$v' is not among --variants"; done
MS=${MS# } VS=${VS# }
[ -n "$MS" ] && [ -n "$VS" ] || die "no model or no variant"
MODES="graphs shared plain"
if [ "$DRY" = 1 ]; then
  echo "plan: budget ${BUDGET}s, exports ended at ${EXPORT_DEADLINE}s; static cache $MAX_CACHE, prefill T in 1..$MAX_T"
  echo "plan: exports in parallel: $(for m in $MS; do for v in $VS; do printf '%s_%s ' $m $v; done; done)"
  echo "plan: references: $MS (eager greedy tokens after a $PROMPT-token prompt, $STEPS new; torch.compile reduce-overhead)"
  echo "plan: per model, alone on the GPU: torch slot, then ours: $(for mo in $MODES; do for v in $VS; do printf '%s/%s ' $v $mo; done; done)then a $PREFILL-token prefill per variant"
  echo "plan: census: ${NCU_VARIANTS:-off}"
  if [[ $AB == --* ]]; then
    echo "plan: A/B of et_cuda_run $AB: per model and variant, graphs without and with $AB in turn, two runs each"
  elif [[ $AB == *=* ]]; then
    echo "plan: A/B of $AB: per model and variant, graphs with the built-in setting and with $AB in turn, two runs each"
  elif [ -n "$AB" ]; then
    echo "plan: A/B of $AB: per model and variant, graphs with $AB=0 and =1 in turn, two runs each"
  fi
  echo "plan: results into $OUT"
  exit 0
fi

START=$(date +%s)
now() { echo $(($(date +%s) - START)); }
left() { echo $((BUDGET - $(now))); }
rm -rf "$W" && mkdir -p "$W/logs" "$W/export" "$OUT"
TL=$W/timeline.txt
say() { printf '[%3ds] %s\n' "$(now)" "$*" | tee -a "$TL"; }
TABLE=$ROOT/bench/real_scale_table.py
REPORT=$ROOT/bench/hf_scale_table.py
DECODE=${HFS_DECODE:-$ROOT/tests/models/decode_llama.py}

# ---------------------------------------------------------------- 0. inputs
if [ -n "${HFS_BUNDLE_DIR:-}" ]; then
  B=$HFS_BUNDLE_DIR
else
  mkdir -p "$W/bundle" && tar -xJf .dev/gpu.tar.xz -C "$W/bundle" || say "FATAL: cannot unpack .dev/gpu.tar.xz"
  B=$W/bundle/gpu
fi
if [ -n "${HFS_SITE_DIR:-}" ]; then
  SITE=$HFS_SITE_DIR
else
  SITE=$W/site && mkdir -p "$SITE" && tar -xJf .whl/models/sites/et15.tar.xz -C "$SITE" ||
    say "FATAL: cannot unpack .whl/models/sites/et15.tar.xz"
fi
RUNNER=${HFS_RUNNER:-$B/et_cuda_run}
COMMIT=$(cat "$B/COMMIT" 2>/dev/null || echo nocommit)
TREE=$(git -C "$ROOT" rev-parse --short=7 HEAD 2>/dev/null || echo "no git")
echo "commit: $COMMIT" >>"$TL"
RES=$("$PY" bench/results.py name --dir "$OUT" --tag hf-scale --commit "$COMMIT")
CENSUS=${RES%.md}-census.md
CMDLINE="bash bench/hf_scale.sh --models $MODELS --variants $VARIANTS --max-t $MAX_T --max-cache $MAX_CACHE --prompt $PROMPT --steps $STEPS --budget $BUDGET --export-deadline $EXPORT_DEADLINE --ncu ${NCU_VARIANTS:-none}${AB:+ --ab $AB}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  echo "$(nproc) CPUs, $(free -g 2>/dev/null | awk '/Mem:/{print $2}') GiB RAM"
  echo "bundle $COMMIT, scripts $TREE, ExecuTorch site et15"
  PYTHONPATH=$SITE "$PY" -c 'import transformers, torch; print(f"torch {torch.__version__}, transformers {transformers.__version__}")' 2>/dev/null || echo "no transformers"
  "$NCU" --version 2>/dev/null | tail -1 || echo "no ncu"
} >"$W/env.txt" 2>&1
say "bundle $COMMIT (scripts $TREE), results $RES"
report() {
  "$PY" "$REPORT" "$W" --out "$RES" --census-out "$CENSUS" --command "$CMDLINE" 2>>"$W/logs/report.log" ||
    say "report failed: $(tail -1 "$W/logs/report.log")"
}
printf '%s\n' "models=$MS" "variants=$VS" "prompt=$PROMPT" "steps=$STEPS" "prefill=$PREFILL" "max_t=$MAX_T" \
  "max_cache=$MAX_CACHE" "ab=$AB" >"$W/plan.txt"

# ---------------------------------------------------------------- 1. exports and references, in parallel
source "$ROOT/bench/jobs.sh" # PID, job_start, alive, signal_group, end_job
EX=$W/export
read -r -a XARGS <<<"${HFS_DECODE_ARGS:-}"
COMMON=(--prompt-len "$PROMPT" --steps "$STEPS" --max-t "$MAX_T" --max-cache "$MAX_CACHE" "${XARGS[@]}")
NCPU=$(nproc 2>/dev/null || echo 8)
NEXP=$(($(wc -w <<<"$MS") * $(wc -w <<<"$VS")))
THREADS=$(((NCPU + NEXP - 1) / NEXP > 2 ? (NCPU + NEXP - 1) / NEXP : 2)) # 16 CPUs, 6 exports: 3 each
spawn() { # name nice threads args...
  local name=$1 nice=$2 threads=$3
  shift 3
  job_start "$name" "$nice" "$threads" "$W/logs/$name.log" "$SITE" "$PY" "$DECODE" "$@"
}
EXPORTS=""
for m in $MS; do
  for v in $VS; do
    spawn "export_${m}_$v" 0 "$THREADS" "$EX" --mode export --model "$m" --variants "$v" --device-logits "${COMMON[@]}"
    EXPORTS="$EXPORTS export_${m}_$v"
  done
  spawn "ref_$m" 10 2 "$EX" --mode ref --model "$m" --go "$W/go_$m" --go-timeout "$BUDGET" "${COMMON[@]}"
done
[ "$HAVE_SETSID" = 1 ] || say "no setsid: jobs cannot be stopped while timing"
say "started ${NEXP} exports ($THREADS compile threads each) and the references: ${!PID[*]}"

exported() { [ -f "$EX/$1/manifest.json" ] && [ -f "$EX/$1/export.json" ]; }
done_msg() { # job: one line on how it ended
  local n=$1
  if [[ $n == export_* ]] && exported "${n#export_}"; then echo "$n: exported"
  else echo "$n: $(grep -vE '^\s*$' "$W/logs/$n.log" 2>/dev/null | tail -1 | cut -c1-200)"; fi
}
declare -A SAID
watch_jobs() {
  local n
  for n in "${!PID[@]}"; do
    if [ -z "${SAID[$n]:-}" ] && ! alive "$n"; then
      SAID[$n]=1
      wait "${PID[$n]}" 2>/dev/null
      say "ended ($?): $(done_msg "$n")"
    fi
  done
}
others() { # job names alive except the given ones
  local n out=""
  for n in "${!PID[@]}"; do [[ " $* " == *" $n "* ]] || ! alive "$n" || out="$out $n"; done
  echo "${out# }"
}

# ---------------------------------------------------------------- 2. timing, one model at a time
tokens_of() { # ref json -> comma-separated tokens
  "$PY" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1])).get("tokens") or [])))' "$1" 2>/dev/null
}
prefill_ids() { # export.json -> its prefill_ids
  "$PY" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1])).get("prefill_ids") or [])))' "$1" 2>/dev/null
}
torch_slot() { # model: the reference's timing (it is ready), alone on the GPU
  local m=$1 t0
  touch "$W/go_$m"
  t0=$(now)
  while [ ! -f "$EX/ref_$m.done" ] && alive "ref_$m" && [ "$(left)" -gt 20 ] && [ $(($(now) - t0)) -lt 90 ]; do sleep 1; done
  [ -f "$EX/ref_$m.done" ] || { say "torch slot $m: not done after $(($(now) - t0))s, ending it"; end_job "ref_$m"; }
  say "torch slot $m: $(grep -E '^ref ' "$W/logs/ref_$m.log" | tail -1 | cut -c1-250)"
}
run_ours() { # model variant mode [log name suffix, VAR=value or --flag]: the suffix and setting of an --ab run
  local m=$1 v=$2 mode=$3 p=$EX/$1_$2 exp args t log=run_$1_$2_$3${4:-}
  local envs=() flags=()
  if [[ ${5:-} == --* ]]; then flags=("$5"); elif [ -n "${5:-}" ]; then envs=("$5"); fi
  exported "${m}_$v" || return 0
  t=$(($(left) - 15))
  [ "$t" -ge 15 ] || { say "run ${m}_$v/$mode: skipped, ${t}s left"; return 0; }
  [ "$t" -le 90 ] || t=90
  args=(--manifest "$p/manifest.json" --generate "$STEPS" --generate-rounds 2 --stats --mem --json)
  case $mode in
    graphs) args+=(--option enable_cuda_graph_for_method=forward) ;;
    shared) args+=(--option enable_cuda_graph_for_method=forward --option use_shared_cuda_stream=true) ;;
  esac
  exp=$(tokens_of "$EX/ref_$m.json")
  [ -n "$exp" ] && args+=(--expect-tokens "$exp")
  args+=("${flags[@]}")
  env "${envs[@]}" "$PY" "$TABLE" run "$W/logs/$log.log" --timeout "$t" -- "$RUNNER" "${args[@]}"
  say "run ${m}_$v/$mode${5:+ $5} (rc $?): $("$PY" "$TABLE" brief "$W/logs/$log.log")"
}
run_prefill() { # model variant: --generate 2 on a PREFILL-token prompt, plain, 3 rounds
  local m=$1 v=$2 p=$EX/$1_$2 ids t
  exported "${m}_$v" || return 0
  ids=$(prefill_ids "$p/export.json")
  [ -n "$ids" ] || { say "prefill ${m}_$v: no prefill_ids in export.json"; return 0; }
  t=$(($(left) - 15))
  [ "$t" -ge 15 ] || { say "prefill ${m}_$v: skipped, ${t}s left"; return 0; }
  [ "$t" -le 60 ] || t=60
  "$PY" "$TABLE" run "$W/logs/prefill_${m}_$v.log" --timeout "$t" -- "$RUNNER" --manifest "$p/manifest.json" \
    --prompt-ids "$ids" --generate 2 --generate-rounds 3 --stats --json
  say "prefill ${m}_$v (rc $?): $("$PY" "$TABLE" brief "$W/logs/prefill_${m}_$v.log" | grep -oE 'prompt_tokens=[0-9]+|ttft_ms=[0-9.]+' | tr '\n' ' ')"
}
declare -A TIMED TORCH_DONE
time_model() { # model: everything else stopped meanwhile
  local m=$1 v mode stopped
  stopped=$(others "ref_$m")
  [ -n "$stopped" ] && signal_group STOP $stopped && sleep 1
  say "timing $m${stopped:+ (stopped: $stopped)}"
  if [ -f "$EX/ref_$m.ready" ]; then torch_slot "$m" && TORCH_DONE[$m]=1; fi
  # The model's own reference when it is not ready yet (torch.compile warming up, on the GPU):
  # stopped too, or our runs share the GPU with it (2026-12-06-34180dc-hf-scale.md: two A/B runs
  # at half speed while it warmed up); its torch slot comes later.
  if alive "ref_$m" && [ -z "${TORCH_DONE[$m]:-}" ]; then
    signal_group STOP "ref_$m" && sleep 1
    stopped="${stopped:+$stopped }ref_$m"
    say "timing $m: its reference is not ready, stopped meanwhile"
  fi
  for mode in $MODES; do for v in $VS; do run_ours "$m" "$v" "$mode"; done; done
  for v in $VS; do run_prefill "$m" "$v"; done
  if [ -n "$AB" ]; then
    local r val
    for v in $VS; do for r in 1 2; do for val in 0 1; do
      run_ours "$m" "$v" graphs "_ab${val}_$r" "${AB_SIDES[$val]}"
    done; done; done
  fi
  TIMED[$m]=1
  [ -n "$stopped" ] && signal_group CONT $stopped
  report
}
exports_ended() { local v; for v in $VS; do ! alive "export_${1}_$v" || return 1; done; }
ref_tokens() { [ -n "$(tokens_of "$EX/ref_$1.json")" ] || ! alive "ref_$1"; }
DEADLINE_DONE=0
while :; do
  watch_jobs
  pending=0
  for m in $MS; do
    if [ -z "${TIMED[$m]:-}" ]; then
      pending=1
      exports_ended "$m" && ref_tokens "$m" && time_model "$m"
    elif [ -z "${TORCH_DONE[$m]:-}" ] && [ -f "$EX/ref_$m.ready" ] && alive "ref_$m"; then
      stopped=$(others "ref_$m")
      [ -n "$stopped" ] && signal_group STOP $stopped && sleep 1
      torch_slot "$m"
      TORCH_DONE[$m]=1
      [ -n "$stopped" ] && signal_group CONT $stopped
      report
    elif [ -z "${TORCH_DONE[$m]:-}" ] && alive "ref_$m"; then
      pending=1
    fi
  done
  [ "$pending" = 0 ] && break
  if [ "$DEADLINE_DONE" = 0 ] && [ "$(now)" -ge "$EXPORT_DEADLINE" ]; then
    DEADLINE_DONE=1
    late=$(for n in $EXPORTS; do alive "$n" && printf '%s ' "$n"; done)
    if [ -n "$late" ]; then
      say "export deadline (${EXPORT_DEADLINE}s): ending ${late% }"
      for n in $late; do end_job "$n"; done
      continue
    fi
  fi
  [ "$(left)" -gt 30 ] || { say "out of time: $(others)"; break; }
  sleep 1
done
watch_jobs
report

# ---------------------------------------------------------------- 3a. kernel timeline (CUPTI)
# HFS_TRACE_LIB: bench/trace/cupti_trace.c built (bench/trace/build.sh); each program of the --ncu
# variants decodes 32 tokens with graphs under it, bench/trace/trace_table.py summarises the idle
# time inside a step into <results>-trace.md.
TRACE=${RES%.md}-trace.md
trace() { # model variant
  local m=$1 v=$2 t lib
  exported "${m}_$v" || return 0
  t=$(($(left) - 25))
  [ "$t" -ge 30 ] || { say "trace ${m}_$v: skipped, ${t}s left"; return 0; }
  [ "$t" -le 60 ] || t=60
  lib=$(dirname "$("$PY" -c 'import glob, site; print((glob.glob(site.getsitepackages()[0] + "/nvidia/cu*/lib/libcupti.so*") + [""])[0])')")
  ET_TRACE_OUT=$W/logs/trace_${m}_$v.tsv LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} LD_PRELOAD=$HFS_TRACE_LIB \
    "$PY" "$TABLE" run "$W/logs/trace_${m}_$v.log" --timeout "$t" -- "$RUNNER" --manifest "$EX/${m}_$v/manifest.json" \
    --generate 32 --option enable_cuda_graph_for_method=forward
  "$PY" bench/trace/trace_table.py "$W/logs/trace_${m}_$v.tsv" --title "${m}_$v (graphs, 32 tokens)" >>"$TRACE" 2>&1
  say "trace ${m}_$v: $(grep -oE 'Step span [0-9.]+ µs = kernels busy [0-9.]+ µs \+ idle [0-9.]+ µs' "$TRACE" | tail -1)"
}
if [ -n "${HFS_TRACE_LIB:-}" ] && [ -n "$NCU_VARIANTS" ]; then
  for n in "${!PID[@]}"; do alive "$n" && end_job "$n"; done
  printf '# Kernel timeline of decode steps (CUPTI), bench/hf_scale.sh\n\nBundle %s; %s\n\n' "$COMMIT" "$(head -1 "$W/env.txt")" >"$TRACE"
  for v in ${NCU_VARIANTS//,/ }; do for m in $MS; do [ "$(left)" -gt 60 ] && trace "$m" "$v"; done; done
fi

# ---------------------------------------------------------------- 3. census (ncu), one decode step
census() { # model variant
  local m=$1 v=$2 t
  exported "${m}_$v" || return 0
  t=$(($(left) - 25))
  [ "$t" -ge 45 ] || { say "census ${m}_$v: skipped, ${t}s left"; return 0; }
  [ "$t" -le 150 ] || t=150
  "$PY" "$TABLE" run "$W/logs/ncu_${m}_$v.csv" --timeout "$t" -- "$NCU" --csv --print-units base --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$RUNNER" --manifest "$EX/${m}_$v/manifest.json" --generate 4
  say "census ${m}_$v: $("$PY" "$TABLE" census "$W/logs/ncu_${m}_$v.csv" 2>&1 | cut -c1-200)"
}
if [ -n "$NCU_VARIANTS" ]; then
  for n in "${!PID[@]}"; do alive "$n" && end_job "$n"; done
  if command -v "$NCU" >/dev/null; then
    for v in ${NCU_VARIANTS//,/ }; do for m in $MS; do [ "$(left)" -gt 60 ] && census "$m" "$v"; done; done
  else
    say "census: no $NCU on PATH"
  fi
  report
fi

# ---------------------------------------------------------------- the end
for n in "${!PID[@]}"; do alive "$n" && end_job "$n"; done
say "done"
report
mkdir -p "$OUT/raw"
cp "$EX"/ref_*.json "$OUT/raw/" 2>/dev/null
for m in $MS; do
  for v in $VS; do
    [ -f "$EX/${m}_$v/export.json" ] && cp "$EX/${m}_$v/export.json" "$OUT/raw/export_${m}_$v.json"
    [ -f "$EX/${m}_$v/manifest.json" ] && cp "$EX/${m}_$v/manifest.json" "$OUT/raw/manifest_${m}_$v.json"
  done
done
tar -cJf "$OUT/logs.tar.xz" -C "$W" logs timeline.txt env.txt plan.txt 2>/dev/null
cat "$RES" 2>/dev/null | sed -n '1,/^## Timeline/p'
echo "results: $RES"
[ -f "$CENSUS" ] && echo "census: $CENSUS"
exit 0
