//! The C types of the `et_cuda_*` API. Enumerations cross the boundary as
//! fixed-width integers with named constants and are converted with
//! `TryFrom`: a value outside the list is an `InvalidArgument` error, never
//! undefined behaviour.

use crate::config::{MethodConfig, OutputPlacement};
use crate::error::{Error, ErrorKind};
use crate::stats::Stats;
use std::ffi::{c_char, c_void};

/// Largest tensor rank accepted by the C API.
pub const ET_CUDA_MAX_DIMS: usize = 16;
const _: () = assert!(ET_CUDA_MAX_DIMS == crate::tensor::MAX_RANK);

/// Status code returned by every fallible `et_cuda_*` function.
pub type EtCudaStatus = i32;
/// Success.
pub const ET_CUDA_STATUS_OK: EtCudaStatus = 0;
/// A caller-supplied argument is wrong (null pointer, bad dtype, wrong count, wrong option type, out-of-range enumeration value...).
pub const ET_CUDA_STATUS_INVALID_ARGUMENT: EtCudaStatus = 1;
/// No CUDA driver, no device, or the requested device index does not exist.
pub const ET_CUDA_STATUS_NO_DEVICE: EtCudaStatus = 2;
/// The program blobs are unusable (not an ELF, truncated, wrong architecture, weights size mismatch, hash mismatch).
pub const ET_CUDA_STATUS_INVALID_PROGRAM: EtCudaStatus = 3;
/// The `.so` could not be opened or its container could not be created.
pub const ET_CUDA_STATUS_LOAD_FAILED: EtCudaStatus = 4;
/// The compiled model reported a failure while running.
pub const ET_CUDA_STATUS_EXECUTION_FAILED: EtCudaStatus = 5;
/// Device or pinned host memory could not be allocated.
pub const ET_CUDA_STATUS_OUT_OF_MEMORY: EtCudaStatus = 6;
/// Any other CUDA driver error.
pub const ET_CUDA_STATUS_CUDA_ERROR: EtCudaStatus = 7;
/// An internal invariant failed (a caught panic, for instance).
pub const ET_CUDA_STATUS_INTERNAL: EtCudaStatus = 8;
/// The option key is not known to this backend (`et_cuda_get_option_*` only).
pub const ET_CUDA_STATUS_UNKNOWN_OPTION: EtCudaStatus = 9;

/// The status code of an error.
pub(crate) fn status_of(e: &Error) -> EtCudaStatus {
    match e.kind() {
        ErrorKind::InvalidArgument => ET_CUDA_STATUS_INVALID_ARGUMENT,
        ErrorKind::NoDevice => ET_CUDA_STATUS_NO_DEVICE,
        ErrorKind::InvalidProgram => ET_CUDA_STATUS_INVALID_PROGRAM,
        ErrorKind::LoadFailed => ET_CUDA_STATUS_LOAD_FAILED,
        ErrorKind::ExecutionFailed => ET_CUDA_STATUS_EXECUTION_FAILED,
        ErrorKind::OutOfMemory => ET_CUDA_STATUS_OUT_OF_MEMORY,
        ErrorKind::Cuda => ET_CUDA_STATUS_CUDA_ERROR,
        ErrorKind::Internal => ET_CUDA_STATUS_INTERNAL,
        ErrorKind::UnknownOption => ET_CUDA_STATUS_UNKNOWN_OPTION,
    }
}

/// How `et_cuda_execute` delivers outputs (an `int32_t`).
pub type EtCudaOutputPlacement = i32;
/// As the handle's configuration says (`EtCudaMethodConfig::outputs_on_device`; with
/// `use_backend_options`, the `skip_copy_output_to_cpu_for_method` option at load time).
pub const ET_CUDA_OUTPUT_PLACEMENT_FROM_CONFIG: EtCudaOutputPlacement = 0;
/// Copy each output into the caller's `data` (host or device memory, looked up); `nbytes` is its capacity.
pub const ET_CUDA_OUTPUT_PLACEMENT_COPY: EtCudaOutputPlacement = 1;
/// Leave outputs on the device: `data` is set to device memory owned by the handle, valid until the
/// handle's next execute or destroy (it may be an input of that next execute).
pub const ET_CUDA_OUTPUT_PLACEMENT_DEVICE: EtCudaOutputPlacement = 2;

