//! GPU tests of the export companion's kernels (`kernels/decode.cu`) through
//! their C shims in the cdylib: `aoti_torch_cuda_et_gemv[_bias]` and
//! `aoti_torch_cuda_et_decode_attention[_len]`, against CPU fp32 references.
//!
//! Inputs are multiples of 1/32 in [-1, 1] (exact in bf16 and fp16), so the
//! reference sees exactly what the GPU sees; the only differences are the fp32
//! summation order and the final rounding of the output. Tolerance per element:
//! `|got - ref| <= rtol * |ref| + atol * max|ref|` with rtol = 2^-7 (bf16) or
//! 2^-9 (fp16), i.e. twice the output's rounding step, and atol = 2^-9 (bf16)
//! or 2^-11 (fp16) of the largest reference magnitude for the accumulated
//! cancellation error.
//!
//! The GEMV tests run every case with each fast variant forced
//! (`et_cuda_debug_gemv_tuning`) and with the built-in choice;
//! `gemv_model_shapes_match_fp32_reference` covers M = 1..4 on the four shapes of
//! the Llama-3.2-1B decoder (issue 21).
//!
//! `decode_bench` (also ignored) prints kernel time from CUDA events around a
//! CUDA graph of many calls, and the achieved GB/s and % of 4.8 TB/s of the GEMV
//! shapes for each variant.
//! Run on a GPU machine: `cargo test --release --test decode_gpu -- --include-ignored --test-threads=1 --nocapture`.

mod common;
use common::*;
#[path = "decode_gpu/add_norm_linear.rs"]
mod add_norm_linear;
#[path = "decode_gpu/linear.rs"]
mod linear;
use cudarc::driver::sys;
use std::ffi::{c_void, CString};

const CUDA: i32 = 1;
const BF16: i32 = 15;
const F16: i32 = 5;
const I64: i32 = 4;

type Gemv = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> i32;
type GemvBias =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, *mut *mut c_void) -> i32;
type Attn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    f64,
    *mut *mut c_void,
) -> i32;
type AttnLen =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, i64, f64, *mut *mut c_void) -> i32;
/// aoti_torch_cuda_et_attention_rope(q, k, v, k_cache, v_cache, pos, cos, sin, scale, window,
/// q_norm, k_norm, norm_mode, eps, norm_offset, ret0)
type AttnRope = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    f64,
    i64,
    *const *mut c_void,
    *const *mut c_void,
    i64,
    f64,
    f64,
    *mut *mut c_void,
) -> i32;
type AttnRopeQkv = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    f64,
    i64,
    i64,
    i64,
    i64,
    i64,
    *const *mut c_void,
    *const *mut c_void,
    i64,
    f64,
    f64,
    *mut *mut c_void,
) -> i32;
type FromBlob = unsafe extern "C" fn(
    *mut c_void,
    i64,
    *const i64,
    *const i64,
    i64,
    i32,
    i32,
    i32,
    *mut *mut c_void,
) -> i32;
type DataPtr = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> i32;
type StreamGuard = unsafe extern "C" fn(*mut c_void, i32, *mut *mut c_void) -> i32;
type DeleteGuard = unsafe extern "C" fn(*mut c_void) -> i32;
type GemvTuning = extern "C" fn(i32) -> i32;

/// The GEMV variants the tests and the bench run: -1 is the built-in choice,
/// 0..=2 force `v0`..`v2` (8, 16, 32 rows of W per block; src/kernels/gemv.rs).
const GEMV_VARIANTS: [i32; 4] = [-1, 0, 1, 2];

fn variant_name(v: i32) -> String {
    if v < 0 {
        "auto".into()
    } else {
        format!("v{v}")
    }
}

/// Force GEMV variant `v` (-1: the built-in choice) for the calls that follow.
fn set_gemv_variant(v: i32) {
    assert_eq!((shims().gemv_tuning)(v), 0, "{}", last_error());
}

