#!/usr/bin/env bash
# CPU test of the benchmark's plumbing (no GPU, no torch needed):
#  1. table.py on canned runner logs (bench/testdata/canned: et_cuda_run --json's records, a 3-round token
#     loop among them, whose last round is the one read) -> the expected target and table rows; the
#     readers of both tables on a failed case;
#  2. the .ptd reader (table_read.py) on files ExecuTorch wrote (an ExecuTorch 1.2 fixture's weights, and a
#     FlatTensor file with several keys written by ExecuTorch 1.5.1's serializer);
#  3. bench/run.sh end to end in BENCH_TEST_CPU=1 mode (fake runner, fake upstream builds and suite
#     decoders, canned int4 rows): every section runs and the dated results file has each kind of
#     row; a second run writes a second file, leaves the first byte for byte and adds one index
#     line; bench/results.py itself (testdata/test_results.py) and bench/RESULTS.md against bench/results/;
#  3c. bench/side_by_side_table.py on canned logs (testdata/sbs_canned: --json records) and bench/side_by_side.sh end to
#     end with SBS_TEST_CPU=1 (fake runner, programs and upstream builds);
#  3d. bench/real_scale.sh and real_scale_table.py: flags, the ncu census on a canned CSV, the driver end to
#     end with fakes (testdata/real_scale/test.sh);
#  3e. bench/hf_scale.sh and hf_scale_table.py (the HF transformers decoders): flags, the driver end to
#     end with the same fakes (testdata/hf_scale/test.sh);
#  3f. bench/trace/trace_table.py on a canned timeline (testdata/trace/timeline.tsv): the step's span,
#     PDL overlap, each kernel kind's advance of the step's end, the time between replays and its
#     breakdown into driver calls, copies and kernels;
#  4. et_cuda_run --mem against a stand-in libcuda.so.1, when a built runner is there
#     (ET_CUDA_RUN=path, default build/et_cuda_run) and cc works; skipped otherwise.
# Ends with "N passed, N failed"; exit status 1 when anything failed.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
source "$HERE/testdata/checks.sh"

# 3d and 3e (their own temporary folders, no shared files or process names) run beside the rest
# from the start; their results are read where they are listed below.
bash "$HERE/testdata/real_scale/test.sh" >"$T/real_scale.log" 2>&1 &
REAL_SCALE_PID=$!
bash "$HERE/testdata/hf_scale/test.sh" >"$T/hf_scale.log" 2>&1 &
HF_SCALE_PID=$!

# ------------------------------------------------------------------ 1. canned logs
C=$HERE/testdata/canned
if python3 "$HERE/table.py" --index "$C/runs.tsv" --torch "$C/torch.jsonl" --notes "$C/notes.txt" \
  --int4 "$HERE/testdata/int4_sample.json" --gen-n 48 --out "$T/canned.md" >/dev/null 2>"$T/canned.err"; then
  ok "table.py on the canned logs"
else
  bad "table.py on the canned logs: $(tail -3 "$T/canned.err")"
