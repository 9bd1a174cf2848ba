#!/usr/bin/env bash
# Exports the example program (examples/export_example.py) into OUTDIR/mlp on a
# CUDA machine with PyTorch 2.11, then describes its GPU code:
#
#   bash examples/export.sh OUTDIR
#
# ExecuTorch's exporter: the one python3 imports, else the pruned ExecuTorch
# 1.5.1 site .whl/models/sites/et15.tar.xz (tests/models/wheels.sh makes it;
# carry it to a machine without network), unpacked into /tmp. Writes only the 7
# files of OUTDIR/mlp; copy them into examples/mlp/ and commit them.
#   ET_EXPORT_SITE_TAR=<tar.xz>  another pruned site (e.g. .whl/models/sites/et12.tar.xz)
#   ET_CUDA_RUN=<et_cuda_run>    also run the export through this runner (default
#                                .dev/gpu/et_cuda_run from scripts/gpu_bundle.sh, when there)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR=${1:?usage: bash examples/export.sh OUTDIR}
PY=${PYTHON:-python3}
TAR=${ET_EXPORT_SITE_TAR:-$ROOT/.whl/models/sites/et15.tar.xz}

if [ -n "${ET_EXPORT_SITE_TAR:-}" ] || ! $PY -c 'import executorch.exir' 2>/dev/null; then
  [ -f "$TAR" ] || { echo "error: python3 has no executorch and there is no $TAR:" \
    "pip install executorch==1.5.1, or carry the site made by tests/models/wheels.sh" >&2; exit 1; }
  site=/tmp/et-export-site.$(basename "$TAR" .tar.xz)
  if [ ! -d "$site/executorch" ]; then
    rm -rf "$site" && mkdir -p "$site" && tar -xJf "$TAR" -C "$site"
  fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi
# A fresh Inductor cache: the kernels are compiled here, not taken from an earlier run.
TORCHINDUCTOR_CACHE_DIR=$(mktemp -d /tmp/et-export-inductor.XXXXXX)
export TORCHINDUCTOR_CACHE_DIR PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
$PY -c 'import torch, importlib.metadata as m; print("torch", torch.__version__, "executorch", m.version("executorch"),
  "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
$PY "$ROOT/examples/export_example.py" "$OUTDIR"
ls -l "$OUTDIR/mlp"

# The same GPU code as cuobjdump lists it (the CUDA toolkit's, when installed).
if command -v cuobjdump >/dev/null; then
  so=$(mktemp /tmp/et-export-so.XXXXXX)
  $PY - "$ROOT/examples" "$so" "$OUTDIR"/mlp/*.pt[ed] <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from export_example import embedded_shared_objects
sos = embedded_shared_objects(b"".join(open(f, "rb").read() for f in sys.argv[3:]))
open(sys.argv[2], "wb").write(sos[0] if sos else b"")
PY
  [ -s "$so" ] && { cuobjdump --list-elf --list-ptx "$so" || true; }
  rm -f "$so"
fi

RUN=${ET_CUDA_RUN:-$ROOT/.dev/gpu/et_cuda_run}
if [ -x "$RUN" ]; then
  echo "==> $RUN --manifest $OUTDIR/mlp/manifest.json"
  "$RUN" --manifest "$OUTDIR/mlp/manifest.json"
fi
