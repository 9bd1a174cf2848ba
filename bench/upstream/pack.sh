#!/usr/bin/env bash
# Packs builds made by build.sh into one small archive for the GPU machine:
#   upstream/et/        the pip executorch==1.5.1 runtime the builds linked:
#                       include/, share/cmake/, version.py, lib/libexecutorch.so,
#                       lib/libexecutorch_kernels_optimized.so (+ the
#                       libexecutorch_threadpool.so it needs: it holds the
#                       et_copy::_h2d_copy/_d2h_copy kernels that programs
#                       exported with device memory planning call)
#   upstream/bin/smoke_main              (finds ../et/lib)
#   upstream/<build>/libupstream_cuda_backend.so, BUILD_INFO.txt, src/
#                       (src/ = the upstream sources it was built from, so that
#                       build.sh --src can rebuild it where there is no mirror)
#   A build against another runtime than the first build's (build_runtime.sh)
#   also gets that runtime: <build>/libexecutorch.so, <build>/smoke_main and
#   <build>/et/ (include/ + lib/) for a rebuild.
# Usage: bench/upstream/pack.sh [-o ARCHIVE] BUILD_DIR...
#   default ARCHIVE: .dev/upstream/upstream_cuda_backends.tar.xz
# Unpack on the GPU machine: tar -xJf ARCHIVE -C /tmp   (gives /tmp/upstream)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ARCHIVE=$ROOT/.dev/upstream/upstream_cuda_backends.tar.xz
builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) ARCHIVE=$2; shift 2 ;;
    *) builds+=("$1"); shift ;;
  esac
done
[ ${#builds[@]} -gt 0 ] || { echo "usage: $0 [-o ARCHIVE] BUILD_DIR..." >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
U=$stage/upstream
mkdir -p "$U/bin"
et=
copy_runtime() { # $1 = runtime package folder, $2 = destination
  mkdir -p "$2/lib"
  cp -r "$1/include" "$2/"
  [ -d "$1/share/cmake" ] && mkdir -p "$2/share" && cp -r "$1/share/cmake" "$2/share/"
  [ -f "$1/version.py" ] && cp "$1/version.py" "$2/"
  cp "$1/lib/libexecutorch.so" "$2/lib/"
}
for b in "${builds[@]}"; do
  [ -f "$b/lib/libupstream_cuda_backend.so" ] || { echo "no library in $b" >&2; exit 1; }
  name=$(basename "$b")
  mkdir -p "$U/$name"
  cp "$b/lib/libupstream_cuda_backend.so" "$b/BUILD_INFO.txt" "$U/$name/"
  cp -r "$b/src" "$U/$name/src"
  rt=$(sed -n 's/^executorch_runtime: \([^ ]*\) .*/\1/p' "$b/BUILD_INFO.txt")
  if [ -z "$et" ]; then
    et=$rt
    copy_runtime "$rt" "$U/et"
    for f in libexecutorch_kernels_optimized.so libexecutorch_threadpool.so; do
      [ -f "$rt/lib/$f" ] && cp "$rt/lib/$f" "$U/et/lib/"
    done
    cp "$b/bin/smoke_main" "$U/bin/"
  elif [ "$rt" != "$et" ]; then
    copy_runtime "$rt" "$U/$name/et"
    cp "$b/bin/smoke_main" "$rt/lib/libexecutorch.so" "$U/$name/"
  fi
done
(cd "$U" && find . -type f \( -name '*.so' -o -name smoke_main \) | sort | xargs sha256sum > SHA256SUMS)
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$stage" -cf - upstream | xz -9e -T1 > "$ARCHIVE"
ls -l "$ARCHIVE"
cat "$U/SHA256SUMS"
