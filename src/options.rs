//! Process-wide backend options, with upstream's names and types, plus
//! this backend's own. Unknown keys are ignored on set (like upstream) and
//! reported as `UnknownOption` on get; a known key with a value of the
//! wrong type is `InvalidArgument`.

use crate::error::{Error, Result};
use std::sync::Mutex;

pub const USE_SHARED_CUDA_STREAM: &str = "use_shared_cuda_stream";
pub const SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD: &str = "skip_copy_output_to_cpu_for_method";
pub const DEVICE_INDEX: &str = "device_index";
pub const EXECUTION_MODE: &str = "execution_mode";

/// Longest string value accepted (ExecuTorch's `kMaxOptionValueLength` minus the NUL).
pub(crate) const MAX_STR_LEN: usize = 255;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Str(String),
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Str(_) => "string",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub use_shared_cuda_stream: bool,
    pub skip_copy_output_to_cpu_for_method: String,
    pub device_index: i64,
    pub execution_mode: String,
}

impl Options {
    const fn defaults() -> Options {
        Options {
            use_shared_cuda_stream: false,
            skip_copy_output_to_cpu_for_method: String::new(),
            device_index: 0,
            execution_mode: String::new(),
        }
    }

    /// Whether `method` is in the comma-separated skip-copy list.
    pub fn skip_copy_for(&self, method: &str) -> bool {
        !method.is_empty()
            && self
                .skip_copy_output_to_cpu_for_method
                .split(',')
                .any(|t| t.trim() == method)
    }
}

static OPTIONS: Mutex<Options> = Mutex::new(Options::defaults());

fn lock() -> std::sync::MutexGuard<'static, Options> {
    OPTIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Snapshot of the current options.
pub fn current() -> Options {
    lock().clone()
}

/// Whether `method` is in the current skip-copy list (no copy of the options:
/// execute asks this on every call).
pub fn skip_copy_for(method: &str) -> bool {
    lock().skip_copy_for(method)
}

pub fn reset() {
    *lock() = Options::defaults();
}

fn wrong_type(key: &str, want: &str, got: &Value) -> Error {
    Error::InvalidArgument(format!(
        "option {key} must be a {want}, got a {}",
        got.type_name()
    ))
}

/// Parse an `execution_mode` value; "" means default.
pub fn parse_mode(s: &str) -> Result<crate::delegate::ExecMode> {
    use crate::delegate::ExecMode;
    match s.trim() {
        "" | "default" => Ok(ExecMode::Default),
        "sync-always" => Ok(ExecMode::SyncAlways),
        "upstream-1.2" => Ok(ExecMode::Upstream12),
        other => Err(Error::InvalidArgument(format!(
            "option {EXECUTION_MODE}: unknown mode {other:?} (expected default, sync-always or upstream-1.2)"
        ))),
    }
}

pub fn set(key: &str, v: Value) -> Result<()> {
    let mut o = lock();
    match key {
        USE_SHARED_CUDA_STREAM => match v {
            Value::Bool(b) => o.use_shared_cuda_stream = b,
            other => return Err(wrong_type(key, "bool", &other)),
        },
        SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD => match v {
            Value::Str(s) if s.len() <= MAX_STR_LEN => o.skip_copy_output_to_cpu_for_method = s,
            Value::Str(s) => {
                return Err(Error::InvalidArgument(format!(
                    "option {key}: value is {} bytes, at most {MAX_STR_LEN}",
                    s.len()
                )))
            }
            other => return Err(wrong_type(key, "method name string", &other)),
        },
        DEVICE_INDEX => match v {
            Value::Int(i) if (0..=i32::MAX as i64).contains(&i) => o.device_index = i,
            Value::Int(i) => {
                return Err(Error::InvalidArgument(format!(
                    "option {key}: {i} is not a valid device index"
                )))
            }
            other => return Err(wrong_type(key, "int", &other)),
        },
        EXECUTION_MODE => match v {
            Value::Str(s) => {
                parse_mode(&s)?;
                o.execution_mode = s;
            }
            other => return Err(wrong_type(key, "string", &other)),
        },
        _ => log::debug!("ignoring unknown option {key:?}"),
    }
    Ok(())
}

fn unknown(key: &str) -> Error {
    Error::UnknownOption(format!("{key:?} is not an option of CudaBackend"))
}

pub fn get_bool(key: &str) -> Result<bool> {
    let o = lock();
    match key {
        USE_SHARED_CUDA_STREAM => Ok(o.use_shared_cuda_stream),
        SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD | EXECUTION_MODE => {
            Err(Error::InvalidArgument(format!("option {key} is a string")))
        }
        DEVICE_INDEX => Err(Error::InvalidArgument(format!("option {key} is an int"))),
        _ => Err(unknown(key)),
    }
}

pub fn get_int(key: &str) -> Result<i64> {
    let o = lock();
    match key {
        DEVICE_INDEX => Ok(o.device_index),
        USE_SHARED_CUDA_STREAM => Err(Error::InvalidArgument(format!("option {key} is a bool"))),
        SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD | EXECUTION_MODE => {
            Err(Error::InvalidArgument(format!("option {key} is a string")))
        }
        _ => Err(unknown(key)),
    }
}

pub fn get_str(key: &str) -> Result<String> {
    let o = lock();
    match key {
        SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD => Ok(o.skip_copy_output_to_cpu_for_method.clone()),
        EXECUTION_MODE => Ok(o.execution_mode.clone()),
        USE_SHARED_CUDA_STREAM => Err(Error::InvalidArgument(format!("option {key} is a bool"))),
        DEVICE_INDEX => Err(Error::InvalidArgument(format!("option {key} is an int"))),
        _ => Err(unknown(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_copy_list_matching() {
        let mut o = Options::defaults();
        o.skip_copy_output_to_cpu_for_method = " encoder , decoder".into();
        assert!(o.skip_copy_for("encoder"));
        assert!(o.skip_copy_for("decoder"));
        assert!(!o.skip_copy_for("enc"));
        assert!(!o.skip_copy_for(""));
    }

    #[test]
    fn mode_parsing() {
        assert!(parse_mode("sync-always").is_ok());
        assert!(parse_mode("upstream-1.2").is_ok());
        assert!(parse_mode("").is_ok());
        assert!(parse_mode("fast").is_err());
    }
}
