#!/usr/bin/env bash
# Short GPU checks that run beside bench/real_scale.sh in one device call, while its exports
# keep the CPUs busy and the GPU mostly idle (from the repository root of the copy):
#
#   bash scripts/gpu_extras.sh            # writes $OUT/extras.txt (and logs into $OUT/extras.tar.xz)
#
# Carried (git-ignored): .dev/gpu.tar.xz (scripts/gpu_bundle.sh, packed), .dev/models.tar.xz
# (small programs of earlier calls: ExecuTorch 1.2 and 1.5.1). Parts, in this order, each with
# its own time limit (EXTRAS_PARTS picks; default all):
#   sample     tests/sample_gpu.rs (device sampler: greedy vs the host rule, timing)
#   perfqn     every ExecuTorch 1.5.1 program (per-FQN weights, streamed through pinned staging)
#              through et_cuda_run: plain, weight sharing, graphs; and the load_phases line
#   pinblob    a packed-blob program with ET_CUDA_PIN_WEIGHTS_BLOB=1 and without
#   whisper    whisper_bf16's decoder with CUDA graphs: --verbose (why graph-private memory is
#              or is not used), then compute-sanitizer memcheck with --leak-check full
#   probe      tests/sanitizer/graph_alloc_reuse.cu under memcheck (does memcheck flag a graph whose
#              allocation nodes reuse one address?)
#   leaks      memcheck --leak-check full on the ExecuTorch 1.5.1 programs (the streamed load)
#   graphs     every carried program with CUDA graphs on every method (3 replays), then memcheck
#              on those with graphs
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/extras_out}
R=/tmp/extras
rm -rf "$R" && mkdir -p "$R" "$OUT"
START=$(date +%s)
PARTS=" ${EXTRAS_PARTS:-sample perfqn pinblob whisper probe leaks graphs} "
part() { [[ $PARTS == *" $1 "* ]]; }
say() { printf '[%3ds] %s\n' $(($(date +%s) - START)) "$*" | tee -a "$R/extras.txt"; }
mkdir -p /tmp/extras_bundle /tmp/extras_models
tar -xJf .dev/gpu.tar.xz -C /tmp/extras_bundle
B=/tmp/extras_bundle/gpu
for f in .dev/models*.tar.xz; do [ -f "$f" ] && tar -xJif "$f" -C /tmp/extras_models; done
M=/tmp/extras_models
export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
say "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); programs: $(ls $M | tr '\n' ' ')"

# One runner call: its exit status, the lines that matter.
runner() { # name timeout args...
  local name=$1 t=$2; shift 2
  timeout -k 5 "$t" "$B/et_cuda_run" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  printf '%-44s rc=%-3s %s PASS, %s FAIL; %s\n' "$name" "$rc" "$(grep -c ' PASS' "$R/$name.log")" \
    "$(grep -c ' FAIL' "$R/$name.log")" \
    "$(grep -hE '^(generate:|load_phases:)|MISMATCH|et_cuda_run:' "$R/$name.log" | tr '\n' ' ' | cut -c1-400)" \
    | tee -a "$R/extras.txt"
}
san() { # name args...
  local name=$1; shift
  timeout -k 5 200 "$CS" --tool memcheck --leak-check full "$@" > "$R/san_$name.log" 2>&1
  printf '%-44s rc=%-3s %s %s\n' "san:$name" "$?" "$(grep -h 'ERROR SUMMARY' "$R/san_$name.log" | tail -1)" \
    "$(grep -h 'LEAK SUMMARY\|bytes leaked' "$R/san_$name.log" | tail -1)" | tee -a "$R/extras.txt"
}

if part sample && [ -x "$B/rs/deps/sample_gpu" ]; then
  say "== device sampler tests"
  ( cd "$B" && ET_CUDA_LIB=$B/rs/libexecutorch_cuda.so timeout -k 5 120 ./rs/deps/sample_gpu \
      --include-ignored --test-threads=1 --nocapture > "$R/sample_gpu.log" 2>&1; echo "exit $?" >> "$R/sample_gpu.log" )
  grep -E "^test |us per call|µs|draws|panicked|test result|exit" "$R/sample_gpu.log" | tee -a "$R/extras.txt"
fi

# The ExecuTorch 1.5.1 programs (their names start with et15_).
per_fqn_programs() { find "$M" -path '*/et15_*/manifest.json' | sort; }

