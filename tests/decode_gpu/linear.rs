//! GPU tests and bench of the fused linear op (`aoti_torch_cuda_et_linear`,
//! `src/kernels/linear.rs`): RMSNorm prologue, gated acts, bias and residual epilogues, every
//! M (the fused GEMV up to 16 rows, the composite path above), inside a CUDA graph as
//! programmatic dependent launches, and the Llama-3.2-1B decoder layer's four linears
//! back to back with and without PDL.

use super::*;

type Linear = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *const *mut c_void,
    *const *mut c_void,
    *const *mut c_void,
    i64,
    f64,
    f64,
    i64,
    *mut *mut c_void,
) -> i32;
type AddNorm = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut c_void,
    i64,
    f64,
    f64,
    *mut *mut c_void,
) -> i32;
type Toggle = extern "C" fn(i32) -> i32;
type GetDim = unsafe extern "C" fn(*mut c_void, *mut i64) -> i32;

pub(super) struct Lin {
    linear: Linear,
    pub(super) add_norm: AddNorm,
    pub(super) pdl: Toggle,
    dim: GetDim,
}

pub(super) fn lin() -> &'static Lin {
    static S: std::sync::OnceLock<Lin> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let sym = lib_sym;
        // SAFETY: the symbols have these signatures (src/shim/decode.rs).
        unsafe {
            Lin {
                linear: std::mem::transmute::<*mut c_void, Linear>(sym(
                    "aoti_torch_cuda_et_linear",
                )),
                add_norm: std::mem::transmute::<*mut c_void, AddNorm>(sym(
                    "aoti_torch_cuda_et_add_rmsnorm",
                )),
                pdl: std::mem::transmute::<*mut c_void, Toggle>(sym("et_cuda_debug_pdl")),
                dim: std::mem::transmute::<*mut c_void, GetDim>(sym("aoti_torch_get_dim")),
            }
        }
    })
}

/// Round to bf16 (nearest even), as the kernels round intermediate values.
fn rnd(v: f32) -> f32 {
    let b = v.to_bits();
    f32::from_bits((b + 0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
}

struct Spec {
    m: usize,
    n: usize,
    k: usize,
    bias: bool,
    norm: i64,
    act: i64,
    residual: bool,
    pad: usize,
}

/// The reference of module docs' arithmetic (bf16 roundings where the kernels round).
#[allow(clippy::too_many_arguments)]
/// The linear's formula in bf16. With a norm, up to 16 rows (the fused kernel): each x element
/// times its norm weight (mode 1: g, mode 2: 1 + g) rounded to bf16 feeds the product, and the
/// row's r = rsqrt(mean(x^2) + eps) scales the product before the bias. More rows (the norm
/// kernel, then the GEMM): eager PyTorch's rounding, x * r first. The two differ by a rounding of
/// each product input; the end-to-end token tests compare with eager.
fn lin_ref(s: &Spec, x: &[f32], w: &[f32], b: &[f32], g: &[f32], r: &[f32], eps: f32) -> Vec<f32> {
    let nw = if s.act == 0 { s.n } else { 2 * s.n };
    let mut h = x.to_vec();
    let mut scale = vec![1f32; s.m];
    if s.norm != 0 {
        for (row, sc) in h.chunks_mut(s.k).zip(scale.iter_mut()) {
            let ms: f64 = row
                .iter()
                .map(|v| f64::from(*v) * f64::from(*v))
                .sum::<f64>()
                / s.k as f64;
            let rr = (1.0 / (ms + f64::from(eps)).sqrt()) as f32;
            // The fused kernel: at most 16 rows in its layout (row strides multiples of 8; one
            // row has no row stride).
            let late = s.m <= 16 && (s.m == 1 || s.pad % 8 == 0);
            if late {
                *sc = rr;
            }
            for (v, gk) in row.iter_mut().zip(g) {
                *v = match (late, s.norm == 1) {
                    (true, true) => rnd(*v * gk),
                    (true, false) => rnd(*v * (1.0 + gk)),
                    (false, true) => rnd(rnd(*v * rr) * gk),
                    (false, false) => rnd(*v * rr * (1.0 + gk)),
                };
            }
        }
    }
    let mut prod = gemv_ref(&h, w, None, s.m, nw, s.k);
    for (i, row) in prod.chunks_mut(nw).enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = *v * scale[i] + if s.bias { b[j] } else { 0.0 };
        }
    }
    let mut y = vec![0f32; s.m * s.n];
    for i in 0..s.m {
        for j in 0..s.n {
            let mut v = prod[i * nw + j];
            if s.act != 0 {
                let gt = rnd(v);
                let a = if s.act == 1 {
                    gt / (1.0 + (-gt).exp())
                } else {
                    0.5 * gt * (1.0 + (0.797_884_6 * (gt + 0.044715 * gt * gt * gt)).tanh())
                };
                v = rnd(a) * rnd(prod[i * nw + s.n + j]);
            }
            if s.residual {
                v = rnd(v) + r[i * s.n + j];
            }
            y[i * s.n + j] = v;
        }
    }
    y
}

