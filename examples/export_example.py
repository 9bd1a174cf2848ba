#!/usr/bin/env python3
"""Exports the example program that scripts/run_example.sh runs: a small float32
MLP, lowered whole to ExecuTorch's CudaPartitioner, with its inputs and the
outputs of the same module run eagerly, in the manifest format of
runner/README.md ("The manifest").

    python3 examples/export_example.py OUTDIR       # writes OUTDIR/mlp/
    et_cuda_run --manifest OUTDIR/mlp/manifest.json  # forward case0/case1: PASS

Needs a CUDA machine with PyTorch 2.11 and ExecuTorch (1.5.1, as the runtime
this project builds against; 1.2's exporter works too): AOTInductor compiles
the model's kernels for the GPU it runs on (examples/export.sh does it all on
the GPU machine). The committed example in examples/mlp/ was made this way.

    python3 examples/export_example.py --describe FILE...

prints, without torch, which GPU code the AOTInductor .so inside a .pte/.ptd (or
a bare .so) carries: SASS for which architecture, PTX for which target, and
hence which GPUs can run it. The export records the same in the manifest
("kernels").

The model: Linear(32, 64) -> GELU -> Linear(64, 10), weights from
torch.manual_seed(0) (2,762 float32 parameters, 11 KB), input float32 [4, 32];
two cases (two seeded inputs). Expected outputs: eager PyTorch on the CPU in
float32 (with a GPU, eager on the GPU is compared too and must agree).
"""
import argparse
import json
import os
import re
import struct
import sys

NAME = "mlp"
IN_FEATURES, HIDDEN, OUT_FEATURES, BATCH = 32, 64, 10, 4
TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}  # the runner's float32 default, written out
SEED = 0

# ----------------------------------------------------------------------------- the GPU code in a program
# No torch needed: this part reads bytes only.

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
EM_X86_64, EM_CUDA = 62, 190


def embedded_shared_objects(data):
    """The x86-64 ELF files (AOTInductor's .so) stored inside a .pte/.ptd, or the file itself."""
    sos = []
    for m in re.finditer(re.escape(b"\x7fELF\x02\x01\x01"), data):
        o = m.start()
        if len(data) < o + 64 or struct.unpack_from("<H", data, o + 18)[0] != EM_X86_64:
            continue
        shoff, = struct.unpack_from("<Q", data, o + 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, o + 0x3A)
        end = o + shoff + shentsize * shnum  # the section headers end the file (as ld writes it)
        if shoff and end <= len(data):
            sos.append(data[o:end])
    return sos


def kernel_images(so):
    """The CUDA fatbins inside one .so: per image, its SASS (cubin) and PTX entries."""
    images = []
    for m in re.finditer(re.escape(FATBIN_MAGIC), so):
        o = m.start()
        if len(so) < o + 16:
            continue
        _magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", so, o)
        p, end = o + header_size, o + header_size + fat_size
        if header_size != 16 or end > len(so):
            continue
        entries = []
        while p + 32 <= end:
            kind, _, entry_header, size = struct.unpack_from("<HHIQ", so, p)
            arch, = struct.unpack_from("<I", so, p + 28)
            if kind not in (1, 2) or entry_header < 32 or p + entry_header + size > end:
                break
            payload = so[p + entry_header:p + entry_header + size]
            # A cubin built from PTX keeps that PTX's ".target" in its debug text when
            # Triton asks for line info; compressed PTX does not show it.
            target = re.search(rb"\.target\s+(sm_\w+)", payload)
            entries.append({
                "kind": "sass" if kind == 2 else "ptx",
                "arch": f"sm_{arch}",
                "target": target.group(1).decode() if target else None,
                "compressed": payload[:4] == b"\x28\xb5\x2f\xfd",
            })
            p += entry_header + size
        if entries:
            images.append(entries)
    return images


def describe(data):
    """A summary of the GPU code in a program's bytes (dict, JSON-ready)."""
    sass, ptx, n = set(), set(), 0
    for so in embedded_shared_objects(data):
        for image in kernel_images(so):
            n += 1
            targets = {e["target"] for e in image if e["target"]}
            for e in image:
                # a PTX entry without a readable target has the target of its image's SASS
                name = e["target"] or (sorted(targets)[0] if len(targets) == 1 else e["arch"])
                (sass if e["kind"] == "sass" else ptx).add(name)
    if n == 0:
        runs_on = "no CUDA kernel images found"
    else:
        archs = sorted(sass | ptx)
        generic_ptx = sorted(t for t in ptx if not t.endswith(("a", "f")))
        cc = ", ".join(sorted({f"{int(t[3:].rstrip('af')) // 10}.{int(t[3:].rstrip('af')) % 10}" for t in archs}))
        if generic_ptx:
            runs_on = f"compute capability {cc} (SASS), newer GPUs through the driver's JIT of the PTX"
        else:
            why = (f"its PTX ({', '.join(sorted(ptx))}) is architecture-specific, which the driver JIT-compiles "
                   "for no other GPU" if ptx else "no PTX that the driver could JIT-compile for other GPUs")
            runs_on = f"compute capability {cc} only: {why}"
    return {"images": n, "sass": sorted(sass), "ptx": sorted(ptx), "runs_on": runs_on}


