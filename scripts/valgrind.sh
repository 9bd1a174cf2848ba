#!/usr/bin/env bash
# The CPU-reachable tests under Valgrind memcheck: zero invalid accesses and no
# definite or indirect leaks, or the script fails. Runs the Rust test binaries
# named below and, when the CMake build exists, the C API test.
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
while read -r name exe; do
  step "valgrind: $name"
  log=$(mktemp)
  rc=0
  "${VG[@]}" "$exe" --test-threads=1 -q >"$log" 2>&1 || rc=$?
  # The panic test prints its forced panics; show the rest.
  grep -v "forced panic\|^note: \|panicked at\|^$" "$log" || true
  rm -f "$log"
  [ "$rc" -eq 0 ] || die "valgrind reported errors or leaks in $name (exit $rc)"
done <<<"$bins"

if [ -x "$BUILD/c_api_test" ]; then
  step "valgrind: c_api_test"
  fx=${ET_CUDA_FIXTURES:-$ROOT/tests/fixtures}
  "${VG[@]}" "$BUILD/c_api_test" "$fx" || die "valgrind reported errors or leaks in c_api_test"
fi
step "valgrind: no errors, no leaks"
