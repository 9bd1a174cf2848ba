//! `aten._weight_int4pack_mm` on CUDA: argument checks, kernel choice and
//! launch of `kernels/int4mm.cu`. The layout facts are in `kernels/README.md`.

use super::module;
use crate::cuda::{self, ContextGuard};
use crate::dtype::codes as dtype;
use crate::dtype::describe;
use crate::error::{invalid, Error, Result};
use crate::tensor::{self, Device, Tensor};
use std::ffi::c_void;
use std::sync::Mutex;

/// Group sizes the op accepts.
pub const GROUP_SIZES: [i64; 4] = [32, 64, 128, 256];
/// k per pipeline step of the kernels.
const STEP_K: i64 = 128;
/// Staged bytes per activation row and step.
const ROW_BYTES: usize = 256;

/// Ceiling division of non-negative `a` by positive `b`.
fn cdiv(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The checked problem: `y[m][n] = x[m][k] . dequant(w)^T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub group: i64,
    /// innerKTiles of the packing: 2, 4 or 8.
    pub inner_k_tiles: i64,
    /// The CUDA device of all three tensors.
    pub device: i32,
}

fn want_dtype(t: &Tensor, code: i32, what: &str) -> Result<()> {
    if t.dtype != code {
        return invalid(format!(
            "{what} must be {} but is {}",
            describe(code),
            describe(t.dtype)
        ));
    }
    Ok(())
}

fn want_rank(t: &Tensor, rank: usize, what: &str) -> Result<()> {
    if t.sizes.len() != rank {
        return invalid(format!(
            "{what} must be {rank}-d but has sizes {:?}",
            t.sizes
        ));
    }
    Ok(())
}

fn want_contiguous(t: &Tensor, what: &str) -> Result<()> {
    if !t.is_contiguous() {
        return invalid(format!(
            "{what} must be contiguous (sizes {:?}, strides {:?})",
            t.sizes, t.strides
        ));
    }
    Ok(())
}

fn want_aligned(t: &Tensor, align: usize, what: &str) -> Result<()> {
    let p = t.data_ptr() as usize;
    if t.numel() > 0 && p % align != 0 {
        return invalid(format!(
            "{what}'s data pointer {p:#x} is not {align}-byte aligned"
        ));
    }
    Ok(())
}

/// Check the arguments of `_weight_int4pack_mm(self, mat2, qGroupSize, qScaleAndZeros)`:
/// dtypes, ranks, shapes against each other, group size, contiguity,
/// alignment, then the device (so that CPU tensors exercise every shape check).
pub fn check(x: &Tensor, w: &Tensor, group: i64, qsz: &Tensor) -> Result<Problem> {
    want_dtype(x, dtype::BFLOAT16, "self (activations)")?;
    want_dtype(w, dtype::INT32, "mat2 (packed int4 weights)")?;
    want_dtype(qsz, dtype::BFLOAT16, "qScaleAndZeros")?;
    want_rank(x, 2, "self (activations)")?;
    want_rank(w, 4, "mat2 (packed int4 weights)")?;
    want_rank(qsz, 3, "qScaleAndZeros")?;
    if !GROUP_SIZES.contains(&group) {
        return invalid(format!(
            "qGroupSize must be 32, 64, 128 or 256, not {group}"
        ));
    }
    let (m, n, k, ikt) = check_shapes(x, w, group, qsz)?;
    let device = check_layout_and_device(x, w, qsz)?;
    Ok(Problem {
        m,
        n,
        k,
        group,
        inner_k_tiles: ikt,
        device,
    })
}

/// The shapes against each other and the group size, and the kernels' index
/// and grid limits; returns (M, N, K, innerKTiles).
fn check_shapes(x: &Tensor, w: &Tensor, group: i64, qsz: &Tensor) -> Result<(i64, i64, i64, i64)> {
    let (m, k) = (x.sizes[0], x.sizes[1]);
    let ws = &w.sizes;
    if ws[2] != 32 || ![1, 2, 4].contains(&ws[3]) {
        return invalid(format!(
            "mat2 must have sizes [N/8, K/(innerKTiles*16), 32, innerKTiles/2] with innerKTiles 2, 4 or 8; got {ws:?}"
        ));
    }
    let ikt = ws[3] * 2;
    let n = ws[0]
        .checked_mul(8)
        .ok_or_else(|| Error::invalid_argument(format!("mat2 sizes {ws:?} overflow")))?;
    if n == 0 {
        return invalid(format!("mat2 has no n-tiles (sizes {ws:?})"));
    }
    if k <= 0 || k % (ikt * 16) != 0 {
        return invalid(format!(
            "K = {k} (self sizes {:?}) must be a positive multiple of innerKTiles*16 = {}",
            x.sizes,
            ikt * 16
        ));
    }
    if ws[1] != k / (ikt * 16) {
        return invalid(format!(
            "mat2 sizes {ws:?} do not match K = {k}: dimension 1 must be K/(innerKTiles*16) = {}",
            k / (ikt * 16)
        ));
    }
    if k % group != 0 {
        return invalid(format!("K = {k} is not a multiple of qGroupSize {group}"));
    }
    let want = [k / group, n, 2];
    if qsz.sizes != want {
        return invalid(format!(
            "qScaleAndZeros must have sizes {want:?} ([K/qGroupSize, N, 2]) but has {:?}",
            qsz.sizes
        ));
    }
    // The kernels index with 32-bit ints (with 64-bit products where they can
    // grow), and address the scale/zero words with 32-bit offsets.
    let lim = i32::MAX as i64;
    if m > lim || n > lim || k > lim || (k / 32).saturating_mul(n) > lim {
        return invalid(format!("sizes M={m} N={n} K={k} are too large"));
    }
    // Grid limits: row tiles of 32 (tiled) and pairs of n-tiles (skinny) in gridDim.y.
    if cdiv(m, 32) > 65535 || cdiv(n / 8, 2) > 65535 {
        return invalid(format!(
            "M = {m} or N = {n} is more than this kernel's grid allows"
        ));
    }
    Ok((m, n, k, ikt))
}

/// Contiguity and alignment of the three tensors, then their one CUDA device.
fn check_layout_and_device(x: &Tensor, w: &Tensor, qsz: &Tensor) -> Result<i32> {
    want_contiguous(x, "self (activations)")?;
    want_contiguous(w, "mat2 (packed int4 weights)")?;
    want_contiguous(qsz, "qScaleAndZeros")?;
    want_aligned(x, 16, "self (activations)")?;
    want_aligned(w, 16, "mat2 (packed int4 weights)")?;
    want_aligned(qsz, 4, "qScaleAndZeros")?;
    let device = match (x.device(), w.device(), qsz.device()) {
        (Device::Cuda(a), Device::Cuda(b), Device::Cuda(c)) if a == b && b == c => a,
        (a, b, c) => {
            return invalid(format!(
                "self, mat2 and qScaleAndZeros must be on one CUDA device; they are on {a:?}, {b:?}, {c:?}"
            ))
        }
    };
    Ok(device)
}

/// Which kernel variant and launch shape; see `kernels/int4mm.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Chunks of `rows` (8 or 16) rows, `nt` n-tiles per block, `warps` splitting K.
    Skinny { rows: i64, nt: i64, warps: i64 },
    /// 16*`mt` rows x 32*`nt` columns per 4-warp block, all of K.
    Tiled { mt: i64, nt: i64 },
}

