//! Counters: host waits, allocations and bytes copied, per handle and
//! process-wide. Every increment goes to the process-wide set and to the
//! set of the handle whose execute is running on this thread, if any.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Completed `et_cuda_execute` calls.
    pub executes: u64,
    /// Host-blocking waits made by the library (stream/event synchronize).
    pub host_waits: u64,
    /// Allocations that went to the driver outside the stream-ordered pool (pinned host buffers,
    /// `cuMemAlloc`).
    pub driver_allocs: u64,
    /// Stream-ordered allocations from the library's device memory pool.
    pub pool_allocs: u64,
    /// Stream-ordered frees to the pool.
    pub pool_frees: u64,
    /// Library-owned allocations alive now (device and host).
    pub live_allocs: u64,
    /// Bytes in library-owned allocations alive now.
    pub live_bytes: u64,
    /// Bytes copied host to device.
    pub bytes_htod: u64,
    /// Bytes copied device to host.
    pub bytes_dtoh: u64,
    /// Bytes copied device to device.
    pub bytes_dtod: u64,
    /// Host time spent inside `et_cuda_execute`, summed (nanoseconds).
    pub execute_host_ns: u64,
    /// Of that, host time spent inside the container's run call (nanoseconds).
    pub run_host_ns: u64,
    /// CUDA graphs captured.
    pub graph_captures: u64,
    /// Executes served by replaying a captured graph.
    pub graph_replays: u64,
    /// Captures that failed (the shape then runs eagerly).
    pub graph_fallbacks: u64,
    /// Bytes of constants this method shares with other methods instead of holding its own copy.
    pub shared_constant_bytes: u64,
    /// CUDA modules the generated code of live containers loaded (process-wide counters
    /// only; unloaded with their container).
    pub generated_modules: u64,
    /// Loading, summed over loads (nanoseconds): in the caller's named-data lookups (the
    /// file read, for ExecuTorch's file data loader)...
    pub load_fetch_ns: u64,
    /// ... opening the `.so` (validation, hash, `dlopen`)...
    pub load_so_open_ns: u64,
    /// ... creating containers...
    pub load_container_ns: u64,
    /// ... and uploading weights (copies into staging, transfers, the final wait; for a
    /// packed blob: the generated code's own load).
    pub load_upload_ns: u64,
    /// Weight bytes uploaded (those in `load_upload_ns`).
    pub load_upload_bytes: u64,
    /// Pinned staging the weight uploads used (the largest; 0: none, pageable copies).
    pub load_staging_bytes: u64,
    /// Checking blobs against the SHA-256 in their keys (nanoseconds).
    pub load_verify_ns: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    executes: AtomicU64,
    host_waits: AtomicU64,
    driver_allocs: AtomicU64,
    pool_allocs: AtomicU64,
    pool_frees: AtomicU64,
    live_allocs: AtomicU64,
    live_bytes: AtomicU64,
    bytes_htod: AtomicU64,
    bytes_dtoh: AtomicU64,
    bytes_dtod: AtomicU64,
    execute_host_ns: AtomicU64,
    run_host_ns: AtomicU64,
    graph_captures: AtomicU64,
    graph_replays: AtomicU64,
    graph_fallbacks: AtomicU64,
    shared_constant_bytes: AtomicU64,
    load_fetch_ns: AtomicU64,
    load_so_open_ns: AtomicU64,
    load_container_ns: AtomicU64,
    load_upload_ns: AtomicU64,
    load_upload_bytes: AtomicU64,
    load_staging_bytes: AtomicU64,
    load_verify_ns: AtomicU64,
}

/// What happened, for [`record`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Execute,
    HostWait,
    DriverAlloc(u64),
    DriverFree(u64),
    HostAlloc(u64),
    HostFree(u64),
    PoolAlloc(u64),
    PoolFree(u64),
    HtoD(u64),
    DtoH(u64),
    DtoD(u64),
    /// Host nanoseconds of one execute and of its run call.
    Timing {
        execute_ns: u64,
        run_ns: u64,
    },
    GraphCapture,
    GraphReplay,
    GraphFallback,
    /// Bytes of constants shared with another method.
    SharedConstants(u64),
    /// Nanoseconds in a named-data lookup, opening a `.so`, creating a container.
    LoadFetch(u64),
    LoadSoOpen(u64),
    LoadContainer(u64),
    LoadVerify(u64),
    /// A weight upload: its nanoseconds, bytes and pinned staging bytes.
    LoadUpload {
        ns: u64,
        bytes: u64,
        staging: u64,
    },
}

