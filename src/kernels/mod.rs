//! The library's own device code: CUDA C in `kernels/`, compiled ahead of
//! time by `kernels/build.sh` (nvcc 13.0) into an sm_90 + compute_80 fatbin
//! (embedded here with `include_bytes!`, so the crate builds without a CUDA
//! toolkit) and a compute_80 PTX file (committed beside it, for inspection
//! and for testing the JIT path; not embedded: the fatbin carries the same
//! PTX, compressed, and the library stays small).
//!
//! Loading: one `CUmodule` per device (in the device's primary context, the
//! one everything else here uses), loaded by `cuModuleLoadData` on first use
//! — the driver picks the sm_90 SASS on an H100/H200 and JIT-compiles the PTX
//! for any other GPU of compute capability 8.0 or newer. With
//! `ET_CUDA_KERNELS_PTX=<path of kernels/int4mm.ptx>` that PTX file is loaded
//! instead (JIT even on sm_90, with the JIT's error log in the error), to
//! exercise that path.
//!
//! Lifetime: a [`Lease`] counts a user of a device's module (the delegate
//! takes one per loaded method). Leases do not load anything; the first
//! launch does. When the last lease of a device is dropped the module is
//! released: its `cuModuleUnload` runs once no launch holds it any more,
//! after a `cuCtxSynchronize` of the device's context, so no queued kernel
//! still uses it. Launches outside any lease (a caller that drives the shim
//! directly, like the GPU harness) load the module too and keep it loaded
//! until the last lease of that device goes, or until the process exits if
//! no lease is ever taken and dropped.
//!
//! The [`Module`] type itself (image choice, loading, the function cache,
//! launches, unloading) is in `cumodule`.

pub mod attention;
mod cumodule;
pub mod gemm;
pub mod gemv;
pub mod images;
pub mod int4mm;
pub mod linear;
#[cfg(test)]
pub mod philox_ref; // also included by tests/sort_rand_gpu.rs
pub mod sample;
pub mod sort_rand;

use crate::cuda;
use crate::error::Result;
#[cfg(test)]
use cumodule::aligned_copy;
pub use cumodule::{pdl_enabled, set_pdl, Module, Resident};

/// A parameter slot for `cuLaunchKernel`: the address of one argument value.
pub(crate) fn param<T>(v: &mut T) -> *mut std::ffi::c_void {
    (v as *mut T).cast()
}
use std::sync::{Arc, Mutex};

/// The environment variable naming a PTX file to load instead of the int4 fatbin.
pub const PTX_ENV: &str = crate::switches::KERNELS_PTX;
/// The same for the decode kernels (`kernels/decode.ptx`).
pub const DECODE_PTX_ENV: &str = crate::switches::DECODE_KERNELS_PTX;

/// A contiguous CPU tensor of `sizes` (the argument checks' tests).
#[cfg(test)]
pub fn cpu_tensor(dt: i32, sizes: &[i64]) -> crate::tensor::Tensor {
    crate::cuda::memory::empty_strided(
        sizes.to_vec(),
        crate::tensor::contiguous_strides(sizes),
        dt,
        crate::tensor::Device::Cpu,
    )
    .expect("cpu tensor")
}

/// SHA-256 of `bytes`, lowercase hex (the tests' check of the committed device code).
#[cfg(test)]
pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::aoti::loader::hex(&crate::aoti::loader::sha256(bytes))
}

#[derive(Default)]
struct Slot {
    leases: usize,
    module: Option<Arc<Module>>,
}

static SLOTS: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

fn with_slot<R>(ordinal: i32, f: impl FnOnce(&mut Slot) -> R) -> R {
    let mut v = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    let i = ordinal.max(0) as usize;
    if v.len() <= i {
        v.resize_with(i + 1, Slot::default);
    }
    f(&mut v[i])
}

