//! Device blocks allocated while a graph is being captured, outside the graph: a graph's
//! arena (`super::arena`) grows with them when the capture asks for what its plan did not
//! foresee, instead of the allocation becoming a node of the graph.

use super::stream::CudaStream;
use super::{check, driver_error, ContextGuard, DeviceState};
use crate::error::Result;
use crate::stats::{self, Event};
use cudarc::driver::{result, sys};
use std::sync::Arc;

/// A device block for a graph's arena, allocated while this thread captures: plain
/// `cuMemAlloc` (the capture-safe stream-ordered allocation would become a node of the
/// graph), with this thread's capture mode relaxed for the call as the driver requires.
/// Freed, after `stream` has finished its work, when the arena goes.
pub(crate) fn block(
    device: &Arc<DeviceState>,
    n: usize,
    stream: sys::CUstream,
    owner: &Option<Arc<CudaStream>>,
) -> Result<super::arena::Block> {
    let _g = ContextGuard::device(device)?;
    let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    check(
        // SAFETY: exchanges this thread's capture mode with a local; restored below.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) },
        "cuThreadExchangeStreamCaptureMode",
    )?;
    // SAFETY: a plain allocation in the device's context (current).
    let r = unsafe { result::malloc_sync(n) };
    let restored = check(
        // SAFETY: puts back the mode the exchange above returned.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) },
        "cuThreadExchangeStreamCaptureMode",
    );
    let r = r.map_err(|e| driver_error(e, "cuMemAlloc").with_suffix(&format!(": {n} bytes")));
    let ptr = after_restore(r, restored, |ptr| {
        // SAFETY: allocated just above and never handed out; freed once.
        let _ = unsafe { result::free_sync(ptr) };
    })?;
    let block = OutsideBlock {
        ptr,
        device: device.clone(),
        stream,
        _stream: owner.clone(),
    };
    stats::record_for(None, Event::DriverAlloc(n as u64));
    Ok(super::arena::Block {
        ptr,
        _keep: Box::new(SizedOutsideBlock(block, n)),
    })
}

/// The allocation made with this thread's capture mode exchanged, once the mode was put
/// back (`restored`): a failed restore is an error on either path (the thread would go on
/// capturing in the relaxed mode), reported with the allocation's own error when both
/// failed; an allocation that succeeded is freed (`free`) when the restore did not.
fn after_restore(
    alloc: Result<sys::CUdeviceptr>,
    restored: Result<()>,
    free: impl FnOnce(sys::CUdeviceptr),
) -> Result<sys::CUdeviceptr> {
    match (alloc, restored) {
        (Ok(ptr), Ok(())) => Ok(ptr),
        (Ok(ptr), Err(e)) => {
            free(ptr);
            Err(e)
        }
        (Err(a), Ok(())) => Err(a),
        (Err(a), Err(e)) => Err(a.with_suffix(&format!(
            "; restoring this thread's stream capture mode failed too: {e}"
        ))),
    }
}

/// A block from [`block`].
struct OutsideBlock {
    ptr: sys::CUdeviceptr,
    device: Arc<DeviceState>,
    stream: sys::CUstream,
    /// Keeps the library's stream alive until the free.
    _stream: Option<Arc<CudaStream>>,
}
struct SizedOutsideBlock(OutsideBlock, usize);

// SAFETY: a device address and driver handles, usable from any thread.
unsafe impl Send for SizedOutsideBlock {}
// SAFETY: as above.
unsafe impl Sync for SizedOutsideBlock {}

impl Drop for SizedOutsideBlock {
    fn drop(&mut self) {
        let b = &self.0;
        match ContextGuard::device(&b.device) {
            Ok(_g) => {
                // The graph's launches that use the block are queued on its stream.
                if let Err(e) = check(
                    // SAFETY: a live stream (kept by `_stream`, or the legacy one).
                    unsafe { sys::cuStreamSynchronize(b.stream) },
                    "cuStreamSynchronize",
                ) {
                    log::warn!("{e}");
                }
                // SAFETY: allocated by cuMemAlloc in `block`, freed once, unused now.
                if let Err(e) = unsafe { result::free_sync(b.ptr) } {
                    log::error!("cuMemFree of {} bytes failed: {e:?}", self.1);
                }
            }
            Err(e) => log::error!("leaking {} device bytes: {e}", self.1),
        }
        stats::record_for(None, Event::DriverFree(self.1 as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// Issue 31: a failed restore of the capture mode is reported on the allocation's error
    /// path too (it was ignored there), and frees the block on the other.
    #[test]
    fn a_failed_restore_is_never_ignored() {
        let freed = std::cell::Cell::new(None);
        let free = |p| freed.set(Some(p));
        assert_eq!(after_restore(Ok(7), Ok(()), free).unwrap(), 7);
        assert_eq!(freed.get(), None);
        let e = after_restore(Ok(7), Err(Error::cuda("restore")), free).unwrap_err();
        assert!(e.to_string().contains("restore"), "{e}");
        assert_eq!(freed.get(), Some(7));
        let e = after_restore(
            Err(Error::cuda("cuMemAlloc failed")),
            Ok(()),
            |_| unreachable!(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("cuMemAlloc failed"), "{e}");
        let e = after_restore(
            Err(Error::cuda("cuMemAlloc failed")),
            Err(Error::cuda("cuThreadExchangeStreamCaptureMode failed")),
            |_| unreachable!(),
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("cuMemAlloc failed")
                && m.contains("capture mode failed too")
                && m.contains("cuThreadExchangeStreamCaptureMode"),
            "{m}"
        );
    }
}
