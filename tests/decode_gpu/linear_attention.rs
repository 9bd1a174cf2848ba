type Attention = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    f64,
    i64,
    *mut *mut c_void,
) -> i32;

/// Attention of one query row over keys `lo..=p` (fp64 softmax).
fn attn_row(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: usize,
    lo: usize,
    p: usize,
    scale: f32,
) -> Vec<f32> {
    let s: Vec<f64> = (lo..=p)
        .map(|j| {
            q.iter()
                .zip(&k[j * d..][..d])
                .map(|(a, b)| f64::from(a * b))
                .sum::<f64>()
                * f64::from(scale)
        })
        .collect();
    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
    let sum: f64 = e.iter().sum();
    let mut o = vec![0f32; d];
    for (t, w) in e.iter().enumerate() {
        for (oi, vi) in o.iter_mut().zip(&v[(lo + t) * d..][..d]) {
            *oi += (w / sum * f64::from(*vi)) as f32;
        }
    }
    o
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn attention_window_and_output_layout_match_reference() {
    require_gpu("attention_window_and_output_layout_match_reference");
    // SAFETY: the symbol has the `Attention` signature (src/shim/decode.rs).
    let attn: Attention = unsafe { std::mem::transmute(lib_sym("aoti_torch_cuda_et_attention")) };
    let mut rng = Rng(21);
    let mut fails = Vec::new();
    for (hq, hkv, lq, lmax, d, start, window) in [
        (32usize, 8usize, 1usize, 512usize, 64usize, 150usize, 0usize),
        (32, 8, 1, 512, 64, 150, 40),
        (16, 8, 3, 2048, 128, 1500, 0),
        (16, 8, 3, 2048, 128, 1500, 100),
        (8, 2, 5, 64, 64, 0, 3),
        // Gemma-3-1B's decode shape (D 256, one KV head), a sliding and a full layer.
        (4, 1, 1, 1024, 256, 700, 512),
        (4, 1, 1, 1024, 256, 700, 0),
        (4, 1, 2, 1024, 256, 700, 512),
    ] {
        let q = rng.vec(hq * lq * d);
        let (kc, vc) = (rng.vec(hkv * lmax * d), rng.vec(hkv * lmax * d));
        let (qd, kd, vd) = (
            DevBuf::from_host(&encode(&q, BF16)),
            DevBuf::from_host(&encode(&kc, BF16)),
            DevBuf::from_host(&encode(&vc, BF16)),
        );
        let pd = DevBuf::from_host(&(start as i64).to_le_bytes());
        let qs = [1, hq as i64, lq as i64, d as i64];
        let cs = [1, hkv as i64, lmax as i64, d as i64];
        let (qh, kh, vh) = (
            wrap(&qd, 0, &qs, &contiguous(&qs), BF16),
            wrap(&kd, 0, &cs, &contiguous(&cs), BF16),
            wrap(&vd, 0, &cs, &contiguous(&cs), BF16),
        );
        let ph = wrap(&pd, 0, &[1], &[1], I64);
        let mut o = std::ptr::null_mut();
        // SAFETY: live handles; out-pointer to a local.
        let st = unsafe { attn(qh.0, kh.0, vh.0, ph.0, 0.125, window as i64, &mut o) };
        assert_eq!(st, 0, "et_attention: {}", last_error());
        let o = Handle(o);
        // [1, Lq, Hq, D] in memory.
        let got = read(&o, hq * lq * d, BF16);
        let mut want = vec![0f32; hq * lq * d];
        for h in 0..hq {
            let kh_ = h / (hq / hkv);
            for i in 0..lq {
                let p = start + i;
                let lo = if window > 0 {
                    (p + 1).saturating_sub(window)
                } else {
                    0
                };
                let row = attn_row(
                    &q[(h * lq + i) * d..][..d],
                    &kc[kh_ * lmax * d..],
                    &vc[kh_ * lmax * d..],
                    d,
                    lo,
                    p,
                    0.125,
                );
                want[(i * hq + h) * d..][..d].copy_from_slice(&row);
            }
        }
        let (err, ok) = check_close(&got, &want, BF16);
        if !ok {
            fails.push(format!("Hq={hq} Hkv={hkv} Lq={lq} Lmax={lmax} D={d} start={start} window={window}: {err:.3e}"));
        }
    }
    assert!(fails.is_empty(), "{fails:#?}");
}
