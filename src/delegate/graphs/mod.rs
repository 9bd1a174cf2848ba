//! The graph wing: CUDA graphs per method, keyed by the input shape
//! signature (dtype, sizes and strides of every input).
//!
//! The first execute of a shape runs eagerly (it loads the generated code's
//! kernels and folds constants, neither of which can be captured); the
//! second captures the run into a graph and launches it; later ones replay
//! it on the method's stream, and nothing waits. Device inputs are captured
//! where the caller has them and replayed only while the caller passes the
//! same addresses, each input checked as an eager run checks it (sizes,
//! strides, bytes readable); once one moves, the shape is captured again over
//! input buffers of the graph's own, into which its inputs (and host inputs
//! always) are copied on the method's stream before each launch. A capture
//! is made twice ([`capture`]): the first traces the run's allocations, the
//! second takes them from blocks of the graph's own planned from that trace
//! ([`crate::cuda::arena`]), so the graph holds kernels and copies only and
//! its outputs keep fixed addresses across replays. A shape whose capture
//! fails runs eagerly from then on. At most `capacity` graphs are kept per
//! method; the least recently used goes ([`cache`]).

pub(crate) mod cache;
mod capture;

use super::io::{self, CopyCtx, InputArg};
use super::run::Runner;
use crate::cuda::arena::Arena;
use crate::cuda::graph::GraphExec;
use crate::cuda::PointerKind;
use crate::dtype::Code;
use crate::error::{Error, Result};
use crate::stats::{self, Event};
use crate::tensor::Tensor;
use cache::{GraphCache, Plan};
use std::sync::Arc;

/// The input signature a graph was captured for: dtype, sizes, strides of each input.
pub(crate) type ShapeKey = Vec<(Code, Vec<i64>, Vec<i64>)>;

/// The shape signature of a set of inputs.
pub(crate) fn shape_key(inputs: &[InputArg]) -> ShapeKey {
    inputs
        .iter()
        .map(|i| (i.dtype, i.sizes.clone(), i.strides.clone()))
        .collect()
}

/// One captured graph.
pub(crate) struct GraphEntry {
    // Field order is drop order: the outputs (graph allocations, freed stream-ordered) and the
    // input buffers go before the executable.
    /// The outputs the graph writes (fixed addresses).
    pub(crate) outputs: Vec<Tensor>,
    /// What the graph reads its inputs from: buffers of its own (device memory of the
    /// pool, owned here) or, where `in_place[i]` is set, the caller's device memory at
    /// that address (borrowed: replayed only when the caller passes that address again).
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) in_place: Vec<Option<usize>>,
    /// The blocks its intermediates and outputs live in (`None`: allocation nodes); held
    /// for as long as the graph may run.
    pub(crate) _arena: Option<Arc<Arena>>,
    pub(crate) exec: GraphExec,
}

/// The graphs of one method and the policy that runs them.
pub(crate) struct GraphEngine {
    cache: GraphCache<GraphEntry>,
    /// Graphs keep their memory in blocks of their own (not allocation nodes).
    private_memory: bool,
}

impl GraphEngine {
    pub(crate) fn new(capacity: usize, private_memory: bool) -> GraphEngine {
        GraphEngine {
            cache: GraphCache::new(capacity),
            private_memory,
        }
    }

    /// Number of graphs held now.
    pub(crate) fn len(&self) -> usize {
        self.cache.len()
    }

    /// Drop every graph (the caller orders their launches before the frees).
    pub(crate) fn clear(&mut self) {
        self.cache.clear();
    }

