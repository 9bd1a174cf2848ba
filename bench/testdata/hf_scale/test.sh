#!/usr/bin/env bash
# CPU test of bench/hf_scale.sh and bench/hf_scale_table.py (no GPU, no torch), run by
# bench/test_table.sh: the flags, then the driver end to end with the real-scale fakes
# (testdata/real_scale/fake_{decode,runner,ncu}.py, which know the hf_* models): the results file's
# rows, targets, census and exports tables; a second run into the same $OUT (a fresh name, the first
# file untouched) with a failed export and a token mismatch; exports past the deadline, on a fake
# nvidia-smi naming an H100 (the floor at 3.35 TB/s); bench/hbm.py's table of names; the first run
# re-rendered by hf_scale_table.py with an H100 and with an unknown GPU in env.txt.
# Ends with "hf_scale: N passed, N failed". KEEP=1 keeps the temporary folder (its path: the results lines).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
FK=$ROOT/bench/testdata/real_scale
T=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
source "$HERE/../checks.sh"
S=$ROOT/bench/hf_scale.sh
# nvidia-smi for the drivers' env.txt: $FAKE_GPU_NAME as nvidia-smi prints it, else a failure (env.txt
# then says "no nvidia-smi", as on a machine without one)
mkdir -p "$T/bin"
printf '%s\n' '#!/bin/sh' '[ -n "${FAKE_GPU_NAME:-}" ] || exit 9' 'echo "$FAKE_GPU_NAME, 580.159.04, 81559 MiB"' >"$T/bin/nvidia-smi"
chmod +x "$T/bin/nvidia-smi"

# bench/hbm.py: the GPU's name -> its HBM bandwidth
H=$ROOT/bench/hbm.py
for c in "NVIDIA H200=4.8 TB/s (NVIDIA H200)" "NVIDIA H200 NVL=4.8 TB/s (NVIDIA H200 NVL)" \
  "NVIDIA H100 80GB HBM3=3.35 TB/s (NVIDIA H100 80GB HBM3)" "NVIDIA H100 NVL=3.9 TB/s (NVIDIA H100 NVL)" \
  "NVIDIA H100 PCIe=2 TB/s (NVIDIA H100 PCIe)" "NVIDIA A100-SXM4-80GB=2.039 TB/s (NVIDIA A100-SXM4-80GB)" \
  "NVIDIA A100-SXM4-40GB=1.555 TB/s (NVIDIA A100-SXM4-40GB)" "NVIDIA A100-PCIE-40GB=1.555 TB/s (NVIDIA A100-PCIE-40GB)" \
  "NVIDIA B300=4.8 TB/s (assumed: GPU 'NVIDIA B300' not known)"; do
  got=$(python3 "$H" "${c%%=*}" 2>&1)
  [ "$got" = "hbm: ${c#*=}" ] && ok "hbm.py ${c%%=*}: ${c#*=}" || bad "hbm.py ${c%%=*}: $got, not ${c#*=}"
done
printf '%s\n' "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB" "16 CPUs" >"$T/env_h100.txt"
[ "$(python3 "$H" --env "$T/env_h100.txt")" = "hbm: 3.35 TB/s (NVIDIA H100 80GB HBM3)" ] && ok "hbm.py --env: env.txt's first line" ||
  bad "hbm.py --env: $(python3 "$H" --env "$T/env_h100.txt" 2>&1)"
[ "$(python3 "$H" --env "$T/none.txt")" = "hbm: 4.8 TB/s (assumed: GPU unknown)" ] && ok "hbm.py --env without env.txt: assumed" ||
  bad "hbm.py --env without env.txt: $(python3 "$H" --env "$T/none.txt" 2>&1)"

