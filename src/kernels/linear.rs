//! `et_linear`: a linear layer with what a decoder layer puts around it, as one op:
//! `y = act(rmsnorm(x) · Wᵀ + bias) + residual`, each part optional (see `LinArgs` and
//! `linear_mma` in `kernels/decode.cu` for the arithmetic and where it rounds).
//!
//! - `x` `[..., K]`, `W` `[Nw, K]`, `bias` `[Nw]`, as for [`super::gemv`].
//! - `norm`: RMSNorm of every row of `x` first, with a weight `[K]`, `eps`, and one of two
//!   roundings ([`NormMode`]). In bf16 the fused kernel takes it late: `x` times the norm weight,
//!   rounded, feeds the product and the row's `rsqrt(mean(x²) + eps)` scales the product (one
//!   rounding of each product input away from eager PyTorch, which rounds `x · r` first; the
//!   prefill path and fp16 round as eager does).
//! - `act`: [`Act::SiluMul`] / [`Act::GeluTanhMul`] take `W` as the gate rows then the up
//!   rows (`Nw = 2N`) and give `act(gate) · up`, `N` columns; [`Act::None`] gives `Nw`.
//! - `residual`: a tensor of the result's sizes added last.
//!
//! Dispatch on the rows `M` when it runs: up to 16 rows with the GEMV's layout rules (`K % 8
//! == 0`, unit stride along `K`, 16-byte aligned `x`, `W` and norm weight; a norm only up to
//! [`MAX_NORM_FUSED_COLS`] output columns) take one fused
//! tensor-core GEMV kernel, in the weight-tile variant whose grid takes the fewest waves of
//! resident blocks ([`variant_by_waves`]), launched as a programmatic dependent launch (its first weight
//! loads overlap the kernel before it; `ET_CUDA_PDL=0` turns that off); anything else (a
//! prefill) runs the parts in turn: the norm kernel, the product (cuBLASLt's GEMM above 16
//! rows, [`super::gemm`]; the GEMV for layouts it does not take), the act/residual kernel.

use super::gemv::{self, Problem};
use super::{module, Module};
use crate::cuda::{self, ContextGuard};
use crate::dtype::codes as dtype;
use crate::dtype::describe;
use crate::error::{invalid, Error, Result};
use crate::tensor::{self, Device, Tensor};
use cudarc::driver::sys;
use std::ffi::c_void;

/// The activation of a gated MLP, applied to the first half of the product and multiplied
/// by the second half (`Act as i64` is the op's `act` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    None = 0,
    SiluMul = 1,
    GeluTanhMul = 2,
}

impl Act {
    pub fn from_code(code: i64) -> Result<Act> {
        match code {
            0 => Ok(Act::None),
            1 => Ok(Act::SiluMul),
            2 => Ok(Act::GeluTanhMul),
            _ => invalid(format!(
                "et_cuda linear: act {code} is not 0 (none), 1 (silu * up) or 2 (gelu-tanh * up)"
            )),
        }
    }
}

/// How the normalised row meets the norm weight `g` (`NormMode as i32` is the kernels' mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormMode {
    /// `g * (x * r).to(T)`: the product of two rounded values, rounded (Llama, Qwen3).
    WeightTimesRounded = 1,
    /// `(x * r * (offset + g)).to(T)` in fp32, rounded once (Gemma: offset 1).
    Fp32Offset = 2,
}

/// An RMSNorm of the rows of `x` before the product.
#[derive(Debug, Clone, Copy)]
pub struct Norm<'a> {
    pub weight: &'a Tensor,
    pub mode: NormMode,
    pub eps: f32,
    pub offset: f32,
}