impl Counters {
    pub(crate) fn apply(&self, e: Event) {
        match e {
            Event::Execute => {
                self.executes.fetch_add(1, Relaxed);
            }
            Event::HostWait => {
                self.host_waits.fetch_add(1, Relaxed);
            }
            Event::DriverAlloc(n) => {
                self.driver_allocs.fetch_add(1, Relaxed);
                self.live_allocs.fetch_add(1, Relaxed);
                self.live_bytes.fetch_add(n, Relaxed);
            }
            Event::HostAlloc(n) => {
                self.live_allocs.fetch_add(1, Relaxed);
                self.live_bytes.fetch_add(n, Relaxed);
            }
            Event::HostFree(n) => {
                self.live_allocs.fetch_sub(1, Relaxed);
                self.live_bytes.fetch_sub(n, Relaxed);
            }
            Event::PoolAlloc(n) => {
                self.pool_allocs.fetch_add(1, Relaxed);
                self.live_allocs.fetch_add(1, Relaxed);
                self.live_bytes.fetch_add(n, Relaxed);
            }
            Event::DriverFree(n) => {
                self.live_allocs.fetch_sub(1, Relaxed);
                self.live_bytes.fetch_sub(n, Relaxed);
            }
            Event::PoolFree(n) => {
                self.pool_frees.fetch_add(1, Relaxed);
                self.live_allocs.fetch_sub(1, Relaxed);
                self.live_bytes.fetch_sub(n, Relaxed);
            }
            Event::HtoD(n) => {
                self.bytes_htod.fetch_add(n, Relaxed);
            }
            Event::DtoH(n) => {
                self.bytes_dtoh.fetch_add(n, Relaxed);
            }
            Event::DtoD(n) => {
                self.bytes_dtod.fetch_add(n, Relaxed);
            }
            Event::Timing { execute_ns, run_ns } => {
                self.execute_host_ns.fetch_add(execute_ns, Relaxed);
                self.run_host_ns.fetch_add(run_ns, Relaxed);
            }
            Event::GraphCapture => {
                self.graph_captures.fetch_add(1, Relaxed);
            }
            Event::GraphReplay => {
                self.graph_replays.fetch_add(1, Relaxed);
            }
            Event::GraphFallback => {
                self.graph_fallbacks.fetch_add(1, Relaxed);
            }
            Event::SharedConstants(n) => {
                self.shared_constant_bytes.fetch_add(n, Relaxed);
            }
            Event::LoadFetch(ns) => {
                self.load_fetch_ns.fetch_add(ns, Relaxed);
            }
            Event::LoadSoOpen(ns) => {
                self.load_so_open_ns.fetch_add(ns, Relaxed);
            }
            Event::LoadContainer(ns) => {
                self.load_container_ns.fetch_add(ns, Relaxed);
            }
            Event::LoadVerify(ns) => {
                self.load_verify_ns.fetch_add(ns, Relaxed);
            }
            Event::LoadUpload { ns, bytes, staging } => {
                self.load_upload_ns.fetch_add(ns, Relaxed);
                self.load_upload_bytes.fetch_add(bytes, Relaxed);
                self.load_staging_bytes.fetch_max(staging, Relaxed);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            executes: self.executes.load(Relaxed),
            host_waits: self.host_waits.load(Relaxed),
            driver_allocs: self.driver_allocs.load(Relaxed),
            pool_allocs: self.pool_allocs.load(Relaxed),
            pool_frees: self.pool_frees.load(Relaxed),
            live_allocs: self.live_allocs.load(Relaxed),
            live_bytes: self.live_bytes.load(Relaxed),
            bytes_htod: self.bytes_htod.load(Relaxed),
            bytes_dtoh: self.bytes_dtoh.load(Relaxed),
            bytes_dtod: self.bytes_dtod.load(Relaxed),
            execute_host_ns: self.execute_host_ns.load(Relaxed),
            run_host_ns: self.run_host_ns.load(Relaxed),
            graph_captures: self.graph_captures.load(Relaxed),
            graph_replays: self.graph_replays.load(Relaxed),
            graph_fallbacks: self.graph_fallbacks.load(Relaxed),
            shared_constant_bytes: self.shared_constant_bytes.load(Relaxed),
            generated_modules: 0,
            load_fetch_ns: self.load_fetch_ns.load(Relaxed),
            load_so_open_ns: self.load_so_open_ns.load(Relaxed),
            load_container_ns: self.load_container_ns.load(Relaxed),
            load_upload_ns: self.load_upload_ns.load(Relaxed),
            load_upload_bytes: self.load_upload_bytes.load(Relaxed),
            load_staging_bytes: self.load_staging_bytes.load(Relaxed),
            load_verify_ns: self.load_verify_ns.load(Relaxed),
        }
    }
}

static GLOBAL: Counters = Counters {
    executes: AtomicU64::new(0),
    host_waits: AtomicU64::new(0),
    driver_allocs: AtomicU64::new(0),
    pool_allocs: AtomicU64::new(0),
    pool_frees: AtomicU64::new(0),
    live_allocs: AtomicU64::new(0),
    live_bytes: AtomicU64::new(0),
    bytes_htod: AtomicU64::new(0),
    bytes_dtoh: AtomicU64::new(0),
    bytes_dtod: AtomicU64::new(0),
    execute_host_ns: AtomicU64::new(0),
    run_host_ns: AtomicU64::new(0),
    graph_captures: AtomicU64::new(0),
    graph_replays: AtomicU64::new(0),
    graph_fallbacks: AtomicU64::new(0),
    shared_constant_bytes: AtomicU64::new(0),
    load_fetch_ns: AtomicU64::new(0),
    load_so_open_ns: AtomicU64::new(0),
    load_container_ns: AtomicU64::new(0),
    load_upload_ns: AtomicU64::new(0),
    load_upload_bytes: AtomicU64::new(0),
    load_staging_bytes: AtomicU64::new(0),
    load_verify_ns: AtomicU64::new(0),
};

pub(crate) fn global() -> &'static Counters {
    &GLOBAL
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Counters>>> = const { RefCell::new(None) };
}