fi
M=$T/canned.md
has "$M" "| graphs + wait p50 ≤ torch cudagraph p50 | mlp_f32 | 12.4 µs vs 13.1 µs (0.95x) | **PASS** |" "graphs target met (mlp_f32)"
has "$M" "| graphs + wait p50 ≤ torch cudagraph p50 | conv_f32 | 21.0 µs vs 19.7 µs (1.07x) | **MISS** |" "graphs target missed (conv_f32)"
has "$M" "| backend overhead per replayed execute ≤ 5 µs | mlp_f32 | 3.1 µs (lib execute 6.9 µs/call; 2100 replays, 1 captures, 0 fallbacks) | **PASS** |" "replay overhead met"
has "$M" "| backend overhead per replayed execute ≤ 5 µs | conv_f32 | 6.2 µs" "replay overhead figure (conv_f32)"
has "$M" "| graphs + wait p50 ≤ torch cudagraph p50 | attn_bf16 | not measured (graphs row: error: /m/attn_bf16/model.pte: executing 'forward' failed" "failed graphs run reported with its error"
has "$M" "| graphs + wait p50 ≤ torch cudagraph p50 | deep_bf16 | not measured (graphs row: skipped (time budget); torch cudagraph: not run) | **n/a** |" "skipped run reported"
has "$M" "| decode tok/s with graphs ≥ 2× ours without (upstream cannot run it with graphs) | qwen3_bf16 | 1800 vs 1000 tok/s: 1.80x | **MISS** |" "decode target, no upstream graphs"
has "$M" "| decode tok/s with graphs ≥ 1.3× upstream with its graphs | et15_qwen3_bf16 | 2600 vs 1900 tok/s (upstream main cff6f4dd32 (C++) + graphs): 1.37x | **PASS** |" "decode target against upstream's graphs"
has "$M" "| two-method program: weights held ≤ 1.05× one copy | qwen3_pd_bf16 | 1.00x (+ weight sharing: 4.0 MiB saved by the driver's count; library counter 1.02x; whole footprint 4.00x) | **PASS** |" "sharing target"
has "$M" "One copy of the weights: 4.00 MiB (\`prefill_weights_blob\` in the .ptd)." "weights size from the .ptd"
has "$M" "| et + weight+cache sharing | 16.1 | 16.1 | 3.9 | 1.03x | 4128768 | 1.02x | 4.03x | MATCH |" "sharing row"
has "$M" "| int4 GEMV ≥ 2.4 TB/s (50 % of HBM) | M=4 N=K=4096 | 1.95 TB/s (kernel time (CUPTI)) | **MISS** |" "int4 target row"
has "$M" "| 1 | 8192 | 128 | 8 | 13.0 | 2.74 | 22.1 | 1.61 | 40.3 | 3.33 | 13.0 | 22.1 | 40.3 |" "int4 bandwidth row"
has "$M" "| mlp_f32 | upstream v1.2.0 (C++) host-io | 42.0 | 59.1 | 43.8 | – | – | – | 1.18x | 2.0 / 4.0 | PASS (case0 8.94e-08) |" "upstream latency row"
has "$M" "| mlp_f32 | host-io | v1.2.0 | 42.0 | 35.3 | 0.84x | ok |" "ours / upstream ratio"
has "$M" "| mlp_f32 | **best**: ours device-io + graphs + wait per call vs upstream host-io | v1.2.0 | 42.0 | 12.4 | **0.30x** | |" "best against best"
has "$M" "| mlp_f32 | host-io | main cff6f4dd32 | – | 35.3 | – | REFUSED: Tensor 0 expected device_type=CUDA (1), got 0. Device info may not be properly propagated from CudaPartitioner. |" "refusal in the ratio table"
has "$M" "- upstream main cff6f4dd32 refuses programs exported by ExecuTorch 1.2 (e.g. mlp_f32 / upstream main cff6f4dd32 (C++) host-io): \`Tensor 0 expected device_type=CUDA (1), got 0." "refusal in the notes"
has "$M" "| qwen3_pd_bf16 | et + weight sharing | 2.500 | 2500.0 | 1100.0 | 1.00 | 16.0 / 16.0 | MISMATCH (first 4 checked) | no | ok |" "token row compared with the matching run"
has "$M" "| et15_qwen3_bf16 | upstream main cff6f4dd32 (C++) + graphs | 3.000 | 2500.0 | 1900.0 | n/a | 8.0 / 8.0 | MATCH (first 4 checked) | yes | ok |" "upstream token row"
has "$M" "| mlp_f32 | upstream main cff6f4dd32 | upstream main cff6f4dd32 (C++) host-io | 2.0 | 2.0 |" "memory row of a refused run"
has "$M" "- deep_bf16 / torch aoti: segfault (signal 11)" "torch problem listed"
has "$M" "<!-- figure: decode_tok_s.graphs.et15_qwen3_bf16 | 2600 | tok/s | higher | token loop, 48 tokens, ours: et + graphs -->" "figure line for the index"
if python3 "$HERE/table.py" --index "$C/runs.tsv" --out "$M" >/dev/null 2>&1; then bad "table.py replaced an existing results file"; else ok "table.py refuses to replace an existing --out"; fi
# The readers of both tables on a log with a failed case (no max_abs_err: null in JSON), a device-IO case,
# the text lines the runner keeps under --json, and a line that is not a record.
cat >"$T/fail.log" <<'LOG'
$ et_cuda_run --manifest m.json --bench 10 --device-io --json --mem
{"kind":"case","method":"forward","case":"case0","max_abs_err":0.000123456,"pass":true,"problem":""}
{"kind":"case","method":"forward","case":"case1 device-io","max_abs_err":null,"pass":false,"problem":"output 0: nan"}
{"kind":"bench","method":"forward","n":10,"warmup":0,"min_us":9.96,"p50_us":10.04,"p99_us":12,"cpu_mean_us":10.5}
{"kind": broken
mem: device=0 total_mib=100.0 context_mib=10.0 loaded_mib=2.0 peak_mib=4.0 end_mib=4.0 samples=2
et_cuda_run: m.pte: made up for the test
LOG
if python3 - "$HERE" "$T/fail.log" <<'PY' >"$T/fail.out" 2>&1; then
import sys
sys.path.insert(0, sys.argv[1])
import side_by_side_table
import table
p = table.parse_et_log(sys.argv[2])
assert table.check_summary(p["checks"]) == "FAIL: case1 device-io err n/a output 0: nan", p["checks"]
assert p["bench"] == {"bench": {"n": 10, "p50": 10.0, "p99": 12.0, "host": 10.5}}, p["bench"]
assert p["mem"]["peak_mib"] == 4.0 and p["errors"] == ["m.pte: made up for the test"], p
s = side_by_side_table.parse_log(sys.argv[2])
assert s["cases"] == [("forward", 0, 0.000123456, True), ("forward", 1, None, False)], s["cases"]
assert s["error"] == "m.pte: made up for the test" and s["mem"]["peak_mib"] == "4.0", s
PY
  ok "table readers: a failed case, figures at the text lines' precision"
else
  bad "table readers: $(tail -3 "$T/fail.out")"
fi

# ------------------------------------------------------------------ 2. the .ptd reader
if python3 - "$HERE" <<'EOF' >"$T/ptd.out" 2>&1; then ok "ptd_segments on ExecuTorch's files"; else bad "ptd_segments: $(tail -3 "$T/ptd.out")"; fi
import sys
sys.path.insert(0, sys.argv[1])
import table_read
# conv_f32.ptd: the shared conv_f32 fixture's aoti_cuda_blob.ptd (ExecuTorch 1.2); its
# forward_weights_blob.bin, extracted beside it in tests/fixtures, is 864 bytes.
got = table_read.ptd_segments(sys.argv[1] + "/testdata/conv_f32.ptd")
assert got == {"forward_weights_blob": 864}, got
# two_methods.ptd: ExecuTorch 1.5.1's FlatTensorSerializer, 4 keys, one segment shared by two keys.
got = table_read.ptd_segments(sys.argv[1] + "/testdata/two_methods.ptd")
assert got == {"prefill_weights_blob": 3000, "decode_weights_blob": 2500, "alias_of_prefill": 3000, "tiny": 17}, got
try:
    table_read.ptd_segments(sys.argv[1] + "/testdata/int4_sample.json")
    raise AssertionError("a JSON file was read as a .ptd")
except ValueError:
    pass
EOF

# ------------------------------------------------------------------ 3. run.sh, CPU mode
# PYTHONPATH is cleared so that the result does not depend on a torch being importable here.
# The results are kept in $T/results with the index $T/index.md (BENCH_RESULTS_DIR/_INDEX), as here
# with bench/results and bench/RESULTS.md; the commit in the names is fixed (ET_RESULTS_COMMIT).
KEEP=(BENCH_RESULTS_DIR="$T/results" BENCH_RESULTS_INDEX="$T/index.md" ET_RESULTS_COMMIT=abc1234)
if env -u PYTHONPATH "${KEEP[@]}" BENCH_TEST_CPU=1 BENCH_INT4_JSON="$HERE/testdata/int4_sample.json" OUT="$T/out" \
  BENCH_WORK="$T/work" BENCH_SUITE_DIR="$T/work/suite" bash "$HERE/run.sh" >"$T/run.log" 2>&1; then
  ok "run.sh BENCH_TEST_CPU=1 exits 0"
else
  bad "run.sh BENCH_TEST_CPU=1: exit status $? ($(tail -3 "$T/run.log"))"
fi
TODAY=$(date -u +%F)
R=$T/out/$TODAY-abc1234-bench.md
for f in "$TODAY-abc1234-bench.md" bench_logs.tar.xz bench_models.tar.xz int4_results.json; do
  [ -s "$T/out/$f" ] && ok "\$OUT/$f written" || bad "\$OUT/$f missing"
done
if [ -f "$T/results/$TODAY-abc1234-bench.md" ] && cmp -s "$R" "$T/results/$TODAY-abc1234-bench.md"; then
  ok "results file kept in BENCH_RESULTS_DIR"
else
  bad "results file not in BENCH_RESULTS_DIR: $(ls "$T/results" 2>&1)"
fi
has "$T/index.md" "| $TODAY | abc1234 | [$TODAY-abc1234-bench.md](results/$TODAY-abc1234-bench.md) | bench/run.sh: sections" "index line of the first run"
has "$T/index.md" "| graphs_wait_p50_us.mlp_f32 | " "best figure from the run's figure lines"
sum1=$(sha256sum <"$R")
sumk1=$(sha256sum <"$T/results/$TODAY-abc1234-bench.md" 2>/dev/null)
lines1=$(grep -c "^| $TODAY | abc1234 |" "$T/index.md" 2>/dev/null)
n=$(find "$T/out" -type f | wc -l)
[ "$n" -le 8 ] && ok "\$OUT holds $n files (at most 8)" || bad "\$OUT holds $n files"
if [ -s "$R" ]; then
  has "$R" "| mlp_f32 | et default device-io + graphs + wait per call |" "run.sh: graphs row"
  has "$R" "| mlp_f32 | upstream v1.2.0 (C++) host-io |" "run.sh: upstream v1.2.0 row"
  has "$R" "| et15dev_mlp_f32 | upstream main cff6f4dd32 (C++) device-io + graphs + wait per call |" "run.sh: upstream graphs row"
  has "$R" "- upstream v1.4.1 refuses programs exported by ExecuTorch 1.2" "run.sh: refusal recorded"
  has "$R" "| decode tok/s with graphs ≥ 1.3× upstream with its graphs | et15_qwen3_bf16 |" "run.sh: decode target"
  has "$R" "| two-method program: weights held ≤ 1.05× one copy | qwen3_pd_bf16 | 1.03x" "run.sh: sharing target"
  has "$R" "| qwen3_pd_bf16 | et + weight+cache sharing + graphs |" "run.sh: pd with graphs"
  has "$R" "| int4 GEMV ≥ 2.4 TB/s (50 % of HBM) | M=1 N=K=8192 | 2.74 TB/s (kernel time (CUPTI)) | **PASS** |" "run.sh: int4 rows"
  has "$R" "- mlp_f32 / device-io refused on planned inputs: PASS (refused: memory-planned inputs)" "run.sh: check row"
  has "$R" "- upstream v1.2.0-own-runtime: built against its own runtime" "run.sh: own-runtime build left out"
  has "$R" "- speedup: p50=1.78x per_iter_total=1.77x" "run.sh: pipeline"
  # Every runner call with --json (the fake runner refuses to run without it).
  n=$(grep -L -- ' --json' "$T"/work/run/logs/et.*.log | wc -l)
  [ "$n" = 0 ] && ok "run.sh: every et_cuda_run call with --json" || bad "run.sh: $n runner calls without --json"
  if tar -xJf "$T/out/bench_logs.tar.xz" -C "$T" ./runs.tsv 2>/dev/null && [ "$(wc -l <"$T/runs.tsv")" -ge 60 ]; then
    ok "bench_logs.tar.xz holds the run index ($(wc -l <"$T/runs.tsv") runs)"
  else
    bad "bench_logs.tar.xz has no full runs.tsv"
  fi
  mkdir -p "$T/unpacked"
  if tar -xJif "$T/out/bench_models.tar.xz" -C "$T/unpacked" 2>/dev/null && [ -f "$T/unpacked/mlp_f32/manifest.json" ]; then
    ok "bench_models.tar.xz unpacks (tar -xJif)"
  else
    bad "bench_models.tar.xz does not unpack"
  fi
fi

# The bundle carried as one archive (BENCH_BUNDLE_TAR): unpacked, its fixtures used.
mkdir -p "$T/b/gpu" && cp "$HERE/testdata/fake_runner.py" "$T/b/gpu/et_cuda_run" &&
  python3 "$HERE/testdata/make_fakes.py" --fixtures "$T/b/gpu/fixtures" >/dev/null && tar -cJf "$T/gpu.tar.xz" -C "$T/b" gpu
# A second run, same day, same commit, same $OUT and results folder: a second file, the first
# left byte for byte, one more index line.
R2=$T/out/$TODAY-abc1234-bench-2.md
if env -u PYTHONPATH "${KEEP[@]}" BENCH_TEST_CPU=1 BENCH_BUNDLE_TAR="$T/gpu.tar.xz" BENCH_SECTIONS=ours BENCH_LIST=mlp_f32 \
  OUT="$T/out" BENCH_WORK="$T/work2" bash "$HERE/run.sh" >"$T/run2.log" 2>&1 &&
  grep -q "bundle $T/work2/bundle/gpu," "$T/run2.log" &&
  grep -qF "| mlp_f32 | et default host-io |" "$R2"; then
  ok "BENCH_BUNDLE_TAR: unpacked and used"
else
  bad "BENCH_BUNDLE_TAR: $(head -1 "$T/run2.log")"
fi
[ "$(sha256sum <"$R")" = "$sum1" ] && ok "second run: first results file in \$OUT unchanged" ||
  bad "second run changed $R"
if [ "$(sha256sum <"$T/results/$TODAY-abc1234-bench.md")" = "$sumk1" ] && [ -f "$T/results/$TODAY-abc1234-bench-2.md" ]; then
  ok "second run: a second kept file, the first unchanged"
else
  bad "second run: kept files $(ls "$T/results")"
fi
if [ -f "$T/out/bench_logs.tar.xz" ] && [ -f "$T/out/bench_logs.$TODAY-abc1234-bench-2.tar.xz" ]; then
  ok "second run: its own log archive"
else
  bad "second run: log archives $(ls "$T/out")"
fi
lines2=$(grep -c "^| $TODAY | abc1234 |" "$T/index.md")
[ "$lines2" -eq $((lines1 + 1)) ] && ok "second run: the index gained one line ($lines1 -> $lines2)" ||
  bad "second run: index lines $lines1 -> $lines2"
python3 "$HERE/results.py" check --dir "$T/results" --index "$T/index.md" >"$T/check.out" 2>&1 &&
  ok "results.py check on the test index" || bad "results.py check: $(cat "$T/check.out")"

# ------------------------------------------------------------------ 3b. bench/results.py itself
if python3 "$HERE/testdata/test_results.py" "$HERE" "$T/rp" >"$T/rp.out" 2>&1; then
  ok "results.py: fresh names, no overwrite, best figures, check"
else
  bad "results.py: $(tail -5 "$T/rp.out")"
fi
if python3 "$HERE/results.py" check --dir "$HERE/results" --index "$HERE/RESULTS.md" >"$T/repo_check.out" 2>&1; then
  ok "results.py check on bench/RESULTS.md and bench/results/"
else
  bad "bench/RESULTS.md vs bench/results/: $(cat "$T/repo_check.out")"
fi

# ------------------------------------------------------------------ 3c. side by side (bench/side_by_side.sh)
S=$T/sbs.md
if python3 "$HERE/side_by_side_table.py" --index "$HERE/testdata/sbs_canned/runs.tsv" \
  --notes "$HERE/testdata/sbs_canned/notes.txt" --out "$S" >/dev/null 2>"$T/sbs.err"; then
  ok "side_by_side_table.py on the canned logs"
else
  bad "side_by_side_table.py: $(tail -3 "$T/sbs.err")"
fi
has "$S" "| et14_qwen3_bf16 | ours | plain | 2/2 (max err 0.25) | MATCH | yes | ok |" "sbs: cases and tokens"
has "$S" "| et14_qwen3_bf16 | ours | plain | 3 x 48 | 0.200 | 30000.0 | 6000.0 | 1.00 | 10.000 | ok |" "sbs: steady token loop, host CPU per token"
has "$S" "| et14_qwen3_bf16 | ours | plain | 750.0 | 400.0 | 5.000 | 4.0 / 128.0 | ok |" "sbs: cold start, load, memory"
has "$S" "| et14_qwen3_bf16 | v1.4.1 | best | 1 x 48 | 5.500 | 1100.0 | 5500.0 | n/a | – | ok in the 1-round run; the 3-round run: error:" "sbs: upstream steady run failed, 1-round figures shown"
has "$S" "| et14_qwen3_bf16 | plain | v1.4.1 | 6000.0 | 4000.0 | 1.50x | 0.75x | 0.80x |" "sbs: ours / upstream"
has "$S" "| et14_qwen3_bf16 | best | v1.4.1 | 5000.0 | 5500.0 (both 1-round runs: a steady run failed) | 0.91x | 0.78x | 0.65x |" "sbs: 1-round runs compared with each other"
has "$S" "- et14_llama1b_bf16 / ours / plain / cases: skipped" "sbs: skipped run listed"
has "$S" "<!-- figure: sbs.decode_ours_over_upstream.v1.4.1.plain.et14_qwen3_bf16 | 1.5 | x | higher |" "sbs: figure line"
if grep -q "sbs.decode_ours_over_upstream.v1.4.1.best" "$S"; then bad "sbs: figure from a 1-round comparison"; else ok "sbs: no figure from 1-round runs"; fi
# end to end: fake runner, fake programs and upstream builds; two programs, one upstream build
if env -u PYTHONPATH SBS_TEST_CPU=1 OUT="$T/sbsout" SBS_WORK="$T/sbsw" SBS_MODELS="$T/sbsm" SBS_UPSTREAM_DIR="$T/sbsu" \
  SBS_PROGRAMS=et14_qwen3_bf16,et14_qwen3_pd_bf16 SBS_BUILDS=v1.4.1 ET_RESULTS_COMMIT=abc1234 \
  bash "$HERE/side_by_side.sh" >"$T/sbs.log" 2>&1; then
  ok "side_by_side.sh SBS_TEST_CPU=1 exits 0"
else
  bad "side_by_side.sh SBS_TEST_CPU=1: exit status $? ($(tail -3 "$T/sbs.log"))"
fi
S2=$T/sbsout/$TODAY-abc1234-side-by-side.md
for f in "$S2" "$T/sbsout/sbs_logs.tar.xz" "$T/sbsout/et14_models.tar.xz"; do
  [ -s "$f" ] && ok "side_by_side.sh wrote $(basename "$f")" || bad "side_by_side.sh: no $(basename "$f")"
done
if [ -s "$S2" ]; then
  has "$S2" "| et14_qwen3_bf16 | ours | best | 3 x 48 |" "sbs run: ours best steady row"
  has "$S2" "| et14_qwen3_bf16 | v1.4.1 | plain | 3 x 48 |" "sbs run: upstream plain steady row"
  has "$S2" "| et14_qwen3_pd_bf16 | ours | best |" "sbs run: prefill+decode program"
  has "$S2" "| et14_qwen3_bf16 | best | v1.4.1 |" "sbs run: ratio row"
  n=$(grep -c "" "$T/sbsw/run/runs.tsv" 2>/dev/null)
  [ "$n" = 24 ] && ok "sbs run: 24 runner calls (2 programs x 2 backends x 2 configs x 3)" || bad "sbs run: $n runner calls"
  n=$(grep -L -- ' --json' "$T"/sbsw/run/logs/et14_*.log | wc -l)
  [ "$n" = 0 ] && ok "sbs run: every runner call with --json, upstream's too" || bad "sbs run: $n runner calls without --json"
  grep -q -- "--option share_mutable_buffers_across_methods=true" "$T"/sbsw/run/logs/et14_qwen3_pd_bf16.ours.best.steady.log &&
    ! grep -q "share_mutable" "$T"/sbsw/run/logs/et14_qwen3_pd_bf16.v1.4.1.best.steady.log &&
    ok "sbs run: cache sharing option for ours only" || bad "sbs run: options of the pd runs"
fi
# The big program's export: paused (SIGSTOP) while the small programs run, resumed, its program run
# last; a call that times out skips the rest of its backend and configuration.
SB=(env -u PYTHONPATH SBS_TEST_CPU=1 SBS_BUILDS=v1.4.1 ET_RESULTS_COMMIT=abc1234 SBS_PROGRAMS=et14_qwen3_bf16,et14_llama1b_bf16)
"${SB[@]}" OUT="$T/sbsA" SBS_WORK="$T/sbswA" SBS_MODELS="$T/sbsmA" SBS_UPSTREAM_DIR="$T/sbsu" SBS_TEST_EXPORT_S=1 \
  SBS_TEST_BIG_EXPORT_S=2 SBS_RUN_TIMEOUT=3 FAKE_SLEEP="et14_qwen3_bf16+v1.4.1+enable_cuda_graph+--generate-rounds 1=30" \
  bash "$HERE/side_by_side.sh" >"$T/sbsA.log" 2>&1
SA=$(ls "$T"/sbsA/*-side-by-side.md 2>/dev/null | head -1)
if [ -n "$SA" ]; then
  has "$SA" "big export (et14_llama1b_bf16) paused at" "sbs big: export paused during the small runs"
  has "$SA" "big export resumed at" "sbs big: export resumed"
  has "$SA" "| et14_llama1b_bf16 | ours | best | 3 x 48 |" "sbs big: the big program ran after its export"
  has "$SA" "- et14_qwen3_bf16 / v1.4.1 / best / cold: TIMEOUT" "sbs big: a call that timed out"
  has "$SA" "- et14_qwen3_bf16 / v1.4.1 / best / steady: skipped" "sbs big: the rest of that configuration skipped"
  has "$SA" "| et14_qwen3_bf16 | v1.4.1 | plain | 3 x 48 |" "sbs big: the other configuration ran"
  order=$(cut -f1 "$T/sbswA/run/runs.tsv" | uniq | tr '\n' ' ')
  [ "$order" = "et14_qwen3_bf16 et14_llama1b_bf16 " ] && ok "sbs big: small program first" || bad "sbs big: run order $order"
  [ "$(cut -f3 "$T/sbswA/run/runs.tsv" | head -1)" = best ] && ok "sbs big: best configuration first" ||
    bad "sbs big: first configuration $(cut -f3 "$T/sbswA/run/runs.tsv" | head -1)"
else
  bad "sbs big: no results file ($(tail -3 "$T/sbsA.log"))"
fi
# A big export that does not end in time is stopped, the small rows are there, the budget is kept.
t0=$(date +%s)
"${SB[@]}" OUT="$T/sbsB" SBS_WORK="$T/sbswB" SBS_MODELS="$T/sbsmB" SBS_UPSTREAM_DIR="$T/sbsu" SBS_TEST_EXPORT_S=1 \
  SBS_TEST_BIG_EXPORT_S=300 SBS_BUDGET=20 SBS_BIG_RESERVE=8 bash "$HERE/side_by_side.sh" >"$T/sbsB.log" 2>&1
dt=$(($(date +%s) - t0))
SBf=$(ls "$T"/sbsB/*-side-by-side.md 2>/dev/null | head -1)
if [ -n "$SBf" ]; then
  has "$SBf" "et14_llama1b_bf16) stopped at" "sbs stop: big export stopped at its deadline"
  has "$SBf" "- et14_llama1b_bf16: not exported" "sbs stop: big program reported as not exported"
  has "$SBf" "| et14_qwen3_bf16 | v1.4.1 | plain | 3 x 48 |" "sbs stop: small rows written"
else
  bad "sbs stop: no results file ($(tail -3 "$T/sbsB.log"))"
fi
[ "$dt" -le 30 ] && ok "sbs stop: ended in ${dt}s (budget 20 s)" || bad "sbs stop: took ${dt}s with a budget of 20 s"
# SIGTERM (the device tool's time limit): the dated file from what ran, the running call recorded,
# no export left behind.
"${SB[@]}" OUT="$T/sbsC" SBS_WORK="$T/sbswC" SBS_MODELS="$T/sbsmC" SBS_UPSTREAM_DIR="$T/sbsu" SBS_TEST_EXPORT_S=1 \
  SBS_TEST_BIG_EXPORT_S=300 FAKE_SLEEP="et14_qwen3_bf16+v1.4.1+--generate-rounds 1=60" \
  bash "$HERE/side_by_side.sh" >"$T/sbsC.log" 2>&1 &
cpid=$!
for _ in $(seq 100); do grep -q "v1.4.1 / best / cases" "$T/sbsC.log" 2>/dev/null && break; sleep 0.2; done
sleep 1
kill -TERM "$cpid"
wait "$cpid"
crc=$?
SC=$(ls "$T"/sbsC/*-side-by-side.md 2>/dev/null | head -1)
[ "$crc" = 143 ] && ok "sbs TERM: exit status 143" || bad "sbs TERM: exit status $crc"
if [ -n "$SC" ]; then
  has "$SC" "- et14_qwen3_bf16 / v1.4.1 / best / cold: exit status 143" "sbs TERM: the running call recorded"
  has "$SC" "programs not run to the end: et14_qwen3_bf16 et14_llama1b_bf16" "sbs TERM: what did not run"
else
  bad "sbs TERM: no results file ($(tail -3 "$T/sbsC.log"))"
fi
# --real-scale: the two exports (fake) from t=0, the reference, the runs best first; upstream's steady
# best run refused (FAKE_UPSTREAM_GRAPH_ROUNDS) so the targets compare 1-round runs; then an export
# that misses its deadline: its rows say so, the other program still runs.
RS=(env -u PYTHONPATH SBS_TEST_CPU=1 ET_RESULTS_COMMIT=abc1234 SBS_UPSTREAM_DIR="$T/sbsu" FAKE_UPSTREAM_GRAPH_ROUNDS=1)
if "${RS[@]}" OUT="$T/sbsR1" SBS_WORK="$T/sbswR1" SBS_MODELS="$T/sbsmR1" SBS_TEST_BIG_EXPORT_S=1 SBS_BUDGET=60 \
  SBS_BIG_RESERVE=40 SBS_RS_RUNS_S=20 bash "$HERE/side_by_side.sh" --real-scale llama1b >"$T/sbsR1.log" 2>&1; then
  ok "side_by_side.sh --real-scale llama1b (SBS_TEST_CPU=1) exits 0"
else
  bad "side_by_side.sh --real-scale llama1b: exit status $? ($(tail -3 "$T/sbsR1.log"))"
fi
R1=$T/sbsR1/$TODAY-abc1234-side-by-side-real-scale.md
if [ -s "$R1" ]; then
  ok "sbs real scale: wrote $(basename "$R1")"
  has "$R1" "| ours / upstream, best vs best, on the base export, upstream v1.4.1: >= 1.0x |" "sbs real scale: target (a) row"
  has "$R1" "| ours on the companion export (best) / upstream (best) on upstream's own export, upstream main cff6f4dd32: >= 1.5x |" \
    "sbs real scale: target (b) row"
  has "$R1" "(1-round runs) | **PASS** |" "sbs real scale: (a) from both 1-round runs when upstream's steady run failed"
  has "$R1" "| et14_llama1b_companion (ours) vs et14_llama1b_base (v1.4.1) | best | 1-round runs |" "sbs real scale: (b) detail row"
  has "$R1" "| et14_llama1b_base | v1.4.1 | best | – | MISMATCH (first 100 of 128 equal) | yes | ok |" \
    "sbs real scale: tokens against the reference's"
  has "$R1" "| et14_llama1b_base | ours | best | 2 x 128 |" "sbs real scale: ours steady 2-round row"
  has "$R1" "| 12.50 | 11.50 | 127 / 127 | ok |" "sbs real scale: host time per token (generate-lib)"
  has "$R1" "| et14_llama1b_companion | best | 40.0 | 600.0 | 12.5 | 30.0 | 75.8 | 3.031 | 40.00 | 80 % | pinned | 64.0 |" \
    "sbs real scale: load phases against the pinned H2D rate"
  has "$R1" "- reference: eager greedy tokens 128" "sbs real scale: reference noted"
  has "$R1" "<!-- figure: sbs_rs.llama1b.companion_over_upstream.v1.4.1 |" "sbs real scale: target figure"
  if grep -q "| et14_llama1b_companion | .* | v1.4.1 |" "$R1"; then bad "sbs real scale: upstream rows for the companion export"
  else ok "sbs real scale: no upstream run of the companion export"; fi
  order=$(cut -f1-3 "$T/sbswR1/run/runs.tsv" | uniq | tr '\t\n' ' ;')
  want="et14_llama1b_base ours best;et14_llama1b_base v1.4.1 best;et14_llama1b_base main cff6f4dd32 best;et14_llama1b_companion ours best;"
  [[ $order == "$want"* ]] && ok "sbs real scale: best first, base then companion" || bad "sbs real scale: run order $order"
  n=$(grep -c "" "$T/sbswR1/run/runs.tsv")
  [ "$n" = 16 ] && ok "sbs real scale: 16 runner calls" || bad "sbs real scale: $n runner calls"
  grep -q -- "--generate 128 --generate-rounds 2" "$T/sbswR1/run/logs/et14_llama1b_base.ours.best.steady.log" &&
    ok "sbs real scale: 128 tokens, 2 rounds" || bad "sbs real scale: generate arguments"
else
  bad "sbs real scale: no results file ($(tail -3 "$T/sbsR1.log"))"
fi
t0=$(date +%s)
"${RS[@]}" OUT="$T/sbsR2" SBS_WORK="$T/sbswR2" SBS_MODELS="$T/sbsmR2" SBS_TEST_BIG_EXPORT_S=1 SBS_BUDGET=30 \
  SBS_BIG_RESERVE=22 SBS_RS_RUNS_S=15 SBS_TEST_SLOW_EXPORT=et14_qwen06b_base \
  bash "$HERE/side_by_side.sh" --real-scale qwen06b >"$T/sbsR2.log" 2>&1
dt=$(($(date +%s) - t0))
R2=$(ls "$T"/sbsR2/*-side-by-side-real-scale.md 2>/dev/null | head -1)
if [ -n "$R2" ]; then
  has "$R2" "Qwen3-0.6B-shaped decoder" "sbs real scale deadline: qwen06b title"
  has "$R2" "export et14_qwen06b_base: stopped at its deadline" "sbs real scale deadline: the slow export stopped"
  has "$R2" "| – (ours on et14_qwen06b_base: not exported; v1.4.1 on et14_qwen06b_base: not exported) | n/a |" \
    "sbs real scale deadline: target (a) says why"
  has "$R2" "| et14_qwen06b_companion | ours | best | 2 x 128 |" "sbs real scale deadline: the other export still ran"
  has "$R2" "| et14_qwen06b_base | v1.4.1 | best | – | – | – | not exported |" "sbs real scale deadline: rows say not exported"
else
  bad "sbs real scale deadline: no results file ($(tail -3 "$T/sbsR2.log"))"
fi
[ "$dt" -le 40 ] && ok "sbs real scale deadline: ended in ${dt}s (budget 30 s)" || bad "sbs real scale deadline: took ${dt}s"
bash "$HERE/side_by_side.sh" --real-scale llama1b --dry-run >"$T/sbs_plan.txt" 2>&1
if grep -q "plan: best: et14_llama1b_base through ours v1.4.1 main; et14_llama1b_companion through ours" "$T/sbs_plan.txt"; then
  ok "side_by_side.sh --real-scale --dry-run: the plan"
else
  bad "side_by_side.sh --real-scale --dry-run"
fi
if bash "$HERE/side_by_side.sh" --real-scale llama2 >/dev/null 2>&1; then bad "side_by_side.sh --real-scale llama2 accepted"
else ok "side_by_side.sh --real-scale: unknown model refused"; fi
if grep -l "sbsm[ABCR]" /proc/[0-9]*/cmdline 2>/dev/null | grep -qv self; then
  bad "sbs: a fake export outlived its script"
else
  ok "sbs: no export left running"
fi

# ------------------------------------------------------------------ 3d. real scale (bench/real_scale.sh)
if wait "$REAL_SCALE_PID"; then
  ok "$(tail -1 "$T/real_scale.log") (bench/testdata/real_scale/test.sh)"
else
  bad "bench/testdata/real_scale/test.sh: $(grep -E '^FAIL|real_scale:' "$T/real_scale.log" | head -6 | tr '\n' ' ')"
fi

# ------------------------------------------------------------------ 3e. HF decoders (bench/hf_scale.sh)
if wait "$HF_SCALE_PID"; then
  ok "$(tail -1 "$T/hf_scale.log") (bench/testdata/hf_scale/test.sh)"
else
  bad "bench/testdata/hf_scale/test.sh: $(grep -E '^FAIL|hf_scale:' "$T/hf_scale.log" | head -6 | tr '\n' ' ')"
fi

# ------------------------------------------------------------------ 3f. kernel timeline (bench/trace)
if python3 "$HERE/trace/trace_table.py" "$HERE/testdata/trace/timeline.tsv" --skip 0 --title canned >"$T/trace.md" 2>&1; then
  ok "trace_table.py on the canned timeline"
else
  bad "trace_table.py on the canned timeline: $(tail -3 "$T/trace.md")"
fi
has "$T/trace.md" "Step span 200.0 µs = kernels busy 200.0 µs + idle 0.0 µs; kernels overlapping each other 10.0 µs (PDL); between replays (host) 50.0 µs" "trace: span, overlap and time between replays"
has "$T/trace.md" "| \`et_attn_decw\` | 1 | 110.0 | 100.0 | 100.00 | 0.0 |" "trace: a kernel's advance is its end past the kernels before it, not its duration"
has "$T/trace.md" "| \`api cuStreamSynchronize\` | 1.00 | 15.0 |" "trace: a wait clipped to the interval between replays"
has "$T/trace.md" "| \`et_argmax\` | 1.00 | 6.0 |" "trace: a kernel outside the graph, by kind"
has "$T/trace.md" "| 35.0 | 10.0 | \`api cuGraphLaunch\` |" "trace: the median interval record by record"
has "$T/trace.md" "| 50.0 | 0.0 | \`next replay's first kernel\` |" "trace: the interval ends at the next replay"

# ------------------------------------------------------------------ 4. et_cuda_run --mem
RUNNER=${ET_CUDA_RUN:-$ROOT/build/et_cuda_run}
FX=${ET_CUDA_FIXTURES:-$ROOT/tests/fixtures}/mlp_f32/manifest.json
if [ -x "$RUNNER" ] && [ -f "$FX" ] && cc -shared -fPIC -o "$T/libcuda.so.1" "$HERE/testdata/fake_libcuda.c" 2>/dev/null; then
  # The stand-in driver has no real API, so loading the method fails after the baseline was taken:
  # the mem line is printed before the error line (10 MiB per cuMemGetInfo call after the first).
  LD_LIBRARY_PATH=$T RUST_BACKTRACE=0 "$RUNNER" --manifest "$FX" --mem >"$T/mem.out" 2>"$T/mem.err"
  rc=$?
  if [ $rc -eq 1 ] && grep -qx 'mem: device=0 total_mib=1000.0 context_mib=100.0 loaded_mib=0.0 peak_mib=10.0 end_mib=10.0 samples=1' "$T/mem.out"; then
    ok "et_cuda_run --mem: baseline, then the sample at the error"
  else
    bad "et_cuda_run --mem (rc $rc): $(cat "$T/mem.out") $(tail -1 "$T/mem.err")"
  fi
  FAKE_CUDA_STEP_MIB=3 LD_LIBRARY_PATH=$T "$RUNNER" --manifest "$FX" >"$T/nomem.out" 2>/dev/null
  if ! grep -q '^mem:' "$T/nomem.out"; then ok "no mem line without --mem"; else bad "mem line without --mem"; fi
  "$RUNNER" --manifest "$FX" --mem >"$T/nocuda.out" 2>"$T/nocuda.err"
  rc=$?
  if [ $rc -eq 77 ] && ! grep -q '^mem:' "$T/nocuda.out"; then ok "no CUDA: exit 77 and no mem line"
  elif [ $rc -ne 77 ]; then ok "(a CUDA driver is present here: the no-CUDA case was not checked)"
  else bad "no CUDA: $(cat "$T/nocuda.out")"; fi
else
  echo "skip et_cuda_run --mem (no runner at $RUNNER, no fixture at $FX, or no cc)"
fi

echo "bench: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
