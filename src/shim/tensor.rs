//! Tensor lifetime and attributes: the constant getters, handle creation and
//! deletion, and every attribute getter.

use super::{give, out, tensor, AOTITorchError, AtenTensorHandle};
use super::{Aoti, AotiDelete};
use crate::boundary::{guard, guard_value};
use crate::dtype::{self, codes};
use crate::error::{invalid, Result};
use crate::tensor::{device_type, Device, Tensor};
use std::cell::Cell;
use std::ffi::c_void;

/// Layout codes (c10 `Layout`); only strided tensors exist here.
mod layout {
    pub const STRIDED: i32 = 0;
}

/// Functions that return one constant.
macro_rules! const_fns {
    ($($name:ident = $v:expr;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> i32 {
            guard_value(stringify!($name), $v, || $v)
        }
    )*};
}

const_fns! {
    aoti_torch_device_type_cpu = device_type::CPU;
    aoti_torch_device_type_cuda = device_type::CUDA;
    aoti_torch_device_type_meta = device_type::META;
    aoti_torch_device_type_xpu = device_type::XPU;
    aoti_torch_device_type_mps = device_type::MPS;
    aoti_torch_device_type_privateuse1 = device_type::PRIVATEUSE1;
    aoti_torch_dtype_float8_e5m2 = codes::FLOAT8_E5M2;
    aoti_torch_dtype_float8_e4m3fn = codes::FLOAT8_E4M3FN;
    aoti_torch_dtype_float8_e5m2fnuz = codes::FLOAT8_E5M2FNUZ;
    aoti_torch_dtype_float8_e4m3fnuz = codes::FLOAT8_E4M3FNUZ;
    aoti_torch_dtype_bfloat16 = codes::BFLOAT16;
    aoti_torch_dtype_float16 = codes::FLOAT16;
    aoti_torch_dtype_float32 = codes::FLOAT32;
    aoti_torch_dtype_float64 = codes::FLOAT64;
    aoti_torch_dtype_uint8 = codes::UINT8;
    aoti_torch_dtype_uint16 = codes::UINT16;
    aoti_torch_dtype_uint32 = codes::UINT32;
    aoti_torch_dtype_uint64 = codes::UINT64;
    aoti_torch_dtype_int8 = codes::INT8;
    aoti_torch_dtype_int16 = codes::INT16;
    aoti_torch_dtype_int32 = codes::INT32;
    aoti_torch_dtype_int64 = codes::INT64;
    aoti_torch_dtype_bool = codes::BOOL;
    aoti_torch_dtype_complex32 = codes::COMPLEX32;
    aoti_torch_dtype_complex64 = codes::COMPLEX64;
    aoti_torch_dtype_complex128 = codes::COMPLEX128;
    aoti_torch_layout_strided = layout::STRIDED;
    aoti_torch_layout_sparse_coo = 1;
    aoti_torch_layout_sparse_csr = 2;
    aoti_torch_layout__mkldnn = 3;
    aoti_torch_layout_sparse_csc = 4;
    aoti_torch_layout_sparse_bsr = 5;
    aoti_torch_layout_sparse_bsc = 6;
    aoti_torch_layout_jagged = 7;
    aoti_torch_memory_format_contiguous_format = 0;
    aoti_torch_memory_format_preserve_format = 1;
    aoti_torch_memory_format_channels_last = 2;
    aoti_torch_memory_format_channels_last_3d = 3;
}

pub(crate) use layout::STRIDED as LAYOUT_STRIDED;

/// Bytes per element; 0 for an unknown dtype.
#[no_mangle]
pub extern "C" fn aoti_torch_dtype_element_size(dtype: i32) -> usize {
    guard_value("aoti_torch_dtype_element_size", 0, || {
        dtype::element_size(dtype).unwrap_or(0)
    })
}

/// The major and minor version of PyTorch whose shim ABI this is.
const ABI_VERSION: (u64, u64) = (2, 11);
/// Bit positions of the major and minor fields (torch/headeronly/version.h's encoding).
const ABI_MAJOR_SHIFT: u32 = 56;
const ABI_MINOR_SHIFT: u32 = 48;