if part perfqn; then
  say "== ExecuTorch 1.5.1 programs (per-FQN weights, streamed)"
  for m in $(per_fqn_programs); do
    n=$(basename "$(dirname "$m")")
    runner "$n.plain" 120 --manifest "$m" --stats
    runner "$n.share" 120 --manifest "$m" --option weight_sharing_across_methods=true --option share_mutable_buffers_across_methods=true
    runner "$n.graphs" 120 --manifest "$m" --option enable_cuda_graph_for_method=forward,decode,prefill,encoder,decoder
  done
fi

if part pinblob; then
  say "== packed blob: pageable vs ET_CUDA_PIN_WEIGHTS_BLOB=1"
  for n in qwen3_bf16 linear_int4tp_bf16; do
    m=$M/$n/manifest.json
    [ -f "$m" ] || continue
    runner "$n.pageable" 120 --manifest "$m"
    ET_CUDA_PIN_WEIGHTS_BLOB=1 runner "$n.pinned" 120 --manifest "$m"
    ET_CUDA_PIN_WEIGHTS_BLOB=1 runner "$n.pinned_share" 120 --manifest "$m" --option weight_sharing_across_methods=true
  done
fi

if part whisper && [ -f "$M/whisper_bf16/manifest.json" ]; then
  w=$M/whisper_bf16/manifest.json
  say "== whisper_bf16 decoder with CUDA graphs"
  runner whisper.graphs_verbose 120 --manifest "$w" --option enable_cuda_graph_for_method=decoder --verbose
  grep -hE "graph-private|allocation nodes|planned|missed|graph memory" "$R/whisper.graphs_verbose.log" | head -8 | tee -a "$R/extras.txt"
  san whisper.graphs_decoder --print-limit 4 "$B/et_cuda_run" --manifest "$w" --option enable_cuda_graph_for_method=decoder --verbose &
  san whisper.graphs_decoder_noprivate --print-limit 4 "$B/et_cuda_run" --manifest "$w" --option enable_cuda_graph_for_method=decoder --option cuda_graph_private_memory=false &
  san whisper.graphs_both --print-limit 4 "$B/et_cuda_run" --manifest "$w" --option enable_cuda_graph_for_method=encoder,decoder --bench 3 --warmup 1 &
  wait
  grep -hE "graph-private|allocation nodes|Invalid|ERROR SUMMARY" "$R"/san_whisper.graphs_decoder.log | head -8 | tee -a "$R/extras.txt"
fi

if part probe && [ -n "$NVCC" ]; then
  say "== graph allocation-node reuse probe"
  "$NVCC" -O2 -o "$R/graph_alloc_reuse" tests/sanitizer/graph_alloc_reuse.cu > "$R/probe_build.log" 2>&1 ||
    say "probe: nvcc failed ($(tail -2 "$R/probe_build.log" | tr '\n' ' '))"
  if [ -x "$R/graph_alloc_reuse" ]; then
    for v in freed output; do
      "$R/graph_alloc_reuse" $v 2>&1 | tee -a "$R/extras.txt"
      san "probe_$v" --print-limit 4 "$R/graph_alloc_reuse" $v
      grep -hE "Invalid|is .* after|ERROR SUMMARY" "$R/san_probe_$v.log" | head -6 | tee -a "$R/extras.txt"
    done
  fi
fi

if part leaks; then
  say "== memcheck --leak-check full, ExecuTorch 1.5.1 programs"
  for m in $(per_fqn_programs); do
    n=$(basename "$(dirname "$m")")
    san "$n.host" "$B/et_cuda_run" --manifest "$m" &
    san "$n.share" "$B/et_cuda_run" --manifest "$m" --option weight_sharing_across_methods=true &
  done
  wait
fi
if part graphs; then
  say "== every program with CUDA graphs"
  for m in $(find "$M" -name manifest.json | sort); do
    n=$(basename "$(dirname "$m")")
    runner "$n.graphs_all" 120 --manifest "$m" --option enable_cuda_graph_for_method=forward,decode,prefill,encoder,decoder \
      --bench 3 --warmup 1 --verbose
    grep -hE "graph-private|allocation nodes" "$R/$n.graphs_all.log" | head -2 | cut -c1-300 | tee -a "$R/extras.txt"
  done
  for m in $(find "$M" -name manifest.json | sort); do
    n=$(basename "$(dirname "$m")")
    san "$n.graphs_all" --print-limit 4 "$B/et_cuda_run" --manifest "$m" \
      --option enable_cuda_graph_for_method=forward,decode,prefill,encoder,decoder &
  done
  wait
fi
say "extras done"
cp "$R/extras.txt" "$OUT/"
tar -cJf "$OUT/extras.tar.xz" -C /tmp extras --exclude='extras/graph_alloc_reuse' 2>/dev/null
