#!/usr/bin/env bash
# The benchmark, on the GPU machine, in one command (bench/README.md):
#
#   bash scripts/gpu.sh bench      (the bundle passed as BENCH_BUNDLE; or, by hand,
#   BENCH_BUNDLE=.dev/gpu bash bench/run.sh, or bash .dev/gpu/bench/run.sh)
#
# 0. unpacks what was carried: the bench's own programs (BENCH_MODELS_TAR), the model
#    suite's programs (BENCH_SUITE_TAR), upstream's backend libraries (BENCH_UPSTREAM_TAR);
# 1. exports the bench programs that are still missing (bench/export.py, ExecuTorch 1.2, and
#    with --et15 the ExecuTorch 1.5.1 device-IO exports that upstream main can run) and compiles
#    PyTorch's AOTI packages, in parallel, at most BENCH_PHASE1 seconds;
# 2. then one at a time on the GPU, each section independent of the others' success:
#      ours      et_cuda_run per model and variant (+ CUDA graphs), pipeline, enqueue
#      upstream  the same programs through upstream's C++ backend (--backend-lib), every build
#      tokens    the suite's decoders: --generate N, ours with/without graphs and sharing, upstream
#      torch     PyTorch eager and CUDA-graph replay
#      int4      kernels/check_int4.py's bench phase (or BENCH_INT4_JSON)
#      aoti      PyTorch's AOTInductor runtime (with whatever time is left)
#    every et_cuda_run call runs with --json (its results as JSON lines: runner/README.md, "--json";
#    bench/table.py reads them with tests/models/runner_json.py) and also prints --mem (device
#    memory) and, with our backend, --stats;
# 3. bench/table.py: $OUT/<date>-<commit>-bench.md (targets with PASS/MISS first; bench/results.py
#    names it, never over an existing file), printed last.
# A section never starts a run that would pass its share of the time budget; what was skipped,
# refused or failed is listed in the notes. $OUT gets at most four files: the results file,
# bench_logs.tar.xz (every log, the run index, the JSON rows), bench_models.tar.xz (the exported
# programs, <= 15 MiB, smallest first: carry it back as BENCH_MODELS_TAR) and int4_results.json.
#
#   OUT=<dir>                results (the device tool sets it; default /tmp/et_cuda_bench/out)
#   BENCH_BUNDLE=<dir>       scripts/gpu_bundle.sh's bundle (et_cuda_run, libraries, fixtures,
#                            whl/); default: the folder above this script when it has
#                            et_cuda_run, else <repo>/.dev/gpu
#   BENCH_BUNDLE_TAR=<f>     the same as an archive (tar -cJf gpu.tar.xz -C .dev gpu), unpacked first
#   BENCH_WORK=<dir>         scratch (default /tmp/et_cuda_bench): models/, aoti/, suite/, logs
#   BENCH_MODELS=<dir>       the bench's exported programs, reused when present (default $BENCH_WORK/models)
#   BENCH_MODELS_TAR=<f...>  bench_models.tar.xz of an earlier run (space-separated list allowed)
#   BENCH_SUITE_DIR=<dir>    the model suite's programs (default /tmp/et_models when it exists
#                            (gpu_suite.sh's MODELS_DIR on a warm machine), else $BENCH_WORK/suite)
#   BENCH_SUITE_TAR=<f>      the suite's models.tar.xz, unpacked into BENCH_SUITE_DIR first
#   BENCH_UPSTREAM_DIR=<d>   unpacked upstream builds (bench/upstream/pack.sh: */libupstream_cuda_backend.so)
#   BENCH_UPSTREAM_TAR=<f>   upstream_cuda_backends.tar.xz, unpacked into $BENCH_WORK/u first
#   BENCH_SITES=<dir>        tests/models/wheels.sh's sites (et12.tar.xz, et15.tar.xz) for the exports;
#                            default <repo>/.whl/models/sites, else the bundle's whl/ wheels (ET 1.2 only)
#   BENCH_INT4_JSON=<f>      an int4_results.json from kernels/check_int4.py instead of its bench phase
#   BENCH_LIB=<f>            our libexecutorch_cuda.so for check_int4.py (default: the bundle's)
#   BENCH_BUDGET=<s>         whole run before the table (default 450); BENCH_PHASE1=<s> exports (default 170)
#   BENCH_EXPORT_JOBS=<n>    parallel export lanes (default 5)
#   BENCH_LIST=a,b           models to time (default deep_bf16,heavy_bf16,mlp_f32,conv_f32,attn_bf16)
#   BENCH_GRAPH_LIST=a,b     models with the CUDA-graph rows (default mlp_f32,conv_f32,attn_bf16,deep_bf16)
#   BENCH_ET15=0             no ExecuTorch 1.5.1 exports of the bench models
#   BENCH_RESERVE=s=n,...   seconds each section leaves to the later ones (default ours=165,
#                            upstream=115,tokens=65,torch=35): a section runs until DEADLINE - its value
#   BENCH_PIPELINE=0         no encdec export (its pipeline row is then skipped unless carried)
#   BENCH_DECODERS=a,b       suite decoders for the token loop (default qwen3_bf16,gemma3_bf16,
#                            qwen3_int4tp_bf16,qwen3_pd_bf16,et15_qwen3_bf16)
#   BENCH_GEN_N=<n>          tokens per token loop (default 48)
#   BENCH_GEN_ROUNDS=<r>     the loop this many times per run (--generate-rounds; default 3): the
#                            figures are the last round's, without first-call costs
#   BENCH_SECTIONS=...       default ours,upstream,tokens,torch,int4,aoti (drop a word to skip it)
#   BENCH_RUNNER=<f>         et_cuda_run to use (default: the bundle's)
#   BENCH_TAG=<t>            the results file's tag (default bench): $OUT/<date>-<commit>-<t>.md
#   BENCH_RESULTS_DIR=<dir>  also copy the results file into DIR (a fresh name) and append its line
#                            to BENCH_RESULTS_INDEX (default bench/RESULTS.md); BENCH_WHAT its text
#   ET_RESULTS_COMMIT=<c>    the commit in the file name (default: git, else the bundle's COMMIT file)
#   BENCH_TEST_CPU=1         test of this script on a machine without a GPU: bench/testdata/fake_runner.py
#                            stands in for et_cuda_run, a fake upstream folder and suite folder are made,
#                            exports run without delegation when torch is importable; numbers mean nothing
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${BENCH_BUNDLE_TAR:-}" ]; then
  # The bundle as one archive (tar -cJf gpu.tar.xz -C .dev gpu: 31 MB -> ~4 MB to carry).
  bdir=${BENCH_WORK:-/tmp/et_cuda_bench}/bundle
  rm -rf "$bdir" && mkdir -p "$bdir" && tar -xJf "$BENCH_BUNDLE_TAR" -C "$bdir" ||
    echo "ERROR: cannot unpack BENCH_BUNDLE_TAR=$BENCH_BUNDLE_TAR" >&2
  BENCH_BUNDLE=$(dirname "$(find "$bdir" -maxdepth 3 -name et_cuda_run -type f | head -1)")
