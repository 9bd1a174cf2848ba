# The CPU tests' check helpers (sourced by bench/test_table.sh and bench/testdata/real_scale/test.sh):
# ok/bad count a passed/failed check and print it; has FILE TEXT NAME: TEXT (fixed string) is a
# line, or part of one, of FILE.
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
has() { if grep -qF -- "$2" "$1"; then ok "$3"; else bad "$3: no line with: $2"; fi; }
