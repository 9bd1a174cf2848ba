//! Tensor creation, views, copies and scalar reads.

use super::tensor::LAYOUT_STRIDED;
use super::Aoti;
use super::{give, tensor, AOTITorchError, AtenTensorHandle};
use crate::boundary::{dims_from_raw, guard};
use crate::cuda::copy;
use crate::dtype::{self, codes};
use crate::error::{invalid, Error, Result};
use crate::tensor::{contiguous_strides, Device, Tensor};
use std::ffi::c_void;

/// Sizes, and strides (contiguous when `strides_ptr` is null), from C arrays.
///
/// # Safety
/// Non-null pointers must point to `ndim` readable `int64_t`s.
unsafe fn shape(
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
) -> Result<(Vec<i64>, Vec<i64>)> {
    // SAFETY: forwarded contract.
    let sizes = unsafe { dims_from_raw(sizes_ptr, ndim, "sizes_ptr")? };
    let strides = if strides_ptr.is_null() {
        contiguous_strides(&sizes)
    } else {
        // SAFETY: forwarded contract.
        unsafe { dims_from_raw(strides_ptr, ndim, "strides_ptr")? }
    };
    Ok((sizes, strides))
}

/// A new tensor with fresh memory (device memory ordered on the current stream).
///
/// # Safety
/// `sizes_ptr`/`strides_ptr` must be null or point to `ndim` values; `ret_new_tensor` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_empty_strided(
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    dtype: i32,
    device_type: i32,
    device_index: i32,
    ret_new_tensor: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_empty_strided", || {
        // SAFETY: forwarded contract.
        let (sizes, strides) = unsafe { shape(ndim, sizes_ptr, strides_ptr)? };
        let dev = Device::from_codes(
            device_type,
            device_index,
            crate::cuda::current_device_ordinal,
        )?;
        let t = crate::cuda::memory::empty_strided(sizes, strides, dtype, dev)?;
        // SAFETY: forwarded contract.
        unsafe { give(ret_new_tensor, t) }
    })
}

/// Pinned CPU memory is not needed by inference code: this gives ordinary host memory.
///
/// # Safety
/// As for `aoti_torch_empty_strided`.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_empty_strided_pinned(
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    dtype: i32,
    device_type: i32,
    device_index: i32,
    ret_new_tensor: *mut AtenTensorHandle,
) -> AOTITorchError {
    // SAFETY: same contract.
    unsafe {
        aoti_torch_empty_strided(
            ndim,
            sizes_ptr,
            strides_ptr,
            dtype,
            device_type,
            device_index,
            ret_new_tensor,
        )
    }
}

/// A tensor over memory the generated code owns (its constants, its pools).
///
/// # Safety
/// As the shim ABI requires: `data` valid for the view's bytes on that device while the tensor
/// lives; `sizes_ptr`/`strides_ptr` null or `ndim` values; `ret` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_tensor_from_blob(
    data: *mut c_void,
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    storage_offset: i64,
    dtype: i32,
    device_type: i32,
    device_index: i32,
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_create_tensor_from_blob", || {
        // SAFETY: forwarded contract.
        let (sizes, strides) = unsafe { shape(ndim, sizes_ptr, strides_ptr)? };
        let dev = Device::from_codes(
            device_type,
            device_index,
            crate::cuda::current_device_ordinal,
        )?;
        // SAFETY: the generated code keeps `data` valid for this view while the tensor lives.
        let t = unsafe { Tensor::borrowed(data, dtype, sizes, strides, storage_offset, dev)? };
        crate::aoti::container::record_constant(&t);
        // SAFETY: forwarded contract.
        unsafe { give(ret, t) }
    })
}

/// `aoti_torch_create_tensor_from_blob` with a layout and opaque metadata (strided only).
///
/// # Safety
/// As for `aoti_torch_create_tensor_from_blob`.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_tensor_from_blob_v2(
    data: *mut c_void,
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    storage_offset: i64,
    dtype: i32,
    device_type: i32,
    device_index: i32,
    ret: *mut AtenTensorHandle,
    layout: i32,
    _opaque_metadata: *const u8,
    opaque_metadata_size: i64,
) -> AOTITorchError {
    let rc = guard::<Aoti>("aoti_torch_create_tensor_from_blob_v2", || {
        if layout != LAYOUT_STRIDED {
            return invalid(format!(
                "layout {layout} is not supported (only strided, 0)"
            ));
        }
        if opaque_metadata_size != 0 {
            return invalid("opaque metadata (MKLDNN tensors) is not supported");
        }
        Ok(())
    });
    if rc != super::AOTI_TORCH_SUCCESS {
        return rc;
    }
    // SAFETY: same contract as the v1 function.
    unsafe {
        aoti_torch_create_tensor_from_blob(
            data,
            ndim,
            sizes_ptr,
            strides_ptr,
            storage_offset,
            dtype,
            device_type,
            device_index,
            ret,
        )
    }
}

