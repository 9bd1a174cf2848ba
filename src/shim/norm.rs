//! The export companion's `et_add_rmsnorm` op (`python/executorch_cuda/`), as the C shim an
//! AOTInductor `.so` imports (declared to Inductor in `shims.py`):
//!
//! ```c
//! // et_cuda::et_add_rmsnorm(Tensor x, Tensor residual, Tensor weight, int norm_mode,
//! //     float eps, float norm_offset) -> Tensor   (residual + rmsnorm(x))
//! AOTITorchError aoti_torch_cuda_et_add_rmsnorm(AtenTensorHandle x, AtenTensorHandle residual,
//!     AtenTensorHandle weight, int64_t norm_mode, double eps, double norm_offset,
//!     AtenTensorHandle* ret0);
//! ```
//!
//! It returns a new tensor the caller owns, computed on the device's current stream without a
//! host wait; the arithmetic and the argument rules are in `crate::kernels::linear::add_rmsnorm`.

use super::Aoti;
use super::{give, named, AOTITorchError, AtenTensorHandle};
use crate::boundary::guard;
use crate::error::invalid;
use crate::kernels::linear::{self, Norm};

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
