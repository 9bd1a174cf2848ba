#!/usr/bin/env bash
# Upstream today, side by side (issue 22), on the GPU machine in one command:
#
#   bash scripts/gpu.sh side-by-side       (runs this script: bash bench/side_by_side.sh)
#
# 1. exports the ExecuTorch 1.4.1 programs that are not cached yet (tests/models/export_et14.py with
#    the et14 site of tests/models/wheels.sh; programs stay in SBS_MODELS for a later call on a warm
#    machine; the small ones also come back in $OUT/et14_models.tar.xz for SBS_MODELS_TAR), as two
#    exporters started together: the small programs, and the big ones (SBS_BIG: the 1B-shaped
#    llama, minutes to export) in their own process group;
# 2. meanwhile takes upstream's C++ backend at v1.4.1 and at the main commit of
#    bench/upstream/README.md from bench/upstream/pack.sh's archive, and rebuilds a build from
#    its carried sources (bench/upstream/build.sh --src) when its library does not load here
#    (or always, SBS_REBUILD=1);
# 3. once the small exports are done, the big export is paused (SIGSTOP to its process group: no
#    CPU or GPU work of it, its device memory frozen, so that it changes no measurement), each
#    small program runs through ours and every upstream build, then the big export goes on until
#    SBS_BIG_RESERVE seconds before the end of the budget (stopped there: "not exported") and the
#    big programs run last. Never a run while an export works (its autotuning would share the
#    GPU). Per program, the best configuration (graphs on the decode method + shared stream +
#    weight sharing) first, then plain; per configuration ours, then each upstream build; three
#    runner calls each: the manifest's cases (outputs against eager), a 1-round token loop (cold
#    start: process start to first token, load time, device memory) and an R-round token loop
#    (steady TTFT, prefill and decode tok/s, host waits per token, host CPU per token). A call
#    that times out skips the rest of its (program, backend, configuration). Every runner call runs
#    with --json (upstream's backend too: the runner prints its results the same way), read by
#    tests/models/runner_json.py;
# 4. bench/side_by_side_table.py: $OUT/<date>-<commit>-side-by-side.md (bench/results.py names it;
#    never over an existing file), printed last; $OUT/sbs_logs.tar.xz holds every log. After each
#    program, $OUT/sbs_partial.md has the table so far (removed once the dated file is written; a
#    SIGTERM or SIGINT writes the dated file from what ran).
#
# Environment (all optional):
#   OUT                 results (the device tool sets it; default /tmp/sbs_out)
#   SBS_BUNDLE / SBS_BUNDLE_TAR   scripts/gpu_bundle.sh's bundle, or it packed (default
#                       <repo>/.dev/gpu.tar.xz): et_cuda_run and our libraries
#   SBS_UPSTREAM_TAR    bench/upstream/pack.sh's archive (default <repo>/.dev/upstream/upstream_cuda_backends.tar.xz)
#   SBS_UPSTREAM_DIR    an unpacked one (its upstream/ folder's parent); default /tmp/sbs_u
#   SBS_BUILDS          which builds (folder name prefixes, default "v1.4.1 main")
#   SBS_REBUILD=1       rebuild every upstream build from its carried sources (nvcc, g++; ~1 min each
#                       on 16 cores, in the background during the exports; stopped after
#                       SBS_REBUILD_TIMEOUT s, default 240)
#   SBS_SITES           the folder with et14.tar.xz (default <repo>/.whl/models/sites); SBS_SITE14 where
#                       it is unpacked (default /tmp/site-et14)
#   SBS_MODELS          exported programs, reused (default /tmp/et14_models); SBS_MODELS_TAR=<f...>
#                       et14_models.tar.xz of an earlier call, unpacked into it first
#   SBS_PROGRAMS        default et14_qwen3_bf16,et14_gemma3_bf16,et14_qwen3_pd_bf16,et14_qwen3_int4tp_bf16,
#                       et14_llama1b_bf16 (the order of the runs, the big ones after the small ones)
#   SBS_BIG             the programs of SBS_PROGRAMS exported by the second exporter and run last
#                       (default et14_llama1b_bf16)
#   SBS_BUDGET          seconds from the start until every run has ended (default 525; the results and
#                       logs are written after it, in a few seconds)
#   SBS_EXPORT_BUDGET   the small exports: none starts after it, each is stopped 60 s later (default 240)
#   SBS_BIG_RESERVE     seconds of the budget kept for the big programs' runs: their export is stopped
#                       when fewer are left (default 100)
#   SBS_PAUSE_BIG=0     let the big export run on during the small programs' runs (default 1: paused;
#                       with 0 the small programs' figures are taken beside it, and the notes say so)
#   SBS_EXPORT_JOBS     parallel small exports (default 4)
#   SBS_EXPORT_ARGS     more arguments for export_et14.py (e.g. --fake-aoti: the real export path tested
#                       on a machine without a GPU, with SBS_RUNNER=bench/testdata/fake_runner.py)
#   SBS_GEN_N, SBS_GEN_ROUNDS   tokens per loop (default 48) and rounds of the steady run (default 3)
#   SBS_RUN_TIMEOUT     seconds per runner call of a small program (default 45); SBS_BIG_RUN_TIMEOUT of a
#                       big one (default 120)
#   SBS_WHAT            the results' index text (bench/results.py)
#   ET_RESULTS_COMMIT   the commit in the results file's name (default: git, else the bundle's COMMIT)
#   SBS_TEST_CPU=1      test on a machine without a GPU: bench/testdata/fake_runner.py, fake programs
#                       (bench/testdata/make_fakes.py) and fake upstream builds; numbers mean nothing.
#                       SBS_TEST_EXPORT_S / SBS_TEST_BIG_EXPORT_S: seconds the fake exports take
#
# Real scale only (issue 22's missing rows), one call of <= 600 s:
#
#   bash bench/side_by_side.sh --real-scale llama1b     (or qwen06b: the Qwen3-0.6B shape, exported faster)
#
#   No small program. From t=0, in parallel on all CPUs: tests/models/decode_llama.py exports the model's
#   base variant (ExecuTorch's CudaPartitioner as it is) and its companion variant (python/executorch_cuda
#   first) with the et14 site, each in its own process group with NCPU/2 compile threads, plus
#   decode_llama.py --mode ref (eager greedy tokens of the same 32-token prompt on the GPU, then waiting
#   for its slot). The upstream builds are unpacked meanwhile. An export still running SBS_BIG_RESERVE
#   (default 110) seconds before the end of the budget (default 560) is stopped: its rows say "not
#   exported" and the rest runs. Then, alone on the GPU: the reference's slot (eager decode tok/s, pinned
#   and pageable host-to-device bandwidth; skipped when time is short), CUDA context creation, and the
#   runs, best configuration first: the base export through ours, v1.4.1 and main, the companion export
#   through ours (upstream cannot load it: its .so imports aoti_torch_cuda_et_*, which only this library
#   provides); then plain in the same order. Each: a 1-round call (cold start, load, device memory, ours'
#   load_phases line) and a 2-round call (steady TTFT / prefill / decode tok/s, host waits and host time
#   per token) of --generate 128 (SBS_GEN_N) after the 32-token prompt (SBS_RS_PROMPT). Tokens are
#   compared with the reference's in the table (the runner is given none, so a mismatch does not hide the
#   figures). Results: $OUT/<date>-<commit>-side-by-side-real-scale.md with the targets (ours best /
#   upstream best on the base export >= 1.0x; ours on the companion export, best / upstream best on the
#   base export >= 1.5x), the same logs archive. --dry-run prints the plan. SBS_RS_REF=0: no reference.
#   CPU test: SBS_TEST_CPU=1 as above (fake exports, reference, runner); SBS_TEST_SLOW_EXPORT=<program>
#   makes that fake export take 300 s.
set -uo pipefail

