//! The AOTI C shim ABI (`aoti_torch_*`), with the exact signatures of
//! PyTorch 2.11's `torch/csrc/inductor/aoti_torch/c/shim.h`, that an
//! AOTInductor `.so` compiled with `link_libtorch=False` imports.
//!
//! Error-returning functions return `AOTI_TORCH_SUCCESS` (0) or
//! `AOTI_TORCH_FAILURE` (1), never unwind, and keep the reason as the
//! thread's last error. The delete functions that run inside the `.so`'s
//! destructors (tensor, CUDA guard, CUDA stream guard) log problems and
//! always return success: a failure there becomes `std::terminate`.
//!
//! Ownership: an `AtenTensorHandle` is a `Box<Tensor>`; every function that
//! "returns a new reference" hands out a new box that the receiver deletes
//! with `aoti_torch_delete_tensor_object`. Guard handles are boxes deleted by
//! their delete function. Returned sizes/strides pointers are borrowed from
//! the tensor and valid while it lives.
#![allow(clippy::missing_safety_doc)]

use super::non_null;
use crate::cuda::{self, memory, stream::StreamScope, ContextGuard};
use crate::error::{invalid, set_last_error, Error, Result};
use crate::tensor::{self, dims_from_raw, dtype, Device, Tensor};
use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub type AOTITorchError = i32;
pub const AOTI_TORCH_SUCCESS: AOTITorchError = 0;
pub const AOTI_TORCH_FAILURE: AOTITorchError = 1;

/// `AtenTensorHandle`: a boxed [`Tensor`].
pub type AtenTensorHandle = *mut Tensor;

/// Run a shim body: errors and panics become `AOTI_TORCH_FAILURE` plus the thread's last error.
fn shim<F: FnOnce() -> Result<()>>(name: &str, f: F) -> AOTITorchError {
    match catch_unwind(AssertUnwindSafe(|| {
        super::test_hook(name);
        f()
    })) {
        Ok(Ok(())) => AOTI_TORCH_SUCCESS,
        Ok(Err(e)) => {
            set_last_error(&format!("{name}: {e}"));
            AOTI_TORCH_FAILURE
        }
        Err(_) => {
            set_last_error(&format!("{name}: internal error: panic"));
            AOTI_TORCH_FAILURE
        }
    }
}

/// Borrow the tensor behind a handle.
unsafe fn t<'a>(h: AtenTensorHandle) -> Result<&'a Tensor> {
    // SAFETY: a non-null handle is a live Box<Tensor> handed out by this module.
    unsafe { non_null(h.cast_const(), "tensor handle") }
}

/// Hand a new tensor to the caller through `ret`.
unsafe fn give(ret: *mut AtenTensorHandle, tensor: Tensor) -> Result<()> {
    if ret.is_null() {
        return invalid("ret_new_tensor is null");
    }
    // SAFETY: checked non-null; the caller owns the new box.
    unsafe { ret.write(Box::into_raw(Box::new(tensor))) };
    Ok(())
}

unsafe fn out<T>(p: *mut T, v: T) -> Result<()> {
    // SAFETY: forwarded; null-checked by write_out.
    unsafe { super::write_out(p, v, "return pointer") }
}

// ---------------------------------------------------------------- constants

macro_rules! const_fns {
    ($($name:ident = $v:expr;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> i32 { $v }
    )*};
}

