fn state() -> (u64, u64) {
    let (mut s, mut o) = (0u64, 0u64);
    // SAFETY: out-pointers to locals.
    ok(unsafe { (shims().state)(0, &mut s, &mut o) }, "rng state");
    (s, o)
}

fn rand(n: i64, dt: i32) -> Vec<u8> {
    let mut h: H = std::ptr::null_mut();
    let mut d = dt;
    let mut dev = CUDA;
    // SAFETY: one size, optional args point to locals or are null; out-pointer to a local.
    let rc = unsafe {
        (shims().rand)(
            &n,
            1,
            &mut d,
            std::ptr::null_mut(),
            &mut dev,
            0,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    ok(rc, "rand");
    let (b, _, got) = read_back(h, n as usize, 1);
    assert_eq!(got, dt);
    delete(h);
    b
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn rand_is_the_reference_philox_stream_and_advances_the_offset() {
    require_gpu("rand_is_the_reference_philox_stream_and_advances_the_offset");
    let seed = 0x1234_5678_9ABC_DEF0u64;
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed) }, "seed");
    assert_eq!(state(), (seed, 0));
    let n = 1001usize;
    let a = rand(n as i64, F32);
    let want = philox_ref::uniform_f32(seed, 0, n);
    let got: Vec<f32> = a
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, want, "float32 draw vs the CPU reference");
    let off = philox_ref::words_consumed(n as u64, 4);
    assert_eq!(state(), (seed, off));
    // The next draw continues the stream.
    let b = rand(7, BF16);
    let want: Vec<u8> = philox_ref::uniform_bf16_bits(seed, off, 7)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(b, want, "bfloat16 draw");
    let off = off + philox_ref::words_consumed(7, 4);
    let c = rand(9, F16);
    let want: Vec<u8> = philox_ref::uniform_f16_bits(seed, off, 9)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(c, want, "float16 draw");
    let off = off + philox_ref::words_consumed(9, 4);
    let d = rand(5, F64);
    let want: Vec<u8> = philox_ref::uniform_f64(seed, off, 5)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(d, want, "float64 draw");
    assert_eq!(state(), (seed, off + philox_ref::words_consumed(5, 2)));
    // Same seed, same numbers; another seed, other numbers.
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed) }, "seed");
    assert_eq!(rand(n as i64, F32), a, "determinism for a fixed seed");
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed + 1) }, "seed");
    assert_ne!(rand(n as i64, F32), a);
    // Empty draws consume nothing.
    let before = state();
    assert!(rand(0, F32).is_empty());
    assert_eq!(state(), before);
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn rand_is_uniform_on_0_1() {
    require_gpu("rand_is_uniform_on_0_1");
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, 2024) }, "seed");
    let n = 1usize << 22;
    let b = rand(n as i64, F32);
    let v: Vec<f32> = b
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(
        v.iter().all(|&x| (0.0..1.0).contains(&x)),
        "a value outside [0, 1)"
    );
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    // Standard error of the mean: sqrt(1/12 / n) = 1.4e-4.
    assert!((mean - 0.5).abs() < 1e-3, "mean {mean}");
    assert!((var - 1.0 / 12.0).abs() < 1e-3, "variance {var}");
    let bins = 256usize;
    let mut h = vec![0u64; bins];
    for &x in &v {
        h[(x * bins as f32) as usize] += 1;
    }
    let e = n as f64 / bins as f64;
    let chi2: f64 = h.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
    // 255 degrees of freedom: the 99.9th percentile is about 330.
    println!("rand f32: n {n}, mean {mean:.6}, variance {var:.6}, chi2(255) {chi2:.1}");
    assert!(chi2 < 330.0, "chi2 {chi2}");
    // Lag-1 correlation of consecutive values (different words and blocks).
    let c: f64 = v
        .windows(2)
        .map(|w| (f64::from(w[0]) - 0.5) * (f64::from(w[1]) - 0.5))
        .sum::<f64>()
        / (n as f64 - 1.0)
        * 12.0;
    assert!(c.abs() < 5e-3, "lag-1 correlation {c}");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn randint_bounds_reference_and_inductor_seeds() {
    require_gpu("randint_bounds_reference_and_inductor_seeds");
    randint_low_out_is_the_reference();
    randint_high_is_uniform();
    randint_low_bounds();
}