RS=${SBS_REAL_SCALE:-}
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --real-scale) RS=${2:-}; shift; [ $# -gt 0 ] && shift ;;
    --real-scale=*) RS=${1#*=}; shift ;;
    --dry-run) DRY=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "side_by_side.sh: unknown argument '$1' (--real-scale llama1b|qwen06b, --dry-run, --help)" >&2; exit 2 ;;
  esac
done
case "$RS" in
  "" | llama1b | qwen06b) ;;
  *) echo "side_by_side.sh: --real-scale takes llama1b or qwen06b, not '$RS'" >&2; exit 2 ;;
esac

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
OUT=${OUT:-/tmp/sbs_out}
WORK=${SBS_WORK:-/tmp/sbs}
MODELS=${SBS_MODELS:-/tmp/et14_models}
UPDIR=${SBS_UPSTREAM_DIR:-/tmp/sbs_u}
SITE14=${SBS_SITE14:-/tmp/site-et14}
SITES=${SBS_SITES:-$ROOT/.whl/models/sites}
if [ -n "$RS" ]; then # real scale: the two exports of one model, nothing else (see the head)
  BUDGET=${SBS_BUDGET:-560}
  BIG_RESERVE=${SBS_BIG_RESERVE:-110}
  GEN_N=${SBS_GEN_N:-128}
  ROUNDS=${SBS_GEN_ROUNDS:-2}
  BIG_RUN_TIMEOUT=${SBS_BIG_RUN_TIMEOUT:-60}
  PROMPT=${SBS_RS_PROMPT:-32}
  PROGRAMS=("et14_${RS}_base" "et14_${RS}_companion")
  BIG=("${PROGRAMS[@]}")
  KINDS=(cold steady)
  TAG=side-by-side-real-scale
else
  BUDGET=${SBS_BUDGET:-525}
  BIG_RESERVE=${SBS_BIG_RESERVE:-100}
  GEN_N=${SBS_GEN_N:-48}
  ROUNDS=${SBS_GEN_ROUNDS:-3}
  BIG_RUN_TIMEOUT=${SBS_BIG_RUN_TIMEOUT:-120}
  IFS=, read -r -a PROGRAMS <<<"${SBS_PROGRAMS:-et14_qwen3_bf16,et14_gemma3_bf16,et14_qwen3_pd_bf16,et14_qwen3_int4tp_bf16,et14_llama1b_bf16}"
  IFS=, read -r -a BIG <<<"${SBS_BIG-et14_llama1b_bf16}"
  KINDS=(cases cold steady)
  TAG=side-by-side
fi
EXPORT_BUDGET=${SBS_EXPORT_BUDGET:-240}
PAUSE_BIG=${SBS_PAUSE_BIG:-1}
JOBS=${SBS_EXPORT_JOBS:-4}
RUN_TIMEOUT=${SBS_RUN_TIMEOUT:-45}
read -r -a BUILD_PREFIXES <<<"${SBS_BUILDS:-v1.4.1 main}"
CPU=${SBS_TEST_CPU:-0}
for n in BUDGET BIG_RESERVE GEN_N ROUNDS BIG_RUN_TIMEOUT RUN_TIMEOUT; do
  [[ ${!n} =~ ^[0-9]+$ ]] || { echo "side_by_side.sh: $n must be a number, not '${!n}'" >&2; exit 2; }
done
if [ "$DRY" = 1 ]; then
  if [ -n "$RS" ]; then
    echo "plan: --real-scale $RS, budget ${BUDGET}s (every run ended by then; the files a few seconds later)"
    echo "plan: t=0: exports ${PROGRAMS[*]} in parallel (tests/models/decode_llama.py, et14 site, $(($(nproc 2>/dev/null || echo 4) / 2)) compile threads each)$([ "${SBS_RS_REF:-1}" = 1 ] && echo "; reference: eager greedy tokens of the ${PROMPT}-token prompt")"
    echo "plan: exports still running at $((BUDGET - BIG_RESERVE))s are stopped (rows: not exported)"
    echo "plan: then alone on the GPU: reference slot (eager tok/s, pinned H2D), CUDA context creation, then the runs"
    for c in best plain; do
      echo "plan: $c: ${PROGRAMS[0]} through ours ${BUILD_PREFIXES[*]}; ${PROGRAMS[1]} through ours"
    done
    echo "plan: each: 1-round and ${ROUNDS}-round --generate $GEN_N (${BIG_RUN_TIMEOUT}s at most a call)"
  else
    echo "plan: programs ${PROGRAMS[*]} (big: ${BIG[*]}), budget ${BUDGET}s, builds ${BUILD_PREFIXES[*]}"
  fi
  echo "plan: results into $OUT (<date>-<commit>-$TAG.md)"
  exit 0
