//! Diagnostics from the generated code, and what this backend does not provide.

use super::Aoti;
use super::{AOTITorchError, AtenTensorHandle};
use crate::boundary::{guard, guard_value};
use crate::error::Error;
use std::ffi::{c_char, CStr};

/// A C string, lossily, or "" for null.
///
/// # Safety
/// A non-null `p` must be NUL-terminated.
unsafe fn lossy(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: NUL-terminated per the contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A warning from the generated code: logged (it reaches the host's log callback).
///
/// # Safety
/// Each string must be null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_warn(
    func: *const c_char,
    file: *const c_char,
    line: u32,
    msg: *const c_char,
) {
    guard_value("aoti_torch_warn", (), || {
        // SAFETY: forwarded contract.
        let (f, fl, m) = unsafe { (lossy(func), lossy(file), lossy(msg)) };
        log::warn!("{fl}:{line} {f}: {m}");
    })
}

/// Log a tensor's description.
///
/// # Safety
/// `self_` must be null or live; `msg` null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_print_tensor_handle(
    self_: AtenTensorHandle,
    msg: *const c_char,
) {
    guard_value("aoti_torch_print_tensor_handle", (), || {
        // SAFETY: forwarded contract.
        let (m, x) = unsafe { (lossy(msg), self_.as_ref()) };
        match x {
            Some(x) => log::info!(
                "{m}: dtype {} sizes {:?} strides {:?} device {:?}",
                x.0.dtype,
                x.0.sizes,
                x.0.strides,
                x.0.device()
            ),
            None => log::info!("{m}: null tensor"),
        }
    })
}

/// Custom ops need a proxy executor, which this backend does not provide: a clear failure.
#[no_mangle]
pub extern "C" fn aoti_torch_proxy_executor_call_function(
    _proxy_executor: *mut std::ffi::c_void,
    extern_node_index: i32,
    _num_ints: i32,
    _flatten_int_args: *mut i64,
    _num_tensors: i32,
    _flatten_tensor_args: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_proxy_executor_call_function", || {
        Err(Error::execution_failed(format!(
            "extern node {extern_node_index} needs a proxy executor (custom ops), which this backend does not provide"
        )))
    })
}
