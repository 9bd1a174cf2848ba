"""Export the benchmark programs (ExecuTorch 1.2, CudaPartitioner) with their
reference IO, in the fixture format of ../shared/fixtures/README.md.

  python3 bench/export.py OUTDIR [names...]      (default: all of models.ALL_MODELS)

Needs a CUDA GPU, torch 2.11 and the executorch 1.2 wheel (bench/run.sh
installs the carried wheels into /tmp/site). Every program is lowered with graph
inputs left out of memory planning
(ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))),
so a runner may pass device pointers as inputs.

OUTDIR/<name>/ gets model.pte, the .ptd file(s), one .bin per input and output
(contiguous, little-endian; bfloat16 as raw 16-bit patterns) and manifest.json:
{"model", "data", "methods": {method: [{"inputs", "outputs"}]}} plus
"seed", "builder", "reference" ("eager-cpu", "eager-cuda", or
"skipped: <why>" with zero-filled outputs) and "alloc_graph_input": false.
A folder appears only when complete (written as OUTDIR/.<name>.tmp, then
renamed); names whose OUTDIR/<name>/manifest.json exists are skipped unless
--force. Prints one "export <name>: ok|skipped|FAILED ..." line per name and a
JSON summary; the exit status is 1 when any failed.
"""
import argparse
import json
import os
import shutil
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
}
# Reference outputs of these are computed with eager PyTorch on the GPU: the
# CPU would need minutes for 8 bf16 GEMMs of 4096^3.
CUDA_REFERENCE = {"heavy_bf16"}


def write_raw(t, path):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    t.numpy().tofile(path)


def tensor_entry(t, file):
    return {"dtype": DTYPE_NAMES[t.dtype], "sizes": list(t.shape), "file": file}


def reference_outputs(name, module, args):
    """(outputs, how): eager outputs on the CPU, or on the GPU for CUDA_REFERENCE."""
    with torch.no_grad():
        if name in CUDA_REFERENCE:
            try:
                dev = torch.device("cuda")
                m = module.to(dev)
                try:
                    outs = m(*[a.to(dev) for a in args])
                    outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
                    torch.cuda.synchronize()
                    return tuple(o.cpu() for o in outs), "eager-cuda"
                finally:
                    module.to("cpu")
                    torch.cuda.empty_cache()
            except Exception as e:  # no GPU memory, no GPU: still export, mark it
                outs = module(*[a[:1] for a in args])  # shapes only (cheap)
                outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
                full = []
                for o in outs:
                    shape = list(o.shape)
                    shape[0] = args[0].shape[0]
                    full.append(torch.zeros(shape, dtype=o.dtype))
                return tuple(full), f"skipped: {type(e).__name__}: {str(e)[:200]}"
        outs = module(*args)
        outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
        return outs, "eager-cpu"


def inputs_planned(et_program):
    """{method: [bool per graph input]}: whether each input has a planned buffer."""
    planned = {}
    for plan in et_program.execution_plan:
        flags = []
        for idx in plan.inputs:
            val = plan.values[idx].val
            flags.append(getattr(val, "allocation_info", None) is not None)
        planned[plan.name] = flags
    return planned


def lower(methods, delegate=True):
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    exported, partitioners = {}, {}
    for method, (module, args) in methods.items():
        exported[method] = torch.export.export(module, args, strict=True)
        partitioners[method] = []
        if delegate:
            from executorch.backends.cuda.cuda_backend import CudaBackend
            from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

            partitioners[method] = [CudaPartitioner([CudaBackend.generate_method_name_compile_spec(method)])]
    cfg = EdgeCompileConfig(_check_ir_validity=False)
    if list(exported) == ["forward"]:
        edge = to_edge_transform_and_lower(exported["forward"], partitioner=partitioners["forward"], compile_config=cfg)
    else:
        edge = to_edge_transform_and_lower(exported, partitioner=partitioners, compile_config=cfg)
    backend_cfg = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))
    return edge.to_executorch(backend_cfg)


def export_one(name, outdir, delegate=True):
    t0 = time.time()
    methods = models.build(name)
    final = os.path.join(outdir, name)
    tmp = os.path.join(outdir, f".{name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    et = lower(methods, delegate)
    t_lower = time.time() - t0
    with open(os.path.join(tmp, "model.pte"), "wb") as f:
        f.write(et.buffer)
    et.write_tensor_data_to_file(tmp)
    planned = {}
    try:
        planned = inputs_planned(et.executorch_program)
    except Exception as e:  # the check is informative; the runner checks again
        print(f"export {name}: warning: cannot read input planning: {e!r}", flush=True)
    if any(any(flags) for flags in planned.values()):
        raise RuntimeError(f"graph inputs are still memory-planned: {planned}")

    manifest = {
        "model": "model.pte",
        "data": sorted(f for f in os.listdir(tmp) if f.endswith(".ptd")),
        "methods": {},
        "seed": models.seed_of(name),
        "builder": f"bench/models.py build({name!r})",
        "alloc_graph_input": False,
        "delegated": delegate,
        "inputs_planned": planned,
    }
    how_all = set()
    for method, (module, args) in methods.items():
        outs, how = reference_outputs(name, module, args)
        how_all.add(how)
        ins = []
        for i, t in enumerate(args):
            f = f"{method}.case0.in{i}.bin"
            write_raw(t, os.path.join(tmp, f))
            ins.append(tensor_entry(t, f))
        outs_entries = []
        for i, t in enumerate(outs):
            f = f"{method}.case0.out{i}.bin"
            write_raw(t, os.path.join(tmp, f))
            outs_entries.append(tensor_entry(t, f))
        manifest["methods"][method] = [{"inputs": ins, "outputs": outs_entries}]
    manifest["reference"] = " / ".join(sorted(how_all))
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final))
    return f"ok {time.time() - t0:.1f}s (lowering {t_lower:.1f}s, {size / 2**20:.1f} MiB, reference {manifest['reference']})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("names", nargs="*", help=f"models (default: {' '.join(models.ALL_MODELS)})")
    ap.add_argument("--force", action="store_true", help="re-export names that are already there")
    ap.add_argument("--no-delegate", action="store_true",
                    help="test only: lower without CudaPartitioner (no GPU needed; not a CUDA program)")
    a = ap.parse_args()
    names = a.names or list(models.ALL_MODELS)
    unknown = [n for n in names if n not in models.ALL_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {list(models.ALL_MODELS)}")
    os.makedirs(a.outdir, exist_ok=True)
    report = {}
    for name in names:
        if not a.force and os.path.exists(os.path.join(a.outdir, name, "manifest.json")):
            report[name] = "skipped (already exported)"
        else:
            try:
                report[name] = export_one(name, a.outdir, delegate=not a.no_delegate)
            except Exception as e:
                traceback.print_exc()
                report[name] = f"FAILED {type(e).__name__}: {str(e)[:400]}"
        print(f"export {name}: {report[name]}", flush=True)
    print(json.dumps(report, indent=1))
    return 1 if any(v.startswith("FAILED") for v in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
