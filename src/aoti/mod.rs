//! AOTInductor loading: validate the `.so` bytes ([`elf`]), make the process
//! ready for it and open it from memory, once per distinct `.so`
//! ([`loader`]), and drive its model container ([`container`]).
//!
//! The AOTI ABI's tensor handle lives here because both sides of that ABI
//! need it: the container hands tensors to the generated code, and the shims
//! (in `shim`) receive them back.

pub(crate) mod container;
pub(crate) mod elf;
pub(crate) mod loader;
pub(crate) mod owned;
pub(crate) mod payload;

pub(crate) use container::Container;
pub(crate) use loader::Library;

use crate::tensor::Tensor;

/// What an `AtenTensorHandle` points to: one boxed tensor (opaque to C).
#[repr(transparent)]
pub struct AtenTensorOpaque(pub(crate) Tensor);

/// The AOTI ABI's `AtenTensorHandle`. Ownership: whoever receives a new
/// handle owns it and releases it with `aoti_torch_delete_tensor_object`.
pub type AtenTensorHandle = *mut AtenTensorOpaque;

/// Box a tensor into a new handle (owned by the receiver).
pub(crate) fn into_handle(t: Tensor) -> AtenTensorHandle {
    Box::into_raw(Box::new(AtenTensorOpaque(t)))
}

/// Take back the tensor of a handle made by [`into_handle`].
///
/// # Safety
/// `h` must be a live handle from [`into_handle`] that nobody else will use or delete.
pub(crate) unsafe fn from_handle(h: AtenTensorHandle) -> Tensor {
    // SAFETY: per the contract, a box from into_handle, taken back once.
    unsafe { Box::from_raw(h) }.0
}
