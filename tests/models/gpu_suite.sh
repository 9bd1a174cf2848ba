#!/usr/bin/env bash
# The model suite on the GPU machine, in one command (tests/models/README.md):
#
#   bash tests/models/gpu_suite.sh BUNDLE_DIR      (bash scripts/gpu.sh suite: with the bundle)
#
# BUNDLE_DIR holds et_cuda_run and the libraries next to it (libexecutorch_cuda.so, the adapter,
# ExecuTorch's libraries; the runner finds them through its rpath). Steps, each independent of the
# others' success:
#   1. unpack MODELS_TAR (programs exported by an earlier call) into MODELS_DIR;
#   2. the two Python sites: ExecuTorch 1.2 + torchao 0.17 and ExecuTorch 1.5.1 + torchao 0.18,
#      from $SUITE_WHEELS/sites/{et12,et15}.tar.xz (tests/models/wheels.sh) or, failing that,
#      pip install --target of $SUITE_WHEELS/wheels/{common,etXX}/*.whl;
#   3. in parallel: sdpa_check.py (ET 1.2 site), export_suite.py (ET 1.2) and export_et15.py
#      (ET 1.5.1) for the programs MODELS_DIR lacks, until SUITE_EXPORT_BUDGET;
#   4. the aoti_torch_* symbols the exported .so files import and the library lacks;
#   5. et_cuda_run --manifest for every program x backend x mode (suite_run.py), each run with a timeout;
#   6. $OUT: summary.md (printed last), results.json, symbols.txt, logs.tar.xz, models.tar.xz
#      (the exported programs, < 16 MB each; models_2.tar.xz ... with SUITE_PACK_FILES: carry them
#      back as MODELS_TAR to skip the exports next time),
#      sdpa_repro.py when the Triton SDPA kernel fails.
#
# Environment (all optional):
#   OUT                 results (the device tool sets it; default /tmp/et_models_out)
#   MODELS_DIR          exported programs, reused when present (default /tmp/et_models)
#   MODELS_TAR          models.tar.xz file(s) of an earlier call (space-separated), unpacked into MODELS_DIR first
#   SUITE_PACK_FILES    how many models*.tar.xz of at most 15 MiB to write (default 1)
#   SUITE_WHEELS        default <repo>/.whl/models
#   SUITE_BUDGET        seconds until the checks stop (default 520; packing and the report take
#                       ~30 s more); SUITE_EXPORT_BUDGET (default 300): no export starts after it, and
#                       the exporters are killed 120 s later
#   SUITE_EXPORT_JOBS   parallel ET 1.2 exports (default 6); SUITE_EXPORT_JOBS15 (default 2)
#   SUITE_ONLY          comma-separated program names (exports and runs)
#   SUITE_PHASES        default "sdpa,export,et15,run"; drop a word to skip that step
#   SUITE_BACKENDS      "ours" (default) or e.g. "ours upstream=/path/libaoti_cuda_backend.so" (--backend-lib PATH)
#   SUITE_MODES         e.g. "host,generate" (default: all of suite_run.py's MODES)
#   SUITE_EXTRA_MODES   e.g. "graphs:--option enable_cuda_graph_for_method={methods}" (';' between modes)
#   SUITE_RUN_TIMEOUT   seconds per runner call (default 60)
#   SUITE_RUNNER, SUITE_LIB   override BUNDLE_DIR/et_cuda_run, BUNDLE_DIR/libexecutorch_cuda.so (else .so.0)
#   SUITE_TEST_CPU=1    test of this script on a machine without a GPU: exports with --fake-aoti
#                       (not runnable), sdpa_check --self-test, the runner replaced by fake_runner.py
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ $# -lt 1 ]; then
  sed -n '2,40p' "$0" >&2
  exit 2
