//! `et_add_rmsnorm`: the residual add after a norm of a layer's result (Gemma's and OLMo-2's
//! norms after the attention and the MLP), one kernel; it shares the fused linear's norm
//! arithmetic ([`Norm`]), argument struct and launch.

use super::{launch, names, Args, Norm};
use crate::dtype::codes as dtype;
use crate::dtype::describe;
use crate::error::{invalid, Result};
use crate::kernels::{gemv, module};
use crate::tensor::{self, Device, Tensor};

/// `et_add_rmsnorm`: `y = residual + rmsnorm(x)` over the last dimension, the norm rounded to
/// the dtype before the add (eager PyTorch's `residual + norm(x)`: Gemma's and OLMo-2's norms
/// after the attention and the MLP). `x` and `residual` have one shape `[..., K]` and dtype
/// (bf16 or fp16), rows that collapse into one stride and unit stride along `K`; the norm
/// weight is a contiguous `[K]`. One kernel (`et_add_norm_*`, one block per row, a programmatic
/// dependent launch); the result is a fresh contiguous tensor of `x`'s sizes.
pub fn add_rmsnorm(x: &Tensor, residual: &Tensor, norm: &Norm) -> Result<Tensor> {
    const OP: &str = "et_cuda add_rmsnorm";
    let dt = x.dtype;
    if dt != dtype::BFLOAT16 && dt != dtype::FLOAT16 {
        return invalid(format!(
            "{OP}: x must be bfloat16 or float16, not {}",
            describe(dt)
        ));
    }
    let r = x.sizes.len();
    if r == 0 {
        return invalid(format!("{OP}: x must have at least one dimension [..., K]"));
    }
    let k = x.sizes[r - 1];
    let g = norm.weight;
    if g.dtype != dt || g.sizes != [k] || !g.is_contiguous() {
        return invalid(format!(
            "{OP}: the norm weight must be a contiguous [{k}] {} tensor, not {} sizes {:?} strides {:?}",
            describe(dt), describe(g.dtype), g.sizes, g.strides
        ));
    }
    if residual.dtype != dt || residual.sizes != x.sizes {
        return invalid(format!(
            "{OP}: the residual must be a {} tensor of x's sizes {:?}, not {} sizes {:?}",
            describe(dt),
            x.sizes,
            describe(residual.dtype),
            residual.sizes
        ));
    }
    let rows = |t: &Tensor, what: &str| -> Result<i64> {
        let unit = k <= 1 || t.strides[r - 1] == 1;
        match gemv::row_stride(&t.sizes[..r - 1], &t.strides[..r - 1], 1, k) {
            Some(s) if unit && s >= 0 => Ok(s),
            _ => invalid(format!(
                "{OP}: the {what}'s rows (sizes {:?}, strides {:?}) must collapse into one stride with unit stride along K",
                t.sizes, t.strides
            )),
        }
    };
    let (sx, sr) = (rows(x, "x")?, rows(residual, "residual")?);
    let m = tensor::checked_numel(&x.sizes[..r - 1])?;
    if k > i64::from(i32::MAX) || m > i64::from(i32::MAX) {
        return invalid(format!(
            "{OP}: {m} rows of {k} exceed the kernel's 32-bit sizes"
        ));
    }
    let device = gemv::check_device(OP, x, residual, Some(g))?;
    let y = crate::cuda::memory::empty_strided(
        x.sizes.clone(),
        tensor::contiguous_strides(&x.sizes),
        dt,
        Device::Cuda(device),
    )?;
    if m == 0 || k == 0 {
        return Ok(y);
    }
    let module = module(device)?;
    let mut args = Args {
        x: x.data_ptr() as u64,
        sx,
        norm: g.data_ptr() as u64,
        res: residual.data_ptr() as u64,
        sr,
        y: y.data_ptr() as u64,
        eps: norm.eps,
        norm_add: norm.offset,
        m: m as i32,
        n: k as i32,
        k: k as i32,
        norm_mode: norm.mode as i32,
        ..Args::default()
    };
    let name = names::ADD_NORM[usize::from(dt != dtype::BFLOAT16)];
    // SAFETY: one block per row (m < 2^31 blocks); block `i` reads K elements of row i of x
    // (stride sx) and of the residual (stride sr), both checked to hold M rows of unit K
    // stride, and the contiguous [K] weight, and writes row i of the fresh contiguous y.
    unsafe { launch(&module, device, name, (m as u32, 1, 1), &mut args)? };
    Ok(y)
}
