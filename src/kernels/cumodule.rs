//! A loaded `CUmodule` of the library's kernels: image choice (fatbin, or the PTX named by the environment), loading, the function cache, launches and unloading.
//! One loading path: [`Module::load`] (per device, the int4 and decode images, released with
//! the device's last method) and [`Resident`] (one image kept per device) both load their
//! images through `load_parts`.

use super::images::{KernelImage, DECODE, INT4};
use super::{DECODE_PTX_ENV, PTX_ENV};
use crate::cuda::{check, ContextGuard, DeviceState};
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

/// Which image a module was loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Image {
    Fatbin,
    Ptx,
}

/// Set by [`set_pdl`] (benchmarks), else `ET_CUDA_PDL` decides.
static PDL: crate::switches::Override = crate::switches::Override::unset();

/// Whether launches are programmatic dependent launches: `ET_CUDA_PDL` (`crate::switches`;
/// `0` turns them off; default on), unless [`set_pdl`] said otherwise.
pub fn pdl_enabled() -> bool {
    PDL.get(crate::switches::get().pdl)
}

/// Turn programmatic dependent launches on or off for later launches (benchmarks).
pub fn set_pdl(on: bool) {
    PDL.set(Some(on));
}

/// One image of a module to load: the embedded image, the switch's path of an image that
/// replaces it (a PTX file for the JIT path, or a fatbin) and the switch's name, and the prefix
/// of the entry points it holds ("": every name not claimed by an earlier part).
struct Part<'a> {
    image: &'static KernelImage,
    replaced_by: Option<&'a std::ffi::OsString>,
    switch: &'static str,
    prefix: &'static str,
}

/// A loaded module (one `CUmodule` per image: the entry points of each start with its
/// prefix) and what the launch code needs to know about its device.
#[derive(Debug)]
pub struct Module {
    /// (entry-point prefix, module), looked up in order.
    pub(super) parts: Vec<(&'static str, sys::CUmodule)>,
    pub(super) device: Arc<DeviceState>,
    pub sm_count: i32,
    /// The device's compute capability, major (clusters need 9).
    pub cc_major: i32,
    /// Functions looked up so far, with the dynamic shared memory they allow.
    pub(super) functions: Mutex<HashMap<&'static str, (usize, i32)>>,
    /// Blocks per SM of the kernels asked about so far ([`Module::blocks_per_sm`]).
    pub(super) occupancy: Mutex<HashMap<&'static str, i32>>,
    /// Whether clusters of that many blocks of that kernel fit ([`Module::clusters_fit`]).
    pub(super) clusters: Mutex<HashMap<(&'static str, u32), bool>>,
}

// SAFETY: module and function handles are usable from any thread.
unsafe impl Send for Module {}
// SAFETY: as above; the function cache is behind a mutex.
unsafe impl Sync for Module {}

pub(super) fn attribute(dev: sys::CUdevice, a: sys::CUdevice_attribute, what: &str) -> Result<i32> {
    let mut v: i32 = 0;
    // SAFETY: out-pointer to a local i32.
    check(unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) }, what)?;
    Ok(v)
}

/// Compute capability (major, minor) and the number of SMs of `device`.
fn capabilities(device: &DeviceState) -> Result<(i32, i32, i32)> {
    let dev = device.device;
    Ok((
        attribute(
            dev,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
        )?,
        attribute(
            dev,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)",
        )?,
        attribute(
            dev,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
        )?,
    ))
}

/// Bytes aligned for the driver (fatbin headers want 8-byte alignment; PTX a NUL).
pub(super) fn aligned_copy(bytes: &[u8], nul: bool) -> Vec<u64> {
    let n = bytes.len() + usize::from(nul);
    let mut v = vec![0u64; n.div_ceil(8)];
    // SAFETY: `v` has at least `bytes.len()` bytes; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len())
    };
    v
}

/// Load `parts` on `device` (compute capability 8.0 or newer) into one [`Module`]; `what` names
/// them in errors and the log. A part that fails unloads the ones before it.
fn load_parts(device: Arc<DeviceState>, what: &str, parts: &[Part]) -> Result<Module> {
    let _g = ContextGuard::device(&device)?;
    let (major, minor, sm_count) = capabilities(&device)?;
    if major < 8 {
        return Err(Error::cuda(format!(
            "the {what} kernels need compute capability 8.0 or newer; cuda:{} is {major}.{minor}",
            device.ordinal
        )));
    }
    // Built as the parts load, so that Drop unloads what loaded when a later part fails.
    let mut module = Module {
        parts: Vec::with_capacity(parts.len()),
        device,
        sm_count,
        cc_major: major,
        functions: Mutex::new(HashMap::new()),
        occupancy: Mutex::new(HashMap::new()),
        clusters: Mutex::new(HashMap::new()),
    };
    for p in parts {
        let raw = load_image_of(p.image.fatbin, p.replaced_by, p.switch).map_err(|e| {
            e.context(&format!(
                "loading the {what} kernels (kernels/{}.cu)",
                p.image.name
            ))
        })?;
        module.parts.push((p.prefix, raw));
    }
    let from: Vec<&str> = parts
        .iter()
        .map(|p| {
            if p.replaced_by.is_some() {
                "file"
            } else {
                "fatbin"
            }
        })
        .collect();
    log::info!(
        "{what} kernels loaded on cuda:{} (sm_{major}{minor}, {sm_count} SMs) from the {}",
        module.device.ordinal,
        from.join(" and ")
    );
    Ok(module)
}

