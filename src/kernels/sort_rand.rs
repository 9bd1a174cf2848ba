//! `aten.sort.stable`, `aten.rand` and `aten.randint` on CUDA: argument
//! checks, output layout, launch of `kernels/sort_rand.cu`, and the per-device
//! generator state. The C entry points are in `src/shim/sort_rand.rs`;
//! the design is in `kernels/README.md` ("sort_rand.cu").
//!
//! Module lifetime: unlike the int4 module (released with its last
//! [`super::Lease`]), this one is loaded once per device on first use and
//! kept until the process exits, because it holds the device's generator
//! state (`et_rng_state`, a `__device__` variable): unloading it would reset
//! the seed and the offset behind the caller's back. It is small (~45 KB).
//!
//! Here: the module, `SortGeom` and the sort's launches; the sort's plan is in
//! `plan`, the generator's checks and launches in `generator`.

use super::{param, Module, Resident};
use crate::cuda::{self, ContextGuard};
use crate::dtype::codes;
use crate::error::{invalid, Result};
use crate::tensor::{Device, Tensor};
use cudarc::driver::sys;
use std::sync::Arc;

/// Longest row one block sorts in shared memory; the tile of the long-row path.
pub const SMALL_MAX: i64 = 2048;
/// Dimensions besides the sorted one that a row's address can depend on.
const MAX_OTHER_DIMS: usize = 15;
/// PyTorch's seed of a fresh generator (`c10::default_rng_seed_val`); the
/// device code starts from it (checked against the PTX by a test).
#[cfg(test)]
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// The module of each device, loaded on first use and kept for the process.
static MODULES: Resident = Resident::new(&super::images::SORT_RAND, "sort/random");

/// The module of device `ordinal`, loaded on first use and kept for the process.
/// Loaded under the lock, so that a device never has two generator states.
pub fn module(ordinal: i32) -> Result<Arc<Module>> {
    MODULES.get(ordinal)
}

fn cuda_ordinal(t: &Tensor, what: &str) -> Result<i32> {
    match t.device() {
        Device::Cuda(i) => Ok(i),
        Device::Cpu => invalid(format!(
            "{what} is on the CPU; this op runs on CUDA tensors"
        )),
    }
}

/// Grid for a grid-stride kernel over `items` with 256 threads per block.
fn grid_for(items: i64) -> u32 {
    ((items + 255) / 256).clamp(1, 4 * 65535) as u32
}

// ---------------------------------------------------------------- sort

/// Dtypes the sort handles.
pub const SORT_DTYPES: [i32; 10] = [
    codes::UINT8,
    codes::INT8,
    codes::INT16,
    codes::INT32,
    codes::INT64,
    codes::FLOAT16,
    codes::FLOAT32,
    codes::FLOAT64,
    codes::BOOL,
    codes::BFLOAT16,
];

/// The kernels' view of a sort; the exact layout of `SortGeom` in `kernels/sort_rand.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SortGeom {
    pub ndim: i32,
    pub dtype: i32,
    pub esize: i32,
    pub descending: i32,
    pub n: i64,
    pub rows: i64,
    pub in_sd: i64,
    pub val_sd: i64,
    pub idx_sd: i64,
    pub sizes: [i64; MAX_OTHER_DIMS],
    pub in_st: [i64; MAX_OTHER_DIMS],
    pub val_st: [i64; MAX_OTHER_DIMS],
    pub idx_st: [i64; MAX_OTHER_DIMS],
}

mod generator;
mod plan;
#[cfg(test)]
mod tests;

pub use generator::{check_sizes, manual_seed, rand, randint, randint_into, rng_state};
use plan::{merge_widths, plan_sort, small_launch};

