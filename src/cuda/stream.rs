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

/// Block the host until `raw`'s queued work is done (counted as a host
/// wait). The one place the library synchronizes a stream.
pub(crate) fn synchronize(raw: sys::CUstream) -> Result<()> {
    stats::record(Event::HostWait);
    // SAFETY: a live stream of the current context, or the legacy default stream (null).
    check(
        unsafe { sys::cuStreamSynchronize(raw) },
        "cuStreamSynchronize",
    )
}

/// A CUDA stream owned by the library, destroyed when the last `Arc` goes.
#[derive(Debug)]
pub(crate) struct CudaStream {
    raw: sys::CUstream,
    pub(crate) device: Arc<DeviceState>,
    /// Held while a method enqueues work on the stream (an execute, a capture, a destroy's
    /// frees, a synchronize): methods sharing the stream on several threads must not enqueue
    /// into each other's captures.
    work: std::sync::Mutex<()>,
}

// SAFETY: a CUstream may be used from any thread.
unsafe impl Send for CudaStream {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for CudaStream {}

impl CudaStream {
    /// A new blocking stream (it orders with the legacy default stream, which
    /// the `.so`'s own `cudaMemcpy` calls use) on `device`.
    pub(crate) fn new(device: Arc<DeviceState>) -> Result<Arc<CudaStream>> {
        let _g = ContextGuard::device(&device)?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local; the device's context is current.
            unsafe { sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_DEFAULT as u32) },
            "cuStreamCreate",
        )?;
        Ok(Arc::new(CudaStream {
            raw,
            device,
            work: std::sync::Mutex::new(()),
        }))
    }

    pub(crate) fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Block the host until the stream's work is done (counted as a host wait).
    pub(crate) fn synchronize(&self) -> Result<()> {
        synchronize(self.raw)
    }

    /// Exclusive use of the stream for enqueueing one call's work (see `work`).
    /// The thread's log records wait until the lock is released (see [`super::Gate`]).
    pub(crate) fn lock_work(&self) -> super::Gate<std::sync::MutexGuard<'_, ()>> {
        let logs = crate::logging::Hold::new();
        super::Gate {
            _guard: Some(self.work.lock().unwrap_or_else(|p| p.into_inner())),
            _logs: logs,
        }
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        // The driver defers the destruction until queued work is done; no wait here.
        match ContextGuard::device(&self.device) {
            Ok(_g) => {
                // SAFETY: the stream is owned by self and destroyed once.
                let r = unsafe { sys::cuStreamDestroy_v2(self.raw) };
                if let Err(e) = check(r, "cuStreamDestroy") {
                    log::warn!("{e}");
                }
            }
            Err(e) => log::warn!("leaking a CUDA stream: {e}"),
        }
    }
}

static SHARED: Mutex<Vec<(i32, Weak<CudaStream>)>> = Mutex::new(Vec::new());

/// The process-wide shared stream of `device`, created when no handle holds it.
pub(crate) fn shared_stream(device: &Arc<DeviceState>) -> Result<Arc<CudaStream>> {
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

/// A thread's current stream for one device: the raw handle, and the owning
/// `Arc` when it is one of ours (so allocations can keep it alive).
#[derive(Debug, Clone)]
pub(crate) struct Current {
    pub(crate) raw: sys::CUstream,
    pub(crate) owner: Option<Arc<CudaStream>>,
}

thread_local! {
    static CURRENT: RefCell<HashMap<i32, Current>> = RefCell::new(HashMap::new());
    /// The stream the caller wants this thread's executes ordered on (see [`CallerStream`]).
    static CALLER: std::cell::Cell<Option<CallerStream>> = const { std::cell::Cell::new(None) };
}

/// A stream the caller owns (raw `CUstream`; null is the legacy default stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallerStream(pub(crate) sys::CUstream);

/// Set (or clear, with `None`) this thread's caller stream; returns the previous one.
pub(crate) fn set_caller_stream(s: Option<CallerStream>) -> Option<CallerStream> {
    CALLER.with(|c| c.replace(s))
}

/// This thread's caller stream, if one is set.
pub(crate) fn caller_stream() -> Option<CallerStream> {
    CALLER.with(|c| c.get())
}

/// The context a stream belongs to.
pub(crate) fn stream_context(s: sys::CUstream) -> Result<sys::CUcontext> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    check(
        // SAFETY: out-pointer to a local; the driver validates the stream handle.
        unsafe { sys::cuStreamGetCtx(s, &mut ctx) },
        "cuStreamGetCtx",
    )?;
    Ok(ctx)
}

/// This thread's current stream for `device` (the legacy default stream, null, if none was set).
pub(crate) fn current(device: i32) -> Current {
    CURRENT.with(|c| {
        c.borrow().get(&device).cloned().unwrap_or(Current {
            raw: std::ptr::null_mut(),
            owner: None,
        })
    })
}

/// Sets this thread's current stream for a device until dropped, then restores the previous one.
#[derive(Debug)]
pub(crate) struct StreamScope {
    device: i32,
    prev: Option<Current>,
}

impl StreamScope {
    pub(crate) fn enter(
        device: i32,
        raw: sys::CUstream,
        owner: Option<Arc<CudaStream>>,
    ) -> StreamScope {
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
