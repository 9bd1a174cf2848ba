#!/usr/bin/env bash
# Builds ExecuTorch's own C++ CUDA backend ("CudaBackend", backends/cuda) from a
# local mirror of the public pytorch/executorch repository into ONE shared
# library, libupstream_cuda_backend.so, linked against the same pip ExecuTorch
# runtime (include/ + lib/libexecutorch.so) that this project's adapter uses.
# Loading the library (dlopen, RTLD_GLOBAL) registers "CudaBackend" and the
# CUDA DeviceAllocator through upstream's own static initializers, and exports
# the aoti_torch_* shims that the AOTInductor .so files import.
#
# Nothing of upstream's code enters this repository: the sources are taken from
# the mirror with `git archive` into the output folder (ignored / under /tmp).
#
# Usage: bench/upstream/build.sh [--ref REF | --src DIR] [--out DIR] [--mirror GIT_DIR]
#          [--et DIR] [--cuda-home DIR] [--arch 90] [--jobs N] [--keep-going]
#   --ref        commit, tag or branch of the mirror (default: refs/heads/main)
#   --src        instead of the mirror: the src/ folder of an earlier build
#                (it carries SOURCE_INFO; pack.sh ships it) - for rebuilding
#                on a machine without the mirror, e.g. the GPU machine
#   --out        output folder (default: .dev/upstream/<ref>-<short sha>)
#   --mirror     bare git dir of the mirror (default: $ET_MIRROR or
#                /work/.mirror/pytorch+executorch/repo)
#   --et         the pip `executorch` package folder: include/, lib/libexecutorch.so
#                (default: $ET_ROOT, .deps/py/executorch, /tmp/et151/executorch;
#                if none exists and pip can reach PyPI, pip installs
#                executorch==1.5.1 into /tmp/et151)
#   --cuda-home  a CUDA toolkit (bin/nvcc, include/, lib64|lib/libcudart.so*).
#                Default: $CUDA_HOME, the nvcc on PATH, /usr/local/cuda, else
#                the CUDA 13.0 wheels from PyPI installed into /tmp/cuda13.
#   --arch       SM number(s), comma separated (default 90): SASS for each plus
#                PTX for the newest
#   --keep-going compile every file even after a failure (for the attempt log)
# Output: DIR/lib/libupstream_cuda_backend.so (stripped) and .debug copy,
#         DIR/bin/smoke_main (smoke_main.cpp), DIR/build.log,
#         DIR/BUILD_INFO.txt, DIR/src (the copied sources).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REF=refs/heads/main
OUT=
MIRROR=${ET_MIRROR:-/work/.mirror/pytorch+executorch/repo}
ETDIR=${ET_ROOT:-}
SRC_ARG=
CUDA_HOME_ARG=${CUDA_HOME:-}
ARCHS=90
JOBS=$(nproc 2>/dev/null || echo 2)
KEEP_GOING=0
LIBNAME=libupstream_cuda_backend.so

while [ $# -gt 0 ]; do
  case "$1" in
    --ref) REF=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --src) SRC_ARG=$2; shift 2 ;;
    --et) ETDIR=$2; shift 2 ;;
    --cuda-home) CUDA_HOME_ARG=$2; shift 2 ;;
    --arch) ARCHS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --keep-going) KEEP_GOING=1; shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

die() { echo "build.sh: $*" >&2; exit 1; }
say() { printf '==> %s\n' "$*"; }

