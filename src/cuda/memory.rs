//! Memory: the library's stream-ordered device pool, device allocations
//! that are freed on the stream they were allocated on, pinned host staging
//! buffers, and counted copies.
//!
//! Device memory never goes through `cuMemAlloc`/`cuMemFree`: allocation is
//! `cuMemAllocFromPoolAsync` on the current stream and freeing is
//! `cuMemFreeAsync` on the stream the allocation recorded, so freeing an
//! intermediate tensor never synchronizes. The pool's release threshold is
//! "keep everything", so steady-state executes reuse memory instead of going
//! back to the driver; `destroy` trims it.

use super::arena::{Arena, Trace};
use super::stream::{self, CudaStream};
use super::{check, device, driver_error, ContextGuard, DeviceState};
use crate::error::{Error, Result};
use crate::stats::{self, Counters, Event};
use cudarc::driver::{result, sys};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Create the library's memory pool on `ordinal` (its context is current).
pub(super) fn create_pool(ordinal: i32) -> Result<sys::CUmemoryPool> {
    // SAFETY: all-zero is a valid bit pattern for this plain C struct.
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal;
    // SAFETY: `props` is a valid, initialized pool description.
    let pool = unsafe { result::mem_pool::create(&props) }
        .map_err(|e| driver_error(e, "cuMemPoolCreate"))?;
    let mut threshold: u64 = u64::MAX;
    // SAFETY: the attribute's value type is u64.
    unsafe {
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
    }
    .map_err(|e| driver_error(e, "cuMemPoolSetAttribute(RELEASE_THRESHOLD)"))?;
    Ok(pool)
}

/// Give the pool's unused memory back to the driver.
pub(crate) fn trim_pool(d: &DeviceState) -> Result<()> {
    // SAFETY: a live pool.
    unsafe { result::mem_pool::trim_to(d.pool, 0) }.map_err(|e| driver_error(e, "cuMemPoolTrimTo"))
}

/// Device memory the library allocated on a stream (what [`AllocKind`] says), released
/// when dropped.
#[derive(Debug)]
pub(crate) struct DeviceAlloc {
    ptr: sys::CUdeviceptr,
    nbytes: usize,
    device: Arc<DeviceState>,
    stream_raw: sys::CUstream,
    /// Keeps our stream alive until the free is queued.
    _stream: Option<Arc<CudaStream>>,
    owner: Option<Arc<Counters>>,
    kind: AllocKind,
}

/// What a device allocation really is.
#[derive(Debug)]
pub(crate) enum AllocKind {
    /// Memory of the pool: freed stream-ordered on the stream it was allocated on.
    Pool,
    /// Block `index` of a graph's arena (graph-private memory): given back to the arena.
    ArenaBlock { arena: Arc<Arena>, index: usize },
    /// An allocation node of the graph being captured on this thread: no memory until the
    /// graph runs. `trace_id`: its number in a traced capture. Once the graph is
    /// instantiated and kept (`adopted`), its address stays valid across launches and
    /// dropping it frees it like pool memory; otherwise dropping frees nothing.
    GraphNode {
        trace_id: Option<u64>,
        adopted: AtomicBool,
    },
}

/// Where allocations made while this thread captures a graph go (see [`super::arena`]).
#[derive(Default)]
pub(crate) enum CaptureMemory {
    /// Allocation nodes of the graph.
    #[default]
    Nodes,
    /// Allocation nodes, and the sequence of allocations and frees is recorded.
    Trace(Trace),
    /// Blocks of this arena (a miss falls back to an allocation node).
    Arena(Arc<Arena>),
}

thread_local! {
    static CAPTURE_MEMORY: RefCell<CaptureMemory> = const { RefCell::new(CaptureMemory::Nodes) };
}

/// Set where this thread's allocations go while it captures; returns the previous setting.
pub(crate) fn set_capture_memory(m: CaptureMemory) -> CaptureMemory {
    CAPTURE_MEMORY.with(|c| std::mem::replace(&mut *c.borrow_mut(), m))
}

// SAFETY: a device address and driver handles, usable from any thread.
unsafe impl Send for DeviceAlloc {}
// SAFETY: as above.
unsafe impl Sync for DeviceAlloc {}

impl DeviceAlloc {
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
    /// Mark an allocation made during a capture as belonging to the graph
    /// that capture produced: its address stays valid across the graph's
    /// launches, and dropping it frees it (stream-ordered) like pool memory.
    /// Allocations of a capture that failed are never adopted, and dropping
    /// them frees nothing (they never had memory).
    pub(crate) fn adopt_by_graph(&self) {
        if let AllocKind::GraphNode { adopted, .. } = &self.kind {
            adopted.store(true, Ordering::Relaxed);
        }
    }
}

