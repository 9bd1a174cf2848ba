//! Every shim function on CPU tensors (no GPU needed), called through its C signature.

use executorch_cuda::dtype::codes as dtype;
use executorch_cuda::shim::*;
use std::ffi::c_void;
use std::ptr::null_mut;

const OK: i32 = AOTI_TORCH_SUCCESS;
const FAIL: i32 = AOTI_TORCH_FAILURE;
const CPU: i32 = 0;

fn empty(sizes: &[i64], strides: &[i64], dt: i32) -> AtenTensorHandle {
    let mut h = null_mut();
    // SAFETY: arrays of sizes.len() elements; out-pointer to a local.
    let st = unsafe {
        aoti_torch_empty_strided(
            sizes.len() as i64,
            sizes.as_ptr(),
            strides.as_ptr(),
            dt,
            CPU,
            0,
            &mut h,
        )
    };
    assert_eq!(st, OK);
    h
}

fn f32s(h: AtenTensorHandle, n: usize) -> Vec<f32> {
    let mut p = null_mut();
    // SAFETY: live handle; the tensor has n f32 elements from its data pointer.
    unsafe {
        assert_eq!(aoti_torch_get_data_ptr(h, &mut p), OK);
        std::slice::from_raw_parts(p.cast::<f32>(), n).to_vec()
    }
}

fn fill(h: AtenTensorHandle, vals: &[f32]) {
    let mut p = null_mut();
    // SAFETY: live handle with at least vals.len() f32 elements.
    unsafe {
        assert_eq!(aoti_torch_get_data_ptr(h, &mut p), OK);
        std::ptr::copy_nonoverlapping(vals.as_ptr(), p.cast::<f32>(), vals.len());
    }
}

fn del(h: AtenTensorHandle) {
    // SAFETY: a handle from this test, deleted once.
    assert_eq!(unsafe { aoti_torch_delete_tensor_object(h) }, OK);
}

#[test]
fn dtype_device_layout_constants() {
    assert_eq!(aoti_torch_dtype_uint8(), 0);
    assert_eq!(aoti_torch_dtype_int8(), 1);
    assert_eq!(aoti_torch_dtype_int16(), 2);
    assert_eq!(aoti_torch_dtype_int32(), 3);
    assert_eq!(aoti_torch_dtype_int64(), 4);
    assert_eq!(aoti_torch_dtype_float16(), 5);
    assert_eq!(aoti_torch_dtype_float32(), 6);
    assert_eq!(aoti_torch_dtype_float64(), 7);
    assert_eq!(aoti_torch_dtype_complex32(), 8);
    assert_eq!(aoti_torch_dtype_complex64(), 9);
    assert_eq!(aoti_torch_dtype_complex128(), 10);
    assert_eq!(aoti_torch_dtype_bool(), 11);
    assert_eq!(aoti_torch_dtype_bfloat16(), 15);
    assert_eq!(aoti_torch_dtype_float8_e5m2(), 23);
    assert_eq!(aoti_torch_dtype_float8_e4m3fn(), 24);
    assert_eq!(aoti_torch_dtype_uint16(), 27);
    assert_eq!(aoti_torch_dtype_uint64(), 29);
    assert_eq!(aoti_torch_device_type_cpu(), 0);
    assert_eq!(aoti_torch_device_type_cuda(), 1);
    assert_eq!(aoti_torch_layout_strided(), 0);
    assert_eq!(aoti_torch_memory_format_contiguous_format(), 0);
    for (dt, size) in [
        (0, 1),
        (4, 8),
        (5, 2),
        (6, 4),
        (7, 8),
        (10, 16),
        (11, 1),
        (15, 2),
        (29, 8),
    ] {
        assert_eq!(aoti_torch_dtype_element_size(dt), size, "dtype {dt}");
    }
    assert_eq!(aoti_torch_dtype_element_size(12), 0);
    assert!(!aoti_torch_grad_mode_is_enabled());
    aoti_torch_grad_mode_set_enabled(true);
    assert!(aoti_torch_grad_mode_is_enabled());
    aoti_torch_grad_mode_set_enabled(false);
}

