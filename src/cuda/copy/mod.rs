//! Copies: the one place where the library moves bytes between host and
//! device memory, for the shims (`copy_`, `clone`, `zero_`, `item`) and for
//! the delegate (inputs, outputs, `et_cuda_memcpy`).
//!
//! Device-to-device copies are stream-ordered and never wait. A copy that
//! ends in host memory waits once for the stream. Strided layouts go through
//! a host buffer (the generated code only asks for them off the hot path).
//!
//! `raw` holds the counted driver copies between raw pointers, `strided` the
//! host-side walks over strided tensors (gather, scatter, pitched layouts);
//! this file the tensor-level copies built on them.

mod raw;
mod staged;
mod strided;
#[cfg(test)]
mod tests;

pub(crate) use raw::{
    check_device_pointer, copy_bytes, copy_bytes_blocking, copy_dtod_2d_async, copy_dtod_async,
    copy_dtoh_async, copy_dtoh_drained, copy_dtoh_ordered, copy_htod_async, copy_htod_ordered,
};
pub(crate) use staged::StagedUpload;
use strided::{for_each_offset, pitched, read_span, scatter_from_host, write_span};
pub(crate) use strided::{gather_to_host, host_buffer};

use super::stream;
use super::{device, ContextGuard};
use crate::error::{invalid, Result};
use crate::tensor::{contiguous_strides, Device, Tensor};

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
    let y = crate::cuda::memory::empty_strided(
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
    let y = crate::cuda::memory::empty_strided(
        x.sizes.clone(),
        x.strides.clone(),
        x.dtype,
        x.device(),
    )?;
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