struct Shims {
    gemv: Gemv,
    gemv_bias: GemvBias,
    attn: Attn,
    attn_len: AttnLen,
    attn_rope: AttnRope,
    attn_rope_qkv: AttnRopeQkv,
    from_blob: FromBlob,
    data_ptr: DataPtr,
    stream_guard: StreamGuard,
    delete_guard: DeleteGuard,
    gemv_tuning: GemvTuning,
}

fn shims() -> &'static Shims {
    static S: std::sync::OnceLock<Shims> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let _ = api(); // builds and opens the cdylib
        let path = CString::new(cdylib_path().to_string_lossy().into_owned()).expect("path");
        // SAFETY: re-opening the library api() opened (a reference count, same handle).
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        assert!(!h.is_null(), "dlopen {:?}", cdylib_path());
        let sym = |n: &str| {
            let c = CString::new(n).expect("name");
            // SAFETY: live handle, NUL-terminated name.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            assert!(!p.is_null(), "the library does not export {n}");
            p
        };
        // SAFETY: each symbol has the declared signature (src/shim/decode.rs, views.rs, device.rs).
        unsafe {
            Shims {
                gemv: std::mem::transmute::<*mut c_void, Gemv>(sym("aoti_torch_cuda_et_gemv")),
                gemv_bias: std::mem::transmute::<*mut c_void, GemvBias>(sym(
                    "aoti_torch_cuda_et_gemv_bias",
                )),
                attn: std::mem::transmute::<*mut c_void, Attn>(sym(
                    "aoti_torch_cuda_et_decode_attention",
                )),
                attn_len: std::mem::transmute::<*mut c_void, AttnLen>(sym(
                    "aoti_torch_cuda_et_decode_attention_len",
                )),
                attn_rope: std::mem::transmute::<*mut c_void, AttnRope>(sym(
                    "aoti_torch_cuda_et_attention_rope",
                )),
                attn_rope_qkv: std::mem::transmute::<*mut c_void, AttnRopeQkv>(sym(
                    "aoti_torch_cuda_et_attention_rope_qkv",
                )),
                from_blob: std::mem::transmute::<*mut c_void, FromBlob>(sym(
                    "aoti_torch_create_tensor_from_blob",
                )),
                data_ptr: std::mem::transmute::<*mut c_void, DataPtr>(sym(
                    "aoti_torch_get_data_ptr",
                )),
                stream_guard: std::mem::transmute::<*mut c_void, StreamGuard>(sym(
                    "aoti_torch_create_cuda_stream_guard",
                )),
                delete_guard: std::mem::transmute::<*mut c_void, DeleteGuard>(sym(
                    "aoti_torch_delete_cuda_stream_guard",
                )),
                gemv_tuning: std::mem::transmute::<*mut c_void, GemvTuning>(sym(
                    "et_cuda_debug_gemv_tuning",
                )),
            }
        }
    })
}

// ------------------------------------------------------------------ host data

struct Rng(u64);
impl Rng {
    /// A multiple of 1/32 in [-1, 1].
    fn val(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 % 65) as i32 - 32) as f32 / 32.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.val()).collect()
    }
}

/// Exact encoding of a value that both formats represent (multiples of 1/32 in [-1, 1]).
fn encode(v: &[f32], dt: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 2);
    for &x in v {
        let h: u16 = if dt == BF16 {
            (x.to_bits() >> 16) as u16
        } else if x == 0.0 {
            0
        } else {
            let b = x.to_bits();
            let sign = ((b >> 16) & 0x8000) as u16;
            let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
            let man = ((b >> 13) & 0x3ff) as u16;
            sign | ((exp as u16) << 10) | man
        };
        out.extend_from_slice(&h.to_le_bytes());
    }
    out
}

