use super::*;

use crate::kernels::cpu_tensor as t;

fn msg(r: Result<Linear>) -> String {
    r.expect_err("should be refused").to_string()
}

fn plain<'a>() -> Fusion<'a> {
    Fusion {
        bias: None,
        norm: None,
        residual: None,
        act: Act::None,
    }
}

#[test]
fn arguments_are_checked_with_clear_messages() {
    let bf = dtype::BFLOAT16;
    let x = t(bf, &[1, 64]);
    let w = t(bf, &[32, 64]);
    let g = t(bf, &[64]);
    // A gated act needs gate and up rows.
    let odd = t(bf, &[33, 64]);
    let f = Fusion {
        act: Act::SiluMul,
        ..plain()
    };
    assert!(msg(check(&x, &odd, &f)).contains("even number"));
    // The norm weight is [K] of x's dtype.
    let bad_g = t(dtype::FLOAT16, &[64]);
    let f = Fusion {
        norm: Some(Norm {
            weight: &bad_g,
            mode: NormMode::WeightTimesRounded,
            eps: 1e-6,
            offset: 0.0,
        }),
        ..plain()
    };
    assert!(msg(check(&x, &w, &f)).contains("norm weight must be a contiguous [64]"));
    let short_g = t(bf, &[63]);
    let f = Fusion {
        norm: Some(Norm {
            weight: &short_g,
            mode: NormMode::Fp32Offset,
            eps: 1e-6,
            offset: 1.0,
        }),
        ..plain()
    };
    assert!(msg(check(&x, &w, &f)).contains("[64]"));
    // The residual has the result's sizes: [1, 16] with a gated act over 32 rows.
    let res = t(bf, &[1, 32]);
    let f = Fusion {
        act: Act::SiluMul,
        residual: Some(&res),
        ..plain()
    };
    assert!(msg(check(&x, &w, &f)).contains("sizes [1, 16]"));
    // Everything right but the device: CPU tensors are refused, naming the devices.
    let res = t(bf, &[1, 16]);
    let f = Fusion {
        act: Act::SiluMul,
        residual: Some(&res),
        norm: Some(Norm {
            weight: &g,
            mode: NormMode::WeightTimesRounded,
            eps: 1e-6,
            offset: 0.0,
        }),
        bias: None,
    };
    assert!(msg(check(&x, &w, &f)).contains("CUDA device"));
}

#[test]
fn op_arguments_map_to_norm_and_act() {
    let bf = dtype::BFLOAT16;
    let g = t(bf, &[8]);
    assert!(Norm::from_args(None, 0, 0.0, 0.0)
        .expect("no norm")
        .is_none());
    let n = Norm::from_args(Some(&g), 2, 1e-6, 1.0)
        .expect("gemma")
        .expect("some");
    assert_eq!((n.mode, n.offset), (NormMode::Fp32Offset, 1.0));
    assert!(Norm::from_args(None, 1, 1e-6, 0.0).is_err());
    assert!(Norm::from_args(Some(&g), 0, 1e-6, 0.0).is_err());
    assert!(Norm::from_args(Some(&g), 3, 1e-6, 0.0).is_err());
    assert!(Norm::from_args(Some(&g), 1, f64::NAN, 0.0).is_err());
    assert!(Norm::from_args(Some(&g), 1, -1.0, 0.0).is_err());
    assert_eq!(
        Norm::new(&g, 1, 1e-5, 0.0).expect("llama").mode,
        NormMode::WeightTimesRounded
    );
    let e = Norm::new(&g, 0, 1e-5, 0.0).unwrap_err().to_string();
    assert!(e.contains("mode 0 is not 1 or 2"), "{e}");
    assert!(Norm::new(&g, 2, f64::INFINITY, 1.0).is_err());
    assert_eq!(Act::from_code(2).expect("gelu"), Act::GeluTanhMul);
    assert!(Act::from_code(3).unwrap_err().to_string().contains("act 3"));
}