fi
START=$(date +%s)
DEADLINE=$((START + BUDGET))
RUN=$WORK/run
LOGS=$RUN/logs
INDEX=$RUN/runs.tsv
NOTES=$RUN/notes.txt
rm -rf "$RUN"
mkdir -p "$OUT" "$LOGS" "$MODELS" "$UPDIR"
: >"$INDEX"
: >"$NOTES"
say() { printf '[%3ds] %s\n' $(($(date +%s) - START)) "$*"; }
note() { printf '%s\n' "$*" >>"$NOTES"; say "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
csv() { local IFS=,; echo "$*"; }
is_big() { local b; for b in "${BIG[@]}"; do [ "$b" = "$1" ] && return 0; done; return 1; }
SMALL_P=() BIG_P=()
for p in "${PROGRAMS[@]}"; do if is_big "$p"; then BIG_P+=("$p"); else SMALL_P+=("$p"); fi; done

# sig_tree SIGNAL PID: the process group PID leads (the exporters are started with setsid), else PID
# and every descendant of it (/proc, no ps needed).
pgid_of() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f3; }
alive() { # PID runs (a zombie, exited but not yet reaped, does not)
  local st
  st=$(sed -E 's/^.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ]
}
sig_tree() {
  local s=$1 p=$2 k
  [ -d "/proc/$p" ] || return 0
  if [ "$(pgid_of "$p")" = "$p" ]; then
    kill -s "$s" -- "-$p" 2>/dev/null
    return 0
  fi
  kill -s "$s" "$p" 2>/dev/null
  for k in $(for f in /proc/[0-9]*/stat; do sed -E 's/^([0-9]+) .*\) [A-Za-z] ([0-9]+) .*/\1 \2/' "$f" 2>/dev/null; done |
    awk -v p="$p" '$2 == p { print $1 }'); do
    sig_tree "$s" "$k"
  done
}

# ------------------------------------------------------------------ the results file (at the end, or on a signal)
RESULT= CUR= CUR_ROW=() DONE=() UP_NAMES=() PACK_PID=
# row PROGRAM BACKEND CONFIG KIND RC LOG N ROUNDS
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$INDEX"; }
# table FILE: the results table of what ran so far (side_by_side_table.py never replaces FILE)
TABLE_ARGS=()
[ -n "$RS" ] && TABLE_ARGS=(--real-scale "$RS" --ref "$RUN/ref/ref_$RS.json")
table() { python3 "$BENCH/side_by_side_table.py" --index "$INDEX" --notes "$NOTES" "${TABLE_ARGS[@]}" --out "$1" >"$LOGS/table.log" 2>&1; }
finish() {
  trap - TERM INT
  note "elapsed: $(($(date +%s) - START))s"
  RESULT=$(python3 "$BENCH/results.py" name --dir "$OUT" --tag "$TAG")
  table "$RESULT" || { echo "side_by_side_table.py failed:"; tail -20 "$LOGS/table.log"; }
  [ -f "$RESULT" ] && rm -f "$OUT/sbs_partial.md"
  cp "$RESULT" "$RUN/" 2>/dev/null
  cp -r "$MODELS/.logs" "$RUN/export_logs" 2>/dev/null
  for p in "${PROGRAMS[@]}"; do
    [ -f "$MODELS/$p/export.json" ] && cp "$MODELS/$p/export.json" "$RUN/export_$p.json"
    [ -f "$MODELS/$p/manifest.json" ] && cp "$MODELS/$p/manifest.json" "$RUN/manifest_$p.json"
  done
  local T=$OUT/sbs_logs.tar.xz
  [ -e "$T" ] && T=$OUT/sbs_logs.$(basename "$RESULT" .md).tar.xz
  tar -C "$RUN" -cf - . | xz -T0 -6 >"$T" 2>/dev/null || echo "could not pack the logs"
  if [ -n "${PACK_PID:-}" ]; then
    wait "$PACK_PID" || echo "pack.py failed: $(tail -2 "$RUN/pack.log")"
  fi
  if [ -n "${BENCH_RESULTS_DIR:-}" ] && [ -f "$RESULT" ]; then
    python3 "$BENCH/results.py" add "$RESULT" --dir "$BENCH_RESULTS_DIR" --index "${BENCH_RESULTS_INDEX:-$BENCH/RESULTS.md}" \
      --what "${SBS_WHAT:-side by side$([ -n "$RS" ] && echo " at real scale"): ExecuTorch 1.4.1 programs (${PROGRAMS[*]}), ours vs upstream ${UP_NAMES[*]}, plain and best}"
  fi
  echo
  echo "==================== $RESULT ($(($(date +%s) - START))s)"
  cat "$RESULT" 2>/dev/null || echo "(no results file)"
}
# stopped from outside (the device tool's time limit): the dated file from what ran
stopped() {
  note "stopped by a signal at +$(($(date +%s) - START))s; programs not run to the end: $(for p in "${SMALL_P[@]}" "${BIG_P[@]}"; do
    [[ " ${DONE[*]} " == *" $p "* ]] || printf '%s ' "$p"; done)"
  if [ -n "$CUR" ]; then
    kill -TERM "$CUR" 2>/dev/null
    wait "$CUR"
    row "${CUR_ROW[@]}"
  fi
  finish
  exit 143
}
trap stopped TERM INT

