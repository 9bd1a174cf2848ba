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

/// sm_90 SASS + compute_80 PTX, from `kernels/build.sh`.
pub static FATBIN: &[u8] = include_bytes!("../../kernels/int4mm.fatbin");
/// compute_80 PTX text (not NUL-terminated), from `kernels/build.sh` (tests only).
#[cfg(test)]
pub static PTX: &[u8] = include_bytes!("../../kernels/int4mm.ptx");

/// The decode kernels (`kernels/decode.cu`: GEMV, decode attention), a second
/// image loaded beside the int4 one into the same [`Module`]; their entry points
/// start with `et_`.
pub static DECODE_FATBIN: &[u8] = include_bytes!("../../kernels/decode.fatbin");
/// compute_80 PTX of the decode kernels (tests only).
#[cfg(test)]
pub static DECODE_PTX: &[u8] = include_bytes!("../../kernels/decode.ptx");
/// Hashes `kernels/build.sh` recorded for `kernels/decode.*`.
#[cfg(test)]
pub static DECODE_RECORD: &str = include_str!("../../kernels/decode.sha256");

/// The environment variable naming a PTX file to load instead of the fatbin.
pub const PTX_ENV: &str = crate::switches::KERNELS_PTX;
/// The same for the decode kernels (`kernels/decode.ptx`).
pub const DECODE_PTX_ENV: &str = crate::switches::DECODE_KERNELS_PTX;
/// The hashes `kernels/build.sh` recorded for the source and the artifacts.
#[cfg(test)]
pub static RECORD: &str = include_str!("../../kernels/int4mm.sha256");

/// The SHA-256 (hex) recorded for `what` ("source", "ptx", "fatbin") in [`RECORD`].
#[cfg(test)]
pub fn recorded_sha256(what: &str) -> Option<&'static str> {
    recorded_in(RECORD, what)
}

/// The SHA-256 (hex) recorded for `what` in one `kernels/<name>.sha256` record.
#[cfg(test)]
pub fn recorded_in(record: &'static str, what: &str) -> Option<&'static str> {
    record.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(what)).then(|| it.next()).flatten()
    })
}

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
    fn record_names_all_three_hashes() {
        for what in ["source", "ptx", "fatbin"] {
            let h = recorded_sha256(what).unwrap_or_default();
            assert_eq!(h.len(), 64, "{what}: {h:?}");
        }
        assert!(recorded_sha256("nothing").is_none());
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
    fn committed_device_code_matches_its_source() {
        let src = include_bytes!("../../kernels/int4mm.cu");
        let recorded =
            super::recorded_sha256("source").expect("kernels/int4mm.sha256 has a source line");
        assert_eq!(
            super::sha256_hex(src),
            recorded,
            "kernels/int4mm.cu changed since kernels/build.sh last ran: rebuild the PTX/fatbin with it (nvcc 13.0) and commit them"
        );
        assert_eq!(
            super::sha256_hex(super::FATBIN),
            super::recorded_sha256("fatbin").unwrap_or_default(),
            "kernels/int4mm.fatbin is not the one kernels/build.sh recorded"
        );
        assert_eq!(
            super::sha256_hex(super::PTX),
            super::recorded_sha256("ptx").unwrap_or_default(),
            "kernels/int4mm.ptx is not the one kernels/build.sh recorded"
        );
        assert!(
            super::RECORD.contains("nvcc 13.0 "),
            "the artifacts must come from nvcc 13.0: {}",
            super::RECORD
        );
    }

    #[test]
    fn committed_decode_kernels_match_their_source() {
        let record = |what: &str| super::recorded_in(super::DECODE_RECORD, what);
        let src = include_bytes!("../../kernels/decode.cu");
        assert_eq!(
            Some(super::sha256_hex(src).as_str()),
            record("source"),
            "kernels/decode.cu changed since kernels/build.sh last ran: rebuild (KERNELS=decode kernels/build.sh, nvcc 13.0) and commit"
        );
        assert_eq!(
            Some(super::sha256_hex(super::DECODE_FATBIN).as_str()),
            record("fatbin"),
            "kernels/decode.fatbin is not the one kernels/build.sh recorded"
        );
        assert_eq!(
            Some(super::sha256_hex(super::DECODE_PTX).as_str()),
            record("ptx"),
            "kernels/decode.ptx is not the one kernels/build.sh recorded"
        );
        assert!(super::DECODE_RECORD.contains("nvcc 13.0 "));
        let ptx = std::str::from_utf8(super::DECODE_PTX).expect("PTX is text");
        assert!(ptx.lines().any(|l| l.trim() == ".target sm_80"));
        assert!(
            ptx.lines().any(|l| l.trim() == ".version 9.0"),
            "PTX ISA must be 9.0 (CUDA 13.0)"
        );
        assert_eq!(&super::DECODE_FATBIN[..4], &[0x50, 0xED, 0x55, 0xBA]);
        // Every kernel the launch code names is in the PTX, and no int4 name starts with `et_`.
        let entries: Vec<&str> = ptx
            .lines()
            .filter_map(|l| l.split(".entry ").nth(1))
            .map(|r| r.trim_end_matches('(').trim())
            .collect();
        for name in super::gemv::KERNELS
            .iter()
            .chain(super::attention::KERNELS)
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
                + super::attention::KERNELS.len()
                + super::linear::kernels().len()
        );
        assert!(entries.iter().all(|e| e.starts_with("et_")));
    }

    #[test]
    fn ptx_targets_compute_80_with_an_isa_the_cuda_13_0_driver_knows() {
        let ptx = std::str::from_utf8(super::PTX).expect("PTX is text");
        assert!(
            ptx.lines().any(|l| l.trim() == ".target sm_80"),
            "PTX target"
        );
        let version = ptx
            .lines()
            .find_map(|l| l.trim().strip_prefix(".version "))
            .expect(".version line");
        let (major, minor) = version.split_once('.').expect("major.minor");
        let v = (major.parse::<u32>().unwrap(), minor.parse::<u32>().unwrap());
        // CUDA 13.0 writes and JITs PTX ISA 9.0; a newer nvcc would write a newer one.
        assert!(
            v <= (9, 0),
            "PTX ISA {version} is newer than CUDA 13.0's 9.0"
        );
        // The fatbin starts with the fatbin magic (0xBA55ED50, little-endian).
        assert_eq!(&super::FATBIN[..4], &[0x50, 0xED, 0x55, 0xBA]);
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