impl<'a> Norm<'a> {
    /// From the op's arguments: `mode` 0 means no norm (and `weight` must be absent).
    pub fn from_args(
        weight: Option<&'a Tensor>,
        mode: i64,
        eps: f64,
        offset: f64,
    ) -> Result<Option<Norm<'a>>> {
        match (mode, weight) {
            (0, None) => Ok(None),
            (1 | 2, Some(w)) => Norm::new(w, mode, eps, offset).map(Some),
            (0..=2, _) => invalid(format!(
                "et_cuda linear: norm mode {mode} with {} norm weight (mode 0 takes none, 1 and 2 take one)",
                if weight.is_some() { "a" } else { "no" }
            )),
            _ => invalid(format!("et_cuda linear: norm mode {mode} is not 0, 1 or 2")),
        }
    }

    /// A norm with its weight: `mode` 1 or 2 (0, no norm, is refused), `eps` finite and
    /// not negative, `offset` finite.
    pub fn new(weight: &'a Tensor, mode: i64, eps: f64, offset: f64) -> Result<Norm<'a>> {
        let mode = match mode {
            1 => NormMode::WeightTimesRounded,
            2 => NormMode::Fp32Offset,
            _ => return invalid(format!("et_cuda norm: mode {mode} is not 1 or 2")),
        };
        if !(eps.is_finite() && eps >= 0.0 && offset.is_finite()) {
            return invalid(format!(
                "et_cuda linear: norm eps {eps} and offset {offset} must be finite (eps >= 0)"
            ));
        }
        Ok(Norm {
            weight,
            mode,
            eps: eps as f32,
            offset: offset as f32,
        })
    }
}

/// Everything around the product.
#[derive(Debug, Clone, Copy)]
pub struct Fusion<'a> {
    pub bias: Option<&'a Tensor>,
    pub norm: Option<Norm<'a>>,
    pub residual: Option<&'a Tensor>,
    pub act: Act,
}

/// The checked problem.
#[derive(Debug, Clone)]
pub struct Linear {
    /// The product's problem (`n` is `Nw`, the rows of `W`).
    pub gemv: Problem,
    /// Output columns (`Nw`, or `Nw / 2` with an act).
    pub n_out: i64,
    pub out_sizes: Vec<i64>,
    /// The residual's row stride (elements), when there is one.
    pub res_stride: i64,
    /// Whether the fused kernel takes it (M <= 16 and the fast layout).
    pub fused: bool,
}

/// Rows the fused kernel takes at most (two block rows of 8, or one of 16).
pub const MAX_FUSED_ROWS: i64 = 16;
/// Output columns up to which the fused kernel folds the norm in ([`takes_fused`]).
pub const MAX_NORM_FUSED_COLS: i64 = 32768;

/// Check the arguments (shapes, dtypes and strides first, then devices).
pub fn check(x: &Tensor, w: &Tensor, f: &Fusion) -> Result<Linear> {
    let mut p = gemv::check_layout(x, w, f.bias)?;
    let n_out = match f.act {
        Act::None => p.n,
        _ if p.n % 2 == 0 => p.n / 2,
        _ => {
            return invalid(format!(
                "et_cuda linear: a gated act needs an even number of weight rows (gate then up), not {}",
                p.n
            ))
        }
    };
    let mut out_sizes = p.out_sizes.clone();
    if let Some(last) = out_sizes.last_mut() {
        *last = n_out;
    }
    let mut norm_aligned = true;
    if let Some(nm) = &f.norm {
        let g = nm.weight;
        if g.dtype != p.dtype || g.sizes != [p.k] || !g.is_contiguous() {
            return invalid(format!(
                "et_cuda linear: the norm weight must be a contiguous [{}] {} tensor, not {} sizes {:?} strides {:?}",
                p.k, describe(p.dtype), describe(g.dtype), g.sizes, g.strides
            ));
        }
        if p.sx.1 != 1 && p.k > 1 {
            return invalid("et_cuda linear: with a norm, x must have unit stride along K");
        }
        norm_aligned = (g.data_ptr() as usize) % 16 == 0;
    }
    let res_stride = match f.residual {
        None => 0,
        Some(r) => residual_stride(r, &out_sizes, p.dtype)?,
    };
    p.device = gemv::check_device(gemv::OP, x, w, f.bias)?;
    if let Some(nm) = &f.norm {
        same_device(nm.weight, p.device, "norm weight")?;
    }
    if let Some(r) = f.residual {
        same_device(r, p.device, "residual")?;
    }
    let fused = takes_fused(p.fast && norm_aligned, f.norm.is_some(), n_out, p.m);
    Ok(Linear {
        gemv: p,
        n_out,
        out_sizes,
        res_stride,
        fused,
    })
}

