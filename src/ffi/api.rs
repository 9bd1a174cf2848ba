//! The `et_cuda_*` C API: the backend lifecycle, options and counters.
//! Each function is a thin wrapper: check pointers, call the Rust API in
//! [`crate::delegate`] / [`crate::options`], map the result to a status.

use super::{boundary, c_str, non_null, slice_from, slice_from_mut, write_out};
use crate::delegate::{CudaHandle, ExecMode, InitParams, OutputPlacement};
use crate::error::{Error, EtCudaStatus};
use crate::stats::EtCudaStats;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Largest tensor rank accepted by the C API.
pub const ET_CUDA_MAX_DIMS: usize = 16;

/// Opaque backend handle for one loaded method.
///
/// Ownership: created by `et_cuda_init` and owned by the caller, who releases
/// it with `et_cuda_destroy`. Behind the pointer is an `Arc` registered in a
/// process-wide table: every call looks the pointer up there, so a destroyed,
/// double-destroyed or made-up handle is an `InvalidArgument` error, not a
/// use-after-free, and a destroy that races with an execute on another thread
/// waits for it. Calls on one handle from several threads are serialized by
/// the handle's own lock.
pub struct EtCudaHandle {
    _private: [u8; 0],
}

/// Live handles: the address handed to C, and the handle it names.
static LIVE: Mutex<Vec<(usize, Arc<CudaHandle>)>> = Mutex::new(Vec::new());
/// Source of unique, never reused handle addresses (never dereferenced).
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x1000);

fn live() -> std::sync::MutexGuard<'static, Vec<(usize, Arc<CudaHandle>)>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The live handle behind a C pointer.
fn lookup(handle: *const EtCudaHandle) -> Result<Arc<CudaHandle>, Error> {
    if handle.is_null() {
        return Err(Error::InvalidArgument("handle is null".into()));
    }
    let key = handle as usize;
    live()
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, h)| h.clone())
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "handle {key:#x} is not a live handle (destroyed already, or never made by et_cuda_init)"
            ))
        })
}

/// How outputs are delivered by `et_cuda_execute`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtCudaOutputPlacement {
    /// Decide from the `skip_copy_output_to_cpu_for_method` option and the handle's method name.
    FromOptions = 0,
    /// Copy each output into the caller's `data` (host or device memory, looked up); `nbytes` is its capacity.
    Copy = 1,
    /// Leave outputs on the device: `data` is set to device memory owned by the handle, valid until the
    /// handle's next execute or destroy.
    Device = 2,
}

/// Execution mode of a handle. Only `Default` is meant for production; the others reproduce older
/// behaviour for benchmarks.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtCudaExecMode {
    /// Take the mode from the `execution_mode` option when `use_backend_options` is set, else `Default`.
    FromOptions = 0,
    /// Stream-ordered, no host waits unless outputs go to host memory.
    Default = 1,
    /// Synchronize the stream at the end of every execute.
    SyncAlways = 2,
    /// What ExecuTorch 1.2 does: `AOTInductorModelContainerRun`, synchronize, pageable copies.
    Upstream12 = 3,
}

/// A tensor passed to or returned from `et_cuda_execute`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EtCudaTensor {
    /// Element memory: host or device (the library looks it up).
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
    /// Method name (used by `skip_copy_output_to_cpu_for_method`); may be null.
    pub method_name: *const c_char,
    /// Named-data key of the `.so`; when it has the form `<sha256 hex>_so_blob` the bytes are
    /// checked against that hash. May be null.
    pub so_key: *const c_char,
    /// When true, `device_index`, `use_shared_stream` and a `FromOptions` mode come from the
    /// process-wide backend options (`et_cuda_set_option_*`).
    pub use_backend_options: bool,
    /// CUDA device ordinal.
    pub device_index: i32,
    /// Share one stream (per device) with every other handle that asks for it; the stream is
    /// destroyed with the last handle using it.
    pub use_shared_stream: bool,
    /// Execution mode.
    pub mode: EtCudaExecMode,
}

/// Library version, a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn et_cuda_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// This thread's last error message ("" after a successful call). The pointer is valid until the
/// next `et_cuda_*` or `aoti_torch_*` call on this thread.
#[no_mangle]
pub extern "C" fn et_cuda_last_error() -> *const c_char {
    crate::error::last_error_ptr()
}

