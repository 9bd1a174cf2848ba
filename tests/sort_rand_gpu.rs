//! GPU tests of the sort and random fallback ops through the C ABI of the
//! built cdylib (`aoti_torch_cuda_sort_stable`, `_rand`, `_randint`,
//! `_randint_low`, `_randint_low_out`, and the generator's seed/state hooks),
//! on device tensors made with `aoti_torch_create_tensor_from_blob`.
//! Sorts are checked against a CPU stable sort with PyTorch's order (NaN
//! largest, -0.0 equal to 0.0); random draws bit for bit against the CPU
//! Philox reference (`src/kernels/philox_ref.rs`, included below, whose
//! known-answer tests run here too) and statistically.
//! They need a CUDA device: ignored by a plain `cargo test`.
// Shim function pointers are resolved by name; their types are the fields'.
#![allow(clippy::missing_transmute_annotations)]

mod common;
#[path = "../src/kernels/philox_ref.rs"]
mod philox_ref;

use common::*;
use std::ffi::{c_void, CString};

type H = *mut c_void;
const CUDA: i32 = 1;
const U8: i32 = 0;
const I32: i32 = 3;
const I64: i32 = 4;
const F16: i32 = 5;
const F32: i32 = 6;
const F64: i32 = 7;
const BOOL: i32 = 11;
const BF16: i32 = 15;

struct Shims {
    from_blob: unsafe extern "C" fn(
        *mut c_void,
        i64,
        *const i64,
        *const i64,
        i64,
        i32,
        i32,
        i32,
        *mut H,
    ) -> i32,
    data_ptr: unsafe extern "C" fn(H, *mut *mut c_void) -> i32,
    strides: unsafe extern "C" fn(H, *mut *mut i64) -> i32,
    dtype: unsafe extern "C" fn(H, *mut i32) -> i32,
    delete: unsafe extern "C" fn(H) -> i32,
    sort: unsafe extern "C" fn(H, *mut i32, i64, i32, *mut H, *mut H) -> i32,
    rand: unsafe extern "C" fn(
        *const i64,
        i64,
        *mut i32,
        *mut i32,
        *mut i32,
        i32,
        *mut i32,
        *mut H,
    ) -> i32,
    randint: unsafe extern "C" fn(
        i64,
        *const i64,
        i64,
        *mut i32,
        *mut i32,
        *mut i32,
        i32,
        *mut i32,
        *mut H,
    ) -> i32,
    randint_low: unsafe extern "C" fn(
        i64,
        i64,
        *const i64,
        i64,
        *mut i32,
        *mut i32,
        *mut i32,
        i32,
        *mut i32,
        *mut H,
    ) -> i32,
    randint_low_out: unsafe extern "C" fn(H, i64, i64, *const i64, i64) -> i32,
    seed: unsafe extern "C" fn(i32, u64) -> i32,
    state: unsafe extern "C" fn(i32, *mut u64, *mut u64) -> i32,
}

fn shims() -> &'static Shims {
    static S: std::sync::OnceLock<Shims> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        api(); // dlopen(RTLD_GLOBAL) of the cdylib
        let sym = |n: &str| {
            let c = CString::new(n).unwrap();
            // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
            assert!(!p.is_null(), "missing {n}");
            p
        };
        // SAFETY: each symbol has the declared C signature (src/shim).
        unsafe {
            Shims {
                from_blob: std::mem::transmute(sym("aoti_torch_create_tensor_from_blob")),
                data_ptr: std::mem::transmute(sym("aoti_torch_get_data_ptr")),
                strides: std::mem::transmute(sym("aoti_torch_get_strides")),
                dtype: std::mem::transmute(sym("aoti_torch_get_dtype")),
                delete: std::mem::transmute(sym("aoti_torch_delete_tensor_object")),
                sort: std::mem::transmute(sym("aoti_torch_cuda_sort_stable")),
                rand: std::mem::transmute(sym("aoti_torch_cuda_rand")),
                randint: std::mem::transmute(sym("aoti_torch_cuda_randint")),
                randint_low: std::mem::transmute(sym("aoti_torch_cuda_randint_low")),
                randint_low_out: std::mem::transmute(sym("aoti_torch_cuda_randint_low_out")),
                seed: std::mem::transmute(sym("et_cuda_debug_rng_seed")),
                state: std::mem::transmute(sym("et_cuda_debug_rng_state")),
            }
        }
    })
}

fn ok(rc: i32, what: &str) {
    assert_eq!(rc, 0, "{what}: {}", last_error());
}

fn esize(dt: i32) -> usize {
    match dt {
        U8 | BOOL => 1,
        F16 | BF16 => 2,
        I32 | F32 => 4,
        _ => 8,
    }
}

/// A device tensor over a copy of `bytes` (kept alive by the returned buffer).
fn device_tensor(bytes: &[u8], dt: i32, sizes: &[i64], strides: &[i64]) -> (DevBuf, H) {
    let buf = DevBuf::from_host(bytes);
    let mut h: H = std::ptr::null_mut();
    // SAFETY: the buffer holds `bytes.len()` device bytes, enough for the view (the callers
    // pass strides of a dense layout of `sizes`).
    let rc = unsafe {
        (shims().from_blob)(
            buf.ptr(),
            sizes.len() as i64,
            sizes.as_ptr(),
            strides.as_ptr(),
            0,
            dt,
            CUDA,
            0,
            &mut h,
        )
    };
    ok(rc, "create_tensor_from_blob");
    (buf, h)
}