# ------------------------------------------------------------------ 0. bundle, runner
BUNDLE=${SBS_BUNDLE:-}
BTAR=${SBS_BUNDLE_TAR:-}
[ -z "$BUNDLE" ] && [ -z "$BTAR" ] && [ -f "$ROOT/.dev/gpu.tar.xz" ] && BTAR=$ROOT/.dev/gpu.tar.xz
if [ -z "$BUNDLE" ] && [ -n "$BTAR" ]; then
  rm -rf "$WORK/bundle" && mkdir -p "$WORK/bundle" && tar -xJf "$BTAR" -C "$WORK/bundle" ||
    note "ERROR: cannot unpack $BTAR"
  BUNDLE=$(dirname "$(find "$WORK/bundle" -maxdepth 3 -name et_cuda_run -type f | head -1)")
fi
[ -z "$BUNDLE" ] && BUNDLE=$ROOT/.dev/gpu
RUNNER=${SBS_RUNNER:-$BUNDLE/et_cuda_run}
if [ "$CPU" = 1 ]; then
  RUNNER=${SBS_RUNNER:-$BENCH/testdata/fake_runner.py}
fi
export ET_RESULTS_BUNDLE=$BUNDLE
note "commit: $(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import results; print(results.commit_id())' "$BENCH")"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | head -1)"
note "python: $(python3 -c 'import sys, importlib.metadata as m; print(sys.version.split()[0], "torch", m.version("torch"))' 2>&1 | tail -1)"
note "runner: $RUNNER"
if [ ! -x "$RUNNER" ]; then
  note "ERROR: no runner at $RUNNER (SBS_BUNDLE / SBS_BUNDLE_TAR from scripts/gpu_bundle.sh)"
elif [[ "$("$RUNNER" --help 2>/dev/null)" != *--json* ]]; then
  note "ERROR: $RUNNER has no --json (an older build): no figures can be read from its runs"
fi
RUNNER_JSON=$ROOT/tests/models/runner_json.py # et_cuda_run --json's reader

# ------------------------------------------------------------------ 1. exports (background)
SETSID=()
command -v setsid >/dev/null 2>&1 && SETSID=(setsid) # else sig_tree walks the descendants
NCPU=$(nproc 2>/dev/null || echo 4)
RS_PIDS=() RS_WAIT=() REF_PID=
FAKE_ARGS=()
[ -n "$RS" ] && FAKE_ARGS=(--rs)
for t in ${SBS_MODELS_TAR:-}; do
  tar -xJif "$t" -C "$MODELS" 2>>"$LOGS/unpack.log" && say "unpacked $t" || note "ERROR: cannot unpack $t"