const_fns! {
    aoti_torch_device_type_cpu = tensor::device_type::CPU;
    aoti_torch_device_type_cuda = tensor::device_type::CUDA;
    aoti_torch_device_type_meta = tensor::device_type::META;
    aoti_torch_device_type_xpu = tensor::device_type::XPU;
    aoti_torch_device_type_mps = tensor::device_type::MPS;
    aoti_torch_device_type_privateuse1 = tensor::device_type::PRIVATEUSE1;
    aoti_torch_dtype_float8_e5m2 = dtype::FLOAT8_E5M2;
    aoti_torch_dtype_float8_e4m3fn = dtype::FLOAT8_E4M3FN;
    aoti_torch_dtype_float8_e5m2fnuz = dtype::FLOAT8_E5M2FNUZ;
    aoti_torch_dtype_float8_e4m3fnuz = dtype::FLOAT8_E4M3FNUZ;
    aoti_torch_dtype_bfloat16 = dtype::BFLOAT16;
    aoti_torch_dtype_float16 = dtype::FLOAT16;
    aoti_torch_dtype_float32 = dtype::FLOAT32;
    aoti_torch_dtype_float64 = dtype::FLOAT64;
    aoti_torch_dtype_uint8 = dtype::UINT8;
    aoti_torch_dtype_uint16 = dtype::UINT16;
    aoti_torch_dtype_uint32 = dtype::UINT32;
    aoti_torch_dtype_uint64 = dtype::UINT64;
    aoti_torch_dtype_int8 = dtype::INT8;
    aoti_torch_dtype_int16 = dtype::INT16;
    aoti_torch_dtype_int32 = dtype::INT32;
    aoti_torch_dtype_int64 = dtype::INT64;
    aoti_torch_dtype_bool = dtype::BOOL;
    aoti_torch_dtype_complex32 = dtype::COMPLEX32;
    aoti_torch_dtype_complex64 = dtype::COMPLEX64;
    aoti_torch_dtype_complex128 = dtype::COMPLEX128;
    aoti_torch_layout_strided = 0;
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

/// Bytes per element; 0 for an unknown dtype.
#[no_mangle]
pub extern "C" fn aoti_torch_dtype_element_size(dtype: i32) -> usize {
    tensor::element_size(dtype).unwrap_or(0)
}

/// The TORCH_ABI_VERSION this shim implements (PyTorch 2.11).
#[no_mangle]
pub extern "C" fn aoti_torch_abi_version() -> u64 {
    // major << 56 | minor << 48, as torch/headeronly/version.h encodes it.
    (2u64 << 56) | (11u64 << 48)
}

thread_local! {
    static GRAD_MODE: Cell<bool> = const { Cell::new(false) };
}

/// Inference only: grad mode is off unless the `.so` turned it on.
#[no_mangle]
pub extern "C" fn aoti_torch_grad_mode_is_enabled() -> bool {
    GRAD_MODE.with(|g| g.get())
}

#[no_mangle]
pub extern "C" fn aoti_torch_grad_mode_set_enabled(enabled: bool) {
    GRAD_MODE.with(|g| g.set(enabled))
}

// ------------------------------------------------------------ tensor lifetime

/// Delete a tensor handle. Runs in the `.so`'s destructors: always returns success.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_tensor_object(
    tensor: AtenTensorHandle,
) -> AOTITorchError {
    if tensor.is_null() {
        log::warn!("aoti_torch_delete_tensor_object: null handle ignored");
        return AOTI_TORCH_SUCCESS;
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the handle is a Box<Tensor> from this module, deleted once by its owner.
        drop(unsafe { Box::from_raw(tensor) });
    }));
    if r.is_err() {
        log::error!("aoti_torch_delete_tensor_object: panic while freeing a tensor");
    }
    AOTI_TORCH_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_new_tensor_handle(
    orig_handle: AtenTensorHandle,
    new_handle: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_new_tensor_handle", || unsafe {
        let src = t(orig_handle)?.clone();
        give(new_handle, src)
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_new_uninitialized_tensor(
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_new_uninitialized_tensor", || unsafe {
        give(
            ret,
            Tensor::empty_strided(vec![0], vec![1], dtype::FLOAT32, Device::Cpu)?,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_assign_tensors(
    src: AtenTensorHandle,
    dst: AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_assign_tensors", || unsafe {
        let s = t(src)?.clone();
        if dst.is_null() {
            return invalid("dst is null");
        }
        *dst = s;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_assign_tensors_out(
    src: AtenTensorHandle,
    ret_dst: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_assign_tensors_out", || unsafe {
        let s = t(src)?.clone();
        give(ret_dst, s)
    })
}

// ----------------------------------------------------------------- getters

/// Getters that read one field of a tensor into an out-pointer.
macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident($ty:ty) = |$x:ident| $e:expr;)*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(tensor: AtenTensorHandle, ret: *mut $ty) -> AOTITorchError {
            shim(stringify!($name), || unsafe {
                let $x = t(tensor)?;
                out(ret, $e)
            })
        }
    )*};
}

