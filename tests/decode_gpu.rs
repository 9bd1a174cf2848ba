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
    attn_splits: GemvTuning,
    attn_rows: GemvTuning,
}

/// The address of `name` in the cdylib `api()` builds and opens; panics when it is not exported.
fn lib_sym(name: &str) -> *mut c_void {
    static H: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let h = *H.get_or_init(|| {
        let _ = api(); // builds and opens the cdylib
        let path = CString::new(cdylib_path().to_string_lossy().into_owned()).expect("path");
        // SAFETY: re-opening the library api() opened (a reference count, same handle).
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        assert!(!h.is_null(), "dlopen {:?}", cdylib_path());
        h as usize
    }) as *mut c_void;
    let c = CString::new(name).expect("name");
    // SAFETY: a live handle (never closed), a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "the library does not export {name}");
    p
}

fn shims() -> &'static Shims {
    static S: std::sync::OnceLock<Shims> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let sym = lib_sym;
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
                attn_splits: std::mem::transmute::<*mut c_void, GemvTuning>(sym(
                    "et_cuda_debug_attn_splits",
                )),
                attn_rows: std::mem::transmute::<*mut c_void, GemvTuning>(sym(
                    "et_cuda_debug_attn_rows",
                )),
            }
        }
    })
}

/// The short-context decode kernel's (key splits, rows a block) each case runs with
/// (`et_cuda_debug_attn_splits`, `et_cuda_debug_attn_rows`; -1: the built-in choice): one block
/// per KV head, clusters of 2, 3 and 8 blocks (1 where the device has no clusters), the built-in
/// choice, and each of those rows a block (where the kernel takes them) with one and three splits.
const CONFIGS: [(i32, i32); 9] = [
    (1, -1),
    (2, -1),
    (3, -1),
    (8, -1),
    (-1, -1),
    (-1, 1),
    (-1, 2),
    (3, 1),
    (1, 2),
];

/// Force the decode kernel's key splits and rows a block of later calls (-1: the built-in choice).
fn set_splits(n: i32, rows: i32) {
    let st = (shims().attn_splits)(n);
    assert_eq!(st, 0, "et_cuda_debug_attn_splits({n}): {}", last_error());
    let st = (shims().attn_rows)(rows);
    assert_eq!(st, 0, "et_cuda_debug_attn_rows({rows}): {}", last_error());
}

/// Cases run, the largest error, the failures.
#[derive(Default)]
struct Tally(usize, f32, Vec<String>);

impl Tally {
    /// Run `case` with each of [`CONFIGS`]; a failure is named by `what`, the split and the rows.
    fn each_split(&mut self, what: impl Fn() -> String, mut case: impl FnMut() -> (f32, bool)) {
        for (splits, rows) in CONFIGS {
            set_splits(splits, rows);
            let (err, ok) = case();
            self.0 += 1;
            self.1 = self.1.max(err);
            if !ok {
                self.2.push(format!(
                    "{} splits {splits} rows {rows}: max err {err}",
                    what()
                ));
            }
        }
        set_splits(-1, -1);
    }
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

// The tests by subject (they keep their names: `include!`, not `mod`).
include!("decode_gpu/gemv.rs");
include!("decode_gpu/attention.rs");
include!("decode_gpu/graphs.rs");