done
missing_small=() missing_big=()
for p in "${SMALL_P[@]}"; do [ -f "$MODELS/$p/manifest.json" ] || missing_small+=("$p"); done
for p in "${BIG_P[@]}"; do [ -f "$MODELS/$p/manifest.json" ] || missing_big+=("$p"); done
SMALL_PID= BIG_PID= BIG_T0=
if [ $((${#missing_small[@]} + ${#missing_big[@]})) -eq 0 ]; then
  note "exports: all ${#PROGRAMS[@]} programs cached in $MODELS"
else
  can_export=1
  if [ "$CPU" != 1 ] && [ ! -f "$SITE14/executorch/exir/__init__.py" ]; then
    if [ -f "$SITES/et14.tar.xz" ]; then
      mkdir -p "$SITE14" && tar -xJf "$SITES/et14.tar.xz" -C "$SITE14" && chmod +x "$SITE14/executorch/data/bin/flatc" ||
        { note "ERROR: cannot unpack $SITES/et14.tar.xz"; can_export=0; }
    else
      note "ERROR: no $SITES/et14.tar.xz (tests/models/wheels.sh): ${missing_small[*]} ${missing_big[*]} cannot be exported"
      can_export=0
    fi
  fi
  if [ "$CPU" = 1 ]; then
    note "exporter: fake (bench/testdata/make_fakes.py)"
  elif [ "$can_export" = 1 ]; then
    # metadata only (no torch import: the exporters start at once; an import failure is in their logs)
    note "exporter: $(PYTHONPATH=$SITE14 python3 -c 'import importlib.metadata as m; print("executorch", m.version("executorch"), "torchao", m.version("torchao"), "torch", m.version("torch"))' 2>&1 | tail -1)"
  fi
  # Inductor's compile threads (max-autotune precompiles its GEMM templates with them): each small
  # export NCPU / JOBS, the big one 3/4 of NCPU (it goes on alone once the small ones are done)
  SMALL_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$((NCPU / JOBS > 1 ? NCPU / JOBS : 2))}
  BIG_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$((NCPU * 3 / 4 > 1 ? NCPU * 3 / 4 : 2))}
  # start_export GROUP THREADS SECONDS_FOR_THE_FAKE OUTER_TIMEOUT NAMES EXPORT_ARGS... (sets XPID)
  start_export() {
    local group=$1 threads=$2 fake_s=$3 outer=$4 names=$5
    shift 4
    local to=()
    [ "$outer" -gt 0 ] && to=(timeout -k 10 "$outer")
    if [ "$CPU" = 1 ]; then
      # in steps of 0.2 s, so that a pause (SIGSTOP) delays it as it would a real export
      "${SETSID[@]}" bash -c 'for ((i = 0; i < $1 * 5; i++)); do sleep 0.2; done
        python3 "$2" --suite "$3" --decoders "$4" "${@:5}" && echo "export $4: fake ok"' _ \
        "$fake_s" "$BENCH/testdata/make_fakes.py" "$MODELS" "$names" "${FAKE_ARGS[@]}" >"$LOGS/export.$group.log" 2>&1 &
    elif [ -n "$RS" ]; then
      # tests/models/decode_llama.py: one variant (base / companion, the program name's last part),
      # written into $MODELS/.rs/<program>/ and moved to $MODELS/<program> once complete (rs_collect)
      rm -rf "$MODELS/.rs/$group" && mkdir -p "$MODELS/.rs/$group"
      PYTHONPATH=$SITE14 PYTHONDONTWRITEBYTECODE=1 TORCHINDUCTOR_COMPILE_THREADS=$threads "${SETSID[@]}" \
        python3 "$ROOT/tests/models/decode_llama.py" "$MODELS/.rs/$group" --mode export --model "$RS" \
        --variants "${group##*_}" --prompt-len "$PROMPT" --steps "$GEN_N" >"$LOGS/export.$group.log" 2>&1 &
    else
      PYTHONPATH=$SITE14 PYTHONDONTWRITEBYTECODE=1 TORCHINDUCTOR_COMPILE_THREADS=$threads "${SETSID[@]}" "${to[@]}" \
        python3 "$ROOT/tests/models/export_et14.py" "$MODELS" ${SBS_EXPORT_ARGS:-} --only "$@" >"$LOGS/export.$group.log" 2>&1 &
    fi
    XPID=$!
  }
  if [ "$can_export" = 1 ] && [ "${#missing_big[@]}" -gt 0 ] && [ -n "$RS" ]; then
    # real scale: every export at once from t=0, each with half of the CPUs' compile threads; no
    # deadline of their own (stopped by rs_wait_exports)
    RS_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$((NCPU / 2 > 1 ? NCPU / 2 : 1))}
    for p in "${missing_big[@]}"; do
      fs=${SBS_TEST_BIG_EXPORT_S:-0}
      [ "$p" = "${SBS_TEST_SLOW_EXPORT:-}" ] && fs=300
      start_export "$p" "$RS_THREADS" "$fs" 0 "$p"
      RS_PIDS+=("$XPID") RS_WAIT+=("$p")
      say "exporting $p (pid $XPID; $RS_THREADS compile threads)"
    done
    BIG_T0=$(date +%s)
  elif [ "$can_export" = 1 ] && [ "${#missing_big[@]}" -gt 0 ]; then
    # no deadline or timeout of its own: paused during the small programs' runs, stopped here
    start_export big "$BIG_THREADS" "${SBS_TEST_BIG_EXPORT_S:-0}" 0 "$(csv "${missing_big[@]}")" --jobs 1 --timeout 100000
    BIG_PID=$XPID BIG_T0=$(date +%s)
    say "exporting ${missing_big[*]} (pid $BIG_PID; $BIG_THREADS compile threads)"
  fi
  if [ "$can_export" = 1 ] && [ "${#missing_small[@]}" -gt 0 ]; then
    start_export small "$SMALL_THREADS" "${SBS_TEST_EXPORT_S:-0}" $((EXPORT_BUDGET + 90)) "$(csv "${missing_small[@]}")" \
      --jobs "$JOBS" --deadline $((START + EXPORT_BUDGET)) --timeout $((EXPORT_BUDGET + 60))
    SMALL_PID=$XPID
    say "exporting ${missing_small[*]} ($JOBS at a time, pid $SMALL_PID; $SMALL_THREADS compile threads each)"
  fi
fi
# real scale: the eager reference (decode_llama.py --mode ref: greedy tokens of the same prompt on the
# GPU, written at once; then it waits for its slot, rs_ref_slot); no ExecuTorch needed
if [ -n "$RS" ] && [ "${SBS_RS_REF:-1}" = 1 ]; then
  mkdir -p "$RUN/ref"
  if [ "$CPU" = 1 ]; then
    "${SETSID[@]}" python3 "$BENCH/testdata/make_fakes.py" --ref "$RUN/ref" --model "$RS" --go "$RUN/go_ref" \
      --steps "$GEN_N" >"$LOGS/ref.log" 2>&1 &
  else
    OMP_NUM_THREADS=4 PYTHONDONTWRITEBYTECODE=1 "${SETSID[@]}" python3 "$ROOT/tests/models/decode_llama.py" "$RUN/ref" \
      --mode ref --model "$RS" --no-compile --go "$RUN/go_ref" --go-timeout 1000 --prompt-len "$PROMPT" \
      --steps "$GEN_N" >"$LOGS/ref.log" 2>&1 &
  fi
  REF_PID=$!
  say "reference: eager greedy tokens of $RS (pid $REF_PID)"
fi
# Whatever happens, no export outlives this script.
cleanup() {
  [ -n "$BIG_PID" ] && sig_tree CONT "$BIG_PID" && sig_tree KILL "$BIG_PID"
  [ -n "$SMALL_PID" ] && sig_tree KILL "$SMALL_PID"
  local p
  for p in "${RS_PIDS[@]}" $REF_PID; do [ -n "$p" ] && sig_tree KILL "$p"; done
  return 0
}
trap cleanup EXIT

# ------------------------------------------------------------------ 2. upstream builds
UTAR=${SBS_UPSTREAM_TAR:-$ROOT/.dev/upstream/upstream_cuda_backends.tar.xz}
if [ "$CPU" = 1 ]; then
  python3 "$BENCH/testdata/make_fakes.py" --upstream "$UPDIR" >"$LOGS/fake_upstream.log" 2>&1
elif [ -f "$UTAR" ]; then
  tar -xJf "$UTAR" -C "$UPDIR" 2>"$LOGS/upstream_unpack.log" && (cd "$UPDIR/upstream" && sha256sum -c --quiet SHA256SUMS) \
    >>"$LOGS/upstream_unpack.log" 2>&1 || note "ERROR: upstream archive $UTAR: $(tail -2 "$LOGS/upstream_unpack.log" | tr '\n' ' ')"
else
  [ -d "$UPDIR/upstream" ] || note "no upstream archive ($UTAR) and nothing in $UPDIR: upstream rows skipped"
fi
UP_LD=
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib \
  $(python3 -c 'import sys; print(" ".join(p + "/nvidia/cu13/lib " + p + "/nvidia/cuda_runtime/lib" for p in sys.path if p))' 2>/dev/null); do
  if [ -e "$d/libcudart.so.13" ]; then UP_LD=$d; break; fi
done
UP_NAMES=() UP_LIBS=() REBUILD_PIDS=()
for pre in "${BUILD_PREFIXES[@]}"; do
  d=$(find "$UPDIR/upstream" -mindepth 1 -maxdepth 1 -type d -name "$pre-*" ! -name '*own-runtime' 2>/dev/null | sort | head -1)
  if [ -z "$d" ]; then
    note "no upstream build $pre-* in $UPDIR/upstream"
    continue
  fi
  name=$(basename "$d")
  lib=$d/libupstream_cuda_backend.so
  note "upstream $name: $(grep -E '^(ref|commit):' "$d/BUILD_INFO.txt" 2>/dev/null | tr '\n' ' ')"
  need=0
  [ "${SBS_REBUILD:-0}" = 1 ] && need=1
  if [ "$CPU" != 1 ] && [ "$need" = 0 ]; then
    miss=$(LD_LIBRARY_PATH=$UP_LD${UP_LD:+:}$UPDIR/upstream/et/lib ldd "$lib" 2>&1 | grep -E 'not found|not a dynamic' | tr '\n' ' ')
    [ -n "$miss" ] && { note "upstream $name: does not load here ($miss): rebuilt from its sources"; need=1; }
  fi
  if [ "$need" = 1 ] && [ "$CPU" != 1 ]; then
    rb=$WORK/rebuilt/$name
    timeout -k 10 "${SBS_REBUILD_TIMEOUT:-240}" bash "$BENCH/upstream/build.sh" --src "$d/src" --et "$UPDIR/upstream/et" --out "$rb" \
      --jobs "$(nproc 2>/dev/null || echo 4)" >"$LOGS/rebuild.$name.log" 2>&1 &
    REBUILD_PIDS+=("$!:$name:$rb")
    lib=$rb/lib/libupstream_cuda_backend.so
  fi
  UP_NAMES+=("$name")
  UP_LIBS+=("$lib")
done
for e in "${REBUILD_PIDS[@]}"; do
  IFS=: read -r pid name rb <<<"$e"
  t0=$(date +%s)
  wait "$pid" && note "upstream $name: rebuilt in $(($(date +%s) - t0))+ s after the start of the wait ($rb)" ||
    note "ERROR: upstream $name: rebuild failed: $(tail -3 "$LOGS/rebuild.$name.log" | tr '\n' ' ')"
done

# ------------------------------------------------------------------ 3. runs (never during an export)
export_lines() { grep -E '^export ' "$LOGS/export.$1.log" 2>/dev/null | tr '\n' ';' | cut -c1-600; }
if [ -n "$SMALL_PID" ]; then
  wait "$SMALL_PID"
  rc=$?
  SMALL_PID=
  note "small exports done (rc $rc) at +$(($(date +%s) - START))s: $(export_lines small)"
fi
PAUSED_AT=
PAUSED_S=0
if [ -n "$BIG_PID" ] && alive "$BIG_PID" && [ "${#SMALL_P[@]}" -gt 0 ]; then
  if [ "$PAUSE_BIG" = 1 ]; then
    sig_tree STOP "$BIG_PID"
    PAUSED_AT=$(date +%s)
    note "big export (${missing_big[*]}) paused at +$((PAUSED_AT - START))s while the small programs run"
  else
    note "WARNING: the small programs ran while the big export (${missing_big[*]}) went on (SBS_PAUSE_BIG=0): their times and device memory were taken beside it"
  fi
fi
label() { case "$1" in main-*) echo "main ${1#main-}" ;; *) echo "${1%%-*}" ;; esac; }
CALL_TIMEOUT=$RUN_TIMEOUT
one() { # one PROGRAM BACKEND CONFIG KIND N ROUNDS ARGS...; returns the runner's status
  local prog=$1 backend=$2 config=$3 kind=$4 n=$5 rounds=$6
  shift 6
  local log lim
  log=$LOGS/$prog.$(printf '%s' "$backend" | tr -c 'A-Za-z0-9.-' '_').$config.$kind.log
  lim=$(left)
  if [ "$lim" -lt 5 ]; then
    row "$prog" "$backend" "$config" "$kind" skipped "" "$n" "$rounds"
    return 0
  fi
  [ "$lim" -gt "$CALL_TIMEOUT" ] && lim=$CALL_TIMEOUT
  local env=()
  [ "$backend" != ours ] && [ -n "$UP_LD" ] && env=(env "LD_LIBRARY_PATH=$UP_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  # in the background, so that a SIGTERM to this script is handled at once (bash runs a trap only
  # after the foreground command, but interrupts `wait`)
  python3 "$BENCH/sbs_exec.py" "$lim" "$log" -- "${env[@]}" "$RUNNER" "$@" --json &
  CUR=$! CUR_ROW=("$prog" "$backend" "$config" "$kind" 143 "logs/$(basename "$log")" "$n" "$rounds")
  wait "$CUR"
  local rc=$?
  CUR=
  row "$prog" "$backend" "$config" "$kind" "$rc" "logs/$(basename "$log")" "$n" "$rounds"
  say "rc=$rc $prog / $backend / $config / $kind: $(python3 -S "$RUNNER_JSON" brief "$log" case generate 2>/dev/null | tail -1 | cut -c1-140)"
  return $rc
}
partial() {
  local t=$RUN/partial.$(date +%s%N).md
  table "$t" && mv -f "$t" "$OUT/sbs_partial.md"
}
# run_config PROGRAM CONFIG: every backend's calls of one configuration (status 1: not exported)
run_config() {
  local prog=$1 c=$2 man=$MODELS/$1/manifest.json
  local backends=(ours) bi i b k lib extra opts rc args
  # upstream cannot load a companion program (its .so imports aoti_torch_cuda_et_*, ours only)
  if [ -z "$RS" ] || [[ $prog != *_companion ]]; then
    for i in "${!UP_NAMES[@]}"; do backends+=("$i"); done
  fi
  if [ ! -f "$man" ]; then
    if [ -n "$RS" ]; then # the rows say so, so that the comparisons name the reason
      for bi in "${backends[@]}"; do
        b=ours
        [ "$bi" != ours ] && b=$(label "${UP_NAMES[$bi]}")
        for k in "${KINDS[@]}"; do row "$prog" "$b" "$c" "$k" "not exported" "" "$GEN_N" 1; done
      done
    fi
    return 1
  fi
  local dec pre
  dec=$(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("generate") or {}; print(g.get("decode_method","forward"))' "$man" 2>/dev/null)
  pre=$(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("generate") or {}; print(g.get("prefill_method","forward"))' "$man" 2>/dev/null)
  local best=(--option "enable_cuda_graph_for_method=${dec:-forward}" --option use_shared_cuda_stream=true
    --option weight_sharing_across_methods=true)
  for bi in "${backends[@]}"; do
    if [ "$bi" = ours ]; then
      b=ours lib=() extra=(--stats)
    else
      b=$(label "${UP_NAMES[$bi]}") lib=(--backend-lib "${UP_LIBS[$bi]}") extra=()
      if [ ! -f "${UP_LIBS[$bi]}" ]; then
        for k in "${KINDS[@]}"; do row "$prog" "$b" "$c" "$k" "not run" "" "$GEN_N" 1; done
        continue
      fi
    fi
    opts=()
    if [ "$c" = best ]; then
      opts=("${best[@]}")
      # ours keeps the KV cache of a prefill+decode program in one place only with this option
      [ "$b" = ours ] && [ "$pre" != "$dec" ] && opts+=(--option share_mutable_buffers_across_methods=true)
    fi
    rc=0
    for k in "${KINDS[@]}"; do
      if [ "$rc" = 124 ]; then # a call that timed out: the rest of this backend and configuration is skipped
        row "$prog" "$b" "$c" "$k" skipped "" "$GEN_N" 1
        continue
      fi
      case $k in
        cases) args=(--manifest "$man" --mem) ;;
        cold) args=(--manifest "$man" --generate "$GEN_N" --generate-rounds 1 --mem) ;;
        steady) args=(--manifest "$man" --generate "$GEN_N" --generate-rounds "$ROUNDS" --mem) ;;
      esac
      local n=$GEN_N r=1
      [ "$k" = cases ] && n=0
      [ "$k" = steady ] && r=$ROUNDS
      one "$prog" "$b" "$c" "$k" "$n" "$r" "${lib[@]}" "${args[@]}" "${extra[@]}" "${opts[@]}"
      rc=$?
      [ "$rc" = 124 ] && note "$prog / $b / $c / $k: timed out (${CALL_TIMEOUT}s a call, or the end of the budget)$([ $k != steady ] && echo "; the rest of $b / $c skipped")"
    done
  done
  return 0
}
not_exported() {
  local why
  why=$(head -c 300 "$MODELS/.$1.failed.txt" 2>/dev/null)
  note "$1: not exported${why:+: $why} (see logs/export.*.log)"
}
run_program() {
  local prog=$1 c
  [ -f "$MODELS/$prog/manifest.json" ] || { not_exported "$prog"; return; }
  # best first: when the budget runs out, the comparison with graphs on both sides is what is left
  for c in best plain; do run_config "$prog" "$c"; done
  DONE+=("$prog")
  partial
}

