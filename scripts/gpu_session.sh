#!/usr/bin/env bash
# One call on the GPU machine that checks everything in parallel, inside the
# device tool's 10-minute limit (run from the repository root of the copy):
#
#   bash scripts/gpu_session.sh
#
# Carried (git-ignored): .dev/gpu.tar.xz (scripts/gpu_bundle.sh's bundle, packed),
# .dev/upstream/upstream_cuda_backends.tar.xz (bench/upstream/pack.sh), .whl/models/sites
# (tests/models/wheels.sh); optionally .dev/models*.tar.xz (programs exported by an earlier call).
#   A. tests/models/gpu_suite.sh: exports what is missing, then the suite (every program x
#      backend x mode), with upstream's v1.2.0 backend as a second backend;
#   B. the bundle's checks (.dev/gpu/run.sh: C/C++ tests, runner, Rust GPU tests);
#   C. kernels/check_int4.py (correctness; the timing phase with SESSION_INT4_BENCH=1);
#   D. bench/upstream/smoke.sh over the fixtures;
#   E. tests/models/sdpa_versions.py under ExecuTorch 1.2 and 1.5.1 (the suite's sites);
#   F. after the others: bench/run.sh with the time left (SESSION_END, default 560 s after
#      the start), reusing the suite's programs.
# SESSION_PARTS (default "suite bundle int4 upstream") picks the parts to run (also: sdpa, bench).
# $OUT gets summary.txt (printed last), all.tar.xz (every log and result) and models.tar.xz
# (SESSION_PACK_FILES=N: up to N files models*.tar.xz of at most 15 MiB each).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/session_out}
R=/tmp/session
rm -rf "$R"
mkdir -p "$R"/{suite,bundle,int4,upstream} "$OUT"
START=$(date +%s)
say() { printf '[%3ds] %s\n' $(($(date +%s) - START)) "$*"; }
PARTS=" ${SESSION_PARTS:-suite bundle int4 upstream} "
part() { [[ $PARTS == *" $1 "* ]]; }

say "unpacking"
mkdir -p /tmp/gpu_bundle /tmp/u
tar -xJf .dev/gpu.tar.xz -C /tmp/gpu_bundle
B=/tmp/gpu_bundle/gpu
[ -f .dev/upstream/upstream_cuda_backends.tar.xz ] && tar -xJf .dev/upstream/upstream_cuda_backends.tar.xz -C /tmp/u
U=/tmp/u/upstream
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader > "$R/gpu.txt" 2>&1
say "$(cat "$R/gpu.txt")"

# The shim allocation pair, this build against the baseline build, alternating, before the
# parallel parts load the machine (the bundle's own run of it shares the GPU with the suite).
if [ -f "$B/rs/libexecutorch_cuda_baseline.so" ]; then
  for round in 1 2 3; do
    for lib in "$B/rs/libexecutorch_cuda.so" "$B/rs/libexecutorch_cuda_baseline.so"; do
      "$B/shim_alloc" "$lib" 300000
    done
  done > "$R/shim_alloc_quiet.txt" 2>&1
  say "shim_alloc (quiet, 3 rounds):"
  sed 's/^/    /' "$R/shim_alloc_quiet.txt"
fi

# A. the model suite (its own deadlines: exports until SUITE_EXPORT_BUDGET, checks until SUITE_BUDGET).
up12=$(ls -d "$U"/v1.2.0-0b0e2c5cdd 2>/dev/null | head -1)
backends="ours"
[ -n "$up12" ] && [ "${SESSION_SUITE_UPSTREAM:-1}" = 1 ] && backends="ours upstream-v1.2.0=$up12/libupstream_cuda_backend.so"
models_tar=""
for f in .dev/models*.tar.xz; do [ -f "$f" ] && models_tar="$models_tar $ROOT/$f"; done
part suite && (
  OUT=$R/suite MODELS_TAR=$models_tar SUITE_PACK_FILES=${SESSION_PACK_FILES:-1} SUITE_BACKENDS="$backends" SUITE_LIB=$B/libexecutorch_cuda.so.0 \
    SUITE_BUDGET=${SESSION_SUITE_BUDGET:-450} SUITE_EXPORT_BUDGET=${SESSION_EXPORT_BUDGET:-260} \
    SUITE_EXTRA_MODES=${SESSION_EXTRA_MODES:-"graphs:--option enable_cuda_graph_for_method={methods};share:--option weight_sharing_across_methods=true --option share_mutable_buffers_across_methods=true"} \
    timeout -k 10 540 bash tests/models/gpu_suite.sh "$B" > "$R/suite/suite.log" 2>&1
  echo "exit $?" >> "$R/suite/suite.log"
) &
pa=$!
part suite || pa=

# B. the bundle's checks.
part bundle && (
  cd "$B" && OUT=$R/bundle timeout -k 10 "${SESSION_BUNDLE_TIMEOUT:-420}" bash run.sh > "$R/bundle/run.log" 2>&1
  echo "exit $?" >> "$R/bundle/run.log"
) &
pb=$!
part bundle || pb=

# C. the int4 kernels (timing only when asked: the GPU is shared with the other checks here).
part int4 && (
  bench=--no-bench
  [ "${SESSION_INT4_BENCH:-0}" = 1 ] && bench=
  timeout -k 10 360 python3 kernels/check_int4.py "$B/rs/libexecutorch_cuda.so" --out "$R/int4" $bench \
    > "$R/int4/check.log" 2>&1
  echo "exit $?" >> "$R/int4/check.log"
) &
pc=$!
part int4 || pc=

