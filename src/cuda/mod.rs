//! The CUDA layer, on cudarc's driver API with dynamic loading (so the crate
//! builds and runs, without a GPU, on machines with no CUDA installed).
//!
//! Layering follows cudarc: `cudarc::driver::sys` (raw) and
//! `cudarc::driver::result` (`Result`-returning) underneath, and here RAII
//! types: [`DeviceState`] (primary context + memory pool of one device),
//! [`ContextGuard`], [`stream::CudaStream`], [`memory::DeviceAlloc`],
//! [`memory::PinnedBuffer`], [`event::Event`], [`graph::GraphExec`]; and
//! [`copy`], the one place where bytes and tensors are copied.

pub(crate) mod arena;
pub(crate) mod copy;
pub(crate) mod event;
mod gate;
pub(crate) mod graph;
pub(crate) mod host_register;
pub(crate) mod memory;
pub(crate) mod outside;
pub(crate) mod stream;

pub(crate) use gate::{Gate, GatedDrop, LegacyGate};

use crate::error::{Error, ErrorKind, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

/// Turn a driver status into our error, naming the call.
pub(crate) fn check(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(driver_error(result::DriverError(r), what))
}

/// Turn a driver error into our error, naming the call.
pub(crate) fn driver_error(e: result::DriverError, what: &str) -> Error {
    let name = e
        .error_name()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let msg = format!("{what} failed: {name}");
    let kind = match e.0 {
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
        sys::CUresult::CUDA_ERROR_NO_DEVICE
        | sys::CUresult::CUDA_ERROR_INVALID_DEVICE
        | sys::CUresult::CUDA_ERROR_NOT_INITIALIZED => ErrorKind::NoDevice,
        _ => ErrorKind::Cuda,
    };
    Error::from_cuda(kind, e.0 as i32, msg)
}

/// The driver, loaded and initialized once, with the device count read once.
static DRIVER: OnceLock<std::result::Result<i32, String>> = OnceLock::new();

fn init_driver() -> std::result::Result<i32, String> {
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    if !unsafe { sys::is_culib_present() } {
        return Err(
            "no CUDA driver: libcuda.so could not be loaded (is an NVIDIA driver installed?)"
                .into(),
        );
    }
    // cudarc panics when a symbol is missing from libcuda: keep that inside.
    match std::panic::catch_unwind(result::init) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("no CUDA device: cuInit failed: {e:?}")),
        Err(_) => return Err("no CUDA driver: libcuda lacks a required symbol".into()),
    }
    result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e:?}"))
}

/// Load and initialize the CUDA driver once. Without `libcuda` or without a
/// device this is a `NoDevice` error, never a panic.
pub(crate) fn driver() -> Result<()> {
    device_count().map(|_| ())
}

/// Number of CUDA devices visible to the process (read once).
pub(crate) fn device_count() -> Result<i32> {
    DRIVER
        .get_or_init(init_driver)
        .clone()
        .map_err(Error::no_device)
}

/// The driver's CUDA version (e.g. 13000 for 13.0).
pub(crate) fn driver_version() -> Result<i32> {
    driver()?;
    let mut v: i32 = 0;
    check(
        // SAFETY: out-pointer to a local.
        unsafe { sys::cuDriverGetVersion(&mut v) },
        "cuDriverGetVersion",
    )?;
    Ok(v)
}

/// One device: its primary context (retained for the life of the process, the
/// same context the CUDA runtime and the `.so` use) and the library's
/// stream-ordered memory pool.
#[derive(Debug)]
pub(crate) struct DeviceState {
    pub(crate) ordinal: i32,
    pub(crate) device: sys::CUdevice,
    pub(crate) ctx: sys::CUcontext,
    pub(crate) pool: sys::CUmemoryPool,
    /// Work that may use the legacy default stream (the library's external allocations and
    /// ordered copies; the generated code's loads, eager runs and deletes, which call
    /// `cudaMemcpy`/`cudaFree`) holds it shared; a stream capture holds it exclusively: the
    /// library's streams are blocking streams, so legacy-stream work on another thread
    /// during a capture would invalidate it (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`).
    gate: LegacyGate,
}