CALL_TIMEOUT=$RUN_TIMEOUT
for prog in "${SMALL_P[@]}"; do run_program "$prog"; done
# the programs that fit (smallest first, <= 15 MiB) for SBS_MODELS_TAR next time; in the background
# while the big export goes on, done before the big programs run
PACK_PID=
if [ -z "$RS" ] && [ ! -e "$OUT/et14_models.tar.xz" ]; then
  python3 "$BENCH/pack.py" --models "$MODELS" --out "$OUT/et14_models.tar.xz" --limit-mb 15 >"$RUN/pack.log" 2>&1 &
  PACK_PID=$!
fi
if [ -n "$BIG_PID" ]; then
  if [ -n "$PAUSED_AT" ]; then
    sig_tree CONT "$BIG_PID"
    PAUSED_S=$(($(date +%s) - PAUSED_AT))
    note "big export resumed at +$(($(date +%s) - START))s (paused ${PAUSED_S}s)"
  fi
  stop_at=$((DEADLINE - BIG_RESERVE))
  while alive "$BIG_PID" && [ "$(date +%s)" -lt "$stop_at" ]; do sleep 1; done
  if alive "$BIG_PID"; then
    sig_tree TERM "$BIG_PID"
    sleep 3
    sig_tree KILL "$BIG_PID"
    note "big export (${missing_big[*]}) stopped at +$(($(date +%s) - START))s after $((stop_at - BIG_T0 - PAUSED_S))s of work (${BIG_RESERVE}s of the budget kept for the big programs' runs): not exported"
  fi
  wait "$BIG_PID"
  rc=$?
  BIG_PID=
  note "big export done (rc $rc) at +$(($(date +%s) - START))s: $(export_lines big)"
