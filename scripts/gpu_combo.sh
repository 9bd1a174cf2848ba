#!/usr/bin/env bash
# One GPU call for the checks of issues 20 and 23 that earlier calls left open, all parts in
# parallel inside the device tool's 10-minute limit (from the repository root of the copy):
#
#   bash scripts/gpu_combo.sh
#
# Carried (git-ignored): .dev/gpu.tar.xz (scripts/gpu_bundle.sh, packed), .dev/models*.tar.xz
# (programs of earlier calls), .whl/models/sites (tests/models/wheels.sh).
# COMBO_PARTS (default "suite example llm tests text sanitize") picks the parts (also: gemv):
#   suite     tests/models/gpu_suite.sh on COMBO_SUITE_ONLY (default: the MoE and sampler decoders
#             and et15_qwen3_bf16): exports them (ExecuTorch 1.5.1), runs every mode with graphs and
#             sharing; their programs come back in $OUT/models.tar.xz for a later call
#   example   examples/export.sh (the in-repository example program) and et_cuda_run on it
#   llm       examples/export_llm.py with the test BPE tokenizer, then a text run on it
#   tests     the Rust GPU tests of the device sampler (tests/sample_gpu.rs)
#   text      text generation on qwen3_bf16: --prompt vs --generate ids, device vs host sampling,
#             seeds, sampling time per token
#   sanitize  compute-sanitizer: the device-IO mode, whisper_bf16's decoder with graphs
#             (diagnosis), and with SANITIZE_MODELS=<names> those programs in every mode (after the
#             suite part's exports)
#   gemv      after the others, alone: tests/decode_gpu.rs (decode kernels: tests and bench)
# $OUT: combo.txt (printed last), logs.tar.xz, models.tar.xz, example/.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/combo_out}
R=/tmp/combo
rm -rf "$R" && mkdir -p "$R" "$OUT"
START=$(date +%s)
say() { printf '[%3ds] %s\n' $(($(date +%s) - START)) "$*" | tee -a "$R/combo.txt"; }
PARTS=" ${COMBO_PARTS:-suite example llm tests text sanitize} "
part() { [[ $PARTS == *" $1 "* ]]; }

mkdir -p /tmp/gpu_bundle /tmp/et_models /tmp/site15
tar -xJf .dev/gpu.tar.xz -C /tmp/gpu_bundle
B=/tmp/gpu_bundle/gpu
for f in .dev/models*.tar.xz; do [ -f "$f" ] && tar -xJif "$f" -C /tmp/et_models; done
M=/tmp/et_models
[ -f .whl/models/sites/et15.tar.xz ] && tar -xJf .whl/models/sites/et15.tar.xz -C /tmp/site15
say "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); programs: $(ls $M | tr '\n' ' ')"
pids=()

if part suite; then
  ( OUT=$R/suite MODELS_DIR=$M SUITE_ONLY=${COMBO_SUITE_ONLY:-et15_moe_bf16,et15_sampler_bf16,et15_sampler_fallback_bf16,et15_qwen3_bf16} \
    SUITE_PHASES=export,et15,run SUITE_EXPORT_JOBS15=4 SUITE_EXPORT_BUDGET=${COMBO_EXPORT_BUDGET:-200} \
    SUITE_BUDGET=${COMBO_SUITE_BUDGET:-430} SUITE_LIB=$B/libexecutorch_cuda.so.0 SUITE_PACK_FILES=1 \
    SUITE_EXTRA_MODES="graphs:--option enable_cuda_graph_for_method={methods};share:--option weight_sharing_across_methods=true --option share_mutable_buffers_across_methods=true" \
    timeout -k 10 500 bash tests/models/gpu_suite.sh "$B" > "$R/suite.log" 2>&1
    echo "exit $?" >> "$R/suite.log"; cp "$R"/suite/models*.tar.xz "$OUT/" 2>/dev/null ) &
  pids+=($!)
fi

