//! Copies: the one place where the library moves bytes between host and
//! device memory, for the shims (`copy_`, `clone`, `zero_`, `item`) and for
//! the delegate (inputs, outputs, `et_cuda_memcpy`).
//!
//! Device-to-device copies are stream-ordered and never wait. A copy that
//! ends in host memory waits once for the stream. Strided layouts go through
//! a host buffer (the generated code only asks for them off the hot path).

use super::stream;
use super::{check, device, pointer_kind, ContextGuard, PointerKind};
use crate::error::{invalid, Error, Result};
use crate::stats::{self, Event};
use crate::tensor::{contiguous_strides, Device, Tensor};
use cudarc::driver::sys;
use std::ffi::c_void;

// Counted raw copies (the driver calls every copy of the library goes through).

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

/// A zeroed host buffer of `n` bytes; an allocation failure is an error, not an abort.
pub(crate) fn host_buffer(n: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::out_of_memory(format!("host buffer of {n} bytes")))?;
    v.resize(n, 0);
    Ok(v)
}

/// Check that `[off, off + n)` lies inside `x`'s storage.
fn check_span(x: &Tensor, off: usize, n: usize) -> Result<()> {
    if off.checked_add(n).is_none_or(|end| end > x.storage.nbytes) {
        return invalid("span out of range of the storage");
    }
    Ok(())
}

/// Read the bytes `[off, off + dst.len())` of `x`'s storage into host memory
/// (waits for the current stream when the storage is on the device).
fn read_span(x: &Tensor, off: usize, dst: &mut [u8]) -> Result<()> {
    let n = dst.len();
    if n == 0 {
        return Ok(());
    }
    check_span(x, off, n)?;
    let base = x.storage.base_ptr();
    match x.device() {
        // SAFETY: the span lies inside the storage (checked above); `dst` holds n bytes.
        Device::Cpu => unsafe {
            std::ptr::copy_nonoverlapping(base.cast::<u8>().add(off), dst.as_mut_ptr(), n)
        },
        Device::Cuda(i) => {
            let d = device(i)?;
            let _g = ContextGuard::device(&d)?;
            let s = stream::current(i).raw;
            // SAFETY: device span inside the storage; `dst` is host memory of n bytes that
            // stays borrowed until the wait below.
            unsafe { copy_dtoh_async(dst.as_mut_ptr().cast(), base as u64 + off as u64, n, s)? };
            stream::synchronize(s)?;
        }
    }
    Ok(())
}

/// Write host bytes into `[off, off + src.len())` of `x`'s storage.
fn write_span(x: &Tensor, off: usize, src: &[u8]) -> Result<()> {
    let n = src.len();
    if n == 0 {
        return Ok(());
    }
    check_span(x, off, n)?;
    let base = x.storage.base_ptr();
    match x.device() {
        // SAFETY: the span lies inside the storage (checked above); `src` holds n bytes.
        Device::Cpu => unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), base.cast::<u8>().add(off), n)
        },
        Device::Cuda(i) => {
            let d = device(i)?;
            let _g = ContextGuard::device(&d)?;
            let s = stream::current(i).raw;
            // SAFETY: device span inside the storage; `src` holds n bytes and stays borrowed
            // until the wait below.
            unsafe { copy_htod_async(base as u64 + off as u64, src.as_ptr().cast(), n, s)? };
            // `src` is pageable or short-lived: wait for the DMA so the caller may drop it.
            stream::synchronize(s)?;
        }
    }
    Ok(())
}