#[test]
fn fused_kernels_cover_every_row_and_column() {
    for &(n_out, act) in &[
        (2048i64, Act::None),
        (8192, Act::SiluMul),
        (1000, Act::GeluTanhMul),
        (3, Act::None),
    ] {
        for m in 1..=MAX_FUSED_ROWS {
            for v in 0..3 {
                let nw = if act == Act::None { n_out } else { 2 * n_out };
                let l = Linear {
                    gemv: gemv::Problem {
                        m,
                        n: nw,
                        k: 2048,
                        dtype: dtype::BFLOAT16,
                        sx: (2048, 1),
                        sw: (2048, 1),
                        has_bias: false,
                        fast: true,
                        out_sizes: vec![m, nw],
                        device: 0,
                    },
                    n_out,
                    out_sizes: vec![m, n_out],
                    res_stride: 0,
                    fused: true,
                };
                let (name, grid) = fused_shape(&l, act, v, false);
                assert!(kernels().contains(&name), "{name}");
                assert!(name.ends_with(&format!("_a{}", act as i32)), "{name}");
                if m <= 8 {
                    let (pre, pre_grid) = fused_shape(&l, act, v, true);
                    assert!(kernels().contains(&pre), "{pre}");
                    assert!(pre.ends_with(&format!("_a{}_pre", act as i32)), "{pre}");
                    assert_eq!(pre_grid, grid, "{pre}: the grid of {name}");
                }
                assert!(i64::from(grid.0) * gemv::VARIANT_ROWS[v] >= n_out);
                assert!(i64::from(grid.1) * gemv::rows_per_block(m) >= m);
            }
        }
    }
    // (blocks, blocks per SM) of variants 0, 1, 2 on 132 SMs, as the H200 runs them.
    // Llama's QKV (3072 rows): variant 0 is 384 blocks, a wave and a half; variant 1 one wave.
    assert_eq!(variant_by_waves(&[(384, 2), (192, 2), (96, 1)], 132), 1);
    // O (2048 rows): one wave either way; the most blocks.
    assert_eq!(variant_by_waves(&[(256, 2), (128, 2), (64, 1)], 132), 0);
    // Gate/up with the act (8192 columns over 16384 rows): two waves of variant 1 or 2; the
    // larger tiles.
    assert_eq!(variant_by_waves(&[(1024, 2), (512, 2), (256, 1)], 132), 2);
    // A vocabulary head (128256 rows): many waves; the largest tiles among the fewest.
    assert_eq!(
        variant_by_waves(&[(16032, 2), (8016, 2), (4008, 1)], 132),
        2
    );
    // An occupancy the driver could not give (0) counts as one block per SM.
    assert_eq!(variant_by_waves(&[(10, 0), (5, 0), (3, 0)], 132), 0);
}

#[test]
fn args_layout_matches_the_kernel() {
    // LinArgs: 9 pointers/longs, then eps, norm_add, M, N, K, norm_mode (4 bytes each), then
    // the PRE fields: p, sp, pn, h (8 bytes each), p_eps, p_add, p_mode, padded to 8.
    assert_eq!(std::mem::offset_of!(Args, eps), 72);
    assert_eq!(std::mem::offset_of!(Args, norm_mode), 92);
    assert_eq!(std::mem::offset_of!(Args, p), 96);
    assert_eq!(std::mem::offset_of!(Args, h), 120);
    assert_eq!(std::mem::offset_of!(Args, p_mode), 136);
    assert_eq!(std::mem::size_of::<Args>(), 144);
}

#[test]
fn a_norm_before_a_vocabulary_head_is_not_fused() {
    assert!(takes_fused(true, true, 16384, 1));
    assert!(takes_fused(true, false, 128256, 1));
    assert!(!takes_fused(true, true, 128256, 1));
    assert!(!takes_fused(true, false, 2048, MAX_FUSED_ROWS + 1));
    assert!(!takes_fused(false, false, 2048, 1));
}

#[test]
fn add_rmsnorm_arguments_are_checked_before_the_device() {
    let bf = dtype::BFLOAT16;
    let x = t(bf, &[2, 64]);
    let g = t(bf, &[64]);
    let norm = |w| Norm {
        weight: w,
        mode: NormMode::Fp32Offset,
        eps: 1e-6,
        offset: 1.0,
    };
    let err = |r: Result<Tensor>| r.expect_err("should be refused").to_string();
    // The residual has x's sizes and dtype.
    assert!(err(add_rmsnorm(&x, &t(bf, &[2, 32]), &norm(&g))).contains("x's sizes [2, 64]"));
    assert!(err(add_rmsnorm(&x, &t(dtype::FLOAT16, &[2, 64]), &norm(&g))).contains("residual"));
    // The weight is a [K] of x's dtype; x is bf16 or fp16 with at least one dimension.
    let short = t(bf, &[63]);
    assert!(err(add_rmsnorm(&x, &x, &norm(&short))).contains("contiguous [64]"));
    let f32x = t(dtype::FLOAT32, &[2, 64]);
    assert!(err(add_rmsnorm(&f32x, &f32x, &norm(&g))).contains("bfloat16 or float16"));
    let scalar = t(bf, &[]);
    assert!(err(add_rmsnorm(&scalar, &scalar, &norm(&g))).contains("at least one dimension"));
    // Every check passed: the CPU tensors are refused for their device, naming it.
    assert!(err(add_rmsnorm(&x, &x, &norm(&g))).contains("CUDA device"));
}