#[test]
fn getters_on_an_empty_strided_tensor() {
    let h = empty(&[2, 3, 4], &[12, 4, 1], dtype::FLOAT32);
    // SAFETY: live handle; out-pointers to locals.
    unsafe {
        let (mut dim, mut numel, mut ssize, mut off, mut dt, mut dev, mut idx) =
            (0i64, 0i64, 0i64, -1i64, 0i32, -1i32, 0i32);
        assert_eq!(aoti_torch_get_dim(h, &mut dim), OK);
        assert_eq!(aoti_torch_get_numel(h, &mut numel), OK);
        assert_eq!(aoti_torch_get_storage_size(h, &mut ssize), OK);
        assert_eq!(aoti_torch_get_storage_offset(h, &mut off), OK);
        assert_eq!(aoti_torch_get_dtype(h, &mut dt), OK);
        assert_eq!(aoti_torch_get_device_type(h, &mut dev), OK);
        assert_eq!(aoti_torch_get_device_index(h, &mut idx), OK);
        assert_eq!(
            (dim, numel, ssize, off, dt, dev, idx),
            (3, 24, 96, 0, 6, 0, -1)
        );
        let mut sizes = null_mut();
        let mut strides = null_mut();
        assert_eq!(aoti_torch_get_sizes(h, &mut sizes), OK);
        assert_eq!(aoti_torch_get_strides(h, &mut strides), OK);
        assert_eq!(std::slice::from_raw_parts(sizes, 3), &[2, 3, 4]);
        assert_eq!(std::slice::from_raw_parts(strides, 3), &[12, 4, 1]);
        let mut s = 0;
        assert_eq!(aoti_torch_get_size(h, -1, &mut s), OK);
        assert_eq!(s, 4);
        assert_eq!(aoti_torch_get_stride(h, 0, &mut s), OK);
        assert_eq!(s, 12);
        assert_eq!(aoti_torch_get_size(h, 3, &mut s), FAIL);
        let mut c = false;
        assert_eq!(aoti_torch_is_contiguous(h, &mut c), OK);
        assert!(c);
        let mut layout = -1;
        assert_eq!(aoti_torch_get_layout(h, &mut layout), OK);
        assert_eq!(layout, 0);
        let mut sn = 0;
        assert_eq!(aoti_torch_get_storage_numel(h, &mut sn), OK);
        assert_eq!(sn, 24);
        let mut cp: *const c_void = std::ptr::null();
        assert_eq!(aoti_torch_get_const_data_ptr(h, &mut cp), OK);
        assert!(!cp.is_null());
        // Null handles and out-pointers fail cleanly.
        assert_eq!(aoti_torch_get_dim(null_mut(), &mut dim), FAIL);
        assert_eq!(aoti_torch_get_dim(h, std::ptr::null_mut()), FAIL);
    }
    del(h);
}