# ----------------------------------------------------------------------------- the export


def build_model():
    import torch

    class ExampleMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(IN_FEATURES, HIDDEN)
            self.fc2 = torch.nn.Linear(HIDDEN, OUT_FEATURES)

        def forward(self, x):
            return self.fc2(torch.nn.functional.gelu(self.fc1(x)))

    torch.manual_seed(SEED)
    return ExampleMLP().eval()


def write_f32(t, path):
    import torch

    assert t.dtype == torch.float32
    values = t.detach().contiguous().cpu().flatten().tolist()
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values))


def tensor_entry(t, file):
    return {"dtype": "float32", "sizes": list(t.shape), "file": file}


def versions():
    import importlib.metadata as md

    out = {}
    for p in ("torch", "executorch"):
        try:
            out[p] = md.version(p)
        except Exception:
            out[p] = None
    return out


def export(outdir):
    import torch
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    if not torch.cuda.is_available():
        sys.exit("export_example.py: needs a CUDA device (AOTInductor compiles the kernels for it)")
    # float32 matmuls in full precision, in eager and in the generated kernels
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    model = build_model()
    gen = torch.Generator().manual_seed(SEED + 1)
    cases = [torch.randn(BATCH, IN_FEATURES, generator=gen) for _ in range(2)]
    with torch.no_grad():
        expected = [model(x) for x in cases]
        gpu = build_model().cuda()
        gpu_vs_cpu = max(float((gpu(x.cuda()).cpu() - e).abs().max()) for x, e in zip(cases, expected))
    if gpu_vs_cpu > TOLERANCE["atol"] / 10:
        sys.exit(f"export_example.py: eager on the GPU differs from the CPU by {gpu_vs_cpu:.3g}")

    # The program: one method, "forward", lowered whole to the CUDA backend.
    ep = torch.export.export(model, (cases[0],), strict=True)
    spec = CudaBackend.generate_method_name_compile_spec("forward")
    edge = to_edge_transform_and_lower(
        ep, partitioner=[CudaPartitioner([spec])],
        # as every export of this project does (tests/models/suite_lib.py, the fixtures' exporter)
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    program = edge.to_executorch()

    d = os.path.join(outdir, NAME)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):  # a re-export replaces the folder's files
        os.remove(os.path.join(d, f))
    with open(os.path.join(d, "model.pte"), "wb") as f:
        f.write(program.buffer)
    program.write_tensor_data_to_file(d)  # aoti_cuda_blob.ptd: the weights
    data = sorted(f for f in os.listdir(d) if f.endswith(".ptd"))

    method_cases = []
    for i, (x, y) in enumerate(zip(cases, expected)):
        fin, fout = f"forward.case{i}.in0.bin", f"forward.case{i}.out0.bin"
        write_f32(x, os.path.join(d, fin))
        write_f32(y, os.path.join(d, fout))
        method_cases.append({"inputs": [tensor_entry(x, fin)], "outputs": [tensor_entry(y, fout)]})

    blob = b"".join(open(os.path.join(d, f), "rb").read() for f in ["model.pte"] + data)
    props = torch.cuda.get_device_properties(0)
    manifest = {
        "model": "model.pte",
        "data": data,
        "methods": {"forward": method_cases},
        "tolerance": TOLERANCE,
        "reference": "eager-cpu-fp32",
        "builder": "examples/export_example.py",
        "model_description": f"Linear({IN_FEATURES},{HIDDEN}) -> GELU -> Linear({HIDDEN},{OUT_FEATURES}), "
                             f"float32, torch.manual_seed({SEED})",
        "versions": versions(),
        "exported_on": f"{props.name} (compute capability {props.major}.{props.minor})",
        "gpu_eager_vs_cpu_max_abs": gpu_vs_cpu,
        "kernels": describe(blob),
    }
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{d}: {len(os.listdir(d))} files, {total} bytes")
    print(json.dumps({k: manifest[k] for k in ("versions", "exported_on", "kernels")}, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", help="the example goes to OUTDIR/mlp/")
    ap.add_argument("--describe", nargs="+", metavar="FILE", help="print the GPU code inside these files")
    args = ap.parse_args()
    if args.describe:
        for path in args.describe:
            with open(path, "rb") as f:
                print(f"{path}: {json.dumps(describe(f.read()))}")
        return
    if not args.outdir:
        ap.error("OUTDIR is required (or --describe FILE...)")
    export(args.outdir)


if __name__ == "__main__":
    main()
