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
# finish (the results file, the logs packed) and stopped (on a signal): bench/side_by_side_results.sh.
source "$BENCH/side_by_side_results.sh"
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
# The runs: one call, a configuration, a program (bench/side_by_side_runs.sh).
source "$BENCH/side_by_side_runs.sh"

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
# Waiting for the exports, the reference's slot (bench/side_by_side_rs.sh).
source "$BENCH/side_by_side_rs.sh"

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
