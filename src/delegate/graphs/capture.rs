//! Capturing one input shape into a graph: the graph's input buffers, then
//! two captures — the first traces allocations and frees, the second takes
//! every allocation from blocks planned from that trace — with the first
//! kept when the plan does not fit (or when private memory is off).

use super::{shape_key, GraphEntry};
use crate::aoti::{self, AtenTensorHandle};
use crate::cuda::arena::{Arena, Block, Trace};
use crate::cuda::graph::{Capture, GraphExec};
use crate::cuda::memory::{self, CaptureMemory};
use crate::cuda::PointerKind;
use crate::delegate::io::{self, CopyCtx, InputArg};
use crate::delegate::run::Runner;
use crate::error::Result;
use crate::stats::{self, Event};
use crate::tensor::{Device, Memory, Tensor};
use cudarc::driver::sys::CUstream;
use std::sync::Arc;

/// Capture the run for these inputs into a graph. `Ok(None)` when the
/// capture failed (logged once; the caller runs eagerly). With `in_place`,
/// device inputs are read where the caller has them; otherwise, and for host
/// inputs, from buffers of the graph's own.
///
/// # Safety
/// Every input's `data` must be valid for reads of its `nbytes` until the
/// work this call queues has run.
pub(super) unsafe fn capture(
    r: &Runner<'_>,
    inputs: &[InputArg],
    ctx: &mut CopyCtx<'_>,
    in_place: bool,
    private_memory: bool,
) -> Result<Option<GraphEntry>> {
    // SAFETY: forwarded contract.
    let (statics, addrs) = unsafe { input_buffers(r, inputs, ctx, in_place)? };
    let trace = if private_memory {
        CaptureMemory::Trace(Trace::default())
    } else {
        CaptureMemory::Nodes
    };
    // First capture: allocations become allocation nodes, and their sequence is traced.
    // SAFETY: forwarded contract.
    let (first, trace) = unsafe { capture_once(r, &statics, ctx.stream, trace) };
    let (outs, exec) = match first {
        Ok(v) => v,
        Err(why) => {
            log::warn!(
                "method {:?}: CUDA graph capture failed for input shapes {:?}; this shape runs eagerly from now on ({why})",
                r.method,
                shape_key(inputs)
            );
            stats::record(Event::GraphFallback);
            return Ok(None);
        }
    };
    if let CaptureMemory::Trace(t) = trace {
        if !t.events.is_empty() {
            // SAFETY: forwarded contract.
            let private = unsafe { private_graph(r, &statics, ctx.stream, t) };
            let why = match private {
                Ok((outs2, exec2, arena)) => {
                    // The first graph was never launched: its allocations never existed.
                    drop((outs, exec));
                    stats::record(Event::GraphCapture);
                    return Ok(Some(GraphEntry {
                        outputs: outs2,
                        inputs: statics,
                        in_place: addrs,
                        _arena: Some(arena),
                        exec: exec2,
                    }));
                }
                Err(why) => why,
            };
            log::warn!(
                "method {:?}: graph-private memory not used for input shapes {:?}; the graph keeps allocation nodes ({why})",
                r.method,
                shape_key(inputs)
            );
        }
    }
    for t in &outs {
        if let Memory::Device(a) = &t.storage.memory {
            a.adopt_by_graph();
        }
    }
    stats::record(Event::GraphCapture);
    Ok(Some(GraphEntry {
        outputs: outs,
        inputs: statics,
        in_place: addrs,
        _arena: None,
        exec,
    }))
}

/// The tensors the graph reads its inputs from, filled before the capture
/// begins, and for each the caller's address when it is read in place.
///
/// # Safety
/// As for [`capture`].
unsafe fn input_buffers(
    r: &Runner<'_>,
    inputs: &[InputArg],
    ctx: &mut CopyCtx<'_>,
    in_place: bool,
) -> Result<(Vec<Tensor>, Vec<Option<usize>>)> {
    let dev = r.device.ordinal;
    let mut statics = Vec::with_capacity(inputs.len());
    let mut addrs = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let c = input
            .check(dev)
            .map_err(|e| e.context(&format!("input {i}")))?;
        if in_place && c.nbytes > 0 && matches!(c.kind, PointerKind::Device(_)) {
            // SAFETY: forwarded contract: device memory valid for this execute's work; the
            // graph reads it again only in executes that pass this same address.
            statics.push(unsafe { input.borrow_device(dev)? });
            addrs.push(Some(input.data as usize));
            continue;
        }
        let memory = if c.nbytes == 0 {
            Memory::Empty
        } else {
            Memory::Device(Box::new(memory::alloc_on_stream(
                r.device.clone(),
                c.nbytes,
                ctx.stream,
                Some(r.stream.clone()),
            )?))
        };
        let t = Tensor::from_memory(
            memory,
            c.nbytes,
            Device::Cuda(dev),
            input.dtype,
            input.sizes.clone(),
            input.strides.clone(),
        )?;
        // SAFETY: forwarded contract for the source; the destination has c.nbytes bytes.
        unsafe { io::copy_input(input, c.kind, c.nbytes, t.data_ptr(), ctx)? };
        statics.push(t);
        addrs.push(None);
    }
    Ok((statics, addrs))
}

