//! Launching a module's kernels: plain, programmatic dependent (PDL) and clustered launches,
//! and what the driver's occupancy calculator says about a kernel (blocks per SM, whether its
//! clusters fit).

use super::Module;
use crate::cuda::{check, ContextGuard};
use crate::error::Result;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::Hash;
use std::sync::Mutex;

impl Module {
    /// Whether kernel `name`, launched with `block` threads and no dynamic shared memory, runs
    /// as clusters of `cluster` blocks along x: compute capability 9.0 or newer, and the
    /// driver's occupancy calculator places at least one such cluster on the device (cached per
    /// name and size). False when the driver cannot say.
    pub fn clusters_fit(&self, name: &'static str, block: u32, cluster: u32) -> bool {
        if cluster < 2 || self.cc_major < 9 {
            return false;
        }
        cached(&self.clusters, (name, cluster), || {
            self.function(name, 0).ok().is_some_and(|f| {
                let Ok(_g) = ContextGuard::device(&self.device) else {
                    return false;
                };
                let mut attr = cluster_attr(cluster);
                let config = launch_config(
                    (cluster, 1, 1),
                    block,
                    0,
                    std::ptr::null_mut(),
                    &mut attr,
                    1,
                );
                // cudarc panics when a driver symbol is missing (a driver before CUDA 11.8,
                // which no sm_90 device has): keep that inside.
                let r = std::panic::catch_unwind(|| {
                    let mut n: std::ffi::c_int = 0;
                    // SAFETY: a live function of this module; `config` and its attribute
                    // outlive the call; out-pointer to a local.
                    let r = unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f, &config) };
                    (r, n)
                });
                matches!(r, Ok((sys::CUresult::CUDA_SUCCESS, n)) if n > 0)
            })
        })
    }

    /// Blocks of kernel `name`, launched with `threads` threads and no dynamic shared memory,
    /// that one SM holds at once (the driver's occupancy calculator; cached per name). 1 when
    /// the driver cannot say (the launch itself reports real errors).
    pub fn blocks_per_sm(&self, name: &'static str, threads: u32) -> i32 {
        cached(&self.occupancy, name, || {
            let n = self.function(name, 0).ok().and_then(|f| {
                let _g = ContextGuard::device(&self.device).ok()?;
                // cudarc panics when a driver symbol is missing: keep that inside.
                let r = std::panic::catch_unwind(|| {
                    let mut n: std::ffi::c_int = 0;
                    // SAFETY: a live function of this module; out-pointer to a local.
                    let r = unsafe {
                        sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                            &mut n,
                            f,
                            threads as i32,
                            0,
                        )
                    };
                    (r, n)
                });
                match r {
                    Ok((sys::CUresult::CUDA_SUCCESS, n)) => Some(n),
                    _ => None,
                }
            });
            n.unwrap_or(1).max(1)
        })
    }

    /// Enqueue `name` on `stream` (the device's context must be current).
    ///
    /// # Safety
    /// `params` must point at one value of the kernel's exact parameter type
    /// per parameter, and the pointers among them must be valid for what the
    /// kernel reads and writes with the given grid.
    pub unsafe fn launch(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: u32,
        smem: usize,
        stream: sys::CUstream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_in(name, (grid, block, smem), stream, params, (false, 1)) }
    }

    /// As [`Module::launch`]; with `pdl`, as a programmatic dependent launch (the kernel may
    /// start before the one before it on `stream` ends, and must wait for it with
    /// `griddepcontrol.wait` before touching anything that kernel writes or reads); with
    /// `cluster > 1`, the grid's blocks grouped in thread block clusters of `cluster` blocks
    /// along x (`grid.0` a multiple of it; check [`Module::clusters_fit`] first).
    ///
    /// # Safety
    /// As [`Module::launch`]; with `pdl`, every block of the kernel must execute
    /// `griddepcontrol.wait` before such accesses, and before it exits; with `cluster > 1`, the
    /// kernel must be one that takes its blocks' cluster from the grid (every block reaching its
    /// cluster barriers).
    pub unsafe fn launch_in(
        &self,
        name: &'static str,
        (grid, block, smem): ((u32, u32, u32), u32, usize),
        stream: sys::CUstream,
        params: &mut [*mut c_void],
        (pdl, cluster): (bool, u32),
    ) -> Result<()> {
        let f = self.function(name, smem)?;
        if pdl || cluster > 1 {
            // SAFETY: forwarded contract.
            return unsafe {
                launch_ex(f, name, (grid, block, smem), stream, params, (pdl, cluster))
            };
        }
        // SAFETY: forwarded contract; `f` belongs to this module, which outlives the call.
        let r = unsafe {
            sys::cuLaunchKernel(
                f,
                grid.0,
                grid.1,
                grid.2,
                block,
                1,
                1,
                smem as u32,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(
            r,
            &format!("cuLaunchKernel({name}, grid {grid:?}, block {block}, smem {smem})"),
        )
    }
}

/// `key`'s value in `cache`, made by `make` and kept the first time it is asked for.
fn cached<K: Eq + Hash, V: Copy>(
    cache: &Mutex<HashMap<K, V>>,
    key: K,
    make: impl FnOnce() -> V,
) -> V {
    let lock = || cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&v) = lock().get(&key) {
        return v;
    }
    let v = make();
    lock().insert(key, v);
    v
}

/// A cluster-dimension launch attribute: `x` blocks along x.
fn cluster_attr(x: u32) -> sys::CUlaunchAttribute {
    // SAFETY: a zeroed attribute is a valid value of this plain C union/struct.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = x;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    attr
}

/// A launch configuration of `n` attributes at `attrs` (which must outlive its use).
fn launch_config(
    grid: (u32, u32, u32),
    block: u32,
    smem: usize,
    stream: sys::CUstream,
    attrs: *mut sys::CUlaunchAttribute,
    n: u32,
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem as u32,
        hStream: stream,
        attrs,
        numAttrs: n,
    }
}

/// `cuLaunchKernelEx` with the programmatic stream serialization attribute (`pdl`) and clusters
/// of `cluster` blocks along x (when more than 1).
///
/// # Safety
/// As [`Module::launch_in`].
unsafe fn launch_ex(
    f: sys::CUfunction,
    name: &str,
    (grid, block, smem): ((u32, u32, u32), u32, usize),
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    (pdl, cluster): (bool, u32),
) -> Result<()> {
    // At most two attributes, on the stack (no allocation per launch): PDL, then the cluster.
    let mut attrs = [cluster_attr(cluster.max(1)); 2];
    let mut n = 0;
    if pdl {
        attrs[0].id =
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        // SAFETY: a zeroed attribute value is a valid value of this plain C union.
        attrs[0].value = unsafe { std::mem::zeroed() };
        attrs[0].value.programmaticStreamSerializationAllowed = 1;
        n = 1;
    }
    if cluster > 1 {
        attrs[n] = cluster_attr(cluster);
        n += 1;
    }
    let config = launch_config(grid, block, smem, stream, attrs.as_mut_ptr(), n as u32);
    // SAFETY: forwarded contract; `config` and `attrs` outlive the call.
    let r = unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) };
    check(
        r,
        &format!(
            "cuLaunchKernelEx({name}, grid {grid:?}, block {block}, smem {smem}, programmatic {pdl}, cluster {cluster})"
        ),
    )
}
