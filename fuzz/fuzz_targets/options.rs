//! Option keys and values as the adapter passes them, plus `<sha256>_so_blob` keys.
#![no_main]
use executorch_cuda::ffi::options::*;
use libfuzzer_sys::fuzz_target;
use std::ffi::CString;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let keys = ["use_shared_cuda_stream", "skip_copy_output_to_cpu_for_method", "device_index", "enable_cuda_graph_for_method"];
    let key = match data[0] % 5 {
        4 => String::from_utf8_lossy(&data[1..data.len().min(40)]).into_owned(),
        k => keys[k as usize].to_string(),
    };
    let Ok(k) = CString::new(key) else { return };
    let value = &data[1..];
    // SAFETY: every pointer is a live CString or a local buffer of the stated length.
    unsafe { fuzz_options(&k, value) };
});

unsafe fn fuzz_options(k: &CString, value: &[u8]) {
    let _ = et_cuda_set_option_bool(k.as_ptr(), value.first().is_some_and(|b| b & 1 == 1));
    let _ = et_cuda_set_option_int(k.as_ptr(), i64::from_le_bytes(value.iter().copied().chain(std::iter::repeat(0)).take(8).collect::<Vec<_>>().try_into().unwrap_or([0; 8])));
    let nul_free: Vec<u8> = value.iter().copied().filter(|b| *b != 0).collect();
    if let Ok(v) = CString::new(nul_free) {
        let _ = et_cuda_set_option_str(k.as_ptr(), v.as_ptr());
    }
    let mut b = false;
    let mut i = 0i64;
    let mut buf = [0 as std::ffi::c_char; 64];
    let _ = et_cuda_get_option_bool(k.as_ptr(), &mut b);
    let _ = et_cuda_get_option_int(k.as_ptr(), &mut i);
    let _ = et_cuda_get_option_str(k.as_ptr(), buf.as_mut_ptr(), (value.len() % 64) + 1);
    let _ = executorch_cuda::fuzzing::skip_copy_for(&String::from_utf8_lossy(value));
    let _ = et_cuda_reset_options();
}
