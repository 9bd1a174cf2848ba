#!/usr/bin/env bash
# Downloads the Python wheels the model suite needs on the GPU machine (CPython 3.12, manylinux
# x86_64) and packs them into two pruned site trees that gpu_suite.sh unpacks into /tmp:
#   .whl/models/wheels/{common,et12,et15}/*.whl     what pip downloaded
#   .whl/models/sites/et12.tar.xz   executorch 1.2.0 + torchao 0.17.0 + common (exporter of export_suite.py, sdpa_check.py)
#   .whl/models/sites/et15.tar.xz   executorch 1.5.1 + torchao 0.18.0 + common (exporter of export_et15.py)
#   .whl/models/sites/et14.tar.xz   executorch 1.4.1 + torchao 0.18.0 + common (exporter of export_et14.py;
#                                   the wheel asks for torch >= 2.13.0a0, the GPU machine has 2.11: see README)
# common: flatbuffers ruamel.yaml ruamel.yaml.clib expecttest kgb parameterized tabulate.
# The site trees are what `pip install --no-deps --target` would make, less what exporting never
# imports (other backends, runtime libraries and pybindings, examples, tests): see prune() below.
# Carry .whl/models/sites to the GPU machine (the wheels/ folder is not needed there).
#   PYVER=311 DEST=/tmp/whl311 bash tests/models/wheels.sh   # the same for CPython 3.11 (testing here)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYVER=${PYVER:-312}
DEST=${DEST:-$ROOT/.whl/models}
W=$DEST/wheels
ENVS=${ENVS:-et12 et15 et14} # which sites to make (e.g. ENVS=et14 for the 1.4.1 one alone)
mkdir -p "$W/common" "$W/et12" "$W/et15" "$W/et14" "$DEST/sites"
dl() { # dir pkg==ver...
  local d=$1
  shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$d" "$@"
}
dl "$W/common" flatbuffers==25.12.19 ruamel.yaml==0.19.1 ruamel.yaml.clib==0.2.15 expecttest==0.3.0 kgb==7.3 \
  parameterized==0.9.0 tabulate==0.10.0
[[ " $ENVS " == *" et12 "* ]] && dl "$W/et12" executorch==1.2.0 torchao==0.17.0
[[ " $ENVS " == *" et15 "* ]] && dl "$W/et15" executorch==1.5.1 torchao==0.18.0
[[ " $ENVS " == *" et14 "* ]] && dl "$W/et14" executorch==1.4.1 torchao==0.18.0

prune() { # site dir
  local s=$1 e=$1/executorch
  # other backends (keep aoti, cuda and the package files); exir imports none of them for a CUDA export
  find "$e/backends" -mindepth 1 -maxdepth 1 -type d ! -name aoti ! -name cuda ! -name transforms \
    ! -name __pycache__ -exec rm -rf {} +
  rm -rf "$e/lib" "$e/include" "$e/share" "$e/examples" "$e/extension/pybindings" "$e/extension/training" \
    "$e/extension/llm/runner" "$e/devtools/bundled_program/schema/test" "$e/backends/cuda/benchmarks"
  find "$e" -name "*.so" -path "*/extension/*" -delete
  find "$e" -type d \( -name tests -o -name test \) -prune -exec rm -rf {} +
  find "$s" -name __pycache__ -prune -exec rm -rf {} +
}

for env in $ENVS; do
  tmp=$(mktemp -d)
  for whl in "$W/common"/*.whl "$W/$env"/*.whl; do
    python3 - "$whl" "$tmp" <<'PY'
import sys, zipfile, os
whl, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        name = info.filename
        parts = name.split("/")
        if parts[0].endswith(".data"):          # purelib/platlib go to the root, the rest (scripts) nowhere
            if len(parts) > 2 and parts[1] in ("purelib", "platlib"):
                name = "/".join(parts[2:])
            else:
                continue
        if name.endswith("/"):
            continue
        out = os.path.join(dst, name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as src, open(out, "wb") as f:
            f.write(src.read())
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(out, mode)
PY
  done
  prune "$tmp"
  chmod +x "$tmp/executorch/data/bin/flatc"
  tar -C "$tmp" -cf - . | xz -T0 -9 >"$DEST/sites/$env.tar.xz"
  echo "$env: $(du -sh "$tmp" | cut -f1) unpacked -> $(du -h "$DEST/sites/$env.tar.xz" | cut -f1) ($DEST/sites/$env.tar.xz)"
  rm -rf "$tmp"
done
echo "wheels: $(du -sh "$W" | cut -f1) in $W; to carry: $(du -ch "$DEST"/sites/*.tar.xz | tail -1 | cut -f1) in $DEST/sites"
