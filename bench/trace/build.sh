#!/usr/bin/env bash
# Build bench/trace/cupti_trace.c into $1 (default .dev/libcupti_trace.so) on a machine without a
# CUDA toolkit: CUPTI's and CUDA's headers and libcupti come from PyPI wheels (pip download, about
# 13 MB, into /tmp/et_trace_wheels). The GPU machine runs it with its own libcupti.so.13.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$ROOT/.dev/libcupti_trace.so}
W=/tmp/et_trace_wheels
if [ ! -f "$W/x/nvidia/cu13/include/cupti.h" ] || [ ! -f "$W/x/nvidia/cu13/include/cuda.h" ]; then
  echo "trace/build.sh: downloading nvidia-cuda-cupti and nvidia-cuda-runtime 13.0 (headers, libcupti)"
  python3 -m pip download --quiet --no-deps -d "$W" nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88
  mkdir -p "$W/x"
  for f in "$W"/*.whl; do python3 -m zipfile -e "$f" "$W/x"; done
fi
mkdir -p "$(dirname "$out")"
gcc -O2 -Wall -shared -fPIC -o "$out" "$ROOT/bench/trace/cupti_trace.c" -I"$W/x/nvidia/cu13/include" \
  -L"$W/x/nvidia/cu13/lib" -l:libcupti.so.13
echo "trace/build.sh: $out"