/// Whether the fused kernel takes a problem: the fast layout, at most [`MAX_FUSED_ROWS`] rows,
/// and a norm only up to [`MAX_NORM_FUSED_COLS`] columns. Every block of the fused kernel
/// applies the norm itself (fp16: a pass over x before its loop; bf16: x times the norm weight
/// in its loop): over the many waves of a vocabulary head that costs more than one norm kernel
/// before a plain GEMV (H200, 128256 x 2048, bf16: 140.7 µs with the norm folded in, 126.3 µs
/// without, `linear_bench`).
pub fn takes_fused(fast_layout: bool, norm: bool, n_out: i64, m: i64) -> bool {
    fast_layout && m <= MAX_FUSED_ROWS && (!norm || n_out <= MAX_NORM_FUSED_COLS)
}

fn same_device(t: &Tensor, device: i32, what: &str) -> Result<()> {
    if t.device() != Device::Cuda(device) {
        return invalid(format!(
            "et_cuda linear: the {what} is on {:?}, not on cuda:{device} with x",
            t.device()
        ));
    }
    Ok(())
}

/// The residual's row stride: it must have the result's sizes, rows that collapse into one
/// stride and unit stride along the last dimension.
fn residual_stride(r: &Tensor, sizes: &[i64], dt: i32) -> Result<i64> {
    let n = *sizes.last().unwrap_or(&0);
    let rank = r.sizes.len();
    let stride =
        if r.sizes == sizes && r.dtype == dt && rank > 0 && (n <= 1 || r.strides[rank - 1] == 1) {
            gemv::row_stride(&r.sizes[..rank - 1], &r.strides[..rank - 1], 1, n)
        } else {
            None
        };
    let Some(stride) = stride else {
        return invalid(format!(
            "et_cuda linear: the residual must be a {} tensor of sizes {sizes:?} with rows of unit stride, not {} sizes {:?} strides {:?}",
            describe(dt), describe(r.dtype), r.sizes, r.strides
        ));
    };
    Ok(stride)
}

/// The kernel's argument struct (`LinArgs` in `kernels/decode.cu`), field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Args {
    x: u64,
    sx: i64,
    w: u64,
    sw: i64,
    bias: u64,
    norm: u64,
    res: u64,
    sr: i64,
    y: u64,
    eps: f32,
    norm_add: f32,
    m: i32,
    n: i32,
    k: i32,
    norm_mode: i32,
    // PRE kernels (`add_rmsnorm_linear`): h = x + rmsnorm(p) before the product.
    p: u64,
    sp: i64,
    pn: u64,
    h: u64,
    p_eps: f32,
    p_add: f32,
    p_mode: i32,
}

/// Name and grid of the fused kernel for `l` with weight-tile variant `v` (0..=2); `pre`: the
/// kernel of `add_rmsnorm_linear` (bf16, 8-row blocks: the caller checked both).
pub fn fused_shape(l: &Linear, act: Act, v: usize, pre: bool) -> (&'static str, (u32, u32, u32)) {
    let v = v.min(gemv::VARIANT_ROWS.len() - 1);
    let bf = l.gemv.dtype == dtype::BFLOAT16;
    let mt = gemv::rows_per_block(l.gemv.m);
    let name = if pre {
        names::FUSED_PRE[v][act as usize]
    } else {
        names::FUSED[if bf { 0 } else { 3 } + v][usize::from(mt == 16)][act as usize]
    };
    let rows = gemv::VARIANT_ROWS[v];
    let gx = (l.n_out + rows - 1) / rows;
    let gy = (l.gemv.m + mt - 1) / mt;
    (name, (gx as u32, gy as u32, 1))
}

/// Threads per block of every kernel here (8 warps).
const THREADS: u32 = 256;

