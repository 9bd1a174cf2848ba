//! Strided tensors seen from the host: spans of a storage read and written through host memory, element offsets, gather and scatter, pitched layouts.

use super::{copy_dtoh_async, copy_htod_async};
use crate::cuda::{device, stream, ContextGuard};
use crate::error::{invalid, Error, Result};
use crate::tensor::{Device, Tensor};

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
pub(super) fn read_span(x: &Tensor, off: usize, dst: &mut [u8]) -> Result<()> {
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
pub(super) fn write_span(x: &Tensor, off: usize, src: &[u8]) -> Result<()> {
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
pub(super) fn for_each_offset(x: &Tensor, mut f: impl FnMut(usize)) {
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
pub(super) fn scatter_from_host(x: &Tensor, data: &[u8]) -> Result<()> {
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
pub(super) struct Pitched {
    pub(super) rows: usize,
    pub(super) width: usize,
    pub(super) pitch: usize,
}

/// The pitched layout of `x`, when it has one (dims of size 1 ignored; the
/// last dim contiguous; the outer dims spaced like one long row index).
pub(super) fn pitched(x: &Tensor) -> Option<Pitched> {
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
