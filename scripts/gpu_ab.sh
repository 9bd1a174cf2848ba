#!/usr/bin/env bash
# CUDA-graph memory, private blocks against allocation nodes, in one call on the GPU
# machine after scripts/gpu_session.sh (which leaves the bundle in /tmp/gpu_bundle/gpu and
# the suite's programs in /tmp/et_models):
#
#   bash scripts/gpu_ab.sh
#
# 1. et15_mlp_devio_f32 (device IO, outputs on the device), graphs on, 2000 timed calls,
#    cuda_graph_private_memory true / false alternating, two rounds: p50 without and with a
#    wait per call, and the library's host time per execute;
# 2. gemma3_bf16 and et15_qwen3_bf16 token loops (48 tokens, 3 rounds) with graphs, the two
#    settings alternating;
# 3. compute-sanitizer memcheck over a graph token loop (in-place inputs, private blocks) and
#    a device-IO graph bench, when compute-sanitizer is there.
# Prints one line per run; $OUT/ab.txt gets the same.
set -uo pipefail
B=${AB_BUNDLE:-/tmp/gpu_bundle/gpu}
M=${AB_MODELS:-/tmp/et_models}
OUT=${OUT:-/tmp/ab_out}
mkdir -p "$OUT"
R=$B/et_cuda_run
log() { echo "$*" | tee -a "$OUT/ab.txt"; }
pick() { grep -E "$1" | head -1 | cut -c1-260; }

man=$M/et15_mlp_devio_f32/manifest.json
if [ -f "$man" ]; then
  for round in 1 2; do
    for priv in true false; do
      o=$(timeout 60 "$R" --manifest "$man" --device-io --bench 2000 --warmup 50 --stats \
        --option enable_cuda_graph_for_method=forward --option cuda_graph_private_memory=$priv 2>&1)
      log "mlp_devio round $round private=$priv: $(echo "$o" | pick ' bench: ') | $(echo "$o" | pick 'bench-wait') | $(echo "$o" | pick 'bench-lib')"
    done
  done
else
  log "no $man"
fi

for d in gemma3_bf16 et15_qwen3_bf16; do
  man=$M/$d/manifest.json
  [ -f "$man" ] || { log "no $man"; continue; }
  for priv in true false true false; do
    o=$(timeout 60 "$R" --manifest "$man" --generate 48 --generate-rounds 3 --stats \
      --option enable_cuda_graph_for_method=forward --option cuda_graph_private_memory=$priv 2>&1)
    log "$d private=$priv: $(echo "$o" | pick '^generate:' | sed 's/ tokens=.*expected=[^ ]*//')"
  done
done

CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  man=$M/gemma3_bf16/manifest.json
  [ -f "$man" ] && log "memcheck gemma3 graphs token loop: $(timeout 150 "$CS" --tool memcheck --error-exitcode 9 "$R" \
    --manifest "$man" --generate 8 --generate-rounds 2 --option enable_cuda_graph_for_method=forward 2>&1 |
    grep -E 'ERROR SUMMARY|^generate:' | sed 's/ tokens=.*expected=[^ ]*//' | tr '\n' ' ') rc=${PIPESTATUS[0]}"
  man=$M/et15_mlp_devio_f32/manifest.json
  [ -f "$man" ] && log "memcheck mlp_devio graphs device-io: $(timeout 120 "$CS" --tool memcheck --error-exitcode 9 "$R" \
    --manifest "$man" --device-io --bench 20 --warmup 2 --option enable_cuda_graph_for_method=forward 2>&1 |
    grep -E 'ERROR SUMMARY|case.*PASS|case.*FAIL' | tr '\n' ' ') rc=${PIPESTATUS[0]}"
else
  log "no compute-sanitizer"
fi
