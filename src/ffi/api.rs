//! The `et_cuda_*` C API: method lifecycle, execution, memory, counters.
//! Each function converts its C arguments (checked pointers, integer codes)
//! into the Rust types of `crate::delegate` and `crate::cuda`, inside
//! the one guard.

use super::types::*;
use super::{c_str, guard, guard_value, non_null, slice_from, slice_from_mut, write_out, EtCuda};
use crate::aoti::payload::{self, Payload};
use crate::delegate::io::{InputArg, OutputArg, OutputInfo};
use crate::delegate::{CudaHandle, InitParams, MethodConfig, Weights};
use crate::error::{invalid, Error, Result};
use std::ffi::{c_char, c_void};
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
static LIVE: Mutex<Vec<(usize, Arc<CudaHandle>)>> = Mutex::new(Vec::new());
/// Source of unique, never reused handle addresses (never dereferenced).
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(HANDLE_BASE);
/// The first handle address and the step between two (never reused).
const HANDLE_BASE: usize = 0x1000;
const HANDLE_STEP: usize = 16;

fn live() -> std::sync::MutexGuard<'static, Vec<(usize, Arc<CudaHandle>)>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The live method behind a C pointer.
fn lookup(handle: *const EtCudaHandle) -> Result<Arc<CudaHandle>> {
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
        let n = crate::cuda::device_count()?;
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
        let v = crate::cuda::driver_version()?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_version, v, "out_version") }
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
        let mode = Mode::try_from(a.mode)?.0;
        let config = if a.use_backend_options {
            let mut c = MethodConfig::from_options(method, a.share_group)?;
            if let Some(m) = mode {
                c.mode = m;
            }
            c
        } else {
            MethodConfig {
                device_index: a.device_index,
                shared_stream: a.use_shared_stream,
                mode: mode.unwrap_or_default(),
                ..MethodConfig::default()
            }
        };
        let inner = match a.named_data {
            None => CudaHandle::init(InitParams {
                so,
                weights: Weights::Blob(weights),
                method_name: method.to_string(),
                so_key: so_key.map(str::to_string),
                weights_key: weights_key.map(str::to_string),
                config,
            })?,
            Some(f) => {
                // SAFETY: the payload is `payload_len` readable bytes (or null with 0).
                let payload = unsafe { slice_from(a.payload_data, a.payload_len, "payload_data")? };
                let fetch = NamedData {
                    f,
                    user: a.named_data_user,
                };
                init_from_payload(payload, &fetch, method, config)?
            }
        };
        let inner = Arc::new(inner);
        // Keys step by HANDLE_STEP and are never reused, so a stale pointer never names a new handle.
        let key = NEXT_HANDLE.fetch_add(HANDLE_STEP, Ordering::Relaxed);
        live().push((key, inner));
        // SAFETY: checked non-null above.
        unsafe { write_out(out_handle, key as *mut EtCudaHandle, "out_handle") }
    })
}

/// The caller's named-data lookup.
struct NamedData {
    f: unsafe extern "C" fn(*mut c_void, *const c_char, *mut *const u8, *mut usize) -> i32,
    user: *mut c_void,
}

impl NamedData {
    /// The bytes under `key` (valid until `et_cuda_init` returns, per the callback's contract).
    fn get<'a>(&self, key: &str, what: &str) -> Result<&'a [u8]> {
        let k = std::ffi::CString::new(key)
            .map_err(|_| Error::invalid_program(format!("{what} key {key:?} contains NUL")))?;
        let (mut p, mut n) = (std::ptr::null::<u8>(), 0usize);
        // SAFETY: the callback and its user pointer come from the caller (et_cuda_init's contract);
        // the key is NUL-terminated and the out-pointers are locals.
        let rc = unsafe { (self.f)(self.user, k.as_ptr(), &mut p, &mut n) };
        if rc != 0 {
            return Err(Error::invalid_program(format!(
                "the program has no named data {key:?} ({what}); was the .ptd file passed?"
            )));
        }
        // SAFETY: the callback promises n readable bytes that outlive the init call.
        unsafe { slice_from(p, n, what) }
    }
}