/// Call et_linear on handles (the optional ones may be None).
pub(super) fn call(
    x: &Handle,
    w: &Handle,
    b: Option<&Handle>,
    g: Option<&Handle>,
    r: Option<&Handle>,
    norm: i64,
    act: i64,
) -> Handle {
    let ptr = |h: Option<&Handle>| h.map(|h| h.0);
    let (bp, gp, rp) = (ptr(b), ptr(g), ptr(r));
    let opt = |p: &Option<*mut c_void>| {
        p.as_ref()
            .map_or(std::ptr::null(), |p| p as *const *mut c_void)
    };
    let mut y = std::ptr::null_mut();
    // SAFETY: live handles, pointers to locals alive for the call, out-pointer to a local.
    let st = unsafe {
        (lin().linear)(
            x.0,
            w.0,
            opt(&bp),
            opt(&gp),
            opt(&rp),
            norm,
            1e-5,
            1.0,
            act,
            &mut y,
        )
    };
    assert_eq!(st, 0, "et_linear: {}", last_error());
    Handle(y)
}

fn run_spec(s: &Spec, seed: u64) -> (f32, bool) {
    let mut rng = Rng(seed | 1);
    let nw = if s.act == 0 { s.n } else { 2 * s.n };
    let (x, w, b) = (rng.vec(s.m * s.k), rng.vec(nw * s.k), rng.vec(nw));
    let (g, r) = (rng.vec(s.k), rng.vec(s.m * s.n));
    let row = (s.k + s.pad) as i64;
    let xd = DevBuf::from_host(&encode(&padded(&x, s.k, s.pad), BF16));
    let wd = DevBuf::from_host(&encode(&w, BF16));
    let (bd, gd, rd) = (
        DevBuf::from_host(&encode(&b, BF16)),
        DevBuf::from_host(&encode(&g, BF16)),
        DevBuf::from_host(&encode(&r, BF16)),
    );
    let (m, n, k) = (s.m as i64, s.n as i64, s.k as i64);
    // Even M: x as [2, M/2, K], so the result must keep the rank.
    let xh = if s.m % 2 == 0 {
        wrap(&xd, 0, &[2, m / 2, k], &[m / 2 * row, row, 1], BF16)
    } else {
        wrap(&xd, 0, &[m, k], &[row, 1], BF16)
    };
    let wh = wrap(&wd, 0, &[nw as i64, k], &[k, 1], BF16);
    let bh = wrap(&bd, 0, &[nw as i64], &[1], BF16);
    let gh = wrap(&gd, 0, &[k], &[1], BF16);
    let rh = if s.m % 2 == 0 {
        wrap(&rd, 0, &[2, m / 2, n], &[m / 2 * n, n, 1], BF16)
    } else {
        wrap(&rd, 0, &[m, n], &[n, 1], BF16)
    };
    let y = call(
        &xh,
        &wh,
        s.bias.then_some(&bh),
        (s.norm != 0).then_some(&gh),
        s.residual.then_some(&rh),
        s.norm,
        s.act,
    );
    let mut rank = 0i64;
    // SAFETY: a live handle; out-pointer to a local.
    assert_eq!(unsafe { (lin().dim)(y.0, &mut rank) }, 0);
    assert_eq!(
        rank,
        if s.m % 2 == 0 { 3 } else { 2 },
        "the result keeps x's rank"
    );
    let got = read(&y, s.m * s.n, BF16);
    check_close(&got, &lin_ref(s, &x, &w, &b, &g, &r, 1e-5), BF16)
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn linear_matches_reference_for_every_fusion_and_m() {
    require_gpu("linear_matches_reference_for_every_fusion_and_m");
    let mut fails = Vec::new();
    let mut count = 0;
    for pdl in [1, 0] {
        (lin().pdl)(pdl);
        for m in [1usize, 2, 5, 8, 9, 16, 17, 40] {
            for (n, k) in [(72usize, 2048usize), (300, 512), (1024, 136)] {
                for (bias, norm, act, residual, pad) in [
                    (false, 0, 0, false, 0),
                    (true, 0, 0, false, 8),
                    (false, 1, 0, false, 0),
                    (false, 2, 0, true, 0),
                    (false, 1, 1, false, 0),
                    (true, 0, 2, false, 0),
                    (false, 0, 0, true, 0),
                    (false, 1, 1, true, 1),
                ] {
                    let s = Spec {
                        m,
                        n,
                        k,
                        bias,
                        norm,
                        act,
                        residual,
                        pad,
                    };
                    let (err, ok) = run_spec(&s, (m * 131 + n * 7 + k) as u64);
                    count += 1;
                    if !ok {
                        fails.push(format!(
                            "pdl={pdl} M={m} N={n} K={k} bias={bias} norm={norm} act={act} res={residual} pad={pad}: {err:.3e}"
                        ));
                    }
                }
            }
        }
    }
    (lin().pdl)(1);
    println!("et_linear: {count} cases, {} failed", fails.len());
    assert!(fails.is_empty(), "{fails:#?}");
}

/// et_add_rmsnorm (`residual + rmsnorm(x)`, the norm rounded first) against `norm_rows`:
/// both dtypes, both modes, the register path (K % 8 == 0, K <= 8192, aligned) and the plain
/// loop (K = 100, K = 8200, rows of x at an odd element stride), one row and several.
#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn add_rmsnorm_matches_reference() {
    require_gpu("add_rmsnorm_matches_reference");
    let mut fails = Vec::new();
    let mut count = 0;
    for pdl in [1, 0] {
        (lin().pdl)(pdl);
        for dt in [BF16, F16] {
            for k in [64usize, 100, 1152, 2048, 8192, 8200] {
                for m in [1usize, 3, 17] {
                    for (mode, off) in [(1i64, 0f32), (2, 1.0), (2, 0.0)] {
                        for pad in [0usize, 1] {
                            let mut rng = Rng((k * 31 + m * 7 + mode as usize + pad) as u64 | 1);
                            let (x, g, r) = (rng.vec(m * k), rng.vec(k), rng.vec(m * k));
                            // Values as the device holds them.
                            let (x, g, r) = (
                                decode(&encode(&x, dt), dt),
                                decode(&encode(&g, dt), dt),
                                decode(&encode(&r, dt), dt),
                            );
                            let row = (k + pad) as i64;
                            let xd = DevBuf::from_host(&encode(&padded(&x, k, pad), dt));
                            let gd = DevBuf::from_host(&encode(&g, dt));
                            let rd = DevBuf::from_host(&encode(&r, dt));
                            let (mi, ki) = (m as i64, k as i64);
                            let gh = wrap(&gd, 0, &[ki], &[1], dt);
                            let rh = wrap(&rd, 0, &[1, mi, ki], &[mi * ki, ki, 1], dt);
                            let xh = wrap(&xd, 0, &[1, mi, ki], &[mi * row, row, 1], dt);
                            let mut y = std::ptr::null_mut();
                            // SAFETY: live handles; out-pointer to a local.
                            let st = unsafe {
                                (lin().add_norm)(
                                    xh.0,
                                    rh.0,
                                    gh.0,
                                    mode,
                                    1e-6,
                                    f64::from(off),
                                    &mut y,
                                )
                            };
                            assert_eq!(st, 0, "et_add_rmsnorm: {}", last_error());
                            let y = Handle(y);
                            let got = read(&y, m * k, dt);
                            let want: Vec<f32> = norm_rows(&x, &g, (mode, off), dt)
                                .iter()
                                .zip(&r)
                                .map(|(n, rv)| round_to(n + rv, dt))
                                .collect();
                            let (err, ok) = check_close(&got, &want, dt);
                            count += 1;
                            if !ok {
                                fails.push(format!(
                                    "pdl={pdl} dt={dt} K={k} M={m} mode={mode} off={off} pad={pad}: {err:.3e}"
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    (lin().pdl)(1);
    println!("et_add_rmsnorm: {count} cases, {} failed", fails.len());
    assert!(fails.is_empty(), "{fails:#?}");
}

/// The weights of one Llama-3.2-1B decoder layer: QKV [3072, 2048], O [2048, 2048],
/// gate/up [16384, 2048], down [2048, 8192], and the two norm weights.
struct Layer {
    _bufs: Vec<DevBuf>,
    h: Vec<Handle>,
}

fn layer(rng: &mut Rng) -> Layer {
    let shapes: [&[usize]; 6] = [
        &[3072, 2048],
        &[2048, 2048],
        &[16384, 2048],
        &[2048, 8192],
        &[2048],
        &[2048],
    ];
    let bufs: Vec<DevBuf> = shapes
        .iter()
        .map(|s| {
            DevBuf::from_host(&encode(
                &rng.vec(s.iter().product::<usize>())
                    .iter()
                    .map(|v| v / 8.0)
                    .collect::<Vec<_>>(),
                BF16,
            ))
        })
        .collect();
    let h = shapes
        .iter()
        .zip(&bufs)
        .map(|(s, d)| {
            let sizes: Vec<i64> = s.iter().map(|&v| v as i64).collect();
            wrap(d, 0, &sizes, &contiguous(&sizes), BF16)
        })
        .collect();
    Layer { _bufs: bufs, h }
}

/// One layer's four fused linears on `x` [1, 2048]; the intermediates are freed in order.
fn layer_step(l: &Layer, x: &Handle, attn: &Handle) -> Handle {
    let _qkv = call(x, &l.h[0], None, Some(&l.h[4]), None, 1, 0);
    let h1 = call(attn, &l.h[1], None, None, Some(x), 0, 0);
    let act = call(&h1, &l.h[2], None, Some(&l.h[5]), None, 1, 1);
    call(&act, &l.h[3], None, None, Some(&h1), 0, 0)
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn linear_layer_bench() {
    require_gpu("linear_layer_bench");
    let stream = new_stream();
    let mut rng = Rng(11);
    let layers: Vec<Layer> = (0..16).map(|_| layer(&mut rng)).collect();
    let wbytes = (3072 + 2048 + 16384 + 8192) as f64 * 2048.0 * 2.0 + 2.0 * 2048.0 * 2.0;
    let xd = DevBuf::from_host(&encode(&rng.vec(2048), BF16));
    let ad = DevBuf::from_host(&encode(&rng.vec(2048), BF16));
    let xh = wrap(&xd, 0, &[1, 2048], &[2048, 1], BF16);
    let ah = wrap(&ad, 0, &[1, 2048], &[2048, 1], BF16);
    println!("Llama-3.2-1B layer, M=1: norm+QKV, O+residual, norm+gate/up+SiLU*up, down+residual;");
    println!("16 layers' weights back to back in one graph (allocation nodes between the calls).");
    for pdl in [0, 1] {
        (lin().pdl)(pdl);
        let us = time_graph(stream, 16, &mut |i| {
            let y = layer_step(&layers[i % 16], &xh, &ah);
            drop(y);
        });
        let gbs = wbytes / us / 1e3;
        println!(
            "  pdl={pdl}: {us:.2} us per layer, {gbs:.0} GB/s, {:.1} % of 4.8 TB/s",
            gbs / 4800.0 * 100.0
        );
    }
    (lin().pdl)(1);
    println!("et_linear alone, M=1, weights rotating over >= 256 MiB (PDL on):");
    for (n, k) in [
        (2048usize, 2048usize),
        (512, 2048),
        (3072, 2048),
        (8192, 2048),
        (2048, 8192),
        (1024, 3072),
        (2048, 1024),
        (1024, 1024),
        (128256, 2048),
        (151936, 1024),
    ] {
        let copies = (256usize << 20).div_ceil(n * k * 2).max(1);
        let wbuf = encode(&rng.vec(n * k), BF16);
        let ws: Vec<DevBuf> = (0..copies).map(|_| DevBuf::from_host(&wbuf)).collect();
        let wh: Vec<Handle> = ws
            .iter()
            .map(|d| wrap(d, 0, &[n as i64, k as i64], &[k as i64, 1], BF16))
            .collect();
        let xd = DevBuf::from_host(&encode(&rng.vec(k), BF16));
        let xh = wrap(&xd, 0, &[1, k as i64], &[k as i64, 1], BF16);
        let us = time_graph(stream, (copies * 4).clamp(20, 200), &mut |i| {
            drop(call(&xh, &wh[i % copies], None, None, None, 0, 0));
        });
        let gbs = (n * k * 2) as f64 / us / 1e3;
        println!(
            "  N={n:>6} K={k:>5}: {us:>8.2} us {gbs:>6.0} GB/s {:>5.1} %",
            gbs / 4800.0 * 100.0
        );
    }
}

// The attention test with a window and the output layout (its name stays linear::...).
include!("linear_attention.rs");
