#!/usr/bin/env bash
# The install is relocatable and does not depend on the clone it was built in
# (README "Using it from CMake", the install rule):
#  1. copy the sources into a throwaway clone with its own copy of ExecuTorch,
#     configure it there (using the crates already built in $BUILD), build and
#     `cmake --install --strip` into a prefix;
#  2. delete that clone (sources, build folder, its ExecuTorch) and move the prefix;
#  3. check the installed files: no path of the clone anywhere, the shipped
#     library (size below check_artifacts.cmake's limit and as README states, no DWARF, stripped, SONAME + link-name symlink, only the
#     C ABI exported), RUNPATHs only $ORIGIN-relative;
#  4. run the installed runner (--version, then a fixture: PASS with a GPU,
#     exit status 77 without one);
#  5. build and run the consumer project (c_tests/consumer) against the moved
#     prefix and a second copy of ExecuTorch (-Dexecutorch_DIR), with
#     --as-needed; without executorch_DIR its configure must fail with our message,
#     and so must the project's own.
# Needs $BUILD from scripts/test.sh (or cmake_build).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
check_prereqs
ensure_cmake
find_executorch
FIXTURES=${ET_CUDA_FIXTURES:-$ROOT/tests/fixtures}
LIB=$BUILD/libexecutorch_cuda.so.0
TOK=$BUILD/libetc_tokenizer.a
[ -f "$LIB" ] || die "$LIB is missing: build first (scripts/test.sh or scripts/run_example.sh)"
[ -f "$TOK" ] || die "$TOK is missing: build first (scripts/test.sh or scripts/run_example.sh)"

T=$(mktemp -d "${TMPDIR:-/tmp}/et_cuda_install.XXXXXX")
trap 'rm -rf "$T"' EXIT
ET_PKG=$(cd "$EXECUTORCH_CMAKE_DIR/../.." && pwd) # the package root: include/, lib/, share/

copy_executorch() { # DEST: the parts of the package CMake and the runtime use
  mkdir -p "$1"
  cp -r "$ET_PKG/include" "$ET_PKG/lib" "$ET_PKG/share" "$1/"
}

step "install test: a throwaway clone in $T/clone"
mkdir -p "$T/clone"
cp -r CMakeLists.txt Cargo.toml adapter runner include cmake c_tests "$T/clone/"
mkdir -p "$T/clone/tokenizer" && cp -r tokenizer/include "$T/clone/tokenizer/"
copy_executorch "$T/clone/.deps/py/executorch"
cmake -S "$T/clone" -B "$T/clone/build" -DCMAKE_BUILD_TYPE=Release -DET_CUDA_BUILD_TESTS=OFF \
  -Dexecutorch_DIR="$T/clone/.deps/py/executorch/share/cmake" -DET_CUDA_PREBUILT_LIBRARY="$LIB" \
  -DET_CUDA_PREBUILT_TOKENIZER="$TOK" >"$T/configure.log" ||
  { cat "$T/configure.log"; die "configuring the throwaway clone failed"; }
cmake --build "$T/clone/build" -j "$JOBS" >"$T/build.log" || { cat "$T/build.log"; die "building the throwaway clone failed"; }
cmake --install "$T/clone/build" --prefix "$T/prefix" --strip >"$T/install.log" ||
  { cat "$T/install.log"; die "installing from the throwaway clone failed"; }

step "install test: delete the clone, move the prefix"
rm -rf "$T/clone"
mv "$T/prefix" "$T/moved"
P=$T/moved
echo "    $(find "$P" -type f | wc -l) files installed, $(find "$P" -type l | wc -l) symlinks"
if grep -rl -e "$T/clone" -e "$T/prefix" -e "$ROOT" "$P"; then
  die "the files above name the clone, the original prefix or $ROOT"
fi

step "install test: the shipped library and the RUNPATHs"
[ "$(readlink "$P/lib/libexecutorch_cuda.so")" = libexecutorch_cuda.so.0 ] ||
  die "lib/libexecutorch_cuda.so is not a symlink to libexecutorch_cuda.so.0"
readelf -S -W "$P/lib/libexecutorch_cuda.so.0" | grep -q ' \.symtab ' &&
  die "lib/libexecutorch_cuda.so.0 still has its symbol table after cmake --install --strip"
cmake -DREADELF=readelf -DLIB="$P/lib/libexecutorch_cuda.so.0" -DSONAME=libexecutorch_cuda.so.0 \
  -DRUNPATH_FILES="$P/bin/et_cuda_run|$P/lib/libexecutorch_cuda_backend.so" -DFORBIDDEN="$T" \
  -P cmake/check_artifacts.cmake
# README.md states the library's size as built and as installed with --strip; keep it true.
sizes=$(python3 scripts/readme_check.py --lib "$LIB" --stripped "$P/lib/libexecutorch_cuda.so.0") ||
  { echo "$sizes"; die "README.md's library sizes are off"; }