fi
if [ -n "${BENCH_BUNDLE:-}" ]; then
  BUNDLE=$(cd "$BENCH_BUNDLE" 2>/dev/null && pwd || echo "$BENCH_BUNDLE")
elif [ -x "$BENCH/../et_cuda_run" ]; then
  BUNDLE=$(cd "$BENCH/.." && pwd)
else
  BUNDLE=$(cd "$BENCH/.." && pwd)/.dev/gpu
fi
# The repository (for kernels/check_int4.py and .whl/): above bench/, or the working directory.
REPO=
for d in "$BENCH/.." "$PWD" "$BUNDLE/../.."; do
  if [ -f "$d/kernels/check_int4.py" ]; then REPO=$(cd "$d" && pwd); break; fi
done
OUT=${OUT:-/tmp/et_cuda_bench/out}
WORK=${BENCH_WORK:-/tmp/et_cuda_bench}
MODELS=${BENCH_MODELS:-$WORK/models}
AOTI=${BENCH_AOTI:-$WORK/aoti}
if [ -n "${BENCH_SUITE_DIR:-}" ]; then
  SUITE=$BENCH_SUITE_DIR
elif [ -d /tmp/et_models ] && [ "${BENCH_TEST_CPU:-0}" != 1 ]; then
  SUITE=/tmp/et_models
