#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn special_rows_and_bad_arguments() {
    require_gpu("special_rows_and_bad_arguments");
    let s = sample_fn();
    let mut token = 0i64;
    let (bytes, _) = encode(&[f32::NEG_INFINITY, f32::NAN, f32::NEG_INFINITY], F32);
    let buf = DevBuf::from_host(&bytes);
    assert_eq!(
        device_sample(&buf, F32, 3, 1.0, 0.9, 1, 1),
        -1,
        "nothing to sample"
    );
    assert_eq!(
        device_sample(&buf, F32, 3, 0.0, 1.0, 1, 1),
        1,
        "greedy: NaN is the largest"
    );
    let (bytes, _) = encode(&[0.0, f32::INFINITY, 3.0, f32::INFINITY], F32);
    let buf = DevBuf::from_host(&bytes);
    for step in 0..50 {
        let t = device_sample(&buf, F32, 4, 1.0, 1.0, 3, step);
        assert!(t == 1 || t == 3, "+inf logits share the mass: {t}");
    }
    let host = [0f32; 4];
    // SAFETY: each call is refused before anything reads the pointers' memory.
    unsafe {
        assert_ne!(
            s(host.as_ptr().cast(), F32, 4, 0, 0.0, 1.0, 0, 0, &mut token),
            0
        );
        assert!(
            last_error().contains("not device memory"),
            "{}",
            last_error()
        );
        assert_ne!(s(buf.ptr(), 4, 4, 0, 0.0, 1.0, 0, 0, &mut token), 0);
        assert!(
            last_error().contains("float32, bfloat16 or float16"),
            "{}",
            last_error()
        );
        assert_ne!(s(buf.ptr(), F32, 0, 0, 0.0, 1.0, 0, 0, &mut token), 0);
        assert_ne!(s(buf.ptr(), F32, 4, 0, 1.0, 0.0, 0, 0, &mut token), 0);
        assert!(last_error().contains("top_p"), "{}", last_error());
        assert_ne!(s(buf.ptr(), F32, 4, 0, -0.5, 1.0, 0, 0, &mut token), 0);
        assert_ne!(
            s(buf.ptr(), F32, 4, 0, 0.0, 1.0, 0, 0, std::ptr::null_mut()),
            0
        );
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn time_per_call() {
    require_gpu("time_per_call");
    let vocab = 151_936;
    let (bytes, _) = encode(&logits(vocab, 9, 3.0), BF16);
    let buf = DevBuf::from_host(&bytes);
    for (what, t, top_p) in [
        ("greedy", 0.0, 1.0),
        ("T=0.8", 0.8, 1.0),
        ("T=0.8 top_p=0.9", 0.8, 0.9),
    ] {
        for step in 0..20 {
            device_sample(&buf, BF16, vocab, t, top_p, 1, step);
        }
        let n = 500;
        let t0 = std::time::Instant::now();
        for step in 0..n {
            device_sample(&buf, BF16, vocab, t, top_p, 1, step);
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!("sample {what}, bf16 vocab {vocab}: {us:.1} us per call (launch + kernel + one host wait)");
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn greedy_time_many_blocks_vs_one_block() {
    require_gpu("greedy_time_many_blocks_vs_one_block");
    let vocab = 128_256;
    let (bytes, seen) = encode(&noise(vocab, 3), BF16);
    let buf = DevBuf::from_host(&bytes);
    let want = argmax(&seen);
    let many = || device_sample(&buf, BF16, vocab, 0.0, 1.0, 0, 0);
    // The sampler's one-block kernel through the rlib (its own copy of the library state).
    let one = || {
        // SAFETY: the buffer holds `vocab` bf16 values on device 0.
        unsafe {
            executorch_cuda::api::sample::sample_greedy_one_block(
                executorch_cuda::DevicePtr::from_raw(buf.ptr()),
                executorch_cuda::DType::BFloat16,
                vocab as i64,
                executorch_cuda::Device::cuda(0).unwrap(),
            )
        }
        .unwrap_or_else(|e| panic!("one-block greedy: {e}"))
    };
    let paths: [(&str, &dyn Fn() -> i64); 2] = [
        ("many blocks (et_argmax)", &many),
        ("one block (et_sample)", &one),
    ];
    for (what, f) in paths {
        for _ in 0..20 {
            assert_eq!(f(), want, "{what}");
        }
        let n = 200;
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            assert_eq!(f(), want, "{what}");
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!(
            "greedy bf16 vocab {vocab}, {what}: {us:.1} us per call (launch + kernel + one host wait)"
        );
    }
}

/// Issue 31: the sampler's memory (a page-locked token slot, 256 bytes, and 8,448 bytes of
/// device scratch) is counted with the library's allocations and freed by
/// `et_cuda_sample_release` (and by the destroy of the device's last method); it used to be
/// allocated outside the counters and never freed (compute-sanitizer's leak check found
/// both). A temperature out of [1e-6, 1e6] is refused (1e45 used to turn greedy).
/// The counters are process-wide: run it with `--test-threads=1`.
#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn sampler_memory_is_counted_and_released() {
    require_gpu("sampler_memory_is_counted_and_released");
    let release = sym::<unsafe extern "C" fn(i32) -> i32>("et_cuda_sample_release");
    let (bytes, seen) = encode(&logits(5000, 3, 2.0), F32);
    let buf = DevBuf::from_host(&bytes);
    // SAFETY: plain calls.
    unsafe {
        assert_eq!(release(0), ET_CUDA_STATUS_OK, "{}", last_error());
        assert_ne!(release(-5), ET_CUDA_STATUS_OK);
    }
    let s0 = stats(std::ptr::null());
    assert_eq!(
        device_sample(&buf, F32, 5000, 0.0, 1.0, 0, 0),
        argmax(&seen)
    );
    device_sample(&buf, F32, 5000, 0.7, 0.9, 0, 1);
    let s1 = stats(std::ptr::null());
    assert_eq!(
        s1.live_bytes - s0.live_bytes,
        256 + 8448,
        "the sampler's token slot and scratch, counted"
    );
    // SAFETY: plain call.
    assert_eq!(unsafe { release(0) }, ET_CUDA_STATUS_OK, "{}", last_error());
    let s2 = stats(std::ptr::null());
    assert_eq!(s2.live_bytes, s0.live_bytes, "released");
    assert_eq!(s2.live_allocs, s0.live_allocs, "released");
    // Made again by the next call, and still right.
    assert_eq!(
        device_sample(&buf, F32, 5000, 0.0, 1.0, 0, 0),
        argmax(&seen)
    );
    // SAFETY: plain call.
    assert_eq!(unsafe { release(0) }, ET_CUDA_STATUS_OK);
    // Out of range: refused, naming the temperature.
    let mut token = 0i64;
    for t in [1e45, 1e-7, f64::INFINITY] {
        // SAFETY: the buffer holds 5000 float32 values; out-pointer to a local.
        let st = unsafe { sample_fn()(buf.ptr(), F32, 5000, 0, t, 1.0, 0, 0, &mut token) };
        assert_ne!(st, ET_CUDA_STATUS_OK, "{t}");
        assert!(last_error().contains("temperature"), "{}", last_error());
    }
}
