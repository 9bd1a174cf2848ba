//! Process-wide backend options, with upstream's names and types, plus this
//! backend's own. They apply to methods loaded afterwards: each load turns
//! them into that method's [`crate::MethodConfig`].
//! Unknown keys are ignored on set (like upstream) and reported as
//! `UnknownOption` on get; a known key with a value of the wrong type is
//! `InvalidArgument`.

use crate::error::{Error, Result};
use std::sync::Mutex;

/// Every method loaded afterwards shares one stream per device (bool, upstream's name).
pub const USE_SHARED_CUDA_STREAM: &str = "use_shared_cuda_stream";
/// Comma-separated methods whose outputs stay on the device (string, upstream's name).
pub const SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD: &str = "skip_copy_output_to_cpu_for_method";
/// The CUDA device methods loaded afterwards run on (int).
pub const DEVICE_INDEX: &str = "device_index";
/// Comma-separated methods replayed as CUDA graphs (string, upstream's name).
pub const ENABLE_CUDA_GRAPH_FOR_METHOD: &str = "enable_cuda_graph_for_method";
/// Most graphs kept per method, one per input shape signature (int, ≥ 1).
pub const CUDA_GRAPH_CACHE_SIZE: &str = "cuda_graph_cache_size";
/// Graphs of methods loaded afterwards keep their intermediate and output memory in blocks of
/// their own instead of allocation nodes (bool, default true; false: allocation nodes).
pub const CUDA_GRAPH_PRIVATE_MEMORY: &str = "cuda_graph_private_memory";
/// Methods loaded afterwards share identical constants with methods loaded before (bool, upstream's name).
pub const WEIGHT_SHARING_ACROSS_METHODS: &str = "weight_sharing_across_methods";
/// With weight sharing: registered buffers (possibly mutated, e.g. a KV cache) of the same
/// program are shared too (bool).
pub const SHARE_MUTABLE_BUFFERS_ACROSS_METHODS: &str = "share_mutable_buffers_across_methods";

/// Longest string value accepted (ExecuTorch's `kMaxOptionValueLength` minus the NUL).
pub(crate) const MAX_STR_LEN: usize = 255;
/// Default of [`CUDA_GRAPH_CACHE_SIZE`] (and of `MethodConfig::graph_cache_size`).
pub const DEFAULT_GRAPH_CACHE_SIZE: usize = 8;
/// Largest accepted [`CUDA_GRAPH_CACHE_SIZE`].
pub const MAX_GRAPH_CACHE_SIZE: usize = 1024;

/// A typed option value.
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

/// The option values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Options {
    pub(crate) use_shared_cuda_stream: bool,
    pub(crate) skip_copy_output_to_cpu_for_method: String,
    pub(crate) device_index: i64,
    pub(crate) enable_cuda_graph_for_method: String,
    pub(crate) cuda_graph_cache_size: i64,
    pub(crate) cuda_graph_private_memory: bool,
    pub(crate) weight_sharing_across_methods: bool,
    pub(crate) share_mutable_buffers_across_methods: bool,
}

/// Whether `method` is in a comma-separated list.
pub(crate) fn in_list(list: &str, method: &str) -> bool {
    !method.is_empty() && list.split(',').any(|t| t.trim() == method)
}

impl Options {
    const fn defaults() -> Options {
        Options {
            use_shared_cuda_stream: false,
            skip_copy_output_to_cpu_for_method: String::new(),
            device_index: 0,
            enable_cuda_graph_for_method: String::new(),
            cuda_graph_cache_size: DEFAULT_GRAPH_CACHE_SIZE as i64,
            cuda_graph_private_memory: true,
            weight_sharing_across_methods: false,
            share_mutable_buffers_across_methods: false,
        }
    }
}

static OPTIONS: Mutex<Options> = Mutex::new(Options::defaults());

fn lock() -> std::sync::MutexGuard<'static, Options> {
    OPTIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Snapshot of the current options.
pub(crate) fn current() -> Options {
    lock().clone()
}

