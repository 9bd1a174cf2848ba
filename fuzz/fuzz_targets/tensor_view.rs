//! Caller-provided tensor descriptions (sizes, strides, offsets, dtypes)
//! through the tensor model and the CPU shim functions that build views.
#![no_main]
use executorch_cuda::shim::*;
use executorch_cuda::fuzzing as tensor;
use libfuzzer_sys::fuzz_target;

fn dims(b: &[u8], n: usize) -> Vec<i64> {
    (0..n)
        .map(|i| {
            // Small (-2..=13, so element loops stay short), sometimes huge.
            match b.get(i).copied().unwrap_or(0) {
                255 => i64::MAX / 3,
                254 => 1 << 40,
                x => (x % 16) as i64 - 2,
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let dtype = (data[0] % 32) as i32;
    let nd = (data[1] % 6) as usize;
    let offset = data[2] as i8 as i64;
    let rest = &data[3..];
    let sizes = dims(rest, nd);
    let strides = dims(rest.get(nd..).unwrap_or(&[]), nd);
    let _ = tensor::required_bytes(&sizes, &strides, offset, 4);
    let _ = tensor::checked_numel(&sizes);
    let _ = tensor::is_contiguous(&sizes, &strides);
    // A small real storage, and views of it described by the fuzzer.
    let mut h = std::ptr::null_mut();
    let mut v = std::ptr::null_mut();
    // SAFETY: arrays of `nd` elements; handles made here and deleted once.
    unsafe {
        if aoti_torch_empty_strided(1, [64].as_ptr(), [1].as_ptr(), 6, 0, 0, &mut h) != 0 {
            return;
        }
        // Element loops are bounded by the harness (expanded views of 2^40 elements are valid
        // and would only make the fuzzer slow).
        let small = tensor::checked_numel(&sizes).is_ok_and(|n| n <= 1 << 16);
        if aoti_torch__reinterpret_tensor(h, nd as i64, sizes.as_ptr(), strides.as_ptr(), offset, &mut v) == 0 {
            let mut c = std::ptr::null_mut();
            if small && aoti_torch_clone(v, &mut c) == 0 {
                let _ = aoti_torch_copy_(c, v, 0);
                aoti_torch_delete_tensor_object(c);
            }
            let mut p = std::ptr::null_mut();
            if small && aoti_torch__alloc_from_pool(v, offset * 4, dtype, nd as i64, sizes.as_ptr(), strides.as_ptr(), &mut p) == 0 {
                let _ = aoti_torch_zero_(p);
                aoti_torch_delete_tensor_object(p);
            }
            aoti_torch_delete_tensor_object(v);
        }
        let mut e = std::ptr::null_mut();
        if small && aoti_torch_empty_strided(nd as i64, sizes.as_ptr(), strides.as_ptr(), dtype, 0, 0, &mut e) == 0 {
            aoti_torch_delete_tensor_object(e);
        }
        aoti_torch_delete_tensor_object(h);
    }
});
