#!/usr/bin/env bash
# Build (Release) and run the mlp_f32 fixture through et_cuda_run; extra
# arguments go to et_cuda_run (e.g. --bench 100 --warmup 10 --stats). Without a
# GPU it ends with one line saying so (exit status 77).
#   ET_CUDA_FIXTURES=<dir>   fixture programs (default ../shared/fixtures)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
check_prereqs
FIXTURES=${ET_CUDA_FIXTURES:-$ROOT/../shared/fixtures}
[ -f "$FIXTURES/mlp_f32/manifest.json" ] || die "no fixtures at $FIXTURES (set ET_CUDA_FIXTURES)"
cmake_build --target et_cuda_run executorch_cuda_backend
step "et_cuda_run --manifest $FIXTURES/mlp_f32/manifest.json $*"
exec "$BUILD/et_cuda_run" --manifest "$FIXTURES/mlp_f32/manifest.json" "$@"
