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

step() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The first run downloads these from PyPI (sizes of the x86-64 Linux wheels).
EXECUTORCH_DOWNLOAD="about 207 MiB"
CMAKE_DOWNLOAD="about 29 MiB"

# Logs of the steps whose output is shown only when they fail.
LOGS=${LOGS:-$BUILD/logs}

# logged NAME CMD...: runs CMD with its output in $LOGS/NAME.log; when it fails,
# shows the log's last 60 lines and its path, and stops.
logged() {
  local name=$1 log=$LOGS/$1.log
  shift
  mkdir -p "$LOGS"
  if ! "$@" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    die "$name failed (its whole output: $log)"
  fi
}

# The time since the first script of this run started (.ci/run, or the script
# the user ran; ET_CUDA_T0 carries it into the scripts it runs), as "3 min 12 s".
ET_CUDA_T0=${ET_CUDA_T0:-$(date +%s)}
export ET_CUDA_T0
elapsed() {
  local s=$(($(date +%s) - ET_CUDA_T0))
  printf '%d min %02d s' $((s / 60)) $((s % 60))
}

# version_ge A B: whether version A >= B (dotted numbers).
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# A CMake package NAME (its <NAME>Config.cmake: nlohmann_json from Debian's
# nlohmann-json3-dev, CLI11 from libcli11-dev), or one the user points CMake at
# with <NAME>_DIR or CMAKE_PREFIX_PATH.
have_cmake_package() {
  local name=$1 var="${1}_DIR"
  [ -n "${!var:-}" ] && return 0
  local d prefixes=${CMAKE_PREFIX_PATH:-}
  for d in /usr/share/cmake /usr/lib/cmake /usr/lib/*-linux-gnu/cmake /usr/local/share/cmake /usr/local/lib/cmake \
    ${prefixes//:/ }; do
    compgen -G "$d/$name/${name}Config.cmake" >/dev/null && return 0
    compgen -G "$d/share/cmake/$name/${name}Config.cmake" >/dev/null && return 0
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
  have_cmake_package nlohmann_json || missing+=("nlohmann_json >= 3 (JSON for the runner): apt-get install nlohmann-json3-dev")
  have_cmake_package CLI11 || missing+=("CLI11 >= 2 (the runner's command line): apt-get install libcli11-dev")
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
    step "CMake >= $CMAKE_MIN: ${have:+found $have, }pip install cmake into .deps/cmake ($CMAKE_DOWNLOAD download, once)"
    python3 -m pip install --quiet --disable-pip-version-check --target "$ROOT/.deps/cmake" "cmake>=$CMAKE_MIN" ||
      die "could not install cmake from PyPI (install CMake >= $CMAKE_MIN yourself: python3 -m pip install cmake)"
  fi
  [ -x "$bin/cmake" ] || die "the cmake wheel has no $bin/cmake"
  # For this script and what it runs only: README.md "Using it from CMake" says how to use it after.
  export PATH="$bin:$PATH"
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
    step "pip install executorch==$EXECUTORCH_VERSION into .deps/py ($EXECUTORCH_DOWNLOAD download, once)"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$ROOT/.deps/py" \
      "executorch==$EXECUTORCH_VERSION" || die "could not install executorch==$EXECUTORCH_VERSION from PyPI"
  fi
  EXECUTORCH_CMAKE_DIR=$dir
}

# Configure (Release) and build the CMake project into $BUILD (the crates,
# the adapter, the runner, the C/C++ tests); output in $LOGS, shown on failure.
cmake_build() {
  ensure_cmake
  find_executorch
  local what=${*:-everything}
  step "cmake configure ${BUILD#"$ROOT/"}/ (Release, ExecuTorch's package in ${EXECUTORCH_CMAKE_DIR#"$ROOT/"}; log ${LOGS#"$ROOT/"}/configure.log)"
  logged configure cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -Dexecutorch_DIR="$EXECUTORCH_CMAKE_DIR"
  step "cmake build ${what#--target } (the crates with cargo in release, then the C++; log ${LOGS#"$ROOT/"}/build.log)"
  logged build cmake --build "$BUILD" -j "$JOBS" "$@"
}