/// The module of device `ordinal`, loaded on first use (see the module docs for its lifetime).
pub fn module(ordinal: i32) -> Result<Arc<Module>> {
    if let Some(m) = with_slot(ordinal, |s| s.module.clone()) {
        return Ok(m);
    }
    let device = cuda::device(ordinal)?;
    // Loaded outside the lock (the JIT can take a while); a racing loader's copy is dropped.
    let loaded = Arc::new(Module::load(device)?);
    Ok(with_slot(ordinal, |s| {
        s.module.get_or_insert(loaded).clone()
    }))
}

/// Whether device `ordinal` has its module loaded now (for tests).
#[cfg(test)]
pub fn is_loaded(ordinal: i32) -> bool {
    with_slot(ordinal, |s| s.module.is_some())
}

/// Number of leases held on device `ordinal`.
#[cfg(test)]
pub fn lease_count(ordinal: i32) -> usize {
    with_slot(ordinal, |s| s.leases)
}

/// One user of a device's kernels; see the module docs. Dropping the last
/// lease of a device releases its module.
#[derive(Debug)]
pub struct Lease {
    ordinal: i32,
}

impl Lease {
    /// Count a user of device `ordinal`'s module. Loads nothing, never fails.
    pub fn acquire(ordinal: i32) -> Lease {
        with_slot(ordinal, |s| s.leases += 1);
        Lease { ordinal }
    }
}

impl Clone for Lease {
    fn clone(&self) -> Lease {
        Lease::acquire(self.ordinal)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (released, last) = with_slot(self.ordinal, |s| {
            s.leases = s.leases.saturating_sub(1);
            if s.leases == 0 {
                (s.module.take(), true)
            } else {
                (None, false)
            }
        });
        // Unloaded (by Module's Drop) outside the lock, once no launch holds it.
        drop(released);
        // The device's last method is gone: so is the memory the sampler keeps for it.
        if last {
            if let Err(e) = sample::release(self.ordinal) {
                log::warn!("freeing the sampler's memory on cuda:{}: {e}", self.ordinal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_count_per_device_and_load_nothing() {
        let d = 7; // a device no other test uses
        assert_eq!(lease_count(d), 0);
        let a = Lease::acquire(d);
        let b = a.clone();
        assert_eq!(lease_count(d), 2);
        assert!(!is_loaded(d));
        drop(a);
        assert_eq!(lease_count(d), 1);
        drop(b);
        assert_eq!(lease_count(d), 0);
        assert!(!is_loaded(d));
    }

    #[test]
    fn aligned_copy_keeps_bytes_and_adds_nul() {
        let v = aligned_copy(b"abc", true);
        // SAFETY: reading 4 bytes of a Vec<u64> of at least one element.
        let s = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), 4) };
        assert_eq!(s, b"abc\0");
        assert_eq!(v.as_ptr() as usize % 8, 0);
    }

    #[test]
    fn the_decode_image_has_every_kernel_the_launches_name() {
        let ptx = super::images::DECODE.ptx_text();
        // Every kernel the launch code names is in the PTX, and no int4 name starts with `et_`.
        let entries: Vec<&str> = ptx
            .lines()
            .filter_map(|l| l.split(".entry ").nth(1))
            .map(|r| r.trim_end_matches('(').trim())
            .collect();
        for name in super::gemv::KERNELS
            .iter()
            .chain(&super::attention::kernels())
            .chain(&super::linear::kernels())
        {
            assert!(
                entries.contains(name),
                "{name} not in decode.ptx: {entries:?}"
            );
        }
        assert_eq!(
            entries.len(),
            super::gemv::KERNELS.len()
                + super::attention::kernels().len()
                + super::linear::kernels().len()
        );
        assert!(entries.iter().all(|e| e.starts_with("et_")));
    }

    #[test]
    fn lease_outlives_nothing_and_loads_nothing_without_a_gpu() {
        let l = super::Lease::acquire(5);
        assert_eq!(super::lease_count(5), 1);
        assert!(!super::is_loaded(5));
        drop(l);
        assert_eq!(super::lease_count(5), 0);
        if crate::cuda::device_count().is_err() {
            // No driver: loading is a clean error, not a panic.
            let e = super::module(0).expect_err("no driver here");
            assert!(e.to_string().contains("no CUDA"), "{e}");
        }
    }
}
