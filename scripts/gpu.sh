#!/usr/bin/env bash
# The one way into the GPU suites, on the GPU machine, from the repository root of the copy:
#
#   bash scripts/gpu.sh <suite> [args]      runs the suite's script with the remaining arguments
#   bash scripts/gpu.sh <suite> --help      what the suite runs and its settings (runs nothing)
#   bash scripts/gpu.sh --dry-run <suite> [args]   prints the command it would run, runs nothing
#   bash scripts/gpu.sh --help              the suites
#
# Build here first: scripts/gpu_bundle.sh packs .dev/gpu (et_cuda_run, the libraries, the Rust GPU
# test binaries, the fixtures, bench/); carry it as .dev/gpu or packed (tar -cJf .dev/gpu.tar.xz -C
# .dev gpu). Each suite is a script of its own (below), which stays the implementation: its
# variables (OUT, BENCH_*, SBS_*, SUITE_*, ...) and its exit status are this command's. Where a
# script needs the bundle's folder and none is given, this passes the bundle: $GPU_BUNDLE, else
# $GPU_BUNDLE_TAR unpacked, else .dev/gpu, else .dev/gpu.tar.xz unpacked (into /tmp/gpu_bundle, or
# $GPU_BUNDLE_DIR; again only when the archive changed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# suite | script | what it runs
SUITES="unit|scripts/gpu_run.sh|the bundle's checks (the bundle's run.sh): C/C++ API, adapter and header tests, et_cuda_run on the fixtures and the example, every Rust GPU test binary (gpu, gpu_features, bad_input, sort_rand_gpu, decode_gpu, sample_gpu, the GEMM's GPU tests), shim_alloc; args: [BUNDLE]. With --decode: tests/models/decode_gpu.sh (the decode kernels' tests and bench, python/tests, the Llama-3.2-1B-shaped export with and without the companion, its token loop); args: --decode [BUNDLE] [OUT]
suite|tests/models/gpu_suite.sh|the model suite: exports of real architectures (ExecuTorch 1.2 and 1.5.1), every program x backend x mode through et_cuda_run (tests/models/README.md); args: [BUNDLE]
real-scale|bench/real_scale.sh|issue 21's real-scale rows: the Llama-3.2-1B-shaped decoder exported in the call, token loops, ncu census; args: bench/real_scale.sh's flags
hf-scale|bench/hf_scale.sh|HuggingFace transformers decoders at real scale (llama1b, qwen06b, gemma1b), base and companion exports, token loops, ncu; args: bench/hf_scale.sh's flags
side-by-side|bench/side_by_side.sh|ExecuTorch 1.4.1 programs through ours and upstream's C++ backend (v1.4.1, main), plain and best, cases, token loops, cold start, memory; args: [--real-scale llama1b|qwen06b] [--dry-run]
sanitizer|scripts/gpu_sanitize.sh|compute-sanitizer (memcheck with leak check, racecheck, synccheck, initcheck) over et_cuda_run on the fixtures and the suite's ExecuTorch 1.5.1 programs; args: [BUNDLE] [OUT]
bench|bench/run.sh|the benchmark: ours, upstream, token loops, PyTorch eager / CUDA graph / AOTI, int4, one dated results file (bench/README.md); no args: BENCH_* variables
runner|runner/gpu/check.sh|the runner's own GPU checks: et_cuda_run on the fixtures, a dynamic-batch MLP and a tiny stateful decoder it exports (exit statuses, dynamic shapes, stateful cases, the token loop, error paths), optionally through upstream's backend too (UPSTREAM_BACKEND_LIB); args: [BUNDLE]
runtime|python/tests/gpu_runtime.py|the Python path: enable(), the example or --manifest programs through executorch.runtime (or the bridge) against et_cuda_run, bad inputs, per-execute overhead, --llm token loops; args: gpu_runtime.py's flags (--runner defaults to the bundle's)
session|scripts/gpu_session.sh|one call that runs the suite (with upstream's v1.2.0 backend), the unit checks and more side by side inside the 10-minute limit (its head: what it carries)
verify|scripts/gpu_verify.sh|one call that re-checks the library after a change: host time per execute against an older build (.dev/old), load/execute/destroy cycles, the suite's programs
combo|scripts/gpu_combo.sh|one call of COMBO_PARTS (suite, example, llm, tests, text, sanitize, gemv) side by side
extras|scripts/gpu_extras.sh|short checks beside bench/real_scale.sh's exports: the device sampler, per-FQN ExecuTorch 1.5.1 programs, the blob pin knob, whisper's graph memory, the allocation-node probe, leak checks (EXTRAS_PARTS)
graph-memory|scripts/gpu_ab.sh|CUDA-graph memory A/B (private blocks against allocation nodes) after the session suite left its programs in /tmp/et_models"

field() { # field SUITE N: the N-th field (1 script, 2 what) of SUITE's line, or nothing
  local name script what
  while IFS='|' read -r name script what; do
    if [ "$name" = "$1" ]; then
      [ "$2" = 1 ] && echo "$script" || echo "$what"
      return 0
    fi
  done <<<"$SUITES"
  return 1
}

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  echo
  echo "Suites (bash scripts/gpu.sh <suite> --help for one):"
  local name script what
  while IFS='|' read -r name script what; do
    printf '  %-13s %s\n' "$name" "$script"
    printf '%s\n' "$what" | fold -s -w 84 | sed 's/ *$//; s/^/                /'
  done <<<"$SUITES"
  echo
}

