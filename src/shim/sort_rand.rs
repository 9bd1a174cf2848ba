//! Fallback ops an AOTInductor `.so` imports for sorting and random numbers,
//! with the signatures of PyTorch's generated
//! `torch/csrc/inductor/aoti_torch/generated/c_shim_cuda.h` (the ones
//! ExecuTorch's `backends/cuda/runtime/shims/{sort,rand}.h` also export):
//!
//! - `aoti_torch_cuda_sort_stable`: `torch.sort(..., stable=True)` and
//!   `torch.argsort(..., stable=True)` (Inductor keeps them as a fallback).
//! - `aoti_torch_cuda_randint_low_out`: what Inductor's own random lowering
//!   calls once per graph to draw the int64 seeds of its Triton `rand`/`randn`
//!   (`inductor_seeds` → `aten.randint.low_out(out, INT64_MIN, INT64_MAX, [count])`).
//! - `aoti_torch_cuda_rand`, `aoti_torch_cuda_randint`,
//!   `aoti_torch_cuda_randint_low`: the ops themselves, imported when
//!   Inductor falls back to ATen for random ops (`fallback_random=True`).
//!
//! The work and the generator's semantics are in `crate::kernels::sort_rand`
//! and `kernels/README.md`.

use super::Aoti;
use super::{give, named, AOTITorchError, AtenTensorHandle};
use crate::boundary::{dims_from_raw, guard};
use crate::dtype::codes;
use crate::error::{invalid, Result};
use crate::kernels::sort_rand;
use crate::tensor::{device_type, Device};

/// Read an optional `int32_t*` argument (null: absent).
///
/// # Safety
/// A non-null `p` must point to a readable `int32_t`.
unsafe fn opt_i32(p: *const i32) -> Option<i32> {
    if p.is_null() {
        None
    } else {
        // SAFETY: non-null, readable per the contract.
        Some(unsafe { *p })
    }
}

/// The device of a factory op (`dtype`, `layout`, `device`, `device_index_`,
/// `pin_memory` as the generated code passes them): CUDA only, strided, not pinned.
fn factory_device(
    op: &str,
    layout: Option<i32>,
    device: Option<i32>,
    device_index: i32,
    pin_memory: Option<i32>,
) -> Result<i32> {
    if let Some(l) = layout.filter(|&l| l != super::tensor::LAYOUT_STRIDED) {
        return invalid(format!("{op}: layout {l} is not supported (only strided)"));
    }
    if let Some(d) = device.filter(|&d| d != device_type::CUDA) {
        return invalid(format!(
            "{op}: device type {d} is not CUDA ({})",
            device_type::CUDA
        ));
    }
    if pin_memory.is_some_and(|p| p != 0) {
        return invalid(format!("{op}: pin_memory is for CPU tensors"));
    }
    match Device::from_codes(
        device_type::CUDA,
        device_index,
        crate::cuda::current_device_ordinal,
    )? {
        Device::Cuda(i) => Ok(i),
        Device::Cpu => invalid(format!("{op}: not a CUDA device")),
    }
}

/// Sorted values and their int64 indices along `dim`, ties in their original
/// order (a stable sort, whatever `stable` says: a stable result is also a
/// valid unstable one), NaN largest. New tensors owned by the caller, with
/// the input's strides when it is dense (else dense ones in its stride
/// order), computed on the current stream.
///
/// # Safety
/// `self_` null or live; `ret0`/`ret1` null or valid for a write (`stable` is not read).
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_sort_stable(
    self_: AtenTensorHandle,
    _stable: *mut i32,
    dim: i64,
    descending: i32,
    ret0: *mut AtenTensorHandle,
    ret1: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_sort_stable", || {
        // SAFETY: forwarded contract.
        let x = unsafe { named(self_, "self")? };
        if ret0.is_null() || ret1.is_null() {
            return invalid("ret0 and ret1 must not be null");
        }
        let (values, indices) = sort_rand::sort_stable(x, dim, descending != 0)?;
        // SAFETY: forwarded contract (both checked non-null).
        unsafe {
            give(ret0, values)?;
            give(ret1, indices)
        }
    })
}

/// `torch.rand(size, dtype)`: a new contiguous tensor, uniform in [0, 1),
/// from the device's generator (float32 when `dtype` is null).
///
/// # Safety
/// `size` null (with `size_len_` 0) or `size_len_` readable values; each optional argument
/// null or readable; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_rand(
    size: *const i64,
    size_len_: i64,
    dtype: *mut i32,
    layout: *mut i32,
    device: *mut i32,
    device_index_: i32,
    pin_memory: *mut i32,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_rand", || {
        // SAFETY: forwarded contract.
        let sizes = unsafe { dims_from_raw(size, size_len_, "size")? };
        // SAFETY: forwarded contract (each pointer null or readable).
        let (dt, lay, dev, pin) = unsafe {
            (
                opt_i32(dtype),
                opt_i32(layout),
                opt_i32(device),
                opt_i32(pin_memory),
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let ordinal = factory_device("rand", lay, dev, device_index_, pin)?;
        let t = sort_rand::rand(sizes, dt.unwrap_or(codes::FLOAT32), ordinal)?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, t) }
    })
}

