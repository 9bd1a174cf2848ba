#!/usr/bin/env bash
# Upstream today, side by side (issue 22), on the GPU machine in one command:
#
#   bash bench/side_by_side.sh
#
# 1. exports the ExecuTorch 1.4.1 programs that are not cached yet (tests/models/export_et14.py with
#    the et14 site of tests/models/wheels.sh; programs stay in SBS_MODELS for a later call on a warm
#    machine; the small ones also come back in $OUT/et14_models.tar.xz for SBS_MODELS_TAR);
# 2. meanwhile takes upstream's C++ backend at v1.4.1 and at the main commit of
#    bench/upstream/README.md from bench/upstream/pack.sh's archive, and rebuilds a build from
#    its carried sources (bench/upstream/build.sh --src) when its library does not load here
#    (or always, SBS_REBUILD=1);
# 3. once the exports are done (never while they run: their autotuning would share the GPU), each
#    program through ours and every upstream build, plain and in the best configuration
#    (graphs on the decode method + shared stream + weight sharing), three runner calls each:
#    the manifest's cases (outputs against eager), a 1-round token loop (cold start: process start
#    to first token, load time, device memory) and an R-round token loop (steady TTFT, prefill and
#    decode tok/s, host waits per token, host CPU per token);
# 4. bench/side_by_side_table.py: $OUT/<date>-<commit>-side-by-side.md (bench/results.py names it;
#    never over an existing file), printed last; $OUT/sbs_logs.tar.xz holds every log.
#
# Environment (all optional):
#   OUT                 results (the device tool sets it; default /tmp/sbs_out)
#   SBS_BUNDLE / SBS_BUNDLE_TAR   scripts/gpu_bundle.sh's bundle, or it packed (default
#                       <repo>/.dev/gpu.tar.xz): et_cuda_run and our libraries
#   SBS_UPSTREAM_TAR    bench/upstream/pack.sh's archive (default <repo>/.dev/upstream/upstream_cuda_backends.tar.xz)
#   SBS_UPSTREAM_DIR    an unpacked one (its upstream/ folder's parent); default /tmp/sbs_u
#   SBS_BUILDS          which builds (folder name prefixes, default "v1.4.1 main")
#   SBS_REBUILD=1       rebuild every upstream build from its carried sources (nvcc, g++; ~1 min each
#                       on 16 cores, in the background during the exports)
#   SBS_SITES           the folder with et14.tar.xz (default <repo>/.whl/models/sites); SBS_SITE14 where
#                       it is unpacked (default /tmp/site-et14)
#   SBS_MODELS          exported programs, reused (default /tmp/et14_models); SBS_MODELS_TAR=<f...>
#                       et14_models.tar.xz of an earlier call, unpacked into it first
#   SBS_PROGRAMS        default et14_llama1b_bf16,et14_qwen3_bf16,et14_gemma3_bf16,et14_qwen3_pd_bf16,
#                       et14_qwen3_int4tp_bf16 (the order of the runs; the 1B is exported first)
#   SBS_BUDGET          seconds until the last run may start (default 540); SBS_EXPORT_BUDGET no
#                       export starts after it (default 330; the exporter stops them 60 s later)
#   SBS_EXPORT_JOBS     parallel exports (default 3)
#   SBS_GEN_N, SBS_GEN_ROUNDS   tokens per loop (default 48) and rounds of the steady run (default 3)
#   SBS_RUN_TIMEOUT     seconds per runner call (default 90)
#   SBS_WHAT            the results' index text (bench/results.py)
#   ET_RESULTS_COMMIT   the commit in the results file's name (default: git, else the bundle's COMMIT)
#   SBS_TEST_CPU=1      test on a machine without a GPU: bench/testdata/fake_runner.py, fake programs
#                       (bench/testdata/make_fakes.py) and fake upstream builds; numbers mean nothing
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
OUT=${OUT:-/tmp/sbs_out}
WORK=${SBS_WORK:-/tmp/sbs}
MODELS=${SBS_MODELS:-/tmp/et14_models}
UPDIR=${SBS_UPSTREAM_DIR:-/tmp/sbs_u}
SITE14=${SBS_SITE14:-/tmp/site-et14}
SITES=${SBS_SITES:-$ROOT/.whl/models/sites}
BUDGET=${SBS_BUDGET:-540}
EXPORT_BUDGET=${SBS_EXPORT_BUDGET:-330}
JOBS=${SBS_EXPORT_JOBS:-3}
GEN_N=${SBS_GEN_N:-48}
ROUNDS=${SBS_GEN_ROUNDS:-3}
RUN_TIMEOUT=${SBS_RUN_TIMEOUT:-90}
IFS=, read -r -a PROGRAMS <<<"${SBS_PROGRAMS:-et14_llama1b_bf16,et14_qwen3_bf16,et14_gemma3_bf16,et14_qwen3_pd_bf16,et14_qwen3_int4tp_bf16}"
read -r -a BUILD_PREFIXES <<<"${SBS_BUILDS:-v1.4.1 main}"
CPU=${SBS_TEST_CPU:-0}
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
[ -x "$RUNNER" ] || note "ERROR: no runner at $RUNNER (SBS_BUNDLE / SBS_BUNDLE_TAR from scripts/gpu_bundle.sh)"

