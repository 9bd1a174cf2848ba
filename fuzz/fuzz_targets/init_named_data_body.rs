//! Body of the `init_named_data` fuzz target, shared with the test
//! `tests/fuzz_init_named_data.rs` (included there by path): `et_cuda_init`
//! with a fuzzed processed payload and a named-data callback that serves
//! fuzzed blobs. Whatever the bytes, the call returns a status (never a
//! panic turned into `INTERNAL`, never a crash) with a message, and a handle
//! exactly when it succeeds.
//!
//! Layout of the input: byte 0 holds flags (bit 0: serve `real_so` for keys
//! ending in `_so_blob`; bits 1-3: how many blobs follow), then each blob as a
//! little-endian `u16` length and its bytes, then the payload (the rest).

use executorch_cuda::ffi::api::{et_cuda_destroy, et_cuda_init, et_cuda_last_error};
use executorch_cuda::ffi::{
    EtCudaInitArgs, EtCudaMethodConfig, EtCudaStatus, ET_CUDA_STATUS_INTERNAL, ET_CUDA_STATUS_OK,
};
use std::ffi::{c_char, c_void, CStr};

struct Blobs<'a> {
    so: Option<&'a [u8]>,
    blobs: Vec<&'a [u8]>,
    /// Keys served and not released yet (a release must match one).
    out: std::cell::RefCell<Vec<Vec<u8>>>,
}

/// The release callback: the key must be one served and not released yet.
///
/// # Safety
/// `user` points at a live `Blobs`, `key` is NUL-terminated.
unsafe extern "C" fn release(user: *mut c_void, key: *const c_char) {
    // SAFETY: the contract above; `run` passes a `Blobs` that outlives the init call.
    let (b, k) = unsafe { (&*(user as *const Blobs<'_>), CStr::from_ptr(key).to_bytes()) };
    let mut out = b.out.borrow_mut();
    let i = out
        .iter()
        .position(|o| o.as_slice() == k)
        .unwrap_or_else(|| panic!("released {k:?}, which is not served"));
    out.swap_remove(i);
}

/// The named-data callback: a blob chosen by the key's hash, or "missing" without blobs.
///
/// # Safety
/// `user` points at a live `Blobs`, `key` is NUL-terminated, the out-pointers are writable.
unsafe extern "C" fn lookup(
    user: *mut c_void,
    key: *const c_char,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> i32 {
    // SAFETY: the contract above; `run` passes a `Blobs` that outlives the init call.
    let (b, k) = unsafe { (&*(user as *const Blobs<'_>), CStr::from_ptr(key).to_bytes()) };
    let blob = match b.so {
        Some(so) if k.ends_with(b"_so_blob") => Some(so),
        _ if b.blobs.is_empty() => None,
        _ => {
            let h = k.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
                (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
            });
            Some(b.blobs[(h % b.blobs.len() as u64) as usize])
        }
    };
    match blob {
        Some(x) => {
            b.out.borrow_mut().push(k.to_vec());
            // SAFETY: writable out-pointers (the contract).
            unsafe {
                *out_data = x.as_ptr();
                *out_len = x.len();
            }
            0
        }
        None => 1,
    }
}

/// Run one input; returns the status of `et_cuda_init`.
pub fn run(data: &[u8], real_so: Option<&[u8]>) -> EtCudaStatus {
    let Some((&flags, mut rest)) = data.split_first() else {
        return ET_CUDA_STATUS_OK;
    };
    let mut blobs = Vec::new();
    for _ in 0..(flags >> 1) & 7 {
        let Some((len, tail)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let n = (u16::from_le_bytes(*len) as usize).min(tail.len());
        blobs.push(&tail[..n]);
        rest = &tail[n..];
    }
    let named = Blobs {
        so: real_so.filter(|_| flags & 1 == 1),
        blobs,
        out: Default::default(),
    };
    let method = c"forward";
    let args = EtCudaInitArgs {
        so_data: std::ptr::null(),
        so_len: 0,
        weights_data: std::ptr::null(),
        weights_len: 0,
        method_name: method.as_ptr(),
        so_key: std::ptr::null(),
        weights_key: std::ptr::null(),
        use_backend_options: false,
        config: EtCudaMethodConfig::from(&executorch_cuda::MethodConfig::default()),
        share_group: 0,
        payload_data: rest.as_ptr(),
        payload_len: rest.len(),
        named_data: Some(lookup),
        named_data_user: &named as *const Blobs<'_> as *mut c_void,
        named_data_release: if flags & 0x10 != 0 {
            Some(release)
        } else {
            None
        },
    };
    let mut h = std::ptr::null_mut();
    // SAFETY: every pointer in `args` is live for the call; `lookup` follows its contract
    // with `named` as its user pointer; the out-pointer is a local.
    let st = unsafe { et_cuda_init(&args, &mut h) };
    // SAFETY: the library returns a NUL-terminated thread-local string.
    let msg = unsafe { CStr::from_ptr(et_cuda_last_error()) }.to_string_lossy();
    assert_ne!(
        st, ET_CUDA_STATUS_INTERNAL,
        "a panic or internal error: {msg}"
    );
    if st == ET_CUDA_STATUS_OK {
        assert!(!h.is_null());
        assert_eq!(et_cuda_destroy(h), ET_CUDA_STATUS_OK);
    } else {
        assert!(h.is_null(), "a failed init left a handle");
        assert!(!msg.is_empty(), "status {st} without a message");
    }
    st
}
