//! The inputs and outputs of an execute, in Rust terms, and how inputs
//! reach the device: device memory is used in place (eagerly) or copied
//! device-to-device (into a graph's buffers); host memory is staged.

use super::staging::{Staging, DIRECT_COPY_MIN};
use crate::cuda::{self, copy, memory, PointerKind};
use crate::dtype::{self, Code};
use crate::error::{invalid, Result};
use crate::kernels::sample;
use crate::tensor::{self, Device, Memory, Tensor};
use cudarc::driver::sys::CUstream;
use std::ffi::c_void;
use std::sync::Arc;

/// One input of an execute: a contiguous tensor in host or device memory.
#[derive(Debug, Clone)]
pub struct InputArg {
    /// c10 ScalarType code.
    pub dtype: Code,
    /// Sizes.
    pub sizes: Vec<i64>,
    /// Strides in elements (contiguous ones only).
    pub strides: Vec<i64>,
    /// Host or device memory (looked up).
    pub data: *const c_void,
    /// Bytes readable at `data`.
    pub nbytes: usize,
}

/// One output slot: the dtype the caller expects (`None`: any) and, for
/// copied outputs, the caller's buffer (host or device memory) and its capacity.
#[derive(Debug, Clone)]
pub struct OutputArg {
    /// The dtype the caller expects (`None`: any).
    pub dtype: Option<Code>,
    /// The caller's buffer (host or device memory; null: leave the output on the device).
    pub data: *mut c_void,
    /// Bytes writable at `data`.
    pub capacity: usize,
}

/// What an execute delivered for one output.
#[derive(Debug, Clone)]
pub struct OutputInfo {
    /// The output's sizes (dynamic shapes: what the model produced).
    pub sizes: Vec<i64>,
    /// Its strides in elements (contiguous).
    pub strides: Vec<i64>,
    /// Where the elements are: the caller's buffer, or device memory owned by
    /// the method (left on the device), valid until its next execute or destroy.
    pub data: *mut c_void,
    /// Bytes of the elements.
    pub nbytes: usize,
    /// The output left on the device (a reference that keeps its memory alive).
    pub(crate) tensor: Option<Tensor>,
}

/// A checked input: its byte count and where its memory is.
pub(crate) struct CheckedInput {
    pub(crate) nbytes: usize,
    pub(crate) kind: PointerKind,
}

impl InputArg {
    /// Validate the description against the method's device.
    pub(crate) fn check(&self, device: i32) -> Result<CheckedInput> {
        tensor::check_rank(self.sizes.len())?;
        tensor::checked_numel(&self.sizes)?;
        let elem = dtype::checked_element_size(self.dtype)?;
        let n = tensor::required_bytes(&self.sizes, &self.strides, 0, elem)?;
        if !tensor::is_contiguous(&self.sizes, &self.strides) {
            return invalid(format!(
                "non-contiguous strides {:?} for sizes {:?} are not supported",
                self.strides, self.sizes
            ));
        }
        if self.nbytes < n {
            return invalid(format!(
                "needs {n} bytes but the buffer has {}",
                self.nbytes
            ));
        }
        if n > 0 && self.data.is_null() {
            return invalid("data is null");
        }
        let kind = cuda::pointer_kind(self.data)?;
        if let PointerKind::Device(ord) = kind {
            if ord != device {
                return invalid(format!(
                    "is in memory of cuda:{ord} but the method runs on cuda:{device}"
                ));
            }
        }
        Ok(CheckedInput { nbytes: n, kind })
    }

    /// A tensor over the caller's device memory, used in place.
    ///
    /// # Safety
    /// `data` must be device memory valid for `nbytes` for as long as the tensor lives.
    pub(crate) unsafe fn borrow_device(&self, device: i32) -> Result<Tensor> {
        // SAFETY: forwarded contract.
        unsafe {
            Tensor::borrowed(
                self.data.cast_mut(),
                self.dtype,
                self.sizes.clone(),
                self.strides.clone(),
                0,
                Device::Cuda(device),
            )
        }
    }
}

