//! Logging that reaches the user. The library logs through the `log` crate
//! (its own warnings, and the generated code's `aoti_torch_warn`). On first
//! use a logger is installed that hands each record to a sink set by the
//! host (the adapter routes it into ExecuTorch's `ET_LOG`), or, without one,
//! writes warnings and errors to stderr. A Rust host that installed its own
//! `log` logger first keeps it.
//!
//! A sink may call back into the library, including [`set_sink`] (or
//! `et_cuda_set_log_callback`): no lock is held while it runs. A record the
//! sink itself causes (it logs, or calls a function that warns) goes to
//! stderr instead of into the sink again, so a sink never recurses.
//!
//! No library lock is held while a sink runs either: code that logs while
//! holding one holds a [`Hold`] with it (the device's legacy-stream gate, a
//! method's state, a stream's work lock), and the records of that thread are
//! kept (up to [`MAX_HELD`]) and handed to the sink once its last `Hold` is
//! dropped, after the lock.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Condvar, Mutex, Once, RwLock};

/// Severity, most severe first (the `log` crate's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl Level {
    fn from_log(l: log::Level) -> Level {
        match l {
            log::Level::Error => Level::Error,
            log::Level::Warn => Level::Warn,
            log::Level::Info => Level::Info,
            log::Level::Debug => Level::Debug,
            log::Level::Trace => Level::Trace,
        }
    }
    fn filter(self) -> log::LevelFilter {
        match self {
            Level::Error => log::LevelFilter::Error,
            Level::Warn => log::LevelFilter::Warn,
            Level::Info => log::LevelFilter::Info,
            Level::Debug => log::LevelFilter::Debug,
            Level::Trace => log::LevelFilter::Trace,
        }
    }
    /// From the integer code (1 = error … 5 = trace).
    pub fn from_code(c: i32) -> Option<Level> {
        Some(match c {
            1 => Level::Error,
            2 => Level::Warn,
            3 => Level::Info,
            4 => Level::Debug,
            5 => Level::Trace,
            _ => return None,
        })
    }
}

/// Where records go: a function taking the level and the message. It may
/// call the library, [`set_sink`] included (see the module documentation).
pub type Sink = Box<dyn Fn(Level, &str) + Send + Sync>;

/// The installed sink; each call holds a clone, so the lock is not held while it runs.
type Shared = Arc<dyn Fn(Level, &str) + Send + Sync>;

struct Config {
    sink: Option<Shared>,
    max: Level,
}

static CONFIG: RwLock<Config> = RwLock::new(Config {
    sink: None,
    max: Level::Warn,
});
static INSTALL: Once = Once::new();
/// Signalled whenever a sink call ends (for [`set_sink`] waiting out a replaced sink).
static CALL_ENDED: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