/// Number of CUDA devices. Fails with `NoDevice` when there is no driver.
#[no_mangle]
pub extern "C" fn et_cuda_device_count(out_count: *mut i32) -> EtCudaStatus {
    boundary("et_cuda_device_count", || {
        if out_count.is_null() {
            return Err(Error::InvalidArgument("out_count is null".into()));
        }
        let n = crate::cuda::device_count()?;
        // SAFETY: out-pointer checked by write_out.
        unsafe { write_out(out_count, n, "out_count") }
    })
}

/// Load a method: validate and open the `.so`, create its container on the device, load the weights.
/// On success `*out_handle` owns a new handle; on failure it is set to null.
#[no_mangle]
pub extern "C" fn et_cuda_init(
    args: *const EtCudaInitArgs,
    out_handle: *mut *mut EtCudaHandle,
) -> EtCudaStatus {
    if !out_handle.is_null() {
        // SAFETY: non-null out-pointer supplied by the caller.
        unsafe { out_handle.write(std::ptr::null_mut()) };
    }
    boundary("et_cuda_init", || {
        if out_handle.is_null() {
            return Err(Error::InvalidArgument("out_handle is null".into()));
        }
        // SAFETY: pointers come from the caller; each is null-checked.
        let (a, so, weights, method, so_key) = unsafe {
            let a = non_null(args, "args")?;
            let so = slice_from(a.so_data, a.so_len, "so_data")?;
            let weights = slice_from(a.weights_data, a.weights_len, "weights_data")?;
            let method = c_str(a.method_name, "method_name", true)?;
            let so_key = c_str(a.so_key, "so_key", true)?;
            (a, so, weights, method, so_key)
        };
        let params = InitParams {
            so,
            weights,
            method_name: method.unwrap_or("").to_string(),
            so_key: so_key.map(str::to_string),
            use_backend_options: a.use_backend_options,
            device_index: a.device_index,
            use_shared_stream: a.use_shared_stream,
            mode: ExecMode::from_c(a.mode),
        };
        let inner = Arc::new(CudaHandle::init(params)?);
        // Addresses step by 16 and are never reused, so a stale pointer never names a new handle.
        let key = NEXT_HANDLE.fetch_add(16, Ordering::Relaxed);
        live().push((key, inner));
        let h = key as *mut EtCudaHandle;
        // SAFETY: checked non-null above.
        unsafe { out_handle.write(h) };
        Ok(())
    })
}

/// Destroy a handle made by `et_cuda_init`: deletes its container and frees everything it owns,
/// including outputs left on the device. Null is accepted and ignored; a handle that is not live
/// (destroyed already) is `InvalidArgument`. An execute running on another thread finishes first.
#[no_mangle]
pub extern "C" fn et_cuda_destroy(handle: *mut EtCudaHandle) -> EtCudaStatus {
    boundary("et_cuda_destroy", || {
        if handle.is_null() {
            return Ok(());
        }
        let key = handle as usize;
        let h = {
            let mut l = live();
            let pos = l.iter().position(|(k, _)| *k == key).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "handle {key:#x} is not a live handle (destroyed twice?)"
                ))
            })?;
            l.swap_remove(pos).1
        };
        h.destroy()
    })
}

/// Number of inputs of the method.
#[no_mangle]
pub extern "C" fn et_cuda_num_inputs(handle: *const EtCudaHandle, out: *mut usize) -> EtCudaStatus {
    boundary("et_cuda_num_inputs", || {
        let h = lookup(handle)?;
        // SAFETY: out-pointer checked by write_out.
        unsafe { write_out(out, h.num_inputs(), "out") }
    })
}

/// Number of outputs of the method.
#[no_mangle]
pub extern "C" fn et_cuda_num_outputs(
    handle: *const EtCudaHandle,
    out: *mut usize,
) -> EtCudaStatus {
    boundary("et_cuda_num_outputs", || {
        let h = lookup(handle)?;
        // SAFETY: out-pointer checked by write_out.
        unsafe { write_out(out, h.num_outputs(), "out") }
    })
}

