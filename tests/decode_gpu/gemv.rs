// ------------------------------------------------------------------ GEMV

struct GemvCase {
    m: usize,
    n: usize,
    k: usize,
    dt: i32,
    bias: bool,
    /// Element offset of x inside its buffer (1: misaligned, generic path).
    x_off: i64,
    /// W stored transposed ([K, N] memory, strides (1, N)): generic path.
    w_t: bool,
    /// x as [2, m/2, K] (rank 3) when m is even.
    rank3: bool,
    /// Extra elements at the end of every row of x and of W (row stride K + pad);
    /// a multiple of 8 keeps the fast path.
    pad: usize,
}

/// `v` (rows of `k` values) laid out with a row stride of `k + pad` (padding 0.5).
fn padded(v: &[f32], k: usize, pad: usize) -> Vec<f32> {
    if pad == 0 || k == 0 {
        return v.to_vec();
    }
    v.chunks(k)
        .flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(0.5, pad)))
        .collect()
}

fn run_gemv(c: &GemvCase, seed: u64) -> (f32, bool) {
    let mut rng = Rng(seed | 1);
    let (m, n, k) = (c.m, c.n, c.k);
    let x = rng.vec(m * k);
    let w = rng.vec(n * k);
    let bias = rng.vec(n);
    let mut xb = vec![0u8; c.x_off as usize * 2];
    xb.extend(encode(&padded(&x, k, c.pad), c.dt));
    let wmem: Vec<f32> = if c.w_t {
        (0..k * n).map(|i| w[(i % n) * k + i / n]).collect()
    } else {
        padded(&w, k, c.pad)
    };
    let (xd, wd, bd) = (
        DevBuf::from_host(&xb),
        DevBuf::from_host(&encode(&wmem, c.dt)),
        DevBuf::from_host(&encode(&bias, c.dt)),
    );
    let (mi, ni, ki) = (m as i64, n as i64, k as i64);
    let row = ki + c.pad as i64;
    let (xs, xst): (Vec<i64>, Vec<i64>) = if c.rank3 && m % 2 == 0 {
        (vec![2, mi / 2, ki], vec![mi / 2 * row, row, 1])
    } else {
        (vec![mi, ki], vec![row, 1])
    };
    let xh = wrap(&xd, c.x_off, &xs, &xst, c.dt);
    let wh = if c.w_t {
        wrap(&wd, 0, &[ni, ki], &[1, ni], c.dt)
    } else {
        wrap(&wd, 0, &[ni, ki], &[row, 1], c.dt)
    };
    let bh = wrap(&bd, 0, &[ni], &[1], c.dt);
    let mut y = std::ptr::null_mut();
    // SAFETY: live handles; out-pointer to a local.
    let st = unsafe {
        if c.bias {
            (shims().gemv_bias)(xh.0, wh.0, bh.0, &mut y)
        } else {
            (shims().gemv)(xh.0, wh.0, &mut y)
        }
    };
    assert_eq!(st, 0, "et_gemv M={m} N={n} K={k}: {}", last_error());
    let y = Handle(y);
    let got = read(&y, m * n, c.dt);
    let want = gemv_ref(&x, &w, c.bias.then_some(&bias[..]), m, n, k);
    check_close(&got, &want, c.dt)
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn gemv_matches_fp32_reference() {
    require_gpu("gemv_matches_fp32_reference");
    let mut fails = Vec::new();
    let mut count = 0;
    let mut worst = 0f32;
    let cases = gemv_cases();
    for v in GEMV_VARIANTS {
        set_gemv_variant(v);
        for (i, c) in cases.iter().enumerate() {
            let (err, ok) = run_gemv(c, 1000 + i as u64);
            count += 1;
            worst = worst.max(err);
            if !ok {
                fails.push(format!(
                    "{} M={} N={} K={} dt={} bias={} x_off={} w_t={} rank3={} pad={}: max err {err}",
                    variant_name(v),
                    c.m,
                    c.n,
                    c.k,
                    c.dt,
                    c.bias,
                    c.x_off,
                    c.w_t,
                    c.rank3,
                    c.pad
                ));
            }
        }
    }
    set_gemv_variant(-1);
    println!(
        "gemv: {count} cases ({} variants), largest abs error {worst:.3e}, {} failures",
        GEMV_VARIANTS.len(),
        fails.len()
    );
    assert!(fails.is_empty(), "{fails:#?}");
}

/// The cases of `gemv_matches_fp32_reference`, for bf16 then fp16: M = 1..16 on a small shape,
/// the fast path's tails, larger shapes, then odd K, misaligned x, transposed W, bias, rank-3 x.
fn gemv_cases() -> Vec<GemvCase> {
    let base = |m, n, k, dt| GemvCase {
        m,
        n,
        k,
        dt,
        bias: false,
        x_off: 0,
        w_t: false,
        rank3: false,
        pad: 0,
    };
    let mut cases = Vec::new();
    for dt in [BF16, F16] {
        for m in 1..=16 {
            cases.push(base(m, 37, 264, dt));
        }
        // Tails of the fast path: K a multiple of 8 but not of 32 or 256, N not a multiple
        // of 8, 16 or 32, more rows than one block row (M > 16), padded row strides.
        for (m, n, k) in [
            (1, 2049, 2056),
            (2, 1003, 8200),
            (3, 131, 776),
            (4, 8195, 520),
            (4, 33, 8),
            (1, 7, 40),
            (9, 100, 264),
            (20, 41, 96),
        ] {
            cases.push(base(m, n, k, dt));
        }
        cases.push(GemvCase {
            pad: 8,
            ..base(3, 45, 1032, dt)
        });
        cases.push(GemvCase {
            pad: 24,
            bias: true,
            ..base(4, 70, 264, dt)
        });
        for (m, n, k) in [
            (1, 1, 8),
            (1, 2048, 2048),
            (4, 8192, 2048),
            (2, 2048, 8192),
            (3, 4099, 1000),
            (17, 70, 520),
            (33, 9, 256),
            (1, 5, 0),
        ] {
            cases.push(base(m, n, k, dt));
        }
        // Odd K, misaligned x, transposed W, bias, rank-3 x.
        cases.push(base(2, 33, 13, dt));
        cases.push(base(5, 31, 1001, dt));
        cases.push(GemvCase {
            x_off: 1,
            ..base(3, 40, 512, dt)
        });
        cases.push(GemvCase {
            w_t: true,
            ..base(4, 24, 96, dt)
        });
        cases.push(GemvCase {
            bias: true,
            ..base(1, 2050, 2048, dt)
        });
        cases.push(GemvCase {
            bias: true,
            ..base(7, 19, 23, dt)
        });
        cases.push(GemvCase {
            rank3: true,
            bias: true,
            ..base(6, 64, 128, dt)
        });
    }
    cases
}

/// The four GEMV shapes of the Llama-3.2-1B decoder ([N, K] weights: q/o projections,
/// gate/up, down, the head), the target of issue 21.
const MODEL_SHAPES: [(usize, usize); 4] =
    [(2048, 2048), (8192, 2048), (2048, 8192), (128256, 2048)];

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn gemv_model_shapes_match_fp32_reference() {
    require_gpu("gemv_model_shapes_match_fp32_reference");
    let mut rng = Rng(77);
    let mut fails = Vec::new();
    let (mut count, mut worst) = (0, 0f32);
    for (n, k) in MODEL_SHAPES {
        // One x of 4 rows and one reference; M = 1..4 use the first M rows of both.
        let x = rng.vec(4 * k);
        let w = rng.vec(n * k);
        let bias = rng.vec(n);
        let want4 = gemv_ref(&x, &w, None, 4, n, k);
        let (xd, wd, bd) = (
            DevBuf::from_host(&encode(&x, BF16)),
            DevBuf::from_host(&encode(&w, BF16)),
            DevBuf::from_host(&encode(&bias, BF16)),
        );
        let (ni, ki) = (n as i64, k as i64);
        let wh = wrap(&wd, 0, &[ni, ki], &[ki, 1], BF16);
        let bh = wrap(&bd, 0, &[ni], &[1], BF16);
        for m in 1..=4usize {
            let xh = wrap(&xd, 0, &[m as i64, ki], &[ki, 1], BF16);
            let with_bias = m == 3;
            let want: Vec<f32> = want4[..m * n]
                .iter()
                .enumerate()
                .map(|(i, &r)| if with_bias { r + bias[i % n] } else { r })
                .collect();
            for v in GEMV_VARIANTS {
                set_gemv_variant(v);
                let mut y = std::ptr::null_mut();
                // SAFETY: live handles; out-pointer to a local.
                let st = unsafe {
                    if with_bias {
                        (shims().gemv_bias)(xh.0, wh.0, bh.0, &mut y)
                    } else {
                        (shims().gemv)(xh.0, wh.0, &mut y)
                    }
                };
                assert_eq!(st, 0, "et_gemv M={m} N={n} K={k}: {}", last_error());
                let y = Handle(y);
                let (err, ok) = check_close(&read(&y, m * n, BF16), &want, BF16);
                count += 1;
                worst = worst.max(err);
                if !ok {
                    fails.push(format!(
                        "{} M={m} N={n} K={k} bias={with_bias}: max err {err}",
                        variant_name(v)
                    ));
                }
            }
        }
    }
    set_gemv_variant(-1);
    println!(
        "gemv model shapes: {count} cases (M = 1..4, 4 shapes, {} variants), largest abs error {worst:.3e}, {} failures",
        GEMV_VARIANTS.len(),
        fails.len()
    );
    assert!(fails.is_empty(), "{fails:#?}");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn gemv_refuses_bad_shapes_without_launching() {
    require_gpu("gemv_refuses_bad_shapes_without_launching");
    let xd = DevBuf::from_host(&vec![0u8; 4096]);
    let x = wrap(&xd, 0, &[2, 64], &[64, 1], BF16);
    let w = wrap(&xd, 0, &[8, 63], &[63, 1], BF16);
    let wf = wrap(&xd, 0, &[8, 64], &[64, 1], F16);
    let mut y = std::ptr::null_mut();
    // SAFETY: live handles, out-pointer to a local.
    assert_ne!(unsafe { (shims().gemv)(x.0, w.0, &mut y) }, 0);
    assert!(last_error().contains("disagree on K"), "{}", last_error());
    // SAFETY: as above.
    assert_ne!(unsafe { (shims().gemv)(x.0, wf.0, &mut y) }, 0);
    assert!(last_error().contains("one dtype"), "{}", last_error());
    assert!(y.is_null());
}