/// Visit the byte offsets (from the storage start) of every element, in row-major order.
fn for_each_offset(x: &Tensor, mut f: impl FnMut(usize)) {
    let elem = x.element_size() as i64;
    let n = x.sizes.len();
    if x.numel() == 0 {
        return;
    }
    let mut idx = vec![0i64; n];
    loop {
        let off = x.storage_offset + idx.iter().zip(&x.strides).map(|(i, s)| i * s).sum::<i64>();
        f((off * elem) as usize);
        let mut d = n;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < x.sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The elements of `x` as contiguous host bytes.
pub(crate) fn gather_to_host(x: &Tensor) -> Result<Vec<u8>> {
    let (start, end) = x.span()?;
    let mut span = host_buffer(end - start)?;
    read_span(x, start, &mut span)?;
    if x.is_contiguous() {
        return Ok(span);
    }
    let elem = x.element_size();
    let mut out = host_buffer(x.nbytes())?;
    out.clear();
    for_each_offset(x, |o| {
        out.extend_from_slice(&span[o - start..o - start + elem])
    });
    Ok(out)
}

/// Store contiguous host bytes (`x.nbytes()` of them) into the elements of `x`.
fn scatter_from_host(x: &Tensor, data: &[u8]) -> Result<()> {
    let (start, end) = x.span()?;
    if data.len() < x.nbytes() {
        return invalid("source shorter than the tensor");
    }
    if x.is_contiguous() {
        return write_span(x, start, &data[..end - start]);
    }
    let mut span = host_buffer(end - start)?;
    read_span(x, start, &mut span)?;
    let elem = x.element_size();
    let mut i = 0usize;
    for_each_offset(x, |o| {
        span[o - start..o - start + elem].copy_from_slice(&data[i..i + elem]);
        i += elem;
    });
    write_span(x, start, &span)
}

/// A view laid out as equally spaced rows of contiguous elements: `rows`
/// rows of `width` bytes, each `pitch` bytes after the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pitched {
    rows: usize,
    width: usize,
    pitch: usize,
}

/// The pitched layout of `x`, when it has one (dims of size 1 ignored; the
/// last dim contiguous; the outer dims spaced like one long row index).
fn pitched(x: &Tensor) -> Option<Pitched> {
    let elem = x.element_size();
    let dims: Vec<(usize, usize)> = x
        .sizes
        .iter()
        .zip(&x.strides)
        .filter(|(&s, _)| s != 1)
        .map(|(&s, &st)| (usize::try_from(s).ok(), usize::try_from(st).ok()))
        .map(|(s, st)| s.zip(st))
        .collect::<Option<_>>()?;
    let Some((&(last, last_stride), outer)) = dims.split_last() else {
        return Some(Pitched {
            rows: 1,
            width: elem,
            pitch: elem,
        });
    };
    if last_stride != 1 {
        return None;
    }
    let width = last * elem;
    let Some(&(_, row_stride)) = outer.last() else {
        return Some(Pitched {
            rows: 1,
            width,
            pitch: width,
        });
    };
    for w in outer.windows(2) {
        if w[0].1 != w[1].1 * w[1].0 {
            return None;
        }
    }
    let pitch = row_stride * elem;
    (pitch >= width).then(|| Pitched {
        rows: outer.iter().map(|d| d.0).product(),
        width,
        pitch,
    })
}

/// Copy `src` into `dst` (same dtype and sizes, any devices and strides).
/// Contiguous device-to-device copies are one stream-ordered copy with no
/// wait; copies that end in host memory wait once; other layouts go through
/// a host buffer.
pub(crate) fn copy_tensor(dst: &Tensor, src: &Tensor) -> Result<()> {
    if dst.dtype != src.dtype {
        return invalid(format!(
            "copy_ from dtype {} to dtype {}: dtype conversion is not supported",
            src.dtype, dst.dtype
        ));
    }
    if dst.sizes != src.sizes {
        return invalid(format!(
            "copy_ from sizes {:?} to sizes {:?}",
            src.sizes, dst.sizes
        ));
    }
    let n = dst.nbytes();
    if n == 0 {
        return Ok(());
    }
    if dst.is_contiguous() && src.is_contiguous() {
        let (dp, sp) = (dst.data_ptr(), src.data_ptr());
        match (dst.device(), src.device()) {
            // SAFETY: both views were validated to lie inside their storages.
            (Device::Cpu, Device::Cpu) => unsafe {
                std::ptr::copy(sp.cast::<u8>(), dp.cast::<u8>(), n);
            },
            (Device::Cuda(i), Device::Cuda(_)) => {
                let d = device(i)?;
                let _g = ContextGuard::device(&d)?;
                let s = stream::current(i).raw;
                // SAFETY: device ranges validated against their storages.
                unsafe { copy_dtod_async(dp as u64, sp as u64, n, s)? };
            }
            (Device::Cuda(_), Device::Cpu) => {
                // SAFETY: `sp` is host memory of n bytes (validated view).
                let host = unsafe { std::slice::from_raw_parts(sp.cast::<u8>(), n) };
                let (start, _) = dst.span()?;
                write_span(dst, start, host)?;
            }
            (Device::Cpu, Device::Cuda(_)) => {
                // SAFETY: `dp` is host memory of n bytes (validated view), not aliased by `src`
                // (which is device memory).
                let host = unsafe { std::slice::from_raw_parts_mut(dp.cast::<u8>(), n) };
                let (start, _) = src.span()?;
                read_span(src, start, host)?;
            }
        }
        return Ok(());
    }
    // Device to device between row-pitched layouts (a padded output made contiguous, say):
    // one 2-D copy on the stream, no host round trip.
    if let (Device::Cuda(i), Device::Cuda(j), Some(d), Some(s)) =
        (dst.device(), src.device(), pitched(dst), pitched(src))
    {
        if i == j && d.rows == s.rows && d.width == s.width {
            let dev = device(i)?;
            let _g = ContextGuard::device(&dev)?;
            let st = stream::current(i).raw;
            // SAFETY: both views were validated to lie inside their storages, which cover
            // `rows` rows at these pitches.
            return unsafe {
                copy_dtod_2d_async(
                    dst.data_ptr() as u64,
                    d.pitch,
                    src.data_ptr() as u64,
                    s.pitch,
                    s.width,
                    s.rows,
                    st,
                )
            };
        }
    }
    let data = gather_to_host(src)?;
    scatter_from_host(dst, &data)
}

/// A contiguous copy of `x` on its device.
pub(crate) fn clone_contiguous(x: &Tensor) -> Result<Tensor> {
    let y = Tensor::empty_strided(
        x.sizes.clone(),
        contiguous_strides(&x.sizes),
        x.dtype,
        x.device(),
    )?;
    copy_tensor(&y, x)?;
    Ok(y)
}

/// A copy of `x` with the same strides (the whole strided span is copied).
pub(crate) fn clone_preserve_strides(x: &Tensor) -> Result<Tensor> {
    let y = Tensor::empty_strided(x.sizes.clone(), x.strides.clone(), x.dtype, x.device())?;
    copy_tensor(&y, x)?;
    Ok(y)
}

/// `x`, or a contiguous copy of it.
pub(crate) fn contiguous(x: Tensor) -> Result<Tensor> {
    if x.is_contiguous() {
        return Ok(x);
    }
    clone_contiguous(&x)
}

/// Zero every element of `x`.
pub(crate) fn zero(x: &Tensor) -> Result<()> {
    // Zero every byte the view touches (its span holds at most the storage's bytes,
    // also for views that repeat elements).
    let (start, end) = x.span()?;
    if x.is_contiguous() {
        return write_span(x, start, &host_buffer(end - start)?);
    }
    let mut span = host_buffer(end - start)?;
    read_span(x, start, &mut span)?;
    let elem = x.element_size();
    for_each_offset(x, |o| span[o - start..o - start + elem].fill(0));
    write_span(x, start, &span)
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
    if n == 0 {
        return Ok(());
    }
    check_device_pointer(dst.cast_const(), ordinal, "dst")?;
    let d = device(ordinal)?;
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
    if n == 0 {
        return Ok(());
    }
    check_device_pointer(src, ordinal, "src")?;
    let d = device(ordinal)?;
    let _g = ContextGuard::device(&d)?;
    // SAFETY: forwarded contract; `dst` stays valid until the wait below.
    unsafe { copy_dtoh_async(dst, src as u64, n, std::ptr::null_mut())? };
    stream::synchronize(std::ptr::null_mut())
}

fn check_device_pointer(p: *const c_void, ordinal: i32, what: &str) -> Result<()> {
    match pointer_kind(p)? {
        PointerKind::Device(o) if o == ordinal => Ok(()),
        PointerKind::Device(o) => invalid(format!(
            "{what} is memory of cuda:{o}, not of cuda:{ordinal}"
        )),
        _ => invalid(format!("{what} is not device memory")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::codes::FLOAT32;
    use std::sync::Arc;

    fn host_tensor(vals: &[f32], sizes: Vec<i64>, strides: Vec<i64>) -> Tensor {
        let t = Tensor::empty_strided(sizes, strides, FLOAT32, Device::Cpu).unwrap();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        write_span(&t, 0, &bytes).unwrap();
        t
    }

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn strided_copy_and_clone_on_host() {
        // A 2x3 matrix stored column-major (strides [1, 2]).
        let src = host_tensor(&[1., 4., 2., 5., 3., 6.], vec![2, 3], vec![1, 2]);
        let c = clone_contiguous(&src).unwrap();
        assert!(c.is_contiguous());
        assert_eq!(
            floats(&gather_to_host(&c).unwrap()),
            [1., 2., 3., 4., 5., 6.]
        );
        let dst = host_tensor(&[0.; 6], vec![2, 3], vec![1, 2]);
        copy_tensor(&dst, &c).unwrap();
        assert_eq!(
            floats(&gather_to_host(&dst).unwrap()),
            [1., 2., 3., 4., 5., 6.]
        );
        zero(&dst).unwrap();
        assert_eq!(floats(&gather_to_host(&dst).unwrap()), [0.; 6]);
        let p = clone_preserve_strides(&src).unwrap();
        assert_eq!(p.strides, vec![1, 2]);
        assert_eq!(
            floats(&gather_to_host(&p).unwrap()),
            [1., 2., 3., 4., 5., 6.]
        );
    }

    #[test]
    fn pitched_layouts() {
        let t = |sizes: Vec<i64>, strides: Vec<i64>| {
            let n = required_bytes_for(&sizes, &strides);
            let storage = Arc::new(crate::tensor::Storage {
                memory: crate::tensor::Memory::Empty,
                nbytes: n,
                device: Device::Cpu,
            });
            Tensor::view(storage, FLOAT32, sizes, strides, 0).unwrap()
        };
        // Rows of 10 floats, 16 apart: the padded output of a dynamic batch.
        assert_eq!(
            pitched(&t(vec![7, 10], vec![16, 1])),
            Some(Pitched {
                rows: 7,
                width: 40,
                pitch: 64
            })
        );
        assert_eq!(
            pitched(&t(vec![2, 3, 10], vec![48, 16, 1])),
            Some(Pitched {
                rows: 6,
                width: 40,
                pitch: 64
            })
        );
        assert_eq!(
            pitched(&t(vec![4, 10], vec![10, 1])),
            Some(Pitched {
                rows: 4,
                width: 40,
                pitch: 40
            })
        );
        assert_eq!(
            pitched(&t(vec![1, 10], vec![99, 1])),
            Some(Pitched {
                rows: 1,
                width: 40,
                pitch: 40
            })
        );
        // Not pitched: a transposed view, or outer dims not spaced as one row index.
        assert_eq!(pitched(&t(vec![10, 7], vec![1, 10])), None);
        assert_eq!(pitched(&t(vec![2, 3, 10], vec![64, 16, 1])), None);
    }

    fn required_bytes_for(sizes: &[i64], strides: &[i64]) -> usize {
        crate::tensor::required_bytes(sizes, strides, 0, 4).unwrap()
    }

    #[test]
    fn copy_refuses_mismatches() {
        let a = host_tensor(&[0.; 6], vec![2, 3], vec![3, 1]);
        let b = host_tensor(&[0.; 6], vec![3, 2], vec![2, 1]);
        assert!(copy_tensor(&a, &b).is_err());
        let i = Tensor::empty_strided(
            vec![2, 3],
            vec![3, 1],
            crate::dtype::codes::INT32,
            Device::Cpu,
        )
        .unwrap();
        let e = copy_tensor(&i, &a).unwrap_err().to_string();
        assert!(e.contains("dtype conversion"), "{e}");
    }
}