/// A forced kernel choice, for tuning runs (see [`set_tuning`]).
static TUNING: Mutex<Option<Plan>> = Mutex::new(None);

/// Force the next launches to use `plan` (`None`: back to the built-in
/// choice). For tuning runs only.
pub fn set_tuning(plan: Option<Plan>) -> Result<()> {
    if let Some(p) = plan {
        let ok = match p {
            Plan::Skinny { rows, nt, warps } => {
                [8, 16].contains(&rows)
                    && [2, 4].contains(&nt)
                    && [1, 2, 4, 8, 16].contains(&warps)
                    && rows * warps <= 128
            }
            Plan::Tiled { mt, nt } => [2, 4].contains(&mt) && [2, 4].contains(&nt),
        };
        if !ok {
            return invalid(format!("tuning {p:?} is not a built kernel configuration"));
        }
    }
    *TUNING.lock().unwrap_or_else(|e| e.into_inner()) = plan;
    Ok(())
}

/// The built-in choice for a shape on a GPU with `sms` multiprocessors.
pub fn choose(p: &Problem, sms: i64) -> Plan {
    let ntiles = p.n / 8;
    let steps = cdiv(p.k, STEP_K);
    if p.m <= 64 {
        // Up to 4 chunks of 16 rows read the same weights (from L2 after the first),
        // which beats the tiled kernel's few blocks at these sizes.
        let rows = if p.m <= 8 { 8 } else { 16 };
        // Enough blocks (n-tile groups x row chunks) for every SM with 4 n-tiles each,
        // else 2 (more blocks).
        let chunks = cdiv(p.m, rows);
        let nt = if cdiv(ntiles, 4) * chunks >= sms {
            4
        } else {
            2
        };
        // Warps split K: as many as there are steps, up to 8, so that two blocks fit on an
        // SM (the H200 sweep, GPU time from CUPTI: M=1 N=K=8192 16.3 us with 8 warps,
        // 19.5 us with 16; no shape measured faster with 16).
        let cap = 8;
        let mut warps = 1;
        while warps * 2 <= cap && warps * 2 <= steps {
            warps *= 2;
        }
        Plan::Skinny { rows, nt, warps }
    } else {
        let mt = if p.m <= 32 { 2 } else { 4 };
        let blocks4 = cdiv(ntiles, 16) * cdiv(p.m, 16 * mt);
        let nt = if blocks4 >= sms { 4 } else { 2 };
        Plan::Tiled { mt, nt }
    }
}