# ------------------------------------------------------------------ sources
outdir_for() { # $1 = ref, $2 = sha
  echo "$ROOT/.dev/upstream/$(echo "$1" | sed 's#^refs/heads/##; s#^refs/tags/##; s#[^A-Za-z0-9._-]#_#g')-${2:0:10}"
}
start_log() {
  mkdir -p "$OUT" || die "cannot create $OUT"
  OUT=$(cd "$OUT" && pwd)
  LOG=$OUT/build.log
  : > "$LOG"
  exec > >(tee -a "$LOG") 2>&1
}
GIT=(git --git-dir="$MIRROR")
if [ -n "$SRC_ARG" ]; then
  # A source copy made earlier by this script (its src/ folder, e.g. from
  # pack.sh's archive on a machine without the mirror).
  SRC_ARG=$(cd "$SRC_ARG" 2>/dev/null && pwd) || die "no folder $SRC_ARG"
  [ -f "$SRC_ARG/SOURCE_INFO" ] || die "$SRC_ARG has no SOURCE_INFO (not made by build.sh)"
  REF=$(sed -n 's/^ref: //p' "$SRC_ARG/SOURCE_INFO")
  SHA=$(sed -n 's/^commit: //p' "$SRC_ARG/SOURCE_INFO")
  [ -n "$OUT" ] || OUT=$(outdir_for "$REF" "$SHA")
  start_log
  say "sources from $SRC_ARG: ref $REF = $SHA"
  SRC=$OUT/src
  rm -rf "$OUT/obj" "$OUT/lib" "$OUT/bin"
  mkdir -p "$OUT/obj" "$OUT/lib"
  if [ "$SRC_ARG" != "$SRC" ]; then
    rm -rf "$SRC" && cp -a "$SRC_ARG" "$SRC" || die "cannot copy $SRC_ARG"
  fi
  got=$(find "$SRC/executorch" \( -type f -o -type l \) | wc -l)
else
  [ -d "$MIRROR" ] || die "no mirror at $MIRROR (fetch github:pytorch/executorch, or pass --mirror or --src)"
  SHA=$("${GIT[@]}" rev-parse --verify -q "$REF^{commit}") || die "ref $REF not in $MIRROR"
  [ -n "$OUT" ] || OUT=$(outdir_for "$REF" "$SHA")
  start_log
  say "ref $REF = $SHA ($("${GIT[@]}" log -1 --format='%ci %s' "$SHA"))"
  SRC=$OUT/src
  rm -rf "$SRC" "$OUT/obj" "$OUT/lib" "$OUT/bin"
  mkdir -p "$SRC/executorch" "$OUT/obj" "$OUT/lib"
  paths=()
  for p in backends/cuda/runtime backends/cuda/CMakeLists.txt backends/aoti extension/cuda; do
    if [ -n "$("${GIT[@]}" ls-tree --name-only "$SHA" -- "$p")" ]; then paths+=("$p"); fi
  done
  # (git archive may print "invalid object" for blobs of unrelated paths that
  # the mirror does not hold; the count check below is what matters.)
  "${GIT[@]}" archive "$SHA" -- "${paths[@]}" 2>/dev/null | tar -x -C "$SRC/executorch"
  want=$("${GIT[@]}" ls-tree -r --name-only "$SHA" -- "${paths[@]}" | wc -l)
  got=$(find "$SRC/executorch" \( -type f -o -type l \) | wc -l)
  [ "$want" -eq "$got" ] || die "git archive gave $got of $want files"
  printf 'ref: %s\ncommit: %s\ncommit_date: %s\n' "$REF" "$SHA" \
    "$("${GIT[@]}" log -1 --format=%ci "$SHA")" > "$SRC/SOURCE_INFO"
fi
say "sources: ${got} files in $SRC/executorch"

# ------------------------------------------------------------ ExecuTorch runtime
if [ -z "$ETDIR" ]; then
  for d in "$ROOT/.deps/py/executorch" /tmp/et151/executorch; do
    if [ -f "$d/lib/libexecutorch.so" ] && [ -d "$d/include/executorch" ]; then ETDIR=$d; break; fi
  done
fi
if [ -z "$ETDIR" ]; then
  say "no executorch==1.5.1 package found: pip install into /tmp/et151"
  python3 -m pip install -q --no-deps --target /tmp/et151 executorch==1.5.1 || die "pip install executorch==1.5.1 failed (pass --et)"
  ETDIR=/tmp/et151/executorch
fi
ETDIR=$(cd "$ETDIR" && pwd)
[ -f "$ETDIR/lib/libexecutorch.so" ] || die "$ETDIR/lib/libexecutorch.so missing"
ET_VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$ETDIR/version.py" 2>/dev/null)
ET_GIT=$(sed -n "s/^git_version.*'\(.*\)'/\1/p" "$ETDIR/version.py" 2>/dev/null)
ET_INC=$ETDIR/include
C10_INC=$ET_INC/executorch/runtime/core/portable_type/c10
say "ExecuTorch runtime: $ETDIR (version ${ET_VERSION:-?}, git ${ET_GIT:-?})"

