#!/usr/bin/env bash
# The CPU-reachable tests under Valgrind memcheck: zero invalid accesses and no
# definite or indirect leaks, or the script fails. Runs the Rust test binaries
# named below and, when the CMake build exists, the C API test, $JOBS at a time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
command -v valgrind >/dev/null || die "valgrind not found: apt-get install valgrind"
VG=(valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite,indirect
  --show-leak-kinds=definite,indirect)

bins=$(cargo test --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
want = {"bad_input", "shim_cpu", "options", "panic_boundary", "concurrency_cpu", "executorch_cuda"}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in want:
        print(m["target"]["name"] + " " + m["executable"])
')
[ -n "$bins" ] || die "no test binaries found"
# Each run's output goes to $LOGS/valgrind_NAME.log and its exit status to valgrind_NAME.rc; up
# to $JOBS run at once (they are single-threaded under Valgrind, --test-threads=1).
mkdir -p "$LOGS"
names=()
vg() { # vg NAME CMD...: CMD under Valgrind, in the background
  local name=$1
  shift
  names+=("$name")
  rm -f "$LOGS/valgrind_$name.rc"
  ( rc=0; "${VG[@]}" "$@" >"$LOGS/valgrind_$name.log" 2>&1 || rc=$?; echo "$rc" >"$LOGS/valgrind_$name.rc" ) &
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
}

# The linear-time tests of the load path (2^17 and 2^18 entries) run in the plain test pass;
# under Valgrind they took 80 s of the lib's pass and prove nothing more (the same code runs
# here on small inputs).
skip=(--skip matching_and_grouping_are_linear --skip reading_every_storage_is_linear)
while read -r name exe; do
  vg "$name" "$exe" --test-threads=1 -q "${skip[@]}"
done <<<"$bins"

if [ -x "$BUILD/c_api_test" ]; then
  vg c_api_test "$BUILD/c_api_test" "${ET_CUDA_FIXTURES:-$ROOT/tests/fixtures}"
fi
wait
# In order: each run's last line (the test summary) when clean, else its log without the
# forced panics' lines, and stop.
for name in "${names[@]}"; do
  log=$LOGS/valgrind_$name.log
  step "valgrind: $name (log ${log#"$ROOT/"})"
  rc=$(cat "$LOGS/valgrind_$name.rc" 2>/dev/null || echo "no status")
  if [ "$rc" != 0 ]; then
    # The panic test prints its forced panics; show the rest.
    grep -v "forced panic\|^note: \|panicked at\|^$" "$log" || true
    die "valgrind reported errors or leaks in $name (exit $rc; its whole output: $log)"
  fi
  grep -v '^$' "$log" | tail -n 1 | sed 's/^/    /'
done
step "valgrind: no errors, no leaks"