/// The variant whose grid takes the fewest waves of resident blocks, from each variant's
/// `(blocks, blocks one SM holds)` on `sms` SMs. A block's weights are in flight at once and
/// then it reduces, so a partial wave costs nearly a full one: the fewest waves win. Among
/// those, in one wave the most blocks (the most SMs reading); over several, the largest tiles
/// (fewer loads of x and reductions per byte of W). H200, `linear_bench`: Llama's gate/up
/// (two waves either way) 17.98 µs with 256 blocks, 20.10 µs with 512; O (one wave) 3.29 µs
/// with 256 blocks, 3.74 µs with 128.
pub fn variant_by_waves(cands: &[(i64, i64)], sms: i64) -> usize {
    let waves: Vec<i64> = cands
        .iter()
        .map(|&(blocks, per_sm)| {
            (blocks + per_sm.max(1) * sms.max(1) - 1) / (per_sm.max(1) * sms.max(1))
        })
        .collect();
    let least = waves.iter().copied().min().unwrap_or(1);
    let mut best = 0;
    for (v, &(blocks, _)) in cands.iter().enumerate() {
        if waves[v] != least {
            continue;
        }
        let better = if least <= 1 {
            waves[best] != least || blocks > cands[best].0
        } else {
            waves[best] != least || blocks < cands[best].0
        };
        if better {
            best = v;
        }
    }
    best
}

/// The variant for `l` on `module`'s device ([`variant_by_waves`] over the kernels' occupancy).
fn pick_variant(l: &Linear, act: Act, module: &Module, pre: bool) -> usize {
    let cands: Vec<(i64, i64)> = (0..gemv::VARIANT_ROWS.len())
        .map(|v| {
            let (name, g) = fused_shape(l, act, v, pre);
            let per_sm = module.blocks_per_sm(name, THREADS);
            (i64::from(g.0) * i64::from(g.1), i64::from(per_sm))
        })
        .collect();
    variant_by_waves(&cands, i64::from(module.sm_count))
}

/// Check, allocate the result on the device's current stream and enqueue the work there.
pub fn linear(x: &Tensor, w: &Tensor, f: &Fusion) -> Result<Tensor> {
    let l = check(x, w, f)?;
    let y = crate::cuda::memory::empty_strided(
        l.out_sizes.clone(),
        tensor::contiguous_strides(&l.out_sizes),
        l.gemv.dtype,
        Device::Cuda(l.gemv.device),
    )?;
    if l.gemv.m == 0 || l.n_out == 0 {
        return Ok(y);
    }
    if l.fused {
        launch_fused(&l, x, w, f, &y)?;
        return Ok(y);
    }
    composite(&l, x, w, f, y)
}

fn base_args(l: &Linear, f: &Fusion, y: &Tensor) -> Args {
    let nm = f.norm.as_ref();
    Args {
        bias: f.bias.map_or(0, |b| b.data_ptr() as u64),
        norm: nm.map_or(0, |n| n.weight.data_ptr() as u64),
        res: f.residual.map_or(0, |r| r.data_ptr() as u64),
        sr: l.res_stride,
        y: y.data_ptr() as u64,
        eps: nm.map_or(0.0, |n| n.eps),
        norm_add: nm.map_or(0.0, |n| n.offset),
        m: l.gemv.m as i32,
        n: l.n_out as i32,
        k: l.gemv.k as i32,
        norm_mode: nm.map_or(0, |n| n.mode as i32),
        ..Args::default()
    }
}

fn launch_fused(l: &Linear, x: &Tensor, w: &Tensor, f: &Fusion, y: &Tensor) -> Result<()> {
    let module = module(l.gemv.device)?;
    let v = match gemv::forced_variant() {
        Some(v) => v,
        None => pick_variant(l, f.act, &module, false),
    };
    let (name, grid) = fused_shape(l, f.act, v, false);
    let mut args = Args {
        x: x.data_ptr() as u64,
        sx: l.gemv.sx.0,
        w: w.data_ptr() as u64,
        sw: l.gemv.sw.0,
        ..base_args(l, f, y)
    };
    // SAFETY: one `LinArgs` by value, mirrored by `Args` (repr(C)); `check` proved the fast
    // layout (K % 8, unit K strides, 8-element row strides, 16-byte aligned x, W and norm
    // weight), the norm weight's [K], the residual's sizes and row stride, and M <= 16; the
    // kernel reads inside those views and writes the fresh [M, N] output.
    unsafe { launch(&module, l.gemv.device, name, grid, &mut args) }
}