fn decode(b: &[u8], dt: i32) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| {
            let h = u16::from_le_bytes([c[0], c[1]]);
            if dt == BF16 {
                f32::from_bits(u32::from(h) << 16)
            } else {
                let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
                let exp = i32::from((h >> 10) & 0x1f);
                let man = f32::from(h & 0x3ff);
                match exp {
                    0 => sign * man * 2f32.powi(-24),
                    31 => f32::NAN,
                    e => sign * (1.0 + man / 1024.0) * 2f32.powi(e - 15),
                }
            }
        })
        .collect()
}

fn tol(dt: i32) -> (f32, f32) {
    if dt == BF16 {
        (2f32.powi(-7), 2f32.powi(-9))
    } else {
        (2f32.powi(-9), 2f32.powi(-11))
    }
}

/// Max error and whether every element passes the tolerance of the module docs.
fn check_close(got: &[f32], want: &[f32], dt: i32) -> (f32, bool) {
    assert_eq!(got.len(), want.len());
    let (rtol, atol) = tol(dt);
    let amax = want.iter().fold(0f32, |a, &b| a.max(b.abs())).max(1e-6);
    let mut worst = 0f32;
    let mut ok = true;
    for (&g, &w) in got.iter().zip(want) {
        let e = (g - w).abs();
        worst = worst.max(e);
        if e.is_nan() || e > rtol * w.abs() + atol * amax {
            ok = false;
        }
    }
    (worst, ok)
}

// ------------------------------------------------------------------ device tensors

/// A tensor handle over test-owned device memory (deleted on drop).
struct Handle(*mut c_void);
impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a live handle from the library, deleted once.
        unsafe { (api().delete_tensor)(self.0) };
    }
}

fn wrap(buf: &DevBuf, elem_offset: i64, sizes: &[i64], strides: &[i64], dt: i32) -> Handle {
    let mut h = std::ptr::null_mut();
    // SAFETY: buf holds every element the sizes/strides/offset reach (the callers size it).
    let st = unsafe {
        (shims().from_blob)(
            buf.ptr(),
            sizes.len() as i64,
            sizes.as_ptr(),
            strides.as_ptr(),
            elem_offset,
            dt,
            CUDA,
            0,
            &mut h,
        )
    };
    assert_eq!(st, 0, "create_tensor_from_blob: {}", last_error());
    Handle(h)
}

fn contiguous(sizes: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; sizes.len()];
    for i in (0..sizes.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * sizes[i + 1];
    }
    s
}

fn read(h: &Handle, n: usize, dt: i32) -> Vec<f32> {
    let mut p = std::ptr::null_mut();
    // SAFETY: live handle, out-pointer to a local.
    assert_eq!(unsafe { (shims().data_ptr)(h.0, &mut p) }, 0);
    // to_host is a blocking copy, ordered after the legacy default stream's kernels.
    decode(&to_host(p, n * 2), dt)
}

// ------------------------------------------------------------------ references