/// Load a method whose blobs the processed payload names.
fn init_from_payload(
    payload_bytes: &[u8],
    fetch: &NamedData,
    method: &str,
    config: MethodConfig,
) -> Result<CudaHandle> {
    match payload::parse(payload_bytes, method)? {
        Payload::Keys {
            so_key,
            weights_key,
        } => {
            let so = fetch.get(&so_key, "the .so")?;
            let weights = fetch.get(&weights_key, "the weights")?;
            CudaHandle::init(InitParams {
                so,
                weights: Weights::Blob(weights),
                method_name: method.to_string(),
                so_key: Some(so_key),
                weights_key: Some(weights_key),
                config,
            })
        }
        Payload::PerFqn { so_key, entries } => {
            let so = fetch.get(&so_key, "the .so")?;
            let mut storages = Vec::with_capacity(entries.len());
            for e in entries {
                let bytes = fetch.get(&e.storage_key, &format!("the weights of {}", e.fqn))?;
                storages.push((e, bytes));
            }
            CudaHandle::init(InitParams {
                so,
                weights: Weights::PerFqn(storages),
                method_name: method.to_string(),
                so_key: Some(so_key),
                weights_key: None,
                config,
            })
        }
    }
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
        let infos = unsafe { h.execute(&args, &slots, placement)? };
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
        unsafe { write_out(out_stream, h.stream_raw(), "out_stream") }
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

/// Copy `nbytes` from `src` to `dst` (each host or device memory, looked up) in the order of the
/// handle's stream. Waits for the copy only when `dst` is host memory. With a null `handle` the copy
/// runs on the device's legacy default stream and always waits (for tools and tests).
///
/// # Safety
/// `dst` and `src` must each be valid for `nbytes` bytes (host or device memory).
#[no_mangle]
pub unsafe extern "C" fn et_cuda_memcpy(
    handle: *const EtCudaHandle,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_memcpy", || {
        if nbytes > 0 && dst.is_null() {
            return invalid("dst is null");
        }
        if nbytes > 0 && src.is_null() {
            return invalid("src is null");
        }
        if handle.is_null() {
            // SAFETY: the caller guarantees nbytes valid bytes at both pointers.
            return unsafe { crate::cuda::copy::copy_bytes_blocking(dst, src, nbytes) };
        }
        let h = lookup(handle)?;
        // SAFETY: as above.
        unsafe { h.memcpy(dst, src, nbytes) }
    })
}

/// Allocate `nbytes` of device memory on `device` with `cuMemAlloc` (synchronous; for tools and
/// tests that need device-resident inputs, not for hot paths). Free it with `et_cuda_free_device`.
///
/// # Safety
/// `out_ptr` must be null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_alloc_device(
    device: i32,
    nbytes: usize,
    out_ptr: *mut *mut c_void,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_alloc_device", || {
        if out_ptr.is_null() {
            return invalid("out_ptr is null");
        }
        let p = crate::cuda::memory::alloc_device_sync(device, nbytes)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_ptr, p, "out_ptr") }
    })
}

/// Free memory from `et_cuda_alloc_device` (synchronous). Null is ignored.
///
/// # Safety
/// `ptr` must be null or a pointer from `et_cuda_alloc_device` not freed yet.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_free_device(ptr: *mut c_void) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_free_device", || {
        // SAFETY: forwarded contract.
        unsafe { crate::cuda::memory::free_device_sync(ptr) }
    })
}

/// Allocate `nbytes` of device memory on `device` from the library's stream-ordered pool, ordered
/// on the device's legacy default stream (which the library's streams wait for), aligned to at
/// least `alignment` bytes (a power of two ≤ 256). This is what the ExecuTorch adapter's CUDA
/// `DeviceAllocator` uses for planned device buffers. Free with `et_cuda_device_deallocate`.
///
/// # Safety
/// `out_ptr` must be null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_device_allocate(
    device: i32,
    nbytes: usize,
    alignment: usize,
    out_ptr: *mut *mut c_void,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_device_allocate", || {
        if out_ptr.is_null() {
            return invalid("out_ptr is null");
        }
        let p = crate::cuda::memory::external_allocate(device, nbytes, alignment)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_ptr, p, "out_ptr") }
    })
}

