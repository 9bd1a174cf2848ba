//! Streams: the RAII [`CudaStream`], the process-wide shared stream per
//! device (held by `Arc`s, destroyed with the last handle), and the
//! per-thread "current stream" per device that stream guards and execute set
//! and `aoti_torch_get_current_cuda_stream` returns.

use super::{check, ContextGuard, DeviceState};
use crate::error::Result;
use crate::stats::{self, Event};
use cudarc::driver::sys;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// A CUDA stream owned by the library, destroyed when the last `Arc` goes.
#[derive(Debug)]
pub struct CudaStream {
    raw: sys::CUstream,
    pub device: Arc<DeviceState>,
}

// SAFETY: a CUstream may be used from any thread.
unsafe impl Send for CudaStream {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for CudaStream {}

impl CudaStream {
    /// A new blocking stream (it orders with the legacy default stream, which
    /// the `.so`'s own `cudaMemcpy` calls use) on `device`.
    pub fn new(device: Arc<DeviceState>) -> Result<Arc<CudaStream>> {
        let _g = ContextGuard::device(&device)?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the device's context is current.
        check(
            unsafe { sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_DEFAULT as u32) },
            "cuStreamCreate",
        )?;
        Ok(Arc::new(CudaStream { raw, device }))
    }

    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Block the host until the stream's work is done (counted as a host wait).
    pub fn synchronize(&self) -> Result<()> {
        stats::record(Event::HostWait);
        // SAFETY: a live stream owned by self.
        check(
            unsafe { sys::cuStreamSynchronize(self.raw) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        // The driver defers the destruction until queued work is done; no wait here.
        match ContextGuard::device(&self.device) {
            // SAFETY: the stream is owned by self and destroyed once.
            Ok(_g) => {
                if let Err(e) = check(
                    unsafe { sys::cuStreamDestroy_v2(self.raw) },
                    "cuStreamDestroy",
                ) {
                    log::warn!("{e}");
                }
            }
            Err(e) => log::warn!("leaking a CUDA stream: {e}"),
        }
    }
}

static SHARED: Mutex<Vec<(i32, Weak<CudaStream>)>> = Mutex::new(Vec::new());

/// The process-wide shared stream of `device`, created when no handle holds it.
pub fn shared_stream(device: &Arc<DeviceState>) -> Result<Arc<CudaStream>> {
    let mut v = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|(_, w)| w.strong_count() > 0);
    if let Some(s) = v
        .iter()
        .find(|(d, _)| *d == device.ordinal)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(s);
    }
    let s = CudaStream::new(device.clone())?;
    v.push((device.ordinal, Arc::downgrade(&s)));
    Ok(s)
}

/// How many shared streams are alive (for tests).
pub fn live_shared_streams() -> usize {
    let v = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    v.iter().filter(|(_, w)| w.strong_count() > 0).count()
}

/// A thread's current stream for one device: the raw handle, and the owning
/// `Arc` when it is one of ours (so allocations can keep it alive).
#[derive(Debug, Clone)]
pub struct Current {
    pub raw: sys::CUstream,
    pub owner: Option<Arc<CudaStream>>,
}

thread_local! {
    static CURRENT: RefCell<HashMap<i32, Current>> = RefCell::new(HashMap::new());
}

/// This thread's current stream for `device` (the legacy default stream, null, if none was set).
pub fn current(device: i32) -> Current {
    CURRENT.with(|c| {
        c.borrow().get(&device).cloned().unwrap_or(Current {
            raw: std::ptr::null_mut(),
            owner: None,
        })
    })
}

/// Sets this thread's current stream for a device until dropped, then restores the previous one.
#[derive(Debug)]
pub struct StreamScope {
    device: i32,
    prev: Option<Current>,
}

impl StreamScope {
    pub fn enter(device: i32, raw: sys::CUstream, owner: Option<Arc<CudaStream>>) -> StreamScope {
        // A raw stream equal to the current one's keeps its owner (the `.so`'s
        // guard re-installs the stream execute already set).
        let owner = owner.or_else(|| {
            let cur = current(device);
            (cur.raw == raw).then_some(cur.owner).flatten()
        });
        let prev = CURRENT.with(|c| c.borrow_mut().insert(device, Current { raw, owner }));
        StreamScope { device, prev }
    }
}

impl Drop for StreamScope {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut m = c.borrow_mut();
            match self.prev.take() {
                Some(p) => {
                    m.insert(self.device, p);
                }
                None => {
                    m.remove(&self.device);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_scope_nests_and_restores() {
        let a = 0x10 as sys::CUstream;
        let b = 0x20 as sys::CUstream;
        assert!(current(3).raw.is_null());
        {
            let _s1 = StreamScope::enter(3, a, None);
            assert_eq!(current(3).raw, a);
            {
                let _s2 = StreamScope::enter(3, b, None);
                assert_eq!(current(3).raw, b);
                assert!(current(4).raw.is_null());
            }
            assert_eq!(current(3).raw, a);
        }
        assert!(current(3).raw.is_null());
    }
}
