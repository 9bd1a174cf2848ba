//! The `et_cuda_*` C API of one method's life: init, execute, destroy and
//! the handle's queries. Each function converts its C arguments (checked
//! pointers, integer codes) into the types of the safe API (`crate::api`)
//! and calls it, inside the one guard. Memory, copies and the caller stream
//! are in [`super::memory`].

use super::types::*;
use super::{c_str, guard, guard_value, non_null, slice_from, slice_from_mut, write_out, EtCuda};
use crate::api::{Blobs, InputArg, Method, OutputArg, OutputInfo};
use crate::config::MethodConfig;
use crate::error::{invalid, Error, Result};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Opaque backend handle for one loaded method.
///
/// Ownership: created by `et_cuda_init` and owned by the caller, who releases
/// it with `et_cuda_destroy`. The pointer is a key into a process-wide table
/// of live methods: every call looks it up there, so a destroyed,
/// double-destroyed or made-up handle is an `INVALID_ARGUMENT` error, not a
/// use-after-free, and a destroy that races with an execute on another
/// thread waits for it. Calls on one handle from several threads are
/// serialized by the method's own lock.
pub struct EtCudaHandle {
    _private: [u8; 0],
}

/// Live methods: the address handed to C, and the method it names.
static LIVE: Mutex<Vec<(usize, Arc<Method>)>> = Mutex::new(Vec::new());
/// Source of unique, never reused handle addresses (never dereferenced).
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(HANDLE_BASE);
/// The first handle address and the step between two (never reused).
const HANDLE_BASE: usize = 0x1000;
const HANDLE_STEP: usize = 16;

fn live() -> std::sync::MutexGuard<'static, Vec<(usize, Arc<Method>)>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The live method behind a C pointer.
pub(super) fn lookup(handle: *const EtCudaHandle) -> Result<Arc<Method>> {
    if handle.is_null() {
        return invalid("handle is null");
    }
    let key = handle as usize;
    live()
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, h)| h.clone())
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "handle {key:#x} is not a live handle (destroyed already, or never made by et_cuda_init)"
            ))
        })
}

/// Number of live handles (for tests).
pub fn live_handles() -> usize {
    live().len()
}

/// Library version, a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn et_cuda_version() -> *const c_char {
    guard_value("et_cuda_version", c"".as_ptr(), || {
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
    })
}

/// This thread's last error message ("" after a successful call). The pointer is valid until the
/// next `et_cuda_*` or `aoti_torch_*` call on this thread.
#[no_mangle]
pub extern "C" fn et_cuda_last_error() -> *const c_char {
    guard_value("et_cuda_last_error", c"".as_ptr(), super::last_error_ptr)
}

/// Number of CUDA devices. Fails with `NO_DEVICE` when there is no driver.
///
/// # Safety
/// `out_count` must be null or valid for a write of an `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_device_count(out_count: *mut i32) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_device_count", || {
        if out_count.is_null() {
            return invalid("out_count is null");
        }
        let n = crate::api::memory::device_count()?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_count, n, "out_count") }
    })
}

/// The CUDA driver's version (1000 × major + 10 × minor). Fails with `NO_DEVICE` without a driver.
///
/// # Safety
/// `out_version` must be null or valid for a write of an `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_driver_version(out_version: *mut i32) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_driver_version", || {
        if out_version.is_null() {
            return invalid("out_version is null");
        }
        let v = crate::api::memory::driver_version()?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_version, v, "out_version") }
    })
}

/// Fill `*out` with the library's default method configuration (what a method gets when no
/// option changes it).
///
/// # Safety
/// `out` must be null or valid for a write of an `EtCudaMethodConfig`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_default_method_config(
    out: *mut EtCudaMethodConfig,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_default_method_config", || {
        let c = EtCudaMethodConfig::from(&MethodConfig::default());
        // SAFETY: null-checked; valid per the contract.
        unsafe { write_out(out, c, "out") }
    })
}