echo "    $sizes"
for f in "$P/bin/et_cuda_run" "$P"/lib/*.so "$P"/lib/*.so.*; do
  [ -L "$f" ] && continue
  runpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  case "$runpath" in
    '$ORIGIN' | '$ORIGIN/../lib') ;;
    '') ;; # none: nothing outside the prefix either
    *) die "$f: RUNPATH '$runpath', expected only an \$ORIGIN-relative entry" ;;
  esac
done

step "install test: the installed runner"
version=$(env -u LD_LIBRARY_PATH "$P/bin/et_cuda_run" --version)
grep -q "loaded from $P/lib/libexecutorch.so" <<<"$version" ||
  { echo "$version"; die "the installed runner did not load ExecuTorch from $P/lib"; }
grep -q "backend library: $P/lib/libexecutorch_cuda_backend.so (executorch-cuda " <<<"$version" ||
  { echo "$version"; die "the installed runner did not open $P/lib/libexecutorch_cuda_backend.so"; }
echo "    et_cuda_run --version: ExecuTorch and the backend library from the moved prefix"
rc=0
out=$(env -u LD_LIBRARY_PATH "$P/bin/et_cuda_run" --manifest "$FIXTURES/mlp_f32/manifest.json" 2>&1) || rc=$?
case $rc in
  0) echo "    et_cuda_run --manifest mlp_f32: PASS (a GPU is here)" ;;
  77) echo "    et_cuda_run --manifest mlp_f32: exit status 77, no CUDA device here; every check before the device passed" ;;
  *) echo "$out"; die "the installed runner exited with $rc" ;;
esac

step "install test: a consumer project against the moved prefix and a second copy of ExecuTorch"
copy_executorch "$T/user/executorch"
# --as-needed on purpose: main.cpp uses no adapter symbol, so this proves the
# package keeps the adapter (and its registration).
cmake -S c_tests/consumer -B "$T/consumer" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" \
  -Dexecutorch_DIR="$T/user/executorch/share/cmake" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed >"$T/consumer.log" ||
  { cat "$T/consumer.log"; die "configuring the consumer failed"; }
cmake --build "$T/consumer" -j "$JOBS" >"$T/consumer_build.log" ||
  { cat "$T/consumer_build.log"; die "building the consumer failed"; }
readelf -d "$T/consumer/app" | grep -q 'NEEDED.*\[libexecutorch_cuda_backend\.so\]' ||
  die "the consumer lost its DT_NEEDED on libexecutorch_cuda_backend.so"
readelf -d "$T/consumer/app" | grep -q 'NEEDED.*\[libexecutorch_cuda\.so\.0\]' ||
  die "the consumer does not record libexecutorch_cuda.so.0"
app=$(env -u LD_LIBRARY_PATH "$T/consumer/app" 2>&1) || { echo "$app"; die "the consumer failed"; }
echo "    $app"

step "install test: a consumer without executorch_DIR gets our message"
out=$(cmake -S c_tests/consumer -B "$T/consumer2" -DCMAKE_PREFIX_PATH="$P" 2>&1) &&
  die "the consumer configured without ExecuTorch"
# CMake wraps the message: compare it with its lines joined.
msg=$(tr -s ' \n' '  ' <<<"$out" | sed -n 's/.*\(executorch_cuda needs .*CMAKE_PREFIX_PATH\).*/\1/p')
grep -q "^executorch_cuda needs ExecuTorch's CMake package (executorch::runtime): pass -Dexecutorch_DIR=" <<<"$msg" ||
  { echo "$out"; die "unexpected configure error"; }
case $msg in *';'*) echo "$out"; die "a ';' in the not-found message" ;; esac
echo "    the consumer's configure stops with our message, as it should: executorch_cuda needs ExecuTorch's CMake package (-Dexecutorch_DIR=...)"

step "install test: the project itself without executorch_DIR gets our message"
out=$(env -u CMAKE_PREFIX_PATH -u executorch_DIR cmake -S "$ROOT" -B "$T/no_executorch" 2>&1) &&
  die "the project configured without ExecuTorch"
msg=$(tr -s ' \n' '  ' <<<"$out" | sed -n 's/.*\(executorch_cuda needs .*CMAKE_PREFIX_PATH\).*/\1/p')
grep -q "^executorch_cuda needs ExecuTorch's CMake package: pass -Dexecutorch_DIR=.*\.deps/py/executorch/share/cmake" <<<"$msg" ||
  { echo "$out"; die "unexpected configure error"; }
case $msg in *';'*) echo "$out"; die "a ';' in the not-found message" ;; esac
echo "    the project's configure stops with our message, as it should: ${msg%% (pip*}"

step "install test passed"
