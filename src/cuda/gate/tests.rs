//! Issue 31: no user callback runs while a thread holds the legacy-stream gate. A log
//! sink that takes the gate for writing (what a capture does) on another thread, or
//! takes it again while a capture waits for it, returns instead of deadlocking: the
//! records logged under the gate reach it after the gate is released.

use super::*;
use crate::logging::{self, Level};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// The sink is process-wide: these tests and the logging module's run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    logging::SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the gate can be had shared within 5 s (`try_read`: std's lock refuses a reader
/// while a writer waits, as `read` would then block, here for ever).
fn readable_in_time(gate: &LegacyGate) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if gate.lock.try_read().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn a_sink_never_runs_while_the_gate_is_held() {
    let _s = serial();
    let gate = Arc::new(LegacyGate::default());
    let free = std::sync::Arc::new(Mutex::new(Vec::new()));
    let (f, gs) = (free.clone(), gate.clone());
    logging::set_sink(
        Some(Box::new(move |_, m| {
            if m.starts_with("under the gate") {
                // What a capture on another thread does: can it have the gate now?
                let (tx, rx) = mpsc::channel();
                let g = gs.clone();
                std::thread::spawn(move || {
                    let _w = g.exclusive();
                    let _ = tx.send(());
                });
                f.lock()
                    .unwrap()
                    .push(rx.recv_timeout(Duration::from_secs(5)).is_ok());
            }
        })),
        Level::Warn,
    );
    {
        let _g = gate.shared(false);
        assert_eq!(logging::holds(), 1);
        log::warn!("under the gate 1");
        log::warn!("under the gate 2");
        // Kept, not delivered yet.
        assert!(free.lock().unwrap().is_empty());
    }
    assert_eq!(logging::holds(), 0);
    logging::set_sink(None, Level::Warn);
    assert_eq!(
        *free.lock().unwrap(),
        [true, true],
        "the sink ran under the gate"
    );
}

/// The deadlock: thread A holds the gate shared and logs; thread W waits to
/// take it exclusively (a capture); A's sink takes it shared again, which std's
/// writer-preferring lock makes wait for W, which waits for A.
#[test]
fn a_sink_taking_the_gate_while_a_capture_waits_does_not_deadlock() {
    let _s = serial();
    let gate = Arc::new(LegacyGate::default());
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let deadlocked = std::sync::Arc::new(AtomicUsize::new(0));
    let (c, d, gs) = (calls.clone(), deadlocked.clone(), gate.clone());
    logging::set_sink(
        Some(Box::new(move |_, m| {
            if m == "re-enter" {
                // Taking the gate shared again must not wait for the capture.
                if readable_in_time(&gs) {
                    let _again = gs.shared(false);
                    c.fetch_add(1, Ordering::SeqCst);
                } else {
                    d.fetch_add(1, Ordering::SeqCst);
                }
            }
        })),
        Level::Warn,
    );
    let g = gate.shared(false);
    let (waiting_tx, waiting_rx) = mpsc::channel();
    let gw = gate.clone();
    let w = std::thread::spawn(move || {
        let _ = waiting_tx.send(());
        let _x = gw.exclusive();
    });
    waiting_rx.recv().unwrap();
    // Let the writer start waiting.
    std::thread::sleep(Duration::from_millis(100));
    log::warn!("re-enter");
    drop(g);
    w.join().unwrap();
    logging::set_sink(None, Level::Warn);
    assert_eq!(
        deadlocked.load(Ordering::SeqCst),
        0,
        "the sink ran under the gate while a capture waited: a deadlock"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Records past the limit are counted, and the count is reported.
#[test]
fn records_past_the_limit_are_counted() {
    let _s = serial();
    let got = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let g = got.clone();
    logging::set_sink(
        Some(Box::new(move |_, m| {
            if m.starts_with("many") || m.contains("log records were dropped") {
                g.lock().unwrap().push(m.to_string());
            }
        })),
        Level::Warn,
    );
    {
        let _g = LegacyGate::default();
        let _g = _g.shared(false);
        for i in 0..logging::MAX_HELD + 3 {
            log::warn!("many {i}");
        }
    }
    logging::set_sink(None, Level::Warn);
    let v = got.lock().unwrap();
    assert_eq!(v.len(), logging::MAX_HELD + 1);
    assert!(v[0].starts_with("3 log records were dropped"), "{}", v[0]);
    assert_eq!(v[1], "many 0");
}