else
  SUITE=$WORK/suite
fi
SITE=${BENCH_SITE:-/tmp/site-et12} # the model suite's folder names: shared on a warm machine
SITE15=${BENCH_SITE15:-/tmp/site-et15}
BUDGET=${BENCH_BUDGET:-450}
PHASE1=${BENCH_PHASE1:-170}
JOBS=${BENCH_EXPORT_JOBS:-5}
GEN_N=${BENCH_GEN_N:-48}
GEN_ROUNDS=${BENCH_GEN_ROUNDS:-3}
SECTIONS=",${BENCH_SECTIONS:-ours,upstream,tokens,torch,int4,aoti},"
FIXTURES=$BUNDLE/fixtures
RUNNER=${BENCH_RUNNER:-$BUNDLE/et_cuda_run}
RUN=$WORK/run # this run's logs; packed into $OUT/bench_logs.tar.xz
LOGS=$RUN/logs
INDEX=$RUN/runs.tsv  # model, variant, rc, log, section, backend, manifest, wall seconds
TORCH_ROWS=$RUN/torch.jsonl
NOTES=$RUN/notes.txt
INT4_JSON=$RUN/int4_results.json
START=$(date +%s)
DEADLINE=$((START + BUDGET))
CPU=${BENCH_TEST_CPU:-0}

rm -rf "$RUN"
mkdir -p "$OUT" "$LOGS" "$MODELS" "$AOTI" "$SUITE"
: >"$INDEX"
: >"$TORCH_ROWS"
: >"$NOTES"

# et_cuda_run --json's reader (bench/ in the bundle, tests/models/ in the repository).
RUNNER_JSON=$BENCH/runner_json.py
[ -f "$RUNNER_JSON" ] || RUNNER_JSON=$BENCH/../tests/models/runner_json.py
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
on() { [[ "$SECTIONS" == *",$1,"* ]]; }
csv() { local IFS=,; echo "$*"; }

OUR_MODELS=(deep_bf16 heavy_bf16 encdec)
FIXTURE_MODELS=(mlp_f32 conv_f32 attn_bf16)
IFS=, read -r -a BENCH_MODELS_LIST <<<"${BENCH_LIST:-deep_bf16,heavy_bf16,mlp_f32,conv_f32,attn_bf16}"
IFS=, read -r -a GRAPH_LIST <<<"${BENCH_GRAPH_LIST:-mlp_f32,conv_f32,attn_bf16,deep_bf16}"
IFS=, read -r -a DECODERS <<<"${BENCH_DECODERS:-qwen3_bf16,gemma3_bf16,qwen3_int4tp_bf16,qwen3_pd_bf16,et15_qwen3_bf16}"
# ExecuTorch 1.5.1 exports (device IO: what upstream main and v1.4.1 can run) of these.
ET15_MODELS=()
if [ "${BENCH_ET15:-1}" = 1 ]; then
  for m in "${GRAPH_LIST[@]}"; do ET15_MODELS+=("et15dev_$m"); done
fi
EXPORT_FLAGS=()
TORCH_FLAGS=()
N=1000 W=50 N_HEAVY=100 W_HEAVY=10 N_PIPE=1000 N_UP=1000
if [ "$CPU" = 1 ]; then
  EXPORT_FLAGS=(--no-delegate)
  TORCH_FLAGS=(--device cpu --n 20)
  N=20 W=2 N_HEAVY=5 W_HEAVY=1 N_PIPE=50 N_UP=20
  RUNNER=${BENCH_RUNNER:-$BENCH/testdata/fake_runner.py}
  [ -d "$FIXTURES" ] || FIXTURES=$WORK/fixtures
fi