getters! {
    aoti_torch_get_data_ptr(*mut c_void) = |x| x.data_ptr();
    aoti_torch_get_mutable_data_ptr(*mut c_void) = |x| x.data_ptr();
    aoti_torch_get_const_data_ptr(*const c_void) = |x| x.data_ptr().cast_const();
    /// Bytes of the underlying storage.
    aoti_torch_get_storage_size(i64) = |x| x.storage.nbytes as i64;
    aoti_torch_get_storage_numel(i64) = |x| (x.storage.nbytes / x.element_size()) as i64;
    aoti_torch_get_dim(i64) = |x| x.sizes.len() as i64;
    aoti_torch_get_numel(i64) = |x| x.numel();
    /// Borrowed pointer to the sizes, valid while the tensor lives.
    aoti_torch_get_sizes(*mut i64) = |x| x.sizes.as_ptr().cast_mut();
    /// Borrowed pointer to the strides, valid while the tensor lives.
    aoti_torch_get_strides(*mut i64) = |x| x.strides.as_ptr().cast_mut();
    aoti_torch_get_dtype(i32) = |x| x.dtype;
    aoti_torch_get_device_type(i32) = |x| x.device().type_code();
    aoti_torch_get_device_index(i32) = |x| x.device().index();
    aoti_torch_get_layout(i32) = |_x| 0;
    aoti_torch_get_storage_offset(i64) = |x| x.storage_offset;
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

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_size(
    tensor: AtenTensorHandle,
    d: i64,
    ret_size: *mut i64,
) -> AOTITorchError {
    shim("aoti_torch_get_size", || unsafe {
        let x = t(tensor)?;
        out(ret_size, x.sizes[dim_index(x, d)?])
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_stride(
    tensor: AtenTensorHandle,
    d: i64,
    ret_stride: *mut i64,
) -> AOTITorchError {
    shim("aoti_torch_get_stride", || unsafe {
        let x = t(tensor)?;
        out(ret_stride, x.strides[dim_index(x, d)?])
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_is_defined(
    tensor: AtenTensorHandle,
    ret_is_defined: *mut bool,
) -> AOTITorchError {
    shim("aoti_torch_is_defined", || unsafe {
        out(ret_is_defined, !tensor.is_null())
    })
}

// ------------------------------------------------------------- creation

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
    shim("aoti_torch_empty_strided", || unsafe {
        let sizes = dims_from_raw(sizes_ptr, ndim, "sizes_ptr")?;
        let strides = if strides_ptr.is_null() {
            tensor::contiguous_strides(&sizes)
        } else {
            dims_from_raw(strides_ptr, ndim, "strides_ptr")?
        };
        let dev = Device::from_codes(device_type, device_index)?;
        give(
            ret_new_tensor,
            Tensor::empty_strided(sizes, strides, dtype, dev)?,
        )
    })
}

/// Pinned CPU memory is not needed by inference code: this gives ordinary host memory.
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
    // SAFETY: same contract as empty_strided.
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

#[allow(clippy::too_many_arguments)] // mirrors the C signature
unsafe fn from_blob(
    data: *mut c_void,
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    storage_offset: i64,
    dtype: i32,
    device_type: i32,
    device_index: i32,
) -> Result<Tensor> {
    // SAFETY: forwarded array contracts.
    let sizes = unsafe { dims_from_raw(sizes_ptr, ndim, "sizes_ptr")? };
    let strides = if strides_ptr.is_null() {
        tensor::contiguous_strides(&sizes)
    } else {
        // SAFETY: as above.
        unsafe { dims_from_raw(strides_ptr, ndim, "strides_ptr")? }
    };
    let dev = Device::from_codes(device_type, device_index)?;
    Tensor::borrowed(data, dtype, sizes, strides, storage_offset, dev)
}

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
    shim("aoti_torch_create_tensor_from_blob", || unsafe {
        let x = from_blob(
            data,
            ndim,
            sizes_ptr,
            strides_ptr,
            storage_offset,
            dtype,
            device_type,
            device_index,
        )?;
        give(ret, x)
    })
}

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
    let rc = shim("aoti_torch_create_tensor_from_blob_v2", || {
        if layout != 0 {
            return invalid(format!(
                "layout {layout} is not supported (only strided, 0)"
            ));
        }
        if opaque_metadata_size != 0 {
            return invalid("opaque metadata (MKLDNN tensors) is not supported");
        }
        Ok(())
    });
    if rc != AOTI_TORCH_SUCCESS {
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
#[no_mangle]
pub unsafe extern "C" fn aoti_torch__reinterpret_tensor(
    self_: AtenTensorHandle,
    ndim: i64,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    offset_increment: i64,
    ret_new_tensor: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch__reinterpret_tensor", || unsafe {
        let x = t(self_)?;
        let sizes = dims_from_raw(sizes_ptr, ndim, "sizes_ptr")?;
        let strides = dims_from_raw(strides_ptr, ndim, "strides_ptr")?;
        let off = x
            .storage_offset
            .checked_add(offset_increment)
            .ok_or_else(|| Error::InvalidArgument("storage offset overflows".into()))?;
        give(
            ret_new_tensor,
            Tensor::view(x.storage.clone(), x.dtype, sizes, strides, off)?,
        )
    })
}

/// A view of `self_`'s storage at `offset_bytes`, with another dtype and shape.
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
    shim("aoti_torch__alloc_from_pool", || unsafe {
        let x = t(self_)?;
        let elem = tensor::checked_element_size(dtype)? as i64;
        let base = x.storage_offset * x.element_size() as i64;
        let total = base
            .checked_add(offset_bytes)
            .filter(|b| *b >= 0)
            .ok_or_else(|| Error::InvalidArgument(format!("offset {offset_bytes} out of range")))?;
        if total % elem != 0 {
            return invalid(format!(
                "offset {total} bytes is not a multiple of the element size {elem}"
            ));
        }
        let sizes = dims_from_raw(sizes_ptr, ndim, "sizes_ptr")?;
        let strides = dims_from_raw(strides_ptr, ndim, "strides_ptr")?;
        give(
            ret_new_tensor,
            Tensor::view(x.storage.clone(), dtype, sizes, strides, total / elem)?,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_as_strided(
    self_: AtenTensorHandle,
    sizes_ptr: *const i64,
    strides_ptr: *const i64,
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_as_strided", || unsafe {
        let x = t(self_)?;
        let n = x.sizes.len() as i64;
        let sizes = dims_from_raw(sizes_ptr, n, "sizes_ptr")?;
        let strides = dims_from_raw(strides_ptr, n, "strides_ptr")?;
        give(
            ret,
            Tensor::view(x.storage.clone(), x.dtype, sizes, strides, x.storage_offset)?,
        )
    })
}

macro_rules! scalar_to_tensor {
    ($($name:ident($ty:ty) = $dt:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(value: $ty, ret_new_tensor: *mut AtenTensorHandle) -> AOTITorchError {
            shim(stringify!($name), || unsafe {
                let x = Tensor::empty_strided(vec![], vec![], $dt, Device::Cpu)?;
                x.data_ptr().cast::<$ty>().write_unaligned(value);
                give(ret_new_tensor, x)
            })
        }
    )*};
}

scalar_to_tensor! {
    aoti_torch_scalar_to_tensor_float32(f32) = dtype::FLOAT32;
    aoti_torch_scalar_to_tensor_float64(f64) = dtype::FLOAT64;
    aoti_torch_scalar_to_tensor_uint8(u8) = dtype::UINT8;
    aoti_torch_scalar_to_tensor_uint16(u16) = dtype::UINT16;
    aoti_torch_scalar_to_tensor_uint32(u32) = dtype::UINT32;
    aoti_torch_scalar_to_tensor_uint64(u64) = dtype::UINT64;
    aoti_torch_scalar_to_tensor_int8(i8) = dtype::INT8;
    aoti_torch_scalar_to_tensor_int16(i16) = dtype::INT16;
    aoti_torch_scalar_to_tensor_int32(i32) = dtype::INT32;
    aoti_torch_scalar_to_tensor_int64(i64) = dtype::INT64;
    aoti_torch_scalar_to_tensor_bool(bool) = dtype::BOOL;
}

// ------------------------------------------------------------------ copies

/// A zeroed host buffer of `n` bytes; an allocation failure is an error, not an abort.
fn host_buffer(n: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::OutOfMemory(format!("host buffer of {n} bytes")))?;
    v.resize(n, 0);
    Ok(v)
}

/// Read the bytes of a contiguous span `[off, off + n)` of a storage into host memory.
fn read_span(x: &Tensor, byte_off: usize, n: usize, dst: &mut [u8]) -> Result<()> {
    let base = x.storage.base_ptr();
    if n == 0 {
        return Ok(());
    }
    if byte_off + n > x.storage.nbytes || dst.len() < n {
        return invalid("span out of range of the storage");
    }
    match x.device() {
        // SAFETY: the span lies inside the storage (checked above).
        Device::Cpu => unsafe {
            std::ptr::copy_nonoverlapping(base.cast::<u8>().add(byte_off), dst.as_mut_ptr(), n)
        },
        Device::Cuda(i) => {
            let d = cuda::device(i)?;
            let _g = ContextGuard::device(&d)?;
            let s = cuda::stream::current(i).raw;
            // SAFETY: device span inside the storage; dst is host memory of n bytes; we wait below.
            unsafe {
                memory::copy_dtoh_async(
                    dst.as_mut_ptr().cast(),
                    base as u64 + byte_off as u64,
                    n,
                    s,
                )?;
            }
            sync_stream(s)?;
        }
    }
    Ok(())
}

/// Write host bytes into a contiguous span of a storage (ordered on the current stream).
fn write_span(x: &Tensor, byte_off: usize, src: &[u8]) -> Result<()> {
    let base = x.storage.base_ptr();
    let n = src.len();
    if n == 0 {
        return Ok(());
    }
    if byte_off + n > x.storage.nbytes {
        return invalid("span out of range of the storage");
    }
    match x.device() {
        // SAFETY: the span lies inside the storage (checked above).
        Device::Cpu => unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), base.cast::<u8>().add(byte_off), n)
        },
        Device::Cuda(i) => {
            let d = cuda::device(i)?;
            let _g = ContextGuard::device(&d)?;
            let s = cuda::stream::current(i).raw;
            // SAFETY: device span inside the storage. A pageable source makes the driver
            // stage it before returning, so `src` may be dropped afterwards.
            unsafe {
                memory::copy_htod_async(base as u64 + byte_off as u64, src.as_ptr().cast(), n, s)?
            };
            // The pageable staging copy finishes before return, but wait for the DMA so
            // that a later host read of a neighbouring span sees it.
            sync_stream(s)?;
        }
    }
    Ok(())
}

fn sync_stream(s: cudarc::driver::sys::CUstream) -> Result<()> {
    crate::stats::record(crate::stats::Event::HostWait);
    // SAFETY: the current stream of this thread (or the legacy stream).
    cuda::check(
        unsafe { cudarc::driver::sys::cuStreamSynchronize(s) },
        "cuStreamSynchronize",
    )
}

/// Byte range `[start, end)` of the storage a view touches.
fn span_of(x: &Tensor) -> Result<(usize, usize)> {
    let elem = x.element_size();
    let end = tensor::required_bytes(&x.sizes, &x.strides, x.storage_offset, elem)?;
    if end == 0 {
        return Ok((0, 0));
    }
    Ok((x.storage_offset as usize * elem, end))
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
fn gather_to_host(x: &Tensor) -> Result<Vec<u8>> {
    let (start, end) = span_of(x)?;
    let mut span = host_buffer(end - start)?;
    read_span(x, start, end - start, &mut span)?;
    if x.is_contiguous() {
        return Ok(span);
    }
    let elem = x.element_size();
    let mut outv = host_buffer(x.nbytes())?;
    outv.clear();
    for_each_offset(x, |o| {
        outv.extend_from_slice(&span[o - start..o - start + elem])
    });
    Ok(outv)
}

/// Store contiguous host bytes into the elements of `x`.
fn scatter_from_host(x: &Tensor, data: &[u8]) -> Result<()> {
    let (start, end) = span_of(x)?;
    if x.is_contiguous() {
        return write_span(x, start, &data[..end - start]);
    }
    let mut span = host_buffer(end - start)?;
    read_span(x, start, end - start, &mut span)?;
    let elem = x.element_size();
    let mut i = 0usize;
    for_each_offset(x, |o| {
        span[o - start..o - start + elem].copy_from_slice(&data[i..i + elem]);
        i += elem;
    });
    write_span(x, start, &span)
}

/// Copy `src` into `dst` (same dtype and sizes, any devices and strides).
/// Contiguous device-to-device copies are one stream-ordered copy with no
/// wait; copies that end in host memory wait once; other layouts go through
/// a host buffer.
pub fn copy_tensor(dst: &Tensor, src: &Tensor) -> Result<()> {
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
                let d = cuda::device(i)?;
                let _g = ContextGuard::device(&d)?;
                let s = cuda::stream::current(i).raw;
                // SAFETY: device ranges validated against their storages.
                unsafe { memory::copy_dtod_async(dp as u64, sp as u64, n, s)? };
            }
            (Device::Cuda(_), Device::Cpu) => {
                // SAFETY: `sp` is host memory of n bytes (validated view).
                let host = unsafe { std::slice::from_raw_parts(sp.cast::<u8>(), n) };
                let (start, _) = span_of(dst)?;
                write_span(dst, start, host)?;
            }
            (Device::Cpu, Device::Cuda(_)) => {
                // SAFETY: `dp` is host memory of n bytes (validated view).
                let host = unsafe { std::slice::from_raw_parts_mut(dp.cast::<u8>(), n) };
                let (start, _) = span_of(src)?;
                read_span(src, start, n, host)?;
            }
        }
        return Ok(());
    }
    let data = gather_to_host(src)?;
    scatter_from_host(dst, &data)
}

