#!/usr/bin/env bash
# CPU test of scripts/gpu.sh, the GPU suites' dispatcher (no GPU): --help lists every suite, a suite's
# --help runs nothing, an unknown suite or stray arguments are refused, and --dry-run shows the
# command each suite runs: the bundle passed where the script needs one (given, GPU_BUNDLE, or an
# archive unpacked once and again only when it changed), the other arguments passed through; then
# two real runs: unit on a stand-in bundle, side-by-side --real-scale llama1b --dry-run (the plan).
# Ends with "gpu.sh: N passed, N failed"; exit status 1 when anything failed.
# shellcheck disable=SC2015,SC2016  # ok || bad one-liners; the stand-in run.sh is written as it is
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=bench/testdata/checks.sh
source "$ROOT/bench/testdata/checks.sh"
G=(bash "$ROOT/scripts/gpu.sh")
# is OUTPUT WANT NAME: OUTPUT equals WANT
is() { if [ "$1" = "$2" ]; then ok "$3"; else bad "$3: got '$1', want '$2'"; fi; }

"${G[@]}" --help >"$T/help" 2>&1 && ok "--help exits 0" || bad "--help: exit status $?"
for s in unit suite real-scale hf-scale side-by-side sanitizer runner bench runtime session verify combo extras graph-memory; do
  grep -qE "^  $s +[a-z]" "$T/help" && ok "--help lists $s" || bad "--help does not list $s"
done
"${G[@]}" >/dev/null 2>&1
is "$?" 2 "no suite: exit status 2"
"${G[@]}" nosuch >/dev/null 2>"$T/err"
is "$?" 2 "unknown suite: exit status 2"
has "$T/err" "unknown suite 'nosuch'" "unknown suite named"
out=$("${G[@]}" bench --help 2>&1) && [[ $out == *"runs bench/run.sh"* && $out == *BENCH_BUDGET* ]] &&
  ok "bench --help: what it runs and its variables" || bad "bench --help: ${out:0:200}"
out=$("${G[@]}" unit --help 2>&1) && [[ $out == *"scripts/gpu_run.sh"* && $out == *"decode_gpu.sh BUNDLE_DIR"* ]] &&
  ok "unit --help: gpu_run.sh and decode_gpu.sh" || bad "unit --help: ${out:0:200}"

# A stand-in bundle, packed as scripts/gpu_bundle.sh's bundle is carried.
mkdir -p "$T/b/gpu"
printf '#!/bin/sh\necho fake runner\n' >"$T/b/gpu/et_cuda_run"
printf 'cd "$(dirname "$0")"\necho "fake run.sh in $(basename "$PWD") args=$#"\n' >"$T/b/gpu/run.sh"
chmod +x "$T/b/gpu/et_cuda_run"
tar -cJf "$T/gpu.tar.xz" -C "$T/b" gpu
E=(env -u GPU_BUNDLE GPU_BUNDLE_TAR="$T/gpu.tar.xz" GPU_BUNDLE_DIR="$T/u")
D=$T/u/gpu
is "$("${E[@]}" "${G[@]}" --dry-run unit)" "bash $D/run.sh" "unit: the unpacked bundle's run.sh"
touch "$D/marker"
"${E[@]}" "${G[@]}" --dry-run unit >/dev/null
[ -f "$D/marker" ] && ok "bundle archive unchanged: not unpacked again" || bad "bundle unpacked again"
touch -d '2001-01-01' "$T/gpu.tar.xz"
"${E[@]}" "${G[@]}" --dry-run unit >/dev/null
[ ! -f "$D/marker" ] && [ -x "$D/et_cuda_run" ] && ok "bundle archive changed: unpacked again" ||
  bad "changed archive not unpacked again"
is "$("${E[@]}" "${G[@]}" unit 2>&1)" "fake run.sh in gpu args=0" "unit runs the bundle's run.sh"
"${E[@]}" "${G[@]}" unit extra >/dev/null 2>&1
is "$?" 2 "unit: stray argument refused"
is "$("${E[@]}" "${G[@]}" --dry-run unit --decode /tmp/o)" "bash tests/models/decode_gpu.sh $D /tmp/o" \
  "unit --decode: bundle, then OUT"
is "$("${E[@]}" "${G[@]}" --dry-run suite)" "bash tests/models/gpu_suite.sh $D" "suite: the bundle"
is "$(GPU_BUNDLE=$T/b/gpu "${G[@]}" --dry-run suite)" "bash tests/models/gpu_suite.sh $T/b/gpu" "suite: GPU_BUNDLE"
is "$("${E[@]}" "${G[@]}" --dry-run sanitizer "$T/b/gpu" /tmp/s)" "bash scripts/gpu_sanitize.sh $T/b/gpu /tmp/s" \
  "sanitizer: a given bundle and OUT passed through"
is "$("${E[@]}" "${G[@]}" --dry-run runner)" "bash runner/gpu/check.sh $D" "runner: the bundle"
for p in session:gpu_session verify:gpu_verify combo:gpu_combo extras:gpu_extras graph-memory:gpu_ab; do
  is "$("${G[@]}" --dry-run "${p%%:*}" x)" "bash scripts/${p#*:}.sh x" "${p%%:*}: scripts/${p#*:}.sh with the arguments"
done
is "$("${E[@]}" "${G[@]}" --dry-run bench)" "env BENCH_BUNDLE=$D bash bench/run.sh" "bench: BENCH_BUNDLE set"
is "$(BENCH_BUNDLE_TAR=x.tar.xz "${E[@]}" "${G[@]}" --dry-run bench)" "bash bench/run.sh" "bench: BENCH_BUNDLE_TAR kept"
"${E[@]}" "${G[@]}" --dry-run bench --fast >/dev/null 2>&1
is "$?" 2 "bench: arguments refused (BENCH_* variables)"
is "$("${E[@]}" "${G[@]}" --dry-run runtime --manifest m.json)" \
  "env EXECUTORCH_CUDA_LIB_DIR=$D python3 python/tests/gpu_runtime.py --runner $D/et_cuda_run --manifest m.json" \
  "runtime: the bundle's libraries and runner"
is "$(EXECUTORCH_CUDA_LIB_DIR=/l "${E[@]}" "${G[@]}" --dry-run runtime --runner=/r)" \
  "env EXECUTORCH_CUDA_LIB_DIR=/l python3 python/tests/gpu_runtime.py --runner=/r" "runtime: --runner and the lib dir kept"
is "$("${E[@]}" "${G[@]}" --dry-run real-scale --no-ncu --budget 300)" "bash bench/real_scale.sh --no-ncu --budget 300" \
  "real-scale: arguments passed through"
is "$("${E[@]}" "${G[@]}" --dry-run hf-scale --models qwen06b)" "bash bench/hf_scale.sh --models qwen06b" "hf-scale"
is "$(env -u GPU_BUNDLE GPU_BUNDLE_TAR="$T/none.tar.xz" "${G[@]}" --dry-run suite 2>&1)" \
  "gpu.sh: no bundle: neither GPU_BUNDLE, .dev/gpu nor $T/none.tar.xz (scripts/gpu_bundle.sh)" "no bundle: said so"
"${G[@]}" side-by-side --real-scale llama1b --dry-run >"$T/plan" 2>&1
if grep -q "plan: best: et14_llama1b_base through" "$T/plan"; then
  ok "side-by-side: its own --dry-run through gpu.sh"
else
  bad "side-by-side --real-scale llama1b --dry-run through gpu.sh"
fi
echo "gpu.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