say "bundle $BUNDLE, repo ${REPO:-?}, models $MODELS, suite $SUITE, results $OUT, budget ${BUDGET}s"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader 2>&1 | head -1)"
note "python: $(python3 -c 'import sys, importlib.metadata as m; print(sys.version.split()[0], "torch", m.version("torch"))' 2>&1 | tail -1)"
[ -x "$RUNNER" ] || note "ERROR: $RUNNER is missing: was the bundle made by scripts/gpu_bundle.sh? (BENCH_BUNDLE)"
# A runner older than these flags: the rows that need them say so instead of every run failing.
MEM_FLAG=(--mem)
RUNNER_HELP=$("$RUNNER" --help 2>/dev/null)
if [[ "$RUNNER_HELP" != *--mem* ]]; then
  MEM_FLAG=()
  note "ERROR: $RUNNER has no --mem (an older build): no device memory figures"
fi
[[ "$RUNNER_HELP" == *--json* ]] ||
  note "ERROR: $RUNNER has no --json (an older build): no figures can be read from its runs"
[[ "$RUNNER_HELP" == *--cases-on-device* ]] ||
  note "ERROR: $RUNNER has no --cases-on-device (an older build): upstream cannot run the et15dev_* device-IO programs"

# ------------------------------------------------------------------ 0. what was carried
unpack() { # unpack ARCHIVE DEST WHAT: tar -xJif (concatenated xz streams allowed)
  local log=$LOGS/unpack.$3.log
  if [ ! -f "$1" ]; then
    note "ERROR: $3: $1 does not exist"
  elif tar -xJif "$1" -C "$2" >"$log" 2>&1; then
    say "unpacked $1 into $2"
  else
    note "ERROR: $3: cannot unpack $1: $(tail -2 "$log" | tr '\n' ' ')"
  fi
}
for t in ${BENCH_MODELS_TAR:-}; do unpack "$t" "$MODELS" bench_models; done
[ -n "${BENCH_SUITE_TAR:-}" ] && unpack "$BENCH_SUITE_TAR" "$SUITE" suite
UPSTREAM=${BENCH_UPSTREAM_DIR:-}
if [ -n "${BENCH_UPSTREAM_TAR:-}" ]; then
  mkdir -p "$WORK/u"
  unpack "$BENCH_UPSTREAM_TAR" "$WORK/u" upstream
  [ -n "$UPSTREAM" ] || UPSTREAM=$WORK/u
fi
if [ "$CPU" = 1 ]; then
  # Stand-ins: upstream builds (the fake runner reads the folder name) and suite decoders.
  UPSTREAM=${UPSTREAM:-$WORK/fake_upstream}
  python3 "$BENCH/testdata/make_fakes.py" --upstream "$WORK/fake_upstream" --suite "$SUITE" \
    --decoders "$(csv "${DECODERS[@]}")" --fixtures "$FIXTURES" >"$LOGS/fakes.log" 2>&1 ||
    note "ERROR: make_fakes.py failed: $(tail -2 "$LOGS/fakes.log" | tr '\n' ' ')"
fi
# Upstream builds that our runner can load: linked against the pip 1.5.1 runtime (a build with
# its own libexecutorch.so beside it cannot share the runner's process).
UP_LIBS=() UP_NAMES=()
if [ -n "$UPSTREAM" ]; then
  while IFS= read -r lib; do
    d=$(dirname "$lib")
    if [ -f "$d/libexecutorch.so" ]; then
      note "upstream $(basename "$d"): built against its own runtime, not the runner's ExecuTorch 1.5.1: not run"
      continue
    fi
    UP_LIBS+=("$lib")
    UP_NAMES+=("$(basename "$d")")
  done < <(find "$UPSTREAM" -mindepth 2 -maxdepth 3 -name libupstream_cuda_backend.so 2>/dev/null |
    awk -F/ '{ d = $(NF-1); print (d ~ /^main/ ? "~" : d) "\t" $0 }' | sort -r | cut -f2-) # main, then newest tag first
  [ "${#UP_LIBS[@]}" -gt 0 ] || note "no upstream build under $UPSTREAM"
  for i in "${!UP_LIBS[@]}"; do
    info=$(dirname "${UP_LIBS[$i]}")/BUILD_INFO.txt
    [ -f "$info" ] && note "upstream ${UP_NAMES[$i]}: $(grep -E '^(ref|commit):' "$info" | tr '\n' ' ')"
  done