# ------------------------------------------------------------------ 1. exports (background)
for t in ${SBS_MODELS_TAR:-}; do
  tar -xJif "$t" -C "$MODELS" 2>>"$LOGS/unpack.log" && say "unpacked $t" || note "ERROR: cannot unpack $t"
done
missing=()
for p in "${PROGRAMS[@]}"; do [ -f "$MODELS/$p/manifest.json" ] || missing+=("$p"); done
EXPORT_PID=
if [ "${#missing[@]}" -eq 0 ]; then
  note "exports: all ${#PROGRAMS[@]} programs cached in $MODELS"
elif [ "$CPU" = 1 ]; then
  python3 "$BENCH/testdata/make_fakes.py" --suite "$MODELS" --decoders "$(csv "${missing[@]}")" >"$LOGS/export.log" 2>&1
  note "exports (fake): ${missing[*]}"
else
  if [ ! -f "$SITE14/executorch/exir/__init__.py" ]; then
    if [ -f "$SITES/et14.tar.xz" ]; then
      mkdir -p "$SITE14" && tar -xJf "$SITES/et14.tar.xz" -C "$SITE14" && chmod +x "$SITE14/executorch/data/bin/flatc" ||
        note "ERROR: cannot unpack $SITES/et14.tar.xz"
    else
      note "ERROR: no $SITES/et14.tar.xz (tests/models/wheels.sh): ${missing[*]} cannot be exported"
    fi
  fi
  if PYTHONPATH=$SITE14 python3 -c 'import executorch.exir, torchao' >"$LOGS/site14.log" 2>&1; then
    note "exporter: $(PYTHONPATH=$SITE14 python3 -c 'import importlib.metadata as m; print("executorch", m.version("executorch"), "torchao", m.version("torchao"), "torch", m.version("torch"))' 2>&1 | tail -1)"
    NCPU=$(nproc 2>/dev/null || echo 4)
    export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$((NCPU / JOBS > 1 ? NCPU / JOBS : 2))}
    say "exporting ${missing[*]} ($JOBS at a time)"
    PYTHONPATH=$SITE14 PYTHONDONTWRITEBYTECODE=1 timeout -k 10 $((EXPORT_BUDGET + 90)) \
      python3 "$ROOT/tests/models/export_et14.py" "$MODELS" --only "$(csv "${missing[@]}")" --jobs "$JOBS" \
      --deadline $((START + EXPORT_BUDGET)) --timeout $((EXPORT_BUDGET + 60)) >"$LOGS/export.log" 2>&1 &
    EXPORT_PID=$!
  else
    note "ERROR: the ExecuTorch 1.4.1 site does not import with this torch: $(tail -2 "$LOGS/site14.log" | tr '\n' ' ')"
  fi
fi

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
    bash "$BENCH/upstream/build.sh" --src "$d/src" --et "$UPDIR/upstream/et" --out "$rb" \
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

# ------------------------------------------------------------------ 3. runs (after the exports)
if [ -n "$EXPORT_PID" ]; then
  wait "$EXPORT_PID"
  note "exports done (rc $?) at +$(($(date +%s) - START))s: $(grep -E '^export ' "$LOGS/export.log" | tr '\n' ';' | cut -c1-600)"
