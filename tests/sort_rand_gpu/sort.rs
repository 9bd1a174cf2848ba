/// Sort through the shim and compare with the CPU reference; returns a failure description.
fn check_sort(
    dt: i32,
    sizes: &[i64],
    strides: &[i64],
    dim: i64,
    desc: bool,
    seed: u64,
    distinct: u64,
) -> Option<String> {
    let numel: usize = sizes.iter().product::<i64>() as usize;
    let input = make_input(dt, numel, seed, distinct);
    let (_buf, x) = device_tensor(&input, dt, sizes, strides);
    let (mut v, mut i): (H, H) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mut stable = 1i32;
    // SAFETY: live handle, out-pointers to locals.
    let rc = unsafe { (shims().sort)(x, &mut stable, dim, i32::from(desc), &mut v, &mut i) };
    ok(rc, "sort_stable");
    let rank = sizes.len();
    let (vb, vst, vdt) = read_back(v, numel, rank);
    let (ib, ist, idt) = read_back(i, numel, rank);
    delete(v);
    delete(i);
    delete(x);
    let label = format!("dtype {dt} sizes {sizes:?} strides {strides:?} dim {dim} desc {desc}");
    assert_eq!((vdt, idt), (dt, I64), "{label}");
    assert_eq!(vst, ist, "{label}: values and indices strides");
    if rank == 0 {
        let idx = i64::from_le_bytes(ib[..8].try_into().unwrap());
        return (idx != 0 || vb != input).then(|| format!("{label}: 0-d sort"));
    }
    let d = if dim < 0 { dim + rank as i64 } else { dim } as usize;
    let n = sizes[d] as usize;
    // Every row: walk the other dimensions.
    let others: Vec<usize> = (0..rank).filter(|&k| k != d).collect();
    let rows: usize = others.iter().map(|&k| sizes[k] as usize).product();
    let es = esize(dt);
    for r in 0..rows {
        let (mut rem, mut in_o, mut out_o) = (r, 0i64, 0i64);
        for &k in others.iter().rev() {
            let c = (rem % sizes[k] as usize) as i64;
            rem /= sizes[k] as usize;
            in_o += c * strides[k];
            out_o += c * vst[k];
        }
        let at_in = |j: usize| (in_o + j as i64 * strides[d]) as usize;
        let mut want: Vec<usize> = (0..n).collect();
        want.sort_by(|&a, &b| {
            let o = order(value(dt, &input, at_in(a)), value(dt, &input, at_in(b)));
            if desc {
                o.reverse()
            } else {
                o
            }
        });
        for (j, &w) in want.iter().enumerate() {
            let o = (out_o + j as i64 * vst[d]) as usize;
            let got_i = i64::from_le_bytes(ib[o * 8..o * 8 + 8].try_into().unwrap());
            if got_i != w as i64 {
                return Some(format!(
                    "{label}: row {r} position {j}: index {got_i}, want {w}"
                ));
            }
            let src = at_in(w);
            if vb[o * es..(o + 1) * es] != input[src * es..(src + 1) * es] {
                return Some(format!("{label}: row {r} position {j}: value bits differ"));
            }
        }
    }
    None
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn sort_stable_matches_a_cpu_stable_sort() {
    require_gpu("sort_stable_matches_a_cpu_stable_sort");
    let mut fails = Vec::new();
    let mut cases = 0;
    // 1-d rows: one block (<= 2048) and the tiled merge path (> 2048), odd sizes, few
    // distinct values (many ties).
    for &dt in &[F32, BF16, F16, I64, I32, F64, U8, BOOL] {
        for &n in &[
            1i64, 2, 3, 7, 31, 33, 100, 1000, 2047, 2048, 2049, 5000, 70_001,
        ] {
            for desc in [false, true] {
                let distinct = if n > 100 { 17 } else { 5 };
                cases += 1;
                fails.extend(check_sort(dt, &[n], &[1], 0, desc, n as u64 + 7, distinct));
            }
        }
    }
    // Every dim of a 3-d tensor, contiguous and transposed (dense, non-contiguous).
    for &dt in &[F32, BF16, I64] {
        for dim in [0i64, 1, 2, -1] {
            for desc in [false, true] {
                let sizes = [3i64, 5, 7];
                cases += 2;
                fails.extend(check_sort(
                    dt,
                    &sizes,
                    &contiguous(&sizes),
                    dim,
                    desc,
                    11,
                    4,
                ));
                // Strides of a contiguous [7, 3, 5] buffer viewed as [3, 5, 7].
                fails.extend(check_sort(dt, &sizes, &[5, 1, 15], dim, desc, 12, 4));
            }
        }
    }
    // Many rows of a long dimension that is not the last one (strided rows, merge path).
    cases += 1;
    fails.extend(check_sort(F32, &[3000, 4], &[4, 1], 0, false, 13, 9));
    // MoE routing shape: [tokens, experts], descending along the experts.
    cases += 1;
    fails.extend(check_sort(BF16, &[37, 8], &[8, 1], -1, true, 14, 6));
    // 0-d and empty.
    cases += 1;
    fails.extend(check_sort(F32, &[], &[], 0, false, 15, 3));
    cases += 1;
    fails.extend(check_sort(F32, &[0, 4], &[4, 1], 1, false, 16, 3));
    println!("sort_stable: {cases} cases, {} failures", fails.len());
    assert!(fails.is_empty(), "{fails:#?}");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn sort_refuses_bad_arguments_with_a_message() {
    require_gpu("sort_refuses_bad_arguments_with_a_message");
    let (_b, x) = device_tensor(&[0u8; 16], F32, &[4], &[1]);
    let (mut v, mut i): (H, H) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: live handle, out-pointers to locals; null `stable` is allowed.
    let rc = unsafe { (shims().sort)(x, std::ptr::null_mut(), 3, 0, &mut v, &mut i) };
    assert_eq!(rc, 1);
    assert!(last_error().contains("out of range"), "{}", last_error());
    // SAFETY: as above, with a null ret1.
    let rc = unsafe { (shims().sort)(x, std::ptr::null_mut(), 0, 0, &mut v, std::ptr::null_mut()) };
    assert_eq!(rc, 1);
    delete(x);
}