/// y[m][n] = sum_k x[m][k] * w[n][k] (+ bias[n]), fp32; columns split over threads.
fn gemv_ref(x: &[f32], w: &[f32], bias: Option<&[f32]>, m: usize, n: usize, k: usize) -> Vec<f32> {
    if m == 0 || n == 0 {
        return Vec::new();
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(32);
    let per = n.div_ceil(threads);
    let mut cols = vec![0f32; n * m]; // [n][m]
    std::thread::scope(|sc| {
        for (ci, chunk) in cols.chunks_mut(per * m).enumerate() {
            sc.spawn(move || {
                for (jj, out) in chunk.chunks_mut(m).enumerate() {
                    let j = ci * per + jj;
                    let wr = &w[j * k..][..k];
                    for (i, o) in out.iter_mut().enumerate() {
                        let xr = &x[i * k..][..k];
                        let s: f64 = xr
                            .iter()
                            .zip(wr)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum();
                        *o = s as f32 + bias.map_or(0.0, |b| b[j]);
                    }
                }
            });
        }
    });
    let mut y = vec![0f32; m * n];
    for j in 0..n {
        for i in 0..m {
            y[i * n + j] = cols[j * m + i];
        }
    }
    y
}

/// Attention over contiguous q [b,hq,lq,d] and caches [b,hkv,lmax,d]; query i at pos[i].
#[allow(clippy::too_many_arguments)]
fn attn_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos: &[i64],
    (b, hq, hkv, lq, lmax, d): (usize, usize, usize, usize, usize, usize),
    scale: f32,
) -> Vec<f32> {
    let g = hq / hkv;
    let mut out = vec![0f32; b * hq * lq * d];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / g;
            for i in 0..lq {
                let qrow = &q[((bi * hq + h) * lq + i) * d..][..d];
                let visible = pos[i] as usize + 1;
                let scores: Vec<f64> = (0..visible)
                    .map(|j| {
                        let krow = &k[((bi * hkv + kh) * lmax + j) * d..][..d];
                        qrow.iter()
                            .zip(krow)
                            .map(|(a, c)| f64::from(a * c))
                            .sum::<f64>()
                            * f64::from(scale)
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                let sum: f64 = e.iter().sum();
                let o = &mut out[((bi * hq + h) * lq + i) * d..][..d];
                for (j, p) in e.iter().enumerate() {
                    let vrow = &v[((bi * hkv + kh) * lmax + j) * d..][..d];
                    for t in 0..d {
                        o[t] += (p / sum * f64::from(vrow[t])) as f32;
                    }
                }
            }
        }
    }
    out
}

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
    let mut fails = Vec::new();
    let mut count = 0;
    let mut worst = 0f32;
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
                        let (err, ok) =
                            run_attn((b, g * hkv, hkv, lq, lmax, d), fill, dt, pk, bshd, seed);
                        count += 1;
                        worst = worst.max(err);
                        if !ok {
                            fails.push(format!(
                                "D={d} g={g} fill={fill} Lq={lq} B={b} dt={dt} bshd={bshd}: max err {err}"
                            ));
                        }
                    }
                }
            }
        }
    }
    // Llama-3.2-1B's decode shape and an odd cache length.
    for (shape, fill) in [((1, 32, 8, 1, 1024, 64), 700), ((1, 4, 1, 2, 77, 128), 77)] {
        seed += 1;
        let (err, ok) = run_attn(shape, fill, BF16, Pos::First, false, seed);
        count += 1;
        worst = worst.max(err);
        if !ok {
            fails.push(format!("{shape:?} fill={fill}: max err {err}"));
        }
    }
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
    let (qn_ptr, kn_ptr) = if norm.is_some() {
        (
            &wh[0].0 as *const *mut c_void,
            &wh[1].0 as *const *mut c_void,
        )
    } else {
        (std::ptr::null(), std::ptr::null())
    };
    // The packed row: [v | q | k | 8 unused] per (b, i), from the [B, H, Lq, D] arrays.
    let width = (hq + 2 * hkv) * d + 8;
    let (v_off, q_off, k_off) = (0, hkv * d, (hq + hkv) * d);
    let mut row = vec![0f32; b * lq * width];
    for (src, off, heads) in [(&vn, v_off, hkv), (&q0, q_off, hq), (&kn0, k_off, hkv)] {
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
    let qkv_buf = DevBuf::from_host(&encode(&row, dt));
    let qkv_sizes = [b as i64, lq as i64, width as i64];
    let qkvh = wrap(&qkv_buf, 0, &qkv_sizes, &contiguous(&qkv_sizes), dt);
    let st = if packed {
        // SAFETY: live handles; out-pointer to a local.
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
                &mut out,
            )
        }
    } else {
        // SAFETY: live handles; out-pointer to a local.
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
                &mut out,
            )
        }
    };
    assert_eq!(st, 0, "attention_rope: {}", last_error());
    let out = Handle(out);
    // Reference: rotate, write, attend. Rows of q are (b, h, i); of the new keys (b, hkv, i).
    let crow = |bi: usize, i: usize| if cb == 1 { i } else { bi * lq + i };
    let qr = rope_rows(&q, &c, &sn, d, dt, &|r| crow(r / (hq * lq), r % lq));
    let kr = rope_rows(&kn, &c, &sn, d, dt, &|r| crow(r / (hkv * lq), r % lq));
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
    let want = attn_ref(&qr, &k, &v, &pos, (b, hq, hkv, lq, lmax, d), scale);
    // The result is [B, Hq, Lq, D] laid out [B, Lq, Hq, D].
    let got_bthd = read(&out, b * hq * lq * d, dt);
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
    let (err, ok) = check_close(&got, &want, dt);
    let kc = decode(&to_host(bufs[5].ptr(), k.len() * 2), dt);
    let vc = decode(&to_host(bufs[6].ptr(), v.len() * 2), dt);
    // Without a norm every written key is exact; the norm's rsqrt may move a value by an ulp.
    let keys_ok = if norm.is_none() {
        kc == k
    } else {
        check_close(&kc, &k, dt).1
    };
    (err, ok && keys_ok && vc == v)
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn attention_rope_writes_the_caches_and_matches_the_reference() {
    require_gpu("attention_rope_writes_the_caches_and_matches_the_reference");
    let mut fails = Vec::new();
    let (mut count, mut worst, mut seed) = (0, 0f32, 99u64);
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
                    let (err, ok) = run_attn_rope(shape, fill, dt, (cb, norm, packed), seed);
                    count += 1;
                    worst = worst.max(err);
                    if !ok {
                        fails.push(format!(
                            "{shape:?} fill={fill} cos batch {cb} dt={dt} norm {norm:?} packed {packed}: max err {err}"
                        ));
                    }
                }
            }
        }
    }
    println!(
        "attention_rope: {count} cases, largest abs error {worst:.3e}, {} failures",
        fails.len()
    );
    assert!(fails.is_empty(), "{fails:#?}");
}

