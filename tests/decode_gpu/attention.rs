// ------------------------------------------------------------------ attention

#[derive(Clone, Copy)]
enum Pos {
    /// Device tensor with one position per query.
    PerQuery,
    /// Device tensor with the first query's position.
    First,
    /// Host valid_len.
    Len,
}

#[allow(clippy::too_many_arguments)]
fn run_attn(
    (b, hq, hkv, lq, lmax, d): (usize, usize, usize, usize, usize, usize),
    fill: usize,
    dt: i32,
    pos_kind: Pos,
    bshd_cache: bool,
    seed: u64,
) -> (f32, bool) {
    let mut rng = Rng(seed | 1);
    let q = rng.vec(b * hq * lq * d);
    let k = rng.vec(b * hkv * lmax * d);
    let v = rng.vec(b * hkv * lmax * d);
    // Positions: the new tokens are the last lq of `fill` valid positions.
    let pos: Vec<i64> = (0..lq).map(|i| (fill - lq + i) as i64).collect();
    let scale = 1.0 / (d as f32).sqrt();
    // The caches in [b, hkv, lmax, d] order, or stored [b, lmax, hkv, d] and viewed transposed.
    let (kmem, vmem, kstr) = if bshd_cache {
        let perm = |src: &[f32]| {
            let mut o = vec![0f32; src.len()];
            for bi in 0..b {
                for h in 0..hkv {
                    for l in 0..lmax {
                        for t in 0..d {
                            o[((bi * lmax + l) * hkv + h) * d + t] =
                                src[((bi * hkv + h) * lmax + l) * d + t];
                        }
                    }
                }
            }
            o
        };
        let s = vec![(lmax * hkv * d) as i64, d as i64, (hkv * d) as i64, 1];
        (perm(&k), perm(&v), s)
    } else {
        (
            k.clone(),
            v.clone(),
            contiguous(&[b as i64, hkv as i64, lmax as i64, d as i64]),
        )
    };
    let qd = DevBuf::from_host(&encode(&q, dt));
    let kd = DevBuf::from_host(&encode(&kmem, dt));
    let vd = DevBuf::from_host(&encode(&vmem, dt));
    let pbytes: Vec<u8> = match pos_kind {
        Pos::First => pos[0].to_le_bytes().to_vec(),
        _ => pos.iter().flat_map(|p| p.to_le_bytes()).collect(),
    };
    let pd = DevBuf::from_host(&pbytes);
    let qs = [b as i64, hq as i64, lq as i64, d as i64];
    let cs = [b as i64, hkv as i64, lmax as i64, d as i64];
    let qh = wrap(&qd, 0, &qs, &contiguous(&qs), dt);
    let kh = wrap(&kd, 0, &cs, &kstr, dt);
    let vh = wrap(&vd, 0, &cs, &kstr, dt);
    let ph = match pos_kind {
        Pos::First => wrap(&pd, 0, &[1], &[1], I64),
        _ => wrap(&pd, 0, &[lq as i64], &[1], I64),
    };
    let mut out = std::ptr::null_mut();
    // SAFETY: live handles; out-pointer to a local.
    let st = unsafe {
        match pos_kind {
            Pos::Len => {
                (shims().attn_len)(qh.0, kh.0, vh.0, fill as i64, f64::from(scale), &mut out)
            }
            _ => (shims().attn)(qh.0, kh.0, vh.0, ph.0, f64::from(scale), &mut out),
        }
    };
    assert_eq!(st, 0, "decode_attention: {}", last_error());
    let out = Handle(out);
    let got = read(&out, b * hq * lq * d, dt);
    let want = attn_ref(&q, &k, &v, &pos, (b, hq, hkv, lq, lmax, d), scale);
    check_close(&got, &want, dt)
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn decode_attention_matches_fp32_reference() {
    require_gpu("decode_attention_matches_fp32_reference");
    let mut t = Tally::default();
    let mut seed = 7u64;
    let lmax = 1024;
    for d in [64, 128, 256] {
        for g in [1, 2, 4, 8] {
            for fill in [1, 17, 511, 1024] {
                for lq in [1, 3, 16] {
                    if lq > fill {
                        continue;
                    }
                    let hkv = 2;
                    let b = if lq == 3 { 2 } else { 1 };
                    let dt = if fill == 17 { F16 } else { BF16 };
                    let kinds: &[Pos] = match fill {
                        1 | 1024 => &[Pos::PerQuery, Pos::Len],
                        _ => &[Pos::First],
                    };
                    for &pk in kinds {
                        seed += 1;
                        let bshd = g == 2 && lq == 3;
                        let shape = (b, g * hkv, hkv, lq, lmax, d);
                        t.each_split(
                            || format!("D={d} g={g} fill={fill} Lq={lq} B={b} dt={dt} bshd={bshd}"),
                            || run_attn(shape, fill, dt, pk, bshd, seed),
                        );
                    }
                }
            }
        }
    }
    // Llama-3.2-1B's decode shape and an odd cache length.
    for (shape, fill) in [((1, 32, 8, 1, 1024, 64), 700), ((1, 4, 1, 2, 77, 128), 77)] {
        seed += 1;
        t.each_split(
            || format!("{shape:?} fill={fill}"),
            || run_attn(shape, fill, BF16, Pos::First, false, seed),
        );
    }
    let Tally(count, worst, fails) = t;
    println!(
        "decode_attention: {count} cases, largest abs error {worst:.3e}, {} failures",
        fails.len()
    );
    assert!(fails.is_empty(), "{fails:#?}");
}

/// `x` rounded to `dt` (round to nearest even; fp16 within its normal range and subnormals).
fn round_to(x: f32, dt: i32) -> f32 {
    if dt != BF16 {
        if x == 0.0 || !x.is_finite() {
            return x;
        }
        let ulp = 2f32.powi((x.abs().log2().floor() as i32).max(-14) - 10);
        return (x / ulp).round_ties_even() * ulp;
    }
    let b = x.to_bits();
    f32::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
}

/// `x * cos + rotate_half(x) * sin` over rows of `d`, each value rounded to `dt`; cos/sin
/// rows are picked by `row_of(row index)`.
fn rope_rows(
    x: &[f32],
    c: &[f32],
    s: &[f32],
    d: usize,
    dt: i32,
    row_of: &dyn Fn(usize) -> usize,
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for (r, (xr, o)) in x.chunks(d).zip(out.chunks_mut(d)).enumerate() {
        let cr = &c[row_of(r) * d..][..d];
        let sr = &s[row_of(r) * d..][..d];
        for t in 0..d {
            let rot = if t < d / 2 {
                -xr[t + d / 2]
            } else {
                xr[t - d / 2]
            };
            o[t] = round_to(xr[t] * cr[t] + rot * sr[t], dt);
        }
    }
    out
}

/// Rows of `d` RMS-normed as the kernel does (mode 1: `w * (x*r).to(T)`, 2: `(x*r*(off + w)).to(T)`).
fn norm_rows(x: &[f32], w: &[f32], (mode, off): (i64, f32), dt: i32) -> Vec<f32> {
    let eps = 1e-6f32;
    let mut out = vec![0f32; x.len()];
    for (xr, o) in x.chunks(w.len()).zip(out.chunks_mut(w.len())) {
        let r = 1.0 / (xr.iter().map(|v| v * v).sum::<f32>() / w.len() as f32 + eps).sqrt();
        for t in 0..w.len() {
            o[t] = if mode == 1 {
                round_to(w[t] * round_to(xr[t] * r, dt), dt)
            } else {
                round_to(xr[t] * r * (off + w[t]), dt)
            };
        }
    }
    out
}

/// One et_attention_rope call against the reference: the output and both caches (the rows the
/// call writes, and that nothing else changed). cos/sin are `[cb, 1, lq, d]`; `norm`: the
/// heads' RMSNorm (mode, offset) before the rotation; `packed`: q, the new keys and the new
/// values as column ranges of one `[B, Lq, N]` row (values, then q, then keys, then 8 unused
/// columns), through et_attention_rope_qkv.
fn run_attn_rope(
    (b, hq, hkv, lq, lmax, d): (usize, usize, usize, usize, usize, usize),
    fill: usize,
    dt: i32,
    (cb, norm, packed): (usize, Option<(i64, f32)>, bool),
    seed: u64,
) -> (f32, bool) {
    let mut rng = Rng(seed | 1);
    let q0 = rng.vec(b * hq * lq * d);
    let kn0 = rng.vec(b * hkv * lq * d);
    let (qw, kw) = (rng.vec(d), rng.vec(d));
    let wbufs = [
        DevBuf::from_host(&encode(&qw, dt)),
        DevBuf::from_host(&encode(&kw, dt)),
    ];
    let wh: Vec<Handle> = wbufs
        .iter()
        .map(|w| wrap(w, 0, &[d as i64], &[1], dt))
        .collect();
    let (q, kn) = match norm {
        Some(m) => (norm_rows(&q0, &qw, m, dt), norm_rows(&kn0, &kw, m, dt)),
        None => (q0.clone(), kn0.clone()),
    };
    let vn = rng.vec(b * hkv * lq * d);
    let (c, sn) = (rng.vec(cb * lq * d), rng.vec(cb * lq * d));
    let mut k = rng.vec(b * hkv * lmax * d);
    let mut v = rng.vec(b * hkv * lmax * d);
    let pos: Vec<i64> = (0..lq).map(|i| (fill - lq + i) as i64).collect();
    let scale = 1.0 / (d as f32).sqrt();
    let bufs: Vec<DevBuf> = [&q0, &kn0, &vn, &c, &sn, &k, &v]
        .iter()
        .map(|x| DevBuf::from_host(&encode(x, dt)))
        .collect();
    let pd = DevBuf::from_host(
        &pos.iter()
            .flat_map(|p| p.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    let (qs, ns) = ([b, hq, lq, d], [b, hkv, lq, d]);
    let (cs, ks) = ([cb, 1, lq, d], [b, hkv, lmax, d]);
    let h = |i: usize, sz: [usize; 4]| {
        let sz: Vec<i64> = sz.iter().map(|&x| x as i64).collect();
        wrap(&bufs[i], 0, &sz, &contiguous(&sz), dt)
    };
    let (qh, knh, vnh, ch, sh) = (h(0, qs), h(1, ns), h(2, ns), h(3, cs), h(4, cs));
    let (kh, vh) = (h(5, ks), h(6, ks));
    let ph = wrap(&pd, 0, &[lq as i64], &[1], I64);
    let mut out = std::ptr::null_mut();
    let (qn_ptr, kn_ptr) = norm_weight_ptrs(&wh, norm.is_some());
    let (row, width, (v_off, q_off, k_off)) = packed_qkv(&vn, &q0, &kn0, (b, hq, hkv, lq, d));
    let qkv_buf = DevBuf::from_host(&encode(&row, dt));
    let qkv_sizes = [b as i64, lq as i64, width as i64];
    let qkvh = wrap(&qkv_buf, 0, &qkv_sizes, &contiguous(&qkv_sizes), dt);
    let st = call_attn_rope(
        packed.then_some(&qkvh),
        [&qh, &knh, &vnh, &kh, &vh, &ph, &ch, &sh],
        (scale, hq, (v_off, q_off, k_off)),
        (qn_ptr, kn_ptr, norm),
        &mut out,
    );
    assert_eq!(st, 0, "attention_rope: {}", last_error());
    let out = Handle(out);
    // Reference: rotate, write, attend. Rows of q are (b, h, i); of the new keys (b, hkv, i).
    let dims = (b, hq, hkv, lq, lmax, d);
    let want = attn_rope_ref(
        (&q, &kn, &vn),
        (&c, &sn, cb),
        &pos,
        (&mut k, &mut v),
        dims,
        (scale, dt),
    );
    // The result is [B, Hq, Lq, D] laid out [B, Lq, Hq, D].
    let got_bthd = read(&out, b * hq * lq * d, dt);
    let got = bthd_to_bhtd(&got_bthd, (b, hq, lq, d));
    let (err, ok) = check_close(&got, &want, dt);
    let caches_ok = caches_match(&bufs[5], &bufs[6], &k, &v, norm.is_some(), dt);
    (err, ok && caches_ok)
}

/// The et_attention_rope call, or et_attention_rope_qkv on the packed row `qkvh` when there
/// is one; the handles: q, the new keys and values, the caches, positions, cos and sin.
#[allow(clippy::type_complexity)]
fn call_attn_rope(
    qkvh: Option<&Handle>,
    [qh, knh, vnh, kh, vh, ph, ch, sh]: [&Handle; 8],
    (scale, hq, (v_off, q_off, k_off)): (f32, usize, (usize, usize, usize)),
    (qn_ptr, kn_ptr, norm): (*const *mut c_void, *const *mut c_void, Option<(i64, f32)>),
    out: &mut *mut c_void,
) -> i32 {
    if let Some(qkvh) = qkvh {
        // SAFETY: live handles; `out` points at the caller's local.
        unsafe {
            (shims().attn_rope_qkv)(
                qkvh.0,
                kh.0,
                vh.0,
                ph.0,
                ch.0,
                sh.0,
                f64::from(scale),
                0,
                hq as i64,
                q_off as i64,
                k_off as i64,
                v_off as i64,
                qn_ptr,
                kn_ptr,
                norm.map_or(0, |m| m.0),
                1e-6,
                norm.map_or(0.0, |m| f64::from(m.1)),
                out,
            )
        }
    } else {
        // SAFETY: live handles; `out` points at the caller's local.
        unsafe {
            (shims().attn_rope)(
                qh.0,
                knh.0,
                vnh.0,
                kh.0,
                vh.0,
                ph.0,
                ch.0,
                sh.0,
                f64::from(scale),
                0,
                qn_ptr,
                kn_ptr,
                norm.map_or(0, |m| m.0),
                1e-6,
                norm.map_or(0.0, |m| f64::from(m.1)),
                out,
            )
        }
    }
}

/// Pointers to the handles of the q and k norm weights `wh`, or nulls without a norm.
fn norm_weight_ptrs(wh: &[Handle], normed: bool) -> (*const *mut c_void, *const *mut c_void) {
    if normed {
        (
            &wh[0].0 as *const *mut c_void,
            &wh[1].0 as *const *mut c_void,
        )
    } else {
        (std::ptr::null(), std::ptr::null())
    }
}

/// Whether the caches on the device (`kd`, `vd`) hold `k` and `v`. Without a norm every written
/// key is exact; the norm's rsqrt may move a value by an ulp.
fn caches_match(kd: &DevBuf, vd: &DevBuf, k: &[f32], v: &[f32], normed: bool, dt: i32) -> bool {
    let kc = decode(&to_host(kd.ptr(), k.len() * 2), dt);
    let vc = decode(&to_host(vd.ptr(), v.len() * 2), dt);
    let keys_ok = if !normed {
        kc == k
    } else {
        check_close(&kc, k, dt).1
    };
    keys_ok && vc == v
}

/// The packed row of et_attention_rope_qkv: [v | q | k | 8 unused] per (b, i), from the
/// [B, H, Lq, D] arrays; with its width and the (v, q, k) column offsets.
#[allow(clippy::type_complexity)]
fn packed_qkv(
    vn: &[f32],
    q0: &[f32],
    kn0: &[f32],
    (b, hq, hkv, lq, d): (usize, usize, usize, usize, usize),
) -> (Vec<f32>, usize, (usize, usize, usize)) {
    let width = (hq + 2 * hkv) * d + 8;
    let (v_off, q_off, k_off) = (0, hkv * d, (hq + hkv) * d);
    let mut row = vec![0f32; b * lq * width];
    for (src, off, heads) in [(vn, v_off, hkv), (q0, q_off, hq), (kn0, k_off, hkv)] {
        for bi in 0..b {
            for hh in 0..heads {
                for i in 0..lq {
                    let from = ((bi * heads + hh) * lq + i) * d;
                    let to = (bi * lq + i) * width + off + hh * d;
                    row[to..to + d].copy_from_slice(&src[from..from + d]);
                }
            }
        }
    }
    (row, width, (v_off, q_off, k_off))
}

/// et_attention_rope's reference: q and the new keys rotated (cos/sin rows `[cb, 1, lq, d]`),
/// the rotated keys and the new values written into the caches `k`, `v` at `pos`, attention.
#[allow(clippy::type_complexity)]
fn attn_rope_ref(
    (q, kn, vn): (&[f32], &[f32], &[f32]),
    (c, sn, cb): (&[f32], &[f32], usize),
    pos: &[i64],
    (k, v): (&mut [f32], &mut [f32]),
    (b, hq, hkv, lq, lmax, d): (usize, usize, usize, usize, usize, usize),
    (scale, dt): (f32, i32),
) -> Vec<f32> {
    let crow = |bi: usize, i: usize| if cb == 1 { i } else { bi * lq + i };
    let qr = rope_rows(q, c, sn, d, dt, &|r| crow(r / (hq * lq), r % lq));
    let kr = rope_rows(kn, c, sn, d, dt, &|r| crow(r / (hkv * lq), r % lq));
    for bi in 0..b {
        for hh in 0..hkv {
            for (i, &p) in pos.iter().enumerate() {
                let src = ((bi * hkv + hh) * lq + i) * d;
                let dst = ((bi * hkv + hh) * lmax + p as usize) * d;
                k[dst..dst + d].copy_from_slice(&kr[src..src + d]);
                v[dst..dst + d].copy_from_slice(&vn[src..src + d]);
            }
        }
    }
    attn_ref(&qr, k, v, pos, (b, hq, hkv, lq, lmax, d), scale)
}

/// `[B, Lq, Hq, D]` rows reordered `[B, Hq, Lq, D]`.
fn bthd_to_bhtd(got_bthd: &[f32], (b, hq, lq, d): (usize, usize, usize, usize)) -> Vec<f32> {
    let mut got = vec![0f32; got_bthd.len()];
    for bi in 0..b {
        for hh in 0..hq {
            for i in 0..lq {
                let src = ((bi * lq + i) * hq + hh) * d;
                let dst = ((bi * hq + hh) * lq + i) * d;
                got[dst..dst + d].copy_from_slice(&got_bthd[src..src + d]);
            }
        }
    }
    got
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn attention_rope_writes_the_caches_and_matches_the_reference() {
    require_gpu("attention_rope_writes_the_caches_and_matches_the_reference");
    let (mut t, mut seed) = (Tally::default(), 99u64);
    // (shape, fill, cos batch): the short-context kernel writing itself (rows <= 8, or 4 at
    // D = 256), and the write kernel before the split kernel (more rows, long caches).
    type Case = ((usize, usize, usize, usize, usize, usize), usize, usize);
    let cases: &[Case] = &[
        ((1, 32, 8, 1, 512, 64), 1, 1),
        ((1, 32, 8, 1, 512, 64), 300, 1),
        ((1, 16, 8, 1, 256, 128), 77, 1),
        ((1, 16, 8, 1, 256, 64), 100, 1),
        ((1, 8, 1, 1, 128, 128), 128, 1),
        ((1, 4, 1, 1, 64, 256), 40, 1),
        ((1, 4, 1, 1, 512, 256), 300, 1),
        ((1, 2, 1, 2, 128, 256), 70, 1),
        ((2, 8, 2, 2, 96, 64), 50, 2),
        ((1, 32, 8, 7, 512, 64), 7, 1),
        ((2, 16, 8, 5, 300, 128), 120, 1),
        ((1, 8, 2, 3, 4096, 256), 3000, 1),
        ((1, 32, 8, 1, 4096, 64), 2500, 1),
    ];
    // The heads' norms: none, Qwen3's (mode 1), Gemma-3's (mode 2, offset 1).
    for &(shape, fill, cb) in cases {
        for dt in [BF16, F16] {
            for norm in [None, Some((1, 0.0)), Some((2, 1.0))] {
                for packed in [false, true] {
                    seed += 1;
                    t.each_split(
                        || format!("{shape:?} fill={fill} cos batch {cb} dt={dt} norm {norm:?} packed {packed}"),
                        || run_attn_rope(shape, fill, dt, (cb, norm, packed), seed),
                    );
                }
            }
        }
    }
    let Tally(count, worst, fails) = t;
    println!(
        "attention_rope: {count} cases, largest abs error {worst:.3e}, {} failures",
        fails.len()
    );
    assert!(fails.is_empty(), "{fails:#?}");
}
