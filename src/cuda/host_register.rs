//! Page-locking host memory the library does not own, for the duration of a copy.

use super::{check, ContextGuard, DeviceState};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

/// Host bytes page-locked for the driver (`cuMemHostRegister`) while this value lives, so
/// that copies from them run as DMA at the copy engine's bandwidth instead of through the
/// driver's pageable staging.
pub(crate) struct HostRegistration<'a> {
    base: *mut c_void,
    device: Arc<DeviceState>,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> HostRegistration<'a> {
    /// Register the whole pages under `bytes` (read-only where the driver supports it, e.g.
    /// for a read-only file mapping); `None` when the driver refuses (the copies then stay
    /// pageable: only slower).
    pub(crate) fn new(device: &Arc<DeviceState>, bytes: &'a [u8]) -> Option<HostRegistration<'a>> {
        const PAGE: usize = 4096;
        if bytes.is_empty() {
            return None;
        }
        let start = bytes.as_ptr() as usize / PAGE * PAGE;
        let end = (bytes.as_ptr() as usize + bytes.len()).div_ceil(PAGE) * PAGE;
        let _g = ContextGuard::device(device).ok()?;
        let base = start as *mut c_void;
        for flags in [sys::CU_MEMHOSTREGISTER_READ_ONLY, 0] {
            // SAFETY: the pages under `bytes` are mapped (the slice is live) and stay so while
            // `'a` lasts; registration only pins them, it writes nothing.
            let r = unsafe { sys::cuMemHostRegister_v2(base, end - start, flags) };
            if r == sys::CUresult::CUDA_SUCCESS {
                return Some(HostRegistration {
                    base,
                    device: device.clone(),
                    _bytes: std::marker::PhantomData,
                });
            }
            log::debug!(
                "cuMemHostRegister({} bytes, flags {flags}): {r:?}",
                end - start
            );
        }
        None
    }
}

impl Drop for HostRegistration<'_> {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::device(&self.device) {
            // Copies queued on the legacy stream (the generated code's) have read it.
            // SAFETY: the legacy default stream of the current context.
            let r = unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) };
            if let Err(e) = check(r, "cuStreamSynchronize") {
                log::warn!("{e}");
            }
            // SAFETY: registered by `new`, unregistered once, after the copies that read it.
            let r = unsafe { sys::cuMemHostUnregister(self.base) };
            if let Err(e) = check(r, "cuMemHostUnregister") {
                log::warn!("{e}");
            }
        }
    }
}
