#!/usr/bin/env bash
# Smoke test of upstream's CUDA backend libraries (build.sh / pack.sh) on the
# GPU machine, over the shared fixtures. Every check runs; a summary table is
# printed last.
#
# Usage: bench/upstream/smoke.sh LIB RUNNER FIXTURES_DIR
#   LIB           a libupstream_cuda_backend.so, or a folder holding several
#                 (e.g. /tmp/upstream unpacked from pack.sh's archive: every
#                 */libupstream_cuda_backend.so in it is tested)
#   RUNNER        et_cuda_run built with --backend-lib support, or "-" to skip
#                 the runner checks (a runner without the flag is skipped too)
#   FIXTURES_DIR  folder of fixture folders (manifest.json, model.pte, *.ptd)
# Environment:
#   SMOKE_MAIN  smoke_main binary (default: bin/smoke_main next to the library
#               folders, i.e. <bundle>/bin/smoke_main)
#   OUT         when set, the full log and the summary are written there
#               (upstream_smoke.log, upstream_smoke_summary.txt)
#   TIMEOUT     seconds per check (default 180)
# Status words: OK; REFUSED-HOST-IO (the backend refused tensors whose
# device_type is CPU, i.e. a program exported without device memory planning,
# as by ExecuTorch 1.2: expected from upstream >= v1.3.0); SKIP; FAIL.
# Exit status: 0 when no check FAILed.
set -uo pipefail