/// Load a method: validate and open the `.so`, create its container on the device, load the weights.
/// On success `*out_handle` owns a new handle; on failure it is set to null.
///
/// # Safety
/// `args` must be null or point to a valid `EtCudaInitArgs` whose pointers are null or valid
/// for their stated lengths (strings NUL-terminated), and whose `named_data`, when set, follows
/// its contract (`EtCudaNamedDataFn`); `out_handle` must be null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_init(
    args: *const EtCudaInitArgs,
    out_handle: *mut *mut EtCudaHandle,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_init", || {
        // SAFETY: a non-null out_handle is valid for writes per the contract.
        unsafe { write_out(out_handle, std::ptr::null_mut(), "out_handle")? };
        crate::logging::install();
        // SAFETY: pointers come from the caller; each is null-checked.
        let (a, so, weights, method, so_key, weights_key) = unsafe {
            let a = non_null(args, "args")?;
            (
                a,
                slice_from(a.so_data, a.so_len, "so_data")?,
                slice_from(a.weights_data, a.weights_len, "weights_data")?,
                c_str(a.method_name, "method_name", true)?.unwrap_or(""),
                c_str(a.so_key, "so_key", true)?,
                c_str(a.weights_key, "weights_key", true)?,
            )
        };
        let config = if a.use_backend_options {
            MethodConfig::from_options(method, a.share_group)?
        } else {
            a.config.to_config(a.share_group)?
        };
        let blobs = match a.named_data {
            None => Blobs::Bytes {
                so,
                weights,
                so_key,
                weights_key,
            },
            Some(f) => {
                // SAFETY: the payload is `payload_len` readable bytes (or null with 0).
                let payload = unsafe { slice_from(a.payload_data, a.payload_len, "payload_data")? };
                let fetch = NamedData {
                    f,
                    release: a.named_data_release,
                    user: a.named_data_user,
                };
                let release = |k: &str| fetch.release(k);
                let blobs = Blobs::NamedData {
                    payload,
                    lookup: &|k| fetch.get(k),
                    release: fetch.release.is_some().then_some(&release as &dyn Fn(&str)),
                };
                let h = register(Method::load_from(method, blobs, &config)?);
                // SAFETY: out_handle was written above (non-null and valid per the contract).
                return unsafe { write_out(out_handle, h, "out_handle") };
            }
        };
        let h = register(Method::load_from(method, blobs, &config)?);
        // SAFETY: out_handle was written above (non-null and valid per the contract).
        unsafe { write_out(out_handle, h, "out_handle") }
    })
}

/// Keep a loaded method in the table of live handles; its key is the handle for C.
fn register(method: Method) -> *mut EtCudaHandle {
    // Keys step by HANDLE_STEP and are never reused, so a stale pointer never names a new handle.
    let key = NEXT_HANDLE.fetch_add(HANDLE_STEP, Ordering::Relaxed);
    live().push((key, Arc::new(method)));
    key as *mut EtCudaHandle
}

/// The caller's named-data lookup (and release).
struct NamedData {
    f: unsafe extern "C" fn(*mut c_void, *const c_char, *mut *const u8, *mut usize) -> i32,
    release: crate::ffi::types::EtCudaNamedDataReleaseFn,
    user: *mut c_void,
}

impl NamedData {
    /// The bytes under `key` (valid until `et_cuda_init` returns, per the callback's
    /// contract); `None` when the callback has no such key.
    fn get<'a>(&self, key: &str) -> Option<&'a [u8]> {
        let (mut p, mut n) = (std::ptr::null::<u8>(), 0usize);
        // SAFETY: the callback and its user pointer come from the caller (et_cuda_init's contract);
        // the key is NUL-terminated and the out-pointers are locals.
        let rc = with_c_key(key, |k| unsafe {
            (self.f)(self.user, k.as_ptr(), &mut p, &mut n)
        })?;
        if rc != 0 {
            return None;
        }
        // SAFETY: the callback promises n readable bytes that stay valid until the init call
        // returns or their release (which the library calls only once it no longer reads them).
        unsafe { slice_from(p, n, key) }.ok()
    }

    /// The library no longer reads the bytes of one lookup of `key`.
    fn release(&self, key: &str) {
        let Some(r) = self.release else {
            return;
        };
        // SAFETY: the callback and its user pointer come from the caller (et_cuda_init's
        // contract); the key is NUL-terminated and lives across the call.
        with_c_key(key, |k| unsafe { r(self.user, k.as_ptr()) });
    }
}

/// `f` over `key` as a C string (`None` when the key holds a NUL byte): on the stack when it
/// is short, as named-data keys are (a payload may name 2^20 of them, each looked up once).
fn with_c_key<R>(key: &str, f: impl FnOnce(&CStr) -> R) -> Option<R> {
    let mut buf = [0u8; 256];
    if key.len() < buf.len() {
        buf[..key.len()].copy_from_slice(key.as_bytes());
        // Fails exactly when the key holds a NUL byte (the byte after it is one).
        return CStr::from_bytes_with_nul(&buf[..=key.len()]).ok().map(f);
    }
    CString::new(key).ok().map(|k| f(&k))
}

/// Destroy a handle made by `et_cuda_init`: deletes its container and frees everything it owns,
/// including outputs left on the device. Null is accepted and ignored; a handle that is not live
/// (destroyed already) is `INVALID_ARGUMENT`. An execute running on another thread finishes first.
#[no_mangle]
pub extern "C" fn et_cuda_destroy(handle: *mut EtCudaHandle) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_destroy", || {
        if handle.is_null() {
            return Ok(());
        }
        let key = handle as usize;
        let h = {
            let mut l = live();
            let pos = l.iter().position(|(k, _)| *k == key).ok_or_else(|| {
                Error::invalid_argument(format!(
                    "handle {key:#x} is not a live handle (destroyed twice?)"
                ))
            })?;
            l.swap_remove(pos).1
        };
        h.destroy()
    })
}

/// Number of inputs of the method.
///
/// # Safety
/// `out` must be null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_num_inputs(
    handle: *const EtCudaHandle,
    out: *mut usize,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_num_inputs", || {
        let h = lookup(handle)?;
        // SAFETY: null-checked; valid per the contract.
        unsafe { write_out(out, h.num_inputs(), "out") }
    })
}

