# Shared by the scripts (sourced, not run). Sets ROOT, BUILD, JOBS; defines
# check_prereqs (every missing prerequisite named with its install command,
# before anything is built), ensure_cmake, find_executorch (sets
# EXECUTORCH_CMAKE_DIR) and cmake_build. README.md "Prerequisites" lists the same.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}
EXECUTORCH_VERSION=1.5.1
CMAKE_MIN=3.28
RUST_MIN=$(sed -n 's/^rust-version = "\([0-9.]*\)"/\1/p' "$ROOT/Cargo.toml")

# pip as root (containers, CI) warns about the system's packages on every
# install; ours go into folders of their own (--target), so the warning is noise.
export PIP_ROOT_USER_ACTION=ignore

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# version_ge A B: whether version A >= B (dotted numbers).
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# nlohmann_json's CMake package (Debian/Ubuntu: nlohmann-json3-dev), or one the
# user points CMake at.
have_nlohmann_json() {
  [ -n "${nlohmann_json_DIR:-}" ] && return 0
  local d prefixes=${CMAKE_PREFIX_PATH:-}
  for d in /usr/share/cmake /usr/lib/cmake /usr/lib/*-linux-gnu/cmake /usr/local/share/cmake /usr/local/lib/cmake \
    ${prefixes//:/ }; do
    compgen -G "$d/nlohmann_json/nlohmann_jsonConfig.cmake" >/dev/null && return 0
    compgen -G "$d/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake" >/dev/null && return 0
  done
  return 1
}

# check_prereqs [--tests]: stops, listing everything missing with the command
# that installs it (Debian/Ubuntu), before any build. --tests adds what
# scripts/test.sh needs on top (rustfmt, clippy); valgrind is optional there.
check_prereqs() {
  local missing=() have
  if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
    missing+=("Rust >= $RUST_MIN (cargo, rustc): rustup toolchain install stable (Debian's own cargo is older)")
  else
    have=$(rustc --version | awk '{print $2}')
    version_ge "${have%%-*}" "$RUST_MIN" ||
      missing+=("Rust >= $RUST_MIN (found rustc $have): rustup update stable")
  fi
  if [ "${1:-}" = --tests ] && command -v cargo >/dev/null 2>&1; then
    cargo fmt --version >/dev/null 2>&1 || missing+=("rustfmt: rustup component add rustfmt")
    cargo clippy --version >/dev/null 2>&1 || missing+=("clippy: rustup component add clippy")
  fi
  command -v cc >/dev/null 2>&1 || missing+=("a C compiler (cc): apt-get install build-essential")
  command -v c++ >/dev/null 2>&1 || missing+=("a C++17 compiler (c++): apt-get install build-essential")
  if [ -z "${CMAKE_GENERATOR:-}" ] || [ "${CMAKE_GENERATOR:-}" = "Unix Makefiles" ]; then
    command -v make >/dev/null 2>&1 || missing+=("make: apt-get install build-essential")
  fi
  command -v readelf >/dev/null 2>&1 || missing+=("binutils (readelf, strip): apt-get install binutils")
  if ! command -v python3 >/dev/null 2>&1; then
    missing+=("Python 3 with pip: apt-get install python3 python3-pip")
  elif ! python3 -m pip --version >/dev/null 2>&1; then
    missing+=("pip for Python 3: apt-get install python3-pip")
  fi
  have_nlohmann_json || missing+=("nlohmann_json >= 3 (JSON for the runner): apt-get install nlohmann-json3-dev")
  if [ "${#missing[@]}" -gt 0 ]; then
    printf 'error: missing prerequisites (README.md, "Prerequisites"):\n' >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
  fi
}

# CMake >= $CMAKE_MIN on PATH: the one there when it is new enough, else one
# from PyPI under .deps/cmake (installed on first use; Debian 12 has 3.25).
ensure_cmake() {
  local have=""
  command -v cmake >/dev/null 2>&1 && have=$(cmake --version | sed -n '1s/cmake version //p')
  if [ -n "$have" ] && version_ge "${have%%-*}" "$CMAKE_MIN"; then
    return
  fi
  local bin=$ROOT/.deps/cmake/cmake/data/bin
  if [ ! -x "$bin/cmake" ]; then
    step "CMake >= $CMAKE_MIN: ${have:+found $have, }pip install cmake into .deps/cmake"
    python3 -m pip install --quiet --target "$ROOT/.deps/cmake" "cmake>=$CMAKE_MIN" ||
      die "could not install cmake from PyPI (install CMake >= $CMAKE_MIN yourself: python3 -m pip install cmake)"
  fi
  [ -x "$bin/cmake" ] || die "the cmake wheel has no $bin/cmake"
  export PATH="$bin:$PATH"
  cmake --version | head -n1
}

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
  ensure_cmake
  find_executorch
  step "cmake configure ($BUILD, ExecuTorch at $EXECUTORCH_CMAKE_DIR)"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -Dexecutorch_DIR="$EXECUTORCH_CMAKE_DIR"
  step "cmake build"
  cmake --build "$BUILD" -j "$JOBS" "$@"
}
