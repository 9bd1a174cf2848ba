//! Logging that reaches the user. The library logs through the `log` crate
//! (its own warnings, and the generated code's `aoti_torch_warn`). On first
//! use a logger is installed that hands each record to a sink set by the
//! host (the adapter routes it into ExecuTorch's `ET_LOG`), or, without one,
//! writes warnings and errors to stderr. A Rust host that installed its own
//! `log` logger first keeps it.

use std::sync::{Once, RwLock};

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

/// Where records go: a function taking the level and the message.
pub type Sink = Box<dyn Fn(Level, &str) + Send + Sync>;

struct Config {
    sink: Option<Sink>,
    max: Level,
}

static CONFIG: RwLock<Config> = RwLock::new(Config {
    sink: None,
    max: Level::Warn,
});
static INSTALL: Once = Once::new();

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        let c = CONFIG.read().unwrap_or_else(|p| p.into_inner());
        Level::from_log(m.level()) <= c.max
    }

    fn log(&self, r: &log::Record<'_>) {
        let level = Level::from_log(r.level());
        let c = CONFIG.read().unwrap_or_else(|p| p.into_inner());
        if level > c.max {
            return;
        }
        let msg = r.args().to_string();
        match &c.sink {
            Some(sink) => sink(level, &msg),
            None => eprintln!("[executorch_cuda {:?}] {msg}", level),
        }
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

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
pub fn set_sink(sink: Option<Sink>, max: Level) {
    install();
    let mut c = CONFIG.write().unwrap_or_else(|p| p.into_inner());
    c.sink = sink;
    c.max = max;
    log::set_max_level(max.filter());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn records_reach_the_sink_at_or_above_the_level() {
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
