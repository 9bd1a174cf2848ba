//! Unit tests of the decode attention's host side: the argument block's layout, the refusals, the splits.

use super::*;

use crate::kernels::cpu_tensor as t;

fn err(r: Result<Problem>) -> String {
    r.expect_err("should be refused").to_string()
}

#[test]
fn args_layout_matches_the_kernel() {
    // AttnArgs: 4 pointers/longs blocks, 9 ints/floats, 3 pointers (4 bytes of padding),
    // the window and out_bthd, then the rotation's fields.
    assert_eq!(
        std::mem::offset_of!(Args, out_bthd),
        8 * 15 + 36 + 4 + 24 + 4
    );
    assert_eq!(std::mem::offset_of!(Args, out), 8 * 15 + 36 + 4);
    assert_eq!(std::mem::offset_of!(Args, window), 8 * 15 + 36 + 4 + 24);
    // et_attention_rope's fields follow out_bthd: 4 pointers with 4 + 4 + 3 + 3 strides, two ints.
    assert_eq!(std::mem::offset_of!(Args, kn), 192);
    assert_eq!(std::mem::offset_of!(Args, vn), 192 + 40);
    assert_eq!(std::mem::offset_of!(Args, cs), 192 + 80);
    assert_eq!(std::mem::offset_of!(Args, sn), 192 + 112);
    assert_eq!(std::mem::offset_of!(Args, rope), 192 + 144);
    assert_eq!(std::mem::offset_of!(Args, write), 192 + 148);
    assert_eq!(std::mem::offset_of!(Args, qnw), 192 + 152);
    assert_eq!(std::mem::offset_of!(Args, norm_mode), 192 + 168);
    assert_eq!(std::mem::offset_of!(Args, norm_off), 192 + 176);
    assert_eq!(std::mem::size_of::<Args>(), 192 + 184);
}

#[test]
fn refusals_name_the_problem() {
    let bf = dtype::BFLOAT16;
    let q = t(bf, &[1, 8, 1, 64]);
    let k = t(bf, &[1, 2, 128, 64]);
    let pos = t(dtype::INT64, &[1]);
    let ok = Positions::Device(&pos);
    assert!(err(check(&q, &k, &t(bf, &[1, 2, 64, 64]), ok, 0.1)).contains("same sizes"));
    assert!(err(check(
        &t(bf, &[1, 8, 1, 96]),
        &t(bf, &[1, 2, 8, 96]),
        &t(bf, &[1, 2, 8, 96]),
        ok,
        0.1
    ))
    .contains("D = 96"));
    assert!(err(check(&t(bf, &[1, 3, 1, 64]), &k, &k, ok, 0.1)).contains("multiple of KV heads"));
    assert!(
        err(check(&q, &t(dtype::FLOAT16, &[1, 2, 128, 64]), &k, ok, 0.1)).contains("one dtype")
    );
    assert!(err(check(&t(bf, &[1, 8, 200, 64]), &k, &k, ok, 0.1)).contains("do not fit"));
    assert!(err(check(
        &q,
        &k,
        &k,
        Positions::Device(&t(dtype::INT32, &[1])),
        0.1
    ))
    .contains("int64"));
    assert!(err(check(
        &q,
        &k,
        &k,
        Positions::Device(&t(dtype::INT64, &[3])),
        0.1
    ))
    .contains("Lq = 1 or 1"));
    assert!(err(check(&q, &k, &k, Positions::ValidLen(0), 0.1)).contains("valid_len 0"));
    assert!(err(check(&q, &k, &k, Positions::ValidLen(129), 0.1)).contains("valid_len 129"));
    assert!(err(check(&q, &k, &k, ok, f64::NAN)).contains("not finite"));
    // A cache view with a stride that is not a multiple of 8 (every 4th position).
    let mut kv = t(bf, &[1, 2, 128, 64]);
    kv.strides = vec![2 * 128 * 64, 128 * 64, 68, 1];
    assert!(err(check(&q, &kv, &kv, ok, 0.1)).contains("multiples of 8"));
    // All right except that the tensors are on the CPU.
    assert!(err(check(&q, &k, &k, ok, 0.1)).contains("one CUDA device"));
    assert!(err(check(&q, &k, &k, Positions::ValidLen(17), 0.1)).contains("one CUDA device"));
}