/// The TORCH_ABI_VERSION this shim implements (PyTorch 2.11).
#[no_mangle]
pub extern "C" fn aoti_torch_abi_version() -> u64 {
    let v = (ABI_VERSION.0 << ABI_MAJOR_SHIFT) | (ABI_VERSION.1 << ABI_MINOR_SHIFT);
    guard_value("aoti_torch_abi_version", v, || v)
}

thread_local! {
    static GRAD_MODE: Cell<bool> = const { Cell::new(false) };
}

/// Inference only: grad mode is off unless the `.so` turned it on.
#[no_mangle]
pub extern "C" fn aoti_torch_grad_mode_is_enabled() -> bool {
    guard_value("aoti_torch_grad_mode_is_enabled", false, || {
        GRAD_MODE.with(|g| g.get())
    })
}

#[no_mangle]
pub extern "C" fn aoti_torch_grad_mode_set_enabled(enabled: bool) {
    guard_value("aoti_torch_grad_mode_set_enabled", (), || {
        GRAD_MODE.with(|g| g.set(enabled))
    })
}

/// Delete a tensor handle. Runs in the `.so`'s destructors: always returns success.
///
/// # Safety
/// `tensor` must be null or a live handle from this library, deleted once.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_tensor_object(
    tensor: AtenTensorHandle,
) -> AOTITorchError {
    guard::<AotiDelete>("aoti_torch_delete_tensor_object", || {
        if tensor.is_null() {
            return invalid("null handle ignored");
        }
        crate::aoti::owned::handle_deleted(tensor);
        // SAFETY: a live handle, deleted once by its owner (the contract).
        drop(unsafe { crate::aoti::from_handle(tensor) });
        Ok(())
    })
}

/// A new handle to the same tensor (sharing its storage).
///
/// # Safety
/// `orig_handle` must be null or live; `new_handle` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_new_tensor_handle(
    orig_handle: AtenTensorHandle,
    new_handle: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_new_tensor_handle", || {
        // SAFETY: forwarded contract.
        let t = unsafe { tensor(orig_handle)? }.clone();
        // SAFETY: forwarded contract.
        unsafe { give(new_handle, t)? };
        // SAFETY: `give` wrote a new handle through the (checked) out-pointer.
        crate::aoti::owned::handle_made(unsafe { *new_handle });
        Ok(())
    })
}

/// A handle to an empty tensor, to be assigned later.
///
/// # Safety
/// `ret` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_new_uninitialized_tensor(
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_new_uninitialized_tensor", || {
        let t = crate::cuda::memory::empty_strided(vec![0], vec![1], codes::FLOAT32, Device::Cpu)?;
        // SAFETY: forwarded contract.
        unsafe { give(ret, t) }
    })
}

/// Make `dst` a view of `src`'s storage (same sizes, strides, offset).
///
/// # Safety
/// Both handles must be null or live, and distinct or the same live handle.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_assign_tensors(
    src: AtenTensorHandle,
    dst: AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_assign_tensors", || {
        // SAFETY: forwarded contract.
        let s = unsafe { tensor(src)? }.clone();
        if dst.is_null() {
            return invalid("dst is null");
        }
        // SAFETY: `dst` is a live handle (the contract); `s` is an owned clone, so a `dst` equal to
        // `src` is fine.
        unsafe { (*dst).0 = s };
        Ok(())
    })
}

/// A new handle viewing `src`.
///
/// # Safety
/// `src` must be null or live; `ret_dst` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_assign_tensors_out(
    src: AtenTensorHandle,
    ret_dst: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_assign_tensors_out", || {
        // SAFETY: forwarded contract.
        let s = unsafe { tensor(src)? }.clone();
        // SAFETY: forwarded contract.
        unsafe { give(ret_dst, s) }
    })
}