else
  note "no upstream builds given (BENCH_UPSTREAM_TAR or BENCH_UPSTREAM_DIR): upstream rows skipped"
fi
# libcudart.so.13 for upstream's libraries: their RUNPATH names /usr/local/cuda/lib64; else
# look where CUDA and the pip wheels put it (bench/upstream/smoke.sh does the same).
UP_LD=
if [ "${#UP_LIBS[@]}" -gt 0 ] && ldd "${UP_LIBS[0]}" 2>/dev/null | grep -q 'libcudart.*not found'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib \
    $(python3 -c 'import sys; print(" ".join(p + "/nvidia/cu13/lib " + p + "/nvidia/cuda_runtime/lib" for p in sys.path if p))' 2>/dev/null); do
    if [ -e "$d/libcudart.so.13" ]; then UP_LD=$d; note "upstream: libcudart.so.13 from $d"; break; fi
  done
fi
# up_label DIRNAME -> "main cff6f4dd32" / "v1.4.1" / "v1.2.0"
up_label() {
  case "$1" in
    main-*) echo "main ${1#main-}" ;;
    *) echo "${1%%-*}" ;;
  esac
}
# Whether a build has CUDA graphs (v1.3.0 and later know the option).
up_graphs() { grep -q enable_cuda_graph_for_method "$1" 2>/dev/null; }

# ------------------------------------------------------------------ 1. Python sites, exports, AOTI compiles
SITES=${BENCH_SITES:-}
[ -z "$SITES" ] && [ -n "$REPO" ] && [ -d "$REPO/.whl/models/sites" ] && SITES=$REPO/.whl/models/sites
install_site() { # install_site TARBALL DEST
  [ -f "$2/executorch/exir/__init__.py" ] && return 0
  mkdir -p "$2" && tar -xJf "$1" -C "$2" >"$LOGS/site.$(basename "$2").log" 2>&1
}
torch_ok=1
python3 -c 'import torch' >/dev/null 2>&1 || torch_ok=0
[ "$torch_ok" = 1 ] || note "python3 cannot import torch: exports, torch rows and the int4 bench are skipped"
missing12=() missing15=()
PIPE_MODEL=encdec
[ "${BENCH_PIPELINE:-1}" = 0 ] && PIPE_MODEL=
for m in heavy_bf16 deep_bf16 encdec "${FIXTURE_MODELS[@]}"; do # heaviest first
  [[ " ${BENCH_MODELS_LIST[*]} $PIPE_MODEL " == *" $m "* ]] || continue
  [ -f "$MODELS/$m/manifest.json" ] || missing12+=("$m")
done
if on upstream; then
  for m in "${ET15_MODELS[@]}"; do [ -f "$MODELS/$m/manifest.json" ] || missing15+=("$m"); done
fi
[ "$torch_ok" = 1 ] || missing15=()
if [ "$torch_ok" = 1 ] && [ "${#missing12[@]}" -gt 0 ]; then
  if [ -n "$SITES" ] && [ -f "$SITES/et12.tar.xz" ]; then
    install_site "$SITES/et12.tar.xz" "$SITE" || note "ERROR: cannot unpack $SITES/et12.tar.xz"
  elif [ ! -f "$SITE/executorch/exir/__init__.py" ] && ! compgen -G "$BUNDLE/whl/executorch-*.whl" >/dev/null; then
    note "ERROR: no ExecuTorch 1.2 for the exports: no BENCH_SITES (et12.tar.xz) and no wheels in $BUNDLE/whl"
  elif [ ! -f "$SITE/executorch/exir/__init__.py" ]; then
    say "installing $(ls "$BUNDLE"/whl/*.whl 2>/dev/null | wc -l) wheel(s) into $SITE"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$BUNDLE"/whl/*.whl \
      >"$LOGS/pip.log" 2>&1 || note "ERROR: pip install of the wheels failed (exports will fail): $(tail -3 "$LOGS/pip.log" | tr '\n' ' ')"
  fi
