//! The `et_cuda_*` C API of memory, copies, counters and the caller stream:
//! C types converted onto `crate::api::memory`, inside the one guard.

use super::api::{lookup, EtCudaHandle};
use super::types::*;
use super::{guard, write_out, EtCuda};
use crate::api::memory;
use crate::api::{Device, DevicePtr, RawStream};
use crate::error::{invalid, Error, Result};
use std::ffi::c_void;

/// The device of an allocation: a negative ordinal names no device, `NO_DEVICE` as for one
/// past the last (the copies and the sampler refuse it as `INVALID_ARGUMENT`).
fn allocation_device(ordinal: i32) -> Result<Device> {
    Device::cuda(ordinal).map_err(|_| match memory::device_count() {
        Err(e) => e,
        Ok(n) => Error::no_device(format!(
            "no CUDA device {ordinal}: this machine has {n} device(s)"
        )),
    })
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
            return unsafe { memory::copy_blocking(dst, src, nbytes) };
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
        let p = memory::alloc_device(allocation_device(device)?, nbytes)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_ptr, p.as_raw(), "out_ptr") }
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
        unsafe { memory::free_device(DevicePtr::from_raw(ptr)) }
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
        let p = memory::device_allocate(allocation_device(device)?, nbytes, alignment)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_ptr, p.as_raw(), "out_ptr") }
    })
}

/// Free (stream-ordered) memory from `et_cuda_device_allocate`. Null is ignored; a pointer the
/// allocator did not hand out is `INVALID_ARGUMENT`.
#[no_mangle]
pub extern "C" fn et_cuda_device_deallocate(ptr: *mut c_void) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_device_deallocate", || {
        memory::device_deallocate(DevicePtr::from_raw(ptr))
    })
}

/// Number of live allocations made by `et_cuda_device_allocate`.
///
/// # Safety
/// `out` must be null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_device_allocations(out: *mut usize) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_device_allocations", || {
        let n = memory::device_allocations();
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
        let (dst, device) = (DevicePtr::from_raw(dst), Device::cuda(device)?);
        // SAFETY: forwarded contract.
        unsafe { memory::copy_host_to_device(dst, src, nbytes, device) }
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
        let (src, device) = (DevicePtr::from_raw(src.cast_mut()), Device::cuda(device)?);
        // SAFETY: forwarded contract.
        unsafe { memory::copy_device_to_host(dst, src, nbytes, device) }
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
        let v = memory::is_device_pointer(ptr)?;
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
            memory::global_stats()
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
        // SAFETY: forwarded contract.
        unsafe { memory::set_caller_stream(RawStream::from_raw(stream)) };
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
        let cur = memory::caller_stream();
        // SAFETY: null-checked; valid per the contract.
        unsafe {
            write_out(out_set, cur.is_some(), "out_set")?;
            write_out(
                out_stream,
                cur.map_or(std::ptr::null_mut(), RawStream::as_raw),
                "out_stream",
            )
        }
    })
}

/// Stop ordering this thread's executes on a caller stream.
#[no_mangle]
pub extern "C" fn et_cuda_clear_caller_stream() -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_clear_caller_stream", || {
        memory::clear_caller_stream();
        Ok(())
    })
}
