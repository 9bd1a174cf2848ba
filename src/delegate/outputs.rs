//! Output delivery: left on the device (no copy, no wait), or copied into the
//! caller's buffers — device buffers stream-ordered, host buffers through the
//! pinned staging buffer with exactly one wait.

use super::io::{OutputArg, OutputInfo};
use super::staging::{output_slice, Staging, DIRECT_COPY_MIN};
use crate::cuda::{self, copy, stream, PointerKind};
use crate::error::{invalid, Result};
use crate::tensor::{self, Tensor};
use cudarc::driver::sys::CUstream;

/// Resolved output placement (the configuration consulted already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    Copy,
    Device,
}

fn check_output(j: usize, want: &OutputArg, t: &Tensor) -> Result<()> {
    if let Some(d) = want.dtype.filter(|&d| d != t.dtype) {
        return invalid(format!(
            "output {j}: the caller expects dtype {d} but the model returns dtype {}",
            t.dtype
        ));
    }
    tensor::check_rank(t.sizes.len()).map_err(|e| e.context(&format!("output {j}")))
}

/// Make output `j` contiguous and check the caller's buffer can take it.
fn for_copy(j: usize, want: &OutputArg, t: Tensor) -> Result<(Tensor, usize)> {
    let t = copy::contiguous(t)?;
    let n = t.nbytes();
    if want.capacity < n {
        return invalid(format!(
            "output {j} needs {n} bytes but its buffer has {}",
            want.capacity
        ));
    }
    Ok((t, n))
}

fn copied_info(want: &OutputArg, t: &Tensor, n: usize) -> OutputInfo {
    OutputInfo {
        sizes: t.sizes.clone(),
        strides: tensor::contiguous_strides(&t.sizes),
        data: want.data,
        nbytes: n,
        tensor: None,
    }
}

/// Leave output `j` on the device: contiguous, owned by the method until its next execute.
fn keep_on_device(
    j: usize,
    want: &OutputArg,
    t: Tensor,
    kept: &mut Vec<Tensor>,
) -> Result<OutputInfo> {
    check_output(j, want, &t)?;
    // Callers read device outputs as contiguous tensors (ExecuTorch's do): a strided
    // output (e.g. rows padded for alignment) is made contiguous on the stream first.
    let t = copy::contiguous(t)?;
    let info = OutputInfo {
        sizes: t.sizes.clone(),
        strides: t.strides.clone(),
        data: t.data_ptr(),
        nbytes: t.nbytes(),
        tensor: Some(t.clone()),
    };
    kept.push(t);
    Ok(info)
}

/// Deliver the model's outputs: left on the device (contiguous, owned by the
/// method until its next execute) or copied into the caller's buffers. With
/// copy placement, an output given no buffer (null data: an ExecuTorch ≥ 1.4
/// program whose delegate outputs stay on the device unplanned) is left on
/// the device too.
///
/// # Safety
/// Each `outputs[j].data` used for copying must be valid for writes of
/// `outputs[j].capacity` bytes (host or device memory).
pub(crate) unsafe fn deliver(
    outs: Vec<Tensor>,
    outputs: &[OutputArg],
    placement: Placement,
    stream_raw: CUstream,
    staging: &mut Staging,
    kept: &mut Vec<Tensor>,
) -> Result<Vec<OutputInfo>> {
    let mut infos = Vec::with_capacity(outs.len());
    if placement == Placement::Device {
        for (j, t) in outs.into_iter().enumerate() {
            infos.push(keep_on_device(j, &outputs[j], t, kept)?);
        }
        return Ok(infos);
    }
    // Host-bound copies through staging: (output index, staging offset, bytes).
    let mut staged: Vec<(usize, usize, usize, Tensor)> = Vec::new();
    // Large outputs into pageable memory: copied by the driver after the one wait.
    let mut direct: Vec<(usize, usize, Tensor)> = Vec::new();
    let mut total = 0usize;
    for (j, t) in outs.into_iter().enumerate() {
        let want = &outputs[j];
        if want.data.is_null() {
            infos.push(keep_on_device(j, want, t, kept)?);
            continue;
        }
        check_output(j, want, &t)?;
        let (t, n) = for_copy(j, want, t)?;
        infos.push(copied_info(want, &t, n));
        if n == 0 {
            continue;
        }
        match cuda::pointer_kind(want.data)? {
            PointerKind::Device(_) => {
                // SAFETY: both ranges are device memory of >= n bytes.
                unsafe {
                    copy::copy_dtod_async(want.data as u64, t.data_ptr() as u64, n, stream_raw)?
                };
            }
            PointerKind::Pageable if n >= DIRECT_COPY_MIN => direct.push((j, n, t)),
            PointerKind::Pageable | PointerKind::Pinned => {
                staged.push((j, total, n, t));
                total += output_slice(n);
            }
        }
    }
    if staged.is_empty() && direct.is_empty() {
        return Ok(infos);
    }
    let buf = if total > 0 {
        staging.output_buffer(total)?
    } else {
        std::ptr::null_mut()
    };
    for (_, off, n, t) in &staged {
        // SAFETY: the staging buffer holds `total` bytes; the source is a device range of n bytes.
        unsafe {
            copy::copy_dtoh_async(buf.add(*off).cast(), t.data_ptr() as u64, *n, stream_raw)?
        };
    }
    // The one host wait of this execute.
    stream::synchronize(stream_raw)?;
    for (j, n, t) in &direct {
        // The stream is drained: the driver's pageable copy (pipelined through its own
        // staging) only moves bytes, faster than device -> pinned -> memcpy for large data.
        // SAFETY: the caller's buffer has >= n bytes (checked); device source of n bytes.
        unsafe { copy::copy_dtoh_drained(outputs[*j].data, t.data_ptr() as u64, *n)? };
    }
    for (j, off, n, _) in &staged {
        // SAFETY: the copy finished; the caller's buffer has >= n bytes (checked above).
        unsafe { std::ptr::copy_nonoverlapping(buf.add(*off), outputs[*j].data.cast::<u8>(), *n) };
    }
    Ok(infos)
}
