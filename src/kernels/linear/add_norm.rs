//! `et_add_rmsnorm`: the residual add after a norm of a layer's result (Gemma's and OLMo-2's
//! norms after the attention and the MLP), one kernel; it shares the fused linear's norm
//! arithmetic ([`Norm`]), argument struct and launch. `et_add_rmsnorm_linear`: the same
//! followed by the linear that reads its result, folded into the fused linear's kernel.

use super::{launch, names, Args, Fusion, Norm};
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
    let c = check(x, residual, norm)?;
    let y = crate::cuda::memory::empty_strided(
        x.sizes.clone(),
        tensor::contiguous_strides(&x.sizes),
        c.dt,
        Device::Cuda(c.device),
    )?;
    if c.m == 0 || c.k == 0 {
        return Ok(y);
    }
    let module = module(c.device)?;
    let mut args = Args {
        x: x.data_ptr() as u64,
        sx: c.sx,
        norm: norm.weight.data_ptr() as u64,
        res: residual.data_ptr() as u64,
        sr: c.sr,
        y: y.data_ptr() as u64,
        eps: norm.eps,
        norm_add: norm.offset,
        m: c.m as i32,
        n: c.k as i32,
        k: c.k as i32,
        norm_mode: norm.mode as i32,
        ..Args::default()
    };
    let name = names::ADD_NORM[usize::from(c.dt != dtype::BFLOAT16)];
    // SAFETY: one block per row (m < 2^31 blocks); block `i` reads K elements of row i of x
    // (stride sx) and of the residual (stride sr), both checked to hold M rows of unit K
    // stride, and the contiguous [K] weight, and writes row i of the fresh contiguous y.
    unsafe { launch(&module, c.device, name, (c.m as u32, 1, 1), &mut args)? };
    Ok(y)
}

/// Set by [`set_fused`] (tests, benchmarks), else `ET_CUDA_FUSED_ADD_NORM` decides.
static FUSED: crate::switches::Override = crate::switches::Override::unset();

/// Whether `et_add_rmsnorm_linear` runs as one kernel where it can: `ET_CUDA_FUSED_ADD_NORM=1`
/// (default off: on whole Gemma-3 programs the one kernel was slower than the two, likely
/// because each of its blocks takes the norm's reduction over `p` after its PDL wait; not
/// profiled), unless [`set_fused`] said otherwise.
pub fn fused_enabled() -> bool {
    FUSED.get(crate::switches::get().fused_add_norm_linear)
}

/// Tests and benchmarks: the one kernel (`true`) or the two ops (`false`) for later calls.
pub fn set_fused(on: bool) {
    FUSED.set(Some(on));
}

/// `et_add_rmsnorm_linear`: `h = residual + rmsnorm(p)` ([`add_rmsnorm`], norm `post`), then
/// the linear of `h` ([`super::linear`] with `w` and `f`); returns `(y, h)`. Gemma's layers
/// have it twice: the norm after the attention, added to the residual stream, then the MLP's
/// normed gate/up; the norm after the MLP, added, then the next layer's normed QKV. Up to 8
/// rows in bf16 with the fused linear's layout (`p`'s rows too: a row stride of a multiple of
/// 8, 16-byte aligned `p` and `post`'s weight) take one kernel when [`fused_enabled`]
/// (`et_lin_bf16_*_pre`: every block forms `h` from `p` and the residual as it loads them, the
/// first block of each block row writes it); anything else runs the two ops in turn, with the
/// same results.
pub fn add_rmsnorm_linear(
    p: &Tensor,
    residual: &Tensor,
    post: &Norm,
    w: &Tensor,
    f: &Fusion,
) -> Result<(Tensor, Tensor)> {
    let c = check(p, residual, post)?;
    // The linear reads h with the residual's layout (h is written contiguous).
    let l = super::check(residual, w, f)?;
    let aligned = |t: &Tensor| (t.data_ptr() as usize) % 16 == 0;
    let fused = l.fused
        && c.dt == dtype::BFLOAT16
        && l.gemv.m <= 8
        && l.gemv.m == c.m
        && c.sx % 8 == 0
        && aligned(p)
        && aligned(post.weight)
        && fused_enabled();
    if !fused || c.m == 0 || c.k == 0 || l.n_out == 0 {
        let h = add_rmsnorm(p, residual, post)?;
        let y = super::linear(&h, w, f)?;
        return Ok((y, h));
    }
    let alloc = |sizes: &Vec<i64>| {
        crate::cuda::memory::empty_strided(
            sizes.clone(),
            tensor::contiguous_strides(sizes),
            c.dt,
            Device::Cuda(c.device),
        )
    };
    let h = alloc(&p.sizes)?;
    let y = alloc(&l.out_sizes)?;
    let module = module(c.device)?;
    let v = match gemv::forced_variant() {
        Some(v) => v,
        None => super::pick_variant(&l, f.act, &module, true),
    };
    let (name, grid) = super::fused_shape(&l, f.act, v, true);
    let mut args = Args {
        x: residual.data_ptr() as u64,
        sx: l.gemv.sx.0,
        w: w.data_ptr() as u64,
        sw: l.gemv.sw.0,
        p: p.data_ptr() as u64,
        sp: c.sx,
        pn: post.weight.data_ptr() as u64,
        h: h.data_ptr() as u64,
        p_eps: post.eps,
        p_add: post.offset,
        p_mode: post.mode as i32,
        ..super::base_args(&l, f, &y)
    };
    // SAFETY: one `LinArgs` by value (repr(C) mirror); `super::check` proved the fused layout
    // of the residual (read as x), W, the norm weight and the epilogue residual, M <= 8 rows;
    // `check` proved p and the residual hold M rows of K (unit K stride), p's row stride a
    // multiple of 8 and p and its [K] weight 16-byte aligned (above). The kernel reads inside
    // those views and writes the fresh [M, N] y and [M, K] h.
    unsafe { launch(&module, c.device, name, grid, &mut args)? };
    Ok((y, h))
}

/// What [`check`] proved of `x + rmsnorm(...)`'s operands.
struct Checked {
    dt: i32,
    m: i64,
    k: i64,
    sx: i64,
    sr: i64,
    device: i32,
}

/// `x`, `residual` and the norm of `y = residual + rmsnorm(x)`: dtypes, sizes, row strides,
/// then devices.
fn check(x: &Tensor, residual: &Tensor, norm: &Norm) -> Result<Checked> {
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
    Ok(Checked {
        dt,
        m,
        k,
        sx,
        sr,
        device,
    })
}
