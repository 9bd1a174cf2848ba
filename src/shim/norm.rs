//! The export companion's `et_add_rmsnorm` op (`python/executorch_cuda/`), as the C shim an
//! AOTInductor `.so` imports (declared to Inductor in `shims.py`):
//!
//! ```c
//! // et_cuda::et_add_rmsnorm(Tensor x, Tensor residual, Tensor weight, int norm_mode,
//! //     float eps, float norm_offset) -> Tensor   (residual + rmsnorm(x))
//! AOTITorchError aoti_torch_cuda_et_add_rmsnorm(AtenTensorHandle x, AtenTensorHandle residual,
//!     AtenTensorHandle weight, int64_t norm_mode, double eps, double norm_offset,
//!     AtenTensorHandle* ret0);
//! // et_cuda::et_add_rmsnorm_linear(Tensor x, Tensor residual, Tensor post_weight,
//! //     int post_mode, float post_eps, float post_offset, Tensor weight, Tensor? bias,
//! //     Tensor? norm_weight, Tensor? lin_residual, int norm_mode, float eps,
//! //     float norm_offset, int act) -> (Tensor, Tensor)   (the linear of h, then h)
//! AOTITorchError aoti_torch_cuda_et_add_rmsnorm_linear(AtenTensorHandle x,
//!     AtenTensorHandle residual, AtenTensorHandle post_weight, int64_t post_mode,
//!     double post_eps, double post_offset, AtenTensorHandle weight, AtenTensorHandle* bias,
//!     AtenTensorHandle* norm_weight, AtenTensorHandle* lin_residual, int64_t norm_mode,
//!     double eps, double norm_offset, int64_t act, AtenTensorHandle* ret0,
//!     AtenTensorHandle* ret1);
//! ```
//!
//! Each returns new tensors the caller owns, computed on the device's current stream without a
//! host wait; the arithmetic and the argument rules are in `crate::kernels::linear::add_rmsnorm`
//! and `add_rmsnorm_linear`.

use super::Aoti;
use super::{give, named, optional, AOTITorchError, AtenTensorHandle};
use crate::boundary::guard;
use crate::error::invalid;
use crate::kernels::linear::{self, Act, Fusion, Norm};

/// `y = residual + rmsnorm(x)` (`crate::kernels::linear::add_rmsnorm`): `norm_mode` 1 or 2
/// (as `et_linear`'s), `eps`, `norm_offset`.
///
/// # Safety
/// Each handle must be null or live; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_et_add_rmsnorm(
    x: AtenTensorHandle,
    residual: AtenTensorHandle,
    weight: AtenTensorHandle,
    norm_mode: i64,
    eps: f64,
    norm_offset: f64,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_add_rmsnorm", || {
        // SAFETY: forwarded contract.
        let (x, r, g) = unsafe {
            (
                named(x, "x")?,
                named(residual, "residual")?,
                named(weight, "weight")?,
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let norm = Norm::new(g, norm_mode, eps, norm_offset)?;
        let y = linear::add_rmsnorm(x, r, &norm)?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// `h = residual + rmsnorm(x)` then `y = et_linear(h, weight, ...)`
/// (`crate::kernels::linear::add_rmsnorm_linear`): `ret0` gets `y`, `ret1` gets `h`. The
/// first six arguments are `et_add_rmsnorm`'s, the rest `et_linear`'s after its `x`.
///
/// # Safety
/// Each handle must be null or live; each optional-tensor pointer null or readable (holding
/// a null or live handle); `ret0` and `ret1` null or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aoti_torch_cuda_et_add_rmsnorm_linear(
    x: AtenTensorHandle,
    residual: AtenTensorHandle,
    post_weight: AtenTensorHandle,
    post_mode: i64,
    post_eps: f64,
    post_offset: f64,
    weight: AtenTensorHandle,
    bias: *const AtenTensorHandle,
    norm_weight: *const AtenTensorHandle,
    lin_residual: *const AtenTensorHandle,
    norm_mode: i64,
    eps: f64,
    norm_offset: f64,
    act: i64,
    ret0: *mut AtenTensorHandle,
    ret1: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_add_rmsnorm_linear", || {
        // SAFETY: forwarded contract.
        let (x, r, pg, w, b, g, lr) = unsafe {
            (
                named(x, "x")?,
                named(residual, "residual")?,
                named(post_weight, "post_weight")?,
                named(weight, "weight")?,
                optional(bias, "bias")?,
                optional(norm_weight, "norm_weight")?,
                optional(lin_residual, "lin_residual")?,
            )
        };
        if ret0.is_null() || ret1.is_null() {
            return invalid("ret0 or ret1 is null");
        }
        let post = Norm::new(pg, post_mode, post_eps, post_offset)?;
        let fusion = Fusion {
            bias: b,
            norm: Norm::from_args(g, norm_mode, eps, norm_offset)?,
            residual: lr,
            act: Act::from_code(act)?,
        };
        let (y, h) = linear::add_rmsnorm_linear(x, r, &post, w, &fusion)?;
        // SAFETY: forwarded contract (both checked non-null).
        unsafe {
            give(ret0, y)?;
            give(ret1, h)
        }
    })
}

/// Tests and benchmarks only (`tests/decode_gpu/add_norm_linear.rs`): `on` != 0 makes later
/// `et_add_rmsnorm_linear` calls take the one fused kernel where they can, 0 the two ops (the
/// default comes from `ET_CUDA_FUSED_ADD_NORM`, `crate::switches`).
#[no_mangle]
pub extern "C" fn et_cuda_debug_fused_add_norm(on: i32) -> AOTITorchError {
    guard::<Aoti>("et_cuda_debug_fused_add_norm", || {
        linear::set_fused_add_norm(on != 0);
        Ok(())
    })
}
