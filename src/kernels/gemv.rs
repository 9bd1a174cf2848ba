//! `y = x · Wᵀ (+ bias)` for few rows of `x` (decode): the checks, the kernel
//! choice and the launch of the GEMV kernels of `kernels/decode.cu`.
//!
//! `x` is `[..., K]` (rank ≥ 1; the leading dimensions are the `M` rows and must
//! collapse into one stride), `W` is `[N, K]`, `bias` is `[N]`; all bf16 or all
//! fp16 on one CUDA device. The result is a new contiguous `[..., N]` tensor of
//! the same dtype, accumulated in fp32 and rounded once.
//!
//! Two paths: the fast one (tensor cores, 16-byte vector loads) needs
//! `K % 8 == 0`, unit stride along `K` for `x` and `W`, row strides that are
//! multiples of 8 elements and 16-byte aligned `x` and `W`; anything else takes
//! the generic kernel (any strides and alignment, scalar loads), which gives
//! the same result up to the order of the fp32 sums. Any `M` works: the fast
//! kernel takes 8 rows of `x` per block row when `M <= 8`, else 16 (`W` is read
//! again for every 16 rows, from L2 when it fits), so it is meant for `M` up to
//! a few dozen.
//!
//! The fast kernel comes in three variants (`kernels/decode.cu`, `GEMV_VARIANTS`),
//! which differ in the rows of `W` per block (8, 16 or 32; all have 8 warps that
//! split `K`). [`variant_for`] picks the largest that still gives every SM two
//! blocks; [`set_tuning`] forces one (benchmarks only).

use super::module;
use crate::cuda::{self, ContextGuard};
use crate::dtype::codes as dtype;
use crate::dtype::describe;
use crate::error::{invalid, Error, Result};
use crate::tensor::{self, Device, Tensor};
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, Ordering};

/// Every GEMV entry point of `kernels/decode.cu` (checked against the PTX by a test).
#[cfg(test)]
pub const KERNELS: &[&str] = &[
    "et_gemv_bf16_v0_m8",
    "et_gemv_bf16_v0_m16",
    "et_gemv_bf16_v1_m8",
    "et_gemv_bf16_v1_m16",
    "et_gemv_bf16_v2_m8",
    "et_gemv_bf16_v2_m16",
    "et_gemv_f16_v0_m8",
    "et_gemv_f16_v0_m16",
    "et_gemv_f16_v1_m8",
    "et_gemv_f16_v1_m16",
    "et_gemv_f16_v2_m8",
    "et_gemv_f16_v2_m16",
    "et_gemv_generic_bf16",
    "et_gemv_generic_f16",
];

/// Rows of `W` per block of each fast variant (`8 * RT` in `GEMV_VARIANTS`).
pub const VARIANT_ROWS: [i64; 3] = [8, 16, 32];
/// Threads per block of both kernels (8 warps).
const THREADS: u32 = 256;
/// Rows of `W` per block of the generic kernel (one per warp).
const GENERIC_ROWS: i64 = 8;

/// A forced fast variant (benchmarks), or -1 for the built-in choice.
static TUNING: AtomicI32 = AtomicI32::new(-1);

/// Force the fast variant of later launches (`Some(0..=2)`), or go back to the
/// built-in choice (`None`). For benchmarks only; every variant handles every shape.
pub fn set_tuning(variant: Option<i32>) -> Result<()> {
    let v = match variant {
        None => -1,
        Some(v) if (0..VARIANT_ROWS.len() as i32).contains(&v) => v,
        Some(v) => return invalid(format!("et_cuda gemv: variant {v} is not 0, 1 or 2")),
    };
    TUNING.store(v, Ordering::Relaxed);
    Ok(())
}

/// The variant [`set_tuning`] forced, if any.
pub fn forced_variant() -> Option<usize> {
    usize::try_from(TUNING.load(Ordering::Relaxed)).ok()
}