#[test]
fn views_share_storage_and_are_bounds_checked() {
    let h = empty(&[4, 4], &[4, 1], dtype::FLOAT32);
    fill(h, &(0..16).map(|x| x as f32).collect::<Vec<_>>());
    // SAFETY: live handles; arrays of the stated lengths.
    unsafe {
        let mut v = null_mut();
        assert_eq!(
            aoti_torch__reinterpret_tensor(h, 2, [2, 2].as_ptr(), [4, 1].as_ptr(), 5, &mut v),
            OK
        );
        assert_eq!(f32s(v, 2), vec![5.0, 6.0]);
        let mut off = 0;
        assert_eq!(aoti_torch_get_storage_offset(v, &mut off), OK);
        assert_eq!(off, 5);
        // A second reinterpret adds to the view's offset.
        let mut v2 = null_mut();
        assert_eq!(
            aoti_torch__reinterpret_tensor(v, 1, [2].as_ptr(), [1].as_ptr(), 4, &mut v2),
            OK
        );
        assert_eq!(f32s(v2, 2), vec![9.0, 10.0]);
        // Out of the storage: refused.
        let mut bad = null_mut();
        assert_eq!(
            aoti_torch__reinterpret_tensor(h, 2, [4, 4].as_ptr(), [4, 1].as_ptr(), 1, &mut bad),
            FAIL
        );
        assert!(bad.is_null());
        assert!(executorch_cuda::ffi::last_error_message().contains("needs"));
        // new_tensor_handle shares storage: writes are visible through both.
        let mut n = null_mut();
        assert_eq!(aoti_torch_new_tensor_handle(h, &mut n), OK);
        fill(n, &[42.0]);
        assert_eq!(f32s(h, 1), vec![42.0]);
        del(h); // the storage lives on through the other handles
        assert_eq!(f32s(v, 1), vec![5.0]);
        // _alloc_from_pool: byte offset, other dtype.
        let mut p = null_mut();
        assert_eq!(
            aoti_torch__alloc_from_pool(n, 8, dtype::INT32, 1, [2].as_ptr(), [1].as_ptr(), &mut p),
            OK
        );
        let mut ptr = null_mut();
        assert_eq!(aoti_torch_get_data_ptr(p, &mut ptr), OK);
        assert_eq!(*ptr.cast::<i32>(), 2.0f32.to_bits() as i32);
        assert_eq!(
            aoti_torch__alloc_from_pool(
                n,
                2,
                dtype::INT32,
                1,
                [2].as_ptr(),
                [1].as_ptr(),
                &mut bad
            ),
            FAIL
        );
        // as_strided keeps rank and offset.
        let mut a = null_mut();
        assert_eq!(
            aoti_torch_as_strided(v, [2, 2].as_ptr(), [1, 4].as_ptr(), &mut a),
            OK
        );
        assert_eq!(f32s(a, 1), vec![5.0]);
        for x in [v, v2, n, p, a] {
            del(x);
        }
    }
}

#[test]
fn from_blob_borrows_memory() {
    let mut buf: Vec<f32> = (0..6).map(|x| x as f32).collect();
    // SAFETY: `buf` outlives the tensors; arrays of the stated lengths.
    unsafe {
        let mut h = null_mut();
        let st = aoti_torch_create_tensor_from_blob(
            buf.as_mut_ptr().cast(),
            2,
            [2, 2].as_ptr(),
            [3, 1].as_ptr(),
            1,
            dtype::FLOAT32,
            CPU,
            0,
            &mut h,
        );
        assert_eq!(st, OK);
        assert_eq!(f32s(h, 1), vec![1.0]);
        let mut ssize = 0;
        assert_eq!(aoti_torch_get_storage_size(h, &mut ssize), OK);
        assert_eq!(ssize, 6 * 4); // offset 1 + (1*3 + 1*1) + 1 = 6 elements
        del(h);
        let mut h2 = null_mut();
        let st = aoti_torch_create_tensor_from_blob_v2(
            buf.as_mut_ptr().cast(),
            1,
            [6].as_ptr(),
            [1].as_ptr(),
            0,
            dtype::FLOAT32,
            CPU,
            0,
            &mut h2,
            0,
            std::ptr::null(),
            0,
        );
        assert_eq!(st, OK);
        del(h2);
    }
    from_blob_refusals(&mut buf);
    assert_eq!(buf[5], 5.0, "borrowed memory is left alone");
}