#[test]
fn splits_cover_the_span_in_whole_tiles() {
    for (hq, hkv, lq, span) in [
        (32, 8, 1, 1024),
        (32, 8, 16, 1024),
        (8, 8, 1, 1),
        (8, 1, 4, 17),
        (16, 2, 3, 511),
        (4, 4, 1, 100_000),
    ] {
        let p = Problem {
            b: 1,
            hq,
            hkv,
            lq,
            lmax: span,
            d: 64,
            dtype: dtype::BFLOAT16,
            span,
            start: None,
            pos_n: 1,
            device: 0,
        };
        let (rg, chunk, nsplit) = split(&p, 132);
        assert_eq!(chunk % TILE, 0);
        assert!(
            chunk * nsplit >= span && chunk * (nsplit - 1) < span,
            "{chunk} {nsplit} {span}"
        );
        assert!(rg * ROWS >= hq / hkv * lq);
    }
}

#[test]
fn packed_qkv_views_lie_inside_the_row_or_are_refused() {
    let bf = crate::dtype::codes::BFLOAT16;
    // [B=1, Lq=3, N = (4 + 2 * 2) * 64 + 8]; cache [1, 2, 16, 64].
    let qkv = t(bf, &[1, 3, 520]);
    let kc = t(bf, &[1, 2, 16, 64]);
    let at = Packed {
        heads: 4,
        q_off: 128,
        k_off: 384,
        v_off: 0,
    };
    let [q, k, v] = split_packed(&qkv, &kc, at).expect("fits");
    assert_eq!(q.sizes, [1, 4, 3, 64]);
    assert_eq!(q.strides, [1560, 64, 520, 1]);
    assert_eq!(
        (q.storage_offset, k.storage_offset, v.storage_offset),
        (128, 384, 0)
    );
    assert_eq!(
        (k.sizes.clone(), v.sizes.clone()),
        (vec![1, 2, 3, 64], vec![1, 2, 3, 64])
    );
    let refused = |at: Packed, want: &str| {
        let e = split_packed(&qkv, &kc, at)
            .expect_err("refused")
            .to_string();
        assert!(e.contains(want), "{e}");
    };
    refused(
        Packed { k_off: 400, ..at },
        "k: 2 heads of 64 from column 400 do not fit a row of 520",
    );
    refused(Packed { q_off: -1, ..at }, "from column -1");
    refused(Packed { heads: 0, ..at }, "must be positive");
    refused(
        Packed {
            heads: i64::MAX,
            ..at
        },
        "do not fit",
    );
    refused(
        Packed {
            v_off: i64::MAX,
            ..at
        },
        "do not fit",
    );
    let e = split_packed(&t(bf, &[3, 520]), &kc, at)
        .expect_err("rank")
        .to_string();
    assert!(e.contains("qkv must be [B, Lq, N]"), "{e}");
}

#[test]
fn decode_splits_default_force_and_refuse() {
    let p = |b, hkv| Problem {
        b,
        hq: 4 * hkv,
        hkv,
        lq: 1,
        lmax: 512,
        d: 64,
        dtype: dtype::BFLOAT16,
        span: 512,
        start: None,
        pos_n: 1,
        device: 0,
    };
    if crate::switches::get().attn_splits.is_none() {
        // At most 32 blocks in all, at most 8 a KV head.
        assert_eq!(choice::wanted_splits(&p(1, 1), 1), 8);
        assert_eq!(choice::wanted_splits(&p(1, 8), 1), 4);
        assert_eq!(choice::wanted_splits(&p(2, 8), 1), 2);
        assert_eq!(choice::wanted_splits(&p(4, 32), 1), 1);
    }
    for bad in [0, 9, 100] {
        let e = set_decode_splits(Some(bad))
            .expect_err("refused")
            .to_string();
        assert!(e.contains(&format!("{bad} is not 1 to 8")), "{e}");
    }
    set_decode_splits(Some(3)).expect("3");
    assert_eq!(choice::wanted_splits(&p(1, 1), 1), 3);
    set_decode_splits(None).expect("unset");
    if crate::switches::get().attn_splits.is_none() {
        // Row groups count as pairs: 4 groups of Gemma-3's one KV head take 8 blocks each.
        assert_eq!(choice::wanted_splits(&p(1, 1), 4), 8);
        assert_eq!(choice::wanted_splits(&p(1, 8), 2), 2);
    }
}