/// The image of `fatbin`, or the PTX file `ptx` names (the switch `ptx_env` set it:
/// `crate::switches`).
fn load_image_of(
    fatbin: &[u8],
    ptx: Option<&std::ffi::OsString>,
    ptx_env: &str,
) -> Result<sys::CUmodule> {
    let image = if ptx.is_some() {
        Image::Ptx
    } else {
        Image::Fatbin
    };
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
            let path = std::path::Path::new(ptx.map_or("".as_ref(), |p| p.as_os_str()));
            let ptx = std::fs::read(path)
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
            if let Err(e) = check(r, &format!("cuModuleLoadDataEx({})", path.display())) {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                return Err(e.context(&format!("JIT log: {}", text.trim())));
            }
        }
    }
    Ok(module)
}

impl Module {
    /// The per-device module: the int4 kernels (`int4mm_*`) and the decode kernels (`et_*`),
    /// each replaceable by the file a switch names (`crate::switches`).
    pub(super) fn load(device: Arc<DeviceState>) -> Result<Module> {
        let sw = crate::switches::get();
        let parts = [
            Part {
                image: &INT4,
                replaced_by: sw.kernels_ptx.as_ref(),
                switch: PTX_ENV,
                prefix: "int4mm_",
            },
            Part {
                image: &DECODE,
                replaced_by: sw.decode_kernels_ptx.as_ref(),
                switch: DECODE_PTX_ENV,
                prefix: "et_",
            },
        ];
        load_parts(device, "int4 and decode", &parts)
    }

    pub fn device(&self) -> &Arc<DeviceState> {
        &self.device
    }

    /// The part whose entry-point prefix `name` has (the last part's "" takes any).
    fn owner(&self, name: &str) -> Result<sys::CUmodule> {
        self.parts
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
            .map(|&(_, m)| m)
            .ok_or_else(|| Error::internal(format!("no kernel image holds {name}")))
    }

    /// The address and size of the module's global variable `name` (in the part that holds it).
    pub fn global(&self, name: &str) -> Result<(sys::CUdeviceptr, usize)> {
        let owner = self.owner(name)?;
        let cname =
            CString::new(name).map_err(|_| Error::internal(format!("variable name {name:?}")))?;
        let (mut ptr, mut bytes): (sys::CUdeviceptr, usize) = (0, 0);
        let _g = ContextGuard::device(&self.device)?;
        check(
            // SAFETY: a live module and a NUL-terminated name; out-pointers to locals.
            unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut bytes, owner, cname.as_ptr()) },
            &format!("cuModuleGetGlobal({name})"),
        )?;
        Ok((ptr, bytes))
    }

    /// Look a kernel up (cached) and allow it `smem` bytes of dynamic shared memory.
    fn function(&self, name: &'static str, smem: usize) -> Result<sys::CUfunction> {
        let mut f = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        let (raw, allowed) = match f.get(name) {
            Some(&(raw, allowed)) => (raw as sys::CUfunction, allowed),
            None => {
                let owner = self.owner(name)?;
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
}

#[path = "cumodule/launch.rs"]
mod launch;

impl Drop for Module {
    fn drop(&mut self) {
        match ContextGuard::device(&self.device) {
            Ok(_g) => {
                // Kernels queued on any stream of the context may still run this code.
                // SAFETY: the device's primary context is current.
                if let Err(e) = check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize") {
                    log::warn!("before unloading the kernels: {e}");
                }
                for &(_, m) in &self.parts {
                    // SAFETY: a module loaded by `load_parts`, unloaded once.
                    if let Err(e) = check(unsafe { sys::cuModuleUnload(m) }, "cuModuleUnload") {
                        log::warn!("{e}");
                    }
                }
            }
            Err(e) => log::warn!(
                "leaking the kernel modules of cuda:{}: {e}",
                self.device.ordinal
            ),
        }
    }
}

/// A module of one image that each device loads on first use and keeps until the
/// process exits (the sort/random kernels, whose generator state must not be reset
/// behind the caller's back, and the sampler).
pub struct Resident {
    image: &'static KernelImage,
    what: &'static str,
    slots: Mutex<Vec<Option<Arc<Module>>>>,
}

impl Resident {
    pub const fn new(image: &'static KernelImage, what: &'static str) -> Resident {
        Resident {
            image,
            what,
            slots: Mutex::new(Vec::new()),
        }
    }

    /// The module of device `ordinal`, loaded under the lock on first use.
    pub fn get(&self, ordinal: i32) -> Result<Arc<Module>> {
        let i = usize::try_from(ordinal)
            .map_err(|_| Error::invalid_argument(format!("device index {ordinal} is negative")))?;
        let mut v = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() <= i {
            v.resize_with(i + 1, || None);
        }
        if let Some(m) = &v[i] {
            return Ok(m.clone());
        }
        let m = Arc::new(self.load(ordinal)?);
        v[i] = Some(m.clone());
        Ok(m)
    }

    fn load(&self, ordinal: i32) -> Result<Module> {
        let part = Part {
            image: self.image,
            replaced_by: None,
            switch: "",
            prefix: "",
        };
        load_parts(crate::cuda::device(ordinal)?, self.what, &[part])
    }
}
