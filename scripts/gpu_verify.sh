#!/usr/bin/env bash
# One GPU call that re-checks the library after a change, from the repository root of the copy:
#   bash scripts/gpu_verify.sh
# Carried (git-ignored): .dev/gpu.tar.xz (scripts/gpu_bundle.sh, packed), .dev/models.tar.xz
# (programs exported by an earlier call: tests/models/gpu_suite.sh's models.tar.xz),
# .whl/models/sites (tests/models/wheels.sh), optionally .dev/old/ (an older build's et_cuda_run,
# libexecutorch_cuda_backend.so, libexecutorch_cuda.so.0 for the host-time A/B).
# Phase 1, alone on the GPU (timings, device-wide memory drift):
#   A. host time per execute, this build against .dev/old, alternating, 3 rounds (fixtures,
#      eager and CUDA graphs): the runner's bench-lib line;
#   B. load/execute/destroy cycles: tests/gpu.rs's cycle test on mlp_f32 (ExecuTorch 1.2,
#      VERIFY_CYCLES, default 10000) and et_cuda_run --load-cycles on an ExecuTorch 1.5.1 program
#      (VERIFY_CYCLES15, default 2000).
# Phase 2, in parallel: the bundle's checks (.dev/gpu/run.sh: C/C++ tests, runner, every Rust GPU
#   test), the suite on the carried programs (no exports), compute-sanitizer
#   (scripts/gpu_sanitize.sh), text generation with the test tokenizer on qwen3_bf16.
# $OUT: verify.txt (printed), logs.tar.xz.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/verify_out}
R=/tmp/verify
rm -rf "$R" && mkdir -p "$R" "$OUT"
START=$(date +%s)
say() { printf '[%3ds] %s\n' $(($(date +%s) - START)) "$*" | tee -a "$R/verify.txt"; }
mkdir -p /tmp/gpu_bundle /tmp/et_models
tar -xJf .dev/gpu.tar.xz -C /tmp/gpu_bundle
B=/tmp/gpu_bundle/gpu
[ -f .dev/models.tar.xz ] && tar -xJif .dev/models.tar.xz -C /tmp/et_models
M=/tmp/et_models
say "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
say "programs carried: $(ls $M | tr '\n' ' ')"