/// # Safety
/// `args` must describe memory valid for what kernel `name` reads and writes with `grid`.
unsafe fn launch(
    m: &Module,
    device: i32,
    name: &'static str,
    grid: (u32, u32, u32),
    args: &mut Args,
) -> Result<()> {
    let _ctx = ContextGuard::device(m.device())?;
    let stream: sys::CUstream = cuda::stream::current(device).raw;
    let mut params: [*mut c_void; 1] = [(args as *mut Args).cast()];
    // SAFETY: forwarded contract.
    unsafe {
        let pdl = super::pdl_enabled();
        m.launch_in(name, (grid, THREADS, 0), stream, &mut params, (pdl, 1))
    }
}

/// Rows the fused kernel does not take: the norm into a scratch `[M, K]`, the product
/// (with its bias), then the act and the residual into `y`.
fn composite(l: &Linear, x: &Tensor, w: &Tensor, f: &Fusion, y: Tensor) -> Result<Tensor> {
    let p = &l.gemv;
    let dev = Device::Cuda(p.device);
    let module = module(p.device)?;
    let normed = match &f.norm {
        None => None,
        Some(_) => {
            // x's leading sizes, so that the product (and the result) keeps x's rank.
            let mut sizes = l.out_sizes.clone();
            if let Some(last) = sizes.last_mut() {
                *last = p.k;
            }
            let xn = crate::cuda::memory::empty_strided(
                sizes.clone(),
                tensor::contiguous_strides(&sizes),
                p.dtype,
                dev,
            )?;
            let mut args = Args {
                x: x.data_ptr() as u64,
                sx: p.sx.0,
                ..base_args(l, f, &xn)
            };
            let name = names::NORM[usize::from(p.dtype != dtype::BFLOAT16)];
            // SAFETY: one block per row of x (M rows of unit K stride, row stride sx, checked);
            // it reads K elements of its row and of the [K] norm weight and writes row m of
            // the fresh contiguous [M, K] scratch.
            unsafe { launch(&module, p.device, name, (p.m as u32, 1, 1), &mut args)? };
            Some(xn)
        }
    };
    let xin = normed.as_ref().unwrap_or(x);
    // Above the fused kernel's rows, a tensor-core GEMM (cuBLASLt) reads the weights once;
    // layouts it does not take stay with the GEMV, which takes any.
    let product = if p.m > MAX_FUSED_ROWS && super::gemm::check(xin, w, f.bias).is_ok() {
        super::gemm::gemm(xin, w, f.bias)?
    } else {
        gemv::gemv(xin, w, f.bias)?
    };
    if f.act == Act::None && f.residual.is_none() {
        debug_assert_eq!(product.sizes, l.out_sizes);
        return Ok(product);
    }
    let total =
        p.m.checked_mul(l.n_out)
            .ok_or_else(|| Error::invalid_argument("et_cuda linear: M x N overflows"))?;
    let blocks = u32::try_from((total + 255) / 256).map_err(|_| {
        Error::invalid_argument(format!(
            "et_cuda linear: {total} outputs are more than one launch takes"
        ))
    })?;
    let mut args = Args {
        x: product.data_ptr() as u64,
        ..base_args(l, f, &y)
    };
    let name = names::EPILOGUE[usize::from(p.dtype != dtype::BFLOAT16)][f.act as usize];
    // SAFETY: the product is a fresh contiguous [M, Nw] tensor on this stream; the kernel
    // reads it (and the residual, rows of stride sr, checked) and writes y's M x N elements.
    unsafe { launch(&module, p.device, name, (blocks, 1, 1), &mut args)? };
    drop(product);
    Ok(y)
}

#[path = "linear/add_norm.rs"]
mod add_norm;
pub use add_norm::{add_rmsnorm, add_rmsnorm_linear, set_fused as set_fused_add_norm};
#[path = "linear/names.rs"]
mod names;
#[cfg(test)]
pub use names::kernels;

#[cfg(test)]
#[path = "linear/bench.rs"]
mod bench;
#[cfg(test)]
#[path = "linear/bench_attn.rs"]
mod bench_attn;
#[cfg(test)]
#[path = "linear/tests.rs"]
mod tests;