/// Tensors over `buf` with a non-strided layout, an unknown dtype or device type, negative
/// sizes, an absurd rank or null arrays are refused.
fn from_blob_refusals(buf: &mut [f32]) {
    let mut h2 = null_mut();
    // SAFETY: `buf` outlives the calls; arrays of the stated lengths (the refused ones aside).
    unsafe {
        let st = aoti_torch_create_tensor_from_blob_v2(
            buf.as_mut_ptr().cast(),
            1,
            [6].as_ptr(),
            [1].as_ptr(),
            0,
            dtype::FLOAT32,
            CPU,
            0,
            &mut h2,
            2,
            std::ptr::null(),
            0,
        );
        assert_eq!(st, FAIL, "non-strided layouts are refused");
        // Unknown dtype and device type are refused.
        let st = aoti_torch_create_tensor_from_blob(
            buf.as_mut_ptr().cast(),
            1,
            [6].as_ptr(),
            [1].as_ptr(),
            0,
            99,
            CPU,
            0,
            &mut h2,
        );
        assert_eq!(st, FAIL);
        let st = aoti_torch_create_tensor_from_blob(
            buf.as_mut_ptr().cast(),
            1,
            [6].as_ptr(),
            [1].as_ptr(),
            0,
            6,
            14,
            0,
            &mut h2,
        );
        assert_eq!(st, FAIL);
        // Negative sizes / absurd rank.
        assert_eq!(
            aoti_torch_empty_strided(1, [-3].as_ptr(), [1].as_ptr(), 6, CPU, 0, &mut h2),
            FAIL
        );
        assert_eq!(
            aoti_torch_empty_strided(1000, [1].as_ptr(), [1].as_ptr(), 6, CPU, 0, &mut h2),
            FAIL
        );
        assert_eq!(
            aoti_torch_empty_strided(2, std::ptr::null(), std::ptr::null(), 6, CPU, 0, &mut h2),
            FAIL
        );
    }
}