# D. upstream's backend over the fixtures.
part upstream && (
  if [ -d "$U" ]; then
    OUT=$R/upstream TIMEOUT=90 timeout -k 10 300 bash bench/upstream/smoke.sh "$U" "$B/et_cuda_run" "$B/fixtures" \
      > "$R/upstream/smoke.log" 2>&1
    echo "exit $?" >> "$R/upstream/smoke.log"
  fi
) &
pd=$!
part upstream || pd=

# E. is ExecuTorch 1.5.1's Triton SDPA kernel still wrong where 1.2's is? (the suite unpacks the sites)
part sdpa && (
  mkdir -p "$R/sdpa"
  for v in et12 et15; do
    for _ in $(seq 120); do [ -f /tmp/site-$v/executorch/exir/__init__.py ] && break; sleep 2; done
    PYTHONPATH=/tmp/site-$v timeout -k 5 150 python3 tests/models/sdpa_versions.py > "$R/sdpa/$v.log" 2>&1
    echo "exit $?" >> "$R/sdpa/$v.log"
  done
) &
pe=$!
part sdpa || pe=

# The bench's own exports of BENCH_LIST (device-IO variants), early and beside the suite's, so the
# bench after the suite finds them (with the ET 1.2 site the suite unpacks).
part bench && [ -n "${BENCH_LIST:-}" ] && (
  mkdir -p "$R/benchexp" /tmp/et_cuda_bench/models
  for _ in $(seq 120); do [ -f /tmp/site-et12/executorch/exir/__init__.py ] && break; sleep 2; done
  chmod +x /tmp/site-et12/executorch/data/bin/flatc 2>/dev/null
  FLATC_EXECUTABLE=/tmp/site-et12/executorch/data/bin/flatc PYTHONPATH=/tmp/site-et12 \
    timeout -k 5 240 python3 bench/export.py /tmp/et_cuda_bench/models ${BENCH_LIST//,/ } > "$R/benchexp/export.log" 2>&1
  echo "exit $?" >> "$R/benchexp/export.log"
) &
pf=$!

for p in $pb $pc $pd $pe $pf; do wait "$p"; done
say "bundle, int4 and upstream checks done"
[ -n "$pa" ] && wait "$pa"
say "suite done"

# Pack what is there so far (again after each later part: a call cut short by the device
# tool's limit still returns what was packed): the suite's programs separately (to carry
# back), a summary, everything else in one archive.
pack() {
  for f in "$R"/suite/models*.tar.xz; do [ -f "$f" ] && mv "$f" "$OUT/"; done
  {
    echo "GPU: $(cat "$R/gpu.txt")"
    echo
    echo "===== shim_alloc (quiet)"
    cat "$R/shim_alloc_quiet.txt" 2>/dev/null
    echo
    echo "===== B. bundle checks (tail)"
    grep -E "check\(s\) failed|^FAILED|test result|max_abs_err|SKIPPED|shim_alloc|caller stream|graphs:|shared bytes|fake model" "$R/bundle/run.log" | tail -60
    echo
    echo "===== C. int4"
    tail -45 "$R/int4/check.log"
    echo
    echo "===== D. upstream smoke"
    cat "$R/upstream/upstream_smoke_summary.txt" 2>/dev/null || tail -20 "$R/upstream/smoke.log" 2>/dev/null
    echo
    echo "===== E. sdpa kernels"
    tail -20 "$R/sdpa/"*.log 2>/dev/null
    echo
    echo "===== A. suite"
    cat "$R/suite/summary.md" 2>/dev/null || tail -40 "$R/suite/suite.log"
    echo
    echo "===== F. bench"
    cat "$R"/bench/out/*-bench*.md 2>/dev/null || tail -30 "$R/bench/run.log" 2>/dev/null || cat "$R/bench.skipped" 2>/dev/null
  } > "$OUT/summary.txt" 2>&1
  tar -cJf "$OUT/all.tar.xz" --exclude=session/bench/out -C /tmp session 2>/dev/null
}

pack

# F. the benchmark with the time left, on the quiet machine.
if part bench; then
  END=$((START + ${SESSION_END:-560}))
  budget=$((END - $(date +%s) - 30))
  if [ "$budget" -ge "${SESSION_BENCH_MIN:-60}" ]; then
    say "bench: budget ${budget}s"
    mkdir -p "$R/bench"
    OUT=$R/bench/out BENCH_BUNDLE=$B BENCH_SITES=$ROOT/.whl/models/sites BENCH_BUDGET=$budget \
      BENCH_UPSTREAM_DIR=/tmp/u \
      timeout -k 10 $((budget + 40)) bash bench/run.sh > "$R/bench/run.log" 2>&1
    echo "exit $?" >> "$R/bench/run.log"
    for f in int4_results.json bench_logs.tar.xz; do
      [ -f "$R/bench/out/$f" ] && cp "$R/bench/out/$f" "$OUT/bench_$f"
    done
    # the dated results file keeps its name (bench/results.py add takes date, commit and tag from it)
    for f in "$R"/bench/out/*-bench*.md; do [ -f "$f" ] && cp "$f" "$OUT/"; done
  else
    echo "bench: only ${budget}s left: not run" | tee "$R/bench.skipped"
  fi
fi

part bench && pack
say "packed: $(ls -la "$OUT" | tail -n +2 | awk '{print $5, $9}' | tr '\n' ' ')"
cat "$OUT/summary.txt"