fi
BUNDLE=$(cd "$1" 2>/dev/null && pwd || echo "$1")
OUT=${OUT:-/tmp/et_models_out}
MODELS=${MODELS_DIR:-/tmp/et_models}
WHEELS=${SUITE_WHEELS:-$ROOT/.whl/models}
WORK=${SUITE_WORK:-/tmp/et_models_work}
SITE12=${SUITE_SITE12:-/tmp/site-et12}
SITE15=${SUITE_SITE15:-/tmp/site-et15}
BUDGET=${SUITE_BUDGET:-520}
EXPORT_BUDGET=${SUITE_EXPORT_BUDGET:-300}
JOBS=${SUITE_EXPORT_JOBS:-6}
JOBS15=${SUITE_EXPORT_JOBS15:-2}
PHASES=${SUITE_PHASES:-sdpa,export,et15,run}
RUNNER=${SUITE_RUNNER:-$BUNDLE/et_cuda_run}
LIB=${SUITE_LIB:-$BUNDLE/libexecutorch_cuda.so}
# scripts/gpu_bundle.sh packs the library under its SONAME only
[ -n "${SUITE_LIB:-}" ] || [ -f "$LIB" ] || LIB=$BUNDLE/libexecutorch_cuda.so.0
PY=${SUITE_PYTHON:-python3}
EXPORT_FLAGS=()
SDPA_FLAGS=()
if [ "${SUITE_TEST_CPU:-0}" = 1 ]; then
  EXPORT_FLAGS=(--fake-aoti)
  SDPA_FLAGS=(--self-test)
  RUNNER=${SUITE_RUNNER:-$HERE/fake_runner.py}
fi
START=$(date +%s)
DEADLINE=$((START + BUDGET))
EXPORT_DEADLINE=$((START + EXPORT_BUDGET))
# Several compiling processes share the machine's cores (Inductor compiles each autotuning
# candidate in that many worker processes).
NCPU=$(nproc 2>/dev/null || echo 4)
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$(( NCPU / (JOBS + JOBS15) > 1 ? NCPU / (JOBS + JOBS15) : 2 ))}
export PYTHONDONTWRITEBYTECODE=1

rm -rf "$WORK"
mkdir -p "$OUT" "$MODELS" "$WORK/logs" "$WORK/sdpa"
NOTES=$WORK/notes.txt
: >"$NOTES"
say() { printf '[%3ds] %s\n' $(($(date +%s) - START)) "$*"; }
note() { printf '%s\n' "$*" >>"$NOTES"; say "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
has() { [[ ",$PHASES," == *",$1,"* ]]; }

note "suite: bundle $BUNDLE, models $MODELS, out $OUT, budget ${BUDGET}s (exports until +${EXPORT_BUDGET}s)"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | head -1)"
note "python: $($PY -c 'import sys, importlib.metadata as m; print(sys.version.split()[0], *(p + " " + m.version(p) for p in ("torch", "transformers", "torchvision", "triton")))' 2>&1 | tail -1)"
[ -x "$RUNNER" ] || note "ERROR: no runner at $RUNNER: the checks will all fail"
[ -f "$LIB" ] || note "warning: no library at $LIB: the symbol report lists every import"

# ------------------------------------------------------------------ 1. earlier exports
for mt in ${MODELS_TAR:-}; do
  if [ -f "$mt" ] && tar -xJif "$mt" -C "$MODELS" 2>"$WORK/logs/models_tar.log"; then
    note "unpacked $mt: $(ls "$MODELS" | wc -l) program(s) in $MODELS"
  else
    note "ERROR: cannot unpack MODELS_TAR file $mt: $(tail -2 "$WORK/logs/models_tar.log" 2>/dev/null | tr '\n' ' ')"
  fi
done