/// The built-in variant for `n` rows of `W` on `sms` multiprocessors: the one
/// with the most rows per block that still makes two blocks per SM (blocks with
/// more rows amortise the loads of `x` and the final reduction), else 8 rows
/// per block, which gives 256 blocks at N = 2048.
pub fn variant_for(n: i64, sms: i64) -> usize {
    (1..VARIANT_ROWS.len())
        .rev()
        .find(|&v| (n + VARIANT_ROWS[v] - 1) / VARIANT_ROWS[v] >= 2 * sms)
        .unwrap_or(0)
}

/// The checked problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub dtype: i32,
    /// Strides of `x` (row, k) and `W` (row, k), in elements.
    pub sx: (i64, i64),
    pub sw: (i64, i64),
    pub has_bias: bool,
    /// Whether the fast kernel applies (see the module docs).
    pub fast: bool,
    /// Sizes of the result: `x`'s leading sizes and `N`.
    pub out_sizes: Vec<i64>,
    pub device: i32,
}

/// The stride of the rows of `x` when its leading dimensions collapse into one
/// (`None` when they do not); `m` is their product.
pub(crate) fn row_stride(sizes: &[i64], strides: &[i64], k_stride: i64, k: i64) -> Option<i64> {
    let lead: Vec<(i64, i64)> = sizes
        .iter()
        .zip(strides)
        .map(|(&s, &t)| (s, t))
        .filter(|&(s, _)| s != 1)
        .collect();
    match lead.last() {
        None => Some(k.saturating_mul(k_stride.max(1))),
        Some(&(_, inner)) => lead
            .windows(2)
            .all(|w| w[0].1 == w[1].1.saturating_mul(w[1].0))
            .then_some(inner),
    }
}

