//! Counted raw copies: the driver calls every copy of the library goes through, between raw host and device pointers.

use crate::cuda::stream;
use crate::cuda::{check, device, pointer_kind, ContextGuard, PointerKind};
use crate::error::{invalid, Result};
use crate::stats::{self, Event};
use cudarc::driver::sys;
use std::ffi::c_void;

/// Direction of a copy, for the counters.
#[derive(Debug, Clone, Copy)]
enum Dir {
    HtoD,
    DtoH,
    DtoD,
}

/// Count and enqueue one copy of `n` bytes; `f` makes the driver call.
fn counted_copy(dir: Dir, n: usize, what: &str, f: impl FnOnce() -> sys::CUresult) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    stats::record(match dir {
        Dir::HtoD => Event::HtoD(n as u64),
        Dir::DtoH => Event::DtoH(n as u64),
        Dir::DtoD => Event::DtoD(n as u64),
    });
    check(f(), what)
}

/// Asynchronous host-to-device copy on `stream` (the host memory must stay
/// valid and unchanged until the copy ran: use pinned staging).
///
/// # Safety
/// `src` must be readable for `n` bytes and `dst` a device allocation of at least `n` bytes.
pub(crate) unsafe fn copy_htod_async(
    dst: sys::CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: forwarded contract.
    counted_copy(Dir::HtoD, n, "cuMemcpyHtoDAsync", || unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src, n, stream)
    })
}

/// Asynchronous device-to-host copy on `stream`.
///
/// # Safety
/// `dst` must be writable for `n` bytes until the copy ran; `src` a device range of `n` bytes.
pub(crate) unsafe fn copy_dtoh_async(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    n: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: forwarded contract.
    counted_copy(Dir::DtoH, n, "cuMemcpyDtoHAsync", || unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst, src, n, stream)
    })
}

/// Asynchronous device-to-device copy on `stream`.
///
/// # Safety
/// Both ranges must be device memory of at least `n` bytes.
pub(crate) unsafe fn copy_dtod_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    n: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: forwarded contract.
    counted_copy(Dir::DtoD, n, "cuMemcpyDtoDAsync", || unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, n, stream)
    })
}

/// Blocking device-to-host copy after the stream was drained (the wait was
/// already counted): moves bytes, waits for nothing else.
///
/// # Safety
/// As for [`copy_dtoh_async`].
pub(crate) unsafe fn copy_dtoh_drained(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    n: usize,
) -> Result<()> {
    // SAFETY: forwarded contract.
    counted_copy(Dir::DtoH, n, "cuMemcpyDtoH", || unsafe {
        sys::cuMemcpyDtoH_v2(dst, src, n)
    })
}

/// Asynchronous device-to-device copy of `rows` rows of `width` bytes between
/// two pitched layouts (row starts `dst_pitch` / `src_pitch` bytes apart).
///
/// # Safety
/// Both ranges must be device memory covering `rows` rows at their pitch.
pub(crate) unsafe fn copy_dtod_2d_async(
    dst: sys::CUdeviceptr,
    dst_pitch: usize,
    src: sys::CUdeviceptr,
    src_pitch: usize,
    width: usize,
    rows: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // Every field spelled out: the memory-type fields are Rust enums without a zero
    // value, so `mem::zeroed` would be undefined behaviour (core aborts on it).
    let p = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: dst_pitch,
        WidthInBytes: width,
        Height: rows,
    };
    counted_copy(Dir::DtoD, width * rows, "cuMemcpy2DAsync", || {
        // SAFETY: forwarded contract; `p` describes both ranges.
        unsafe { sys::cuMemcpy2DAsync_v2(&p, stream) }
    })
}

/// Copy `n` bytes between any two of host and device memory, ordered on `s`;
/// waits only when the destination is host memory and the source is on the device.
///
/// # Safety
/// `dst` and `src` must each be valid for `n` bytes (host or device memory).
pub(crate) unsafe fn copy_bytes(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    s: sys::CUstream,
) -> Result<()> {
    // SAFETY: forwarded contract.
    if unsafe { enqueue_copy(dst, src, n, s)? } {
        stream::synchronize(s)?;
    }
    Ok(())
}