/// `torch.sort(x, dim, descending, stable=True)`: new values (x's dtype) and
/// int64 indices with the strides of [`sort_output_strides`], computed on the
/// device's current stream. No host wait.
pub fn sort_stable(x: &Tensor, dim: i64, descending: bool) -> Result<(Tensor, Tensor)> {
    let plan = plan_sort(&x.sizes, &x.strides, x.dtype, dim, descending)?;
    let ordinal = cuda_ordinal(x, "self")?;
    let dev = Device::Cuda(ordinal);
    let vals = crate::cuda::memory::empty_strided(
        x.sizes.clone(),
        plan.out_strides.clone(),
        x.dtype,
        dev,
    )?;
    let idx = crate::cuda::memory::empty_strided(
        x.sizes.clone(),
        plan.out_strides.clone(),
        codes::INT64,
        dev,
    )?;
    let mut g = plan.geom;
    if g.rows == 0 || g.n == 0 {
        return Ok((vals, idx));
    }
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let mut in_p = x.data_ptr() as u64;
    let mut val_p = vals.data_ptr() as u64;
    let mut idx_p = idx.data_ptr() as u64;
    if g.n <= SMALL_MAX {
        let (mut p, threads, grid, smem) = small_launch(&g);
        let mut params = [
            param(&mut in_p),
            param(&mut val_p),
            param(&mut idx_p),
            param(&mut g),
            param(&mut p),
        ];
        // SAFETY: (ptr, ptr, ptr, SortGeom, u32) is the kernel's parameter list; the geometry
        // was derived from the input's and the fresh outputs' sizes and strides, so every
        // element address it forms lies in those tensors; `smem` is 12 * p bytes.
        unsafe {
            m.launch(
                "sort_rows_small",
                (grid, 1, 1),
                threads,
                smem,
                stream,
                &mut params,
            )?
        };
        return Ok((vals, idx));
    }
    // SAFETY: the geometry was derived from the input's and the fresh outputs' sizes and
    // strides (plan_sort); the module's context is current and `stream` is the device's.
    unsafe { sort_long_rows(&m, stream, g, (in_p, val_p, idx_p), dev)? };
    Ok((vals, idx))
}

/// Sort rows longer than [`SMALL_MAX`] through scratch keys and positions: prepare,
/// sort tiles, merge pass by pass, write values and indices.
///
/// # Safety
/// `g` must be the checked geometry of the input at `io.0` and the fresh outputs at
/// `io.1` (values) and `io.2` (indices), on `m`'s device, whose context is current;
/// `stream` a stream of that context.
unsafe fn sort_long_rows(
    m: &Module,
    stream: sys::CUstream,
    mut g: SortGeom,
    io: (u64, u64, u64),
    dev: Device,
) -> Result<()> {
    let (mut in_p, mut val_p, mut idx_p) = io;
    let total = g.rows * g.n; // checked by plan_sort
    let scratch = |dt: i32| crate::cuda::memory::empty_strided(vec![total], vec![1], dt, dev);
    let (keys_a, keys_b) = (scratch(codes::INT64)?, scratch(codes::INT64)?);
    let (pos_a, pos_b) = (scratch(codes::INT32)?, scratch(codes::INT32)?);
    let mut ka = keys_a.data_ptr() as u64;
    let mut pa = pos_a.data_ptr() as u64;
    let mut kb = keys_b.data_ptr() as u64;
    let mut pb = pos_b.data_ptr() as u64;
    let (mut n, mut rows) = (g.n, g.rows);
    let grid = grid_for(total);
    // SAFETY: (all launches below) each parameter list matches its kernel's signature in
    // kernels/sort_rand.cu; the scratch tensors hold `total` = rows * n keys (8 bytes) and
    // positions (4 bytes) each, the kernels touch only indices below `total`, and the input
    // and output addresses come from the checked geometry as above. All on one stream, in
    // order; the scratch memory is freed in stream order after them.
    unsafe {
        let mut params = [
            param(&mut in_p),
            param(&mut ka),
            param(&mut pa),
            param(&mut g),
        ];
        m.launch("sort_prep", (grid, 1, 1), 256, 0, stream, &mut params)?;
        let tiles = (n + SMALL_MAX - 1) / SMALL_MAX;
        let tgrid = (rows * tiles).clamp(1, 1 << 20) as u32;
        let mut params = [
            param(&mut ka),
            param(&mut pa),
            param(&mut n),
            param(&mut rows),
        ];
        m.launch("sort_tiles", (tgrid, 1, 1), 512, 0, stream, &mut params)?;
        for mut w in merge_widths(n) {
            let mut params = [
                param(&mut ka),
                param(&mut pa),
                param(&mut kb),
                param(&mut pb),
                param(&mut n),
                param(&mut rows),
                param(&mut w),
            ];
            m.launch("sort_merge", (grid, 1, 1), 256, 0, stream, &mut params)?;
            std::mem::swap(&mut ka, &mut kb);
            std::mem::swap(&mut pa, &mut pb);
        }
        let mut params = [
            param(&mut in_p),
            param(&mut pa),
            param(&mut val_p),
            param(&mut idx_p),
            param(&mut g),
        ];
        m.launch("sort_finish", (grid, 1, 1), 256, 0, stream, &mut params)?;
    }
    Ok(())
}