/// Allocate `nbytes` on `device`, ordered on `stream` (raw; `owner` keeps ours alive).
pub(crate) fn alloc_on_stream(
    device: Arc<DeviceState>,
    nbytes: usize,
    stream_raw: sys::CUstream,
    owner_stream: Option<Arc<CudaStream>>,
) -> Result<DeviceAlloc> {
    let capturing = super::graph::capturing();
    // While capturing into a planned arena: the next block of the plan, or a block added
    // for what the plan did not foresee (allocated outside the graph).
    let block = if capturing {
        let arena = CAPTURE_MEMORY.with(|c| match &*c.borrow() {
            CaptureMemory::Arena(a) => Some(a.clone()),
            _ => None,
        });
        arena.and_then(|a| {
            let got = a.take(nbytes).or_else(|| {
                a.grow(nbytes, |n| {
                    super::outside::block(&device, n, stream_raw, &owner_stream)
                })
                .map_err(|e| log::debug!("graph-private memory: no block for {nbytes} bytes: {e}"))
                .ok()
            });
            got.map(|(i, p)| (a, i, p))
        })
    } else {
        None
    };
    let (ptr, kind) = match block {
        Some((arena, index, ptr)) => (ptr, AllocKind::ArenaBlock { arena, index }),
        None => {
            let _g = ContextGuard::device(&device)?;
            // SAFETY: live pool and stream; the memory is uninitialized, as documented for
            // empty_strided.
            let ptr = unsafe { result::mem_pool::alloc_async(device.pool, nbytes, stream_raw) }
                .map_err(|e| {
                    driver_error(e, "cuMemAllocFromPoolAsync")
                        .with_suffix(&format!(": {nbytes} bytes on cuda:{}", device.ordinal))
                })?;
            let trace_id = if capturing {
                CAPTURE_MEMORY.with(|c| match &mut *c.borrow_mut() {
                    CaptureMemory::Trace(t) => Some(t.alloc(nbytes)),
                    _ => None,
                })
            } else {
                None
            };
            let kind = if capturing {
                AllocKind::GraphNode {
                    trace_id,
                    adopted: AtomicBool::new(false),
                }
            } else {
                AllocKind::Pool
            };
            (ptr, kind)
        }
    };
    let owner = stats::current();
    stats::record_for(owner.as_ref(), Event::PoolAlloc(nbytes as u64));
    Ok(DeviceAlloc {
        ptr,
        nbytes,
        device,
        stream_raw,
        _stream: owner_stream,
        owner,
        kind,
    })
}

impl crate::tensor::DeviceBuffer for DeviceAlloc {
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn adopt_by_graph(&self) {
        DeviceAlloc::adopt_by_graph(self)
    }
}

/// A new tensor with fresh memory on `device` (uninitialized on CUDA, ordered on this
/// thread's current stream; zeroed on CPU).
pub(crate) fn empty_strided(
    sizes: Vec<i64>,
    strides: Vec<i64>,
    dtype: crate::dtype::Code,
    device: crate::tensor::Device,
) -> Result<crate::tensor::Tensor> {
    crate::tensor::Tensor::empty_strided_with(sizes, strides, dtype, device, |i, n| {
        Ok(Box::new(alloc_on_current_stream(i, n)?))
    })
}

/// Allocate on this thread's current stream for `ordinal`.
pub(crate) fn alloc_on_current_stream(ordinal: i32, nbytes: usize) -> Result<DeviceAlloc> {
    let d = device(ordinal)?;
    let cur = stream::current(ordinal);
    alloc_on_stream(d, nbytes, cur.raw, cur.owner)
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        let capturing = super::graph::capturing();
        match &self.kind {
            AllocKind::ArenaBlock { arena, index } => {
                // The block stays the graph's: a later allocation of the same capture may take it.
                arena.give_back(*index);
                stats::record_for(self.owner.as_ref(), Event::PoolFree(self.nbytes as u64));
                return;
            }
            AllocKind::GraphNode { trace_id, adopted } => {
                if let (Some(id), true) = (trace_id, capturing) {
                    CAPTURE_MEMORY.with(|c| {
                        if let CaptureMemory::Trace(t) = &mut *c.borrow_mut() {
                            t.free(*id);
                        }
                    });
                }
                if !adopted.load(Ordering::Relaxed) && !capturing {
                    // A node of a graph that was never launched (its capture failed, or it was
                    // the tracing capture whose private-memory twin replaced it): no memory.
                    stats::record_for(self.owner.as_ref(), Event::PoolFree(self.nbytes as u64));
                    return;
                }
            }
            AllocKind::Pool => {}
        }
        match ContextGuard::device(&self.device) {
            Ok(_g) => {
                // SAFETY: allocated from the pool on `stream_raw`, freed once, in stream order
                // (while capturing: a free node of the graph).
                if let Err(e) = unsafe { result::free_async(self.ptr, self.stream_raw) } {
                    log::error!("cuMemFreeAsync of {} bytes failed: {e:?}", self.nbytes);
                }
            }
            Err(e) => log::error!("leaking {} device bytes: {e}", self.nbytes),
        }
        stats::record_for(self.owner.as_ref(), Event::PoolFree(self.nbytes as u64));
    }
}

