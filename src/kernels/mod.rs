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

pub mod attention;
pub mod gemv;
pub mod int4mm;
#[cfg(test)]
pub mod philox_ref; // also included by tests/sort_rand_gpu.rs
pub mod sort_rand;

use crate::cuda::{self, check, ContextGuard, DeviceState};
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
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
pub const PTX_ENV: &str = "ET_CUDA_KERNELS_PTX";
/// The same for the decode kernels (`kernels/decode.ptx`).
pub const DECODE_PTX_ENV: &str = "ET_CUDA_DECODE_KERNELS_PTX";
/// The hashes `kernels/build.sh` recorded for the source and the artifacts.
#[cfg(test)]
pub static RECORD: &str = include_str!("../../kernels/int4mm.sha256");

/// The SHA-256 (hex) recorded for `what` ("source", "ptx", "fatbin") in [`RECORD`].
#[cfg(test)]
pub fn recorded_sha256(what: &str) -> Option<&'static str> {
    RECORD.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(what)).then(|| it.next()).flatten()
    })
}

/// Which image a module was loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Image {
    Fatbin,
    Ptx,
}

/// A loaded module and what the launch code needs to know about its device.
#[derive(Debug)]
pub struct Module {
    raw: sys::CUmodule,
    /// The decode kernels' module (`DECODE_FATBIN`), functions named `et_*`.
    decode: sys::CUmodule,
    device: Arc<DeviceState>,
    pub sm_count: i32,
    /// Functions looked up so far, with the dynamic shared memory they allow.
    functions: Mutex<HashMap<&'static str, (usize, i32)>>,
}

// SAFETY: module and function handles are usable from any thread.
unsafe impl Send for Module {}
// SAFETY: as above; the function cache is behind a mutex.
unsafe impl Sync for Module {}

fn attribute(dev: sys::CUdevice, a: sys::CUdevice_attribute, what: &str) -> Result<i32> {
    let mut v: i32 = 0;
    // SAFETY: out-pointer to a local i32.
    check(unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) }, what)?;
    Ok(v)
}

/// Bytes aligned for the driver (fatbin headers want 8-byte alignment; PTX a NUL).
fn aligned_copy(bytes: &[u8], nul: bool) -> Vec<u64> {
    let n = bytes.len() + usize::from(nul);
    let mut v = vec![0u64; n.div_ceil(8)];
    // SAFETY: `v` has at least `bytes.len()` bytes; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len())
    };
    v
}

fn load_image(image: Image) -> Result<sys::CUmodule> {
    load_image_of(image, FATBIN, PTX_ENV)
}

fn load_image_of(image: Image, fatbin: &[u8], ptx_env: &str) -> Result<sys::CUmodule> {
    let mut module: sys::CUmodule = std::ptr::null_mut();
    match image {
        Image::Fatbin => {
            let buf = aligned_copy(fatbin, false);
            // SAFETY: a complete fatbin image in 8-byte aligned memory, alive for the call.
            let r = unsafe { sys::cuModuleLoadData(&mut module, buf.as_ptr().cast()) };
            check(
                r,
                &format!("cuModuleLoadData(fatbin, {} bytes)", fatbin.len()),
            )?;
        }
        Image::Ptx => {
            let path = std::env::var(ptx_env).unwrap_or_default();
            let ptx = std::fs::read(&path)
                .map_err(|e| Error::invalid_argument(format!("{ptx_env}={path:?}: {e}")))?;
            let buf = aligned_copy(&ptx, true);
            let mut log = vec![0u8; 16 * 1024];
            let mut opts = [
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            ];
            let mut vals: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
            // SAFETY: NUL-terminated PTX; the option values are a live buffer and its size
            // (passed by value in the pointer, as the driver API specifies).
            let r = unsafe {
                sys::cuModuleLoadDataEx(
                    &mut module,
                    buf.as_ptr().cast(),
                    opts.len() as u32,
                    opts.as_mut_ptr(),
                    vals.as_mut_ptr(),
                )
            };
            if let Err(e) = check(r, &format!("cuModuleLoadDataEx({path})")) {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                return Err(e.context(&format!("JIT log: {}", text.trim())));
            }
        }
    }
    Ok(module)
}