# flags
bash "$S" --dry-run >"$T/plan" 2>&1 && ok "--dry-run exits 0" || bad "--dry-run: $(cat "$T/plan")"
has "$T/plan" "plan: exports in parallel: hf_llama1b_base hf_llama1b_companion hf_qwen06b_base hf_qwen06b_companion hf_gemma1b_base hf_gemma1b_companion" "six exports by default"
has "$T/plan" "static cache 512, prefill T in 1..128" "defaults: cache 512, T <= 128"
has "$T/plan" "then ours: base/graphs companion/graphs base/shared companion/shared base/plain companion/plain then a 128-token prefill" "run order"
bash "$S" --dry-run --max-t 512 --models gemma1b --ncu none >"$T/plan2" 2>&1 && has "$T/plan2" "prefill T in 1..512" "--max-t 512"
has "$T/plan2" "plan: census: off" "--ncu none"
for args in "--models llama3" "--variants int4" "--prompt 200" "--max-cache 64" "--variants companion --ncu base" \
  "--export-deadline 600" "--budget x" "--steps 0" "--bogus"; do
  # shellcheck disable=SC2086
  bash "$S" --dry-run $args >"$T/err" 2>&1
  [ $? = 2 ] && ok "usage error: $args" || bad "no usage error for $args: $(cat "$T/err")"
done

