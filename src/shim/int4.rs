//! `aoti_torch_cuda__weight_int4pack_mm`, the fallback op an AOTInductor
//! `.so` imports for `aten._weight_int4pack_mm` (torchao's tile-packed int4
//! weights), with PyTorch 2.11's signature from
//! `torch/csrc/inductor/aoti_torch/generated/c_shim_cuda.h`. The work is in
//! `crate::kernels::int4mm`.

use super::Aoti;
use super::{give, named, AOTITorchError, AtenTensorHandle};
use crate::boundary::guard;
use crate::error::invalid;
use crate::kernels::int4mm::{self, Plan};

/// `y = self · dequant(mat2)ᵀ` in bf16 with fp32 accumulation; the result is a
/// new [M, N] bf16 tensor owned by the caller, computed on the device's
/// current stream (allocated from the stream-ordered pool, no host wait).
///
/// # Safety
/// Each handle must be null or live; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda__weight_int4pack_mm(
    self_: AtenTensorHandle,
    mat2: AtenTensorHandle,
    q_group_size: i64,
    q_scale_and_zeros: AtenTensorHandle,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda__weight_int4pack_mm", || {
        // SAFETY: forwarded contract.
        let (x, w, s) = unsafe {
            (
                named(self_, "self")?,
                named(mat2, "mat2")?,
                named(q_scale_and_zeros, "qScaleAndZeros")?,
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let y = int4mm::weight_int4pack_mm(x, w, q_group_size, s)?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// Tuning runs only (the GPU harness): force the int4 kernel configuration.
/// `kind` 0: back to the built-in choice; 1: skinny (`a` = staged rows 8/16,
/// `b` = n-tiles per block 2/4, `c` = warps 1..16); 2: tiled (`a` = m-tiles
/// 2/4, `b` = n-tiles per warp 2/4). Every configuration handles every shape.
#[no_mangle]
pub extern "C" fn et_cuda_debug_int4mm_tuning(kind: i32, a: i32, b: i32, c: i32) -> AOTITorchError {
    guard::<Aoti>("et_cuda_debug_int4mm_tuning", || {
        let plan = match kind {
            0 => None,
            1 => Some(Plan::Skinny {
                rows: i64::from(a),
                nt: i64::from(b),
                warps: i64::from(c),
            }),
            2 => Some(Plan::Tiled {
                mt: i64::from(a),
                nt: i64::from(b),
            }),
            k => return invalid(format!("tuning kind {k} is not 0, 1 or 2")),
        };
        int4mm::set_tuning(plan)
    })
}
