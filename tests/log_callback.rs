//! A log callback may call back into the library: one that replaces itself
//! with `et_cuda_set_log_callback` returns instead of deadlocking. The record
//! comes from the generated code's `aoti_torch_warn`, so this runs on the CPU.
//! The only test in its binary: the log callback is process-wide.

use executorch_cuda::ffi::options::et_cuda_set_log_callback;
use executorch_cuda::ffi::{EtCudaLogLevel, ET_CUDA_LOG_WARN, ET_CUDA_STATUS_OK};
use executorch_cuda::shim::diag::aoti_torch_warn;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

static CALLS: AtomicUsize = AtomicUsize::new(0);
static INNER_STATUS: AtomicI32 = AtomicI32::new(-1);

/// Counts records naming "replace me" and, on each, replaces the callback by none.
unsafe extern "C" fn replacing(_level: EtCudaLogLevel, msg: *const c_char, _user: *mut c_void) {
    // SAFETY: the library passes a NUL-terminated message valid during the call.
    let m = unsafe { CStr::from_ptr(msg) }.to_string_lossy();
    if m.contains("replace me") {
        CALLS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: a null callback needs nothing else.
        let st = unsafe { et_cuda_set_log_callback(None, std::ptr::null_mut(), ET_CUDA_LOG_WARN) };
        INNER_STATUS.store(st, Ordering::SeqCst);
    }
}

fn warn(msg: &'static CStr) {
    // SAFETY: NUL-terminated strings (null file and function are accepted).
    unsafe { aoti_torch_warn(std::ptr::null(), std::ptr::null(), 1, msg.as_ptr()) };
}

#[test]
fn a_log_callback_may_call_set_log_callback() {
    // SAFETY: `replacing` is callable from any thread and uses no user pointer.
    let st = unsafe {
        et_cuda_set_log_callback(Some(replacing), std::ptr::null_mut(), ET_CUDA_LOG_WARN)
    };
    assert_eq!(st, ET_CUDA_STATUS_OK);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        warn(c"replace me");
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(20)).is_ok(),
        "a callback calling et_cuda_set_log_callback did not return within 20 s (deadlock)"
    );
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(INNER_STATUS.load(Ordering::SeqCst), ET_CUDA_STATUS_OK);
    // The callback was replaced: a second warning goes to stderr, not to it.
    warn(c"replace me");
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
}