/// Run the method. Inputs may live in host or device memory. Outputs are delivered as `placement`
/// says; their `ndim`/`sizes`/`strides` are rewritten with the real shape (dynamic shapes). The host
/// waits at most once, and only when some output is copied into host memory.
#[no_mangle]
pub extern "C" fn et_cuda_execute(
    handle: *mut EtCudaHandle,
    inputs: *const EtCudaTensor,
    num_inputs: usize,
    outputs: *mut EtCudaTensor,
    num_outputs: usize,
    placement: EtCudaOutputPlacement,
) -> EtCudaStatus {
    boundary("et_cuda_execute", || {
        let h = lookup(handle)?;
        // SAFETY: arrays of the stated lengths per the caller's contract.
        let (ins, outs) = unsafe {
            (
                slice_from(inputs, num_inputs, "inputs")?,
                slice_from_mut(outputs, num_outputs, "outputs")?,
            )
        };
        h.execute(ins, outs, OutputPlacement::from_c(placement))
    })
}

/// The handle's CUDA stream (a `CUstream` / `cudaStream_t`), borrowed: valid while the handle lives.
#[no_mangle]
pub extern "C" fn et_cuda_handle_stream(
    handle: *const EtCudaHandle,
    out_stream: *mut *mut c_void,
) -> EtCudaStatus {
    boundary("et_cuda_handle_stream", || {
        let h = lookup(handle)?;
        // SAFETY: out-pointer checked by write_out.
        unsafe { write_out(out_stream, h.stream_raw(), "out_stream") }
    })
}

/// Block until all work queued on the handle's stream has finished (counted as a host wait).
#[no_mangle]
pub extern "C" fn et_cuda_synchronize(handle: *const EtCudaHandle) -> EtCudaStatus {
    boundary("et_cuda_synchronize", || lookup(handle)?.synchronize())
}

