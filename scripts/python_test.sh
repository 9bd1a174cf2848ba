#!/usr/bin/env bash
# The Python package's CPU tests (python/tests; README.md, "Python"): the wheel
# builds (pure, and with the built libraries) and installs into a temp folder,
# `import executorch_cuda` needs no torch, enable() without a GPU is one
# exception or a registered-but-unavailable backend, bad set-ups are one named
# exception each, the Python sampler matches the runner's; the export companion's
# table tests. Tests needing torch are skipped where it is not installed (CI:
# PyTorch is not installed there; its wheels are GBs), each with the reason.
# Needs the CMake build (scripts/test.sh runs this after it); numpy is installed
# into .deps/pynp when the Python has none.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
find_executorch
site=$(cd "$EXECUTORCH_CMAKE_DIR/../../.." && pwd)
extra=""
if ! python3 -c "import numpy" >/dev/null 2>&1; then
  if [ ! -d "$ROOT/.deps/pynp/numpy" ]; then
    step "numpy for the sampler tests: pip install numpy into .deps/pynp"
    python3 -m pip install --quiet --target "$ROOT/.deps/pynp" numpy || die "could not install numpy from PyPI"
  fi
  extra=$ROOT/.deps/pynp
fi
step "Python package tests (python/tests)"
PYTHONPATH="$extra" EXECUTORCH_CUDA_LIB_DIR="$BUILD" ET_CUDA_PY_SITE="$site" \
  python3 -m unittest discover -s python/tests -v
