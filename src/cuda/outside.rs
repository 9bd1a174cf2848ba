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
    let ptr = r.map_err(|e| driver_error(e, "cuMemAlloc").with_suffix(&format!(": {n} bytes")))?;
    if let Err(e) = restored {
        // SAFETY: allocated just above and never handed out; freed once.
        let _ = unsafe { result::free_sync(ptr) };
        return Err(e);
    }
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