fi
if [ -n "$PACK_PID" ]; then
  wait "$PACK_PID" || echo "pack.py failed: $(tail -2 "$RUN/pack.log")"
  PACK_PID=
fi
CALL_TIMEOUT=$BIG_RUN_TIMEOUT
if [ -z "$RS" ]; then
  for prog in "${BIG_P[@]}"; do run_program "$prog"; done
  finish
  exit 0
fi

# ------------------------------------------------------------------ real scale: exports, reference, runs
RS_RUNS_S=${SBS_RS_RUNS_S:-90} # what the runs take (16 calls of ~3-5 s): the reference's slot only beyond it
export_summary() { # PROGRAM: one line from decode_llama.py's export.json, else the log's last line
  python3 - "$MODELS/$1/export.json" <<'PY' 2>/dev/null || grep -vE '^\s*$' "$LOGS/export.$1.log" 2>/dev/null | tail -1 | cut -c1-200
import json, sys
e = json.load(open(sys.argv[1]))
c = e.get("companion") or {}
print(f"{e.get('export_s')} s (torch.export {e.get('torch_export_s')} s, lowering {e.get('lower_s')} s), "
      f".ptd {e.get('ptd_bytes', 0) / 1e9:.3f} GB, {e.get('parameters', 0) / 1e9:.3f} B parameters"
      + (f", companion rewrite {json.dumps(c)}" if c else "") + f"; {e.get('versions', {})}")
PY
}
rs_collect() { # PROGRAM RC: the finished export into place, or why there is none
  local p=$1 rc=$2 v=${1##*_} src
  src=$MODELS/.rs/$p/$v
  [ "$RS" = llama1b ] || src=$MODELS/.rs/$p/${RS}_$v
  if [ -f "$src/manifest.json" ]; then
    rm -rf "${MODELS:?}/$p" && mv "$src" "$MODELS/$p" && rm -rf "$MODELS/.rs/$p"
  fi
  if [ -f "$MODELS/$p/manifest.json" ]; then
    rm -f "$MODELS/.$p.failed.txt"
    note "export $p: done (rc $rc) at +$(($(date +%s) - START))s: $(export_summary "$p")"
  else
    local why
    why=$(grep -vE '^\s*$' "$LOGS/export.$p.log" 2>/dev/null | tail -1 | cut -c1-250)
    echo "export failed (rc $rc): ${why:-no output}" >"$MODELS/.$p.failed.txt"
    note "export $p: FAILED (rc $rc) at +$(($(date +%s) - START))s: ${why:-no output}"
  fi
}
rs_wait_exports() { # until every export ended, or SBS_BIG_RESERVE seconds before the end (then stopped)
  local stop_at=$((DEADLINE - BIG_RESERVE)) i any rc
  while :; do
    any=0
    for i in "${!RS_PIDS[@]}"; do
      [ -n "${RS_PIDS[$i]}" ] || continue
      if alive "${RS_PIDS[$i]}"; then
        any=1
        continue
      fi
      wait "${RS_PIDS[$i]}"
      rc=$?
      RS_PIDS[i]=
      rs_collect "${RS_WAIT[$i]}" "$rc"
    done
    [ "$any" = 0 ] && break
    if [ "$(date +%s)" -ge "$stop_at" ]; then
      for i in "${!RS_PIDS[@]}"; do [ -n "${RS_PIDS[$i]}" ] && sig_tree TERM "${RS_PIDS[$i]}"; done
      sleep 3
      for i in "${!RS_PIDS[@]}"; do
        [ -n "${RS_PIDS[$i]}" ] || continue
        sig_tree KILL "${RS_PIDS[$i]}"
        wait "${RS_PIDS[$i]}" 2>/dev/null
        RS_PIDS[i]=
        echo "stopped at +$(($(date +%s) - START))s after $(($(date +%s) - BIG_T0))s of work (SBS_BIG_RESERVE=${BIG_RESERVE}s kept for the runs); last line: $(grep -vE '^\s*$' "$LOGS/export.${RS_WAIT[$i]}.log" 2>/dev/null | tail -1 | cut -c1-160)" \
          >"$MODELS/.${RS_WAIT[$i]}.failed.txt"
        note "export ${RS_WAIT[$i]}: stopped at its deadline (+$(($(date +%s) - START))s): not exported"
      done
      break
    fi
    sleep 1
  done
}
rs_ref_slot() { # the reference's timing slot (eager decode, host-to-device bandwidth), alone on the GPU
  [ -n "$REF_PID" ] || return 0
  local f=$RUN/ref/ref_$RS t0
  t0=$(date +%s)
  while alive "$REF_PID" && [ ! -f "$f.ready" ] && [ $(($(date +%s) - t0)) -lt 90 ] &&
    [ "$(left)" -gt $((RS_RUNS_S + 20)) ]; do sleep 0.5; done
  if [ -f "$f.ready" ] && alive "$REF_PID" && [ "$(left)" -gt $((RS_RUNS_S + 10)) ]; then
    touch "$RUN/go_ref"
    t0=$(date +%s)
    while alive "$REF_PID" && [ ! -f "$f.done" ] && [ $(($(date +%s) - t0)) -lt 30 ]; do sleep 0.2; done
  else
    note "reference: no timing slot ($([ -f "$f.ready" ] && echo "$(left)s left" || echo "not ready"))"
  fi
  if alive "$REF_PID"; then
    sig_tree TERM "$REF_PID"
    sleep 1
    sig_tree KILL "$REF_PID"
  fi
  wait "$REF_PID" 2>/dev/null
  REF_PID=
  note "reference: $(python3 - "$f.json" <<'PY' 2>&1 | tail -1
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("slot") or {}
h = (s.get("h2d") or {}).get("pinned") or {}
print(f"eager greedy tokens {len(r.get('tokens') or [])} (smallest top-1/top-2 margin {r.get('min_margin')}); "
      f"eager decode {(s.get('eager') or {}).get('decode_tok_s', 'n/a')} tok/s; pinned H2D {h.get('best_gb_s', 'n/a')} GB/s; "
      f"pageable {((s.get('h2d') or {}).get('pageable') or {}).get('best_gb_s', 'n/a')} GB/s")
PY
)"
}

[ "${#RS_PIDS[@]}" -gt 0 ] && rs_wait_exports
rs_ref_slot
note "$(python3 "$BENCH/real_scale_table.py" ctx 2>&1 | tail -1) (CUDA context creation, alone on the GPU)"
BASE_P=${BIG_P[0]} COMP_P=${BIG_P[1]}
for p in "${BIG_P[@]}"; do [ -f "$MODELS/$p/manifest.json" ] || not_exported "$p"; done
[ "${#UP_NAMES[@]}" -gt 0 ] && note "the companion export: upstream not run ($COMP_P's .so imports aoti_torch_cuda_et_*, which only this library provides)"
# best first (base through every backend, then the companion), then plain in the same order
for c in best plain; do
  for p in "${BIG_P[@]}"; do run_config "$p" "$c"; done
  partial
done
DONE=("${BIG_P[@]}")
finish