/// Number of outputs of the method.
///
/// # Safety
/// `out` must be null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_num_outputs(
    handle: *const EtCudaHandle,
    out: *mut usize,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_num_outputs", || {
        let h = lookup(handle)?;
        // SAFETY: null-checked; valid per the contract.
        unsafe { write_out(out, h.num_outputs(), "out") }
    })
}

/// Sizes and strides of a C tensor description, validated.
fn describe(d: &EtCudaTensor) -> Result<(Vec<i64>, Vec<i64>)> {
    let nd = usize::try_from(d.ndim)
        .ok()
        .filter(|&n| n <= ET_CUDA_MAX_DIMS)
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "ndim {} out of range 0..={ET_CUDA_MAX_DIMS}",
                d.ndim
            ))
        })?;
    let sizes = d.sizes[..nd].to_vec();
    crate::tensor::checked_numel(&sizes)?;
    Ok((sizes, d.strides[..nd].to_vec()))
}

fn input_arg(i: usize, d: &EtCudaTensor) -> Result<InputArg> {
    let (sizes, strides) = describe(d).map_err(|e| e.context(&format!("input {i}")))?;
    Ok(InputArg {
        dtype: d.dtype,
        sizes,
        strides,
        data: d.data.cast_const(),
        nbytes: usize::try_from(d.nbytes).unwrap_or(usize::MAX),
    })
}

fn write_back(d: &mut EtCudaTensor, o: &OutputInfo) -> Result<()> {
    crate::tensor::check_rank(o.sizes.len())?;
    d.ndim = o.sizes.len() as i32;
    d.sizes = [0; ET_CUDA_MAX_DIMS];
    d.strides = [0; ET_CUDA_MAX_DIMS];
    d.sizes[..o.sizes.len()].copy_from_slice(&o.sizes);
    d.strides[..o.strides.len()].copy_from_slice(&o.strides);
    d.data = o.data;
    d.nbytes = o.nbytes as u64;
    Ok(())
}

/// Run the method. Inputs may live in host or device memory. Outputs are delivered as `placement`
/// (`ET_CUDA_OUTPUT_PLACEMENT_*`) says; their `ndim`/`sizes`/`strides` are rewritten with the real
/// shape (dynamic shapes), and with device placement `data`/`nbytes` too. The host waits at most
/// once, and only when some output is copied into host memory. With a caller stream set on this
/// thread (`et_cuda_set_caller_stream`), the work starts after the caller's queued work and the
/// caller's stream waits for it.
///
/// # Safety
/// `inputs` must be null or point to `num_inputs` descriptions and `outputs` to `num_outputs`;
/// each description's `data` must be valid for `nbytes` bytes (host memory, or device memory of
/// the handle's device), inputs until the work on the device has read them.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_execute(
    handle: *mut EtCudaHandle,
    inputs: *const EtCudaTensor,
    num_inputs: usize,
    outputs: *mut EtCudaTensor,
    num_outputs: usize,
    placement: EtCudaOutputPlacement,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_execute", || {
        let placement = Placement::try_from(placement)?.0;
        let h = lookup(handle)?;
        // SAFETY: arrays of the stated lengths per the contract.
        let (ins, outs) = unsafe {
            (
                slice_from(inputs, num_inputs, "inputs")?,
                slice_from_mut(outputs, num_outputs, "outputs")?,
            )
        };
        let args: Vec<InputArg> = ins
            .iter()
            .enumerate()
            .map(|(i, d)| input_arg(i, d))
            .collect::<Result<_>>()?;
        let slots: Vec<OutputArg> = outs
            .iter()
            .map(|d| OutputArg {
                dtype: Some(d.dtype),
                data: d.data,
                capacity: usize::try_from(d.nbytes).unwrap_or(usize::MAX),
            })
            .collect();
        // SAFETY: the caller guarantees each description's memory (the contract above).
        let infos = unsafe { h.execute_raw(&args, &slots, placement)? };
        for (d, o) in outs.iter_mut().zip(&infos) {
            write_back(d, o)?;
        }
        Ok(())
    })
}

/// The handle's CUDA stream (a `CUstream` / `cudaStream_t`), borrowed: valid while the handle lives.
///
/// # Safety
/// `out_stream` must be null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_handle_stream(
    handle: *const EtCudaHandle,
    out_stream: *mut *mut c_void,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_handle_stream", || {
        let h = lookup(handle)?;
        // SAFETY: null-checked; valid per the contract.
        unsafe { write_out(out_stream, h.stream().as_raw(), "out_stream") }
    })
}

/// Number of CUDA graphs the method holds now (0 unless CUDA graphs are enabled for it).
///
/// # Safety
/// `out` must be null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_graph_count(
    handle: *const EtCudaHandle,
    out: *mut usize,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_graph_count", || {
        let h = lookup(handle)?;
        // SAFETY: null-checked; valid per the contract.
        unsafe { write_out(out, h.graph_count(), "out") }
    })
}

/// Block until all work queued on the handle's stream has finished (counted as a host wait).
#[no_mangle]
pub extern "C" fn et_cuda_synchronize(handle: *const EtCudaHandle) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_synchronize", || lookup(handle)?.synchronize())
}