/// A placement code, checked.
pub(crate) struct Placement(pub(crate) OutputPlacement);

impl TryFrom<EtCudaOutputPlacement> for Placement {
    type Error = Error;
    fn try_from(v: EtCudaOutputPlacement) -> Result<Placement, Error> {
        Ok(Placement(match v {
            ET_CUDA_OUTPUT_PLACEMENT_FROM_CONFIG => OutputPlacement::FromConfig,
            ET_CUDA_OUTPUT_PLACEMENT_COPY => OutputPlacement::Copy,
            ET_CUDA_OUTPUT_PLACEMENT_DEVICE => OutputPlacement::Device,
            other => {
                return Err(Error::invalid_argument(format!(
                    "output placement {other} is not one of 0 (from the configuration), 1 (copy), 2 (device)"
                )))
            }
        }))
    }
}

/// Log levels for `et_cuda_set_log_callback` (an `int32_t`).
pub type EtCudaLogLevel = i32;
pub const ET_CUDA_LOG_ERROR: EtCudaLogLevel = 1;
pub const ET_CUDA_LOG_WARN: EtCudaLogLevel = 2;
pub const ET_CUDA_LOG_INFO: EtCudaLogLevel = 3;
pub const ET_CUDA_LOG_DEBUG: EtCudaLogLevel = 4;
pub const ET_CUDA_LOG_TRACE: EtCudaLogLevel = 5;

/// Receives one log record: its level, the message (NUL-terminated, valid during the call) and
/// the user pointer given to `et_cuda_set_log_callback`. May be called from any thread.
pub type EtCudaLogCallback =
    Option<unsafe extern "C" fn(level: EtCudaLogLevel, message: *const c_char, user: *mut c_void)>;

/// A tensor passed to or returned from `et_cuda_execute`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EtCudaTensor {
    /// Element memory: host or device (the library looks it up). An output with null `data`
    /// is left in device memory the library owns (until the handle's next execute), whatever
    /// the placement: `data`, `nbytes` and the strides are rewritten.
    pub data: *mut c_void,
    /// Bytes available at `data` (inputs: at least the tensor's bytes; outputs: capacity).
    pub nbytes: u64,
    /// c10 ScalarType code (float32 = 6, bfloat16 = 15, ...).
    pub dtype: i32,
    /// Rank, at most `ET_CUDA_MAX_DIMS`.
    pub ndim: i32,
    /// Sizes; for outputs rewritten with the real sizes after execute.
    pub sizes: [i64; ET_CUDA_MAX_DIMS],
    /// Strides in elements; for outputs rewritten after execute.
    pub strides: [i64; ET_CUDA_MAX_DIMS],
}

/// Looks up named data of the program for `et_cuda_init`: on success returns 0 and sets
/// `*out_data`/`*out_len` to bytes that stay valid until `et_cuda_init` returns or, when
/// `named_data_release` is set, until that is called for this lookup; any other return value
/// means the key is missing.
pub type EtCudaNamedDataFn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        key: *const c_char,
        out_data: *mut *const u8,
        out_len: *mut usize,
    ) -> i32,
>;

/// How a method is loaded and run: the C form of the library's one method configuration
/// (Rust `MethodConfig`). Fill it with `et_cuda_default_method_config` and change what
/// differs.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtCudaMethodConfig {
    /// CUDA device ordinal.
    pub device_index: i32,
    /// Share one stream (per device) with every other handle that asks for it; the stream is
    /// destroyed with the last handle using it.
    pub use_shared_stream: bool,
    /// Replay CUDA graphs keyed by the input signature.
    pub cuda_graphs: bool,
    /// Most graphs kept (1..1024; the least recently used is dropped).
    pub graph_cache_size: u32,
    /// Graphs keep their memory in blocks of their own instead of allocation nodes.
    pub graph_private_memory: bool,
    /// Hold constants identical to those of handles loaded before only once.
    pub weight_sharing: bool,
    /// With weight sharing: registered buffers (a KV cache) of the same `share_group` too.
    pub share_mutable_buffers: bool,
    /// Executes with `ET_CUDA_OUTPUT_PLACEMENT_FROM_CONFIG` leave outputs on the device.
    pub outputs_on_device: bool,
}