# A. host time per execute, alternating builds.
if [ -d .dev/old ]; then
  mkdir -p /tmp/old && cp .dev/old/* /tmp/old/ &&
    cp $B/libexecutorch.so $B/libexecutorch_threadpool.so $B/libexecutorch_kernels_optimized.so /tmp/old/
  for round in 1 2 3; do
    for build in new old; do
      run=$B/et_cuda_run; [ $build = old ] && run=/tmp/old/et_cuda_run
      for f in mlp_f32 attn_bf16; do
        for g in eager graphs; do
          opt=(); [ $g = graphs ] && opt=(--option enable_cuda_graph_for_method=forward)
          log=$R/ab_${round}_${build}_${f}_$g.log
          "$run" --manifest $B/fixtures/$f/manifest.json --bench 3000 --warmup 200 --stats "${opt[@]}" > "$log" 2>&1
          line=$(grep -E "bench-lib" "$log" | head -1)
          [ -n "$line" ] || line="(no bench-lib line: $(tail -2 "$log" | tr '\n' ' '))"
          echo "round $round $build $f $g: $line" >> "$R/ab.txt"
        done
      done
    done
  done
  say "A. host time A/B done"
fi

# B. cycles, alone.
export ET_CUDA_FIXTURES=$B/fixtures ET_CUDA_LIB=$B/rs/libexecutorch_cuda.so ET_CUDA_FAKE_AOTI=$B/rs/fake_aoti.so
ET_CUDA_CYCLES=${VERIFY_CYCLES:-10000} timeout -k 5 ${VERIFY_CYCLES_TIMEOUT:-200} $B/rs/deps/gpu init_execute_destroy_cycles \
  --include-ignored --exact --nocapture > "$R/cycles12.log" 2>&1
say "B. ET 1.2 cycles: $(grep -E 'summary:|panicked|test result' "$R/cycles12.log" | tr '\n' ' ')"
m15=$(ls $M/et15_mlp_f32/manifest.json 2>/dev/null | head -1)
if [ -n "$m15" ]; then
  timeout -k 5 ${VERIFY_CYCLES15_TIMEOUT:-120} $B/et_cuda_run --manifest "$m15" --load-cycles ${VERIFY_CYCLES15:-2000} \
    > "$R/cycles15.log" 2>&1
  say "B. ET 1.5 cycles (rc $?): $(grep -E '^load-cycles:' "$R/cycles15.log")"
fi

# Phase 2 (what phase 1 found is in $OUT already, should the call be cut short).
{ cat "$R/ab.txt" 2>/dev/null; grep -E "summary|panicked" "$R/cycles12.log"; tail -3 "$R/cycles15.log" 2>/dev/null; } >> "$R/verify.txt"
cp "$R/verify.txt" "$OUT/"
( cd $B && OUT=$R/bundle ET_CUDA_CYCLES=20 timeout -k 10 ${VERIFY_BUNDLE_TIMEOUT:-330} bash run.sh > "$R/bundle.log" 2>&1
  echo "exit $?" >> "$R/bundle.log" ) &
pb=$!
( OUT=$R/suite MODELS_TAR= SUITE_PHASES=run SUITE_BUDGET=${VERIFY_SUITE_BUDGET:-300} SUITE_LIB=$B/libexecutorch_cuda.so.0 \
  SUITE_EXTRA_MODES="graphs:--option enable_cuda_graph_for_method={methods};share:--option weight_sharing_across_methods=true --option share_mutable_buffers_across_methods=true" \
  timeout -k 10 360 bash tests/models/gpu_suite.sh "$B" > "$R/suite.log" 2>&1; echo "exit $?" >> "$R/suite.log" ) &
ps=$!
( timeout -k 5 200 bash scripts/gpu_sanitize.sh "$B" "$R/san" > "$R/sanitize.txt" 2>&1 ) &
pz=$!
q=$(ls $M/qwen3_bf16/manifest.json 2>/dev/null | head -1)
if [ -n "$q" ]; then
  T=$B/tokenizers/bpe.json
  {
    $B/et_cuda_run --manifest "$q" --tokenizer "$T" --prompt "The runner loads a program" --max-new-tokens 16 \
      > "$R/text_greedy.log" 2>&1
    cat "$R/text_greedy.log"
    ids=$(sed -n 's/.*prompt_ids=\([0-9,]*\).*/\1/p' "$R/text_greedy.log" | head -1)
    toks=$(sed -n 's/^generate:.* tokens=\([0-9,]*\).*/\1/p' "$R/text_greedy.log" | head -1)
    echo "== --generate with the same prompt ids ($ids), expecting the text run's tokens"
    $B/et_cuda_run --manifest "$q" --generate 16 --prompt-ids "$ids" --expect-tokens "$toks" 2>&1 | grep -E "MATCH|generate:"
    for s in 7 7 8; do
      echo "== seed $s"
      $B/et_cuda_run --manifest "$q" --tokenizer "$T" --prompt "The runner loads a program" --max-new-tokens 24 \
        --temperature 0.8 --top-p 0.9 --seed $s 2>&1
    done
  } > "$R/text.log" 2>&1
fi
wait $pb $ps $pz
say "phase 2 done"
{
  echo "===== A. host time A/B"; cat "$R/ab.txt" 2>/dev/null
  echo "===== B. cycles"; grep -E "summary|cycle +[0-9]+:|panicked" "$R/cycles12.log" | tail -8; tail -5 "$R/cycles15.log" 2>/dev/null
  echo "===== bundle"; grep -E "check\(s\) failed|^FAILED|test result|panicked|graphs=|2 threads|share group|summary|GEMV|attention|sort|rand" "$R/bundle.log" | tail -60
  echo "===== sanitizer"; cat "$R/sanitize.txt"
  echo "===== text"; cat "$R/text.log" 2>/dev/null | tail -30
  echo "===== suite"; sed -n '/## Checks/,/## Generation/p' "$R/suite/summary.md" 2>/dev/null; sed -n '/## Generation/,$p' "$R/suite/summary.md" 2>/dev/null | head -20
} >> "$R/verify.txt"
cp "$R/verify.txt" "$OUT/"
tar -cJf "$OUT/logs.tar.xz" -C /tmp verify 2>/dev/null
cat "$R/verify.txt"
