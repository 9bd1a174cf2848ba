//! The one boundary discipline of every `extern "C"` body, for both C surfaces: the
//! `et_cuda_*` API ([`crate::ffi`]) and the `aoti_torch_*` shim ABI the generated code
//! imports ([`crate::shim`]).
//!
//! One guard (`guard`, `guard_value`): panics are caught there and become failure codes
//! with the panic's message, errors become codes, and the message is kept as the thread's
//! last error; a success of a reporting function clears it. Each surface says how it
//! reports through an [`Abi`] (`ffi::EtCuda`, `shim::Aoti`, `shim::AotiDelete`). Pointers
//! from C are checked through `non_null` / `non_null_mut` / `slice_from` / `write_out` /
//! `c_str` / `dims_from_raw` only.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

#[cfg(feature = "test-hooks")]
/// Test hook (feature `test-hooks`): when set, every guarded body panics
/// inside its guard, to show that a panic becomes a failure code and never
/// crosses the boundary.
pub static FORCE_PANIC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[inline]
fn test_hook(_name: &str) {
    #[cfg(feature = "test-hooks")]
    if FORCE_PANIC.load(std::sync::atomic::Ordering::Relaxed) {
        panic!("forced panic in {_name} (test hook)");
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: &str) {
    log::debug!("{msg}");
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn clear_last_error() {
    // Most calls succeed after a success: leave an empty message alone (no allocation).
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        if !e.as_bytes().is_empty() {
            *e = CString::default();
        }
    });
}

/// This thread's last error message ("" after a successful call).
pub fn last_error_message() -> String {
    LAST_ERROR.with(|e| e.borrow().to_string_lossy().into_owned())
}

pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
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

/// How one family of C functions reports outcomes.
pub(crate) trait Abi {
    /// The C return type.
    type Out;
    /// The value for success.
    fn success() -> Self::Out;
    /// The value for a failure.
    fn failure(e: &Error) -> Self::Out;
    /// Whether failures are reported (last error + code) or only logged.
    const REPORTS: bool = true;
}

/// Run an `extern "C"` body: catch panics, map the outcome to `A`'s codes,
/// and keep or clear the thread's last error.
pub(crate) fn guard<A: Abi>(name: &str, f: impl FnOnce() -> Result<()>) -> A::Out {
    let r = match catch_unwind(AssertUnwindSafe(|| {
        test_hook(name);
        f()
    })) {
        Ok(r) => r,
        Err(p) => Err(Error::internal(format!(
            "panic: {}",
            panic_message(p.as_ref())
        ))),
    };
    match r {
        Ok(()) => {
            if A::REPORTS {
                clear_last_error();
            }
            A::success()
        }
        Err(e) => {
            let msg = format!("{name}: {e}");
            if A::REPORTS {
                set_last_error(&msg);
                crate::error::note_callback_failure(&msg);
            } else {
                log::warn!("{msg}");
            }
            A::failure(&e)
        }
    }
}

/// Run an infallible `extern "C"` body that returns a value: a panic returns
/// `fallback` (and is logged); the last error is left alone.
pub(crate) fn guard_value<T>(name: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(|| {
        test_hook(name);
        f()
    })) {
        Ok(v) => v,
        Err(p) => {
            log::error!(
                "{name}: internal error: panic: {}",
                panic_message(p.as_ref())
            );
            fallback
        }
    }
}

/// Check a C pointer argument for null and borrow it.
///
/// # Safety
/// A non-null `p` must point to a valid `T` for the returned lifetime.
pub(crate) unsafe fn non_null<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: the caller guarantees that a non-null pointer is valid.
    unsafe { p.as_ref() }.ok_or_else(|| Error::invalid_argument(format!("{what} is null")))
}

/// Mutable variant of `non_null`.
///
/// # Safety
/// A non-null `p` must point to a valid, exclusively borrowed `T`.
pub(crate) unsafe fn non_null_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: the caller guarantees that a non-null pointer is valid and unaliased.
    unsafe { p.as_mut() }.ok_or_else(|| Error::invalid_argument(format!("{what} is null")))
}

/// Write `v` through an out-pointer after checking it for null.
///
/// # Safety
/// A non-null `p` must be valid for writes of `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(Error::invalid_argument(format!("{what} is null")));
    }
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { p.write(v) };
    Ok(())
}

/// Borrow `len` elements at `p`; `len == 0` accepts a null pointer.
///
/// # Safety
/// A non-null `p` must point to `len` valid `T`s for the returned lifetime.
pub(crate) unsafe fn slice_from<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::invalid_argument(format!(
            "{what} is null but its length is {len}"
        )));
    }
    // SAFETY: non-null, and the caller guarantees `len` valid elements.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Mutable variant of `slice_from`.
///
/// # Safety
/// A non-null `p` must point to `len` valid, unaliased `T`s.
pub(crate) unsafe fn slice_from_mut<'a, T>(
    p: *mut T,
    len: usize,
    what: &str,
) -> Result<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::invalid_argument(format!(
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
pub(crate) unsafe fn c_str<'a>(
    p: *const c_char,
    what: &str,
    optional: bool,
) -> Result<Option<&'a str>> {
    if p.is_null() {
        if optional {
            return Ok(None);
        }
        return Err(Error::invalid_argument(format!("{what} is null")));
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Error::invalid_argument(format!("{what} is not valid UTF-8")))
}

/// Copy `ndim` dimension values from a C array (null allowed when `ndim == 0`).
///
/// # Safety
/// A non-null `p` must point to `ndim` readable `i64`s.
pub(crate) unsafe fn dims_from_raw(p: *const i64, ndim: i64, what: &str) -> Result<Vec<i64>> {
    let n = usize::try_from(ndim)
        .ok()
        .filter(|&n| n <= crate::tensor::MAX_RANK)
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "ndim {ndim} out of range 0..={}",
                crate::tensor::MAX_RANK
            ))
        })?;
    // SAFETY: forwarded contract.
    Ok(unsafe { slice_from(p, n, what)? }.to_vec())
}
