//! One method's configuration: how it is loaded and run. [`MethodConfig`]
//! has one `Default`; the process-wide backend options produce one
//! ([`MethodConfig::from_options`]), and the C API's `EtCudaInitArgs`
//! carries the same fields (`EtCudaMethodConfig`, converted field by field
//! with exhaustive destructuring, so a field added here does not compile
//! until the C side has it too).

use crate::error::{Error, Result};
use crate::options;

pub use crate::options::{DEFAULT_GRAPH_CACHE_SIZE, MAX_GRAPH_CACHE_SIZE};

/// How a method is loaded and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodConfig {
    /// CUDA device ordinal.
    pub device: i32,
    /// Share one stream (per device) with every other method that asks for it.
    pub shared_stream: bool,
    /// Replay CUDA graphs keyed by the input shapes.
    pub cuda_graphs: bool,
    /// Most graphs kept (least recently used evicted), 1..=[`MAX_GRAPH_CACHE_SIZE`].
    pub graph_cache_size: usize,
    /// Graphs keep their memory in blocks of their own (default), not allocation nodes.
    pub graph_private_memory: bool,
    /// Hold constants identical to those of methods loaded earlier only once.
    pub weight_sharing: bool,
    /// With `weight_sharing`: registered buffers of the same `share_group` and FQN too.
    pub share_mutable_buffers: bool,
    /// The program this method belongs to (any number the caller picks; 0 for none).
    pub share_group: u64,
    /// Executes that let the configuration decide ([`OutputPlacement::FromConfig`]) leave the
    /// outputs on the device instead of copying them into the caller's buffers.
    pub outputs_on_device: bool,
}

impl Default for MethodConfig {
    fn default() -> MethodConfig {
        MethodConfig {
            device: 0,
            shared_stream: false,
            cuda_graphs: false,
            graph_cache_size: DEFAULT_GRAPH_CACHE_SIZE,
            graph_private_memory: true,
            weight_sharing: false,
            share_mutable_buffers: false,
            share_group: 0,
            outputs_on_device: false,
        }
    }
}

impl MethodConfig {
    /// The configuration the process-wide backend options give `method` of
    /// program `share_group`.
    pub fn from_options(method: &str, share_group: u64) -> Result<MethodConfig> {
        let o = options::current();
        Ok(MethodConfig {
            device: i32::try_from(o.device_index).map_err(|_| {
                Error::invalid_argument(format!("device index {} out of range", o.device_index))
            })?,
            shared_stream: o.use_shared_cuda_stream,
            cuda_graphs: options::in_list(&o.enable_cuda_graph_for_method, method),
            graph_cache_size: usize::try_from(o.cuda_graph_cache_size)
                .unwrap_or(DEFAULT_GRAPH_CACHE_SIZE),
            graph_private_memory: o.cuda_graph_private_memory,
            weight_sharing: o.weight_sharing_across_methods,
            share_mutable_buffers: o.share_mutable_buffers_across_methods,
            share_group,
            outputs_on_device: options::in_list(&o.skip_copy_output_to_cpu_for_method, method),
        })
    }

    /// Check the values (a device index < 0 or a cache size out of range is an error).
    pub fn validate(&self) -> Result<()> {
        if self.device < 0 {
            return Err(Error::invalid_argument(format!(
                "device index {} is negative",
                self.device
            )));
        }
        if !(1..=MAX_GRAPH_CACHE_SIZE).contains(&self.graph_cache_size) {
            return Err(Error::invalid_argument(format!(
                "graph cache size {} is out of range 1..={MAX_GRAPH_CACHE_SIZE}",
                self.graph_cache_size
            )));
        }
        Ok(())
    }
}

/// Where an execute delivers outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputPlacement {
    /// As the method's configuration says ([`MethodConfig::outputs_on_device`]).
    #[default]
    FromConfig,
    /// Copied into the caller's buffers (host or device memory).
    Copy,
    /// Left on the device, owned by the method until its next execute or destroy.
    Device,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_produce_the_default_config() {
        let _g = crate::options::test_lock();
        crate::options::reset();
        assert_eq!(
            MethodConfig::from_options("forward", 0).unwrap(),
            MethodConfig::default()
        );
    }

    #[test]
    fn options_reach_every_field() {
        use crate::options::{set, Value};
        let _g = crate::options::test_lock();
        crate::options::reset();
        set(options::USE_SHARED_CUDA_STREAM, Value::Bool(true)).unwrap();
        set(
            options::ENABLE_CUDA_GRAPH_FOR_METHOD,
            Value::Str("a,forward".into()),
        )
        .unwrap();
        set(options::CUDA_GRAPH_CACHE_SIZE, Value::Int(3)).unwrap();
        set(options::CUDA_GRAPH_PRIVATE_MEMORY, Value::Bool(false)).unwrap();
        set(options::WEIGHT_SHARING_ACROSS_METHODS, Value::Bool(true)).unwrap();
        set(
            options::SHARE_MUTABLE_BUFFERS_ACROSS_METHODS,
            Value::Bool(true),
        )
        .unwrap();
        set(
            options::SKIP_COPY_OUTPUT_TO_CPU_FOR_METHOD,
            Value::Str("forward".into()),
        )
        .unwrap();
        set(options::DEVICE_INDEX, Value::Int(1)).unwrap();
        let c = MethodConfig::from_options("forward", 7).unwrap();
        crate::options::reset();
        assert_eq!(
            c,
            MethodConfig {
                device: 1,
                shared_stream: true,
                cuda_graphs: true,
                graph_cache_size: 3,
                graph_private_memory: false,
                weight_sharing: true,
                share_mutable_buffers: true,
                share_group: 7,
                outputs_on_device: true,
            }
        );
        assert!(c.validate().is_ok());
        let bad = MethodConfig {
            graph_cache_size: 0,
            ..MethodConfig::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().kind(),
            crate::ErrorKind::InvalidArgument
        );
    }
}
