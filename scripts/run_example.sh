#!/usr/bin/env bash
# Build (Release) and run the example program of the repository, examples/mlp
# (a small float32 MLP exported with ExecuTorch's CudaPartitioner by
# examples/export_example.py), through et_cuda_run, which checks its outputs
# against eager PyTorch's. Extra arguments go to et_cuda_run (e.g. --bench 100
# --warmup 10 --stats). Without a GPU it ends with one line saying so (exit
# status 77).
#   ET_CUDA_MANIFEST=<manifest.json>  run this manifest instead (as does --manifest FILE among the arguments)
#   ET_CUDA_FIXTURES=<dir>            run <dir>/mlp_f32/manifest.json (e.g. tests/fixtures)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# The build runs in $ROOT, the runner here: relative paths given to it are the caller's.
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
EXAMPLE=$ROOT/examples/mlp/manifest.json

args=("$@")
manifest=()
given=0
for a in "$@"; do
  [ "$a" = --manifest ] && given=1
done
if [ "$given" = 0 ]; then
  if [ -n "${ET_CUDA_MANIFEST:-}" ]; then
    m=$ET_CUDA_MANIFEST
  elif [ -n "${ET_CUDA_FIXTURES:-}" ]; then
    m=$ET_CUDA_FIXTURES/mlp_f32/manifest.json
  else
    m=$EXAMPLE
  fi
  if [ ! -f "$m" ]; then
    if [ "$m" = "$EXAMPLE" ]; then
      die "the example program is missing: examples/mlp/manifest.json (with model.pte, aoti_cuda_blob.ptd and
  its case files) is not in this checkout. Export it on a CUDA machine with PyTorch 2.11:
    bash examples/export.sh OUTDIR    # then copy OUTDIR/mlp/ to examples/mlp/
  or run another program: ET_CUDA_MANIFEST=<manifest.json>, or ET_CUDA_FIXTURES=<dir with mlp_f32/>"
    fi
    die "no manifest at $m"
  fi
  manifest=(--manifest "$m")
fi

check_prereqs
(cd "$ROOT" && cmake_build --target et_cuda_run executorch_cuda_backend)
cmd=("$BUILD/et_cuda_run" "${manifest[@]}" "${args[@]}")
step "${cmd[*]#"$ROOT/"}"
rc=0
"${cmd[@]}" || rc=$?
step "done in $(elapsed) (et_cuda_run's exit status: $rc)"
exit "$rc"
