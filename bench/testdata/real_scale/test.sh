#!/usr/bin/env bash
# CPU test of bench/real_scale.sh and bench/real_scale_table.py (no GPU, no torch), run by
# bench/test_table.sh: the flags, the ncu census on a canned CSV (ncu_sample.csv, made by
# make_ncu_sample.py), and the whole driver with fakes of decode_llama.py, et_cuda_run and ncu
# (fake_*.py): the results file's rows and targets, the census file, a second run's fresh name,
# a failed export and a failed run reported as such, the library's load_phases line (present, and
# absent as from an older library). Ends with "real_scale: N passed, N failed".
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
source "$HERE/../checks.sh"
S=$ROOT/bench/real_scale.sh
TB=$ROOT/bench/real_scale_table.py
# nvidia-smi for the driver's env.txt: a failure, as on a machine without one ("no nvidia-smi")
mkdir -p "$T/bin"
printf '%s\n' '#!/bin/sh' 'exit 9' >"$T/bin/nvidia-smi"
chmod +x "$T/bin/nvidia-smi"

# flags
bash "$S" --dry-run --extra int4 --budget 500 >"$T/plan" 2>&1 && ok "--dry-run exits 0" || bad "--dry-run: $(cat "$T/plan")"
has "$T/plan" "plan: extras (niced, stopped while timing): int4" "--extra int4 in the plan"
has "$T/plan" ", site et15, " "ExecuTorch 1.5.1 site by default"
has "$T/plan" "plan: timing slot: torch, then ours: base/graphs companion/graphs base/eager companion/eager" "run order"
for args in "--extra foo" "--budget x" "--site et99" "--export-deadline 600" "--bogus"; do
  # shellcheck disable=SC2086
  bash "$S" --dry-run $args >"$T/err" 2>&1
  [ $? = 2 ] && ok "usage error: $args" || bad "no usage error for $args: $(cat "$T/err")"
done
python3 "$TB" run "$T/x.log" -- sh -c 'echo --timeout; exit 3'
[ $? = 3 ] && ok "run: the command's exit status" || bad "run: exit status"
has "$T/x.log" "real_scale: rc=3 " "run: status line"
python3 "$TB" run "$T/x.log" >/dev/null 2>&1
[ $? = 2 ] && ok "run without a command: usage error" || bad "run without a command"

# census on the canned CSV: a prefill then three decode steps of 27 kernels
python3 "$TB" census "$HERE/ncu_sample.csv" --md "$T/c.md" >"$T/c.out" 2>&1 || bad "census: $(cat "$T/c.out")"
has "$T/c.out" '"step_kernels": 27' "census: the step found"
has "$T/c.out" '"repeats": 3' "census: three repeats"
has "$T/c.out" '"gemm_kernels": 17' "census: GEMM kernels"
has "$T/c.md" "| \`triton_tem_fused_mm_8\` | GEMM | 1 | 130.0 | 33.6 % | 525.34 | 0.26 | 4043 | 84.2 % |" "census: per-kernel row (thousands separators read)"
has "$T/c.md" "| \`sdpa_fused_kernel_4\` | attention | 4 | 60.0 |" "census: attention row"
has "$T/c.md" "% of 4.8 TB/s, assumed: GPU unknown)" "census without --gpu: 4.8 TB/s assumed"
python3 "$TB" census "$HERE/ncu_sample.csv" --md "$T/c2.md" --gpu "NVIDIA H100 80GB HBM3" >/dev/null 2>&1
has "$T/c2.md" "| \`triton_tem_fused_mm_8\` | GEMM | 1 | 130.0 | 33.6 % | 525.34 | 0.26 | 4043 | 120.7 % |" "census --gpu H100: % of 3.35 TB/s"
has "$T/c2.md" "| GB/s | % of 3.35 TB/s |" "census --gpu H100: column header"