    /// Run `inputs` as the cache says: replay, capture then launch, or eagerly.
    ///
    /// # Safety
    /// Every input's `data` must be valid for reads of its `nbytes` (host or
    /// device memory) until the work this call queues has run.
    pub(crate) unsafe fn execute(
        &mut self,
        r: &Runner<'_>,
        inputs: &[InputArg],
        ctx: &mut CopyCtx<'_>,
    ) -> Result<Vec<Tensor>> {
        let key = shape_key(inputs);
        let mut plan = self.cache.plan(&key);
        if plan == Plan::Replay && !self.same_addresses(&key, inputs) {
            // A device input moved: from now on this shape copies its inputs into buffers
            // of its own graph. Queued replays of the old graph stay ordered before the
            // frees of its memory.
            drop(self.cache.remove(&key));
            self.cache.mark_moving(&key);
            plan = Plan::Capture;
        }
        match plan {
            // SAFETY: forwarded contract.
            Plan::Replay => unsafe { self.replay(r, &key, inputs, ctx) },
            // SAFETY: forwarded contract.
            Plan::Capture => unsafe { self.capture_and_launch(r, key, inputs, ctx) },
            // SAFETY: forwarded contract.
            Plan::Eager => unsafe { r.eager(inputs, ctx) },
        }
    }

    /// Whether every input the graph of `key` reads in place comes at its captured address.
    fn same_addresses(&mut self, key: &ShapeKey, inputs: &[InputArg]) -> bool {
        self.cache.get(key).is_some_and(|e| {
            e.in_place
                .iter()
                .zip(inputs)
                .all(|(at, input)| at.is_none_or(|a| a == input.data as usize))
        })
    }

    /// Capture `key`, keep the graph and launch it; a failed capture runs eagerly.
    ///
    /// # Safety
    /// As for [`GraphEngine::execute`].
    unsafe fn capture_and_launch(
        &mut self,
        r: &Runner<'_>,
        key: ShapeKey,
        inputs: &[InputArg],
        ctx: &mut CopyCtx<'_>,
    ) -> Result<Vec<Tensor>> {
        let in_place = !self.cache.is_moving(&key);
        // SAFETY: forwarded contract.
        match unsafe { capture::capture(r, inputs, ctx, in_place, self.private_memory)? } {
            Some(entry) => {
                entry.exec.launch(ctx.stream)?;
                let outs = entry.outputs.clone();
                // An evicted graph's buffers are freed in stream order after its last
                // launch; dropping it here is safe.
                drop(self.cache.insert(key, entry));
                Ok(outs)
            }
            None => {
                self.cache.mark_failed(key);
                // SAFETY: forwarded contract.
                unsafe { r.eager(inputs, ctx) }
            }
        }
    }

    /// Replay the graph of `key`: check every input as an eager run would, copy
    /// the ones it does not read in place into its buffers, launch.
    ///
    /// # Safety
    /// As for [`GraphEngine::execute`].
    unsafe fn replay(
        &mut self,
        r: &Runner<'_>,
        key: &ShapeKey,
        inputs: &[InputArg],
        ctx: &mut CopyCtx<'_>,
    ) -> Result<Vec<Tensor>> {
        let dev = r.device.ordinal;
        let entry = self
            .cache
            .get(key)
            .ok_or_else(|| Error::internal("graph vanished from the cache"))?;
        for (i, ((input, buf), at)) in inputs
            .iter()
            .zip(&entry.inputs)
            .zip(&entry.in_place)
            .enumerate()
        {
            // The same checks as an eager run: the graph reads this shape's bytes.
            let c = input
                .check(dev)
                .map_err(|e| e.context(&format!("input {i}")))?;
            let dst = buf.data_ptr();
            if at.is_some() {
                if c.nbytes > 0 && !matches!(c.kind, PointerKind::Device(_)) {
                    return Err(Error::internal(format!(
                        "input {i} was captured in place but is not device memory now"
                    )));
                }
                continue;
            }
            if matches!(c.kind, PointerKind::Device(_)) && input.data == dst.cast_const() {
                continue; // already in the graph's buffer
            }
            // SAFETY: forwarded contract for the source; the buffer holds this shape's bytes.
            unsafe { io::copy_input(input, c.kind, c.nbytes, dst, ctx)? };
        }
        entry.exec.launch(ctx.stream)?;
        stats::record(Event::GraphReplay);
        Ok(entry.outputs.clone())
    }
}