# ------------------------------------------------------------------ 2. Python sites
install_site() { # name dir -> 0 when usable
  local name=$1 dir=$2
  if [ -f "$dir/executorch/exir/__init__.py" ]; then
    say "$name: already in $dir"
  elif [ -f "$WHEELS/sites/$name.tar.xz" ]; then
    mkdir -p "$dir" && tar -xJf "$WHEELS/sites/$name.tar.xz" -C "$dir" 2>"$WORK/logs/site_$name.log" ||
      note "ERROR: unpacking $WHEELS/sites/$name.tar.xz failed"
  elif compgen -G "$WHEELS/wheels/$name/*.whl" >/dev/null; then
    PIP_ROOT_USER_ACTION=ignore $PY -m pip install -q --no-index --no-deps --no-compile --target "$dir" "$WHEELS"/wheels/common/*.whl \
      "$WHEELS"/wheels/$name/*.whl >"$WORK/logs/site_$name.log" 2>&1 || note "ERROR: pip install for $name failed"
  else
    note "no $name wheels ($WHEELS/sites/$name.tar.xz or $WHEELS/wheels/$name/): its steps are skipped"
    return 1
  fi
  chmod +x "$dir/executorch/data/bin/flatc" 2>/dev/null
  if PYTHONPATH=$dir${PYTHONPATH:+:$PYTHONPATH} $PY -c 'import executorch.exir, torchao' >>"$WORK/logs/site_$name.log" 2>&1; then
    note "$name: $(PYTHONPATH=$dir${PYTHONPATH:+:$PYTHONPATH} $PY -c 'import importlib.metadata as m; print("executorch", m.version("executorch"), "torchao", m.version("torchao"))' 2>&1 | tail -1)"
    return 0
  fi
  note "ERROR: $name site does not import: $(tail -2 "$WORK/logs/site_$name.log" | tr '\n' ' ')"
  return 1
}
HAVE12=0 HAVE15=0
install_site et12 "$SITE12" && HAVE12=1
has et15 && install_site et15 "$SITE15" && HAVE15=1

# ------------------------------------------------------------------ 3. sdpa_check + exports (parallel)
pids=()
SDPA_PID=
if has sdpa && [ -f "$MODELS/.sdpa/sdpa_check.md" ] && [ "${SUITE_SDPA_FORCE:-0}" != 1 ]; then
  cp "$MODELS"/.sdpa/* "$WORK/sdpa/" 2>/dev/null
  note "sdpa_check: the result of an earlier call ($MODELS/.sdpa; SUITE_SDPA_FORCE=1 runs it again)"
elif has sdpa && [ $HAVE12 = 1 ]; then
  say "sdpa_check (background, until the deadline at the latest; the checks do not wait for it)"
  (PYTHONPATH=$SITE12${PYTHONPATH:+:$PYTHONPATH} timeout -k 5 $(( $(left) - 10 )) $PY "$HERE/sdpa_check.py" --out "$WORK/sdpa" --budget-a 180 --budget 110 \
    "${SDPA_FLAGS[@]}" >"$WORK/sdpa/sdpa_check.log" 2>&1
  rc=$?
  echo "rc=$rc" >>"$WORK/sdpa/sdpa_check.log"
  if [ $rc = 0 ]; then mkdir -p "$MODELS/.sdpa" && cp "$WORK"/sdpa/sdpa_check.* "$WORK"/sdpa/sdpa_repro.py "$MODELS/.sdpa/" 2>/dev/null; fi) &
  SDPA_PID=$!
fi
ONLY_ARGS=()
[ -n "${SUITE_ONLY:-}" ] && ONLY_ARGS=(--only "$SUITE_ONLY")
filter_only() { # script -> the SUITE_ONLY names this exporter knows (all when SUITE_ONLY is empty)
  local known
  known=$(PYTHONPATH=$2${PYTHONPATH:+:$PYTHONPATH} $PY "$1" --list x 2>/dev/null | tr '\n' ',')
  if [ -z "${SUITE_ONLY:-}" ]; then echo ""; return; fi
  local out=() n
  IFS=, read -r -a want <<<"$SUITE_ONLY"
  for n in "${want[@]}"; do [[ ",$known," == *",$n,"* ]] && out+=("$n"); done
  (IFS=,; echo "${out[*]}")
}
run_export() { # tag script site jobs
  local tag=$1 script=$2 site=$3 jobs=$4 only
  only=$(filter_only "$script" "$site")
  if [ -n "${SUITE_ONLY:-}" ] && [ -z "$only" ]; then
    say "$tag: nothing in SUITE_ONLY for it"
    return
  fi
  say "$tag exports ($jobs at a time, none started after +${EXPORT_BUDGET}s)"
  PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout -k 10 $((EXPORT_BUDGET + 120)) $PY "$script" "$MODELS" --jobs "$jobs" \
    --deadline "$EXPORT_DEADLINE" ${only:+--only "$only"} "${EXPORT_FLAGS[@]}" >"$WORK/logs/export_$tag.log" 2>&1
  echo "rc=$?" >>"$WORK/logs/export_$tag.log"
}
if has export && [ $HAVE12 = 1 ]; then
  run_export et12 "$HERE/export_suite.py" "$SITE12" "$JOBS" &
  pids+=($!)
fi
if has export && [ $HAVE15 = 1 ]; then
  run_export et15 "$HERE/export_et15.py" "$SITE15" "$JOBS15" &
  pids+=($!)
fi
for p in "${pids[@]}"; do wait "$p"; done
grep -h '^export ' "$WORK"/logs/export_*.log 2>/dev/null | cut -c1-400 | while read -r line; do note "$line"; done
cp -r "$MODELS/.logs" "$WORK/logs/export_children" 2>/dev/null

# ------------------------------------------------------------------ 4. symbols
$PY "$HERE/suite_run.py" symbols --lib "$LIB" --models "$MODELS" --out "$WORK" >"$WORK/logs/symbols.log" 2>&1 ||
  note "symbol report failed: $(tail -2 "$WORK/logs/symbols.log" | tr '\n' ' ')"

# ------------------------------------------------------------------ 5. checks
if has run; then
  say "checks until +$((DEADLINE - 40 - START))s"
  $PY "$HERE/suite_run.py" run --runner "$RUNNER" --models "$MODELS" --out "$WORK" \
    --deadline $((DEADLINE - 40)) ${SUITE_ONLY:+--only "$SUITE_ONLY"} 2>&1 | tee "$WORK/logs/run.log" | cut -c1-200
fi

# ------------------------------------------------------------------ 6. results
# sdpa_check's timeout ends it 10 s before the deadline at the latest (part A's table is written first)
[ -n "$SDPA_PID" ] && wait "$SDPA_PID"
grep -q '^| ' "$WORK/sdpa/sdpa_check.md" 2>/dev/null && note "sdpa_check: $(grep -E '^Part A:' "$WORK/sdpa/sdpa_check.md")" ||
  { has sdpa && note "sdpa_check: no table ($(tail -3 "$WORK/sdpa/sdpa_check.log" 2>/dev/null | tr '\n' ' '))"; }
$PY "$HERE/suite_run.py" pack --models "$MODELS" --out "$WORK" --limit-mb 15 --files "${SUITE_PACK_FILES:-1}" >"$WORK/logs/pack.log" 2>&1 ||
  note "packing models failed: $(tail -2 "$WORK/logs/pack.log" | tr '\n' ' ')"
note "done in $(($(date +%s) - START))s"
$PY "$HERE/suite_run.py" report --models "$MODELS" --out "$WORK" --sdpa "$WORK/sdpa" --notes "$NOTES" \
  >"$WORK/logs/report.log" 2>&1 || note "report failed: $(tail -2 "$WORK/logs/report.log" | tr '\n' ' ')"
for f in summary.md results.json symbols.txt "$WORK"/models*.tar.xz; do
  f=$(basename "$f")
  [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"
done
[ -f "$WORK/sdpa/sdpa_repro.py" ] && cp "$WORK/sdpa/sdpa_repro.py" "$OUT/"
tar -C "$WORK" --exclude='models*.tar.xz' -cf - . | xz -T0 -6 >"$OUT/logs.tar.xz"
ls -la "$OUT"
# The summary without the full sdpa table (it is in $OUT/summary.md), so that the end of the output has it all.
if [ -f "$OUT/summary.md" ]; then
  sed '/^## sdpa_check/,$d' "$OUT/summary.md"
  echo "## sdpa_check (full table in summary.md)"
  grep -E '^Part A:|^# sdpa_check|\| FAIL|\| ERROR|^Smallest|^## Part B|^\| (self64|causal8_mask|cross8x64) ' \
    "$WORK/sdpa/sdpa_check.md" 2>/dev/null | cut -c1-300 | head -60
else
  cat "$NOTES"
fi