impl From<&MethodConfig> for EtCudaMethodConfig {
    fn from(c: &MethodConfig) -> EtCudaMethodConfig {
        // Exhaustive: a field added to MethodConfig does not compile until it is here.
        let MethodConfig {
            device,
            shared_stream,
            cuda_graphs,
            graph_cache_size,
            graph_private_memory,
            weight_sharing,
            share_mutable_buffers,
            share_group: _,
            outputs_on_device,
        } = *c;
        EtCudaMethodConfig {
            device_index: device,
            use_shared_stream: shared_stream,
            cuda_graphs,
            graph_cache_size: u32::try_from(graph_cache_size).unwrap_or(u32::MAX),
            graph_private_memory,
            weight_sharing,
            share_mutable_buffers,
            outputs_on_device,
        }
    }
}

impl EtCudaMethodConfig {
    /// The Rust configuration, checked, for a method of program `share_group`.
    pub(crate) fn to_config(self, share_group: u64) -> Result<MethodConfig, Error> {
        let EtCudaMethodConfig {
            device_index,
            use_shared_stream,
            cuda_graphs,
            graph_cache_size,
            graph_private_memory,
            weight_sharing,
            share_mutable_buffers,
            outputs_on_device,
        } = self;
        let c = MethodConfig {
            device: device_index,
            shared_stream: use_shared_stream,
            cuda_graphs,
            graph_cache_size: graph_cache_size as usize,
            graph_private_memory,
            weight_sharing,
            share_mutable_buffers,
            share_group,
            outputs_on_device,
        };
        c.validate()?;
        Ok(c)
    }
}

/// Tells the caller that the library is done with the bytes of one `named_data` lookup
/// (see `EtCudaInitArgs::named_data_release`).
pub type EtCudaNamedDataReleaseFn =
    Option<unsafe extern "C" fn(user: *mut c_void, key: *const c_char)>;

/// Arguments of `et_cuda_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EtCudaInitArgs {
    /// The AOTInductor `.so` bytes (copied; may be freed after init returns).
    pub so_data: *const u8,
    pub so_len: usize,
    /// The weights blob (copied to the device; may be freed after init returns). May be null with length 0.
    pub weights_data: *const u8,
    pub weights_len: usize,
    /// Method name (used by the per-method options); may be null.
    pub method_name: *const c_char,
    /// Named-data key of the `.so`; when it has the form `<sha256 hex>_so_blob` the bytes are
    /// checked against that hash. May be null.
    pub so_key: *const c_char,
    /// Named-data key of the weights; `<sha256 hex>_weights_blob` is checked like `so_key`. May be null.
    pub weights_key: *const c_char,
    /// When true, the configuration comes from the process-wide backend options
    /// (`et_cuda_set_option_*`) for this method name, and `config` is ignored.
    pub use_backend_options: bool,
    /// How the method is loaded and run (unless `use_backend_options`).
    pub config: EtCudaMethodConfig,
    /// The program this method belongs to (any value the caller picks, e.g. the address of its
    /// named-data map; 0 for none): mutable buffers are only shared within one program.
    pub share_group: u64,
    /// With `named_data` set, the library finds the blobs itself: `so_data`/`weights_data` and
    /// the keys are ignored, and the delegate's processed payload (`payload_data`, may be empty)
    /// names them: empty (`<method>_so_blob`, `<method>_weights_blob`), text
    /// `"<so_key>\n<weights_key>"`, or ExecuTorch 1.5's binary per-FQN weights (`ETCUDAFQN3`).
    pub payload_data: *const u8,
    pub payload_len: usize,
    pub named_data: EtCudaNamedDataFn,
    pub named_data_user: *mut c_void,
    /// Optional: called once for each successful `named_data` lookup of a per-constant weight
    /// storage (ExecuTorch 1.5 programs), with the same key, as soon as the library no longer
    /// reads those bytes (before `et_cuda_init` returns); the caller may free them then. The
    /// weights are read one storage at a time, so with this set they need not all be in host
    /// memory at once. Lookups it is not called for stay valid until `et_cuda_init` returns.
    /// `named_data` and this function run while the library holds no lock: they may call back
    /// into the library.
    pub named_data_release: EtCudaNamedDataReleaseFn,
}

