//! The AOTI C shim ABI (`aoti_torch_*`), with the exact signatures of
//! PyTorch 2.11's `torch/csrc/inductor/aoti_torch/c/shim.h`, that an
//! AOTInductor `.so` compiled with `link_libtorch=False` imports.
//!
//! Error-returning functions return `AOTI_TORCH_SUCCESS` (0) or
//! `AOTI_TORCH_FAILURE` (1), never unwind, and keep the reason as the
//! thread's last error (the one guard, `crate::boundary::guard`). The delete
//! functions that run inside the `.so`'s destructors (tensor, CUDA guard,
//! CUDA stream guard) always return success.
//!
//! Files: [`tensor`] (lifetime and attributes), [`views`] (creation, views,
//! copies, scalars), [`device`] (device and stream guards), [`diag`]
//! (diagnostics and unsupported features), [`int4`] (the int4 matmul fallback op),
//! [`driver`] (`cuModuleLoadData`, so that the generated code's modules are
//! unloaded with their container), [`sort_rand`] (stable sort and random
//! fallback ops), [`decode`] (the export companion's GEMV and decode attention ops).

pub mod decode;
pub mod device;
pub mod diag;
pub mod driver;
pub mod int4;
pub mod norm;
pub mod sort_rand;
pub mod tensor;
pub mod views;

pub use crate::aoti::{AtenTensorHandle, AtenTensorOpaque};
pub use decode::*;
pub use device::*;
pub use diag::*;
pub use int4::*;
pub use sort_rand::*;
pub use tensor::*;
pub use views::*;

use crate::boundary::{write_out, Abi};
use crate::error::Error;
use crate::error::{invalid, Result};
use crate::tensor::Tensor;

/// The shim ABI's error code.
pub type AOTITorchError = i32;
/// Success.
pub const AOTI_TORCH_SUCCESS: AOTITorchError = 0;
/// Failure (the reason is the thread's last error).
pub const AOTI_TORCH_FAILURE: AOTITorchError = 1;

/// Borrow the tensor behind a handle.
///
/// # Safety
/// A non-null `h` must be a live handle from this library, not deleted while the borrow lives.
pub(crate) unsafe fn tensor<'a>(h: AtenTensorHandle) -> Result<&'a Tensor> {
    // SAFETY: forwarded contract.
    unsafe { named(h, "tensor handle") }
}

/// Borrow the tensor behind a handle; a null handle is an error naming the argument.
///
/// # Safety
/// As for [`tensor`].
pub(crate) unsafe fn named<'a>(h: AtenTensorHandle, what: &str) -> Result<&'a Tensor> {
    // SAFETY: per the contract, a non-null handle is a live boxed tensor.
    Ok(&unsafe { crate::boundary::non_null(h.cast_const(), what)? }.0)
}

/// Borrow the tensor of an optional-tensor argument (`Tensor?` in the op's schema, which
/// AOTInductor passes as a pointer to a handle, null for `None`).
///
/// # Safety
/// A non-null `p` must be valid for a read of a handle that is null or live, as for [`named`].
pub(crate) unsafe fn optional<'a>(
    p: *const AtenTensorHandle,
    what: &str,
) -> Result<Option<&'a Tensor>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: per the contract, `p` is readable and the handle it holds is null or live.
    let h = unsafe { p.read() };
    // SAFETY: forwarded contract.
    unsafe { named(h, what) }.map(Some)
}

/// Hand a new tensor to the caller through `ret` (the caller owns the new handle).
///
/// # Safety
/// A non-null `ret` must be valid for a write of a handle.
pub(crate) unsafe fn give(ret: *mut AtenTensorHandle, t: Tensor) -> Result<()> {
    if ret.is_null() {
        return invalid("ret_new_tensor is null");
    }
    // SAFETY: checked non-null; valid per the contract.
    unsafe { write_out(ret, crate::aoti::into_handle(t), "ret_new_tensor") }
}

/// Write a value through a return pointer.
///
/// # Safety
/// A non-null `p` must be valid for a write of `T`.
pub(crate) unsafe fn out<T>(p: *mut T, v: T) -> Result<()> {
    // SAFETY: forwarded contract (null-checked by write_out).
    unsafe { write_out(p, v, "return pointer") }
}

/// Fallible `aoti_torch_*` functions: `AOTI_TORCH_SUCCESS` / `AOTI_TORCH_FAILURE`.
pub(crate) struct Aoti;
impl Abi for Aoti {
    type Out = AOTITorchError;
    fn success() -> AOTITorchError {
        AOTI_TORCH_SUCCESS
    }
    fn failure(_: &Error) -> AOTITorchError {
        AOTI_TORCH_FAILURE
    }
}

/// The delete shims: run in the generated code's destructors, so they always
/// succeed; a problem is logged and leaves the last error alone.
pub(crate) struct AotiDelete;
impl Abi for AotiDelete {
    type Out = AOTITorchError;
    fn success() -> AOTITorchError {
        AOTI_TORCH_SUCCESS
    }
    fn failure(_: &Error) -> AOTITorchError {
        AOTI_TORCH_SUCCESS
    }
    const REPORTS: bool = false;
}