suite_help() { # suite_help SUITE: what it runs and the script's own head
  local script
  script=$(field "$1" 1)
  echo "bash scripts/gpu.sh $1 [args] runs $script: $(field "$1" 2)"
  echo
  case "$script" in
    *.py) python3 -c 'import ast, sys; print(ast.get_docstring(ast.parse(open(sys.argv[1]).read())))' "$ROOT/$script" ;;
    *) sed -n '2,/^\([^#]\|$\)/p' "$ROOT/$script" | sed '$d; s/^# \{0,1\}//' ;;
  esac
  [ "$1" = unit ] && { echo; echo "--decode: tests/models/decode_gpu.sh"; sed -n '2,/^\([^#]\|$\)/p' "$ROOT/tests/models/decode_gpu.sh" | sed '$d; s/^# \{0,1\}//'; }
  return 0
}

die() { echo "gpu.sh: $*" >&2; exit 2; }

bundle() { # the bundle's folder (see the head)
  if [ -n "${GPU_BUNDLE:-}" ]; then echo "$GPU_BUNDLE"; return; fi
  if [ -z "${GPU_BUNDLE_TAR:-}" ] && [ -x "$ROOT/.dev/gpu/et_cuda_run" ]; then echo "$ROOT/.dev/gpu"; return; fi
  local tar=${GPU_BUNDLE_TAR:-$ROOT/.dev/gpu.tar.xz} dir=${GPU_BUNDLE_DIR:-/tmp/gpu_bundle} stamp
  [ -f "$tar" ] || die "no bundle: neither GPU_BUNDLE, .dev/gpu nor $tar (scripts/gpu_bundle.sh)"
  stamp=$(stat -c '%s %Y' "$tar")
  if [ "$(cat "$dir/.from" 2>/dev/null)" != "$stamp" ] || [ ! -x "$dir/gpu/et_cuda_run" ]; then
    rm -rf "$dir/gpu"
    if ! mkdir -p "$dir" || ! tar -xJf "$tar" -C "$dir"; then die "cannot unpack $tar into $dir"; fi
    echo "$stamp" >"$dir/.from"
  fi
  [ -x "$dir/gpu/et_cuda_run" ] || die "$tar has no gpu/et_cuda_run"
  echo "$dir/gpu"
}

# is_bundle ARG: whether ARG is a bundle's folder (given instead of the default one)
is_bundle() { [ -n "${1:-}" ] && [ -x "$1/et_cuda_run" ]; }

# run CMD...: runs it in place of this script (with --dry-run: prints it, quoted as for the shell)
run() {
  if [ "$DRY" = 1 ]; then
    printf '%q ' "$@" | sed 's/ $//'
    echo
    exit 0
  fi
  exec "$@"
}

DRY=0
[ "${1:-}" = --dry-run ] && { DRY=1; shift; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in
  -h | --help | help) usage; exit 0 ;;
esac
SUITE=$1
shift
field "$SUITE" 1 >/dev/null || die "unknown suite '$SUITE' (bash scripts/gpu.sh --help lists them)"
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  suite_help "$SUITE"
  exit 0
fi
cd "$ROOT" || exit 2

case "$SUITE" in
  unit)
    if [ "${1:-}" = --decode ]; then
      shift
      is_bundle "${1:-}" || set -- "$(bundle)" "$@"
      [ -n "$1" ] || exit 2
      run bash tests/models/decode_gpu.sh "$@"
    fi
    if is_bundle "${1:-}"; then B=$1; shift; else B=$(bundle) || exit 2; fi
    [ $# -eq 0 ] || die "unit: unexpected arguments: $* (unit [BUNDLE], unit --decode [BUNDLE] [OUT])"
    [ -f "$B/run.sh" ] || die "unit: $B has no run.sh (scripts/gpu_bundle.sh copies scripts/gpu_run.sh there)"
    run bash "$B/run.sh"
    ;;
  suite | sanitizer | runner)
    is_bundle "${1:-}" || set -- "$(bundle)" "$@"
    [ -n "$1" ] || exit 2
    run bash "$(field "$SUITE" 1)" "$@"
    ;;
  bench)
    [ $# -eq 0 ] || die "bench takes no arguments: its settings are BENCH_* variables (bash scripts/gpu.sh bench --help)"
    env=()
    if [ -z "${BENCH_BUNDLE:-}" ] && [ -z "${BENCH_BUNDLE_TAR:-}" ]; then
      B=$(bundle) || exit 2
      env=(env "BENCH_BUNDLE=$B")
    fi
    run "${env[@]}" bash bench/run.sh
    ;;
  runtime)
    B='' runner=(--runner)
    for a in "$@"; do [[ $a == --runner || $a == --runner=* ]] && runner=(); done
    if [ "${#runner[@]}" -gt 0 ] || [ -z "${EXECUTORCH_CUDA_LIB_DIR:-}" ]; then B=$(bundle) || exit 2; fi
    [ "${#runner[@]}" -gt 0 ] && runner+=("$B/et_cuda_run")
    run env "EXECUTORCH_CUDA_LIB_DIR=${EXECUTORCH_CUDA_LIB_DIR:-$B}" python3 python/tests/gpu_runtime.py "${runner[@]}" "$@"
    ;;
  *)
    run bash "$(field "$SUITE" 1)" "$@"
    ;;
esac
