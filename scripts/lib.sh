# Shared by scripts/test.sh and scripts/run_example.sh (sourced, not run).
# Sets ROOT, BUILD, JOBS and EXECUTORCH_CMAKE_DIR, and defines cmake_build.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}
EXECUTORCH_VERSION=1.5.1

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ExecuTorch's CMake package: $EXECUTORCH_DIR (the package root or its
# share/cmake folder), else a pip install under .deps/py made on first use.
find_executorch() {
  local dir
  if [ -n "${EXECUTORCH_DIR:-}" ]; then
    for dir in "$EXECUTORCH_DIR/share/cmake" "$EXECUTORCH_DIR/executorch/share/cmake" "$EXECUTORCH_DIR"; do
      if [ -f "$dir/executorch-config.cmake" ]; then
        EXECUTORCH_CMAKE_DIR=$(cd "$dir" && pwd)
        return
      fi
    done
    die "EXECUTORCH_DIR=$EXECUTORCH_DIR holds no executorch-config.cmake"
  fi
  dir=$ROOT/.deps/py/executorch/share/cmake
  if [ ! -f "$dir/executorch-config.cmake" ]; then
    step "pip install executorch==$EXECUTORCH_VERSION into .deps/py"
    python3 -m pip install --quiet --no-deps --target "$ROOT/.deps/py" "executorch==$EXECUTORCH_VERSION"
  fi
  EXECUTORCH_CMAKE_DIR=$dir
}

# Configure (Release) and build the CMake project into $BUILD.
cmake_build() {
  command -v cmake >/dev/null || die "cmake not found (pip install cmake, or run .ci/run)"
  find_executorch
  step "cmake configure ($BUILD, ExecuTorch at $EXECUTORCH_CMAKE_DIR)"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -Dexecutorch_DIR="$EXECUTORCH_CMAKE_DIR"
  step "cmake build"
  cmake --build "$BUILD" -j "$JOBS" "$@"
}