impl DeviceState {
    /// Shared use of the device for work that may touch the legacy default stream (none
    /// needed on a thread that is capturing: it holds the device exclusively); see [`Gate`].
    pub(crate) fn legacy_use(&self) -> Gate<std::sync::RwLockReadGuard<'_, ()>> {
        self.gate.shared(graph::capturing())
    }

    /// Exclusive use of the device for one stream capture.
    pub(crate) fn exclusive_capture(&self) -> Gate<std::sync::RwLockWriteGuard<'_, ()>> {
        self.gate.exclusive()
    }
}

// SAFETY: driver handles are usable from any thread.
unsafe impl Send for DeviceState {}
// SAFETY: as above; the handles are never mutated after creation.
unsafe impl Sync for DeviceState {}

/// Per-ordinal state, created on first use; the table is sized once by the
/// device count, so a lookup takes no lock and makes no driver call.
type DeviceSlot = OnceLock<Result<Arc<DeviceState>>>;
static DEVICES: OnceLock<Box<[DeviceSlot]>> = OnceLock::new();

fn create_device(ordinal: i32) -> Result<Arc<DeviceState>> {
    let dev = result::device::get(ordinal).map_err(|e| driver_error(e, "cuDeviceGet"))?;
    // SAFETY: `dev` is a valid device; the retained primary context is kept for the process.
    let ctx = unsafe { result::primary_ctx::retain(dev) }
        .map_err(|e| driver_error(e, "cuDevicePrimaryCtxRetain"))?;
    let pool = {
        let _g = ContextGuard::bind(ctx)?;
        memory::create_pool(ordinal)?
    };
    Ok(Arc::new(DeviceState {
        ordinal,
        device: dev,
        ctx,
        pool,
        gate: LegacyGate::default(),
    }))
}

/// The state of device `ordinal`, created on first use. Fails with a clear
/// error naming the device count when the ordinal does not exist.
pub(crate) fn device(ordinal: i32) -> Result<Arc<DeviceState>> {
    let n = device_count()?;
    if ordinal < 0 || ordinal >= n {
        return Err(Error::no_device(format!(
            "no CUDA device {ordinal}: this machine has {n} device(s)"
        )));
    }
    let table = DEVICES.get_or_init(|| (0..n).map(|_| OnceLock::new()).collect());
    table
        .get(ordinal as usize)
        .ok_or_else(|| Error::internal(format!("device table has no slot {ordinal}")))?
        .get_or_init(|| create_device(ordinal))
        .clone()
}

/// Binds a context to the calling thread and restores the previous one when
/// dropped (so the caller's context, and the runtime's current device, are
/// left as they were).
pub(crate) struct ContextGuard {
    prev: Option<sys::CUcontext>,
    changed: bool,
}

impl ContextGuard {
    pub(crate) fn bind(ctx: sys::CUcontext) -> Result<ContextGuard> {
        let prev = result::ctx::get_current().map_err(|e| driver_error(e, "cuCtxGetCurrent"))?;
        let changed = prev != Some(ctx);
        if changed {
            // SAFETY: `ctx` is a retained primary context.
            unsafe { result::ctx::set_current(ctx) }
                .map_err(|e| driver_error(e, "cuCtxSetCurrent"))?;
        }
        Ok(ContextGuard { prev, changed })
    }

    pub(crate) fn device(d: &DeviceState) -> Result<ContextGuard> {
        ContextGuard::bind(d.ctx)
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if self.changed {
            let prev = self.prev.unwrap_or(std::ptr::null_mut());
            // SAFETY: restoring the context that was current before (or none).
            if let Err(e) = unsafe { result::ctx::set_current(prev) } {
                log::warn!("could not restore the caller's CUDA context: {e:?}");
            }
        }
    }
}

/// Make device `ordinal`'s primary context current on this thread (no
/// restore: the AOTI device guards restore explicitly).
pub(crate) fn set_current_device(ordinal: i32) -> Result<()> {
    let d = device(ordinal)?;
    // SAFETY: a retained primary context.
    unsafe { result::ctx::set_current(d.ctx) }.map_err(|e| driver_error(e, "cuCtxSetCurrent"))
}