#[test]
fn decode_rows_default_force_and_refuse() {
    // (Hq, Hkv, Lq, D) -> rows of a KV head g * Lq.
    let p = |hq, hkv, lq, d| Problem {
        b: 1,
        hq,
        hkv,
        lq,
        lmax: 512,
        d,
        dtype: dtype::BFLOAT16,
        span: 512,
        start: None,
        pos_n: 1,
        device: 0,
    };
    let pick = |p: &Problem| {
        let k = choice::decode_kernel(p, 1).expect("the short-context kernel");
        (k.writing, k.rows, k.rgroups)
    };
    let llama = p(32, 8, 1, 64);
    let qwen = p(16, 8, 1, 128);
    let gemma = p(4, 1, 1, 256);
    let two_tokens = p(32, 8, 2, 64);
    // A one-token step: one row a block (bf16). Two tokens: every row of a KV head in one block,
    // in the smallest kernel that holds them. Past 65535 blocks along y: one block a KV head.
    let many_heads = p(4 * 20_000, 20_000, 1, 64);
    let mut qwen16 = qwen.clone();
    qwen16.dtype = dtype::FLOAT16;
    let built_in = || {
        assert_eq!(pick(&llama), ("et_attn_decw_bf16_d64_r1", 1, 4));
        assert_eq!(pick(&qwen), ("et_attn_decw_bf16_d128_r1", 1, 2));
        assert_eq!(pick(&gemma), ("et_attn_decw_bf16_d256_r1", 1, 4));
        assert_eq!(pick(&two_tokens), ("et_attn_decw_bf16_d64_r8", 8, 1));
        assert_eq!(pick(&many_heads), ("et_attn_decw_bf16_d64_r4", 4, 1));
        // One-row kernels are built for bfloat16 only.
        assert_eq!(pick(&qwen16), ("et_attn_decw_f16_d128_r2", 2, 1));
    };
    if crate::switches::get().attn_rows.is_none() {
        built_in();
    }
    for bad in [0, 3, 16] {
        let e = set_decode_rows(Some(bad)).expect_err("refused").to_string();
        assert!(e.contains(&format!("{bad} is not 1, 2, 4 or 8")), "{e}");
    }
    set_decode_rows(Some(1)).expect("1");
    built_in();
    // The one-block choice asked for.
    set_decode_rows(Some(4)).expect("4");
    assert_eq!(pick(&llama), ("et_attn_decw_bf16_d64_r4", 4, 1));
    assert_eq!(pick(&gemma), ("et_attn_decw_bf16_d256_r4", 4, 1));
    assert_eq!(pick(&two_tokens), ("et_attn_decw_bf16_d64_r4", 4, 2));
    set_decode_rows(Some(2)).expect("2");
    assert_eq!(pick(&qwen), ("et_attn_decw_bf16_d128_r2", 2, 1));
    assert_eq!(pick(&two_tokens), ("et_attn_decw_bf16_d64_r2", 2, 4));
    // No two-row kernel of D = 256 is built: the built-in choice.
    assert_eq!(pick(&gemma), ("et_attn_decw_bf16_d256_r1", 1, 4));
    // More rows a block than a KV head has: the built-in choice.
    set_decode_rows(Some(8)).expect("8");
    assert_eq!(pick(&qwen), ("et_attn_decw_bf16_d128_r1", 1, 2));
    assert_eq!(pick(&two_tokens), ("et_attn_decw_bf16_d64_r8", 8, 1));
    set_decode_rows(None).expect("unset");
}
