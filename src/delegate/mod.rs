//! The delegate: [`CudaHandle`], one per loaded method — init ([`load`]),
//! execute ([`execute`]), destroy — and its IO policy.
//!
//! Execution is ordered by the method's stream (shared by every method that
//! asks for the shared stream, through an `Arc`); the host waits only when
//! data must reach host memory:
//! - inputs in device memory are used in place; host inputs are copied into
//!   reusable pinned staging buffers and then to the device asynchronously
//!   ([`io`], [`staging`]);
//! - outputs left on the device cost no wait; outputs copied to host memory
//!   go device → pinned staging asynchronously, then one wait, then a host
//!   `memcpy` ([`outputs`]);
//! - methods configured with CUDA graphs replay graphs keyed by their input
//!   signatures ([`graphs`], the graph wing);
//! - weights come as one packed blob or one storage per constant
//!   ([`per_fqn`], ExecuTorch 1.5); with weight sharing, identical constants
//!   are held once ([`sharing`]);
//! - with a caller stream set on the thread, the execute starts after the
//!   caller's queued work and the caller's stream waits for its end;
//! - every call into a method sets its per-thread state through one
//!   [`scope::RunScope`].

mod execute;
pub(crate) mod graphs;
pub(crate) mod io;
mod load;
pub(crate) mod outputs;
pub(crate) mod per_fqn;
mod run;
mod scope;
pub(crate) mod sharing;
pub(crate) mod staging;

pub(crate) use load::{InitParams, Weights};
pub use per_fqn::NamedDataLookup;
pub(crate) use per_fqn::{fetch as fetch_named, Source};

use crate::aoti::Container;
use crate::config::MethodConfig;
use crate::cuda::event::Event;
use crate::cuda::stream::CudaStream;
use crate::cuda::{self, memory, DeviceState};
use crate::error::Result;
use crate::stats::{Counters, Stats};
use crate::tensor::Tensor;
use graphs::GraphEngine;
use scope::RunScope;
use sharing::SharedConstants;
use staging::Staging;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

struct State {
    // Field order is drop order: graphs and outputs before the container, the container
    // before the constants it was given.
    /// The graph wing (methods configured with CUDA graphs only).
    graphs: Option<GraphEngine>,
    /// Outputs left on the device by the last execute.
    kept_outputs: Vec<Tensor>,
    container: Option<Arc<Container>>,
    shared: SharedConstants,
    staging: Staging,
    /// Ordering with a caller's stream: one event on each side.
    caller_sync: Option<(Event, Event)>,
    executes: u64,
}

/// One loaded method.
pub(crate) struct CudaHandle {
    /// Keeps the library's own kernels (the int4 matmul) loaded on this device while the
    /// method lives; dropped last.
    _kernels: crate::kernels::Lease,
    method: String,
    device: Arc<DeviceState>,
    stream: Arc<CudaStream>,
    config: MethodConfig,
    counters: Arc<Counters>,
    num_inputs: usize,
    num_outputs: usize,
    state: Mutex<State>,
}

impl CudaHandle {
    pub(crate) fn num_inputs(&self) -> usize {
        self.num_inputs
    }
    pub(crate) fn num_outputs(&self) -> usize {
        self.num_outputs
    }
    pub(crate) fn method_name(&self) -> &str {
        &self.method
    }
    pub(crate) fn config(&self) -> &MethodConfig {
        &self.config
    }
    pub(crate) fn stream_raw(&self) -> *mut c_void {
        self.stream.raw().cast()
    }
    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot()
    }
    /// Number of CUDA graphs the method holds now.
    pub(crate) fn graph_count(&self) -> usize {
        self.lock().graphs.as_ref().map_or(0, |g| g.len())
    }

    /// The method's state; the thread's log records wait until it is released (no user
    /// callback runs while a library lock is held).
    fn lock(&self) -> Locked<'_> {
        let logs = crate::logging::Hold::new();
        Locked {
            // A panic while holding the lock leaves plain data behind; keep going.
            guard: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            _logs: logs,
        }
    }

    /// Block until the method's queued work is done (counted as a host wait).
    pub(crate) fn synchronize(&self) -> Result<()> {
        let _run = RunScope::without_stream(&self.device, &self.counters)?;
        let _work = self.stream.lock_work();
        self.stream.synchronize()
    }

    /// Copy bytes in the order of this method's stream; waits only when `dst` is host memory.
    ///
    /// # Safety
    /// `dst` and `src` must each be valid for `n` bytes (host or device memory).
    pub(crate) unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        n: usize,
    ) -> Result<()> {
        let _run = RunScope::without_stream(&self.device, &self.counters)?;
        let _work = self.stream.lock_work();
        // SAFETY: forwarded contract.
        unsafe { cuda::copy::copy_bytes(dst, src, n, self.stream.raw()) }
    }

    /// Delete the container and free everything the method owns. Idempotent.
    pub(crate) fn destroy(&self) -> Result<()> {
        let mut st = self.lock();
        let Some(container) = st.container.take() else {
            return Ok(());
        };
        let _work = self.stream.lock_work();
        // Lock order: stream, then the device's legacy-stream gate (the container's delete
        // frees with the CUDA runtime).
        let _legacy = self.device.legacy_use();
        {
            let _run = RunScope::enter(&self.device, &self.counters, &self.stream)?;
            st.kept_outputs.clear();
            if let Some(g) = st.graphs.as_mut() {
                g.clear();
            }
            drop(container);
            st.shared = SharedConstants::default();
        }
        let _run = RunScope::without_stream(&self.device, &self.counters)?;
        // Pinned staging may still be the source of a copy in flight: wait before freeing it.
        let synced = self.stream.synchronize();
        st.staging.clear();
        st.caller_sync = None;
        sharing::prune();
        if let Err(e) = memory::trim_pool(&self.device) {
            log::warn!("{e}");
        }
        synced
    }
}

/// A method's locked state. Field order is drop order: the lock is released before the
/// records kept meanwhile go to the log sink.
struct Locked<'a> {
    guard: MutexGuard<'a, State>,
    _logs: crate::logging::Hold,
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for CudaHandle {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            log::error!("destroying the method {:?}: {e}", self.method);
        }
    }
}