if part example && [ -f examples/export.sh ]; then
  ( PYTHONPATH=/tmp/site15 timeout -k 5 300 bash examples/export.sh "$OUT/example" > "$R/example.log" 2>&1
    echo "export exit $?" >> "$R/example.log"
    for m in "$OUT"/example/*/manifest.json; do
      [ -f "$m" ] && timeout 60 $B/et_cuda_run --manifest "$m" >> "$R/example.log" 2>&1
      echo "run exit $?" >> "$R/example.log"
    done
    [ -d "$OUT/example" ] && tar -cJf "$OUT/example.tar.xz" -C "$OUT" example && rm -rf "$OUT/example" ) &
  pids+=($!)
fi

if part llm && [ -f examples/export_llm.py ]; then
  ( T=$B/tokenizers/bpe.json
    PYTHONPATH=/tmp/site15 timeout -k 5 300 python3 examples/export_llm.py --tokenizer "$T" --out "$R/llm" > "$R/llm.log" 2>&1
    echo "export exit $?" >> "$R/llm.log"
    ls -la "$R/llm" >> "$R/llm.log" 2>&1
    if [ -f "$R/llm/model.pte" ]; then
      timeout 120 $B/et_cuda_run --model_path "$R/llm/model.pte" --data_path "$R/llm/aoti_cuda_blob.ptd" \
        --tokenizer_path "$T" --prompt "Once upon a time" --max-new-tokens 24 >> "$R/llm.log" 2>&1
      echo "run exit $?" >> "$R/llm.log"
      timeout 120 $B/et_cuda_run --model_path "$R/llm/model.pte" --data_path "$R/llm/aoti_cuda_blob.ptd" \
        --tokenizer_path "$T" --prompt "Once upon a time" --max-new-tokens 24 --temperature 0.8 --top-p 0.9 --seed 3 \
        --option enable_cuda_graph_for_method=forward >> "$R/llm.log" 2>&1
      echo "run (sampled, graphs) exit $?" >> "$R/llm.log"
    fi ) &
  pids+=($!)
fi

if part tests && [ -x "$B/rs/deps/sample_gpu" ]; then
  ( cd $B && ET_CUDA_LIB=$B/rs/libexecutorch_cuda.so timeout -k 5 240 ./rs/deps/sample_gpu --include-ignored \
      --test-threads=1 --nocapture > "$R/sample_gpu.log" 2>&1; echo "exit $?" >> "$R/sample_gpu.log" ) &
  pids+=($!)
fi

q=$M/qwen3_bf16/manifest.json
if part text && [ -f "$q" ]; then
  ( T=$B/tokenizers/bpe.json
    P="The runner loads a program"
    run() { timeout 120 $B/et_cuda_run --manifest "$q" --tokenizer "$T" --prompt "$P" --max-new-tokens 32 "$@" 2>&1; }
    echo "== greedy, device sampling"; run > "$R/t_greedy.log"; cat "$R/t_greedy.log"
    ids=$(sed -n 's/.*prompt_ids=\([0-9,]*\).*/\1/p' "$R/t_greedy.log" | head -1)
    toks=$(sed -n 's/^generate:.* tokens=\([0-9,]*\).*/\1/p' "$R/t_greedy.log" | head -1)
    echo "== --generate with the prompt ids, expecting the text run's tokens"
    timeout 120 $B/et_cuda_run --manifest "$q" --generate 32 --prompt-ids "$ids" --expect-tokens "$toks" 2>&1 | grep -E "^generate:"
    echo "== greedy, host sampling"; run --sample-on-host | grep -E "^generate:"
    for s in 7 7 8; do
      for where in device host; do
        extra=(); [ $where = host ] && extra=(--sample-on-host)
        echo "== seed $s, T=0.8 top-p 0.9, $where"
        run --temperature 0.8 --top-p 0.9 --seed $s "${extra[@]}" | grep -E "^generate:|^text:"
      done
    done
    echo "== seed 7 with CUDA graphs"
    run --temperature 0.8 --top-p 0.9 --seed 7 --option enable_cuda_graph_for_method=forward,prefill,decode | grep -E "^generate:"
  ) > "$R/text.log" 2>&1 &
  pids+=($!)
fi