// ------------------------------------------------------------------ CUDA graphs, timing

/// The primary context of device 0 made current on this thread.
fn context() {
    let mut dev = 0;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: driver calls with out-pointers to locals.
    unsafe {
        assert_eq!(sys::cuInit(0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuDeviceGet(&mut dev, 0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuCtxSetCurrent(ctx), sys::CUresult::CUDA_SUCCESS);
    }
}

fn ok(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// Capture `f` (which enqueues work through the shims on the guarded stream) into a graph.
fn capture(stream: sys::CUstream, f: &mut dyn FnMut()) -> sys::CUgraphExec {
    let mut guard = std::ptr::null_mut();
    // SAFETY: a live stream of device 0; out-pointer to a local.
    let st = unsafe { (shims().stream_guard)(stream.cast(), 0, &mut guard) };
    assert_eq!(st, 0, "{}", last_error());
    // SAFETY: a live stream, not capturing yet.
    ok(
        unsafe {
            sys::cuStreamBeginCapture_v2(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        },
        "cuStreamBeginCapture",
    );
    f();
    let mut graph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above.
    ok(
        unsafe { sys::cuStreamEndCapture(stream, &mut graph) },
        "cuStreamEndCapture",
    );
    // SAFETY: the guard made above, deleted once.
    unsafe { (shims().delete_guard)(guard) };
    let mut exec = std::ptr::null_mut();
    // SAFETY: a complete graph; out-pointer to a local.
    ok(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
        "cuGraphInstantiate",
    );
    // SAFETY: the graph is no longer needed once instantiated.
    unsafe { sys::cuGraphDestroy(graph) };
    exec
}

fn new_stream() -> sys::CUstream {
    context();
    let mut s = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; context current.
    ok(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate");
    s
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn kernels_run_inside_a_cuda_graph() {
    require_gpu("kernels_run_inside_a_cuda_graph");
    let stream = new_stream();
    let mut rng = Rng(99);
    let (m, n, k) = (3usize, 300usize, 2048usize);
    let x = rng.vec(m * k);
    let w = rng.vec(n * k);
    let (xd, wd) = (
        DevBuf::from_host(&encode(&x, BF16)),
        DevBuf::from_host(&encode(&w, BF16)),
    );
    let xh = wrap(&xd, 0, &[m as i64, k as i64], &[k as i64, 1], BF16);
    let wh = wrap(&wd, 0, &[n as i64, k as i64], &[k as i64, 1], BF16);
    // Attention: Llama-like, device position (read at replay time).
    let shape = (1usize, 8usize, 2usize, 1usize, 256usize, 64usize);
    let (b, hq, hkv, lq, lmax, d) = shape;
    let q = rng.vec(b * hq * lq * d);
    let kc = rng.vec(b * hkv * lmax * d);
    let vc = rng.vec(b * hkv * lmax * d);
    let (qd, kd, vd) = (
        DevBuf::from_host(&encode(&q, BF16)),
        DevBuf::from_host(&encode(&kc, BF16)),
        DevBuf::from_host(&encode(&vc, BF16)),
    );
    let pd = DevBuf::from_host(&0i64.to_le_bytes());
    let qs = [b as i64, hq as i64, lq as i64, d as i64];
    let cs = [b as i64, hkv as i64, lmax as i64, d as i64];
    let (qh, kh, vh) = (
        wrap(&qd, 0, &qs, &contiguous(&qs), BF16),
        wrap(&kd, 0, &cs, &contiguous(&cs), BF16),
        wrap(&vd, 0, &cs, &contiguous(&cs), BF16),
    );
    let ph = wrap(&pd, 0, &[1], &[1], I64);
    let mut y = std::ptr::null_mut();
    let mut o = std::ptr::null_mut();
    let exec = capture(stream, &mut || {
        // SAFETY: live handles; out-pointers to locals.
        unsafe {
            assert_eq!((shims().gemv)(xh.0, wh.0, &mut y), 0, "{}", last_error());
            assert_eq!(
                (shims().attn)(qh.0, kh.0, vh.0, ph.0, 0.125, &mut o),
                0,
                "{}",
                last_error()
            );
        }
    });
    let (y, o) = (Handle(y), Handle(o));
    // Replay with the position set to 200 after the capture: the graph reads it then.
    let p200 = 200i64.to_le_bytes();
    // SAFETY: blocking copy of 8 bytes into the position buffer.
    let st = unsafe { (api().memcpy)(std::ptr::null(), pd.ptr(), p200.as_ptr().cast(), 8) };
    assert_eq!(st, 0);
    // SAFETY: an instantiated graph and a live stream.
    ok(unsafe { sys::cuGraphLaunch(exec, stream) }, "cuGraphLaunch");
    // SAFETY: live stream.
    ok(
        unsafe { sys::cuStreamSynchronize(stream) },
        "cuStreamSynchronize",
    );
    let (ey, gy) = check_close(
        &read(&y, m * n, BF16),
        &gemv_ref(&x, &w, None, m, n, k),
        BF16,
    );
    let want = attn_ref(&q, &kc, &vc, &[200], shape, 0.125);
    let (eo, go) = check_close(&read(&o, b * hq * lq * d, BF16), &want, BF16);
    println!("graph replay: gemv max err {ey:.3e}, attention (position 200 set after capture) max err {eo:.3e}");
    assert!(gy && go);
    // SAFETY: the graph is not running (stream synchronized).
    unsafe { sys::cuGraphExecDestroy(exec) };
}

/// GPU time per call of `f` (enqueued `reps` times in one graph), median of 5 replays.
fn time_graph(stream: sys::CUstream, reps: usize, f: &mut dyn FnMut(usize)) -> f64 {
    let mut i = 0;
    let exec = capture(stream, &mut || {
        for _ in 0..reps {
            f(i);
            i += 1;
        }
    });
    let (mut e0, mut e1) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: out-pointers to locals, context current.
    unsafe {
        ok(sys::cuEventCreate(&mut e0, 0), "cuEventCreate");
        ok(sys::cuEventCreate(&mut e1, 0), "cuEventCreate");
    }
    let mut times = Vec::new();
    for it in 0..6 {
        // SAFETY: live events, graph and stream.
        unsafe {
            ok(sys::cuEventRecord(e0, stream), "cuEventRecord");
            ok(sys::cuGraphLaunch(exec, stream), "cuGraphLaunch");
            ok(sys::cuEventRecord(e1, stream), "cuEventRecord");
            ok(sys::cuEventSynchronize(e1), "cuEventSynchronize");
        }
        let mut ms = 0f32;
        // SAFETY: both events completed.
        ok(
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, e0, e1) },
            "cuEventElapsedTime",
        );
        if it > 0 {
            times.push(f64::from(ms) * 1000.0 / reps as f64);
        }
    }
    // SAFETY: nothing uses them any more.
    unsafe {
        sys::cuEventDestroy_v2(e0);
        sys::cuEventDestroy_v2(e1);
        sys::cuGraphExecDestroy(exec);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn decode_bench() {
    require_gpu("decode_bench");
    let stream = new_stream();
    let mut rng = Rng(5);
    println!(
        "GEMV (bf16, y = x W^T): GPU time per call from CUDA events around a graph of calls; the"
    );
    println!("weights rotate over copies totalling >= 256 MiB so that they come from HBM, not L2.");
    println!(
        "Each call is an allocation node, the kernel and a free node of the graph: the time per"
    );
    println!(
        "call includes the gaps between them (the floor below), which CUPTI kernel time does not."
    );
    {
        // The per-call floor: the smallest GEMV, same graph structure.
        let xd = DevBuf::from_host(&encode(&rng.vec(8), BF16));
        let wd = DevBuf::from_host(&encode(&rng.vec(64), BF16));
        let xh = wrap(&xd, 0, &[1, 8], &[8, 1], BF16);
        let wh = wrap(&wd, 0, &[8, 8], &[8, 1], BF16);
        let us = time_graph(stream, 200, &mut |_| {
            let mut y = std::ptr::null_mut();
            // SAFETY: live handles; out-pointer to a local; the output is freed in the graph.
            unsafe {
                assert_eq!((shims().gemv)(xh.0, wh.0, &mut y), 0, "{}", last_error());
                (api().delete_tensor)(y);
            }
        });
        println!("GEMV floor: M=1 N=8 K=8 takes {us:.2} us per call");
    }
    let header = GEMV_VARIANTS
        .iter()
        .map(|&v| format!("{:>8} {:>6} {:>5}", variant_name(v) + " us", "GB/s", "%"))
        .collect::<Vec<_>>()
        .join(" |");
    println!("GEMV {:>7} {:>6} {:>3} | {header} | best", "N", "K", "M");
    let mut best_rows = Vec::new();
    for (n, k) in MODEL_SHAPES {
        let wbytes = n * k * 2;
        let copies = (256usize << 20).div_ceil(wbytes).max(1);
        // Weights: random bits of bf16 magnitude (values do not matter for timing).
        let wbuf: Vec<u8> = encode(&rng.vec(n * k), BF16);
        let ws: Vec<DevBuf> = (0..copies).map(|_| DevBuf::from_host(&wbuf)).collect();
        let wh: Vec<Handle> = ws
            .iter()
            .map(|d| wrap(d, 0, &[n as i64, k as i64], &[k as i64, 1], BF16))
            .collect();
        for m in [1usize, 2, 3, 4, 8, 16] {
            let xd = DevBuf::from_host(&encode(&rng.vec(m * k), BF16));
            let xh = wrap(&xd, 0, &[m as i64, k as i64], &[k as i64, 1], BF16);
            let reps = (copies * 4).clamp(20, 200);
            let bytes = (n * k + m * k + m * n) as f64 * 2.0;
            let mut cols = Vec::new();
            let mut best = (f64::INFINITY, -1);
            for v in GEMV_VARIANTS {
                set_gemv_variant(v);
                let us = time_graph(stream, reps, &mut |i| {
                    let mut y = std::ptr::null_mut();
                    // SAFETY: live handles; out-pointer to a local; the output is freed in the graph.
                    unsafe {
                        assert_eq!(
                            (shims().gemv)(xh.0, wh[i % copies].0, &mut y),
                            0,
                            "{}",
                            last_error()
                        );
                        (api().delete_tensor)(y);
                    }
                });
                let gbs = bytes / us / 1e3;
                cols.push(format!(
                    "{us:>8.2} {gbs:>6.0} {:>4.0}%",
                    gbs / 4800.0 * 100.0
                ));
                if v >= 0 && us < best.0 {
                    best = (us, v);
                }
            }
            println!(
                "     {n:>7} {k:>6} {m:>3} | {} | {}",
                cols.join(" |"),
                variant_name(best.1)
            );
            best_rows.push((n, k, m, best.1));
        }
    }
    set_gemv_variant(-1);
    println!(
        "GEMV fastest forced variant (M = 1..4): {}",
        best_rows
            .iter()
            .filter(|r| r.2 <= 4)
            .map(|(n, k, m, v)| format!("{n}x{k}/M{m}={}", variant_name(*v)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("decode attention (bf16, D=64): GPU time per call, same method");
    println!(
        "{:>3} {:>4} {:>4} {:>4} {:>6} {:>9} {:>8}",
        "B", "Hq", "Hkv", "Lq", "fill", "us", "GB/s"
    );
    for (b, hq, hkv, lq, lmax, fill) in [
        (1usize, 32usize, 8usize, 1usize, 1024usize, 1024usize),
        (1, 32, 8, 1, 1024, 128),
        (1, 32, 8, 16, 1024, 1024),
        (4, 32, 8, 1, 1024, 1024),
        (1, 32, 8, 1, 8192, 8192),
    ] {
        let d = 64;
        let q = DevBuf::from_host(&encode(&rng.vec(b * hq * lq * d), BF16));
        let kv: Vec<u8> = encode(&rng.vec(b * hkv * lmax * d), BF16);
        let (kd, vd) = (DevBuf::from_host(&kv), DevBuf::from_host(&kv));
        let qs = [b as i64, hq as i64, lq as i64, d as i64];
        let cs = [b as i64, hkv as i64, lmax as i64, d as i64];
        let (qh, kh, vh) = (
            wrap(&q, 0, &qs, &contiguous(&qs), BF16),
            wrap(&kd, 0, &cs, &contiguous(&cs), BF16),
            wrap(&vd, 0, &cs, &contiguous(&cs), BF16),
        );
        let pd = DevBuf::from_host(&((fill - lq) as i64).to_le_bytes());
        let ph = wrap(&pd, 0, &[1], &[1], I64);
        let us = time_graph(stream, 100, &mut |_| {
            let mut o = std::ptr::null_mut();
            // SAFETY: live handles; out-pointer to a local; the output is freed in the graph.
            unsafe {
                assert_eq!(
                    (shims().attn)(qh.0, kh.0, vh.0, ph.0, 0.125, &mut o),
                    0,
                    "{}",
                    last_error()
                );
                (api().delete_tensor)(o);
            }
        });
        let bytes = (2 * b * hkv * fill * d) as f64 * 2.0;
        println!(
            "{b:>3} {hq:>4} {hkv:>4} {lq:>4} {fill:>6} {us:>9.2} {:>8.0}",
            bytes / us / 1e3
        );
    }
}