thread_local! {
    /// The sink this thread is running (its address), if any: a record logged from
    /// inside it goes to stderr, and `set_sink` called from inside it does not wait for it.
    static IN_SINK: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Most records one thread keeps while it holds a library lock; more are counted, and the
/// count is reported when the kept ones are delivered.
pub(crate) const MAX_HELD: usize = 256;

thread_local! {
    /// How many [`Hold`]s this thread has.
    static HOLDS: Cell<usize> = const { Cell::new(0) };
    /// The records kept meanwhile, and how many did not fit.
    static HELD: RefCell<(Vec<(Level, String)>, usize)> = const { RefCell::new((Vec::new(), 0)) };
}

/// While a `Hold` lives, this thread's records for the sink are kept, and delivered
/// when its last `Hold` is dropped: held beside every library lock around code that
/// logs, and dropped after that lock, so that a sink never runs while this thread
/// holds a lock of the library (a sink may call back into the library).
#[derive(Debug)]
pub(crate) struct Hold(std::marker::PhantomData<*const ()>);

impl Hold {
    pub(crate) fn new() -> Hold {
        let _ = HOLDS.try_with(|h| h.set(h.get() + 1));
        Hold(std::marker::PhantomData)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let left = HOLDS
            .try_with(|h| {
                let n = h.get().saturating_sub(1);
                h.set(n);
                n
            })
            .unwrap_or(0);
        if left > 0 {
            return;
        }
        let Ok((kept, lost)) = HELD.try_with(|k| std::mem::take(&mut *k.borrow_mut())) else {
            return;
        };
        if std::thread::panicking() {
            // A sink that panicked now would abort the process.
            for (level, msg) in kept {
                to_stderr(level, &msg);
            }
            return;
        }
        if lost > 0 {
            emit(
                Level::Warn,
                format!(
                    "{lost} log records were dropped (more than {MAX_HELD} while a lock was held)"
                ),
            );
        }
        for (level, msg) in kept {
            emit(level, msg);
        }
    }
}

/// How many [`Hold`]s this thread has: the library locks it holds (0 is what every call
/// of a user callback expects).
pub(crate) fn holds() -> usize {
    HOLDS.try_with(Cell::get).unwrap_or(0)
}

/// Keep a record while this thread holds a [`Hold`]; gives it back otherwise.
fn keep(level: Level, msg: String) -> Option<(Level, String)> {
    if HOLDS.try_with(Cell::get).unwrap_or(0) == 0 {
        return Some((level, msg));
    }
    let mut msg = Some(msg);
    let _ = HELD.try_with(|k| {
        let mut k = k.borrow_mut();
        if k.0.len() < MAX_HELD {
            k.0.extend(msg.take().map(|m| (level, m)));
        } else {
            msg = None;
            k.1 += 1;
        }
    });
    // Not kept only while this thread's locals are being destroyed.
    msg.map(|m| (level, m))
}

fn addr(s: &Shared) -> usize {
    Arc::as_ptr(s).cast::<()>() as usize
}

fn to_stderr(level: Level, msg: &str) {
    eprintln!("[executorch_cuda {:?}] {msg}", level);
}

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        let c = CONFIG.read().unwrap_or_else(|p| p.into_inner());
        Level::from_log(m.level()) <= c.max
    }

    fn log(&self, r: &log::Record<'_>) {
        let level = Level::from_log(r.level());
        let has_sink = {
            let c = CONFIG.read().unwrap_or_else(|p| p.into_inner());
            if level > c.max {
                return;
            }
            c.sink.is_some()
        };
        let msg = r.args().to_string();
        if !has_sink {
            return to_stderr(level, &msg);
        }
        if let Some((level, msg)) = keep(level, msg) {
            emit(level, msg);
        }
    }

    fn flush(&self) {}
}

/// Hand a record to the sink (stderr without one, or from inside the sink).
fn emit(level: Level, msg: String) {
    let sink = {
        let c = CONFIG.read().unwrap_or_else(|p| p.into_inner());
        if level > c.max {
            return;
        }
        c.sink.clone()
    };
    let Some(sink) = sink else {
        return to_stderr(level, &msg);
    };
    if IN_SINK.try_with(Cell::get) != Ok(None) {
        // Logged from inside the sink (calling it again could recurse without end), or
        // while this thread's locals are being destroyed.
        return to_stderr(level, &msg);
    }
    /// Clears the thread's mark and drops its clone even when the sink unwinds.
    struct Running(Option<Shared>);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = IN_SINK.try_with(|c| c.set(None));
            drop(self.0.take());
            let (m, cv) = &CALL_ENDED;
            let _g = m.lock().unwrap_or_else(|p| p.into_inner());
            cv.notify_all();
        }
    }
    let _ = IN_SINK.try_with(|c| c.set(Some(addr(&sink))));
    let run = Running(Some(sink));
    if let Some(f) = &run.0 {
        f(level, &msg);
    }
}

static LOGGER: Logger = Logger;

/// The sink is process-wide: the tests that set one run one at a time.
#[cfg(test)]
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

/// Install the logger once (no-op when a logger exists already).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            let max = CONFIG.read().map(|c| c.max).unwrap_or(Level::Warn);
            log::set_max_level(max.filter());
        }
    });
}

