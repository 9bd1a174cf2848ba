"""The mapping of the companion's ops to the C shims of libexecutorch_cuda.so,
for AOTInductor's ``aot_inductor.custom_ops_to_c_shims`` (the declarations
Inductor writes into the generated wrapper; the signatures are the ones
``src/shim/decode.rs`` defines)."""

# op name (namespace et_cuda) -> C declaration of its shim
C_SHIMS = {
    "et_linear": "AOTITorchError aoti_torch_cuda_et_linear("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle*, AtenTensorHandle*, AtenTensorHandle*, "
    "int64_t, double, double, int64_t, AtenTensorHandle*)",
    "et_add_rmsnorm": "AOTITorchError aoti_torch_cuda_et_add_rmsnorm("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, int64_t, double, double, "
    "AtenTensorHandle*)",
    "et_add_rmsnorm_linear": "AOTITorchError aoti_torch_cuda_et_add_rmsnorm_linear("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, int64_t, double, double, "
    "AtenTensorHandle, AtenTensorHandle*, AtenTensorHandle*, AtenTensorHandle*, int64_t, double, "
    "double, int64_t, AtenTensorHandle*, AtenTensorHandle*)",
    "et_gemv": "AOTITorchError aoti_torch_cuda_et_gemv("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle*)",
    "et_gemv_bias": "AOTITorchError aoti_torch_cuda_et_gemv_bias("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle*)",
    "et_decode_attention": "AOTITorchError aoti_torch_cuda_et_decode_attention("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, double, "
    "AtenTensorHandle*)",
    "et_attention": "AOTITorchError aoti_torch_cuda_et_attention("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, double, int64_t, "
    "AtenTensorHandle*)",
    "et_attention_rope": "AOTITorchError aoti_torch_cuda_et_attention_rope("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, "
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, double, int64_t, AtenTensorHandle*, "
    "AtenTensorHandle*, int64_t, double, double, AtenTensorHandle*)",
    "et_attention_rope_qkv": "AOTITorchError aoti_torch_cuda_et_attention_rope_qkv("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, "
    "AtenTensorHandle, double, int64_t, int64_t, int64_t, int64_t, int64_t, AtenTensorHandle*, "
    "AtenTensorHandle*, int64_t, double, double, AtenTensorHandle*)",
    "et_decode_attention_len": "AOTITorchError aoti_torch_cuda_et_decode_attention_len("
    "AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, int64_t, double, AtenTensorHandle*)",
}


def shim_name(op: str) -> str:
    """The symbol AOTInductor calls for op ``et_cuda::<op>`` on CUDA."""
    return f"aoti_torch_cuda_{op}"


def custom_ops_to_c_shims():
    """``{OpOverload: [declaration]}`` for ``aot_inductor.custom_ops_to_c_shims``."""
    import torch

    from . import ops  # noqa: F401  (registers the ops)

    return {getattr(torch.ops.et_cuda, op).default: [decl] for op, decl in C_SHIMS.items()}


def fallback_kernel_names():
    """Names ExecuTorch's AOTI backend checks its supported fallback kernels against."""
    names = {}
    for op in C_SHIMS:
        names[f"et_cuda::{op}"] = None
        names[shim_name(op)] = None
    return names