if [ $# -ne 3 ]; then
  sed -n '2,25p' "$0" >&2
  exit 2
fi
LIBARG=$1 RUNNER=$2 FIX=$3
TIMEOUT=${TIMEOUT:-180}
LOGDIR=${OUT:-$(mktemp -d)}
mkdir -p "$LOGDIR"
LOG=$LOGDIR/upstream_smoke.log
SUMMARY=$LOGDIR/upstream_smoke_summary.txt
: > "$LOG"
rows=()

libs=()
if [ -d "$LIBARG" ]; then
  while IFS= read -r f; do libs+=("$f"); done < <(find "$LIBARG" -mindepth 2 -maxdepth 3 -name libupstream_cuda_backend.so | sort)
  bundle=$LIBARG
else
  libs=("$LIBARG")
  bundle=$(cd "$(dirname "$LIBARG")/.." && pwd)
fi
[ ${#libs[@]} -gt 0 ] || { echo "no libupstream_cuda_backend.so under $LIBARG" >&2; exit 2; }
SMOKE_MAIN=${SMOKE_MAIN:-$bundle/bin/smoke_main}
[ -x "$SMOKE_MAIN" ] || SMOKE_MAIN=
preload=()
[ -f "$bundle/et/lib/libexecutorch_kernels_optimized.so" ] && preload=(--preload "$bundle/et/lib/libexecutorch_kernels_optimized.so")

{
  echo "# upstream smoke $(date -u +%FT%TZ) on $(hostname)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "libs: ${libs[*]}"
  echo "runner: $RUNNER; smoke_main: ${SMOKE_MAIN:-none}; fixtures: $FIX"
} | tee -a "$LOG"

# libcudart.so.13: the libraries' RUNPATH names /usr/local/cuda/lib64; if the
# loader still cannot find it, look where CUDA installs and pip wheels put it.
if ldd "${libs[0]}" 2>/dev/null | grep -q 'libcudart.*not found'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib \
           $(python3 -c 'import sys; print(" ".join(p + "/nvidia/cu13/lib " + p + "/nvidia/cuda_runtime/lib" for p in sys.path if p))' 2>/dev/null); do
    if [ -e "$d/libcudart.so.13" ]; then
      export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      echo "libcudart.so.13 from $d (LD_LIBRARY_PATH)" | tee -a "$LOG"
      break
    fi
  done
fi

runner_ok=0
if [ "$RUNNER" != "-" ]; then
  if [ -x "$RUNNER" ] && "$RUNNER" --help 2>&1 | grep -q -- '--backend-lib'; then
    runner_ok=1
  else
    echo "runner $RUNNER: missing or without --backend-lib: runner checks skipped" | tee -a "$LOG"
  fi
fi

# check LABEL LIB FIXTURE CMD...: runs CMD, logs it, adds a summary row.
check() {
  local label=$1 lib=$2 fixture=$3; shift 3
  local out rc status detail
  {
    printf '\n==> [%s] %s %s\n$' "$(basename "$(dirname "$lib")")" "$fixture" "$label"
    printf ' %q' "$@"
    echo
  } >> "$LOG"
  out=$(timeout "$TIMEOUT" "$@" 2>&1)
  rc=$?
  printf '%s\nrc=%d\n' "$out" "$rc" >> "$LOG"
  if [ $rc -eq 0 ]; then
    status=OK
    detail=$(echo "$out" | grep -m1 -E '^\s+out0:|PASS|p50|max' | cut -c1-90)
  elif echo "$out" | grep -q 'expected device_type=CUDA'; then
    status=REFUSED-HOST-IO
    detail=$(echo "$out" | grep -m1 'expected device_type=CUDA' | sed 's/.*\] //' | cut -c1-90)
  else
    status=FAIL
    [ $rc -eq 124 ] && status=FAIL-TIMEOUT
    # The most specific line: a load or run failure, else the program's FAIL
    # line, else any error log line.
    detail=$(echo "$out" | grep -m1 -E 'Failed to load|failed with|Init failed|CUDA error|cuda.*error|Abort|Segmentation' \
             || echo "$out" | grep -m1 -E 'FAIL' || echo "$out" | grep -m1 -E '^E |rror')
    detail=$(echo "$detail" | sed 's/.*\] //' | cut -c1-90)
  fi
  rows+=("$(printf '%-26s %-10s %-34s %-16s %s' "$(basename "$(dirname "$lib")")" "$fixture" "$label" "$status" "$detail")")
}

for lib in "${libs[@]}"; do
  {
    echo
    echo "### $lib"
    cat "$(dirname "$lib")/BUILD_INFO.txt" 2>/dev/null | grep -E '^(ref|commit|executorch_runtime|library|NEEDED):'
    ldd "$lib" | grep -E 'cudart|executorch|not found'
  } >> "$LOG"
  # A build against its own runtime (pack.sh put libexecutorch.so beside it)
  # has its own smoke_main, and the runner (1.5.1 runtime) cannot use it.
  own_runtime=0
  smoke=$SMOKE_MAIN
  pl=("${preload[@]}")
  if [ -f "$(dirname "$lib")/libexecutorch.so" ]; then
    own_runtime=1
    smoke=$(dirname "$lib")/smoke_main
    pl=()  # the kernels library belongs to the 1.5.1 runtime
  fi
  graphs=0
  grep -q enable_cuda_graph_for_method "$lib" && graphs=1
  for m in "$FIX"/*/manifest.json; do
    [ -f "$m" ] || continue
    d=$(dirname "$m")
    fx=$(basename "$d")
    pte=$d/model.pte
    ptd=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print((m.get("data") or [""])[0])' "$m" 2>/dev/null)
    if [ -n "$ptd" ]; then
      case "$ptd" in /*) ;; *) ptd=$d/$ptd ;; esac
    else
      ptd=$(ls "$d"/*.ptd 2>/dev/null | head -1)
    fi
    data=()
    [ -n "$ptd" ] && data=("$ptd")
    if [ -n "$smoke" ]; then
      check "smoke_main" "$lib" "$fx" "$smoke" "$lib" "$pte" "${data[@]}" "${pl[@]}"
      check "smoke_main shared_stream" "$lib" "$fx" "$smoke" "$lib" "$pte" "${data[@]}" "${pl[@]}" \
        --option use_shared_cuda_stream=true
    fi
    if [ $runner_ok -eq 1 ] && [ $own_runtime -eq 1 ]; then
      rows+=("$(printf '%-26s %-10s %-34s %-16s %s' "$(basename "$(dirname "$lib")")" "$fx" "runner" SKIP "built against its own runtime, not the runner's 1.5.1")")
    elif [ $runner_ok -eq 1 ]; then
      check "runner manifest" "$lib" "$fx" "$RUNNER" --backend-lib "$lib" --manifest "$m"
      check "runner shared_stream" "$lib" "$fx" "$RUNNER" --backend-lib "$lib" --manifest "$m" \
        --option use_shared_cuda_stream=true
      if [ $graphs -eq 1 ]; then
        check "runner cuda_graph bench" "$lib" "$fx" "$RUNNER" --backend-lib "$lib" --manifest "$m" \
          --option enable_cuda_graph_for_method=forward --bench 50 --warmup 10
      fi
    fi
  done
done

{
  printf '\n%-26s %-10s %-34s %-16s %s\n' build fixture check status detail
  for r in "${rows[@]}"; do echo "$r"; done
} > "$SUMMARY"
cat "$SUMMARY" >> "$LOG"
echo "log: $LOG"
cat "$SUMMARY"
! grep -q ' FAIL' "$SUMMARY"