/// Enqueue the copy; returns whether the host must wait before reading `dst`.
///
/// # Safety
/// As for [`copy_bytes`].
unsafe fn enqueue_copy(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    s: sys::CUstream,
) -> Result<bool> {
    if n == 0 {
        return Ok(false);
    }
    if dst.is_null() || src.is_null() {
        return invalid(format!(
            "memcpy: {} is null",
            if dst.is_null() { "dst" } else { "src" }
        ));
    }
    let is_dev = |p| pointer_kind(p).map(|k| matches!(k, PointerKind::Device(_)));
    let (dd, sd) = (is_dev(dst.cast_const())?, is_dev(src)?);
    // SAFETY: the caller guarantees n valid bytes at both pointers.
    unsafe {
        match (dd, sd) {
            (true, true) => copy_dtod_async(dst as u64, src as u64, n, s).map(|_| false),
            // A pageable source is staged by the driver before the call returns.
            (true, false) => copy_htod_async(dst as u64, src, n, s).map(|_| false),
            (false, true) => copy_dtoh_async(dst, src as u64, n, s).map(|_| true),
            (false, false) => {
                std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), n);
                Ok(false)
            }
        }
    }
}

/// A copy with no handle: the device is taken from the device pointer, and
/// the copy runs on the legacy default stream and always waits (once).
///
/// # Safety
/// As for [`copy_bytes`].
pub(crate) unsafe fn copy_bytes_blocking(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> Result<()> {
    let ord = match (pointer_kind(dst)?, pointer_kind(src)?) {
        (PointerKind::Device(o), _) | (_, PointerKind::Device(o)) => o,
        _ => 0,
    };
    let d = device(ord)?;
    let _legacy = d.legacy_use();
    let _ctx = ContextGuard::device(&d)?;
    let s = std::ptr::null_mut();
    // SAFETY: forwarded contract.
    unsafe { enqueue_copy(dst, src, n, s)? };
    stream::synchronize(s)
}

/// Host-to-device copy ordered on `ordinal`'s legacy default stream (which
/// the library's blocking streams wait for); no wait for the device.
///
/// # Safety
/// `src` must be readable host memory and `dst` device memory, `n` bytes each.
pub(crate) unsafe fn copy_htod_ordered(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    ordinal: i32,
) -> Result<()> {
    // The device first, even for no bytes: a copy for a device that does not exist fails.
    let d = ordered_device(ordinal)?;
    if n == 0 {
        return Ok(());
    }
    check_device_pointer(dst.cast_const(), ordinal, "dst")?;
    let _legacy = d.legacy_use();
    let _g = ContextGuard::device(&d)?;
    // SAFETY: forwarded contract. A pageable source is staged by the driver before return.
    unsafe { copy_htod_async(dst as u64, src, n, std::ptr::null_mut()) }
}

/// Device-to-host copy after all work queued on `ordinal`'s streams (the
/// legacy default stream waits for the blocking streams): one host wait.
///
/// # Safety
/// `src` must be device memory and `dst` writable host memory, `n` bytes each.
pub(crate) unsafe fn copy_dtoh_ordered(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    ordinal: i32,
) -> Result<()> {
    let d = ordered_device(ordinal)?;
    if n == 0 {
        return Ok(());
    }
    check_device_pointer(src, ordinal, "src")?;
    let _legacy = d.legacy_use();
    let _g = ContextGuard::device(&d)?;
    // SAFETY: forwarded contract; `dst` stays valid until the wait below.
    unsafe { copy_dtoh_async(dst, src as u64, n, std::ptr::null_mut())? };
    stream::synchronize(std::ptr::null_mut())
}

/// The device of an ordered copy: a negative index is an invalid argument, a device this
/// machine does not have (or no driver) a `NoDevice` error.
fn ordered_device(ordinal: i32) -> Result<std::sync::Arc<crate::cuda::DeviceState>> {
    if ordinal < 0 {
        return invalid(format!("device index {ordinal} is negative"));
    }
    device(ordinal)
}

/// Whether `p` is device memory of `ordinal`: an error naming `what` otherwise.
pub(crate) fn check_device_pointer(p: *const c_void, ordinal: i32, what: &str) -> Result<()> {
    match pointer_kind(p)? {
        PointerKind::Device(o) if o == ordinal => Ok(()),
        PointerKind::Device(o) => invalid(format!(
            "{what} is memory of cuda:{o}, not of cuda:{ordinal}"
        )),
        _ => invalid(format!("{what} is not device memory")),
    }
}