/// A view of `self_` with new sizes and strides at `self_.storage_offset + offset_increment`.
///
/// # Safety
/// `self_` null or live; `sizes_ptr`/`strides_ptr` null or `ndim` values; `ret_new_tensor` null or valid.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch__reinterpret_tensor(
    self_: AtenTensorHandle,
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    offset_increment: i64,
    ret_new_tensor: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch__reinterpret_tensor", || {
        // SAFETY: forwarded contract.
        let x = unsafe { tensor(self_)? };
        // SAFETY: forwarded contract.
        let sizes = unsafe { dims_from_raw(sizes_ptr, ndim, "sizes_ptr")? };
        // SAFETY: forwarded contract.
        let strides = unsafe { dims_from_raw(strides_ptr, ndim, "strides_ptr")? };
        let off = x
            .storage_offset
            .checked_add(offset_increment)
            .ok_or_else(|| Error::invalid_argument("storage offset overflows"))?;
        let v = Tensor::view(x.storage.clone(), x.dtype, sizes, strides, off)?;
        // SAFETY: forwarded contract.
        unsafe { give(ret_new_tensor, v) }
    })
}

/// A view of `self_`'s storage at `offset_bytes`, with another dtype and shape.
///
/// # Safety
/// As for `aoti_torch__reinterpret_tensor`.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch__alloc_from_pool(
    self_: AtenTensorHandle,
    offset_bytes: i64,
    dtype: i32,
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    ret_new_tensor: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch__alloc_from_pool", || {
        // SAFETY: forwarded contract.
        let x = unsafe { tensor(self_)? };
        let elem = dtype::checked_element_size(dtype)? as i64;
        let base = x.storage_offset * x.element_size() as i64;
        let total = base
            .checked_add(offset_bytes)
            .filter(|b| *b >= 0)
            .ok_or_else(|| {
                Error::invalid_argument(format!("offset {offset_bytes} out of range"))
            })?;
        if total % elem != 0 {
            return invalid(format!(
                "offset {total} bytes is not a multiple of the element size {elem}"
            ));
        }
        // SAFETY: forwarded contract.
        let sizes = unsafe { dims_from_raw(sizes_ptr, ndim, "sizes_ptr")? };
        // SAFETY: forwarded contract.
        let strides = unsafe { dims_from_raw(strides_ptr, ndim, "strides_ptr")? };
        let v = Tensor::view(x.storage.clone(), dtype, sizes, strides, total / elem)?;
        // SAFETY: forwarded contract.
        unsafe { give(ret_new_tensor, v) }
    })
}

/// A view of `self_` with new sizes and strides (same rank, same offset).
///
/// # Safety
/// `self_` null or live; `sizes_ptr`/`strides_ptr` null or rank values; `ret` null or valid.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_as_strided(
    self_: AtenTensorHandle,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_as_strided", || {
        // SAFETY: forwarded contract.
        let x = unsafe { tensor(self_)? };
        let n = x.sizes.len() as i64;
        // SAFETY: forwarded contract.
        let sizes = unsafe { dims_from_raw(sizes_ptr, n, "sizes_ptr")? };
        // SAFETY: forwarded contract.
        let strides = unsafe { dims_from_raw(strides_ptr, n, "strides_ptr")? };
        let v = Tensor::view(x.storage.clone(), x.dtype, sizes, strides, x.storage_offset)?;
        // SAFETY: forwarded contract.
        unsafe { give(ret, v) }
    })
}

macro_rules! scalar_to_tensor {
    ($($name:ident($ty:ty) = $dt:expr;)*) => {$(
        /// A 0-d host tensor holding `value`.
        ///
        /// # Safety
        /// `ret_new_tensor` must be null or valid for a write.
        #[no_mangle]
        pub unsafe extern "C" fn $name(value: $ty, ret_new_tensor: *mut AtenTensorHandle) -> AOTITorchError {
            guard::<Aoti>(stringify!($name), || {
                let x = crate::cuda::memory::empty_strided(vec![], vec![], $dt, Device::Cpu)?;
                // SAFETY: a fresh host allocation of one element of this type.
                unsafe { x.data_ptr().cast::<$ty>().write_unaligned(value) };
                // SAFETY: forwarded contract.
                unsafe { give(ret_new_tensor, x) }
            })
        }
    )*};
}

scalar_to_tensor! {
    aoti_torch_scalar_to_tensor_float32(f32) = codes::FLOAT32;
    aoti_torch_scalar_to_tensor_float64(f64) = codes::FLOAT64;
    aoti_torch_scalar_to_tensor_uint8(u8) = codes::UINT8;
    aoti_torch_scalar_to_tensor_uint16(u16) = codes::UINT16;
    aoti_torch_scalar_to_tensor_uint32(u32) = codes::UINT32;
    aoti_torch_scalar_to_tensor_uint64(u64) = codes::UINT64;
    aoti_torch_scalar_to_tensor_int8(i8) = codes::INT8;
    aoti_torch_scalar_to_tensor_int16(i16) = codes::INT16;
    aoti_torch_scalar_to_tensor_int32(i32) = codes::INT32;
    aoti_torch_scalar_to_tensor_int64(i64) = codes::INT64;
    aoti_torch_scalar_to_tensor_bool(bool) = codes::BOOL;
}

