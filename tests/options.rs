//! Backend options through the C API: round trips, wrong types, unknown keys.

use executorch_cuda::ffi::{api::*, options::*, types::*};
use std::ffi::{CStr, CString};

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

#[test]
fn option_round_trips_and_errors() {
    // SAFETY: every pointer passed below is a live CString, a local buffer of the stated
    // length, or deliberately null.
    unsafe { round_trips_and_errors() }
}

unsafe fn round_trips_and_errors() {
    assert_eq!(et_cuda_reset_options(), ET_CUDA_STATUS_OK);
    let (shared, skip, dev, mode) = (
        c("use_shared_cuda_stream"),
        c("skip_copy_output_to_cpu_for_method"),
        c("device_index"),
        c("cuda_graph_cache_size"),
    );
    let keys = [&*shared, &*skip, &*dev, &*mode];
    round_trips(keys);
    wrong_types_unknown_keys_and_nulls(keys);
    truncation_and_graph_memory(keys);
}

/// Each option set and read back (the graph cache size refuses 0).
unsafe fn round_trips([shared, skip, dev, mode]: [&CStr; 4]) {
    let mut b = false;
    let mut i = -1i64;
    let mut buf = [0 as std::ffi::c_char; 256];
    assert_eq!(
        et_cuda_get_option_bool(shared.as_ptr(), &mut b),
        ET_CUDA_STATUS_OK
    );
    assert!(!b);
    assert_eq!(
        et_cuda_set_option_bool(shared.as_ptr(), true),
        ET_CUDA_STATUS_OK
    );
    assert_eq!(
        et_cuda_get_option_bool(shared.as_ptr(), &mut b),
        ET_CUDA_STATUS_OK
    );
    assert!(b);
    assert_eq!(
        et_cuda_set_option_str(skip.as_ptr(), c("encoder,decoder").as_ptr()),
        ET_CUDA_STATUS_OK
    );
    assert_eq!(
        et_cuda_get_option_str(skip.as_ptr(), buf.as_mut_ptr(), buf.len()),
        ET_CUDA_STATUS_OK
    );
    assert_eq!(
        // SAFETY: the library NUL-terminates within buf.
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(),
        "encoder,decoder"
    );
    assert_eq!(et_cuda_set_option_int(dev.as_ptr(), 3), ET_CUDA_STATUS_OK);
    assert_eq!(
        et_cuda_get_option_int(dev.as_ptr(), &mut i),
        ET_CUDA_STATUS_OK
    );
    assert_eq!(i, 3);
    assert_eq!(et_cuda_set_option_int(mode.as_ptr(), 4), ET_CUDA_STATUS_OK);
    assert_eq!(
        et_cuda_set_option_int(mode.as_ptr(), 0),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
}

/// Options set or read with the wrong type, unknown keys, null arguments.
unsafe fn wrong_types_unknown_keys_and_nulls([shared, skip, dev, _mode]: [&CStr; 4]) {
    let mut b = false;
    let mut i = -1i64;
    let mut buf = [0 as std::ffi::c_char; 256];
    // Wrong types.
    assert_eq!(
        et_cuda_set_option_int(shared.as_ptr(), 1),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert!(executorch_cuda::ffi::last_error_message().contains("must be a bool"));
    assert_eq!(
        et_cuda_set_option_bool(skip.as_ptr(), true),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(
        et_cuda_set_option_str(dev.as_ptr(), c("1").as_ptr()),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(
        et_cuda_set_option_int(dev.as_ptr(), -2),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(
        et_cuda_get_option_int(shared.as_ptr(), &mut i),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    // Unknown keys: set is ignored, get says unknown.
    assert_eq!(
        et_cuda_set_option_bool(c("no_such_option").as_ptr(), true),
        ET_CUDA_STATUS_OK
    );
    assert_eq!(
        et_cuda_get_option_bool(c("no_such_option").as_ptr(), &mut b),
        ET_CUDA_STATUS_UNKNOWN_OPTION
    );
    // Null arguments.
    assert_eq!(
        et_cuda_set_option_bool(std::ptr::null(), true),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(
        et_cuda_get_option_bool(shared.as_ptr(), std::ptr::null_mut()),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(
        et_cuda_get_option_str(skip.as_ptr(), buf.as_mut_ptr(), 0),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
}

/// A string option truncated to the caller's buffer or refused over 255 bytes; graph memory.
unsafe fn truncation_and_graph_memory([_shared, skip, _dev, _mode]: [&CStr; 4]) {
    let mut b = false;
    // Truncation to the buffer.
    let mut small = [0 as std::ffi::c_char; 4];
    assert_eq!(
        et_cuda_get_option_str(skip.as_ptr(), small.as_mut_ptr(), small.len()),
        ET_CUDA_STATUS_OK
    );
    assert_eq!(
        // SAFETY: NUL-terminated within small.
        unsafe { CStr::from_ptr(small.as_ptr()) }.to_str().unwrap(),
        "enc"
    );
    let long = "x".repeat(300);
    assert_eq!(
        et_cuda_set_option_str(skip.as_ptr(), c(&long).as_ptr()),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    // Graph memory: private blocks by default, allocation nodes on request, a bool only.
    let private = c("cuda_graph_private_memory");
    assert_eq!(
        et_cuda_get_option_bool(private.as_ptr(), &mut b),
        ET_CUDA_STATUS_OK
    );
    assert!(b);
    assert_eq!(
        et_cuda_set_option_bool(private.as_ptr(), false),
        ET_CUDA_STATUS_OK
    );
    assert_eq!(
        et_cuda_get_option_bool(private.as_ptr(), &mut b),
        ET_CUDA_STATUS_OK
    );
    assert!(!b);
    assert_eq!(
        et_cuda_set_option_int(private.as_ptr(), 0),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(et_cuda_reset_options(), ET_CUDA_STATUS_OK);
    assert_eq!(
        et_cuda_get_option_bool(private.as_ptr(), &mut b),
        ET_CUDA_STATUS_OK
    );
    assert!(b, "reset restores private graph memory");
}

#[test]
fn c_api_rejects_null_and_reports_no_device() {
    // SAFETY: every pointer passed below is a local or deliberately null.
    unsafe { rejects_null_and_reports_no_device() }
}

unsafe fn rejects_null_and_reports_no_device() {
    let mut h = std::ptr::null_mut();
    assert_eq!(
        et_cuda_init(std::ptr::null(), &mut h),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(et_cuda_destroy(std::ptr::null_mut()), ET_CUDA_STATUS_OK);
    let mut n = 0usize;
    assert_eq!(
        et_cuda_num_inputs(std::ptr::null(), &mut n),
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    // SAFETY: static string.
    let msg = unsafe { CStr::from_ptr(et_cuda_last_error()) }
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains("handle is null"), "{msg}");
    // SAFETY: a static string.
    assert!(!unsafe { CStr::from_ptr(et_cuda_version()) }
        .to_bytes()
        .is_empty());
    let mut count = 0;
    match et_cuda_device_count(&mut count) {
        ET_CUDA_STATUS_OK => assert!(count >= 0),
        ET_CUDA_STATUS_NO_DEVICE => {
            // SAFETY: valid until the next call.
            let m = unsafe { CStr::from_ptr(et_cuda_last_error()) }
                .to_string_lossy()
                .into_owned();
            assert!(m.contains("no CUDA"), "{m}");
        }
        other => panic!("unexpected {other:?}"),
    }
}