# the driver with fakes
run() { # out work extra-env...
  local out=$1 work=$2
  shift 2
  mkdir -p "$T/bundle" "$T/site"
  echo abc1234 >"$T/bundle/COMMIT"
  env PATH="$T/bin:$PATH" OUT="$out" REAL_WORK="$work" REAL_BUNDLE_DIR="$T/bundle" REAL_SITE_DIR="$T/site" REAL_SITE12_DIR="$T/site12" REAL_DECODE="$HERE/fake_decode.py" \
    REAL_RUNNER="$HERE/fake_runner.py" REAL_NCU="$HERE/fake_ncu.py" REAL_BUDGET=150 REAL_EXPORT_DEADLINE=60 "$@" \
    bash "$S" >"$work.log" 2>&1
}
run "$T/out" "$T/w1" || bad "real_scale.sh with fakes: exit status $?"
R=$(ls "$T"/out/*-abc1234-real-scale.md 2>/dev/null | head -1)
if [ -z "$R" ]; then
  bad "no results file in $T/out: $(tail -5 "$T/w1.log")"
else
  ok "results file $(basename "$R")"
  has "$R" "| ours, companion + CUDA graphs | 1210.0 | 62.4 % | 2.09x | 250.0 / 12.5 | 9.5 / 6.5 | 1.00 | 127 | MATCH |" "companion + graphs row"
  has "$R" "| torch.compile(mode=\"reduce-overhead\") | 580.0 | 29.9 % | 1.00x |" "torch.compile row"
  has "$R" "| floor ((weights + KV) / 4.8 TB/s, assumed: GPU 'no nvidia-smi' not known) | 1940 | 100 % |" "floor row (no nvidia-smi: 4.8 TB/s assumed)"
  has "$R" "| Llama-1B base + graphs >= 50 % of the floor | 473.0 tok/s = 24.4 % | **MISS** |" "target missed"
  has "$R" "| Llama-1B companion: host time per replayed decode execute <= 15 µs | 9.5 µs (127 replays of 127 executes) | **PASS** |" "host time target"
  has "$R" "| ours, int4 + CUDA graphs | 2200.0 |" "int4 row"
  has "$R" "| qwen06b_base | 27 | 387 | 1155 | 2984 | 17 | 80 % | 3698 (77 %) | 2584 |" "census summary row"
  has "$R" "| base | graphs | 3.000 |" "load row"
  has "$R" "| 612.3 | 45.1 | 3.2 | 100.0 | 1.4 | 30.0 | 60.0 % | pinned (128) |" "load row: the library's load_phases (fetch, .so open, container, upload, GB/s, % of pinned, staging)"
  has "$R" "| 612.3 | 45.1 | 3.2 | 125.0 | 1.4 | 24.0 | 48.0 % | pageable (128) |" "load row: pageable staging"
  if grep -E '^\| int4 \| graphs \| 3\.000 \| [^|]* \| [^|]* \| n/a \| n/a \| n/a \| n/a \|' "$R" >/dev/null; then
    ok "load row without a load_phases line (older library): phases n/a"
  else bad "int4 load row: $(grep -E '^\| int4 \| graphs' "$R")"; fi
  has "$R" "| Load: upload >= 80 % of pinned H2D (base, graphs; measured) | 30.0 vs 50.0 GB/s | **MISS** |" "upload target from the measured rate"
  has "$R" "<!-- figure: real.llama1b.base.upload_gb_s | 30 | GB/s | higher |" "upload figure line"
  has "$R" "<!-- figure: real.llama1b.companion.graphs.decode_tok_s | 1210 | tok/s | higher |" "figure line"
  has "$R" "pinned host-to-device 50.0 GB/s" "pinned H2D"
  [ -f "${R%.md}-census.md" ] && ok "census file" || bad "no census file"
  [ -f "$T/out/logs.tar.xz" ] && [ -f "$T/out/raw/ref_llama1b.json" ] && ok "logs and raw JSON" || bad "logs or raw JSON missing"
fi
cp "$R" "$T/first.md" 2>/dev/null
# a second run into the same $OUT: a fresh name, the first file untouched; a failed export and run
run "$T/out" "$T/w2" FAKE_EXPORT_FAIL=companion FAKE_RUNNER_FAIL=base REAL_EXTRA=none || bad "second run: exit status $?"
R2=$(ls "$T"/out/*-abc1234-real-scale-2.md 2>/dev/null | head -1)
if [ -z "$R2" ]; then
  bad "second run: no -2 file ($(ls "$T/out" | tr '\n' ' '))"
else
  ok "second run: $(basename "$R2")"
  cmp -s "$R" "$T/first.md" && ok "first results file unchanged" || bad "first results file changed"
  has "$R2" "| companion | not finished: \`companion: RuntimeError: planted export failure\` | | |" "failed export reported"
  has "$R2" "| ours, base + CUDA graphs | failed: " "failed run reported"
  if grep -q "qwen06b" "$R2"; then bad "--extra none still ran qwen06b"; else ok "REAL_EXTRA=none"; fi
fi
# an ExecuTorch 1.5.1 export that fails early is exported again with 1.2, and its row is there
mkdir -p "$T/site12"
run "$T/out3" "$T/w3" FAKE_EXPORT_FAIL=companion FAKE_EXPORT_FAIL_ONLY_WITH="$T/site" REAL_EXTRA=none ||
  bad "third run: exit status $?"
if grep -q "fallback: export_companion exported again with ExecuTorch 1.2" "$T/w3/timeline.txt" 2>/dev/null; then
  ok "et15 export failure: retried with et12"
else
  bad "et15 export failure: no retry ($(grep -i 'companion' "$T/w3/timeline.txt" 2>/dev/null | tr '\n' ' '))"
fi
R3=$(ls "$T"/out3/*-real-scale.md 2>/dev/null | head -1)
[ -n "$R3" ] && grep -q "| ours, companion + CUDA graphs | " "$R3" && ok "retried export has its rows" ||
  bad "retried export: no companion rows in ${R3:-no results file}"
# where a token mismatch starts
v=$(cd "$HERE/../.." && python3 -c "import real_scale_table as t; print(t.verdict({'tokens': '5,6,7,8', 'expected': '5,6,9,8'}, 'MISMATCH'), t.verdict({}, 'MATCH'))")
[ "$v" = "MISMATCH at 2 MATCH" ] && ok "mismatch position" || bad "mismatch position: $v"
# the load_phases line: parsed from a log among other lines; the upload rate from it
printf '%s\n' "et_cuda_run: loading" "load_phases: fetch_ms=612.3 so_open_ms=45.1 container_ms=3.2 upload_ms=410.2 upload_bytes=2472000000 upload_gbps=6.03 staging=pinned peak_host_staging_bytes=134217728" \
  "generate: decode_tok_s=1.0 tokens=1 expected=none UNCHECKED" >"$T/lp.log"
v=$(cd "$HERE/../.." && python3 -c "
import sys, real_scale_table as t
r = t.parse_run(sys.argv[1])['load_phases']
print(r['fetch_ms'], r['staging'], r['peak_host_staging_bytes'], t.load_phases_upload(r),
      t.load_phases_upload({'upload_ms': '500', 'upload_bytes': '2000000000'}), t.load_phases_upload(None),
      t.load_phases_upload({'upload_ms': '0', 'upload_bytes': '5'}))" "$T/lp.log")
[ "$v" = "612.3 pinned 134217728 (6.03, True) (4.0, True) (None, False) (None, False)" ] && ok "load_phases parsing" || bad "load_phases parsing: $v"
echo "real_scale: $pass passed, $fail failed"
[ "$fail" = 0 ]