/// The context current on this thread, if any.
pub(crate) fn current_context() -> Result<Option<sys::CUcontext>> {
    driver()?;
    result::ctx::get_current().map_err(|e| driver_error(e, "cuCtxGetCurrent"))
}

/// Make `ctx` (or no context) current on this thread.
pub(crate) fn restore_context(ctx: Option<sys::CUcontext>) -> Result<()> {
    let c = ctx.unwrap_or(std::ptr::null_mut());
    // SAFETY: a context that was current before (or none).
    unsafe { result::ctx::set_current(c) }.map_err(|e| driver_error(e, "cuCtxSetCurrent"))
}

/// The ordinal of the device whose context is current on this thread (0 if none).
pub(crate) fn current_device_ordinal() -> i32 {
    if driver().is_err() {
        return 0;
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: out-pointer to a local.
    let r = unsafe { sys::cuCtxGetDevice(&mut dev) };
    if r == sys::CUresult::CUDA_SUCCESS {
        dev
    } else {
        0
    }
}

/// Where a pointer's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PointerKind {
    /// Ordinary (pageable) host memory, unknown to CUDA.
    Pageable,
    /// Page-locked host memory registered with CUDA.
    Pinned,
    /// Device memory of the given ordinal (managed memory counts as device).
    Device(i32),
}

/// Look up what kind of memory `ptr` is. One `cuPointerGetAttributes` call, which (unlike
/// `cuPointerGetAttribute`) reports a pointer CUDA does not know with default values instead
/// of `CUDA_ERROR_INVALID_VALUE`: probing host memory leaves no error for compute-sanitizer
/// to count.
pub(crate) fn pointer_kind(ptr: *const c_void) -> Result<PointerKind> {
    driver()?;
    if ptr.is_null() {
        return Ok(PointerKind::Pageable);
    }
    let mut mem_type: u32 = 0;
    let mut ordinal: i32 = -1;
    let mut attrs = [
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    ];
    let mut data: [*mut c_void; 2] = [
        (&mut mem_type as *mut u32).cast(),
        (&mut ordinal as *mut i32).cast(),
    ];
    // SAFETY: two attributes, each with an out-pointer to a local of the attribute's type.
    let r = unsafe {
        sys::cuPointerGetAttributes(
            2,
            attrs.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr as sys::CUdeviceptr,
        )
    };
    check(r, "cuPointerGetAttributes")?;
    Ok(classify(mem_type, ordinal))
}

/// The kind of memory from its `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (0 when CUDA does not know
/// the pointer) and device ordinal.
fn classify(mem_type: u32, ordinal: i32) -> PointerKind {
    if mem_type == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
        PointerKind::Pinned
    } else if mem_type == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32
        || mem_type == sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED as u32
    {
        PointerKind::Device(ordinal)
    } else {
        PointerKind::Pageable
    }
}

/// Whether `ptr` is device memory.
pub(crate) fn is_device_pointer(ptr: *const c_void) -> Result<bool> {
    Ok(matches!(pointer_kind(ptr)?, PointerKind::Device(_)))
}

/// Free and total device memory of `ordinal`, from the driver.
pub(crate) fn mem_info(ordinal: i32) -> Result<(usize, usize)> {
    let d = device(ordinal)?;
    let _g = ContextGuard::device(&d)?;
    result::mem_get_info().map_err(|e| driver_error(e, "cuMemGetInfo"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_classification() {
        assert_eq!(classify(0, -1), PointerKind::Pageable);
        assert_eq!(
            classify(sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32, 0),
            PointerKind::Pinned
        );
        assert_eq!(
            classify(sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32, 2),
            PointerKind::Device(2)
        );
    }

    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        // On a machine without a GPU this must be a clear NoDevice error; on a
        // GPU machine it succeeds. Either way it must not panic.
        match device_count() {
            Ok(n) => assert!(n >= 0),
            Err(e) => {
                assert!(e.kind() == crate::error::ErrorKind::NoDevice, "{e}");
                assert!(e.to_string().contains("no CUDA"), "{e}");
            }
        }
        assert!(device(-1).is_err());
        assert!(device(1 << 20).is_err());
    }
}
