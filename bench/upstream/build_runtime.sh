#!/usr/bin/env bash
# Builds ExecuTorch's own runtime (core + Module + data_loader + flat_tensor +
# named_data_map + tensor extensions, no kernels, no backends) from a mirror ref
# with CMake, and lays it out like the pip package that build.sh links:
#   PREFIX/include/executorch/...   (cmake --install)
#   PREFIX/lib/libexecutorch.so     (the static archives linked whole into one
#                                    shared library, so the backend library and
#                                    the program share one backend registry)
# Used for tags whose wheel ships no libexecutorch.so (v1.2.0):
#   bench/upstream/build_runtime.sh --ref v1.2.0
#   bench/upstream/build.sh --ref v1.2.0 --et .dev/upstream/runtime-v1.2.0-<sha>/prefix
#
# Third-party sources come from local mirrors of their public repositories
# (the `fetch` tool), at the submodule commits the ref records:
#   third-party/flatbuffers (flatc + headers), third-party/flatcc,
#   third-party/gflags, third-party/json (add_subdirectory'd unconditionally),
#   backends/xnnpack/third-party/FXdiv (likewise, header-only).
# A submodule commit that a mirror lacks is replaced by the named fallback tag
# (reported); nothing is downloaded.
#
# Usage: bench/upstream/build_runtime.sh [--ref REF] [--out DIR] [--mirrors DIR] [--jobs N]
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REF=v1.2.0
OUT=
MIRRORS=${MIRRORS:-/work/.mirror}
JOBS=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) REF=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --mirrors) MIRRORS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
die() { echo "build_runtime.sh: $*" >&2; exit 1; }
say() { printf '==> %s\n' "$*"; }

ETG=$MIRRORS/pytorch+executorch/repo
[ -d "$ETG" ] || die "no executorch mirror at $ETG"
SHA=$(git --git-dir="$ETG" rev-parse --verify -q "$REF^{commit}") || die "ref $REF not in $ETG"
[ -n "$OUT" ] || OUT=$ROOT/.dev/upstream/runtime-$(echo "$REF" | sed 's#^refs/heads/##; s#^refs/tags/##; s#[^A-Za-z0-9._-]#_#g')-${SHA:0:10}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/build.log") 2>&1
command -v cmake >/dev/null || die "cmake not found (apt-get install cmake, or pip install cmake)"
say "ref $REF = $SHA; cmake $(cmake --version | head -1 | awk '{print $3}'); $(${CXX:-g++} --version | head -1)"

# ExecuTorch's CMake insists that the source folder is named "executorch".
SRC=$OUT/src/executorch
rm -rf "$OUT/src" "$OUT/build" "$OUT/prefix"
mkdir -p "$SRC"
# The runtime's CMake needs these top-level entries; examples/, docs/ and the
# backends are not built (and the mirror may lack some of their large blobs).
want=(CMakeLists.txt CMakePresets.json Test.cmake version.txt codegen configurations devtools
      extension kernels runtime schema third-party tools util backends/aoti
      backends/xnnpack/third-party/TARGETS shim_et)
have=()
for p in "${want[@]}"; do
  [ -n "$(git --git-dir="$ETG" ls-tree --name-only "$SHA" -- "$p")" ] && have+=("$p")
done
git --git-dir="$ETG" archive "$SHA" -- "${have[@]}" 2>/dev/null | tar -x -C "$SRC"
n_want=$(git --git-dir="$ETG" ls-tree -r "$SHA" -- "${have[@]}" | awk '$2 == "blob"' | wc -l)
n_got=$(find "$SRC" \( -type f -o -type l \) | wc -l)
[ "$n_want" -eq "$n_got" ] || die "git archive gave $n_got of $n_want files"
say "copied ${have[*]} ($n_got files)"