/// Page-locked host memory (`cuMemHostAlloc`), used as staging for async copies.
#[derive(Debug)]
pub(crate) struct PinnedBuffer {
    ptr: *mut u8,
    cap: usize,
    device: Arc<DeviceState>,
    owner: Option<Arc<Counters>>,
}

// SAFETY: plain page-locked bytes owned by this value.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    pub(crate) fn new(device: Arc<DeviceState>, cap: usize) -> Result<PinnedBuffer> {
        let cap = cap.max(256).next_power_of_two();
        let _g = ContextGuard::device(&device)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local.
            unsafe { sys::cuMemHostAlloc(&mut p, cap, sys::CU_MEMHOSTALLOC_PORTABLE) },
            "cuMemHostAlloc",
        )
        .map_err(|e| e.with_suffix(&format!(": {cap} pinned bytes")))?;
        let owner = stats::current();
        stats::record_for(owner.as_ref(), Event::DriverAlloc(cap as u64));
        Ok(PinnedBuffer {
            ptr: p.cast(),
            cap,
            device,
            owner,
        })
    }
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::device(&self.device) {
            // SAFETY: allocated by cuMemHostAlloc, freed once; callers made sure no copy uses it.
            let r = unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
            if let Err(e) = check(r, "cuMemFreeHost") {
                log::warn!("{e}");
            }
        }
        stats::record_for(self.owner.as_ref(), Event::DriverFree(self.cap as u64));
    }
}

/// Plain `cuMemAlloc` for tools (`et_cuda_alloc_device`); counted as a driver allocation.
pub(crate) fn alloc_device_sync(ordinal: i32, nbytes: usize) -> Result<*mut c_void> {
    let d = device(ordinal)?;
    let _legacy = d.legacy_use();
    let _g = ContextGuard::device(&d)?;
    // SAFETY: plain allocation in the device's primary context.
    let p =
        unsafe { result::malloc_sync(nbytes.max(1)) }.map_err(|e| driver_error(e, "cuMemAlloc"))?;
    stats::record_for(None, Event::DriverAlloc(0));
    Ok(p as *mut c_void)
}

/// Free memory from [`alloc_device_sync`].
///
/// # Safety
/// `p` must be null or come from [`alloc_device_sync`], not freed yet and no longer in use.
pub(crate) unsafe fn free_device_sync(p: *mut c_void) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    let ord = match super::pointer_kind(p)? {
        super::PointerKind::Device(o) => o,
        _ => return Err(Error::invalid_argument("ptr is not device memory")),
    };
    let d = device(ord)?;
    let _legacy = d.legacy_use();
    let _g = ContextGuard::device(&d)?;
    // SAFETY: a pointer from alloc_device_sync, freed once (the caller's contract).
    unsafe { result::free_sync(p as sys::CUdeviceptr) }
        .map_err(|e| driver_error(e, "cuMemFree"))?;
    stats::record_for(None, Event::DriverFree(0));
    Ok(())
}

/// Largest alignment [`external_allocate`] guarantees (the pool's own).
pub(crate) const EXTERNAL_MAX_ALIGN: usize = 256;

/// Allocations handed out by [`external_allocate`], by address (a hash map: a program may
/// plan many buffers, each freed by address).
type External = std::collections::HashMap<usize, DeviceAlloc>;
static EXTERNAL: std::sync::LazyLock<std::sync::Mutex<External>> =
    std::sync::LazyLock::new(Default::default);

fn external() -> std::sync::MutexGuard<'static, External> {
    EXTERNAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Device memory for a caller (ExecuTorch's planned device buffers): from the
/// pool, ordered on the device's legacy default stream, which the library's
/// (blocking) streams wait for.
pub(crate) fn external_allocate(
    ordinal: i32,
    nbytes: usize,
    alignment: usize,
) -> Result<*mut c_void> {
    if alignment == 0 || !alignment.is_power_of_two() || alignment > EXTERNAL_MAX_ALIGN {
        return Err(Error::invalid_argument(format!(
            "alignment {alignment} is not a power of two up to {EXTERNAL_MAX_ALIGN}"
        )));
    }
    let d = device(ordinal)?;
    let _legacy = d.legacy_use();
    let a = alloc_on_stream(d.clone(), nbytes.max(1), std::ptr::null_mut(), None)?;
    let p = a.ptr() as usize;
    if p % alignment != 0 {
        return Err(Error::internal(format!(
            "the pool returned {p:#x}, not aligned to {alignment}"
        )));
    }
    external().insert(p, a);
    Ok(p as *mut c_void)
}

/// Free (stream-ordered) memory from [`external_allocate`]; null is ignored.
pub(crate) fn external_deallocate(p: *mut c_void) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    let a = external().remove(&(p as usize)).ok_or_else(|| {
        Error::invalid_argument(format!(
            "{p:p} was not allocated by et_cuda_device_allocate (or was freed already)"
        ))
    })?;
    // The free is ordered on the legacy default stream.
    let d = a.device.clone();
    let _legacy = d.legacy_use();
    drop(a);
    Ok(())
}

/// Live allocations from [`external_allocate`].
pub(crate) fn external_count() -> usize {
    external().len()
}
