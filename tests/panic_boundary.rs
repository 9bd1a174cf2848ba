//! A panic inside any FFI entry point becomes an error code (and a message),
//! never an unwind across the boundary or an abort. Uses the test-only hook
//! `ffi::FORCE_PANIC`, which makes every boundary panic inside its guard.

use executorch_cuda::ffi::{api::*, memory::*, options::*, types::*};
use executorch_cuda::shim::*;
use std::ffi::{CStr, CString};
use std::sync::atomic::Ordering;

#[test]
fn forced_panics_become_error_codes() {
    // The panics are expected: keep the default hook from printing them (and a backtrace).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // SAFETY: every pointer passed is a live CString, a local, or deliberately null.
    unsafe { forced_panics() };
    std::panic::set_hook(hook);
}

unsafe fn forced_panics() {
    let key = CString::new("use_shared_cuda_stream").unwrap();
    let mut b = false;
    let mut n = 0usize;
    let mut s = EtCudaStats::default();
    executorch_cuda::ffi::FORCE_PANIC.store(true, Ordering::SeqCst);
    let results = [
        et_cuda_set_option_bool(key.as_ptr(), true),
        et_cuda_get_option_bool(key.as_ptr(), &mut b),
        et_cuda_num_inputs(std::ptr::null(), &mut n),
        et_cuda_stats(std::ptr::null(), &mut s),
        et_cuda_init(std::ptr::null(), &mut std::ptr::null_mut()),
        et_cuda_destroy(std::ptr::null_mut()),
    ];
    // et_cuda_last_error goes through the guard too: read the message with the hook off.
    executorch_cuda::ffi::FORCE_PANIC.store(false, Ordering::SeqCst);
    // SAFETY: valid until the next call on this thread.
    let msg = unsafe { CStr::from_ptr(et_cuda_last_error()) }
        .to_string_lossy()
        .into_owned();
    // Value-returning functions return a harmless fallback when their body panics.
    executorch_cuda::ffi::FORCE_PANIC.store(true, Ordering::SeqCst);
    // SAFETY: the fallback is a static empty string.
    let fallback = unsafe { CStr::from_ptr(et_cuda_last_error()) }
        .to_bytes()
        .len();
    let dtype = aoti_torch_dtype_float32();
    // SAFETY: the shim functions are called with valid (or null) arguments.
    let shim_results = unsafe {
        let mut h = std::ptr::null_mut();
        [
            aoti_torch_empty_strided(1, [4].as_ptr(), [1].as_ptr(), 6, 0, 0, &mut h),
            aoti_torch_get_dim(std::ptr::null_mut(), std::ptr::null_mut()),
        ]
    };
    // SAFETY: null is accepted by the delete functions.
    let delete = unsafe { aoti_torch_delete_tensor_object(std::ptr::null_mut()) };
    executorch_cuda::ffi::FORCE_PANIC.store(false, Ordering::SeqCst);
    for r in results {
        assert_eq!(r, ET_CUDA_STATUS_INTERNAL);
    }
    assert!(
        msg.contains("panic") && msg.contains("et_cuda_destroy"),
        "{msg}"
    );
    assert_eq!(shim_results, [AOTI_TORCH_FAILURE; 2]);
    assert_eq!(fallback, 0);
    assert_eq!(dtype, 6, "constant getters return their constant");
    assert_eq!(delete, AOTI_TORCH_SUCCESS, "deletes never fail");
    // And everything works again afterwards.
    assert_eq!(
        et_cuda_set_option_bool(key.as_ptr(), false),
        ET_CUDA_STATUS_OK
    );
}
