"""Export the benchmark programs (ExecuTorch 1.2, CudaPartitioner) with their
reference IO, in the manifest format of tests/fixtures (runner/README.md, "The manifest").

  python3 bench/export.py OUTDIR [names...]      (default: all of models.ALL_MODELS)
  python3 bench/export.py OUTDIR --et15 et15dev_mlp_f32 ...   (ExecuTorch 1.5.1, device IO)

Needs a CUDA GPU, torch 2.11 and the executorch 1.2 wheel (bench/run.sh
installs the carried wheels into /tmp/site). Every program is lowered with graph
inputs left out of memory planning
(ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))),
so a runner may pass device pointers as inputs.

--et15 (with ExecuTorch 1.5.1 on the path instead of 1.2): the names are
et15dev_<model>, the same modules (same weights and inputs) lowered the way
today's ExecuTorch writes programs whose method inputs and outputs stay on the
device: ExecutorchBackendConfig(propagate_device_config=PropagateDeviceConfig(
skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True),
enable_non_cpu_memory_planning=True, memory_planning_pass=MemoryPlanningPass(
alloc_graph_input=False, alloc_graph_output=False)). Upstream's backend at main
and v1.4.x only runs programs whose tensors are typed CUDA like these (it refuses
ExecuTorch 1.2's), so these are the programs its device-IO and CUDA-graph rows run.

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


ET15_PREFIX = "et15dev_"


def backend_config(et15):
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    if not et15:
        return ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))
    from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig

    return ExecutorchBackendConfig(
        propagate_device_config=PropagateDeviceConfig(skip_h2d_for_method_inputs=True,
                                                      skip_d2h_for_method_outputs=True),
        enable_non_cpu_memory_planning=True,
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False),
    )


def lower(methods, delegate=True, et15=False):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

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
    return edge.to_executorch(backend_config(et15))


def export_one(name, outdir, delegate=True):
    t0 = time.time()
    et15 = name.startswith(ET15_PREFIX)
    base = name[len(ET15_PREFIX):] if et15 else name
    methods = models.build(base)
    final = os.path.join(outdir, name)
    tmp = os.path.join(outdir, f".{name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    et = lower(methods, delegate, et15)
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
        "seed": models.seed_of(base),
        "builder": f"bench/models.py build({base!r})",
        "exporter": f"executorch {_et_version()}" + (" (device IO: PropagateDeviceConfig)" if et15 else ""),
        "alloc_graph_input": False,
        "delegated": delegate,
        "inputs_planned": planned,
    }
    how_all = set()
    for method, (module, args) in methods.items():
        outs, how = reference_outputs(base, module, args)
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


def _et_version():
    try:
        import importlib.metadata

        return importlib.metadata.version("executorch")
    except Exception:  # noqa: BLE001 - informational
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("names", nargs="*", help=f"models (default: {' '.join(models.ALL_MODELS)})")
    ap.add_argument("--force", action="store_true", help="re-export names that are already there")
    ap.add_argument("--no-delegate", action="store_true",
                    help="test only: lower without CudaPartitioner (no GPU needed; not a CUDA program)")
    ap.add_argument("--et15", action="store_true",
                    help=f"names are {ET15_PREFIX}<model>: ExecuTorch 1.5.1 device-IO exports (needs executorch 1.5.1)")
    a = ap.parse_intermixed_args()
    names = a.names or list(models.ALL_MODELS)
    if a.et15:
        names = a.names or [ET15_PREFIX + m for m in models.ALL_MODELS if m != "encdec"]
        unknown = [n for n in names if not n.startswith(ET15_PREFIX) or n[len(ET15_PREFIX):] not in models.ALL_MODELS]
    else:
        unknown = [n for n in names if n not in models.ALL_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {list(models.ALL_MODELS)}"
                 + (f", each as {ET15_PREFIX}<model> with --et15" if a.et15 else ""))
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