/// Copy `src` into `self_` (same dtype and sizes).
///
/// # Safety
/// Both handles null or live.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_copy_(
    self_: AtenTensorHandle,
    src: AtenTensorHandle,
    _non_blocking: i32,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_copy_", || {
        // SAFETY: forwarded contract.
        let (d, s) = unsafe { (tensor(self_)?, tensor(src)?) };
        copy::copy_tensor(d, s)
    })
}

/// Copy `src` into `dst` (same dtype and sizes).
///
/// # Safety
/// Both handles null or live.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_tensor_copy_(
    src: AtenTensorHandle,
    dst: AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_tensor_copy_", || {
        // SAFETY: forwarded contract.
        let (d, s) = unsafe { (tensor(dst)?, tensor(src)?) };
        copy::copy_tensor(d, s)
    })
}

/// A contiguous copy of `self_` on its device.
///
/// # Safety
/// `self_` null or live; `ret` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_clone(
    self_: AtenTensorHandle,
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_clone", || {
        // SAFETY: forwarded contract.
        let y = copy::clone_contiguous(unsafe { tensor(self_)? })?;
        // SAFETY: forwarded contract.
        unsafe { give(ret, y) }
    })
}

/// A copy of `self_` with the same strides (the whole strided span is copied).
///
/// # Safety
/// `self_` null or live; `ret` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_clone_preserve_strides(
    self_: AtenTensorHandle,
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_clone_preserve_strides", || {
        // SAFETY: forwarded contract.
        let y = copy::clone_preserve_strides(unsafe { tensor(self_)? })?;
        // SAFETY: forwarded contract.
        unsafe { give(ret, y) }
    })
}

/// Zero every element of `self_`.
///
/// # Safety
/// `self_` null or live.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_zero_(self_: AtenTensorHandle) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_zero_", || {
        // SAFETY: forwarded contract.
        copy::zero(unsafe { tensor(self_)? })
    })
}

fn item_bytes(x: &Tensor, want_dtype: i32, dst: &mut [u8]) -> Result<()> {
    if x.dtype != want_dtype {
        return invalid(format!(
            "item of a dtype {} tensor read as dtype {want_dtype}",
            x.dtype
        ));
    }
    if x.numel() != 1 {
        return invalid(format!("item of a tensor with {} elements", x.numel()));
    }
    let v = copy::gather_to_host(x)?;
    let n = dst.len();
    dst.copy_from_slice(v.get(..n).ok_or_else(|| Error::internal("short item"))?);
    if want_dtype == codes::BOOL {
        // A C `bool` must hold 0 or 1.
        dst[0] = u8::from(dst[0] != 0);
    }
    Ok(())
}

macro_rules! item_fns {
    ($($name:ident($ty:ty) = $dt:expr;)*) => {$(
        /// The value of a one-element tensor (waits when it is on the device).
        ///
        /// # Safety
        /// `tensor` null or live; `ret_value` null or valid for a write.
        #[no_mangle]
        pub unsafe extern "C" fn $name(tensor: AtenTensorHandle, ret_value: *mut $ty) -> AOTITorchError {
            guard::<Aoti>(stringify!($name), || {
                let mut b = [0u8; std::mem::size_of::<$ty>()];
                // SAFETY: forwarded contract.
                item_bytes(unsafe { self::tensor(tensor)? }, $dt, &mut b)?;
                if ret_value.is_null() {
                    return invalid("ret_value is null");
                }
                // SAFETY: non-null and valid per the contract; exactly size_of bytes are written.
                unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), ret_value.cast::<u8>(), b.len()) };
                Ok(())
            })
        }
    )*};
}

item_fns! {
    aoti_torch_item_float16(u16) = codes::FLOAT16;
    aoti_torch_item_bfloat16(u16) = codes::BFLOAT16;
    aoti_torch_item_float32(f32) = codes::FLOAT32;
    aoti_torch_item_float64(f64) = codes::FLOAT64;
    aoti_torch_item_uint8(u8) = codes::UINT8;
    aoti_torch_item_uint16(u16) = codes::UINT16;
    aoti_torch_item_uint32(u32) = codes::UINT32;
    aoti_torch_item_uint64(u64) = codes::UINT64;
    aoti_torch_item_int8(i8) = codes::INT8;
    aoti_torch_item_int16(i16) = codes::INT16;
    aoti_torch_item_int32(i32) = codes::INT32;
    aoti_torch_item_int64(i64) = codes::INT64;
    aoti_torch_item_bool(bool) = codes::BOOL;
    aoti_torch_item_complex64([f32; 2]) = codes::COMPLEX64;
}
