//! Backend options and logging from C: `et_cuda_set_option_*`,
//! `et_cuda_get_option_*`, `et_cuda_reset_options`, `et_cuda_set_log_callback`.

use super::types::*;
use super::{c_str, guard, slice_from_mut, write_out, EtCuda};
use crate::error::{invalid, Error, Result};
use crate::logging::{self, Level};
use crate::options::{self, Value};
use std::ffi::{c_char, c_void, CString};

/// The key, which must be a non-null NUL-terminated string.
///
/// # Safety
/// A non-null `key` must be NUL-terminated.
unsafe fn key<'a>(key: *const c_char) -> Result<&'a str> {
    // SAFETY: forwarded contract.
    Ok(unsafe { c_str(key, "key", false)? }.unwrap_or(""))
}

/// Set a boolean backend option. Unknown keys are ignored (`OK`); a known key of another type is
/// `INVALID_ARGUMENT`.
///
/// # Safety
/// `key` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_set_option_bool(key: *const c_char, value: bool) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_set_option_bool", || {
        // SAFETY: forwarded contract.
        options::set(unsafe { self::key(key)? }, Value::Bool(value))
    })
}

/// Set an integer backend option (see `et_cuda_set_option_bool` for the rules).
///
/// # Safety
/// `key` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_set_option_int(key: *const c_char, value: i64) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_set_option_int", || {
        // SAFETY: forwarded contract.
        options::set(unsafe { self::key(key)? }, Value::Int(value))
    })
}

/// Set a string backend option (see `et_cuda_set_option_bool` for the rules).
///
/// # Safety
/// `key` and `value` must each be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_set_option_str(
    key: *const c_char,
    value: *const c_char,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_set_option_str", || {
        // SAFETY: forwarded contract.
        let (k, v) = unsafe { (self::key(key)?, c_str(value, "value", false)?.unwrap_or("")) };
        options::set(k, Value::Str(v.to_string()))
    })
}

fn wrong_type(key: &str, v: &Value) -> Error {
    let t = match v {
        Value::Bool(_) => "a bool",
        Value::Int(_) => "an int",
        Value::Str(_) => "a string",
    };
    Error::invalid_argument(format!("option {key} is {t}"))
}

/// Read a boolean option. `UNKNOWN_OPTION` for keys this backend does not know.
///
/// # Safety
/// `key` must be null or a NUL-terminated string; `out` null or valid for a write of a `bool`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_get_option_bool(
    key: *const c_char,
    out: *mut bool,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_get_option_bool", || {
        // SAFETY: forwarded contract.
        let k = unsafe { self::key(key)? };
        match options::get(k)? {
            // SAFETY: null-checked; valid per the contract.
            Value::Bool(b) => unsafe { write_out(out, b, "out") },
            v => Err(wrong_type(k, &v)),
        }
    })
}

/// Read an integer option. `UNKNOWN_OPTION` for keys this backend does not know.
///
/// # Safety
/// `key` must be null or a NUL-terminated string; `out` null or valid for a write of an `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_get_option_int(key: *const c_char, out: *mut i64) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_get_option_int", || {
        // SAFETY: forwarded contract.
        let k = unsafe { self::key(key)? };
        match options::get(k)? {
            // SAFETY: null-checked; valid per the contract.
            Value::Int(i) => unsafe { write_out(out, i, "out") },
            v => Err(wrong_type(k, &v)),
        }
    })
}

/// Read a string option into `buf` (NUL-terminated, truncated to `buf_len - 1` bytes).
/// `UNKNOWN_OPTION` for keys this backend does not know.
///
/// # Safety
/// `key` must be null or a NUL-terminated string; `buf` null or valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_get_option_str(
    key: *const c_char,
    buf: *mut c_char,
    buf_len: usize,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_get_option_str", || {
        // SAFETY: forwarded contract.
        let k = unsafe { self::key(key)? };
        let v = match options::get(k)? {
            Value::Str(s) => s,
            v => return Err(wrong_type(k, &v)),
        };
        if buf_len == 0 {
            return invalid("buf_len is 0");
        }
        // SAFETY: `buf` has `buf_len` writable bytes per the contract (null-checked).
        let dst = unsafe { slice_from_mut(buf.cast::<u8>(), buf_len, "buf")? };
        let n = v.len().min(buf_len - 1);
        dst[..n].copy_from_slice(&v.as_bytes()[..n]);
        dst[n] = 0;
        Ok(())
    })
}

/// Reset every backend option to its default.
#[no_mangle]
pub extern "C" fn et_cuda_reset_options() -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_reset_options", || {
        options::reset();
        Ok(())
    })
}

/// A C callback and its user pointer.
struct CallbackSink {
    f: unsafe extern "C" fn(EtCudaLogLevel, *const c_char, *mut c_void),
    user: usize,
}

impl CallbackSink {
    fn call(&self, level: Level, msg: &str) {
        let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
        // SAFETY: the host registered `f` to be called with a NUL-terminated message valid during
        // the call and its own user pointer (et_cuda_set_log_callback's contract).
        unsafe {
            (self.f)(
                level as EtCudaLogLevel,
                c.as_ptr(),
                self.user as *mut c_void,
            )
        };
    }
}

/// Send the library's log records (its warnings, and the generated code's `aoti_torch_warn`) at
/// `max_level` (`ET_CUDA_LOG_*`) and more severe to `callback`; a null callback sends warnings and
/// errors to stderr again (the default). A callback may call the library, this function
/// included; records logged while it runs go to stderr. It never runs while the library holds
/// a lock: records logged under one are kept (up to 256 a thread) and delivered once the lock
/// is released. Once this function returns, the
/// replaced callback is not running on any thread and is not called again (its `user` may be
/// freed).
///
/// # Safety
/// `callback`, when not null, must stay callable with `user` from any thread until replaced.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_set_log_callback(
    callback: EtCudaLogCallback,
    user: *mut c_void,
    max_level: EtCudaLogLevel,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_set_log_callback", || {
        let level = Level::from_code(max_level).ok_or_else(|| {
            Error::invalid_argument(format!(
                "log level {max_level} is not one of 1 (error) .. 5 (trace)"
            ))
        })?;
        let sink: Option<logging::Sink> = callback.map(|f| {
            let s = CallbackSink {
                f,
                user: user as usize,
            };
            Box::new(move |l: Level, m: &str| s.call(l, m)) as logging::Sink
        });
        logging::set_sink(sink, level);
        Ok(())
    })
}
