//! The FFI boundary. Every `extern "C"` function in this crate runs its body
//! through [`boundary`] (the shim's twin is `shim::shim`, which returns AOTI codes):
//! panics are caught there, errors become status codes, and the message is
//! kept as the thread's last error. Pointers from C are checked through
//! [`non_null`] / [`non_null_mut`] / [`slice_from`] only.
//!
//! Ownership rules, one per handle type:
//! - `EtCudaHandle*` (C API): `Box`, created by `et_cuda_init`, owned by the
//!   caller, destroyed exactly once by `et_cuda_destroy`.
//! - `AtenTensorHandle` (shim ABI): `Box<Tensor>`; whoever receives a new
//!   reference owns it and releases it with `aoti_torch_delete_tensor_object`.
//!   The storage behind it is an `Arc`, shared by views.
//! - CUDA stream / CUDA guard handles (shim ABI): `Box`, deleted by their
//!   `aoti_torch_delete_*` function.
//! - Streams inside the library: `Arc<CudaStream>`, shared by handles.
//! - Pointers returned by getters (`aoti_torch_get_sizes`, `et_cuda_last_error`)
//!   are borrowed: valid while the object lives / until the next call.

pub mod api;
/// cbindgen:ignore
pub mod shim;
/// cbindgen:ignore
pub mod shim_int4;

use crate::error::{clear_last_error, set_last_error, Error, EtCudaStatus, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

/// Test hook: when set, every boundary panics inside its panic guard, to show
/// that a panic becomes an error code and never crosses the FFI boundary.
#[doc(hidden)]
pub static FORCE_PANIC: AtomicBool = AtomicBool::new(false);

/// Panics when the test hook asks for it (called inside every panic boundary).
#[inline]
pub(crate) fn test_hook(name: &str) {
    if FORCE_PANIC.load(Ordering::Relaxed) {
        panic!("forced panic in {name} (test hook)");
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Run `f` inside a panic boundary; map the outcome to a status code.
pub fn boundary<F>(name: &str, f: F) -> EtCudaStatus
where
    F: FnOnce() -> Result<()>,
{
    match catch_unwind(AssertUnwindSafe(|| {
        test_hook(name);
        f()
    })) {
        Ok(Ok(())) => {
            clear_last_error();
            EtCudaStatus::Ok
        }
        Ok(Err(e)) => {
            set_last_error(&format!("{name}: {e}"));
            e.status()
        }
        Err(p) => {
            set_last_error(&format!(
                "{name}: internal error: panic: {}",
                panic_message(p.as_ref())
            ));
            EtCudaStatus::Internal
        }
    }
}

/// Check a C pointer argument for null and borrow it.
///
/// # Safety
/// A non-null `p` must point to a valid `T` for the returned lifetime.
pub unsafe fn non_null<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: the caller guarantees that a non-null pointer is valid.
    unsafe { p.as_ref() }.ok_or_else(|| Error::InvalidArgument(format!("{what} is null")))
}

/// Mutable variant of [`non_null`].
///
/// # Safety
/// A non-null `p` must point to a valid, exclusively borrowed `T`.
pub unsafe fn non_null_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: the caller guarantees that a non-null pointer is valid and unaliased.
    unsafe { p.as_mut() }.ok_or_else(|| Error::InvalidArgument(format!("{what} is null")))
}

/// Write `v` through an out-pointer after checking it for null.
///
/// # Safety
/// A non-null `p` must be valid for writes of `T`.
pub unsafe fn write_out<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(Error::InvalidArgument(format!("{what} is null")));
    }
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { p.write(v) };
    Ok(())
}

/// Borrow `len` elements at `p`; `len == 0` accepts a null pointer.
///
/// # Safety
/// A non-null `p` must point to `len` valid `T`s for the returned lifetime.
pub unsafe fn slice_from<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::InvalidArgument(format!(
            "{what} is null but its length is {len}"
        )));
    }
    // SAFETY: non-null, and the caller guarantees `len` valid elements.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Mutable variant of [`slice_from`].
///
/// # Safety
/// A non-null `p` must point to `len` valid, unaliased `T`s.
pub unsafe fn slice_from_mut<'a, T>(p: *mut T, len: usize, what: &str) -> Result<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::InvalidArgument(format!(
            "{what} is null but its length is {len}"
        )));
    }
    // SAFETY: non-null, and the caller guarantees `len` valid elements.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Borrow a C string argument as UTF-8 (null allowed when `optional`).
///
/// # Safety
/// A non-null `p` must point to a NUL-terminated string.
pub unsafe fn c_str<'a>(
    p: *const std::ffi::c_char,
    what: &str,
    optional: bool,
) -> Result<Option<&'a str>> {
    if p.is_null() {
        if optional {
            return Ok(None);
        }
        return Err(Error::InvalidArgument(format!("{what} is null")));
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Error::InvalidArgument(format!("{what} is not valid UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_becomes_internal_status() {
        let st = boundary("test_fn", || panic!("forced panic for the test"));
        assert_eq!(st, EtCudaStatus::Internal);
        let msg = crate::error::last_error_message();
        assert!(msg.contains("forced panic for the test"), "{msg}");
        assert!(msg.contains("test_fn"), "{msg}");
    }

    #[test]
    fn error_becomes_status_and_message() {
        let st = boundary("f", || Err(Error::InvalidArgument("x is bad".into())));
        assert_eq!(st, EtCudaStatus::InvalidArgument);
        assert!(crate::error::last_error_message().contains("x is bad"));
        assert_eq!(boundary("f", || Ok(())), EtCudaStatus::Ok);
        assert_eq!(crate::error::last_error_message(), "");
    }

    #[test]
    fn null_checks() {
        // SAFETY: null pointers are what is being tested.
        unsafe {
            assert!(non_null::<u8>(std::ptr::null(), "p").is_err());
            assert!(slice_from::<u8>(std::ptr::null(), 0, "p").is_ok());
            assert!(slice_from::<u8>(std::ptr::null(), 3, "p").is_err());
            assert!(c_str(std::ptr::null(), "s", true).unwrap().is_none());
            assert!(c_str(std::ptr::null(), "s", false).is_err());
        }
    }
}
