//! [`RunScope`]: the one place that sets, for the duration of a call into a
//! method, every per-thread setting the layers below read — the device's
//! context, the counters allocations and copies are charged to, and the
//! stream the generated code and the shims enqueue on — and restores them all
//! when dropped (in reverse order).

use crate::cuda::stream::{CudaStream, StreamScope};
use crate::cuda::{ContextGuard, DeviceState};
use crate::error::Result;
use crate::stats::{self, Counters};
use std::sync::Arc;

/// The per-thread settings of one call into a method.
pub(crate) struct RunScope {
    // Field order is drop order: the stream first, the context last.
    _stream: Option<StreamScope>,
    _stats: stats::Scope,
    _ctx: ContextGuard,
}

impl RunScope {
    /// Bind `device`'s context, charge `counters`, and make `stream` the current stream.
    pub(crate) fn enter(
        device: &Arc<DeviceState>,
        counters: &Arc<Counters>,
        stream: &Arc<CudaStream>,
    ) -> Result<RunScope> {
        let stats = stats::Scope::enter(counters);
        let ctx = ContextGuard::device(device)?;
        Ok(RunScope {
            _stream: Some(StreamScope::enter(
                device.ordinal,
                stream.raw(),
                Some(stream.clone()),
            )),
            _stats: stats,
            _ctx: ctx,
        })
    }

    /// Bind the context and charge the counters, leaving the current stream alone.
    pub(crate) fn without_stream(
        device: &Arc<DeviceState>,
        counters: &Arc<Counters>,
    ) -> Result<RunScope> {
        let stats = stats::Scope::enter(counters);
        Ok(RunScope {
            _stream: None,
            _stats: stats,
            _ctx: ContextGuard::device(device)?,
        })
    }
}