/// The plan to use: the forced one where it fits the shape, else the built-in one.
pub fn plan_for(p: &Problem, sms: i64) -> Plan {
    let forced = *TUNING.lock().unwrap_or_else(|e| e.into_inner());
    forced.unwrap_or_else(|| choose(p, sms))
}

/// Kernel name, grid, block size and dynamic shared memory of a plan.
pub fn launch_shape(p: &Problem, plan: Plan) -> (&'static str, (u32, u32, u32), u32, usize) {
    let ntiles = p.n / 8;
    match plan {
        Plan::Skinny { rows, nt, warps } => {
            let stage = warps as usize * 2 * rows as usize * ROW_BYTES;
            let reduce = warps as usize * nt as usize * 4 * 32 * 4;
            (
                skinny_name(p.inner_k_tiles, nt, rows),
                (cdiv(p.m, rows) as u32, cdiv(ntiles, nt) as u32, 1),
                (warps * 32) as u32,
                stage.max(reduce),
            )
        }
        Plan::Tiled { mt, nt } => (
            tiled_name(p.inner_k_tiles, mt, nt),
            (cdiv(ntiles, 4 * nt) as u32, cdiv(p.m, 16 * mt) as u32, 1),
            128,
            2 * 16 * mt as usize * ROW_BYTES,
        ),
    }
}

macro_rules! names {
    ($fn:ident, $prefix:literal, $a:literal, $b:literal, [$(($ikt:literal, $x:literal, $y:literal)),*]) => {
        fn $fn(ikt: i64, x: i64, y: i64) -> &'static str {
            match (ikt, x, y) {
                $(($ikt, $x, $y) => concat!($prefix, "_k", $ikt, $a, $x, $b, $y),)*
                _ => "int4mm_unknown_variant",
            }
        }
    };
}

// int4mm_skinny_k{ikt}_n{nt}_r{rows}
names!(
    skinny_name,
    "int4mm_skinny",
    "_n",
    "_r",
    [
        (2, 2, 8),
        (4, 2, 8),
        (8, 2, 8),
        (2, 4, 8),
        (4, 4, 8),
        (8, 4, 8),
        (2, 2, 16),
        (4, 2, 16),
        (8, 2, 16),
        (2, 4, 16),
        (4, 4, 16),
        (8, 4, 16)
    ]
);
// int4mm_tiled_k{ikt}_m{mt}_n{nt}
names!(
    tiled_name,
    "int4mm_tiled",
    "_m",
    "_n",
    [
        (2, 2, 2),
        (4, 2, 2),
        (8, 2, 2),
        (2, 2, 4),
        (4, 2, 4),
        (8, 2, 4),
        (2, 4, 2),
        (4, 4, 2),
        (8, 4, 2),
        (2, 4, 4),
        (4, 4, 4),
        (8, 4, 4)
    ]
);

/// Check, allocate the [M, N] bf16 output on the current stream of the
/// device (stream-ordered pool) and enqueue the kernel on that stream. No host wait.
pub fn weight_int4pack_mm(x: &Tensor, w: &Tensor, group: i64, qsz: &Tensor) -> Result<Tensor> {
    let p = check(x, w, group, qsz)?;
    let dev = Device::Cuda(p.device);
    let y = crate::cuda::memory::empty_strided(
        vec![p.m, p.n],
        tensor::contiguous_strides(&[p.m, p.n]),
        dtype::BFLOAT16,
        dev,
    )?;
    if p.m == 0 {
        return Ok(y);
    }
    let module = module(p.device)?;
    let plan = plan_for(&p, module.sm_count as i64);
    let (name, grid, block, smem) = launch_shape(&p, plan);
    let _ctx = ContextGuard::device(module.device())?;
    let stream = cuda::stream::current(p.device).raw;
    let mut xp = x.data_ptr() as u64;
    let mut wp = w.data_ptr() as u64;
    let mut sp = qsz.data_ptr() as u64;
    let mut yp = y.data_ptr() as u64;
    let (mut m, mut n, mut k) = (p.m as i32, p.n as i32, p.k as i32);
    let mut gshift = group.trailing_zeros() as i32;
    let mut params: [*mut c_void; 8] = [
        (&mut xp as *mut u64).cast(),
        (&mut wp as *mut u64).cast(),
        (&mut sp as *mut u64).cast(),
        (&mut yp as *mut u64).cast(),
        (&mut m as *mut i32).cast(),
        (&mut n as *mut i32).cast(),
        (&mut k as *mut i32).cast(),
        (&mut gshift as *mut i32).cast(),
    ];
    // SAFETY: the parameters match the kernels' (ptr, ptr, ptr, ptr, int, int, int, int);
    // `check` proved the tensors' sizes, contiguity and alignment for this grid, and the
    // output was just allocated with [m, n] bf16 on this device and stream.
    unsafe { module.launch(name, grid, block, smem, stream, &mut params)? };
    Ok(y)
}

#[cfg(test)]
mod tests;