/// Check `x`, `W` and the optional `bias` (see the module docs for the rules).
/// Shapes, dtypes and strides come first, then the devices, so that CPU
/// tensors exercise every shape check.
pub fn check(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Problem> {
    let mut p = check_layout(x, w, bias)?;
    p.device = check_device(OP, x, w, bias)?;
    Ok(p)
}

/// The op named in the GEMV's messages.
pub(crate) const OP: &str = "et_cuda gemv";

/// [`check`] without the devices (`device` is left -1): the shapes, dtypes and strides.
pub(crate) fn check_layout(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Problem> {
    let dt = x.dtype;
    check_dtypes(OP, x, w, bias)?;
    let r = x.sizes.len();
    let (m, n, k) = check_shapes(OP, x, w, bias, "the kernels'")?;
    if x.strides.iter().chain(&w.strides).any(|&s| s < 0) {
        return invalid("et_cuda gemv: negative strides are not supported");
    }
    let sxk = x.strides[r - 1];
    let sxm = row_stride(&x.sizes[..r - 1], &x.strides[..r - 1], sxk, k).ok_or_else(|| {
        Error::invalid_argument(format!(
            "et_cuda gemv: x's leading dimensions (sizes {:?}, strides {:?}) do not collapse into rows; pass a contiguous x",
            x.sizes, x.strides
        ))
    })?;
    let (swn, swk) = (w.strides[0], w.strides[1]);
    let aligned = |t: &Tensor| (t.data_ptr() as usize) % 16 == 0;
    let fast = k % 8 == 0
        && (k == 0 || (sxk == 1 && swk == 1))
        && (m <= 1 || sxm % 8 == 0)
        && (n <= 1 || swn % 8 == 0)
        && aligned(x)
        && aligned(w);
    // Grid limits: row blocks of 16 in gridDim.y (fast); the generic kernel loops over rows.
    // gridDim.x (at most N / 8 blocks) stays far below its 2^31 - 1 limit.
    if fast && (m + 15) / 16 > 65535 {
        return invalid(format!(
            "et_cuda gemv: M = {m} is more than the grid allows"
        ));
    }
    let mut out_sizes = x.sizes[..r - 1].to_vec();
    out_sizes.push(n);
    Ok(Problem {
        m,
        n,
        k,
        dtype: dt,
        sx: (sxm, sxk),
        sw: (swn, swk),
        has_bias: bias.is_some(),
        fast,
        out_sizes,
        device: -1,
    })
}

/// One dtype (bfloat16 or float16) for x, the weight and the bias (`op` names the caller in
/// the message; the GEMM checks its arguments with these too).
pub(crate) fn check_dtypes(op: &str, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<()> {
    let dt = x.dtype;
    if dt != dtype::BFLOAT16 && dt != dtype::FLOAT16 {
        return invalid(format!(
            "{op}: x must be bfloat16 or float16, not {}",
            describe(dt)
        ));
    }
    if w.dtype != dt || bias.is_some_and(|b| b.dtype != dt) {
        return invalid(format!(
            "{op}: x ({}), weight ({}) and bias ({}) must have one dtype",
            describe(dt),
            describe(w.dtype),
            bias.map_or("none".into(), |b| describe(b.dtype))
        ));
    }
    Ok(())
}

/// The ranks and sizes against each other and 32-bit sizes (`limit`: whose, for the
/// message); returns (M, N, K).
pub(crate) fn check_shapes(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    limit: &str,
) -> Result<(i64, i64, i64)> {
    let r = x.sizes.len();
    if r == 0 {
        return invalid(format!("{op}: x must have at least one dimension [..., K]"));
    }
    if w.sizes.len() != 2 {
        return invalid(format!(
            "{op}: weight must be 2-d [N, K], not sizes {:?}",
            w.sizes
        ));
    }
    let (n, k) = (w.sizes[0], w.sizes[1]);
    if x.sizes[r - 1] != k {
        return invalid(format!(
            "{op}: x sizes {:?} and weight sizes {:?} disagree on K",
            x.sizes, w.sizes
        ));
    }
    if let Some(b) = bias {
        if b.sizes != [n] || !b.is_contiguous() {
            return invalid(format!(
                "{op}: bias must be a contiguous [{n}] tensor, not sizes {:?} strides {:?}",
                b.sizes, b.strides
            ));
        }
    }
    let m = tensor::checked_numel(&x.sizes[..r - 1])?;
    let lim = i64::from(i32::MAX);
    if m > lim || n > lim || k > lim {
        return invalid(format!(
            "{op}: M={m} N={n} K={k} exceed {limit} 32-bit sizes"
        ));
    }
    Ok((m, n, k))
}

/// x, the weight and the bias on one CUDA device; returns its ordinal.
pub(crate) fn check_device(op: &str, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<i32> {
    let device = match (x.device(), w.device(), bias.map(|b| b.device())) {
        (Device::Cuda(a), Device::Cuda(b), None) if a == b => a,
        (Device::Cuda(a), Device::Cuda(b), Some(Device::Cuda(c))) if a == b && b == c => a,
        (a, b, c) => {
            return invalid(format!(
            "{op}: x, weight and bias must be on one CUDA device; they are on {a:?}, {b:?}, {c:?}"
        ))
        }
    };
    Ok(device)
}

/// Rows of `x` per block row of the fast kernel: 8 when `m <= 8`, else 16
/// (several block rows when `m > 16`).
pub fn rows_per_block(m: i64) -> i64 {
    if m <= 8 {
        8
    } else {
        16
    }
}

/// Kernel name, grid and block size; `variant` (0..=2) picks the fast kernel.
pub fn launch_shape(p: &Problem, variant: usize) -> (&'static str, (u32, u32, u32), u32) {
    let bf = p.dtype == dtype::BFLOAT16;
    if p.fast {
        let mt = rows_per_block(p.m);
        const NAMES: [[&str; 2]; 6] = [
            ["et_gemv_bf16_v0_m8", "et_gemv_bf16_v0_m16"],
            ["et_gemv_bf16_v1_m8", "et_gemv_bf16_v1_m16"],
            ["et_gemv_bf16_v2_m8", "et_gemv_bf16_v2_m16"],
            ["et_gemv_f16_v0_m8", "et_gemv_f16_v0_m16"],
            ["et_gemv_f16_v1_m8", "et_gemv_f16_v1_m16"],
            ["et_gemv_f16_v2_m8", "et_gemv_f16_v2_m16"],
        ];
        let v = variant.min(VARIANT_ROWS.len() - 1);
        let name = NAMES[if bf { 0 } else { 3 } + v][usize::from(mt == 16)];
        let rows = VARIANT_ROWS[v];
        let gx = (p.n + rows - 1) / rows;
        let gy = (p.m + mt - 1) / mt;
        (name, (gx as u32, gy as u32, 1), THREADS)
    } else {
        let name = if bf {
            "et_gemv_generic_bf16"
        } else {
            "et_gemv_generic_f16"
        };
        let gx = (p.n + GENERIC_ROWS - 1) / GENERIC_ROWS;
        (name, (gx as u32, 1, 1), THREADS)
    }
}

/// Check, allocate the result on the device's current stream (stream-ordered
/// pool) and enqueue the kernel there. No host wait.
pub fn gemv(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let p = check(x, w, bias)?;
    let y = crate::cuda::memory::empty_strided(
        p.out_sizes.clone(),
        tensor::contiguous_strides(&p.out_sizes),
        p.dtype,
        Device::Cuda(p.device),
    )?;
    if p.m == 0 || p.n == 0 {
        return Ok(y);
    }
    let module = module(p.device)?;
    let forced = TUNING.load(Ordering::Relaxed);
    let variant = if forced >= 0 {
        forced as usize
    } else {
        variant_for(p.n, i64::from(module.sm_count))
    };
    let (name, grid, block) = launch_shape(&p, variant);
    let _ctx = ContextGuard::device(module.device())?;
    let stream = cuda::stream::current(p.device).raw;
    let mut xp = x.data_ptr() as u64;
    let mut wp = w.data_ptr() as u64;
    let mut bp = bias.map_or(0u64, |b| b.data_ptr() as u64);
    let mut yp = y.data_ptr() as u64;
    let (mut m, mut n, mut k) = (p.m as i32, p.n as i32, p.k as i32);
    let (mut sxm, mut sxk, mut swn, mut swk) = (p.sx.0, p.sx.1, p.sw.0, p.sw.1);
    if p.fast {
        let mut params: [*mut c_void; 9] = [
            (&mut xp as *mut u64).cast(),
            (&mut sxm as *mut i64).cast(),
            (&mut wp as *mut u64).cast(),
            (&mut swn as *mut i64).cast(),
            (&mut bp as *mut u64).cast(),
            (&mut yp as *mut u64).cast(),
            (&mut m as *mut i32).cast(),
            (&mut n as *mut i32).cast(),
            (&mut k as *mut i32).cast(),
        ];
        // SAFETY: the parameters match (ptr, i64, ptr, i64, ptr, ptr, int, int, int); `check`
        // proved sizes, unit K strides, 8-element row strides and 16-byte alignment for the
        // fast path; every read is inside x's and W's views, every write inside the fresh
        // [M, N] output on this device and stream.
        unsafe { module.launch(name, grid, block, 0, stream, &mut params)? };
    } else {
        let mut params: [*mut c_void; 11] = [
            (&mut xp as *mut u64).cast(),
            (&mut sxm as *mut i64).cast(),
            (&mut sxk as *mut i64).cast(),
            (&mut wp as *mut u64).cast(),
            (&mut swn as *mut i64).cast(),
            (&mut swk as *mut i64).cast(),
            (&mut bp as *mut u64).cast(),
            (&mut yp as *mut u64).cast(),
            (&mut m as *mut i32).cast(),
            (&mut n as *mut i32).cast(),
            (&mut k as *mut i32).cast(),
        ];
        // SAFETY: the parameters match (ptr, i64, i64, ptr, i64, i64, ptr, ptr, int, int, int);
        // the generic kernel reads x[m*sxm + k*sxk] and W[n*swn + k*swk] inside their views
        // (sizes and strides from `check`) and writes the fresh [M, N] output.
        unsafe { module.launch(name, grid, block, 0, stream, &mut params)? };
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kernels::cpu_tensor as t;

    fn msg(r: Result<Problem>) -> String {
        r.expect_err("should be refused").to_string()
    }

    #[test]
    fn shape_dtype_and_device_errors_are_clear() {
        let bf = dtype::BFLOAT16;
        let x = t(bf, &[2, 64]);
        let w = t(bf, &[32, 64]);
        assert!(msg(check(&t(dtype::FLOAT32, &[2, 64]), &w, None)).contains("bfloat16 or float16"));
        assert!(msg(check(&x, &t(dtype::FLOAT16, &[32, 64]), None)).contains("one dtype"));
        assert!(msg(check(&x, &t(bf, &[32, 63]), None)).contains("disagree on K"));
        assert!(msg(check(&x, &t(bf, &[32, 64, 1]), None)).contains("2-d"));
        assert!(msg(check(&x, &w, Some(&t(bf, &[31])))).contains("contiguous [32]"));
        // Everything right but the device: CPU tensors are refused last.
        assert!(msg(check(&x, &w, Some(&t(bf, &[32])))).contains("one CUDA device"));
        assert!(msg(check(&t(bf, &[3, 5, 64]), &w, None)).contains("one CUDA device"));
    }

    #[test]
    fn rows_collapse_or_are_refused() {
        // [2, 3, K] contiguous: rows of K.
        assert_eq!(row_stride(&[2, 3], &[3 * 64, 64], 1, 64), Some(64));
        // A strided leading dim that still collapses (every row at 128).
        assert_eq!(row_stride(&[2, 3], &[3 * 128, 128], 1, 64), Some(128));
        // Size-1 dims are ignored; none left: one row.
        assert_eq!(row_stride(&[1, 1], &[7, 9], 1, 64), Some(64));
        // A gap between the leading dims: no single row stride.
        assert_eq!(row_stride(&[2, 3], &[1000, 64], 1, 64), None);
    }

    #[test]
    fn kernel_choice_covers_every_m_and_names_built_kernels() {
        for m in 1..=40 {
            let mt = rows_per_block(m);
            assert!(mt >= m.min(16) && [8, 16].contains(&mt));
            for bf in [dtype::BFLOAT16, dtype::FLOAT16] {
                for fast in [true, false] {
                    for (variant, &rows) in VARIANT_ROWS.iter().enumerate() {
                        let p = Problem {
                            m,
                            n: 2050,
                            k: 2048,
                            dtype: bf,
                            sx: (2048, 1),
                            sw: (2048, 1),
                            has_bias: false,
                            fast,
                            out_sizes: vec![m, 2050],
                            device: 0,
                        };
                        let (name, grid, block) = launch_shape(&p, variant);
                        assert!(KERNELS.contains(&name), "{name}");
                        assert_eq!(block, 256);
                        if fast {
                            // Every row of W and of x is in some block.
                            assert!(i64::from(grid.0) * rows >= 2050);
                            assert!(i64::from(grid.1) * mt >= m);
                            let suffix = format!("_v{variant}_m{mt}");
                            assert!(name.ends_with(&suffix), "{name} {suffix}");
                        } else {
                            assert!(i64::from(grid.0) * GENERIC_ROWS >= 2050);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn variant_choice_gives_every_sm_two_blocks_when_it_can() {
        // H200: 132 SMs. N = 2048 cannot fill 264 blocks of 16 rows: 8 rows per block.
        assert_eq!(variant_for(2048, 132), 0);
        assert_eq!(variant_for(4224, 132), 1);
        assert_eq!(variant_for(8192, 132), 1);
        assert_eq!(variant_for(8448, 132), 2);
        assert_eq!(variant_for(128256, 132), 2);
        assert_eq!(variant_for(1, 132), 0);
        for n in [1, 8, 100, 2048, 5000, 9000, 1 << 20] {
            let v = variant_for(n, 132);
            assert!(v == 0 || (n + VARIANT_ROWS[v] - 1) / VARIANT_ROWS[v] >= 264);
        }
    }

    #[test]
    fn tuning_accepts_built_variants_only() {
        assert!(set_tuning(Some(3)).is_err());
        assert!(set_tuning(Some(-1)).is_err());
        assert_eq!(TUNING.load(Ordering::Relaxed), -1);
        set_tuning(Some(2)).expect("variant 2");
        assert_eq!(TUNING.load(Ordering::Relaxed), 2);
        set_tuning(None).expect("back to the built-in choice");
        assert_eq!(TUNING.load(Ordering::Relaxed), -1);
    }
}
