"""Export companion of executorch-cuda (libexecutorch_cuda.so): routes the
linears and attention of a program lowered to ExecuTorch's CudaBackend to the
library's own kernels (``et_linear``: every bf16/fp16 linear, with the decoder
layer's RMSNorm, gated act and residual fused in, GEMV or GEMM chosen on M when it
runs; ``et_attention`` over a static KV cache once its mask is proven).

One step, on the exported program, before ``to_edge_transform_and_lower``::

    import executorch_cuda
    ep = torch.export.export(model, args, dynamic_shapes=...)
    ep, report = executorch_cuda.prepare(ep, positions="cache_position")
    et = to_edge_transform_and_lower(ep, partitioner=[CudaPartitioner(specs)]).to_executorch()

The resulting ``.so`` imports ``aoti_torch_cuda_et_*``, which only
libexecutorch_cuda.so (this project, >= the version that added them)
provides; loading it elsewhere fails with the missing symbol named.
Pure Python; needs PyTorch (2.11) and, for the lowering, ExecuTorch (>= 1.2).
"""

# shims has no torch import at module level, so the table can be checked without torch;
# everything else imports torch (and registers the ops) on first use.
import importlib.util as _util

from . import shims
from .shims import C_SHIMS, custom_ops_to_c_shims, shim_name

# The runtime side (README.md, "Python"): no torch needed to import or to enable().
from .native import (ExecutorchVersionError, NativeLibraryError, NoCudaDeviceError,  # noqa: E402
                     enable, is_registered)
from .runtime import InputError, TorchVersionError, load  # noqa: E402

if _util.find_spec("torch") is not None:
    from . import ops  # noqa: F401  (registers the et_cuda ops on import, as users expect)


def __getattr__(name):
    if name in ("passes", "backend"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(name)


def install():
    """See ``backend.install``."""
    from .backend import install as _install

    return _install()


def rewrite(gm, ep=None, **kw):
    """See ``passes.rewrite``."""
    from .passes import rewrite as _rewrite

    return _rewrite(gm, ep, **kw)

__all__ = ["prepare", "install", "rewrite", "C_SHIMS", "custom_ops_to_c_shims", "shim_name", "ops",
           "enable", "is_registered", "load", "ExecutorchVersionError", "NativeLibraryError",
           "NoCudaDeviceError", "InputError", "TorchVersionError"]


def prepare(ep, *, positions=None, linear=True, attention=True, fuse=True, max_m=None, rope=True,
            keep_buffers=()):
    """Rewrite ``ep`` (a ``torch.export.ExportedProgram``) in place and make
    CudaBackend map the new ops to the library's C shims. Returns ``(ep, report)``,
    report = ``{"linear": n, "attention": n, "rope": n, "gated_mlp": n, "merged": n, "norm": n,
    "residual": n, "add_norm": n, "add_norm_linear": n, "skipped_attention": [...], "rope_skipped": [...],
    "skipped_linear": [...], "patched": [...]}`` (the skipped lists: "node: why")
    (``rope``: attentions with their RoPE and KV-cache write folded in; ``rope=False`` leaves
    those to the lowering). Every bf16/fp16 linear
    over a weight of the program is rewritten whatever the prefill bound (``max_m`` is
    accepted and ignored). Buffers the program only overwrites and never reads (HF's
    per-layer ``cumulative_length``) leave it (``buffers.drop_write_only``), listed as
    ``report["write_only_buffers"]``; ``keep_buffers``: names to keep all the same."""
    from .buffers import drop_write_only

    report = rewrite(ep.graph_module, ep, max_m=max_m, positions=positions, linear=linear,
                     attention=attention, fuse=fuse, rope=rope)
    report["write_only_buffers"] = drop_write_only(ep, keep=tuple(keep_buffers))
    report["patched"] = install()
    return ep, report