# ------------------------------------------------------------------ CUDA
find_cudart_dir() { # $1 = CUDA home; prints the folder holding libcudart.so*
  local d
  for d in "$1/lib64" "$1/lib" "$1/targets/x86_64-linux/lib"; do
    if ls "$d"/libcudart.so* >/dev/null 2>&1; then echo "$d"; return 0; fi
  done
  return 1
}
CUDA=$CUDA_HOME_ARG
if [ -z "$CUDA" ] && command -v nvcc >/dev/null 2>&1; then
  CUDA=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
fi
if [ -z "$CUDA" ] && [ -x /usr/local/cuda/bin/nvcc ]; then CUDA=/usr/local/cuda; fi
if [ -z "$CUDA" ]; then
  CUDA=/tmp/cuda13/nvidia/cu13
  if [ ! -x "$CUDA/bin/nvcc" ]; then
    say "no CUDA toolkit found: pip install the CUDA 13.0 wheels into /tmp/cuda13"
    python3 -m pip install -q --no-deps --target /tmp/cuda13 \
      'nvidia-cuda-nvcc==13.0.88' 'nvidia-cuda-runtime==13.0.96' 'nvidia-cuda-cccl==13.0.85' \
      'nvidia-cuda-crt==13.0.88' 'nvidia-nvvm==13.0.88' 'nvidia-curand==10.4.0.35' \
      || die "pip install of the CUDA wheels failed (pass --cuda-home)"
  fi
fi
NVCC=$CUDA/bin/nvcc
[ -x "$NVCC" ] || die "no nvcc at $NVCC"
CUDART_DIR=$(find_cudart_dir "$CUDA") || die "no libcudart.so* under $CUDA"
# Wheels ship only libcudart.so.13: link through a private -lcudart symlink.
LINKDIR=$OUT/obj/linkdir
mkdir -p "$LINKDIR"
cudart=$(ls "$CUDART_DIR"/libcudart.so.[0-9]* 2>/dev/null | sort -V | head -1)
[ -n "$cudart" ] || cudart=$CUDART_DIR/libcudart.so
ln -sf "$cudart" "$LINKDIR/libcudart.so"
ln -sf "$ETDIR/lib/libexecutorch.so" "$LINKDIR/libexecutorch.so"
# curand_kernel.h (rand.cu) lives in the toolkit's include/ or, from the wheels,
# in the same cu13/include folder.
say "CUDA: $CUDA ($("$NVCC" --version | tail -1)); libcudart: $cudart"

CXX=${CXX:-g++}
say "host compiler: $($CXX --version | head -1)"

# ------------------------------------------------------------------ file list
# The runtime sources named by the ref's backends/cuda/CMakeLists.txt (minus
# tests), plus the SlimTensor shim library (backends/aoti: common_shims_slim.cpp
# and slim/cuda/guard.cpp, linked --whole-archive upstream) and extension/cuda's
# caller-stream thread-local, which upstream builds as separate libraries.
CML=$SRC/executorch/backends/cuda/CMakeLists.txt
[ -f "$CML" ] || die "no backends/cuda/CMakeLists.txt at $REF"
mapfile -t rel < <(grep -oE 'runtime/[A-Za-z0-9_/]+\.(cpp|cu)\b' "$CML" | grep -v '/test/' | sort -u)
sources=()
for r in "${rel[@]}"; do sources+=("backends/cuda/$r"); done
for f in backends/aoti/common_shims_slim.cpp backends/aoti/slim/cuda/guard.cpp extension/cuda/caller_stream.cpp; do
  [ -f "$SRC/executorch/$f" ] && sources+=("$f")
done
say "sources (${#sources[@]}): ${sources[*]}"

