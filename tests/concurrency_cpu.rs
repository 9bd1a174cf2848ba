//! CPU-side concurrency: handles to one shared storage made and deleted from
//! many threads, per-thread last-error messages, and options read and written
//! concurrently. (The GPU-side test with eight handles is in tests/gpu.rs.)

use executorch_cuda::ffi::{options::*, types::*};
use executorch_cuda::shim::*;
use std::ffi::{CStr, CString};

#[test]
fn shared_storage_and_thread_local_errors() {
    let mut base = std::ptr::null_mut();
    assert_eq!(
        // SAFETY: arrays of one element; out-pointer to a local.
        unsafe { aoti_torch_empty_strided(1, [1024].as_ptr(), [1].as_ptr(), 6, 0, 0, &mut base) },
        0
    );
    let base_addr = base as usize;
    std::thread::scope(|s| {
        for k in 0..8 {
            s.spawn(move || views_of_shared_storage(base_addr, k));
        }
        for k in 0..4 {
            s.spawn(move || options_from_a_thread(k));
        }
    });
    // SAFETY: deleted once; no views remain.
    assert_eq!(unsafe { aoti_torch_delete_tensor_object(base) }, 0);
    assert_eq!(et_cuda_reset_options(), ET_CUDA_STATUS_OK);
    let s = executorch_cuda::global_stats();
    assert_eq!(s.live_allocs, 0, "every host tensor was freed");
}

/// Thread `k`: 2000 views of the shared storage at `base_addr`, each copied, read and deleted,
/// and a refused view whose error message is this thread's own.
fn views_of_shared_storage(base_addr: usize, k: i32) {
    let base = base_addr as AtenTensorHandle;
    for i in 0..2000 {
        let mut v = std::ptr::null_mut();
        let off = ((k * 97 + i) % 1000) as i64;
        // SAFETY: `base` stays alive for the scope; views are deleted once.
        unsafe {
            assert_eq!(
                aoti_torch__reinterpret_tensor(base, 1, [8].as_ptr(), [1].as_ptr(), off, &mut v),
                0
            );
            let mut n = std::ptr::null_mut();
            assert_eq!(aoti_torch_new_tensor_handle(v, &mut n), 0);
            assert_eq!(aoti_torch_delete_tensor_object(v), 0);
            let mut o = 0;
            assert_eq!(aoti_torch_get_storage_offset(n, &mut o), 0);
            assert_eq!(o, off);
            assert_eq!(aoti_torch_delete_tensor_object(n), 0);
            // A failure on this thread sets only this thread's message.
            let mut bad = std::ptr::null_mut();
            assert_eq!(
                aoti_torch__reinterpret_tensor(
                    base,
                    1,
                    [8].as_ptr(),
                    [1].as_ptr(),
                    5000 + k as i64,
                    &mut bad
                ),
                1
            );
            let msg = executorch_cuda::ffi::last_error_message();
            assert!(
                msg.contains(&format!("offset {}", 5000 + k)),
                "thread {k}: {msg}"
            );
        }
    }
}

/// Thread `k`: 2000 writes of its own value to a string option, each read back whole.
fn options_from_a_thread(k: i32) {
    let key = CString::new("skip_copy_output_to_cpu_for_method").unwrap();
    let mine = CString::new(format!("method{k}")).unwrap();
    for _ in 0..2000 {
        assert_eq!(
            // SAFETY: NUL-terminated strings.
            unsafe { et_cuda_set_option_str(key.as_ptr(), mine.as_ptr()) },
            ET_CUDA_STATUS_OK
        );
        let mut buf = [0 as std::ffi::c_char; 64];
        assert_eq!(
            // SAFETY: NUL-terminated key; a buffer of buf.len() bytes.
            unsafe { et_cuda_get_option_str(key.as_ptr(), buf.as_mut_ptr(), buf.len()) },
            ET_CUDA_STATUS_OK
        );
        // SAFETY: NUL-terminated by the library.
        let v = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_str()
            .unwrap()
            .to_string();
        assert!(v.starts_with("method"), "torn value {v:?}");
    }
}
