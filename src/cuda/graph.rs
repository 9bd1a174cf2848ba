//! CUDA graphs: stream capture into a graph, its executable, and launch.
//!
//! Capture uses the thread-local capture mode, so other threads' CUDA calls
//! are neither blocked nor able to invalidate it. Stream-ordered allocations
//! made while capturing (`cuMemAllocFromPoolAsync`) become allocation nodes
//! of the graph: the graph owns that memory. The executable is instantiated
//! with "auto free on launch", so allocations the graph leaves unfreed (the
//! outputs) keep fixed addresses and stay valid until the next launch.

use super::{check, ContextGuard, DeviceState};
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::cell::Cell;
use std::sync::Arc;

thread_local! {
    /// Whether this thread is capturing a stream now (set by [`Capture`]).
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is capturing into a graph now.
pub(crate) fn capturing() -> bool {
    CAPTURING.with(|c| c.get())
}

/// An ongoing capture of one stream on this thread; [`Capture::finish`]
/// turns it into a graph, dropping it abandons the capture.
pub(crate) struct Capture {
    stream: sys::CUstream,
    device: Arc<DeviceState>,
    done: bool,
}

impl Capture {
    /// Start capturing `stream` (which must be one of the library's streams, not the legacy one).
    pub(crate) fn begin(device: Arc<DeviceState>, stream: sys::CUstream) -> Result<Capture> {
        if stream.is_null() {
            return Err(Error::invalid_argument(
                "the legacy default stream cannot be captured",
            ));
        }
        if capturing() {
            return Err(Error::internal(
                "a capture is already running on this thread",
            ));
        }
        let _g = ContextGuard::device(&device)?;
        check(
            // SAFETY: a live stream of the device's context.
            unsafe {
                sys::cuStreamBeginCapture_v2(
                    stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                )
            },
            "cuStreamBeginCapture",
        )?;
        CAPTURING.with(|c| c.set(true));
        Ok(Capture {
            stream,
            device,
            done: false,
        })
    }

    /// End the capture and instantiate the graph; an error when the capture
    /// was invalidated (an operation that cannot be captured ran).
    pub(crate) fn finish(mut self) -> Result<GraphExec> {
        self.done = true;
        CAPTURING.with(|c| c.set(false));
        let _g = ContextGuard::device(&self.device)?;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is capturing on this thread; out-pointer to a local.
        let r = unsafe { sys::cuStreamEndCapture(self.stream, &mut graph) };
        let graph = Graph(graph);
        check(r, "cuStreamEndCapture")?;
        if graph.0.is_null() {
            return Err(Error::cuda("cuStreamEndCapture returned no graph"));
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        let flags = u64::from(
            sys::CUgraphInstantiate_flags_enum::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0,
        );
        check(
            // SAFETY: a complete graph; out-pointer to a local.
            unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph.0, flags) },
            "cuGraphInstantiateWithFlags",
        )?;
        Ok(GraphExec {
            raw: exec,
            device: self.device.clone(),
        })
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        CAPTURING.with(|c| c.set(false));
        if let Ok(_g) = ContextGuard::device(&self.device) {
            let mut graph: sys::CUgraph = std::ptr::null_mut();
            // SAFETY: ends the capture this value began; the partial graph is destroyed.
            let _ = unsafe { sys::cuStreamEndCapture(self.stream, &mut graph) };
            drop(Graph(graph));
        }
    }
}

/// A captured graph, destroyed on drop (the executable keeps what it needs).
struct Graph(sys::CUgraph);

impl Drop for Graph {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a graph returned by cuStreamEndCapture, destroyed once.
            let _ = unsafe { sys::cuGraphDestroy(self.0) };
        }
    }
}

/// An instantiated graph.
#[derive(Debug)]
pub(crate) struct GraphExec {
    raw: sys::CUgraphExec,
    device: Arc<DeviceState>,
}

// SAFETY: a graph executable may be launched from any thread (not concurrently: the owner's lock).
unsafe impl Send for GraphExec {}
// SAFETY: as above.
unsafe impl Sync for GraphExec {}

impl GraphExec {
    /// Enqueue one replay on `stream` (no host wait).
    pub(crate) fn launch(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: a live executable of this device; a live stream of its context.
        check(
            unsafe { sys::cuGraphLaunch(self.raw, stream) },
            "cuGraphLaunch",
        )
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::device(&self.device) {
            // SAFETY: owned executable, destroyed once (the driver defers it past queued launches).
            let r = unsafe { sys::cuGraphExecDestroy(self.raw) };
            if let Err(e) = check(r, "cuGraphExecDestroy") {
                log::warn!("{e}");
            }
        }
    }
}