impl Module {
    fn load(device: Arc<DeviceState>) -> Result<Module> {
        let _g = ContextGuard::device(&device)?;
        let major = attribute(
            device.device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
        )?;
        let minor = attribute(
            device.device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)",
        )?;
        let sm_count = attribute(
            device.device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
        )?;
        if major < 8 {
            return Err(Error::cuda(format!(
                "the int4 kernels need compute capability 8.0 or newer (bf16 tensor cores); cuda:{} is {major}.{minor}",
                device.ordinal
            )));
        }
        let force_ptx = std::env::var_os(PTX_ENV).is_some_and(|v| !v.is_empty());
        let (raw, image) = if force_ptx {
            (load_image(Image::Ptx)?, Image::Ptx)
        } else {
            (load_image(Image::Fatbin)?, Image::Fatbin)
        };
        let decode_ptx = std::env::var_os(DECODE_PTX_ENV).is_some_and(|v| !v.is_empty());
        let decode_image = if decode_ptx {
            Image::Ptx
        } else {
            Image::Fatbin
        };
        let decode = match load_image_of(decode_image, DECODE_FATBIN, DECODE_PTX_ENV) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: the int4 module just loaded, unloaded once on this error path.
                let _ = unsafe { sys::cuModuleUnload(raw) };
                return Err(e.context("loading the decode kernels (kernels/decode.cu)"));
            }
        };
        log::info!(
            "int4 and decode kernels loaded on cuda:{} (sm_{major}{minor}, {sm_count} SMs) from the {image:?}",
            device.ordinal
        );
        Ok(Module {
            raw,
            decode,
            device,
            sm_count,
            functions: Mutex::new(HashMap::new()),
        })
    }

    pub fn device(&self) -> &Arc<DeviceState> {
        &self.device
    }

    /// Look a kernel up (cached) and allow it `smem` bytes of dynamic shared memory.
    fn function(&self, name: &'static str, smem: usize) -> Result<sys::CUfunction> {
        let mut f = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        let (raw, allowed) = match f.get(name) {
            Some(&(raw, allowed)) => (raw as sys::CUfunction, allowed),
            None => {
                // The decode kernels' entry points are `et_*`; the int4 ones `int4mm_*`.
                let owner = if name.starts_with("et_") {
                    self.decode
                } else {
                    self.raw
                };
                let cname = CString::new(name)
                    .map_err(|_| Error::internal(format!("kernel name {name:?}")))?;
                let mut raw: sys::CUfunction = std::ptr::null_mut();
                check(
                    // SAFETY: a live module and a NUL-terminated name; out-pointer to a local.
                    unsafe { sys::cuModuleGetFunction(&mut raw, owner, cname.as_ptr()) },
                    &format!("cuModuleGetFunction({name})"),
                )?;
                f.insert(name, (raw as usize, 48 * 1024));
                (raw, 48 * 1024)
            }
        };
        if smem as i32 > allowed {
            check(
                // SAFETY: a live function of this module.
                unsafe {
                    sys::cuFuncSetAttribute(
                        raw,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        smem as i32,
                    )
                },
                &format!("cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES={smem})"),
            )?;
            f.insert(name, (raw as usize, smem as i32));
        }
        Ok(raw)
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
        let f = self.function(name, smem)?;
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

impl Drop for Module {
    fn drop(&mut self) {
        match ContextGuard::device(&self.device) {
            Ok(_g) => {
                // Kernels queued on any stream of the context may still run this code.
                // SAFETY: the device's primary context is current.
                if let Err(e) = check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize") {
                    log::warn!("before unloading the int4 kernels: {e}");
                }
                for m in [self.raw, self.decode].into_iter().filter(|m| !m.is_null()) {
                    // SAFETY: a module loaded by `Module::load`, unloaded once.
                    if let Err(e) = check(unsafe { sys::cuModuleUnload(m) }, "cuModuleUnload") {
                        log::warn!("{e}");
                    }
                }
            }
            Err(e) => log::warn!(
                "leaking the int4 kernel module of cuda:{}: {e}",
                self.device.ordinal
            ),
        }
    }
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
        let released = with_slot(self.ordinal, |s| {
            s.leases = s.leases.saturating_sub(1);
            if s.leases == 0 {
                s.module.take()
            } else {
                None
            }
        });
        // Unloaded (by Module's Drop) outside the lock, once no launch holds it.
        drop(released);
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

    use sha2::{Digest, Sha256};

    fn hex(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn committed_device_code_matches_its_source() {
        let src = include_bytes!("../../kernels/int4mm.cu");
        let recorded =
            super::recorded_sha256("source").expect("kernels/int4mm.sha256 has a source line");
        assert_eq!(
            hex(&Sha256::digest(src)),
            recorded,
            "kernels/int4mm.cu changed since kernels/build.sh last ran: rebuild the PTX/fatbin with it (nvcc 13.0) and commit them"
        );
        assert_eq!(
            hex(&Sha256::digest(super::FATBIN)),
            super::recorded_sha256("fatbin").unwrap_or_default(),
            "kernels/int4mm.fatbin is not the one kernels/build.sh recorded"
        );
        assert_eq!(
            hex(&Sha256::digest(super::PTX)),
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
        let record = |what: &str| {
            super::DECODE_RECORD.lines().find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(what)).then(|| it.next()).flatten()
            })
        };
        let src = include_bytes!("../../kernels/decode.cu");
        assert_eq!(
            Some(hex(&Sha256::digest(src)).as_str()),
            record("source"),
            "kernels/decode.cu changed since kernels/build.sh last ran: rebuild (KERNELS=decode kernels/build.sh, nvcc 13.0) and commit"
        );
        assert_eq!(
            Some(hex(&Sha256::digest(super::DECODE_FATBIN)).as_str()),
            record("fatbin"),
            "kernels/decode.fatbin is not the one kernels/build.sh recorded"
        );
        assert_eq!(
            Some(hex(&Sha256::digest(super::DECODE_PTX)).as_str()),
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
        for name in super::gemv::KERNELS.iter().chain(super::attention::KERNELS) {
            assert!(
                entries.contains(name),
                "{name} not in decode.ptx: {entries:?}"
            );
        }
        assert_eq!(
            entries.len(),
            super::gemv::KERNELS.len() + super::attention::KERNELS.len()
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