/// Serializes the unit tests that set the process-wide options.
#[cfg(test)]
pub(crate) fn test_lock() -> std::sync::MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reset every option to its default.
pub fn reset() {
    *lock() = Options::defaults();
}

fn wrong_type(key: &str, want: &str, got: &Value) -> Error {
    Error::invalid_argument(format!(
        "option {key} must be a {want}, got a {}",
        got.type_name()
    ))
}

fn method_list(key: &str, v: Value) -> Result<String> {
    match v {
        Value::Str(s) if s.len() <= MAX_STR_LEN => Ok(s),
        Value::Str(s) => Err(Error::invalid_argument(format!(
            "option {key}: value is {} bytes, at most {MAX_STR_LEN}",
            s.len()
        ))),
        other => Err(wrong_type(key, "method name string", &other)),
    }
}

fn boolean(key: &str, v: Value) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(b),
        other => Err(wrong_type(key, "bool", &other)),
    }
}

/// Set one option. Unknown keys are ignored (Ok).
pub fn set(key: &str, v: Value) -> Result<()> {
    let mut o = lock();
    match key {
        USE_SHARED_CUDA_STREAM => o.use_shared_cuda_stream = boolean(key, v)?,
        SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD => {
            o.skip_copy_output_to_cpu_for_method = method_list(key, v)?
        }
        ENABLE_CUDA_GRAPH_FOR_METHOD => o.enable_cuda_graph_for_method = method_list(key, v)?,
        WEIGHT_SHARING_ACROSS_METHODS => o.weight_sharing_across_methods = boolean(key, v)?,
        CUDA_GRAPH_PRIVATE_MEMORY => o.cuda_graph_private_memory = boolean(key, v)?,
        SHARE_MUTABLE_BUFFERS_ACROSS_METHODS => {
            o.share_mutable_buffers_across_methods = boolean(key, v)?
        }
        DEVICE_INDEX => match v {
            Value::Int(i) if (0..=i32::MAX as i64).contains(&i) => o.device_index = i,
            Value::Int(i) => {
                return Err(Error::invalid_argument(format!(
                    "option {key}: {i} is not a valid device index"
                )))
            }
            other => return Err(wrong_type(key, "int", &other)),
        },
        CUDA_GRAPH_CACHE_SIZE => match v {
            Value::Int(i) if (1..=MAX_GRAPH_CACHE_SIZE as i64).contains(&i) => {
                o.cuda_graph_cache_size = i
            }
            Value::Int(i) => {
                return Err(Error::invalid_argument(format!(
                    "option {key}: {i} is out of range 1..={MAX_GRAPH_CACHE_SIZE}"
                )))
            }
            other => return Err(wrong_type(key, "int", &other)),
        },
        _ => log::debug!("ignoring unknown option {key:?}"),
    }
    Ok(())
}

/// Read one option.
pub fn get(key: &str) -> Result<Value> {
    let o = lock();
    Ok(match key {
        USE_SHARED_CUDA_STREAM => Value::Bool(o.use_shared_cuda_stream),
        WEIGHT_SHARING_ACROSS_METHODS => Value::Bool(o.weight_sharing_across_methods),
        CUDA_GRAPH_PRIVATE_MEMORY => Value::Bool(o.cuda_graph_private_memory),
        SHARE_MUTABLE_BUFFERS_ACROSS_METHODS => Value::Bool(o.share_mutable_buffers_across_methods),
        SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD => {
            Value::Str(o.skip_copy_output_to_cpu_for_method.clone())
        }
        ENABLE_CUDA_GRAPH_FOR_METHOD => Value::Str(o.enable_cuda_graph_for_method.clone()),
        DEVICE_INDEX => Value::Int(o.device_index),
        CUDA_GRAPH_CACHE_SIZE => Value::Int(o.cuda_graph_cache_size),
        _ => {
            return Err(Error::unknown_option(format!(
                "{key:?} is not an option of CudaBackend"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_matching() {
        let l = " encoder , decoder";
        assert!(in_list(l, "encoder"));
        assert!(in_list(l, "decoder"));
        assert!(!in_list(l, "enc"));
        assert!(!in_list(l, ""));
    }
}