/// Free (stream-ordered) memory from `et_cuda_device_allocate`. Null is ignored; a pointer the
/// allocator did not hand out is `INVALID_ARGUMENT`.
#[no_mangle]
pub extern "C" fn et_cuda_device_deallocate(ptr: *mut c_void) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_device_deallocate", || {
        crate::cuda::memory::external_deallocate(ptr)
    })
}

/// Number of live allocations made by `et_cuda_device_allocate`.
///
/// # Safety
/// `out` must be null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_device_allocations(out: *mut usize) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_device_allocations", || {
        let n = crate::cuda::memory::external_count();
        // SAFETY: null-checked; valid per the contract.
        unsafe { write_out(out, n, "out") }
    })
}

/// Copy `nbytes` from host memory to device memory of `device`, ordered on the device's legacy
/// default stream; returns once the source may be reused, without waiting for the device.
///
/// # Safety
/// `src` must be readable host memory and `dst` device memory of `device`, `nbytes` each.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_copy_host_to_device(
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    device: i32,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_copy_host_to_device", || {
        // SAFETY: forwarded contract.
        unsafe { crate::cuda::copy::copy_htod_ordered(dst, src, nbytes, device) }
    })
}

/// Copy `nbytes` from device memory of `device` to host memory, after all work queued before on
/// the device's streams (one host wait).
///
/// # Safety
/// `src` must be device memory of `device` and `dst` writable host memory, `nbytes` each.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_copy_device_to_host(
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    device: i32,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_copy_device_to_host", || {
        // SAFETY: forwarded contract.
        unsafe { crate::cuda::copy::copy_dtoh_ordered(dst, src, nbytes, device) }
    })
}

/// Whether `ptr` is CUDA device memory. Fails with `NO_DEVICE` when there is no driver.
///
/// # Safety
/// `out` must be null or valid for a write of a `bool`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_is_device_pointer(
    ptr: *const c_void,
    out: *mut bool,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_is_device_pointer", || {
        if out.is_null() {
            return invalid("out is null");
        }
        let v = crate::cuda::is_device_pointer(ptr)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out, v, "out") }
    })
}

/// Counters of one handle, or process-wide when `handle` is null.
///
/// # Safety
/// `out` must be null or valid for a write of an `EtCudaStats`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_stats(
    handle: *const EtCudaHandle,
    out: *mut EtCudaStats,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_stats", || {
        let s = if handle.is_null() {
            crate::stats::global().snapshot()
        } else {
            lookup(handle)?.stats()
        };
        // SAFETY: null-checked; valid per the contract.
        unsafe { write_out(out, EtCudaStats::from(s), "out") }
    })
}

/// Order this thread's executes on `stream` (a `CUstream`/`cudaStream_t` of the method's device;
/// null is the legacy default stream) until `et_cuda_clear_caller_stream`: each execute starts
/// after the work queued on `stream` and `stream` waits for the execute's work (the methods keep
/// their own streams and memory; CUDA graphs and the shared stream work as without). A stream of
/// another device is refused by the execute with `INVALID_ARGUMENT`.
///
/// # Safety
/// `stream` must stay a live stream until it is cleared or replaced.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_set_caller_stream(stream: *mut c_void) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_set_caller_stream", || {
        crate::cuda::stream::set_caller_stream(Some(crate::cuda::stream::CallerStream(
            stream.cast(),
        )));
        Ok(())
    })
}

/// This thread's caller stream: `*out_set` says whether one is set, `*out_stream` which.
///
/// # Safety
/// Each pointer must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_caller_stream(
    out_stream: *mut *mut c_void,
    out_set: *mut bool,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_caller_stream", || {
        let cur = crate::cuda::stream::caller_stream();
        // SAFETY: null-checked; valid per the contract.
        unsafe {
            write_out(out_set, cur.is_some(), "out_set")?;
            write_out(
                out_stream,
                cur.map_or(std::ptr::null_mut(), |c| c.0.cast()),
                "out_stream",
            )
        }
    })
}

/// Stop ordering this thread's executes on a caller stream.
#[no_mangle]
pub extern "C" fn et_cuda_clear_caller_stream() -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_clear_caller_stream", || {
        crate::cuda::stream::set_caller_stream(None);
        Ok(())
    })
}