/// Getters that read one field of a tensor into an out-pointer.
macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident($ty:ty) = |$x:ident| $e:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `tensor` must be null or a live handle; `ret` null or valid for a write.
        #[no_mangle]
        pub unsafe extern "C" fn $name(tensor: AtenTensorHandle, ret: *mut $ty) -> AOTITorchError {
            guard::<Aoti>(stringify!($name), || {
                // SAFETY: forwarded contract.
                let $x = unsafe { self::tensor(tensor)? };
                let v: $ty = $e;
                // SAFETY: forwarded contract.
                unsafe { out(ret, v) }
            })
        }
    )*};
}

getters! {
    /// Address of element 0.
    aoti_torch_get_data_ptr(*mut c_void) = |x| x.data_ptr();
    /// Address of element 0.
    aoti_torch_get_mutable_data_ptr(*mut c_void) = |x| x.data_ptr();
    /// Address of element 0.
    aoti_torch_get_const_data_ptr(*const c_void) = |x| x.data_ptr().cast_const();
    /// Bytes of the underlying storage.
    aoti_torch_get_storage_size(i64) = |x| x.storage.nbytes as i64;
    /// Elements of the underlying storage.
    aoti_torch_get_storage_numel(i64) = |x| (x.storage.nbytes / x.element_size()) as i64;
    /// Rank.
    aoti_torch_get_dim(i64) = |x| x.sizes.len() as i64;
    /// Number of elements.
    aoti_torch_get_numel(i64) = |x| x.numel();
    /// Borrowed pointer to the sizes, valid while the tensor lives.
    aoti_torch_get_sizes(*mut i64) = |x| x.sizes.as_ptr().cast_mut();
    /// Borrowed pointer to the strides, valid while the tensor lives.
    aoti_torch_get_strides(*mut i64) = |x| x.strides.as_ptr().cast_mut();
    /// dtype code.
    aoti_torch_get_dtype(i32) = |x| x.dtype;
    /// Device type code.
    aoti_torch_get_device_type(i32) = |x| x.device().type_code();
    /// Device index (-1 on the CPU).
    aoti_torch_get_device_index(i32) = |x| x.device().index();
    /// Layout (always strided).
    aoti_torch_get_layout(i32) = |_x| layout::STRIDED;
    /// Storage offset in elements.
    aoti_torch_get_storage_offset(i64) = |x| x.storage_offset;
    /// Whether the strides are contiguous.
    aoti_torch_is_contiguous(bool) = |x| x.is_contiguous();
}

fn dim_index(x: &Tensor, d: i64) -> Result<usize> {
    let n = x.sizes.len() as i64;
    let dd = if d < 0 { d + n } else { d };
    if dd < 0 || dd >= n {
        return invalid(format!("dimension {d} out of range for a {n}-d tensor"));
    }
    Ok(dd as usize)
}

/// Size of one dimension (negative counts from the end).
///
/// # Safety
/// `tensor` must be null or live; `ret_size` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_size(
    tensor: AtenTensorHandle,
    d: i64,
    ret_size: *mut i64,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_get_size", || {
        // SAFETY: forwarded contract.
        let x = unsafe { self::tensor(tensor)? };
        let v = x.sizes[dim_index(x, d)?];
        // SAFETY: forwarded contract.
        unsafe { out(ret_size, v) }
    })
}

/// Stride of one dimension (negative counts from the end).
///
/// # Safety
/// `tensor` must be null or live; `ret_stride` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_stride(
    tensor: AtenTensorHandle,
    d: i64,
    ret_stride: *mut i64,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_get_stride", || {
        // SAFETY: forwarded contract.
        let x = unsafe { self::tensor(tensor)? };
        let v = x.strides[dim_index(x, d)?];
        // SAFETY: forwarded contract.
        unsafe { out(ret_stride, v) }
    })
}

/// Whether the handle is defined (non-null).
///
/// # Safety
/// `ret_is_defined` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_is_defined(
    tensor: AtenTensorHandle,
    ret_is_defined: *mut bool,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_is_defined", || {
        // SAFETY: forwarded contract.
        unsafe { out(ret_is_defined, !tensor.is_null()) }
    })
}