fi
label() { case "$1" in main-*) echo "main ${1#main-}" ;; *) echo "${1%%-*}" ;; esac; }
# row PROGRAM BACKEND CONFIG KIND RC LOG N ROUNDS
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$INDEX"; }
one() { # one PROGRAM BACKEND CONFIG KIND N ROUNDS ARGS...
  local prog=$1 backend=$2 config=$3 kind=$4 n=$5 rounds=$6
  shift 6
  local log lim
  log=$LOGS/$prog.$(printf '%s' "$backend" | tr -c 'A-Za-z0-9.-' '_').$config.$kind.log
  lim=$(left)
  if [ "$lim" -lt 5 ]; then
    row "$prog" "$backend" "$config" "$kind" skipped "" "$n" "$rounds"
    return
  fi
  [ "$lim" -gt "$RUN_TIMEOUT" ] && lim=$RUN_TIMEOUT
  local env=()
  [ "$backend" != ours ] && [ -n "$UP_LD" ] && env=(env "LD_LIBRARY_PATH=$UP_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  python3 "$BENCH/sbs_exec.py" "$lim" "$log" -- "${env[@]}" "$RUNNER" "$@"
  local rc=$?
  row "$prog" "$backend" "$config" "$kind" "$rc" "logs/$(basename "$log")" "$n" "$rounds"
  say "rc=$rc $prog / $backend / $config / $kind: $(grep -E '^generate: |max_abs_err' "$log" | tail -1 | cut -c1-140)"
}
for prog in "${PROGRAMS[@]}"; do
  man=$MODELS/$prog/manifest.json
  if [ ! -f "$man" ]; then
    why=$(cat "$MODELS/.$prog.failed.txt" 2>/dev/null | head -c 300)
    note "$prog: not exported${why:+: $why} (see logs/export.log)"
    continue
  fi
  dec=$(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("generate") or {}; print(g.get("decode_method","forward"))' "$man" 2>/dev/null)
  pre=$(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("generate") or {}; print(g.get("prefill_method","forward"))' "$man" 2>/dev/null)
  best=(--option "enable_cuda_graph_for_method=${dec:-forward}" --option use_shared_cuda_stream=true
    --option weight_sharing_across_methods=true)
  backends=(ours)
  for i in "${!UP_NAMES[@]}"; do backends+=("$i"); done
  for bi in "${backends[@]}"; do
    if [ "$bi" = ours ]; then
      b=ours lib=() extra=(--stats)
    else
      b=$(label "${UP_NAMES[$bi]}") lib=(--backend-lib "${UP_LIBS[$bi]}") extra=()
      if [ ! -f "${UP_LIBS[$bi]}" ]; then
        for c in plain best; do for k in cases cold steady; do row "$prog" "$b" "$c" "$k" "not run" "" "$GEN_N" 1; done; done
        continue
      fi
    fi
    for c in plain best; do
      opts=()
      if [ "$c" = best ]; then
        opts=("${best[@]}")
        # ours keeps the KV cache of a prefill+decode program in one place only with this option
        [ "$b" = ours ] && [ "$pre" != "$dec" ] && opts+=(--option share_mutable_buffers_across_methods=true)
      fi
      one "$prog" "$b" "$c" cases 0 1 "${lib[@]}" --manifest "$man" --mem "${extra[@]}" "${opts[@]}"
      one "$prog" "$b" "$c" cold "$GEN_N" 1 "${lib[@]}" --manifest "$man" --generate "$GEN_N" --generate-rounds 1 \
        --mem "${extra[@]}" "${opts[@]}"
      one "$prog" "$b" "$c" steady "$GEN_N" "$ROUNDS" "${lib[@]}" --manifest "$man" --generate "$GEN_N" \
        --generate-rounds "$ROUNDS" --mem "${extra[@]}" "${opts[@]}"
    done
  done
done

# ------------------------------------------------------------------ 4. the results file
note "elapsed: $(($(date +%s) - START))s"
RESULT=$(python3 "$BENCH/results.py" name --dir "$OUT" --tag side-by-side)
python3 "$BENCH/side_by_side_table.py" --index "$INDEX" --notes "$NOTES" --out "$RESULT" >"$LOGS/table.log" 2>&1 ||
  { echo "side_by_side_table.py failed:"; tail -20 "$LOGS/table.log"; }
cp "$RESULT" "$RUN/" 2>/dev/null
cp "$LOGS/export.log" "$RUN/" 2>/dev/null
cp -r "$MODELS/.logs" "$RUN/export_logs" 2>/dev/null
T=$OUT/sbs_logs.tar.xz
[ -e "$T" ] && T=$OUT/sbs_logs.$(basename "$RESULT" .md).tar.xz
tar -C "$RUN" -cf - . | xz -T0 -6 >"$T" 2>/dev/null || echo "could not pack the logs"
# the programs that fit (smallest first, <= 15 MiB) for SBS_MODELS_TAR next time
[ -e "$OUT/et14_models.tar.xz" ] ||
  python3 "$BENCH/pack.py" --models "$MODELS" --out "$OUT/et14_models.tar.xz" --limit-mb 15 >"$RUN/pack.log" 2>&1 ||
  echo "pack.py failed: $(tail -2 "$RUN/pack.log")"
if [ -n "${BENCH_RESULTS_DIR:-}" ] && [ -f "$RESULT" ]; then
  python3 "$BENCH/results.py" add "$RESULT" --dir "$BENCH_RESULTS_DIR" --index "${BENCH_RESULTS_INDEX:-$BENCH/RESULTS.md}" \
    --what "${SBS_WHAT:-side by side: ExecuTorch 1.4.1 programs (${PROGRAMS[*]}), ours vs upstream ${UP_NAMES[*]}, plain and best}"
fi
echo
echo "==================== $RESULT ($(($(date +%s) - START))s)"
cat "$RESULT" 2>/dev/null || echo "(no results file)"