/// Count `e` process-wide and for the handle active on this thread.
pub(crate) fn record(e: Event) {
    GLOBAL.apply(e);
    CURRENT.with(|c| {
        if let Some(h) = c.borrow().as_ref() {
            h.apply(e)
        }
    });
}

/// Count `e` process-wide and for `owner` (used when an allocation is freed
/// outside the execute that made it).
pub(crate) fn record_for(owner: Option<&Arc<Counters>>, e: Event) {
    GLOBAL.apply(e);
    if let Some(h) = owner {
        h.apply(e)
    }
}

/// Nanoseconds of `d`, saturating at `u64::MAX`.
pub(crate) fn nanos(d: std::time::Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Run `f`, counting its host time with `event` (e.g. [`Event::LoadSoOpen`]).
pub(crate) fn timed<T>(event: fn(u64) -> Event, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    record(event(nanos(t.elapsed())));
    r
}

/// The handle counters active on this thread, if any.
pub(crate) fn current() -> Option<Arc<Counters>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes `c` the active handle counters on this thread until dropped.
pub(crate) struct Scope {
    prev: Option<Arc<Counters>>,
}

impl Scope {
    pub(crate) fn enter(c: &Arc<Counters>) -> Scope {
        let prev = CURRENT.with(|cur| cur.borrow_mut().replace(c.clone()));
        Scope { prev }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let prev = self.prev.take();
        CURRENT.with(|cur| *cur.borrow_mut() = prev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_and_global_counters() {
        let h = Arc::new(Counters::default());
        let before = global().snapshot();
        {
            let _s = Scope::enter(&h);
            record(Event::HostWait);
            record(Event::PoolAlloc(64));
            record(Event::HtoD(10));
        }
        record(Event::HostWait); // outside the scope: global only
        record_for(Some(&h), Event::PoolFree(64));
        let s = h.snapshot();
        assert_eq!(s.host_waits, 1);
        assert_eq!(s.pool_allocs, 1);
        assert_eq!(s.pool_frees, 1);
        assert_eq!(s.live_allocs, 0);
        assert_eq!(s.live_bytes, 0);
        assert_eq!(s.bytes_htod, 10);
        let after = global().snapshot();
        assert!(after.host_waits >= before.host_waits + 2);
    }
}