run() { # out work [VAR=value...] [-- hf_scale.sh flags...]
  local out=$1 work=$2 envs=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  mkdir -p "$T/bundle" "$T/site"
  echo abc1234 >"$T/bundle/COMMIT"
  env PATH="$T/bin:$PATH" OUT="$out" HFS_WORK="$work" HFS_BUNDLE_DIR="$T/bundle" HFS_SITE_DIR="$T/site" HFS_DECODE="$FK/fake_decode.py" \
    HFS_RUNNER="$FK/fake_runner.py" HFS_NCU_BIN="$FK/fake_ncu.py" HFS_BUDGET=150 HFS_EXPORT_DEADLINE=60 "${envs[@]}" \
    bash "$S" "$@" >"$work.log" 2>&1
}
run "$T/out" "$T/w1" || bad "hf_scale.sh with fakes: exit status $?"
R=$(ls "$T"/out/*-abc1234-hf-scale.md 2>/dev/null | head -1)
if [ -z "$R" ]; then
  bad "no results file in $T/out: $(tail -5 "$T/w1.log")"
else
  ok "results file $(basename "$R")"
  has "$R" "| ours, companion + graphs | 1920.0 | 98.9 % | 3.31x |  | 250.0 / 12.5 | 9.5 / 6.5 | 1.00 | 63 | MATCH |" "Llama companion + graphs row"
  has "$R" "| ours, companion + graphs + shared stream | 2016.0 |" "shared stream row"
  has "$R" "| ours, base | 400.0 | 20.6 % | 0.69x | 50.00 (128) | 250.0 / 12.5 | 140.0 / 137.0 | 1.00 | 0 | MATCH |" "plain row with the 128-token prefill"
  has "$R" "| torch.compile(mode=\"reduce-overhead\") | 580.0 | 29.9 % | 1.00x |" "torch.compile row"
  has "$R" "| floor ((weights + KV) / 4.8 TB/s, assumed: GPU 'no nvidia-smi' not known) | 1940 | 100 % |" "Llama floor (no nvidia-smi: 4.8 TB/s assumed)"
  has "$R" "Floor: 1940 tok/s ((weights + KV) / 4.8 TB/s, assumed: GPU 'no nvidia-smi' not known)." "Llama floor sentence"
  has "$R" "| GEMM GB/s (% of 4.8 TB/s) |" "census summary: % of the bandwidth used"
  has "$R" "| Llama-1B companion + graphs >= 80 % of the floor | 1920.0 tok/s = 98.9 % | **PASS** |" "floor target met"
  has "$R" "| Qwen3-0.6B companion + graphs >= 65 % of the floor | 1920.0 tok/s = 48.0 % | **MISS** |" "floor target missed"
  has "$R" "| Gemma-3-1B companion + graphs >= 3x torch.compile | 1920.0 vs 580.0 tok/s (3.31x) | **PASS** |" "3x target"
  has "$R" "| Llama-1B prefill (128 tokens): companion no slower than base | 50.00 vs 50.00 ms | **PASS** |" "prefill target"
  has "$R" "| Llama-1B companion: host time per replayed decode execute <= 10 µs | 9.5 µs (63 replays of 63 executes) | **PASS** |" "host time target"
  has "$R" "| Llama-1B: tokens equal to eager's (64 greedy) in every mode | 6 of 6 runs MATCH | **PASS** |" "tokens target"
  has "$R" "sliding window 512 on {'full_attention': 4, 'sliding_attention': 22}" "Gemma's sliding window described"
  has "$R" "| hf_gemma1b_companion | 27 | 387 |" "census row"
  has "$R" "| hf_qwen06b_companion | 100.0 (20.0 / 70.0) | 1.500 | {\"gemv\": 113," "exports row with the companion report"
  has "$R" "<!-- figure: hf.llama1b.companion.graphs.decode_tok_s | 1920 | tok/s | higher |" "figure line"
  [ -f "${R%.md}-census.md" ] && ok "census file" || bad "no census file"
  [ -f "$T/out/logs.tar.xz" ] && [ -f "$T/out/raw/ref_hf_gemma1b.json" ] && [ -f "$T/out/raw/export_hf_qwen06b_base.json" ] &&
    ok "logs and raw JSON" || bad "logs or raw JSON missing: $(ls "$T/out" "$T/out/raw" | tr '\n' ' ')"
  grep -q "timing hf_llama1b (stopped: " "$T/w1/timeline.txt" && ok "other jobs stopped while a model is timed" ||
    bad "no stopped jobs in the timeline: $(grep timing "$T/w1/timeline.txt" | head -3 | tr '\n' ' ')"
  n=$(grep -c "^\[.*\] run hf_" "$T/w1/timeline.txt")
  [ "$n" = 18 ] && ok "18 runs (3 models x 2 variants x 3 modes)" || bad "$n runs, not 18"
fi
cp "$R" "$T/first.md" 2>/dev/null
# the first run re-rendered with an H100, then an unknown GPU, named in env.txt
cp -r "$T/w1" "$T/w1h"
cp "$T/env_h100.txt" "$T/w1h/env.txt"
python3 "$ROOT/bench/hf_scale_table.py" "$T/w1h" --out "$T/h100.md" --census-out "$T/h100-census.md" --note "Re-rendered." \
  >"$T/h100.err" 2>&1 || bad "hf_scale_table.py on the H100 copy: $(tail -2 "$T/h100.err")"
if [ -f "$T/h100.md" ]; then
  has "$T/h100.md" "| floor ((weights + KV) / 3.35 TB/s, NVIDIA H100 80GB HBM3) | 1354 | 100 % |" "H100: Llama floor at 3.35 TB/s"
  has "$T/h100.md" "Floor: 1354 tok/s ((weights + KV) / 3.35 TB/s, NVIDIA H100 80GB HBM3)." "H100: floor sentence"
  has "$T/h100.md" "| ours, companion + graphs | 1920.0 | 141.8 % | 3.31x |" "H100: % of floor at 3.35 TB/s"
  has "$T/h100.md" "| Llama-1B companion + graphs >= 80 % of the floor | 1920.0 tok/s = 141.8 % | **PASS** |" "H100: floor target"
  has "$T/h100.md" "HBM: 3.35 TB/s, NVIDIA H100 80GB HBM3." "H100: census section's bandwidth"
  has "$T/h100-census.md" "| GB/s | % of 3.35 TB/s |" "H100: per-kernel column at 3.35 TB/s"
  has "$T/h100.md" "Re-rendered." "--note under the title"
  grep -q "4\.8 TB/s" "$T/h100.md" "$T/h100-census.md" && bad "H100: 4.8 TB/s still printed" || ok "H100: no 4.8 TB/s anywhere"
fi
sed -i '1s/.*/NVIDIA B300, 590.00, 183000 MiB/' "$T/w1h/env.txt"
python3 "$ROOT/bench/hf_scale_table.py" "$T/w1h" --out "$T/unknown.md" >"$T/unknown.err" 2>&1 ||
  bad "hf_scale_table.py on the unknown-GPU copy: $(tail -2 "$T/unknown.err")"
has "$T/unknown.md" "| floor ((weights + KV) / 4.8 TB/s, assumed: GPU 'NVIDIA B300' not known) | 1940 | 100 % |" "unknown GPU: 4.8 TB/s assumed"
# a second run into the same $OUT: fresh name; a failed export; a token mismatch
run "$T/out" "$T/w2" FAKE_EXPORT_FAIL=companion FAKE_RUNNER_MISMATCH=hf_qwen06b_base -- --models llama1b,qwen06b ||
  bad "second run: exit status $?"
R2=$(ls "$T"/out/*-abc1234-hf-scale-2.md 2>/dev/null | head -1)
if [ -z "$R2" ]; then
  bad "second run: no -2 file ($(ls "$T/out" | tr '\n' ' '))"
else
  ok "second run: $(basename "$R2")"
  cmp -s "$R" "$T/first.md" && ok "first results file unchanged" || bad "first results file changed"
  has "$R2" "| hf_llama1b_companion | not exported: \`companion: RuntimeError: planted export failure\` | | |" "failed export reported"
  has "$R2" "| ours, base + graphs | 480.0 | 12.0 % | 0.83x |  | 250.0 / 12.5 | 9.5 / 6.5 | 1.00 | 63 | MISMATCH at 5 |" "mismatch row"
  has "$R2" "| Qwen3-0.6B: tokens equal to eager's (64 greedy) in every mode | 0 of 3 runs MATCH; base/graphs: MISMATCH at 5, base/plain: MISMATCH at 5, base/shared: MISMATCH at 5 | **MISS** |" "mismatch target"
  has "$R2" "| Llama-1B companion + graphs >= 80 % of the floor | n/a tok/s = n/a % | n/a |" "target n/a without the program"
fi
# --ab: each model and variant timed with graphs at the switch's 0 and 1, two runs each, and its table
bash "$S" --dry-run --ab ET_CUDA_FUSED_ADD_NORM >"$T/plan3" 2>&1 &&
  has "$T/plan3" "plan: A/B of ET_CUDA_FUSED_ADD_NORM: per model and variant, graphs with ET_CUDA_FUSED_ADD_NORM=0 and =1" "--ab in the plan"
bash "$S" --dry-run --ab LD_PRELOAD >"$T/err" 2>&1
[ $? = 2 ] && ok "usage error: --ab LD_PRELOAD (not a switch of the library)" || bad "no usage error for --ab LD_PRELOAD"
run "$T/out4" "$T/w4" FAKE_AB_VAR=ET_CUDA_FUSED_ADD_NORM FAKE_READY_S=4 -- --models gemma1b --variants companion --ab ET_CUDA_FUSED_ADD_NORM ||
  bad "--ab run: exit status $?"
R4=$(ls "$T"/out4/*-hf-scale.md 2>/dev/null | head -1)
has "${R4:-/dev/null}" "## A/B of \`ET_CUDA_FUSED_ADD_NORM\` (graphs, the two settings in turn, two runs each)" "A/B section"
has "${R4:-/dev/null}" "| Gemma-3-1B | companion | 1920.0, 1920.0 | 1728.0, 1728.0 | -10.0 % | MATCH |" "A/B row: the fake's 10 % at =1"
has "${R4:-/dev/null}" "--ab ET_CUDA_FUSED_ADD_NORM" "A/B in the command line"
n=$(grep -c "^\[.*\] run hf_gemma1b_companion/graphs ET_CUDA_FUSED_ADD_NORM=[01] " "$T/w4/timeline.txt")
[ "$n" = 4 ] && ok "4 A/B runs in the timeline" || bad "$n A/B runs in the timeline, not 4"
# ab_results N HEADER ROW RUNS COUNT WHAT: out<N>'s results file has the A/B table's HEADER and
# ROW (the fake is 10 % slower with the setting), and w<N>'s timeline COUNT lines matching RUNS
ab_results() {
  local r k
  r=$(ls "$T/out$1"/*-hf-scale.md 2>/dev/null | head -1)
  has "${r:-/dev/null}" "$2" "$6 header"
  has "${r:-/dev/null}" "$3" "$6 row: the fake's 10 % with the setting"
  k=$(grep -c -- "$4" "$T/w$1/timeline.txt")
  [ "$k" = "$5" ] && ok "$6: $5 runs in the timeline" || bad "$6: $k runs in the timeline, not $5"
}
# --ab VAR=VALUE: the built-in setting against VAR=VALUE (a variant decode image, shown by its name)
bash "$S" --dry-run --ab ET_CUDA_DECODE_KERNELS_PTX=/x/v.fatbin >"$T/plan5" 2>&1 &&
  has "$T/plan5" "plan: A/B of ET_CUDA_DECODE_KERNELS_PTX=/x/v.fatbin: per model and variant, graphs with the built-in setting and with ET_CUDA_DECODE_KERNELS_PTX=/x/v.fatbin in turn" "--ab VAR=VALUE in the plan"
bash "$S" --dry-run --ab "ET_CUDA_X=a b" >"$T/err" 2>&1
[ $? = 2 ] && ok "usage error: --ab with a space in its value" || bad "no usage error for --ab 'ET_CUDA_X=a b'"
run "$T/out5" "$T/w5" FAKE_AB_VAR=ET_CUDA_DECODE_KERNELS_PTX -- --models qwen06b --variants companion --ab ET_CUDA_DECODE_KERNELS_PTX=/x/v.fatbin ||
  bad "--ab VAR=VALUE run: exit status $?"
ab_results 5 "| model | variant | built-in tok/s | ET_CUDA_DECODE_KERNELS_PTX=v.fatbin tok/s | change (means) | tokens vs eager |" \
  "| Qwen3-0.6B | companion | 1920.0, 1920.0 | 1728.0, 1728.0 | -10.0 % | MATCH |" \
  "^\[.*\] run hf_qwen06b_companion/graphs ET_CUDA_DECODE_KERNELS_PTX=/x/v.fatbin " 2 "A/B VAR=VALUE"
# --ab --FLAG: et_cuda_run without and with a flag of its own (the fake is 10 % slower with it)
bash "$S" --dry-run --ab --no-overlap >"$T/plan6" 2>&1 &&
  has "$T/plan6" "plan: A/B of et_cuda_run --no-overlap: per model and variant, graphs without and with --no-overlap in turn, two runs each" "--ab --FLAG in the plan"
bash "$S" --dry-run --ab "--Overlap" >"$T/err" 2>&1
[ $? = 2 ] && ok "usage error: --ab --Overlap (not a flag's spelling)" || bad "no usage error for --ab --Overlap"
run "$T/out6" "$T/w6" FAKE_AB_FLAG=--no-overlap -- --models llama1b --variants companion --ab --no-overlap ||
  bad "--ab --FLAG run: exit status $?"
ab_results 6 "| model | variant | without tok/s | --no-overlap tok/s | change (means) | tokens vs eager |" \
  "| Llama-1B | companion | 1920.0, 1920.0 | 1728.0, 1728.0 | -10.0 % | MATCH |" \
  "^\[.*\] run hf_llama1b_companion/graphs --no-overlap " 2 "A/B --FLAG"
# The reference not ready when the model is timed (FAKE_READY_S=4): stopped meanwhile, timed after.
has "$T/w4/timeline.txt" "timing hf_gemma1b: its reference is not ready, stopped meanwhile" "a reference not ready is stopped while ours run"
has "${R4:-/dev/null}" "| torch.compile(mode=\"reduce-overhead\") | 580.0 |" "its torch slot still runs, after ours"
# every export past the deadline: ended, reported, the references still timed
run "$T/out3" "$T/w3" FAKE_EXPORT_S=60 HFS_EXPORT_DEADLINE=4 HFS_BUDGET=60 "FAKE_GPU_NAME=NVIDIA H100 80GB HBM3" -- --models qwen06b ||
  bad "third run: exit status $?"
R3=$(ls "$T"/out3/*-hf-scale.md 2>/dev/null | head -1)
grep -q "export deadline (4s): ending export_hf_" "$T/w3/timeline.txt" 2>/dev/null && ok "exports ended at the deadline" ||
  bad "no deadline in the timeline: $(tail -3 "$T/w3/timeline.txt" 2>/dev/null | tr '\n' ' ')"
[ -n "$R3" ] && grep -q "| torch.compile(mode=\"reduce-overhead\") | 580.0 |" "$R3" && ok "torch rows without exports" ||
  bad "third run: no torch row in ${R3:-no results file}"
grep -q "| hf_qwen06b_base | not exported: " "${R3:-/dev/null}" && ok "not-exported row" || bad "third run: no not-exported row"
has "${R3:-/dev/null}" "Machine: NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB;" "third run: nvidia-smi's H100 in env.txt"
has "${R3:-/dev/null}" "| floor ((weights + KV) / 3.35 TB/s, NVIDIA H100 80GB HBM3) | 2793 | 100 % |" "third run: Qwen floor at the H100's 3.35 TB/s"
echo "hf_scale: $pass passed, $fail failed"
[ "$fail" = 0 ]
