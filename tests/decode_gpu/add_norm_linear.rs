//! GPU test of `aoti_torch_cuda_et_add_rmsnorm_linear` (`src/kernels/linear/add_norm.rs`):
//! `h = residual + rmsnorm(p)` then the fused linear of `h`, in one kernel for decode rows (bf16,
//! at most 8 rows, the fused layout) and as the two ops otherwise. Checked against the two ops
//! called one after the other (`et_add_rmsnorm`, then `et_linear` of its result): `h` bit for
//! bit, `y` within bf16's tolerance (the one kernel may pick another weight-tile variant, which
//! sums in another order), with PDL on and off, and chained (each call's `h` the next one's
//! residual, as Gemma's layers chain them).

use super::linear::{call, lin};
use super::*;

type AddNormLinear = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut c_void,
    i64,
    f64,
    f64,
    *mut c_void,
    *const *mut c_void,
    *const *mut c_void,
    *const *mut c_void,
    i64,
    f64,
    f64,
    i64,
    *mut *mut c_void,
    *mut *mut c_void,
) -> i32;

/// The one op, and the switch between its one fused kernel (1) and its two ops (0).
fn syms() -> (AddNormLinear, extern "C" fn(i32) -> i32) {
    static S: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    let (op, toggle) = *S.get_or_init(|| {
        (
            lib_sym("aoti_torch_cuda_et_add_rmsnorm_linear") as usize,
            lib_sym("et_cuda_debug_fused_add_norm") as usize,
        )
    });
    // SAFETY: the symbols have these signatures (src/shim/norm.rs).
    unsafe {
        (
            std::mem::transmute::<usize, AddNormLinear>(op),
            std::mem::transmute::<usize, extern "C" fn(i32) -> i32>(toggle),
        )
    }
}

fn fused() -> AddNormLinear {
    syms().0
}

/// One case: `M` rows of `K` (`p`'s rows `pad` elements apart), `N` output columns.
struct Case {
    m: usize,
    n: usize,
    k: usize,
    post: (i64, f32),
    norm: i64,
    act: i64,
    pad: usize,
}

/// (y, h) of the one op and (y, h) of the two ops, as f32; `resid` the residual's handle.
fn both(c: &Case, rng: &mut Rng, resid: &Handle) -> ((Vec<f32>, Vec<f32>), (Handle, Handle)) {
    let nw = if c.act == 0 { c.n } else { 2 * c.n };
    let (m, n, k) = (c.m as i64, c.n, c.k as i64);
    let row = (c.k + c.pad) as i64;
    let p = rng.vec(c.m * c.k);
    let pd = DevBuf::from_host(&encode(&padded(&p, c.k, c.pad), BF16));
    let ph = wrap(&pd, 0, &[m, k], &[row, 1], BF16);
    let (w, pg, g) = (rng.vec(nw * c.k), rng.vec(c.k), rng.vec(c.k));
    let (wd, pgd, gd) = (
        DevBuf::from_host(&encode(&w, BF16)),
        DevBuf::from_host(&encode(&pg, BF16)),
        DevBuf::from_host(&encode(&g, BF16)),
    );
    let wh = wrap(&wd, 0, &[nw as i64, k], &[k, 1], BF16);
    let pgh = wrap(&pgd, 0, &[k], &[1], BF16);
    let gh = wrap(&gd, 0, &[k], &[1], BF16);
    let gp = gh.0;
    let gopt = if c.norm != 0 {
        &gp as *const *mut c_void
    } else {
        std::ptr::null()
    };
    let (mut y, mut h) = (std::ptr::null_mut(), std::ptr::null_mut());
    let (mode, off) = c.post;
    // SAFETY: live handles, a pointer to a local handle (or null), out-pointers to locals.
    let st = unsafe {
        fused()(
            ph.0,
            resid.0,
            pgh.0,
            mode,
            1e-6,
            f64::from(off),
            wh.0,
            std::ptr::null(),
            gopt,
            std::ptr::null(),
            c.norm,
            1e-5,
            1.0,
            c.act,
            &mut y,
            &mut h,
        )
    };
    assert_eq!(st, 0, "et_add_rmsnorm_linear: {}", last_error());
    let (y1, h1) = (Handle(y), Handle(h));
    let mut h2 = std::ptr::null_mut();
    // SAFETY: live handles; out-pointer to a local.
    let st = unsafe { (lin().add_norm)(ph.0, resid.0, pgh.0, mode, 1e-6, f64::from(off), &mut h2) };
    assert_eq!(st, 0, "et_add_rmsnorm: {}", last_error());
    let h2 = Handle(h2);
    let y2 = call(
        &h2,
        &wh,
        None,
        (c.norm != 0).then_some(&gh),
        None,
        c.norm,
        c.act,
    );
    let pair = (read(&y1, c.m * c.n, BF16), read(&y2, c.m * c.n, BF16));
    let (hf, hs) = (read(&h1, c.m * c.k, BF16), read(&h2, c.m * c.k, BF16));
    let (err, ok) = check_close(&pair.0, &pair.1, BF16);
    assert!(
        ok,
        "M={} N={n} K={k} post={:?} norm={} act={}: y differs by {err:.3e}",
        c.m, c.post, c.norm, c.act
    );
    ((hf, hs), (h1, y1))
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn add_rmsnorm_linear_equals_the_two_ops() {
    require_gpu("add_rmsnorm_linear_equals_the_two_ops");
    let mut count = 0;
    let mut h_diffs = Vec::new();
    // The one kernel is off by default (ET_CUDA_FUSED_ADD_NORM): this test asks for it.
    assert_eq!(
        (syms().1)(1),
        0,
        "et_cuda_debug_fused_add_norm: {}",
        last_error()
    );
    for pdl in [1, 0] {
        (lin().pdl)(pdl);
        for m in [1usize, 3, 8, 9, 16] {
            for (n, k) in [(72usize, 2048usize), (300, 1152), (1024, 136)] {
                for (post, norm, act, pad) in [
                    ((2i64, 1.0f32), 2i64, 2i64, 0usize),
                    ((2, 1.0), 2, 0, 0),
                    ((1, 0.0), 1, 1, 0),
                    ((1, 0.0), 0, 0, 0),
                    ((2, 0.0), 1, 0, 1),
                ] {
                    let c = Case {
                        m,
                        n,
                        k,
                        post,
                        norm,
                        act,
                        pad,
                    };
                    let mut rng = Rng((m * 131 + n * 7 + k + act as usize) as u64 | 1);
                    let r = rng.vec(m * k);
                    let rd = DevBuf::from_host(&encode(&r, BF16));
                    let mut resid = wrap(&rd, 0, &[m as i64, k as i64], &[k as i64, 1], BF16);
                    // Three layers' worth, each h the next residual.
                    let mut keep = Vec::new();
                    for step in 0..3 {
                        let ((hf, hs), (h1, y1)) = both(&c, &mut rng, &resid);
                        count += 1;
                        if hf != hs {
                            h_diffs.push(format!(
                                "pdl={pdl} M={m} N={n} K={k} post={post:?} norm={norm} act={act} pad={pad} step {step}"
                            ));
                        }
                        keep.push(y1);
                        resid = h1;
                    }
                }
            }
        }
    }
    (lin().pdl)(1);
    (syms().1)(0);
    println!(
        "et_add_rmsnorm_linear: {count} calls, h differs in {}",
        h_diffs.len()
    );
    assert!(h_diffs.is_empty(), "{h_diffs:#?}");
}