fi
if [ "${#missing15[@]}" -gt 0 ]; then
  if [ -n "$SITES" ] && [ -f "$SITES/et15.tar.xz" ]; then
    install_site "$SITES/et15.tar.xz" "$SITE15" || note "ERROR: cannot unpack $SITES/et15.tar.xz"
  fi
  if [ ! -f "$SITE15/executorch/exir/__init__.py" ]; then
    note "no ExecuTorch 1.5.1 site (BENCH_SITES=<dir with et15.tar.xz>): ${missing15[*]} not exported"
    missing15=()
  fi
fi
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-4}
pids=()
P1_END=$(($(date +%s) + PHASE1)) # no export runs past it
export_lane() { # export_lane SITE LOG FLAGS... -- NAMES...
  local site=$1 log=$2
  shift 2
  chmod +x "$site/executorch/data/bin/flatc" 2>/dev/null
  FLATC_EXECUTABLE=$site/executorch/data/bin/flatc PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} \
    timeout -k 5 "$(cap $((P1_END - $(date +%s))))" python3 "$BENCH/export.py" "$MODELS" "$@" "${EXPORT_FLAGS[@]}" >"$log" 2>&1
}
if [ "$torch_ok" = 1 ] && [ $((${#missing12[@]} + ${#missing15[@]})) -gt 0 ]; then
  # Lanes: longest first, each to the lane with the least work so far (seconds each took on the
  # H200 machine with 3-4 exports at a time); ET 1.2 and 1.5.1 exports in separate processes.
  cost() {
    case "$1" in
      *encdec) echo 112 ;; *heavy_bf16) echo 105 ;; *deep_bf16) echo 88 ;; *conv_f32) echo 14 ;; *) echo 24 ;;
    esac
  }
  all=()
  for m in "${missing12[@]}"; do all+=("$(cost "$m") 12:$m"); done
  for m in "${missing15[@]}"; do all+=("$(cost "$m") 15:$m"); done
  mapfile -t all < <(printf '%s\n' "${all[@]}" | sort -rn | cut -d' ' -f2)
  declare -a load lanes
  for ((lane = 0; lane < JOBS; lane++)); do load[$lane]=0 lanes[$lane]=""; done
  for item in "${all[@]}"; do
    best=0
    for ((lane = 1; lane < JOBS; lane++)); do [ "${load[$lane]}" -lt "${load[$best]}" ] && best=$lane; done
    load[$best]=$((load[best] + $(cost "$item")))
    lanes[$best]="${lanes[$best]} $item"
  done
  say "exporting ${all[*]} ($JOBS lane(s), at most ${PHASE1}s; estimated $(printf '%s\n' "${load[@]}" | sort -rn | head -1)s)"
  for ((lane = 0; lane < JOBS; lane++)); do
    n12=() n15=()
    for item in ${lanes[$lane]}; do
      case "$item" in 12:*) n12+=("${item#12:}") ;; 15:*) n15+=("${item#15:}") ;; esac
    done
    [ $((${#n12[@]} + ${#n15[@]})) -gt 0 ] || continue
    (
      [ "${#n12[@]}" -gt 0 ] && export_lane "$SITE" "$LOGS/export.lane$lane.log" "${n12[@]}"
      [ "${#n15[@]}" -gt 0 ] && export_lane "$SITE15" "$LOGS/export15.lane$lane.log" --et15 "${n15[@]}"
    ) &
    pids+=($!)
  done
else
  say "no program to export (in $MODELS: $(ls "$MODELS" 2>/dev/null | tr '\n' ' '))"
fi
if on aoti && [ "$torch_ok" = 1 ]; then
  say "compiling PyTorch AOTI packages (at most ${PHASE1}s)"
  # Niced: the exports, which the GPU sections need, go first.
  timeout -k 5 "$(cap $((PHASE1 + 10)))" nice -n 10 python3 "$BENCH/torch_bench.py" aoti --compile-only \
    --models "$(csv "${BENCH_MODELS_LIST[@]}")" --pkg-dir "$AOTI" --fixtures "$FIXTURES" --models-dir "$MODELS" \
    --compile-timeout "$PHASE1" --deadline "$DEADLINE" --out "$TORCH_ROWS" --log "$LOGS/aoti_children.log" "${TORCH_FLAGS[@]}" \
    >"$LOGS/aoti_compile.log" 2>&1 &
  pids+=($!)
fi
for p in "${pids[@]}"; do wait "$p"; done
grep -h '^export ' "$LOGS"/export*.lane*.log 2>/dev/null | while read -r line; do note "$line"; done
grep -h '^aoti-compile ' "$LOGS/aoti_compile.log" 2>/dev/null | while read -r line; do note "$line"; done
for m in "${missing12[@]}" "${missing15[@]}"; do
  [ -f "$MODELS/$m/manifest.json" ] || note "not exported: $m (see logs/export*.lane*.log)"
done
if [ "$CPU" = 1 ] && [ "$torch_ok" = 0 ]; then
  # No torch here: placeholder manifests so that the runs below (fake runner) have programs.
  python3 "$BENCH/testdata/make_fakes.py" --models "$MODELS" --names \
    "$(csv "${BENCH_MODELS_LIST[@]}" encdec "${ET15_MODELS[@]}")" >>"$LOGS/fakes.log" 2>&1
fi
say "phase 1 done"

# ------------------------------------------------------------------ 2. GPU runs, one at a time (bench/run_gpu.sh)
source "$BENCH/run_gpu.sh"

# ------------------------------------------------------------------ 3. the table, the files
note "elapsed: $(($(date +%s) - START))s"
# The results file: <date>-<commit>-<tag>.md, a fresh name (never an existing file replaced).
RESULT=$(ET_RESULTS_BUNDLE=$BUNDLE python3 "$BENCH/results.py" name --dir "$OUT" --tag "${BENCH_TAG:-bench}")
python3 "$BENCH/table.py" --index "$INDEX" --torch "$TORCH_ROWS" --notes "$NOTES" --int4 "$INT4_JSON" \
  --gen-n "$GEN_N" --out "$RESULT" >"$LOGS/table.log" 2>&1 || {
  echo "table.py failed:"
  tail -20 "$LOGS/table.log"
}
# Kept in a results folder with its index line (here: BENCH_RESULTS_DIR=bench/results; on the GPU
# machine the file comes back in $OUT and `bench/results.py add` does this on the way in).
if [ -n "${BENCH_RESULTS_DIR:-}" ] && [ -f "$RESULT" ]; then
  python3 "$BENCH/results.py" add "$RESULT" --dir "$BENCH_RESULTS_DIR" \
    --index "${BENCH_RESULTS_INDEX:-$BENCH/RESULTS.md}" \
    --what "${BENCH_WHAT:-bench/run.sh: sections ${SECTIONS//,/ } models ${BENCH_MODELS_LIST[*]}}" ||
    echo "results.py add failed: $RESULT stays in $OUT only"
fi
[ -f "$INT4_JSON" ] && cp "$INT4_JSON" "$OUT/int4_results.json"
python3 "$BENCH/pack.py" --models "$MODELS" --out "$OUT/bench_models.tar.xz" --limit-mb 15 >"$LOGS/pack.log" 2>&1 ||
  echo "pack.py failed: $(tail -3 "$LOGS/pack.log")"
cat "$LOGS/pack.log"
cp "$RESULT" "$RUN/" 2>/dev/null
# A second run into the same $OUT keeps the first run's archive too.
LOGS_TAR=$OUT/bench_logs.tar.xz
[ -e "$LOGS_TAR" ] && LOGS_TAR=$OUT/bench_logs.$(basename "$RESULT" .md).tar.xz
tar -C "$RUN" -cf - . | xz -T0 -6 >"$LOGS_TAR" 2>/dev/null || echo "could not pack the logs"
echo
echo "==================== $RESULT ($(($(date +%s) - START))s)"
cat "$RESULT" 2>/dev/null || echo "(no results file)"
