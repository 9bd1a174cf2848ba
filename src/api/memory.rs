//! Devices, device memory, copies and the caller stream: the process-wide
//! functions of the safe API (the C API's `et_cuda_device_count`,
//! `et_cuda_alloc_device`, `et_cuda_device_allocate`, copies, caller stream).
//! Choosing a token from logits is in [`super::sample`].

use super::{Device, DevicePtr, RawStream};
use crate::cuda::{self, copy, memory, stream};
use crate::error::Result;
use crate::kernels::sample;
use crate::stats::Stats;
use std::ffi::c_void;

/// Number of CUDA devices (a `NoDevice` error without a driver).
pub fn device_count() -> Result<i32> {
    cuda::device_count()
}

/// The CUDA driver's version (e.g. 13000).
pub fn driver_version() -> Result<i32> {
    cuda::driver_version()
}

/// Free and total memory of a device, from the driver.
pub fn mem_info(device: Device) -> Result<(usize, usize)> {
    cuda::mem_info(device.ordinal())
}

/// Process-wide counters (with the generated code's modules loaded now).
pub fn global_stats() -> Stats {
    let mut s = crate::stats::global().snapshot();
    s.generated_modules = crate::aoti::owned::recorded().0 as u64;
    s
}

/// Whether `ptr` (any address; only looked up, never read) is CUDA device memory (a
/// `NoDevice` error without a driver).
pub fn is_device_pointer(ptr: *const c_void) -> Result<bool> {
    cuda::is_device_pointer(ptr)
}

/// `nbytes` of device memory on `device` from plain `cuMemAlloc` (synchronous; for tools
/// and tests). Free with [`free_device`].
pub fn alloc_device(device: Device, nbytes: usize) -> Result<DevicePtr> {
    memory::alloc_device_sync(device.ordinal(), nbytes).map(DevicePtr::from_raw)
}

/// Free memory from [`alloc_device`] (synchronous); null is ignored.
///
/// # Safety
/// `ptr` must be null or come from [`alloc_device`], not freed yet and no longer in use.
pub unsafe fn free_device(ptr: DevicePtr) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { memory::free_device_sync(ptr.as_raw()) }
}

/// `nbytes` of device memory on `device` from the library's stream-ordered pool, ordered on
/// the device's legacy default stream, aligned to `alignment` (a power of two ≤ 256).
/// Free with [`device_deallocate`].
pub fn device_allocate(device: Device, nbytes: usize, alignment: usize) -> Result<DevicePtr> {
    memory::external_allocate(device.ordinal(), nbytes, alignment).map(DevicePtr::from_raw)
}

/// Free (stream-ordered) memory from [`device_allocate`]; null is ignored, a pointer it did
/// not hand out is an `InvalidArgument` error.
pub fn device_deallocate(ptr: DevicePtr) -> Result<()> {
    memory::external_deallocate(ptr.as_raw())
}

/// Live allocations made by [`device_allocate`].
pub fn device_allocations() -> usize {
    memory::external_count()
}

/// Copy `nbytes` between any two host or device ranges, waiting for the copy (tools, tests).
///
/// # Safety
/// `dst` and `src` must each be valid for `nbytes` bytes (host or device memory).
pub unsafe fn copy_blocking(dst: *mut c_void, src: *const c_void, nbytes: usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { copy::copy_bytes_blocking(dst, src, nbytes) }
}

/// Copy host memory to device memory of `device`, ordered on its legacy default stream;
/// returns once the source may be reused. 8 bytes holding `SAMPLED_TOKEN` right after an
/// asynchronous token choice on the device take that token instead (`api::sample`).
///
/// # Safety
/// `src` must be readable host memory and `dst` device memory of `device`, `nbytes` each.
pub unsafe fn copy_host_to_device(
    dst: DevicePtr,
    src: *const c_void,
    nbytes: usize,
    device: Device,
) -> Result<()> {
    // An input planned in device memory that asks for the device's fed token
    // (`SAMPLED_TOKEN`, `kernels::sample`): its copy made on the device instead.
    // SAFETY: forwarded contract.
    if unsafe { sample::copy_armed_feed(device.ordinal(), dst.as_raw() as u64, src, nbytes)? } {
        return Ok(());
    }
    // SAFETY: forwarded contract.
    unsafe { copy::copy_htod_ordered(dst.as_raw(), src, nbytes, device.ordinal()) }
}

/// Copy device memory of `device` to host memory after the work queued before on the
/// device's streams (one host wait).
///
/// # Safety
/// `src` must be device memory of `device` and `dst` writable host memory, `nbytes` each.
pub unsafe fn copy_device_to_host(
    dst: *mut c_void,
    src: DevicePtr,
    nbytes: usize,
    device: Device,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { copy::copy_dtoh_ordered(dst, src.as_raw().cast_const(), nbytes, device.ordinal()) }
}

/// Order this thread's executes on `stream` until [`clear_caller_stream`] or a replacement.
///
/// # Safety
/// `stream` must stay a live stream (or be the legacy default stream) until it is cleared or
/// replaced.
pub unsafe fn set_caller_stream(stream: RawStream) {
    stream::set_caller_stream(Some(stream::CallerStream(stream.as_raw().cast())));
}

/// Stop ordering this thread's executes on a caller stream.
pub fn clear_caller_stream() {
    stream::set_caller_stream(None);
}

/// This thread's caller stream, if one is set (it may be [`RawStream::LEGACY_DEFAULT`]).
pub fn caller_stream() -> Option<RawStream> {
    stream::caller_stream().map(|c| RawStream::from_raw(c.0.cast()))
}

/// Orders the executes of this thread on a stream the caller owns, until dropped.
pub struct CallerStreamGuard {
    prev: Option<stream::CallerStream>,
}

impl CallerStreamGuard {
    /// Use `stream` (it may be the legacy default stream).
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream (or the legacy default stream) for as long as the
    /// guard lives.
    pub unsafe fn new(stream: RawStream) -> CallerStreamGuard {
        CallerStreamGuard {
            prev: stream::set_caller_stream(Some(stream::CallerStream(stream.as_raw().cast()))),
        }
    }
}

impl Drop for CallerStreamGuard {
    fn drop(&mut self) {
        stream::set_caller_stream(self.prev);
    }
}
