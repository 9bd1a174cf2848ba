//! `aoti_torch_cuda__weight_int4pack_mm`, the fallback op an AOTInductor
//! `.so` imports for `aten._weight_int4pack_mm` (torchao's tile-packed int4
//! weights), with PyTorch 2.11's signature from
//! `torch/csrc/inductor/aoti_torch/generated/c_shim_cuda.h`:
//!
//! ```c
//! AOTITorchError aoti_torch_cuda__weight_int4pack_mm(
//!     AtenTensorHandle self, AtenTensorHandle mat2, int64_t qGroupSize,
//!     AtenTensorHandle qScaleAndZeros, AtenTensorHandle* ret0);
//! ```
//!
//! Self-contained on purpose (its own guard, same behaviour as the shim's):
//! errors and panics become `AOTI_TORCH_FAILURE` and the thread's last error.
//! The work is in `crate::kernels::int4mm`.
#![allow(clippy::missing_safety_doc)]

use super::shim::{AOTITorchError, AtenTensorHandle, AOTI_TORCH_FAILURE, AOTI_TORCH_SUCCESS};
use crate::error::{invalid, set_last_error, Result};
use crate::kernels::int4mm::{self, Plan};
use crate::tensor::Tensor;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn guard<F: FnOnce() -> Result<()>>(name: &str, f: F) -> AOTITorchError {
    match catch_unwind(AssertUnwindSafe(|| {
        super::test_hook(name);
        f()
    })) {
        Ok(Ok(())) => AOTI_TORCH_SUCCESS,
        Ok(Err(e)) => {
            set_last_error(&format!("{name}: {e}"));
            AOTI_TORCH_FAILURE
        }
        Err(_) => {
            set_last_error(&format!("{name}: internal error: panic"));
            AOTI_TORCH_FAILURE
        }
    }
}

unsafe fn tensor<'a>(h: AtenTensorHandle, what: &str) -> Result<&'a Tensor> {
    // SAFETY: a non-null handle is a live Box<Tensor> handed out by the shim.
    unsafe { super::non_null(h.cast_const(), what) }
}

/// `y = self · dequant(mat2)ᵀ` in bf16 with fp32 accumulation; the result is a
/// new [M, N] bf16 tensor owned by the caller, computed on the device's
/// current stream (allocated from the stream-ordered pool, no host wait).
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda__weight_int4pack_mm(
    self_: AtenTensorHandle,
    mat2: AtenTensorHandle,
    q_group_size: i64,
    q_scale_and_zeros: AtenTensorHandle,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard("aoti_torch_cuda__weight_int4pack_mm", || unsafe {
        let x = tensor(self_, "self")?;
        let w = tensor(mat2, "mat2")?;
        let s = tensor(q_scale_and_zeros, "qScaleAndZeros")?;
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let y = int4mm::weight_int4pack_mm(x, w, q_group_size, s)?;
        ret0.write(Box::into_raw(Box::new(y)));
        Ok(())
    })
}

/// Tuning runs only (the GPU harness): force the int4 kernel configuration.
/// `kind` 0: back to the built-in choice; 1: skinny (`a` = staged rows 8/16,
/// `b` = n-tiles per block 2/4, `c` = warps 1..16); 2: tiled (`a` = m-tiles
/// 2/4, `b` = n-tiles per warp 2/4). Every configuration handles every shape.
#[no_mangle]
pub extern "C" fn et_cuda_debug_int4mm_tuning(kind: i32, a: i32, b: i32, c: i32) -> AOTITorchError {
    guard("et_cuda_debug_int4mm_tuning", || {
        let plan = match kind {
            0 => None,
            1 => Some(Plan::Skinny {
                rows: a as i64,
                nt: b as i64,
                warps: c as i64,
            }),
            2 => Some(Plan::Tiled {
                mt: a as i64,
                nt: b as i64,
            }),
            k => return invalid(format!("tuning kind {k} is not 0, 1 or 2")),
        };
        int4mm::set_tuning(plan)
    })
}
