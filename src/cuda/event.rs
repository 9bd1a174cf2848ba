//! RAII CUDA events (timing disabled: they only mark progress on a stream).

use super::{check, ContextGuard, DeviceState};
use crate::error::Result;
use crate::stats::{self, Event as StatEvent};
use cudarc::driver::sys;
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct Event {
    raw: sys::CUevent,
    device: Arc<DeviceState>,
}

// SAFETY: a CUevent may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    pub(crate) fn new(device: Arc<DeviceState>) -> Result<Event> {
        let _g = ContextGuard::device(&device)?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local; the device's context is current.
            unsafe {
                sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
            },
            "cuEventCreate",
        )?;
        Ok(Event { raw, device })
    }

    /// Mark the current end of `stream`'s queued work.
    pub(crate) fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: live event and stream.
        check(
            unsafe { sys::cuEventRecord(self.raw, stream) },
            "cuEventRecord",
        )
    }

    /// Whether the work before the last `record` has finished (never blocks).
    pub(crate) fn is_done(&self) -> Result<bool> {
        // SAFETY: live event.
        match unsafe { sys::cuEventQuery(self.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => check(other, "cuEventQuery").map(|_| false),
        }
    }

    /// Make `stream` wait (on the device, not the host) for the work before the last `record`.
    pub(crate) fn wait_on(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: live event and stream.
        check(
            unsafe { sys::cuStreamWaitEvent(stream, self.raw, 0) },
            "cuStreamWaitEvent",
        )
    }

    /// Block until the recorded work finished (counted as a host wait).
    pub(crate) fn synchronize(&self) -> Result<()> {
        stats::record(StatEvent::HostWait);
        // SAFETY: live event.
        check(
            unsafe { sys::cuEventSynchronize(self.raw) },
            "cuEventSynchronize",
        )
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::device(&self.device) {
            // SAFETY: owned event, destroyed once.
            let r = unsafe { sys::cuEventDestroy_v2(self.raw) };
            if let Err(e) = check(r, "cuEventDestroy") {
                log::warn!("{e}");
            }
        }
    }
}
