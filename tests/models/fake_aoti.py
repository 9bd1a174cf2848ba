"""Test aid for machines without a GPU: lets ExecuTorch's CudaBackend.preprocess run
end to end with AOTInductor's compile replaced by a stub, so that everything
around it (partitioning, mutable-buffer tagging, the Triton SDPA replacement
pass, named-data keys, the processed payload, memory planning, the .pte/.ptd
writers, our manifest and imports.txt) can be exercised on the CPU.

The stub "compiles" to a copy of a small real ELF shared library (so imports.txt
has something to parse) and a weights blob (ExecuTorch 1.2: a binary blob;
1.5.1: torch's structured Weights). The resulting programs are NOT runnable.
"""
import glob
import os
import sys
import sysconfig
import tempfile

import torch

CALLS = []


def _small_elf():
    cands = glob.glob(os.path.join(sysconfig.get_config_var("DESTSHARED") or "", "*.so"))
    cands += glob.glob(os.path.join(os.path.dirname(os.__file__), "lib-dynload", "*.so"))
    cands = [c for c in cands if os.path.getsize(c) > 10000]
    if not cands:
        raise RuntimeError("no ELF .so found for the stub")
    return min(cands, key=os.path.getsize)


def install():
    import torch.export.passes as tep

    def no_move(ep, location, *a, **k):
        return ep

    tep.move_to_device_pass = no_move
    try:
        import executorch.backends.aoti.aoti_backend as ab

        if hasattr(ab, "move_to_device_pass"):
            ab.move_to_device_pass = no_move
    except Exception:
        pass

    def fake_aot_compile(gm, args, options=None):
        CALLS.append({"options": dict(options or {}), "nodes": [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]})
        d = tempfile.mkdtemp(prefix="fake_aoti_")
        so = os.path.join(d, "model.wrapper.so")
        with open(_small_elf(), "rb") as src, open(so, "wb") as dst:
            dst.write(src.read())
        state = {}
        for n, t in list(gm.named_parameters()) + list(gm.named_buffers()):
            state[n] = t.detach()
        fmt = (options or {}).get("aot_inductor.package_constants_on_disk_format")
        if fmt == "pickle_weights":
            from torch.export.pt2_archive._package_weights import TensorProperties, Weights

            return [so, Weights({n: (t, TensorProperties(t)) for n, t in state.items()})]
        blob = os.path.join(d, "model.wrapper_weights.blob")
        with open(blob, "wb") as f:
            for t in state.values():
                f.write(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return [so, blob]

    torch._inductor.aot_compile = fake_aot_compile
    sys.modules[__name__].installed = True