if part sanitize; then
  ( CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    san() { # name args...
      local name=$1; shift
      timeout -k 5 240 "$CS" --tool memcheck --leak-check full "$@" > "$R/san_$name.log" 2>&1
      printf '%-48s rc=%-3s %s %s\n' "$name" "$?" "$(grep -h 'ERROR SUMMARY' "$R/san_$name.log" | tail -1)" \
        "$(grep -h 'LEAK SUMMARY\|bytes leaked' "$R/san_$name.log" | tail -1)"
    }
    # Device IO: every carried program whose inputs are not memory-planned.
    for m in $(find $M -name manifest.json | sort); do
      n=$(basename "$(dirname "$m")")
      python3 -c "import json,sys; m=json.load(open('$m')); sys.exit(0 if m.get('alloc_graph_input') is False and not m.get('stateful') else 1)" 2>/dev/null || continue
      san "$n.device_io" $B/et_cuda_run --manifest "$m" --device-io --bench 3 --warmup 1 &
    done
    w=$M/whisper_bf16/manifest.json
    if [ -f "$w" ]; then
      san whisper.graphs_decoder --print-limit 4 $B/et_cuda_run --manifest "$w" --option enable_cuda_graph_for_method=decoder --verbose &
      san whisper.graphs_decoder_bench1 --print-limit 4 $B/et_cuda_run --manifest "$w" --option enable_cuda_graph_for_method=decoder --bench 1 --warmup 0 &
      san whisper.graphs_decoder_noprivate --print-limit 4 $B/et_cuda_run --manifest "$w" --option enable_cuda_graph_for_method=decoder --option cuda_graph_private_memory=false &
      san whisper.eager --print-limit 4 $B/et_cuda_run --manifest "$w" &
      san whisper.eager_bench --print-limit 4 $B/et_cuda_run --manifest "$w" --bench 3 --warmup 1 &
    fi
    wait
    # Programs the suite part exports in this call: wait for its exports (at most 300 s).
    for _ in $(seq 60); do
      grep -q "checks until" "$R/suite.log" 2>/dev/null && break
      sleep 5
    done
    for n in ${SANITIZE_MODELS:-}; do
      m=$M/$n/manifest.json
      [ -f "$m" ] || { echo "$n: not carried"; continue; }
      methods="forward,decode,prefill,encoder,decoder"
      san "$n.host" $B/et_cuda_run --manifest "$m" &
      san "$n.graphs" $B/et_cuda_run --manifest "$m" --option enable_cuda_graph_for_method=$methods &
      san "$n.share" $B/et_cuda_run --manifest "$m" --option weight_sharing_across_methods=true --option share_mutable_buffers_across_methods=true &
      san "$n.device_out" $B/et_cuda_run --manifest "$m" --option skip_copy_output_to_cpu_for_method=$methods &
      wait
    done
  ) > "$R/sanitize.txt" 2>&1 &
  pids+=($!)
fi

wait "${pids[@]}"
say "all parts done"
# Alone on the GPU at the end: the decode kernels' tests and bench (tests/decode_gpu.rs).
if part gemv && [ -x "$B/rs/deps/decode_gpu" ]; then
  ( cd $B && ET_CUDA_LIB=$B/rs/libexecutorch_cuda.so timeout -k 5 ${COMBO_GEMV_TIMEOUT:-150} ./rs/deps/decode_gpu \
      --include-ignored --test-threads=1 --nocapture > "$R/decode_gpu.log" 2>&1; echo "exit $?" >> "$R/decode_gpu.log" )
  say "decode kernels done"
fi
{
  echo "===== suite"; tail -5 "$R/suite.log" 2>/dev/null; sed -n '/## Checks/,$p' "$R/suite/summary.md" 2>/dev/null | head -60
  echo "===== example"; tail -25 "$R/example.log" 2>/dev/null
  echo "===== llm"; grep -vE "^\s*$" "$R/llm.log" 2>/dev/null | tail -25
  echo "===== sample_gpu"; grep -E "^test |draws|us per call|panicked|test result|SKIPPED" "$R/sample_gpu.log" 2>/dev/null
  echo "===== text"; cat "$R/text.log" 2>/dev/null
  echo "===== decode_gpu"; grep -vE "^\s*$|^running|^ +[0-9]+: |stack backtrace|^note:" "$R/decode_gpu.log" 2>/dev/null | tail -90
  echo "===== sanitizer"; cat "$R/sanitize.txt" 2>/dev/null
  for f in "$R"/san_whisper*.log; do
    [ -f "$f" ] && { echo "--- $(basename "$f")"; grep -E "Invalid|is .* after|nearest allocation|by thread|at .*triton|ERROR SUMMARY|graph-private|allocation nodes" "$f" | head -14; }
  done
} >> "$R/combo.txt"
cp "$R/combo.txt" "$OUT/"
tar -cJf "$OUT/logs.tar.xz" --exclude='combo/llm/*.pte' --exclude='combo/llm/*.ptd' -C /tmp combo 2>/dev/null
cat "$R/combo.txt"