/// A contiguous copy of `x` on its device.
pub fn clone_contiguous(x: &Tensor) -> Result<Tensor> {
    let y = Tensor::empty_strided(
        x.sizes.clone(),
        tensor::contiguous_strides(&x.sizes),
        x.dtype,
        x.device(),
    )?;
    copy_tensor(&y, x)?;
    Ok(y)
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_copy_(
    self_: AtenTensorHandle,
    src: AtenTensorHandle,
    _non_blocking: i32,
) -> AOTITorchError {
    shim("aoti_torch_copy_", || unsafe {
        copy_tensor(t(self_)?, t(src)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_tensor_copy_(
    src: AtenTensorHandle,
    dst: AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_tensor_copy_", || unsafe {
        copy_tensor(t(dst)?, t(src)?)
    })
}

/// A contiguous copy of `self_` on its device.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_clone(
    self_: AtenTensorHandle,
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_clone", || unsafe {
        give(ret, clone_contiguous(t(self_)?)?)
    })
}

/// A copy of `self_` with the same strides (the whole strided span is copied).
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_clone_preserve_strides(
    self_: AtenTensorHandle,
    ret: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_clone_preserve_strides", || unsafe {
        let x = t(self_)?;
        let y = Tensor::empty_strided(x.sizes.clone(), x.strides.clone(), x.dtype, x.device())?;
        copy_tensor(&y, x)?;
        give(ret, y)
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_zero_(self_: AtenTensorHandle) -> AOTITorchError {
    shim("aoti_torch_zero_", || unsafe {
        let x = t(self_)?;
        // Zero every byte the view touches (its span holds at most the storage's bytes,
        // also for views that repeat elements).
        let (start, end) = span_of(x)?;
        if x.is_contiguous() {
            return write_span(x, start, &host_buffer(end - start)?);
        }
        let mut span = host_buffer(end - start)?;
        read_span(x, start, end - start, &mut span)?;
        let elem = x.element_size();
        for_each_offset(x, |o| span[o - start..o - start + elem].fill(0));
        write_span(x, start, &span)
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
    let v = gather_to_host(x)?;
    dst.copy_from_slice(&v[..dst.len()]);
    Ok(())
}

macro_rules! item_fns {
    ($($name:ident($ty:ty) = $dt:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(tensor: AtenTensorHandle, ret_value: *mut $ty) -> AOTITorchError {
            shim(stringify!($name), || unsafe {
                let mut b = [0u8; std::mem::size_of::<$ty>()];
                item_bytes(t(tensor)?, $dt, &mut b)?;
                if ret_value.is_null() { return invalid("ret_value is null"); }
                std::ptr::copy_nonoverlapping(b.as_ptr(), ret_value.cast::<u8>(), b.len());
                Ok(())
            })
        }
    )*};
}

item_fns! {
    aoti_torch_item_float16(u16) = dtype::FLOAT16;
    aoti_torch_item_bfloat16(u16) = dtype::BFLOAT16;
    aoti_torch_item_float32(f32) = dtype::FLOAT32;
    aoti_torch_item_float64(f64) = dtype::FLOAT64;
    aoti_torch_item_uint8(u8) = dtype::UINT8;
    aoti_torch_item_uint16(u16) = dtype::UINT16;
    aoti_torch_item_uint32(u32) = dtype::UINT32;
    aoti_torch_item_uint64(u64) = dtype::UINT64;
    aoti_torch_item_int8(i8) = dtype::INT8;
    aoti_torch_item_int16(i16) = dtype::INT16;
    aoti_torch_item_int32(i32) = dtype::INT32;
    aoti_torch_item_int64(i64) = dtype::INT64;
    aoti_torch_item_bool(bool) = dtype::BOOL;
    aoti_torch_item_complex64([f32; 2]) = dtype::COMPLEX64;
}

// ------------------------------------------------------- devices and streams

/// `CUDAGuardHandle`: makes a device's primary context current; deleting it
/// restores the context that was current when it was created.
pub struct CudaGuard {
    prev: Option<cudarc::driver::sys::CUcontext>,
    device_index: i32,
}

/// `CUDAStreamGuardHandle`: the stream is this thread's current stream for its device (and the
/// device's context is current) until deleted.
pub struct CudaStreamGuard {
    _scope: StreamScope,
    _ctx: ContextGuard,
}

fn set_device(device_index: i32) -> Result<()> {
    if device_index < 0 {
        return Ok(());
    }
    let d = cuda::device(device_index)?;
    // SAFETY: a retained primary context.
    unsafe { cudarc::driver::result::ctx::set_current(d.ctx) }
        .map_err(|e| cuda::driver_error(e, "cuCtxSetCurrent"))
}

impl Drop for CudaGuard {
    fn drop(&mut self) {
        let prev = self.prev.unwrap_or(std::ptr::null_mut());
        // SAFETY: restoring the context that was current at creation (or none).
        if let Err(e) = unsafe { cudarc::driver::result::ctx::set_current(prev) } {
            log::warn!("CUDA guard could not restore the context: {e:?}");
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_cuda_guard(
    device_index: i32,
    ret_guard: *mut *mut CudaGuard,
) -> AOTITorchError {
    shim("aoti_torch_create_cuda_guard", || unsafe {
        cuda::driver()?;
        let prev = cudarc::driver::result::ctx::get_current()
            .map_err(|e| cuda::driver_error(e, "cuCtxGetCurrent"))?;
        set_device(device_index)?;
        out(
            ret_guard,
            Box::into_raw(Box::new(CudaGuard { prev, device_index })),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_guard_set_index(
    guard: *mut CudaGuard,
    device_index: i32,
) -> AOTITorchError {
    shim("aoti_torch_cuda_guard_set_index", || unsafe {
        let g = super::non_null_mut(guard, "guard")?;
        if g.device_index != device_index {
            set_device(device_index)?;
            g.device_index = device_index;
        }
        Ok(())
    })
}

/// Runs in the `.so`'s destructors: always returns success.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_cuda_guard(guard: *mut CudaGuard) -> AOTITorchError {
    if !guard.is_null() {
        // SAFETY: a box from aoti_torch_create_cuda_guard, deleted once.
        let r = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(guard) })));
        if r.is_err() {
            log::error!("aoti_torch_delete_cuda_guard: panic");
        }
    }
    AOTI_TORCH_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_cuda_stream_guard(
    stream: *mut c_void,
    device_index: i32,
    ret_guard: *mut *mut CudaStreamGuard,
) -> AOTITorchError {
    shim("aoti_torch_create_cuda_stream_guard", || unsafe {
        let dev = if device_index < 0 {
            cuda::current_device_ordinal()
        } else {
            device_index
        };
        let d = cuda::device(dev)?;
        let ctx = ContextGuard::device(&d)?;
        let scope = StreamScope::enter(dev, stream.cast(), None);
        let g = CudaStreamGuard {
            _scope: scope,
            _ctx: ctx,
        };
        out(ret_guard, Box::into_raw(Box::new(g)))
    })
}

/// Runs in the `.so`'s destructors: always returns success.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_cuda_stream_guard(
    guard: *mut CudaStreamGuard,
) -> AOTITorchError {
    if !guard.is_null() {
        // SAFETY: a box from aoti_torch_create_cuda_stream_guard, deleted once.
        let r = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(guard) })));
        if r.is_err() {
            log::error!("aoti_torch_delete_cuda_stream_guard: panic");
        }
    }
    AOTI_TORCH_SUCCESS
}

/// This thread's current stream for the device (set by stream guards and by execute).
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_current_cuda_stream(
    device_index: i32,
    ret_stream: *mut *mut c_void,
) -> AOTITorchError {
    shim("aoti_torch_get_current_cuda_stream", || unsafe {
        let dev = if device_index < 0 {
            cuda::current_device_ordinal()
        } else {
            device_index
        };
        out(ret_stream, cuda::stream::current(dev).raw.cast())
    })
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_get_current_device_index(
    ret_device_index: *mut i32,
) -> AOTITorchError {
    shim("aoti_torch_get_current_device_index", || unsafe {
        out(ret_device_index, cuda::current_device_ordinal())
    })
}

/// Device-generic guard: the same as the CUDA guard here.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_create_device_guard(
    device_index: i32,
    ret_guard: *mut *mut CudaGuard,
) -> AOTITorchError {
    // SAFETY: same contract.
    unsafe { aoti_torch_create_cuda_guard(device_index, ret_guard) }
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_device_guard_set_index(
    guard: *mut CudaGuard,
    device_index: i32,
) -> AOTITorchError {
    // SAFETY: same contract.
    unsafe { aoti_torch_cuda_guard_set_index(guard, device_index) }
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_delete_device_guard(guard: *mut CudaGuard) -> AOTITorchError {
    // SAFETY: same contract.
    unsafe { aoti_torch_delete_cuda_guard(guard) }
}

// ------------------------------------------------------------- diagnostics

unsafe fn lossy(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: NUL-terminated per the shim's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_warn(
    func: *const c_char,
    file: *const c_char,
    line: u32,
    msg: *const c_char,
) {
    let _ = catch_unwind(|| {
        // SAFETY: C strings from the `.so`, possibly null.
        let (f, fl, m) = unsafe { (lossy(func), lossy(file), lossy(msg)) };
        log::warn!("{fl}:{line} {f}: {m}");
    });
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_print_tensor_handle(
    self_: AtenTensorHandle,
    msg: *const c_char,
) {
    let _ = catch_unwind(|| {
        // SAFETY: handle and string from the `.so`, possibly null.
        let (m, x) = unsafe { (lossy(msg), self_.as_ref()) };
        match x {
            Some(x) => log::info!(
                "{m}: dtype {} sizes {:?} strides {:?} device {:?}",
                x.dtype,
                x.sizes,
                x.strides,
                x.device()
            ),
            None => log::info!("{m}: null tensor"),
        }
    });
}

#[no_mangle]
pub unsafe extern "C" fn aoti_torch_proxy_executor_call_function(
    _proxy_executor: *mut c_void,
    extern_node_index: i32,
    _num_ints: i32,
    _flatten_int_args: *mut i64,
    _num_tensors: i32,
    _flatten_tensor_args: *mut AtenTensorHandle,
) -> AOTITorchError {
    shim("aoti_torch_proxy_executor_call_function", || {
        Err(Error::ExecutionFailed(format!(
            "extern node {extern_node_index} needs a proxy executor (custom ops), which this backend does not provide"
        )))
    })
}