#[test]
fn clone_copy_and_assign() {
    let src = empty(&[2, 3], &[3, 1], dtype::FLOAT32);
    fill(src, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // SAFETY: live handles; arrays of the stated lengths.
    unsafe {
        // A transposed view: sizes [3, 2], strides [1, 3].
        let mut tr = null_mut();
        assert_eq!(
            aoti_torch__reinterpret_tensor(src, 2, [3, 2].as_ptr(), [1, 3].as_ptr(), 0, &mut tr),
            OK
        );
        let mut c = null_mut();
        assert_eq!(aoti_torch_clone(tr, &mut c), OK);
        assert_eq!(f32s(c, 6), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let mut strides = null_mut();
        assert_eq!(aoti_torch_get_strides(c, &mut strides), OK);
        assert_eq!(std::slice::from_raw_parts(strides, 2), &[2, 1]);
        let mut cp = null_mut();
        assert_eq!(aoti_torch_clone_preserve_strides(tr, &mut cp), OK);
        assert_eq!(aoti_torch_get_strides(cp, &mut strides), OK);
        assert_eq!(std::slice::from_raw_parts(strides, 2), &[1, 3]);
        assert_eq!(f32s(cp, 6), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // copy_ into a strided destination.
        let dst = empty(&[3, 2], &[2, 1], dtype::FLOAT32);
        assert_eq!(aoti_torch_copy_(dst, tr, 0), OK);
        assert_eq!(f32s(dst, 6), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let dst_t = empty(&[3, 2], &[1, 3], dtype::FLOAT32);
        assert_eq!(aoti_torch_copy_(dst_t, dst, 1), OK);
        assert_eq!(f32s(dst_t, 6), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(aoti_torch_tensor_copy_(dst, dst_t), OK);
        assert_eq!(f32s(dst_t, 6), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // dtype conversion and shape mismatch are clear failures.
        let i64t = empty(&[3, 2], &[2, 1], dtype::INT64);
        assert_eq!(aoti_torch_copy_(i64t, dst, 0), FAIL);
        assert!(executorch_cuda::ffi::last_error_message().contains("dtype conversion"));
        let small = empty(&[2], &[1], dtype::FLOAT32);
        assert_eq!(aoti_torch_copy_(small, dst, 0), FAIL);
        // assign_tensors_out: a new handle on the same storage.
        let mut alias = null_mut();
        assert_eq!(aoti_torch_assign_tensors_out(dst, &mut alias), OK);
        let (mut p1, mut p2) = (null_mut(), null_mut());
        aoti_torch_get_data_ptr(dst, &mut p1);
        aoti_torch_get_data_ptr(alias, &mut p2);
        assert_eq!(p1, p2);
        assert_eq!(aoti_torch_assign_tensors(src, alias), OK);
        aoti_torch_get_data_ptr(alias, &mut p2);
        let mut p3 = null_mut();
        aoti_torch_get_data_ptr(src, &mut p3);
        assert_eq!(p2, p3);
        // zero_
        assert_eq!(aoti_torch_zero_(tr), OK);
        assert_eq!(f32s(src, 6), vec![0.0; 6]);
        for x in [tr, c, cp, dst, dst_t, i64t, small, alias, src] {
            del(x);
        }
    }
}

#[test]
fn item_and_scalar_to_tensor() {
    // SAFETY: out-pointers to locals; handles from this test.
    unsafe {
        let mut h = null_mut();
        assert_eq!(aoti_torch_scalar_to_tensor_float32(2.5, &mut h), OK);
        let mut f = 0f32;
        assert_eq!(aoti_torch_item_float32(h, &mut f), OK);
        assert_eq!(f, 2.5);
        let mut d = 0f64;
        assert_eq!(aoti_torch_item_float64(h, &mut d), FAIL, "dtype mismatch");
        del(h);
        assert_eq!(aoti_torch_scalar_to_tensor_bool(true, &mut h), OK);
        let mut b = false;
        assert_eq!(aoti_torch_item_bool(h, &mut b), OK);
        assert!(b);
        del(h);
        assert_eq!(aoti_torch_scalar_to_tensor_int64(-7, &mut h), OK);
        let mut i = 0i64;
        assert_eq!(aoti_torch_item_int64(h, &mut i), OK);
        assert_eq!(i, -7);
        let mut dim = -1;
        assert_eq!(aoti_torch_get_dim(h, &mut dim), OK);
        assert_eq!(dim, 0);
        del(h);
        let two = empty(&[2], &[1], dtype::FLOAT32);
        assert_eq!(
            aoti_torch_item_float32(two, &mut f),
            FAIL,
            "item of 2 elements"
        );
        del(two);
    }
}

#[test]
fn deletes_always_succeed_and_cuda_entry_points_fail_cleanly_without_gpu() {
    // SAFETY: null handles are accepted by the delete functions; out-pointers to locals.
    unsafe {
        assert_eq!(aoti_torch_delete_tensor_object(null_mut()), OK);
        assert_eq!(aoti_torch_delete_cuda_guard(null_mut()), OK);
        assert_eq!(aoti_torch_delete_cuda_stream_guard(null_mut()), OK);
        let mut s = std::ptr::dangling_mut::<c_void>();
        assert_eq!(aoti_torch_get_current_cuda_stream(0, &mut s), OK);
        assert!(
            s.is_null(),
            "no stream set on this thread: the legacy default stream"
        );
        if executorch_cuda::device_count().is_err() {
            let mut g = null_mut();
            assert_eq!(aoti_torch_create_cuda_guard(0, &mut g), FAIL);
            assert!(executorch_cuda::ffi::last_error_message().contains("no CUDA"));
            let mut sg = null_mut();
            assert_eq!(
                aoti_torch_create_cuda_stream_guard(null_mut(), 0, &mut sg),
                FAIL
            );
            let mut h = null_mut();
            assert_eq!(
                aoti_torch_empty_strided(1, [4].as_ptr(), [1].as_ptr(), 6, 1, 0, &mut h),
                FAIL
            );
            assert!(h.is_null());
        }
        let mut u = null_mut();
        assert_eq!(aoti_torch_new_uninitialized_tensor(&mut u), OK);
        del(u);
    }
}