# Headers a copied file includes that neither the copy nor the pip runtime has:
# taken from the same snapshot (listed in BUILD_INFO.txt), never from elsewhere.
extra_headers=()
resolve_includes() {
  local changed=1 inc
  while [ $changed -eq 1 ]; do
    changed=0
    while read -r inc; do
      [ -f "$SRC/$inc" ] && continue
      [ -f "$ET_INC/$inc" ] && continue
      if "${GIT[@]}" cat-file -e "$SHA:${inc#executorch/}" 2>/dev/null; then
        mkdir -p "$SRC/$(dirname "$inc")"
        "${GIT[@]}" show "$SHA:${inc#executorch/}" > "$SRC/$inc"
        extra_headers+=("${inc#executorch/}")
        changed=1
      fi
    done < <(grep -rhoE '#include <executorch/[^>]+>' "$SRC/executorch" --include='*.h' --include='*.cuh' --include='*.cpp' --include='*.cu' \
               --exclude-dir=test --exclude-dir=tests | sed 's/#include <//; s/>$//' | sort -u)
  done
}
if [ -z "$SRC_ARG" ]; then
  resolve_includes
  [ ${#extra_headers[@]} -eq 0 ] || printf 'extra_headers: %s\n' "${extra_headers[*]}" >> "$SRC/SOURCE_INFO"
else
  read -ra extra_headers <<< "$(sed -n 's/^extra_headers: //p' "$SRC/SOURCE_INFO")"
fi
[ ${#extra_headers[@]} -eq 0 ] || say "headers taken from the snapshot because the pip runtime lacks them: ${extra_headers[*]}"

# ------------------------------------------------------------------ patches
# None by default. A patch, when one is needed, is applied here to the copy
# (never to the mirror or this repository) and listed in BUILD_INFO.txt.
patches=()
apply_patches() { :; }
apply_patches

# ------------------------------------------------------------------ compile
# The runtime's own compile definitions: the pip package states them in its
# CMake config (EXECUTORCH_COMPILE_DEFINITIONS); ET_EVENT_TRACER_ENABLED changes
# class layouts, so it follows the package (a runtime built by build_runtime.sh
# has the tracer off).
DEFS=(-DC10_USING_CUSTOM_GENERATED_MACROS)
if grep -qs 'ET_EVENT_TRACER_ENABLED' "$ETDIR"/share/cmake/executorch-config.cmake; then
  DEFS+=(-DET_EVENT_TRACER_ENABLED)
fi
SMOKE_DEFS=("${DEFS[@]}")
DEFS+=(-DCUDA_AVAILABLE=1 -DNDEBUG)
INCS=(-I"$SRC" -I"$ET_INC" -I"$C10_INC" -isystem "$CUDA/include")
[ -d "$CUDA/include/cccl" ] && INCS+=(-isystem "$CUDA/include/cccl")
CXXFLAGS=(-std=c++17 -O2 -fPIC -fexceptions -frtti -Wno-attributes)
GENCODE=()
IFS=, read -ra archlist <<< "$ARCHS"
newest=0
for a in "${archlist[@]}"; do
  GENCODE+=(-gencode "arch=compute_$a,code=sm_$a")
  [ "$a" -gt "$newest" ] && newest=$a
done
GENCODE+=(-gencode "arch=compute_$newest,code=compute_$newest")
NVCCFLAGS=(-std=c++17 -O2 "${GENCODE[@]}" -Xcompiler=-fPIC,-fexceptions,-frtti
           --expt-relaxed-constexpr -ccbin "$CXX" -Wno-deprecated-gpu-targets)

compile_one() { # $1 = source relative to $SRC/executorch
  local s=$1 o
  o=$OUT/obj/$(echo "$s" | tr / _).o
  local t0=$SECONDS
  case "$s" in
    *.cu) "$NVCC" "${NVCCFLAGS[@]}" "${DEFS[@]}" "${INCS[@]}" -c "$SRC/executorch/$s" -o "$o" ;;
    *)    "$CXX" "${CXXFLAGS[@]}" "${DEFS[@]}" "${INCS[@]}" -c "$SRC/executorch/$s" -o "$o" ;;
  esac
  local rc=$?
  echo "    [$rc] $s ($((SECONDS - t0)) s)"
  return $rc
}
say "compiling with -j$JOBS"
failed=()
# C++ first (fast, surfaces header mismatches early), then CUDA kernels.
ordered=()
for s in "${sources[@]}"; do case "$s" in *.cu) ;; *) ordered+=("$s") ;; esac; done
for s in "${sources[@]}"; do case "$s" in *.cu) ordered+=("$s") ;; esac; done
running=0
declare -A pid_of
for s in "${ordered[@]}"; do
  compile_one "$s" > "$OUT/obj/$(echo "$s" | tr / _).log" 2>&1 &
  pid_of[$!]=$s
  running=$((running + 1))
  if [ $running -ge "$JOBS" ]; then
    wait -n -p done_pid; rc=$?
    s2=${pid_of[$done_pid]}; cat "$OUT/obj/$(echo "$s2" | tr / _).log"
    [ $rc -eq 0 ] || failed+=("$s2")
    running=$((running - 1))
    if [ ${#failed[@]} -gt 0 ] && [ $KEEP_GOING -eq 0 ]; then break; fi
  fi
done
while [ $running -gt 0 ]; do
  wait -n -p done_pid; rc=$?
  s2=${pid_of[$done_pid]}; cat "$OUT/obj/$(echo "$s2" | tr / _).log"
  [ $rc -eq 0 ] || failed+=("$s2")
  running=$((running - 1))
done
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED to compile: ${failed[*]}"
  exit 1
fi

# ------------------------------------------------------------------ link
say "linking $LIBNAME"
objs=("$OUT"/obj/*.o)
LDFLAGS=(-shared -Wl,--no-undefined -Wl,-soname,$LIBNAME -Wl,--export-dynamic
         -Wl,-rpath,'$ORIGIN:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib'
         -Wl,-z,noexecstack)
"$CXX" "${LDFLAGS[@]}" -o "$OUT/lib/$LIBNAME.debug" "${objs[@]}" \
  -L"$LINKDIR" -lexecutorch -lcudart -ldl -lpthread || { say "link FAILED"; exit 1; }
objcopy --strip-unneeded "$OUT/lib/$LIBNAME.debug" "$OUT/lib/$LIBNAME" || die "strip failed"
# The symlinks point into this machine's folders: keep none in the output.
rm -rf "$LINKDIR"

# ------------------------------------------------------------------ smoke_main
# The fallback smoke program (smoke_main.cpp, this folder): it links only the
# pip runtime, so it is the same for every ref; it finds libexecutorch.so beside
# itself, in ../et/lib (pack.sh's layout) or in the runtime folder it was built
# with.
mkdir -p "$OUT/bin"
"$CXX" -std=c++17 -O2 -Wall "${SMOKE_DEFS[@]}" -isystem "$ET_INC" -isystem "$C10_INC" \
  "$HERE/smoke_main.cpp" -o "$OUT/bin/smoke_main" -L"$ETDIR/lib" -lexecutorch -ldl \
  -Wl,-rpath,"\$ORIGIN:\$ORIGIN/../et/lib:$ETDIR/lib" || die "smoke_main failed to build"
strip "$OUT/bin/smoke_main"

# ------------------------------------------------------------------ report
lib=$OUT/lib/$LIBNAME
nshims=$(nm -D --defined-only "$lib" | grep -c ' T aoti_torch_')
{
  echo "ref: $REF"
  echo "commit: $SHA"
  sed -n 's/^commit_date: /commit_date: /p' "$SRC/SOURCE_INFO"
  echo "executorch_runtime: $ETDIR (version ${ET_VERSION:-?}, git ${ET_GIT:-?})"
  echo "cuda: $CUDA ($("$NVCC" --version | tail -1))"
  echo "host_compiler: $($CXX --version | head -1)"
  echo "sources: ${sources[*]}"
  echo "extra_headers_from_snapshot: ${extra_headers[*]:-none}"
  echo "patches: ${patches[*]:-none}"
  echo "defines: ${DEFS[*]}"
  echo "cxxflags: ${CXXFLAGS[*]}"
  echo "nvccflags: ${NVCCFLAGS[*]}"
  echo "ldflags: ${LDFLAGS[*]} -lexecutorch -lcudart -ldl -lpthread"
  echo "library: $lib ($(stat -c %s "$lib") bytes, sha256 $(sha256sum "$lib" | cut -c1-16))"
  echo "exported aoti_torch_* shims: $nshims"
  echo "NEEDED: $(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  echo "RUNPATH: $(readelf -d "$lib" | sed -n 's/.*R.*PATH).*\[\(.*\)\]/\1/p')"
} > "$OUT/BUILD_INFO.txt"
cat "$OUT/BUILD_INFO.txt"
say "OK: $lib"