# submodule NAME PATH MIRROR FALLBACK_TAG
submodule() {
  local path=$1 mirror=$MIRRORS/$2/repo fallback=$3 commit use
  commit=$(git --git-dir="$ETG" ls-tree "$SHA" -- "$path" | awk '$2 == "commit" {print $3}')
  [ -n "$commit" ] || die "$path is not a submodule at $REF"
  [ -d "$mirror" ] || die "no mirror $mirror for $path (fetch github:${2/+//})"
  if git --git-dir="$mirror" cat-file -e "$commit^{commit}" 2>/dev/null; then
    use=$commit
  else
    use=$(git --git-dir="$mirror" rev-parse --verify -q "$fallback^{commit}") || die "$path: $commit not in $mirror and no $fallback"
    say "WARNING: $path commit $commit is not in the mirror; using $fallback ($use)"
    subs_note+=("$path: $commit missing, used $fallback")
  fi
  rm -rf "${SRC:?}/$path" && mkdir -p "$SRC/$path"
  git --git-dir="$mirror" archive "$use" | tar -x -C "$SRC/$path"
  say "$path @ $use"
  subs+=("$path@$use")
}
subs=() subs_note=()
submodule third-party/flatbuffers google+flatbuffers v24.3.25
submodule third-party/flatcc dvidelabs+flatcc v0.6.1
submodule third-party/gflags gflags+gflags v2.2.2
submodule third-party/json nlohmann+json v3.11.3
# FXdiv (header-only) is add_subdirectory'd unless FXDIV_SOURCE_DIR is set.
submodule backends/xnnpack/third-party/FXdiv Maratyszcza+FXdiv master

say "configure"
cmake -S "$SRC" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$OUT/prefix" \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_TESTING=OFF \
  -DEXECUTORCH_BUILD_EXTENSION_MODULE=ON -DEXECUTORCH_BUILD_EXTENSION_DATA_LOADER=ON \
  -DEXECUTORCH_BUILD_EXTENSION_FLAT_TENSOR=ON -DEXECUTORCH_BUILD_EXTENSION_NAMED_DATA_MAP=ON \
  -DEXECUTORCH_BUILD_EXTENSION_TENSOR=ON -DEXECUTORCH_BUILD_PORTABLE_OPS=OFF \
  -DEXECUTORCH_BUILD_KERNELS_OPTIMIZED=OFF -DEXECUTORCH_BUILD_KERNELS_QUANTIZED=OFF \
  -DEXECUTORCH_BUILD_DEVTOOLS=OFF -DEXECUTORCH_BUILD_XNNPACK=OFF -DEXECUTORCH_BUILD_CUDA=OFF \
  -DEXECUTORCH_BUILD_EXECUTOR_RUNNER=OFF -DEXECUTORCH_BUILD_PYBIND=OFF \
  -DEXECUTORCH_ENABLE_LOGGING=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=OFF \
  -DEXECUTORCH_BUILD_CPUINFO=OFF -DEXECUTORCH_BUILD_PTHREADPOOL=OFF \
  || die "cmake configure failed"
say "build (-j$JOBS)"
cmake --build "$OUT/build" -j "$JOBS" || die "cmake build failed"
cmake --install "$OUT/build" > "$OUT/install.log" 2>&1 || die "cmake install failed (see $OUT/install.log)"

# One shared runtime out of the static archives (the pip wheel's layout).
P=$OUT/prefix
libdir=$P/lib
[ -d "$libdir" ] || libdir=$P/lib64
archives=()
for a in executorch executorch_core extension_module_static extension_data_loader extension_flat_tensor \
         extension_named_data_map extension_tensor; do
  f=$(find "$OUT/build" "$libdir" -name "lib$a.a" 2>/dev/null | head -1)
  if [ -n "$f" ]; then archives+=("$f"); else say "note: no lib$a.a"; fi
done
mkdir -p "$P/lib"
${CXX:-g++} -shared -o "$P/lib/libexecutorch.so" -Wl,-soname,libexecutorch.so -Wl,--no-undefined \
  -Wl,--whole-archive "${archives[@]}" -Wl,--no-whole-archive -ldl -lpthread \
  || die "linking libexecutorch.so failed"
{
  echo "ref: $REF"
  echo "commit: $SHA"
  echo "submodules: ${subs[*]}"
  echo "substitutions: ${subs_note[*]:-none}"
  echo "archives: ${archives[*]}"
  echo "libexecutorch.so: $(stat -c %s "$P/lib/libexecutorch.so") bytes"
} | tee "$OUT/BUILD_INFO.txt"
say "OK: $P (use: bench/upstream/build.sh --ref $REF --et $P)"