/// A snapshot of the counters (returned by `et_cuda_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EtCudaStats {
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
    /// Of that, host time spent running the model: the container's run call, or a graph launch
    /// (nanoseconds).
    pub run_host_ns: u64,
    /// CUDA graphs captured.
    pub graph_captures: u64,
    /// Executes served by replaying a captured graph.
    pub graph_replays: u64,
    /// Captures that failed (that input shape then runs eagerly).
    pub graph_fallbacks: u64,
    /// Bytes of constants served from other methods' buffers (weight sharing).
    pub shared_constant_bytes: u64,
    /// CUDA modules the generated code of live handles loaded (process-wide only; each is
    /// unloaded when its handle is destroyed).
    pub generated_modules: u64,
    /// Loading, summed over loads (nanoseconds): time in the `named_data` lookups (the
    /// program's file reads, with ExecuTorch's file data loader).
    pub load_fetch_ns: u64,
    /// Opening `.so` files (validation, hash, `dlopen`).
    pub load_so_open_ns: u64,
    /// Creating containers.
    pub load_container_ns: u64,
    /// Uploading weights (per-constant weights: copies into pinned staging, the transfers and
    /// the final wait; a packed blob: the generated code's own load).
    pub load_upload_ns: u64,
    /// Weight bytes uploaded in `load_upload_ns`.
    pub load_upload_bytes: u64,
    /// Pinned staging used by weight uploads (the largest; 0: pageable copies only).
    pub load_staging_bytes: u64,
    /// Checking blobs against the SHA-256 in their keys (the `.so` always; a packed weights
    /// blob with `ET_CUDA_VERIFY_WEIGHTS=1`).
    pub load_verify_ns: u64,
}

impl From<Stats> for EtCudaStats {
    fn from(s: Stats) -> EtCudaStats {
        EtCudaStats {
            executes: s.executes,
            host_waits: s.host_waits,
            driver_allocs: s.driver_allocs,
            pool_allocs: s.pool_allocs,
            pool_frees: s.pool_frees,
            live_allocs: s.live_allocs,
            live_bytes: s.live_bytes,
            bytes_htod: s.bytes_htod,
            bytes_dtoh: s.bytes_dtoh,
            bytes_dtod: s.bytes_dtod,
            execute_host_ns: s.execute_host_ns,
            run_host_ns: s.run_host_ns,
            graph_captures: s.graph_captures,
            graph_replays: s.graph_replays,
            graph_fallbacks: s.graph_fallbacks,
            shared_constant_bytes: s.shared_constant_bytes,
            generated_modules: s.generated_modules,
            load_fetch_ns: s.load_fetch_ns,
            load_so_open_ns: s.load_so_open_ns,
            load_container_ns: s.load_container_ns,
            load_upload_ns: s.load_upload_ns,
            load_upload_bytes: s.load_upload_bytes,
            load_staging_bytes: s.load_staging_bytes,
            load_verify_ns: s.load_verify_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_enumerations_are_errors() {
        assert!(Placement::try_from(7).is_err());
        assert!(Placement::try_from(-1).is_err());
        assert_eq!(Placement::try_from(2).unwrap().0, OutputPlacement::Device);
    }

    #[test]
    fn method_config_round_trips_and_is_checked() {
        let rust = MethodConfig {
            device: 3,
            shared_stream: true,
            cuda_graphs: true,
            graph_cache_size: 5,
            graph_private_memory: false,
            weight_sharing: true,
            share_mutable_buffers: true,
            share_group: 9,
            outputs_on_device: true,
        };
        let c = EtCudaMethodConfig::from(&rust);
        assert_eq!(c.to_config(9).unwrap(), rust);
        let d = EtCudaMethodConfig::from(&MethodConfig::default());
        assert_eq!(d.to_config(0).unwrap(), MethodConfig::default());
        let zero = EtCudaMethodConfig {
            graph_cache_size: 0,
            ..d
        };
        assert_eq!(
            zero.to_config(0).unwrap_err().kind(),
            crate::ErrorKind::InvalidArgument
        );
    }
}