/// Inductor's seeds (randint_low_out over the whole int64 range) against the CPU reference;
/// a size other than `out`'s and high <= low are refused.
fn randint_low_out_is_the_reference() {
    let seed = 99u64;
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed) }, "seed");
    // Inductor's seeds: randint_low_out(out int64 [count], INT64_MIN, INT64_MAX, [count]).
    let count = 13i64;
    let (_b, out) = device_tensor(&vec![0u8; 8 * count as usize], I64, &[count], &[1]);
    // SAFETY: live handle; one size.
    ok(
        unsafe { (shims().randint_low_out)(out, i64::MIN, i64::MAX, &count, 1) },
        "randint_low_out",
    );
    let (b, _, _) = read_back(out, count as usize, 1);
    let got: Vec<i64> = b
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want = philox_ref::randint_i64(seed, 0, i64::MIN, u64::MAX, count as usize);
    assert_eq!(got, want, "seeds vs the CPU reference");
    assert_eq!(state().1, philox_ref::words_consumed(count as u64, 2));
    // A size that does not match `out` is refused (no resize).
    let other = 12i64;
    // SAFETY: live handle; one size.
    let rc = unsafe { (shims().randint_low_out)(out, 0, 5, &other, 1) };
    assert_eq!(rc, 1);
    // high <= low is refused.
    // SAFETY: live handle; one size.
    let rc = unsafe { (shims().randint_low_out)(out, 5, 5, &count, 1) };
    assert_eq!(rc, 1);
    assert!(last_error().contains("less than"), "{}", last_error());
    delete(out);
}

/// randint(high) in int64: bounds, every value drawn, roughly uniform.
fn randint_high_is_uniform() {
    // randint(high) in int64: bounds, every value drawn, roughly uniform.
    let n = 100_000i64;
    let mut h: H = std::ptr::null_mut();
    // SAFETY: one size, null optional args, out-pointer to a local.
    let rc = unsafe {
        (shims().randint)(
            10,
            &n,
            1,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            -1,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    ok(rc, "randint");
    let (b, _, dt) = read_back(h, n as usize, 1);
    assert_eq!(dt, I64);
    let v: Vec<i64> = b
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let mut counts = [0u64; 10];
    for &x in &v {
        assert!((0..10).contains(&x), "{x} outside [0, 10)");
        counts[x as usize] += 1;
    }
    let e = n as f64 / 10.0;
    let chi2: f64 = counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
    println!("randint(10): counts {counts:?}, chi2(9) {chi2:.1}");
    assert!(
        chi2 < 27.9,
        "chi2 {chi2} (99.9th percentile of 9 dof: 27.9)"
    );
    delete(h);
}

/// randint_low in int32 within its bounds, and refused out of the dtype's range.
fn randint_low_bounds() {
    // randint_low(-5, 17) in int32.
    let mut h: H = std::ptr::null_mut();
    let mut dt = I32;
    let m = 5000i64;
    // SAFETY: as above; dtype points to a local.
    let rc = unsafe {
        (shims().randint_low)(
            -5,
            17,
            &m,
            1,
            &mut dt,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    ok(rc, "randint_low");
    let (b, _, got_dt) = read_back(h, m as usize, 1);
    assert_eq!(got_dt, I32);
    let v: Vec<i32> = b
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(v.iter().all(|x| (-5..17).contains(x)));
    assert!(
        (-5..17).all(|x| v.contains(&x)),
        "every value of [-5, 17) drawn"
    );
    delete(h);
    // Out of the dtype's range.
    let mut dt = U8;
    // SAFETY: as above.
    let rc = unsafe {
        (shims().randint_low)(
            0,
            300,
            &m,
            1,
            &mut dt,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    assert_eq!(rc, 1);
    assert!(last_error().contains("out of bounds"), "{}", last_error());
}