/// Where copies of one execute go and how they are made.
pub(crate) struct CopyCtx<'a> {
    /// The method's device (its context current).
    pub(crate) device: i32,
    pub(crate) stream: CUstream,
    pub(crate) staging: &'a mut Staging,
    pub(crate) exec: u64,
}

/// Enqueue the copy of `input` (`n` bytes, host or device memory) into the device memory at `dst`.
/// An int64 host input of one element holding `SAMPLED_TOKEN` takes the token of the device's
/// last asynchronous sampling call instead (`kernels::sample`), device to device.
///
/// # Safety
/// `input.data` must be readable for `n` bytes; `dst` must be device memory of at least `n` bytes.
pub(crate) unsafe fn copy_input(
    input: &InputArg,
    kind: PointerKind,
    n: usize,
    dst: *mut c_void,
    ctx: &mut CopyCtx<'_>,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let s = ctx.stream;
    let host = !matches!(kind, PointerKind::Device(_));
    // SAFETY: a host input has n readable bytes (caller's contract).
    if host && unsafe { sample::asks_for_feed(input.dtype, n, input.data.cast()) } {
        // The token of the device's last asynchronous sampling call, in stream order.
        // SAFETY: `dst` has n = 8 writable device bytes of the method's device, current.
        return unsafe { sample::copy_feed(ctx.device, dst as u64, s) };
    }
    match kind {
        // SAFETY: `input.data` has n readable device bytes and `dst` n writable device bytes.
        PointerKind::Device(_) => unsafe {
            copy::copy_dtod_async(dst as u64, input.data as u64, n, s)
        },
        // Large pageable input: the driver stages it in pipelined chunks and returns once the
        // bytes are staged (no wait for the stream), faster than a host memcpy into our staging.
        // SAFETY: `input.data` has n readable host bytes and `dst` n writable device bytes.
        PointerKind::Pageable if n >= DIRECT_COPY_MIN => unsafe {
            copy::copy_htod_async(dst as u64, input.data, n, s)
        },
        PointerKind::Pageable | PointerKind::Pinned => {
            let slot = ctx.staging.input_slot(ctx.exec, n)?;
            // SAFETY: the slot has >= n bytes and no copy in flight; the source has n bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(input.data.cast::<u8>(), slot.buf.ptr(), n);
                copy::copy_htod_async(dst as u64, slot.buf.ptr().cast(), n, s)?;
            }
            slot.done.record(s)
        }
    }
}

/// The tensor handed to the model for one input when running eagerly:
/// device memory in place, host memory copied into a fresh device buffer.
///
/// # Safety
/// `input.data` must be valid for `input.nbytes` bytes (host or device
/// memory) until the execute's work on the stream has finished.
pub(crate) unsafe fn eager_input(
    input: &InputArg,
    device: &Arc<crate::cuda::DeviceState>,
    owner: &Arc<crate::cuda::stream::CudaStream>,
    ctx: &mut CopyCtx<'_>,
) -> Result<Tensor> {
    let c = input.check(device.ordinal)?;
    if let PointerKind::Device(_) = c.kind {
        // SAFETY: forwarded contract.
        return unsafe { input.borrow_device(device.ordinal) };
    }
    let memory = if c.nbytes == 0 {
        Memory::Empty
    } else {
        Memory::Device(Box::new(memory::alloc_on_stream(
            device.clone(),
            c.nbytes,
            ctx.stream,
            Some(owner.clone()),
        )?))
    };
    let t = Tensor::from_memory(
        memory,
        c.nbytes,
        Device::Cuda(device.ordinal),
        input.dtype,
        input.sizes.clone(),
        input.strides.clone(),
    )?;
    // SAFETY: forwarded contract for the source; the destination was just allocated with n bytes.
    unsafe { copy_input(input, c.kind, c.nbytes, t.data_ptr(), ctx)? };
    Ok(t)
}