/// One capture of the run over the graph's input buffers `statics`, its
/// allocations going where `memory` says; gives `memory` back (with the trace).
///
/// # Safety
/// As for [`capture`].
unsafe fn capture_once(
    r: &Runner<'_>,
    statics: &[Tensor],
    stream: CUstream,
    memory: CaptureMemory,
) -> (Result<(Vec<Tensor>, GraphExec)>, CaptureMemory) {
    let mut handles: Vec<AtenTensorHandle> = statics
        .iter()
        .map(|t| aoti::into_handle(t.clone()))
        .collect();
    // No legacy-stream work on the device meanwhile (it would invalidate the capture).
    let _exclusive = r.device.exclusive_capture();
    let cap = match Capture::begin(r.device.clone(), stream) {
        Ok(c) => c,
        Err(e) => {
            for h in handles {
                // SAFETY: handles made just above, never given away.
                drop(unsafe { aoti::from_handle(h) });
            }
            return (Err(e), memory);
        }
    };
    let before = memory::set_capture_memory(memory);
    // SAFETY: fresh handles over the graph's input buffers.
    let run = unsafe { r.run(&mut handles) };
    let exec = cap.finish();
    let memory = memory::set_capture_memory(before);
    let out = match (run, exec) {
        (Ok(outs), Ok(exec)) => Ok((outs, exec)),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    };
    (out, memory)
}

/// The graph on its own blocks: planned from `trace` (the first capture's sequence of
/// allocations and frees); an allocation the plan did not foresee (the first run of a
/// method can allocate what later runs do not, e.g. constants folded once, or free later)
/// gets a block added outside the graph. `Err`: why allocation nodes it is (for the log).
///
/// # Safety
/// As for [`capture`].
#[allow(clippy::type_complexity)]
unsafe fn private_graph(
    r: &Runner<'_>,
    statics: &[Tensor],
    stream: CUstream,
    trace: Trace,
) -> std::result::Result<(Vec<Tensor>, GraphExec, Arc<Arena>), String> {
    // SAFETY: forwarded contract.
    match unsafe { capture_private(r, statics, stream, &trace) } {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(missed)) => Err(format!(
            "{} allocation(s) got no block: {}; traced: {}",
            missed.unserved(),
            missed.describe(),
            trace.describe()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The second capture: every allocation from an arena planned from `trace`, grown for what
/// the plan did not foresee. `Ok(Err(arena))` when a block could not be added: the arena
/// tells which.
///
/// # Safety
/// As for [`capture`].
#[allow(clippy::type_complexity)]
unsafe fn capture_private(
    r: &Runner<'_>,
    statics: &[Tensor],
    stream: CUstream,
    trace: &Trace,
) -> Result<std::result::Result<(Vec<Tensor>, GraphExec, Arc<Arena>), Arc<Arena>>> {
    let sizes = Arena::plan(trace);
    let blocks = sizes
        .iter()
        .map(|&n| {
            let a = memory::alloc_on_stream(r.device.clone(), n, stream, Some(r.stream.clone()))?;
            Ok(Block {
                ptr: a.ptr(),
                _keep: Box::new(a),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let arena = Arc::new(Arena::new(blocks, sizes)?);
    // SAFETY: forwarded contract.
    let (res, _) = unsafe { capture_once(r, statics, stream, CaptureMemory::Arena(arena.clone())) };
    let (outs, exec) = res?;
    if arena.unserved() > 0 {
        // The graph was never launched: its allocation nodes never existed.
        drop((outs, exec));
        return Ok(Err(arena));
    }
    log::debug!(
        "method {:?}: graph memory {} bytes in its own blocks ({})",
        r.method,
        arena.bytes(),
        arena.describe()
    );
    Ok(Ok((outs, exec, arena)))
}
