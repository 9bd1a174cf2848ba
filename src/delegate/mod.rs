//! The delegate: [`CudaHandle`], one per loaded method — init, execute,
//! destroy — and its IO policy.
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
//! - methods named in `enable_cuda_graph_for_method` replay CUDA graphs
//!   keyed by their input shapes ([`graphs`]);
//! - weights come as one packed blob or one storage per constant
//!   ([`per_fqn`], ExecuTorch 1.5); with `weight_sharing_across_methods`,
//!   identical constants are held once ([`sharing`]);
//! - with a caller stream set on the thread, the execute starts after the
//!   caller's queued work and the caller's stream waits for its end.

pub(crate) mod graphs;
pub(crate) mod io;
pub(crate) mod outputs;
pub(crate) mod per_fqn;
pub(crate) mod sharing;
pub(crate) mod staging;

use crate::aoti::payload::FqnEntry;
use crate::aoti::{self, AtenTensorHandle, Container};
use crate::cuda::arena::{Arena, Trace};
use crate::cuda::event::Event;
use crate::cuda::graph::{Capture, GraphExec};
use crate::cuda::memory::CaptureMemory;
use crate::cuda::stream::{self, CudaStream, StreamScope};
use crate::cuda::{self, memory, ContextGuard, DeviceState, PointerKind};
use crate::error::{invalid, Error, Result};
use crate::options::{self, ExecMode, OutputPlacement};
use crate::stats::{self, Counters, Event as StatEvent, Stats};
use crate::tensor::{Device, Memory, Tensor};
use graphs::{GraphCache, GraphEntry, Plan, ShapeKey};
use io::{CopyCtx, InputArg, OutputArg, OutputInfo};
use outputs::Placement;
use sharing::{SharePolicy, SharedConstants};
use staging::Staging;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// How a method is loaded and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MethodConfig {
    pub(crate) device_index: i32,
    pub(crate) shared_stream: bool,
    pub(crate) mode: ExecMode,
    /// Replay CUDA graphs keyed by input shapes.
    pub(crate) cuda_graphs: bool,
    pub(crate) graph_cache_size: usize,
    /// Graphs keep their memory in blocks of their own ([`crate::cuda::arena`]), not allocation nodes.
    pub(crate) graph_private_memory: bool,
    /// Share identical constants with other methods.
    pub(crate) share_weights: Option<SharePolicy>,
}

impl Default for MethodConfig {
    fn default() -> MethodConfig {
        MethodConfig {
            device_index: 0,
            shared_stream: false,
            mode: ExecMode::Default,
            cuda_graphs: false,
            graph_cache_size: options::DEFAULT_GRAPH_CACHE_SIZE,
            graph_private_memory: true,
            share_weights: None,
        }
    }
}

impl MethodConfig {
    /// The configuration the process-wide backend options give `method`
    /// (`group` names the program, for sharing mutable buffers).
    pub(crate) fn from_options(method: &str, group: u64) -> Result<MethodConfig> {
        let o = options::current();
        Ok(MethodConfig {
            device_index: i32::try_from(o.device_index).map_err(|_| {
                Error::invalid_argument(format!("device index {} out of range", o.device_index))
            })?,
            shared_stream: o.use_shared_cuda_stream,
            mode: options::parse_mode(&o.execution_mode)?,
            cuda_graphs: options::in_list(&o.enable_cuda_graph_for_method, method),
            graph_cache_size: usize::try_from(o.cuda_graph_cache_size)
                .unwrap_or(options::DEFAULT_GRAPH_CACHE_SIZE),
            graph_private_memory: o.cuda_graph_private_memory,
            share_weights: o.weight_sharing_across_methods.then_some(SharePolicy {
                mutable_buffers: o.share_mutable_buffers_across_methods,
                group,
            }),
        })
    }
}

