"""Make ExecuTorch's CudaBackend (AOTInductor) call the companion's C shims:
adds them to ``aot_inductor.custom_ops_to_c_shims`` and to the backend's
supported fallback kernels. Idempotent."""

import functools

from . import shims

_INSTALLED = {"done": False}


def _merge_options(options):
    table = dict(options.get("aot_inductor.custom_ops_to_c_shims") or {})
    table.update(shims.custom_ops_to_c_shims())
    options = dict(options)
    options["aot_inductor.custom_ops_to_c_shims"] = table
    return options


def install():
    """Patch ExecuTorch's CudaBackend (whichever of its hooks exist) and the
    global Inductor config. Returns the list of what was patched."""
    import torch._inductor.config as inductor_config

    patched = []
    table = dict(inductor_config.aot_inductor.custom_ops_to_c_shims)
    table.update(shims.custom_ops_to_c_shims())
    inductor_config.aot_inductor.custom_ops_to_c_shims = table
    patched.append("torch._inductor.config.aot_inductor.custom_ops_to_c_shims")
    if _INSTALLED["done"]:
        return patched
    try:
        from executorch.backends.cuda.cuda_backend import CudaBackend
    except ImportError:
        return patched

    if hasattr(CudaBackend, "get_supported_fallback_kernels"):
        orig = CudaBackend.get_supported_fallback_kernels.__func__

        @classmethod
        @functools.wraps(orig)
        def supported(cls, *a, **kw):
            out = dict(orig(cls, *a, **kw))
            out.update(shims.fallback_kernel_names())
            return out

        CudaBackend.get_supported_fallback_kernels = supported
        patched.append("CudaBackend.get_supported_fallback_kernels")
    if hasattr(CudaBackend, "get_aoti_compile_options"):
        orig_opts = CudaBackend.get_aoti_compile_options.__func__

        @classmethod
        @functools.wraps(orig_opts)
        def options(cls, *a, **kw):
            return _merge_options(orig_opts(cls, *a, **kw))

        CudaBackend.get_aoti_compile_options = options
        patched.append("CudaBackend.get_aoti_compile_options")
    _INSTALLED["done"] = True
    return patched