/// Send records at `max` and more severe to `sink` (`None`: back to stderr).
///
/// When this returns, the replaced sink is running on no other thread and is
/// not called again, so whatever it uses may be freed. It may be called from
/// inside a sink (then that one call of the replaced sink is still running
/// on this thread, and finishes after this returns). A sink that waits for
/// another thread calling this function would wait forever.
pub fn set_sink(sink: Option<Sink>, max: Level) {
    install();
    let old = {
        let mut c = CONFIG.write().unwrap_or_else(|p| p.into_inner());
        c.max = max;
        log::set_max_level(max.filter());
        std::mem::replace(&mut c.sink, sink.map(Shared::from))
    };
    let Some(old) = old else { return };
    // Wait out the calls of the old sink on other threads (each holds a clone).
    let mine = usize::from(IN_SINK.try_with(Cell::get) == Ok(Some(addr(&old))));
    let (m, cv) = &CALL_ENDED;
    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
    while Arc::strong_count(&old) > 1 + mine {
        g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on a thread; fail (instead of hanging) when it has not returned in 20 s.
    fn returns_in_time(what: &str, f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(20)).is_ok(),
            "{what} did not return within 20 s (deadlock)"
        );
    }

    #[test]
    fn a_sink_may_replace_the_sink() {
        let _s = serial();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        set_sink(
            Some(Box::new(move |_, m| {
                if m == "replace me" {
                    c.fetch_add(1, Ordering::SeqCst);
                    set_sink(None, Level::Warn);
                }
            })),
            Level::Warn,
        );
        returns_in_time("a sink calling set_sink", || log::warn!("replace me"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // The replacement took effect: this one goes to stderr, not to the old sink.
        log::warn!("replace me");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_record_logged_inside_the_sink_does_not_reenter_it() {
        let _s = serial();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        set_sink(
            Some(Box::new(move |_, m| {
                if m.starts_with("nested") {
                    c.fetch_add(1, Ordering::SeqCst);
                    log::warn!("nested again");
                }
            })),
            Level::Warn,
        );
        returns_in_time("a sink that logs", || log::warn!("nested"));
        set_sink(None, Level::Warn);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn set_sink_waits_for_the_old_sink_on_other_threads() {
        let _s = serial();
        let (entered_tx, entered_rx) = mpsc::channel();
        let entered_tx = Mutex::new(entered_tx);
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        set_sink(
            Some(Box::new(move |_, m| {
                if m == "slow" {
                    let _ = entered_tx.lock().unwrap().send(());
                    std::thread::sleep(Duration::from_millis(300));
                    d.store(true, Ordering::SeqCst);
                }
            })),
            Level::Warn,
        );
        let t = std::thread::spawn(|| log::warn!("slow"));
        entered_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        set_sink(None, Level::Warn);
        assert!(
            done.load(Ordering::SeqCst),
            "set_sink returned while the old sink was still running"
        );
        t.join().unwrap();
    }

    #[test]
    fn records_reach_the_sink_at_or_above_the_level() {
        let _s = serial();
        let got = Arc::new(Mutex::new(Vec::<(Level, String)>::new()));
        let g = got.clone();
        set_sink(
            Some(Box::new(move |l, m| {
                g.lock().unwrap().push((l, m.to_string()))
            })),
            Level::Warn,
        );
        log::info!("not shown");
        log::warn!("shown {}", 1);
        log::error!("shown too");
        set_sink(None, Level::Warn);
        let v = got.lock().unwrap();
        let mine: Vec<_> = v.iter().filter(|(_, m)| m.starts_with("shown")).collect();
        assert_eq!(mine.len(), 2, "{v:?}");
        assert_eq!(mine[0].0, Level::Warn);
        assert!(!v.iter().any(|(_, m)| m == "not shown"));
        assert_eq!(Level::from_code(2), Some(Level::Warn));
        assert_eq!(Level::from_code(0), None);
    }
}