/// A method's weights as the program stores them.
#[derive(Debug, Clone)]
pub(crate) enum Weights<'a> {
    /// One blob in the container's packed layout (ExecuTorch ≤ 1.4).
    Blob(&'a [u8]),
    /// One storage per constant, named by original FQN (ExecuTorch 1.5's `ETCUDAFQN3`).
    PerFqn(Vec<(FqnEntry, &'a [u8])>),
}

/// What `init` needs.
#[derive(Debug, Clone)]
pub(crate) struct InitParams<'a> {
    pub(crate) so: &'a [u8],
    pub(crate) weights: Weights<'a>,
    pub(crate) method_name: String,
    /// Named-data key of the `.so`; `<sha256 hex>_so_blob` is verified against the bytes.
    pub(crate) so_key: Option<String>,
    /// Named-data key of the weights; `<sha256 hex>_weights_blob` is verified too.
    pub(crate) weights_key: Option<String>,
    pub(crate) config: MethodConfig,
}

struct State {
    // Field order is drop order: graphs and outputs before the container, the container
    // before the constants it was given.
    graphs: GraphCache,
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

/// Check a `<sha256 hex><suffix>` key against the bytes; other keys are not hashes.
fn verify_key(key: Option<&str>, suffix: &str, bytes: &[u8], what: &str) -> Result<()> {
    let Some(k) = key else { return Ok(()) };
    let Some(hash) = k.strip_suffix(suffix) else {
        return Ok(());
    };
    if hash.len() != 64 || !hash.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Ok(());
    }
    let actual = aoti::loader::hex(&aoti::loader::sha256(bytes));
    if !hash.eq_ignore_ascii_case(&actual) {
        return Err(Error::invalid_program(format!(
            "the {what} bytes do not match their key {k}: their SHA-256 is {actual}"
        )));
    }
    Ok(())
}

/// The shape signature of a set of inputs.
fn shape_key(inputs: &[InputArg]) -> ShapeKey {
    inputs.iter().map(|i| (i.dtype, i.sizes.clone())).collect()
}

impl CudaHandle {
    pub(crate) fn init(p: InitParams<'_>) -> Result<CudaHandle> {
        if p.so.is_empty() {
            return Err(Error::invalid_program("the .so blob is empty"));
        }
        verify_key(p.so_key.as_deref(), "_so_blob", p.so, ".so")?;
        if let Weights::Blob(w) = &p.weights {
            verify_key(p.weights_key.as_deref(), "_weights_blob", w, "weights")?;
        }
        let digest = aoti::loader::sha256(p.so);
        let elf = aoti::elf::validate(p.so)?;
        let cfg = p.config;
        // The CUDA check comes before dlopen: without a driver the .so cannot run, and
        // opening it may need a newer C library than a CPU-only machine has.
        let device = cuda::device(cfg.device_index)?;
        let _ctx = ContextGuard::device(&device)?;
        let stream = if cfg.shared_stream {
            stream::shared_stream(&device)?
        } else {
            CudaStream::new(device.clone())?
        };
        let lib = aoti::loader::open(p.so, digest, &elf)?;
        let counters = Arc::new(Counters::default());
        let _stats = stats::Scope::enter(&counters);
        let _scope = StreamScope::enter(device.ordinal, stream.raw(), Some(stream.clone()));
        let probe = Container::create(lib.clone(), device.ordinal)?;
        let share = cfg
            .share_weights
            .filter(|_| cfg.mode != ExecMode::Upstream12);
        let (container, shared) = match &p.weights {
            Weights::PerFqn(storages) => per_fqn::load(probe, &device, &stream, storages, share)?,
            Weights::Blob(weights) => {
                match probe.constants_blob_size()? {
                    Some(n) if n != weights.len() as u64 => {
                        return Err(Error::invalid_program(format!(
                            "the weights blob has {} bytes but the model expects {n}",
                            weights.len()
                        )))
                    }
                    None if !weights.is_empty() => log::warn!(
                        "the .so cannot report its weights size; loading {} bytes unchecked",
                        weights.len()
                    ),
                    _ => {}
                }
                match share {
                    Some(policy) => {
                        drop(probe);
                        sharing::load(&lib, &device, &stream, weights, policy)?
                    }
                    None => {
                        probe.load_weights(weights)?;
                        (Arc::new(probe), SharedConstants::default())
                    }
                }
            }
        };
        if !container.has_single_threaded() {
            log::warn!("the .so has no AOTInductorModelContainerRunSingleThreaded: every run will wait for the previous one");
        }
        let graphs = GraphCache::new(cfg.graph_cache_size);
        Ok(CudaHandle {
            _kernels: crate::kernels::Lease::acquire(device.ordinal),
            method: p.method_name,
            num_inputs: container.num_inputs,
            num_outputs: container.num_outputs,
            state: Mutex::new(State {
                graphs,
                kept_outputs: Vec::new(),
                container: Some(container),
                shared,
                staging: Staging::new(device.clone()),
                caller_sync: None,
                executes: 0,
            }),
            device,
            stream,
            config: cfg,
            counters,
        })
    }

    pub(crate) fn num_inputs(&self) -> usize {
        self.num_inputs
    }
    pub(crate) fn num_outputs(&self) -> usize {
        self.num_outputs
    }
    pub(crate) fn method_name(&self) -> &str {
        &self.method
    }
    pub(crate) fn stream_raw(&self) -> *mut c_void {
        self.stream.raw().cast()
    }
    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot()
    }
    /// Number of CUDA graphs the method holds now.
    pub(crate) fn graph_count(&self) -> usize {
        self.lock().graphs.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Block until the method's queued work is done (counted as a host wait).
    pub(crate) fn synchronize(&self) -> Result<()> {
        let _stats = stats::Scope::enter(&self.counters);
        let _ctx = ContextGuard::device(&self.device)?;
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
        let _stats = stats::Scope::enter(&self.counters);
        let _ctx = ContextGuard::device(&self.device)?;
        // SAFETY: forwarded contract.
        unsafe { cuda::copy::copy_bytes(dst, src, n, self.stream.raw()) }
    }

    /// Run the method. See the module docs for the IO policy.
    ///
    /// # Safety
    /// Every input's `data` must be valid for reads of its `nbytes` (host or
    /// device memory) until this call returns and, for device memory, until
    /// the work it queued has run; every output's `data` used for copying
    /// must be valid for writes of its `capacity` bytes likewise.
    pub(crate) unsafe fn execute(
        &self,
        inputs: &[InputArg],
        outputs: &[OutputArg],
        placement: OutputPlacement,
    ) -> Result<Vec<OutputInfo>> {
        let t0 = Instant::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(container) = st.container.clone() else {
            return invalid("the method was destroyed");
        };
        if inputs.len() != self.num_inputs || outputs.len() != self.num_outputs {
            return invalid(format!(
                "method {:?} takes {} inputs and {} outputs, got {} and {}",
                self.method,
                self.num_inputs,
                self.num_outputs,
                inputs.len(),
                outputs.len()
            ));
        }
        let placement = match placement {
            OutputPlacement::FromOptions if options::skip_copy_for(&self.method) => {
                Placement::Device
            }
            OutputPlacement::FromOptions | OutputPlacement::Copy => Placement::Copy,
            OutputPlacement::Device => Placement::Device,
        };
        let _stats = stats::Scope::enter(&self.counters);
        let _ctx = ContextGuard::device(&self.device)?;
        let s = self.stream.raw();
        let caller = self.caller_stream_begin(st)?;
        let _scope = StreamScope::enter(self.device.ordinal, s, Some(self.stream.clone()));
        st.executes += 1;
        // Outputs kept from the previous execute are released now (stream-ordered).
        st.kept_outputs.clear();
        let mut ctx = CopyCtx {
            stream: s,
            staging: &mut st.staging,
            exec: st.executes,
            mode: self.config.mode,
        };
        let graphs = self.config.cuda_graphs && self.config.mode != ExecMode::Upstream12;
        let tr = Instant::now();
        let outs = if graphs {
            let key = shape_key(inputs);
            let mut plan = st.graphs.plan(&key);
            if plan == Plan::Replay {
                let same = st.graphs.get(&key).is_some_and(|e| {
                    e.in_place
                        .iter()
                        .zip(inputs)
                        .all(|(at, input)| at.is_none_or(|a| a == input.data as usize))
                });
                if !same {
                    // A device input moved: from now on this shape copies its inputs into
                    // buffers of its own graph. Queued replays of the old graph stay ordered
                    // before the frees of its memory.
                    drop(st.graphs.remove(&key));
                    st.graphs.mark_moving(&key);
                    plan = Plan::Capture;
                }
            }
            match plan {
                // SAFETY: forwarded contract.
                Plan::Replay => unsafe { self.replay(&mut st.graphs, &key, inputs, &mut ctx)? },
                Plan::Capture => {
                    let in_place = !st.graphs.is_moving(&key);
                    // SAFETY: forwarded contract.
                    match unsafe { self.capture(&container, inputs, &mut ctx, in_place)? } {
                        Some(entry) => {
                            entry.exec.launch(s)?;
                            let outs = entry.outputs.clone();
                            // An evicted graph's buffers are freed in stream order after its last
                            // launch; dropping it here is safe.
                            drop(st.graphs.insert(key, entry));
                            outs
                        }
                        None => {
                            st.graphs.mark_failed(key);
                            // SAFETY: forwarded contract.
                            unsafe { self.run_eager(&container, inputs, &mut ctx)? }
                        }
                    }
                }
                // SAFETY: forwarded contract.
                Plan::Eager => unsafe { self.run_eager(&container, inputs, &mut ctx)? },
            }
        } else {
            // SAFETY: forwarded contract.
            unsafe { self.run_eager(&container, inputs, &mut ctx)? }
        };
        let run_ns = tr.elapsed().as_nanos() as u64;
        // SAFETY: forwarded contract for the output buffers.
        let infos = unsafe {
            outputs::deliver(
                outs,
                outputs,
                placement,
                self.config.mode,
                s,
                &mut st.staging,
                &mut st.kept_outputs,
            )?
        };
        if self.config.mode == ExecMode::SyncAlways {
            self.stream.synchronize()?;
        }
        self.caller_stream_end(st, caller)?;
        stats::record(StatEvent::Execute);
        stats::record(StatEvent::Timing {
            execute_ns: t0.elapsed().as_nanos() as u64,
            run_ns,
        });
        Ok(infos)
    }

    /// With a caller stream set on this thread: check it and make the method's
    /// stream wait for the caller's queued work.
    fn caller_stream_begin(&self, st: &mut State) -> Result<Option<stream::CallerStream>> {
        let Some(cs) = stream::caller_stream() else {
            return Ok(None);
        };
        if cs.0 == self.stream.raw() {
            return Ok(None);
        }
        let ctx = stream::stream_context(cs.0)?;
        if ctx != self.device.ctx {
            return invalid(format!(
                "the caller stream belongs to another CUDA context than cuda:{} (the method's device)",
                self.device.ordinal
            ));
        }
        if st.caller_sync.is_none() {
            st.caller_sync = Some((
                Event::new(self.device.clone())?,
                Event::new(self.device.clone())?,
            ));
        }
        if let Some((before, _)) = &st.caller_sync {
            before.record(cs.0)?;
            before.wait_on(self.stream.raw())?;
        }
        Ok(Some(cs))
    }

    /// Make the caller's stream wait for the execute's work.
    fn caller_stream_end(&self, st: &mut State, cs: Option<stream::CallerStream>) -> Result<()> {
        if let (Some(cs), Some((_, after))) = (cs, &st.caller_sync) {
            after.record(self.stream.raw())?;
            after.wait_on(cs.0)?;
        }
        Ok(())
    }

    /// Run the container once on fresh input handles.
    ///
    /// # Safety
    /// As for [`CudaHandle::execute`].
    unsafe fn run_eager(
        &self,
        container: &Container,
        inputs: &[InputArg],
        ctx: &mut CopyCtx<'_>,
    ) -> Result<Vec<Tensor>> {
        let mut handles: Vec<AtenTensorHandle> = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            // SAFETY: forwarded contract.
            match unsafe { io::eager_input(input, &self.device, &self.stream, ctx) } {
                Ok(t) => handles.push(aoti::into_handle(t)),
                Err(e) => {
                    for h in handles {
                        // SAFETY: handles made just above, not handed to the container.
                        drop(unsafe { aoti::from_handle(h) });
                    }
                    return Err(e.context(&format!("input {i}")));
                }
            }
        }
        // SAFETY: fresh input handles (stolen by the call) and null output slots.
        unsafe { self.run_container(container, &mut handles) }
    }

    /// Run the container on `handles` (stolen) and take its outputs.
    ///
    /// # Safety
    /// `handles` must be fresh handles for the method's inputs.
    unsafe fn run_container(
        &self,
        container: &Container,
        handles: &mut [AtenTensorHandle],
    ) -> Result<Vec<Tensor>> {
        let mut out_handles: Vec<AtenTensorHandle> = vec![std::ptr::null_mut(); self.num_outputs];
        // AOTInductorModelContainerRun with one model instance blocks the host on the
        // previous run's completion event (reclaim_finished_models -> wait_for_completion
        // in model_container.h). RunSingleThreaded skips that bookkeeping and is safe here
        // because (1) this container never gets Run or RunConstantFolding in these modes
        // (they would empty the model list whose first entry it uses), (2) every call
        // uses this method's one stream, and (3) the method's lock serializes host code
        // (the lock does not order GPU work: the stream does). Its first call may fold
        // constants and wait once.
        let single = self.config.mode != ExecMode::Upstream12;
        // SAFETY: forwarded contract; the output slots are null.
        let run =
            unsafe { container.run(single, handles, &mut out_handles, self.stream.raw().cast()) };
        let outs: Vec<Option<Tensor>> = out_handles
            .iter()
            // SAFETY: non-null slots are new handles we now own.
            .map(|&h| (!h.is_null()).then(|| unsafe { aoti::from_handle(h) }))
            .collect();
        run?;
        outs.into_iter()
            .enumerate()
            .map(|(i, o)| {
                o.ok_or_else(|| {
                    Error::execution_failed(format!("the model returned no tensor for output {i}"))
                })
            })
            .collect()
    }

    /// Capture the run for these input shapes into a graph. `Ok(None)` when
    /// the capture failed (logged once; the caller runs eagerly). With
    /// `in_place`, device inputs are read where the caller has them (the graph
    /// is then replayed only for calls passing the same addresses); otherwise,
    /// and for host inputs, from buffers of the graph's own.
    ///
    /// # Safety
    /// As for [`CudaHandle::execute`].
    unsafe fn capture(
        &self,
        container: &Container,
        inputs: &[InputArg],
        ctx: &mut CopyCtx<'_>,
        in_place: bool,
    ) -> Result<Option<GraphEntry>> {
        let dev = self.device.ordinal;
        // The graph's own input buffers, filled before the capture begins.
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
                Memory::Device(memory::alloc_on_stream(
                    self.device.clone(),
                    c.nbytes,
                    ctx.stream,
                    Some(self.stream.clone()),
                )?)
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
        // First capture: allocations become allocation nodes, and their sequence is traced.
        let trace = if self.config.graph_private_memory {
            CaptureMemory::Trace(Trace::default())
        } else {
            CaptureMemory::Nodes
        };
        // SAFETY: forwarded contract.
        let (first, trace) = unsafe { self.capture_once(container, &statics, ctx.stream, trace) };
        let (outs, exec) = match first {
            Ok(v) => v,
            Err(why) => {
                log::warn!(
                    "method {:?}: CUDA graph capture failed for input shapes {:?}; this shape runs eagerly from now on ({why})",
                    self.method,
                    shape_key(inputs)
                );
                stats::record(StatEvent::GraphFallback);
                return Ok(None);
            }
        };
        // Second capture, on blocks of the graph's own planned from the trace: no allocation nodes.
        if let CaptureMemory::Trace(t) = trace {
            if !t.events.is_empty() {
                // SAFETY: forwarded contract.
                match unsafe { self.capture_private(container, &statics, ctx.stream, &t) } {
                    Ok(Some((outs2, exec2, arena))) => {
                        // The first graph was never launched: its allocations never existed.
                        drop((outs, exec));
                        stats::record(StatEvent::GraphCapture);
                        return Ok(Some(GraphEntry {
                            outputs: outs2,
                            inputs: statics,
                            in_place: addrs,
                            _arena: Some(arena),
                            exec: exec2,
                        }));
                    }
                    Ok(None) => {}
                    Err(e) => log::debug!(
                        "method {:?}: graph-private memory not used for input shapes {:?} ({e}); allocation nodes instead",
                        self.method,
                        shape_key(inputs)
                    ),
                }
            }
        }
        for t in &outs {
            if let Memory::Device(a) = &t.storage.memory {
                a.adopt_by_graph();
            }
        }
        stats::record(StatEvent::GraphCapture);
        Ok(Some(GraphEntry {
            outputs: outs,
            inputs: statics,
            in_place: addrs,
            _arena: None,
            exec,
        }))
    }

    /// One capture of the run over the graph's input buffers `statics`, its
    /// allocations going where `memory` says; gives `memory` back (with the trace).
    ///
    /// # Safety
    /// As for [`CudaHandle::execute`].
    unsafe fn capture_once(
        &self,
        container: &Container,
        statics: &[Tensor],
        stream: cudarc::driver::sys::CUstream,
        memory: CaptureMemory,
    ) -> (Result<(Vec<Tensor>, GraphExec)>, CaptureMemory) {
        let mut handles: Vec<AtenTensorHandle> = statics
            .iter()
            .map(|t| aoti::into_handle(t.clone()))
            .collect();
        let cap = match Capture::begin(self.device.clone(), stream) {
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
        let run = unsafe { self.run_container(container, &mut handles) };
        let exec = cap.finish();
        let memory = memory::set_capture_memory(before);
        let r = match (run, exec) {
            (Ok(outs), Ok(exec)) => Ok((outs, exec)),
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        };
        (r, memory)
    }

    /// The second capture: every allocation from an arena planned from `trace`.
    /// `Ok(None)` when an allocation was not foreseen (the first graph is kept).
    ///
    /// # Safety
    /// As for [`CudaHandle::execute`].
    #[allow(clippy::type_complexity)]
    unsafe fn capture_private(
        &self,
        container: &Container,
        statics: &[Tensor],
        stream: cudarc::driver::sys::CUstream,
        trace: &Trace,
    ) -> Result<Option<(Vec<Tensor>, GraphExec, Arc<Arena>)>> {
        let sizes = Arena::plan(trace);
        let blocks = sizes
            .iter()
            .map(|&n| {
                memory::alloc_on_stream(self.device.clone(), n, stream, Some(self.stream.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let arena = Arc::new(Arena::new(blocks, sizes)?);
        // SAFETY: forwarded contract.
        let (r, _) = unsafe {
            self.capture_once(
                container,
                statics,
                stream,
                CaptureMemory::Arena(arena.clone()),
            )
        };
        let (outs, exec) = r?;
        if arena.misses() > 0 {
            log::debug!(
                "method {:?}: {} allocation(s) of the second capture were not in its plan",
                self.method,
                arena.misses()
            );
            return Ok(None);
        }
        log::debug!(
            "method {:?}: graph memory {} bytes in its own blocks",
            self.method,
            arena.bytes()
        );
        Ok(Some((outs, exec, arena)))
    }

    /// Replay the graph of `key`: copy the inputs into its buffers, launch.
    ///
    /// # Safety
    /// As for [`CudaHandle::execute`].
    unsafe fn replay(
        &self,
        cache: &mut GraphCache,
        key: &ShapeKey,
        inputs: &[InputArg],
        ctx: &mut CopyCtx<'_>,
    ) -> Result<Vec<Tensor>> {
        let entry = cache
            .get(key)
            .ok_or_else(|| Error::internal("graph vanished from the cache"))?;
        for (i, ((input, buf), at)) in inputs
            .iter()
            .zip(&entry.inputs)
            .zip(&entry.in_place)
            .enumerate()
        {
            if at.is_some() {
                continue; // read where the caller has it (the caller checked the address)
            }
            let c = input
                .check(self.device.ordinal)
                .map_err(|e| e.context(&format!("input {i}")))?;
            let dst = buf.data_ptr();
            if matches!(c.kind, PointerKind::Device(_)) && input.data == dst.cast_const() {
                continue; // already in the graph's buffer
            }
            // SAFETY: forwarded contract for the source; the buffer holds this shape's bytes.
            unsafe { io::copy_input(input, c.kind, c.nbytes, dst, ctx)? };
        }
        entry.exec.launch(ctx.stream)?;
        stats::record(StatEvent::GraphReplay);
        Ok(entry.outputs.clone())
    }

    /// Delete the container and free everything the method owns. Idempotent.
    pub(crate) fn destroy(&self) -> Result<()> {
        let mut st = self.lock();
        let Some(container) = st.container.take() else {
            return Ok(());
        };
        let _stats = stats::Scope::enter(&self.counters);
        let _ctx = ContextGuard::device(&self.device)?;
        st.kept_outputs.clear();
        {
            let _scope = StreamScope::enter(
                self.device.ordinal,
                self.stream.raw(),
                Some(self.stream.clone()),
            );
            st.graphs.clear();
            drop(container);
            st.shared = SharedConstants::default();
        }
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

impl Drop for CudaHandle {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            log::error!("destroying the method {:?}: {e}", self.method);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_key_verification() {
        let good = format!(
            "{}_so_blob",
            aoti::loader::hex(&aoti::loader::sha256(b"abc"))
        );
        assert!(verify_key(Some(&good), "_so_blob", b"abc", ".so").is_ok());
        let bad = format!("{}_so_blob", "0".repeat(64));
        let e = verify_key(Some(&bad), "_so_blob", b"abc", ".so")
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not match"), "{e}");
        assert!(verify_key(Some("forward_so_blob"), "_so_blob", b"abc", ".so").is_ok());
        assert!(verify_key(None, "_so_blob", b"abc", ".so").is_ok());
        let w = format!("{}_weights_blob", "1".repeat(64));
        let e = verify_key(Some(&w), "_weights_blob", b"w", "weights")
            .unwrap_err()
            .to_string();
        assert!(e.contains("weights bytes do not match"), "{e}");
    }

    #[test]
    fn init_rejects_bad_blobs_before_touching_cuda() {
        let base = InitParams {
            so: b"",
            weights: Weights::Blob(b""),
            method_name: "forward".into(),
            so_key: None,
            weights_key: None,
            config: MethodConfig::default(),
        };
        let e = CudaHandle::init(base.clone()).err().unwrap();
        assert!(e.kind() == crate::error::ErrorKind::InvalidProgram, "{e}");
        let garbage = vec![0x5au8; 4096];
        let e = CudaHandle::init(InitParams {
            so: &garbage,
            ..base.clone()
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("not a loadable ELF"), "{e}");
    }
}