/// Shared body of `randint` and `randint_low`.
///
/// # Safety
/// As for [`aoti_torch_cuda_randint_low`].
#[allow(clippy::too_many_arguments)]
unsafe fn randint_factory(
    op: &str,
    low: i64,
    high: i64,
    size: *const i64,
    size_len: i64,
    dtype: *const i32,
    layout: *const i32,
    device: *const i32,
    device_index: i32,
    pin_memory: *const i32,
    ret0: *mut AtenTensorHandle,
) -> Result<()> {
    // SAFETY: forwarded contract.
    let sizes = unsafe { dims_from_raw(size, size_len, "size")? };
    // SAFETY: forwarded contract (each pointer null or readable).
    let (dt, lay, dev, pin) = unsafe {
        (
            opt_i32(dtype),
            opt_i32(layout),
            opt_i32(device),
            opt_i32(pin_memory),
        )
    };
    if ret0.is_null() {
        return invalid("ret0 is null");
    }
    let ordinal = factory_device(op, lay, dev, device_index, pin)?;
    let t = sort_rand::randint(low, high, sizes, dt.unwrap_or(codes::INT64), ordinal)?;
    // SAFETY: forwarded contract (checked non-null).
    unsafe { give(ret0, t) }
}

/// `torch.randint(high, size, dtype)`: integers uniform in [0, high), int64 when `dtype` is null.
///
/// # Safety
/// As for [`aoti_torch_cuda_rand`].
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_randint(
    high: i64,
    size: *const i64,
    size_len_: i64,
    dtype: *mut i32,
    layout: *mut i32,
    device: *mut i32,
    device_index_: i32,
    pin_memory: *mut i32,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_randint", || {
        // SAFETY: forwarded contract.
        unsafe {
            randint_factory(
                "randint",
                0,
                high,
                size,
                size_len_,
                dtype,
                layout,
                device,
                device_index_,
                pin_memory,
                ret0,
            )
        }
    })
}

/// `torch.randint(low, high, size, dtype)`: integers uniform in [low, high).
///
/// # Safety
/// As for [`aoti_torch_cuda_rand`].
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_randint_low(
    low: i64,
    high: i64,
    size: *const i64,
    size_len_: i64,
    dtype: *mut i32,
    layout: *mut i32,
    device: *mut i32,
    device_index_: i32,
    pin_memory: *mut i32,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_randint_low", || {
        // SAFETY: forwarded contract.
        unsafe {
            randint_factory(
                "randint_low",
                low,
                high,
                size,
                size_len_,
                dtype,
                layout,
                device,
                device_index_,
                pin_memory,
                ret0,
            )
        }
    })
}

/// `torch.randint(low, high, size, out=out)`: fill `out` (which must already
/// have sizes `size`: no resize; contiguous, integer dtype) with integers
/// uniform in [low, high). Inductor's seeds call it with
/// `[INT64_MIN, INT64_MAX)`.
///
/// # Safety
/// `out` null or live; `size` null (with `size_len_` 0) or `size_len_` readable values.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_randint_low_out(
    out: AtenTensorHandle,
    low: i64,
    high: i64,
    size: *const i64,
    size_len_: i64,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_randint_low_out", || {
        // SAFETY: forwarded contract.
        let t = unsafe { named(out, "out")? };
        // SAFETY: forwarded contract.
        let sizes = unsafe { dims_from_raw(size, size_len_, "size")? };
        sort_rand::check_sizes(&sizes, "randint_low_out")?;
        if t.sizes != sizes {
            return invalid(format!(
                "randint_low_out: out has sizes {:?}, not {sizes:?} (resizing is not supported)",
                t.sizes
            ));
        }
        sort_rand::randint_into(t, low, high)
    })
}

/// Set device `device`'s generator to `seed` (offset 0), in order on the
/// thread's current stream for that device. Not part of PyTorch's shim: the
/// way for an application to choose the seed of its programs' random ops
/// (the default is PyTorch's default seed, 67280421310721).
#[no_mangle]
pub extern "C" fn et_cuda_debug_rng_seed(device: i32, seed: u64) -> AOTITorchError {
    guard::<Aoti>("et_cuda_debug_rng_seed", || {
        sort_rand::manual_seed(device, seed)
    })
}

/// Read device `device`'s generator state (seed, offset in 32-bit words
/// drawn), after waiting for the thread's current stream for that device.
///
/// # Safety
/// `seed` and `offset` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_debug_rng_state(
    device: i32,
    seed: *mut u64,
    offset: *mut u64,
) -> AOTITorchError {
    guard::<Aoti>("et_cuda_debug_rng_state", || {
        if seed.is_null() || offset.is_null() {
            return invalid("seed and offset must not be null");
        }
        let (s, o) = sort_rand::rng_state(device)?;
        // SAFETY: forwarded contract (both checked non-null).
        unsafe {
            super::out(seed, s)?;
            super::out(offset, o)
        }
    })
}