/// Copy `nbytes` from `src` to `dst` (each host or device memory, looked up) in the order of the
/// handle's stream. Waits for the copy only when `dst` is host memory. With a null `handle` the copy
/// runs on the device's default stream and always waits (for tools and tests).
#[no_mangle]
pub extern "C" fn et_cuda_memcpy(
    handle: *const EtCudaHandle,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> EtCudaStatus {
    boundary("et_cuda_memcpy", || {
        if nbytes > 0 && dst.is_null() {
            return Err(Error::InvalidArgument("dst is null".into()));
        }
        if nbytes > 0 && src.is_null() {
            return Err(Error::InvalidArgument("src is null".into()));
        }
        if handle.is_null() {
            // SAFETY: the caller guarantees nbytes valid bytes at both pointers.
            return unsafe { crate::delegate::memcpy_blocking(dst, src, nbytes) };
        }
        lookup(handle)?.memcpy(dst, src, nbytes)
    })
}

/// Allocate `nbytes` of device memory on `device` with `cuMemAlloc` (synchronous; for tools and
/// tests that need device-resident inputs, not for hot paths). Free it with `et_cuda_free_device`.
#[no_mangle]
pub extern "C" fn et_cuda_alloc_device(
    device: i32,
    nbytes: usize,
    out_ptr: *mut *mut c_void,
) -> EtCudaStatus {
    boundary("et_cuda_alloc_device", || {
        if out_ptr.is_null() {
            return Err(Error::InvalidArgument("out_ptr is null".into()));
        }
        let p = crate::cuda::memory::alloc_device_sync(device, nbytes)?;
        // SAFETY: checked non-null.
        unsafe { write_out(out_ptr, p, "out_ptr") }
    })
}

/// Free memory from `et_cuda_alloc_device` (synchronous). Null is ignored.
#[no_mangle]
pub extern "C" fn et_cuda_free_device(ptr: *mut c_void) -> EtCudaStatus {
    boundary("et_cuda_free_device", || {
        crate::cuda::memory::free_device_sync(ptr)
    })
}

/// Whether `ptr` is CUDA device memory. Fails with `NoDevice` when there is no driver.
#[no_mangle]
pub extern "C" fn et_cuda_is_device_pointer(ptr: *const c_void, out: *mut bool) -> EtCudaStatus {
    boundary("et_cuda_is_device_pointer", || {
        if out.is_null() {
            return Err(Error::InvalidArgument("out is null".into()));
        }
        let v = crate::cuda::is_device_pointer(ptr)?;
        // SAFETY: out-pointer checked by write_out.
        unsafe { write_out(out, v, "out") }
    })
}

/// Counters of one handle, or process-wide when `handle` is null.
#[no_mangle]
pub extern "C" fn et_cuda_stats(
    handle: *const EtCudaHandle,
    out: *mut EtCudaStats,
) -> EtCudaStatus {
    boundary("et_cuda_stats", || {
        let s = if handle.is_null() {
            crate::stats::global().snapshot()
        } else {
            lookup(handle)?.stats()
        };
        // SAFETY: out-pointer checked by write_out.
        unsafe { write_out(out, s, "out") }
    })
}

/// Set a boolean backend option. Unknown keys are ignored (Ok); a known key of another type is
/// `InvalidArgument`.
#[no_mangle]
pub extern "C" fn et_cuda_set_option_bool(key: *const c_char, value: bool) -> EtCudaStatus {
    boundary("et_cuda_set_option_bool", || {
        // SAFETY: NUL-terminated key per the caller's contract.
        let k = unsafe { c_str(key, "key", false)? }.unwrap_or("");
        crate::options::set(k, crate::options::Value::Bool(value))
    })
}

/// Set an integer backend option (see `et_cuda_set_option_bool` for the rules).
#[no_mangle]
pub extern "C" fn et_cuda_set_option_int(key: *const c_char, value: i64) -> EtCudaStatus {
    boundary("et_cuda_set_option_int", || {
        // SAFETY: NUL-terminated key per the caller's contract.
        let k = unsafe { c_str(key, "key", false)? }.unwrap_or("");
        crate::options::set(k, crate::options::Value::Int(value))
    })
}

/// Set a string backend option (see `et_cuda_set_option_bool` for the rules).
#[no_mangle]
pub extern "C" fn et_cuda_set_option_str(key: *const c_char, value: *const c_char) -> EtCudaStatus {
    boundary("et_cuda_set_option_str", || {
        // SAFETY: NUL-terminated strings per the caller's contract.
        let (k, v) = unsafe {
            (
                c_str(key, "key", false)?.unwrap_or(""),
                c_str(value, "value", false)?.unwrap_or(""),
            )
        };
        crate::options::set(k, crate::options::Value::Str(v.to_string()))
    })
}

/// Read a boolean option. `UnknownOption` for keys this backend does not know.
#[no_mangle]
pub extern "C" fn et_cuda_get_option_bool(key: *const c_char, out: *mut bool) -> EtCudaStatus {
    boundary("et_cuda_get_option_bool", || {
        // SAFETY: NUL-terminated key; out-pointer checked by write_out.
        let k = unsafe { c_str(key, "key", false)? }.unwrap_or("");
        let v = crate::options::get_bool(k)?;
        unsafe { write_out(out, v, "out") }
    })
}

/// Read an integer option. `UnknownOption` for keys this backend does not know.
#[no_mangle]
pub extern "C" fn et_cuda_get_option_int(key: *const c_char, out: *mut i64) -> EtCudaStatus {
    boundary("et_cuda_get_option_int", || {
        // SAFETY: NUL-terminated key; out-pointer checked by write_out.
        let k = unsafe { c_str(key, "key", false)? }.unwrap_or("");
        let v = crate::options::get_int(k)?;
        unsafe { write_out(out, v, "out") }
    })
}

/// Read a string option into `buf` (NUL-terminated, truncated to `buf_len - 1` bytes).
/// `UnknownOption` for keys this backend does not know.
#[no_mangle]
pub extern "C" fn et_cuda_get_option_str(
    key: *const c_char,
    buf: *mut c_char,
    buf_len: usize,
) -> EtCudaStatus {
    boundary("et_cuda_get_option_str", || {
        // SAFETY: NUL-terminated key; `buf` has `buf_len` writable bytes per the caller's contract.
        let k = unsafe { c_str(key, "key", false)? }.unwrap_or("");
        let v = crate::options::get_str(k)?;
        if buf_len == 0 {
            return Err(Error::InvalidArgument("buf_len is 0".into()));
        }
        let dst = unsafe { slice_from_mut(buf.cast::<u8>(), buf_len, "buf")? };
        let n = v.len().min(buf_len - 1);
        dst[..n].copy_from_slice(&v.as_bytes()[..n]);
        dst[n] = 0;
        Ok(())
    })
}

/// Reset every backend option to its default (for tests).
#[no_mangle]
pub extern "C" fn et_cuda_reset_options() -> EtCudaStatus {
    boundary("et_cuda_reset_options", || {
        crate::options::reset();
        Ok(())
    })
}
