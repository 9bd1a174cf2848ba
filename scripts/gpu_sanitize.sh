#!/usr/bin/env bash
# compute-sanitizer over the runner (run on the GPU machine after scripts/gpu_session.sh, from the
# repository root of the copy): memcheck with --leak-check full on the fixtures (host IO, outputs
# on the device, CUDA graphs, shared stream + weight sharing) and on the suite's ExecuTorch 1.5.1
# programs when they were exported (MODELS_DIR, default /tmp/et_models); racecheck, synccheck and
# initcheck on mlp_f32. Prints one "ERROR SUMMARY" / "LEAK SUMMARY" line per run.
#   bash scripts/gpu_sanitize.sh <bundle dir> [out dir]    (bash scripts/gpu.sh sanitizer: with the bundle)
set -uo pipefail
B=${1:?bundle dir}
OUT=${2:-/tmp/sanitize}
MODELS=${MODELS_DIR:-/tmp/et_models}
mkdir -p "$OUT"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$CS" ] || { echo "no compute-sanitizer"; exit 0; }
run() { # name tool args...
  local name=$1 tool=$2
  shift 2
  local extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  timeout -k 5 120 "$CS" --tool "$tool" "${extra[@]}" "$@" > "$OUT/$name.$tool.log" 2>&1
  local rc=$?
  printf '%-44s %-9s rc=%-3s %s %s\n' "$name" "$tool" "$rc" \
    "$(grep -h 'ERROR SUMMARY' "$OUT/$name.$tool.log" | tail -1)" \
    "$(grep -h 'LEAK SUMMARY\|bytes leaked' "$OUT/$name.$tool.log" | tail -1)"
}
for f in mlp_f32 attn_bf16; do
  m=$B/fixtures/$f/manifest.json
  run "$f.host" memcheck "$B/et_cuda_run" --manifest "$m"
  run "$f.device_out" memcheck "$B/et_cuda_run" --manifest "$m" --option skip_copy_output_to_cpu_for_method=forward
  run "$f.graphs" memcheck "$B/et_cuda_run" --manifest "$m" --option enable_cuda_graph_for_method=forward --bench 20 --warmup 2
  run "$f.share" memcheck "$B/et_cuda_run" --manifest "$m" --option use_shared_cuda_stream=true --option weight_sharing_across_methods=true
done
for t in racecheck synccheck initcheck; do
  run "mlp_f32.graphs" "$t" "$B/et_cuda_run" --manifest "$B/fixtures/mlp_f32/manifest.json" --option enable_cuda_graph_for_method=forward --bench 5 --warmup 1
done
# The suite's programs: a few by default; SANITIZE_ALL=1: every one in MODELS_DIR, in the modes
# host, graphs, share and device_out, SANITIZE_JOBS (default 6) at a time.
if [ "${SANITIZE_ALL:-0}" = 1 ]; then
  manifests=$(find "$MODELS" -name manifest.json 2>/dev/null | sort)
else
  manifests=$(find "$MODELS" -name manifest.json 2>/dev/null | grep -E 'et15_(mlp|qwen3)|/qwen3_bf16/' | head -4)
fi
methods="forward,decode,prefill,encoder,decoder"
jobs=0
for m in $manifests; do
  n=$(basename "$(dirname "$m")")
  for mode in host graphs share device_out; do
    case $mode in
      host) opt=() ;;
      graphs) opt=(--option enable_cuda_graph_for_method=$methods) ;;
      share) opt=(--option weight_sharing_across_methods=true --option share_mutable_buffers_across_methods=true) ;;
      device_out) opt=(--option skip_copy_output_to_cpu_for_method=$methods) ;;
    esac
    [ "${SANITIZE_ALL:-0}" = 1 ] || { [ $mode = host ] || [ $mode = graphs ]; } || continue
    run "$n.$mode" memcheck "$B/et_cuda_run" --manifest "$m" "${opt[@]}" &
    jobs=$((jobs + 1))
    if [ $jobs -ge "${SANITIZE_JOBS:-6}" ]; then wait; jobs=0; fi
  done
done
wait