/// The dense storage of an output tensor of `numel` elements, and its strides.
fn read_back(h: H, numel: usize, rank: usize) -> (Vec<u8>, Vec<i64>, i32) {
    let mut p: *mut c_void = std::ptr::null_mut();
    let mut st: *mut i64 = std::ptr::null_mut();
    let mut dt = -1;
    // SAFETY: live handle; out-pointers to locals.
    unsafe {
        ok((shims().data_ptr)(h, &mut p), "get_data_ptr");
        ok((shims().strides)(h, &mut st), "get_strides");
        ok((shims().dtype)(h, &mut dt), "get_dtype");
    }
    let strides = if rank == 0 {
        Vec::new()
    } else {
        // SAFETY: the tensor's strides array has `rank` entries while it lives.
        unsafe { std::slice::from_raw_parts(st, rank) }.to_vec()
    };
    (to_host(p, numel * esize(dt)), strides, dt)
}

fn delete(h: H) {
    // SAFETY: a live handle owned by the test, deleted once.
    ok(unsafe { (shims().delete)(h) }, "delete");
}

fn f16_to_f64(b: u16) -> f64 {
    let (s, e, m) = ((b >> 15) & 1, ((b >> 10) & 0x1F) as i32, (b & 0x3FF) as f64);
    let v = match e {
        0 => m * 2f64.powi(-24),
        31 if m == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    };
    if s == 1 {
        -v
    } else {
        v
    }
}

#[derive(Clone, Copy, Debug)]
enum V {
    F(f64),
    I(i64),
}

fn value(dt: i32, b: &[u8], i: usize) -> V {
    let e = &b[i * esize(dt)..(i + 1) * esize(dt)];
    match dt {
        U8 | BOOL => V::I(i64::from(e[0])),
        I32 => V::I(i64::from(i32::from_le_bytes(e.try_into().unwrap()))),
        I64 => V::I(i64::from_le_bytes(e.try_into().unwrap())),
        F16 => V::F(f16_to_f64(u16::from_le_bytes(e.try_into().unwrap()))),
        BF16 => V::F(f64::from(f32::from_bits(
            u32::from(u16::from_le_bytes(e.try_into().unwrap())) << 16,
        ))),
        F32 => V::F(f64::from(f32::from_le_bytes(e.try_into().unwrap()))),
        _ => V::F(f64::from_le_bytes(e.try_into().unwrap())),
    }
}

/// PyTorch's sort order: NaN after everything, -0.0 == 0.0.
fn order(a: V, b: V) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (a, b) {
        (V::I(x), V::I(y)) => x.cmp(&y),
        (V::F(x), V::F(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => Equal,
            (true, false) => Greater,
            (false, true) => Less,
            _ => x.partial_cmp(&y).unwrap_or(Equal),
        },
        _ => unreachable!(),
    }
}

/// Input values with ties, NaN, +-0.0 and infinities (floats), as raw bytes.
fn make_input(dt: i32, numel: usize, seed: u64, distinct: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(numel * esize(dt));
    for _ in 0..numel {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (x % distinct) as i64 - (distinct / 2) as i64;
        let special = x >> 60; // 1/16 each
        let f = match special {
            0 => f64::NAN,
            1 => -0.0,
            2 => 0.0,
            3 if x & 1 == 0 => f64::INFINITY,
            3 => f64::NEG_INFINITY,
            _ => k as f64 * 0.25,
        };
        match dt {
            U8 => out.push((k as u8) & 0x7F),
            BOOL => out.push((k & 1) as u8),
            I32 => out.extend(
                (if special == 0 {
                    i32::MIN
                } else {
                    k as i32 * 1000
                })
                .to_le_bytes(),
            ),
            I64 => out.extend(
                (if special == 0 {
                    i64::MIN
                } else {
                    k * (1 << 40)
                })
                .to_le_bytes(),
            ),
            F16 => {
                let v = f as f32;
                // fp16 of small quarter-integers, NaN, +-0, +-inf (exact conversions).
                let bits: u16 = if v.is_nan() {
                    0x7E00
                } else if v.is_infinite() {
                    if v > 0.0 {
                        0x7C00
                    } else {
                        0xFC00
                    }
                } else if v == 0.0 {
                    if v.is_sign_negative() {
                        0x8000
                    } else {
                        0
                    }
                } else {
                    let (s, a) = (u16::from(v < 0.0) << 15, v.abs());
                    let e = a.log2().floor() as i32;
                    let m = ((a / 2f32.powi(e) - 1.0) * 1024.0).round() as u16;
                    s | (((e + 15) as u16) << 10) | m
                };
                out.extend(bits.to_le_bytes());
            }
            BF16 => out.extend((((f as f32).to_bits() >> 16) as u16).to_le_bytes()),
            F32 => out.extend((f as f32).to_le_bytes()),
            _ => out.extend(f.to_le_bytes()),
        }
    }
    out
}

fn contiguous(sizes: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * sizes[d + 1].max(1);
    }
    s
}

// The tests of sort, then of the random ops (they keep their names: `include!`, not `mod`).
include!("sort_rand_gpu/sort.rs");
include!("sort_rand_gpu/rand.rs");
