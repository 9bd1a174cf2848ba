#!/usr/bin/env bash
# Packs builds made by build.sh into one small archive for the GPU machine:
#   upstream/<name>/libupstream_cuda_backend.so + BUILD_INFO.txt   (per build;
#     a build against another runtime than the first build's, i.e. one made by
#     build_runtime.sh, also gets its libexecutorch.so and smoke_main there)
#   upstream/bin/smoke_main + libexecutorch.so [+ libexecutorch_kernels_optimized.so
#     and the libexecutorch_threadpool.so it needs]
# The runtime libraries are the pip executorch==1.5.1 files the builds linked
# against (read from the first build's BUILD_INFO.txt), so smoke_main runs on
# its own ($ORIGIN). The kernels library carries the et_copy::_h2d_copy /
# _d2h_copy kernels that programs exported with device memory planning need.
# Usage: bench/upstream/pack.sh [-o ARCHIVE] [--no-kernels] BUILD_DIR...
#   default ARCHIVE: .dev/upstream/upstream_cuda_backends.tar.xz
# Unpack on the GPU machine: tar -xJf ARCHIVE -C /tmp   (gives /tmp/upstream)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ARCHIVE=$ROOT/.dev/upstream/upstream_cuda_backends.tar.xz
KERNELS=1
builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) ARCHIVE=$2; shift 2 ;;
    --no-kernels) KERNELS=0; shift ;;
    *) builds+=("$1"); shift ;;
  esac
done
[ ${#builds[@]} -gt 0 ] || { echo "usage: $0 [-o ARCHIVE] [--no-kernels] BUILD_DIR..." >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/upstream/bin"
etlib=
for b in "${builds[@]}"; do
  [ -f "$b/lib/libupstream_cuda_backend.so" ] || { echo "no library in $b" >&2; exit 1; }
  name=$(basename "$b")
  mkdir -p "$stage/upstream/$name"
  cp "$b/lib/libupstream_cuda_backend.so" "$b/BUILD_INFO.txt" "$stage/upstream/$name/"
  rt=$(sed -n 's/^executorch_runtime: \([^ ]*\) .*/\1/p' "$b/BUILD_INFO.txt")/lib
  if [ -z "$etlib" ]; then
    etlib=$rt
    cp "$b/bin/smoke_main" "$stage/upstream/bin/"
  elif [ "$rt" != "$etlib" ]; then
    # Built against another runtime (build_runtime.sh): that runtime and a
    # smoke_main linked with it travel in the build's own folder.
    cp "$b/bin/smoke_main" "$rt/libexecutorch.so" "$stage/upstream/$name/"
  fi
done
cp "$etlib/libexecutorch.so" "$stage/upstream/bin/"
[ $KERNELS -eq 0 ] || cp "$etlib/libexecutorch_kernels_optimized.so" "$etlib/libexecutorch_threadpool.so" "$stage/upstream/bin/"
(cd "$stage/upstream" && find . -type f ! -name SHA256SUMS ! -name BUILD_INFO.txt | sort | xargs sha256sum > SHA256SUMS)
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$stage" -cf - upstream | xz -9e -T1 > "$ARCHIVE"
ls -l "$ARCHIVE"
tar -tvJf "$ARCHIVE"
