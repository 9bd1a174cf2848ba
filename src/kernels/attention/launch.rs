//! The attention's launches besides the main kernel: the split workspaces and the combine,
//! and `et_attention_rope`'s cache write ahead of the split kernel.

use super::{kv_write_name, Args, Module, Problem, Shape};
use crate::dtype::codes as dtype;
use crate::error::Result;
use crate::tensor::{Device, Tensor};
use cudarc::driver::sys;
use std::ffi::c_void;

/// Enqueue `et_kv_write_*`: the rotated new keys and the new values written into the caches.
///
/// # Safety
/// `args` must describe `p` as checked by `check` and `rope::check` (q, the caches, the new
/// keys and values, cos/sin, the positions), filled by `rope::fill`.
pub(super) unsafe fn kv_write(
    module: &Module,
    p: &Problem,
    args: &mut Args,
    stream: sys::CUstream,
    pdl: bool,
) -> Result<()> {
    let grid = (p.lq as u32, p.hkv as u32, p.b as u32);
    // SAFETY: the kernel takes one `AttnArgs` by value (mirrored by `Args`), proved for `p`
    // (this function's contract); it writes the caches' rows [0, Lmax) only, at the positions,
    // and waits (PDL) for the kernel before it first.
    unsafe { enqueue(module, kv_write_name(p), (grid, 32, 1), args, stream, pdl) }
}

/// Enqueue the attention kernel `shape` names, on its grid (as clusters when it says so).
///
/// # Safety
/// `args` must describe the problem `shape` was made for, as checked by `check` (and
/// `rope::check`, filled by `rope::fill`), with its output and workspaces allocated for the
/// grid.
pub(super) unsafe fn main(
    module: &Module,
    shape: &Shape,
    args: &mut Args,
    stream: sys::CUstream,
    pdl: bool,
) -> Result<()> {
    let &Shape {
        name,
        grid,
        threads,
        cluster,
        ..
    } = shape;
    // SAFETY: every block waits (griddepcontrol.wait) for the kernel before reading anything
    // the kernel before writes, so a programmatic launch is safe; the kernel takes one
    // `AttnArgs` by value, mirrored field for field by `Args` (repr(C)), proved for the
    // problem (this function's contract). A cluster launch is of the short-context kernel,
    // whose blocks take their split from the grid and agree on how many of them work: all of
    // a cluster's blocks reach its two cluster barriers, or (one working block) none does.
    unsafe { enqueue(module, name, (grid, threads, cluster), args, stream, pdl) }
}

/// Enqueue kernel `name`, which takes one `AttnArgs` (`args`), on `grid` with `threads`
/// threads, as clusters of `cluster` blocks along x when more than 1.
///
/// # Safety
/// As [`Module::launch_in`] for that kernel with `args` as its one parameter (the callers'
/// contracts prove it).
unsafe fn enqueue(
    module: &Module,
    name: &'static str,
    (grid, threads, cluster): ((u32, u32, u32), u32, u32),
    args: &mut Args,
    stream: sys::CUstream,
    pdl: bool,
) -> Result<()> {
    let mut params: [*mut c_void; 1] = [(args as *mut Args).cast()];
    // SAFETY: forwarded contract; `params` points at `args`, alive for the call.
    unsafe {
        module.launch_in(
            name,
            (grid, threads, 0),
            stream,
            &mut params,
            (pdl, cluster),
        )
    }
}

/// The split's workspaces (partial outputs and their max/sum pairs), when there is more than one split.
pub(super) fn split_workspaces(
    nrows: i64,
    nsplit: i64,
    d: i64,
    dev: Device,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    Ok(if nsplit > 1 {
        let so = vec![nrows * nsplit * d];
        let sm = vec![nrows * nsplit * 2];
        (
            Some(crate::cuda::memory::empty_strided(
                so,
                vec![1],
                dtype::FLOAT32,
                dev,
            )?),
            Some(crate::cuda::memory::empty_strided(
                sm,
                vec![1],
                dtype::FLOAT32,
                dev,
            )?),
        )
    } else {
        (None, None)
    })
}

/// Enqueue the combine kernel, which reduces the splits' partials into `out`.
///
/// # Safety
/// `parts` must hold the `nrows` x `nsplit` partials of an attention launch
/// queued before on `stream`, and `out` must have the `nrows` rows the combine writes.
pub(super) unsafe fn launch_combine(
    module: &Module,
    combine: &'static str,
    stream: sys::CUstream,
    out: &Tensor,
    parts: (&Tensor, &Tensor),
    (nrows, nsplit, args): (i64, i64, &Args),
) -> Result<()> {
    let (po, pm) = parts;
    let mut pop = po.data_ptr() as u64;
    let mut pmp = pm.data_ptr() as u64;
    let mut outp = out.data_ptr() as u64;
    let mut nr = nrows;
    let mut ns = nsplit as i32;
    let (mut hq, mut lq, mut bthd) = (args.hq, args.lq, args.out_bthd);
    let mut cparams: [*mut c_void; 8] = [
        (&mut pop as *mut u64).cast(),
        (&mut pmp as *mut u64).cast(),
        (&mut outp as *mut u64).cast(),
        (&mut nr as *mut i64).cast(),
        (&mut ns as *mut i32).cast(),
        (&mut hq as *mut i32).cast(),
        (&mut lq as *mut i32).cast(),
        (&mut bthd as *mut i32).cast(),
    ];
    let cgrid = (((nrows + 3) / 4) as u32, 1, 1);
    let pdl = crate::kernels::pdl_enabled();
    // SAFETY: (ptr, ptr, ptr, i64, int, int, int, int) as the combine kernel takes; the
    // workspaces hold nrows x nsplit partials written by the attention launch before it on the
    // same stream (this function's contract); every block waits for it first (PDL).
    unsafe { module.launch_in(combine, (cgrid, 128, 0), stream, &mut cparams, (pdl, 1))? };
    Ok(())
}
