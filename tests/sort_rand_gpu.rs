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

fn state() -> (u64, u64) {
    let (mut s, mut o) = (0u64, 0u64);
    // SAFETY: out-pointers to locals.
    ok(unsafe { (shims().state)(0, &mut s, &mut o) }, "rng state");
    (s, o)
}

fn rand(n: i64, dt: i32) -> Vec<u8> {
    let mut h: H = std::ptr::null_mut();
    let mut d = dt;
    let mut dev = CUDA;
    // SAFETY: one size, optional args point to locals or are null; out-pointer to a local.
    let rc = unsafe {
        (shims().rand)(
            &n,
            1,
            &mut d,
            std::ptr::null_mut(),
            &mut dev,
            0,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    ok(rc, "rand");
    let (b, _, got) = read_back(h, n as usize, 1);
    assert_eq!(got, dt);
    delete(h);
    b
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn rand_is_the_reference_philox_stream_and_advances_the_offset() {
    require_gpu("rand_is_the_reference_philox_stream_and_advances_the_offset");
    let seed = 0x1234_5678_9ABC_DEF0u64;
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed) }, "seed");
    assert_eq!(state(), (seed, 0));
    let n = 1001usize;
    let a = rand(n as i64, F32);
    let want = philox_ref::uniform_f32(seed, 0, n);
    let got: Vec<f32> = a
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, want, "float32 draw vs the CPU reference");
    let off = philox_ref::words_consumed(n as u64, 4);
    assert_eq!(state(), (seed, off));
    // The next draw continues the stream.
    let b = rand(7, BF16);
    let want: Vec<u8> = philox_ref::uniform_bf16_bits(seed, off, 7)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(b, want, "bfloat16 draw");
    let off = off + philox_ref::words_consumed(7, 4);
    let c = rand(9, F16);
    let want: Vec<u8> = philox_ref::uniform_f16_bits(seed, off, 9)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(c, want, "float16 draw");
    let off = off + philox_ref::words_consumed(9, 4);
    let d = rand(5, F64);
    let want: Vec<u8> = philox_ref::uniform_f64(seed, off, 5)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(d, want, "float64 draw");
    assert_eq!(state(), (seed, off + philox_ref::words_consumed(5, 2)));
    // Same seed, same numbers; another seed, other numbers.
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed) }, "seed");
    assert_eq!(rand(n as i64, F32), a, "determinism for a fixed seed");
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed + 1) }, "seed");
    assert_ne!(rand(n as i64, F32), a);
    // Empty draws consume nothing.
    let before = state();
    assert!(rand(0, F32).is_empty());
    assert_eq!(state(), before);
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn rand_is_uniform_on_0_1() {
    require_gpu("rand_is_uniform_on_0_1");
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, 2024) }, "seed");
    let n = 1usize << 22;
    let b = rand(n as i64, F32);
    let v: Vec<f32> = b
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(
        v.iter().all(|&x| (0.0..1.0).contains(&x)),
        "a value outside [0, 1)"
    );
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    // Standard error of the mean: sqrt(1/12 / n) = 1.4e-4.
    assert!((mean - 0.5).abs() < 1e-3, "mean {mean}");
    assert!((var - 1.0 / 12.0).abs() < 1e-3, "variance {var}");
    let bins = 256usize;
    let mut h = vec![0u64; bins];
    for &x in &v {
        h[(x * bins as f32) as usize] += 1;
    }
    let e = n as f64 / bins as f64;
    let chi2: f64 = h.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
    // 255 degrees of freedom: the 99.9th percentile is about 330.
    println!("rand f32: n {n}, mean {mean:.6}, variance {var:.6}, chi2(255) {chi2:.1}");
    assert!(chi2 < 330.0, "chi2 {chi2}");
    // Lag-1 correlation of consecutive values (different words and blocks).
    let c: f64 = v
        .windows(2)
        .map(|w| (f64::from(w[0]) - 0.5) * (f64::from(w[1]) - 0.5))
        .sum::<f64>()
        / (n as f64 - 1.0)
        * 12.0;
    assert!(c.abs() < 5e-3, "lag-1 correlation {c}");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn randint_bounds_reference_and_inductor_seeds() {
    require_gpu("randint_bounds_reference_and_inductor_seeds");
    let seed = 99u64;
    // SAFETY: plain values.
    ok(unsafe { (shims().seed)(0, seed) }, "seed");
    // Inductor's seeds: randint_low_out(out int64 [count], INT64_MIN, INT64_MAX, [count]).
    let count = 13i64;
    let (_b, out) = device_tensor(&vec![0u8; 8 * count as usize], I64, &[count], &[1]);
    // SAFETY: live handle; one size.
    ok(
        unsafe { (shims().randint_low_out)(out, i64::MIN, i64::MAX, &count, 1) },
        "randint_low_out",
    );
    let (b, _, _) = read_back(out, count as usize, 1);
    let got: Vec<i64> = b
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want = philox_ref::randint_i64(seed, 0, i64::MIN, u64::MAX, count as usize);
    assert_eq!(got, want, "seeds vs the CPU reference");
    assert_eq!(state().1, philox_ref::words_consumed(count as u64, 2));
    // A size that does not match `out` is refused (no resize).
    let other = 12i64;
    // SAFETY: live handle; one size.
    let rc = unsafe { (shims().randint_low_out)(out, 0, 5, &other, 1) };
    assert_eq!(rc, 1);
    // high <= low is refused.
    // SAFETY: live handle; one size.
    let rc = unsafe { (shims().randint_low_out)(out, 5, 5, &count, 1) };
    assert_eq!(rc, 1);
    assert!(last_error().contains("less than"), "{}", last_error());
    delete(out);

    // randint(high) in int64: bounds, every value drawn, roughly uniform.
    let n = 100_000i64;
    let mut h: H = std::ptr::null_mut();
    // SAFETY: one size, null optional args, out-pointer to a local.
    let rc = unsafe {
        (shims().randint)(
            10,
            &n,
            1,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            -1,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    ok(rc, "randint");
    let (b, _, dt) = read_back(h, n as usize, 1);
    assert_eq!(dt, I64);
    let v: Vec<i64> = b
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let mut counts = [0u64; 10];
    for &x in &v {
        assert!((0..10).contains(&x), "{x} outside [0, 10)");
        counts[x as usize] += 1;
    }
    let e = n as f64 / 10.0;
    let chi2: f64 = counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
    println!("randint(10): counts {counts:?}, chi2(9) {chi2:.1}");
    assert!(
        chi2 < 27.9,
        "chi2 {chi2} (99.9th percentile of 9 dof: 27.9)"
    );
    delete(h);

    // randint_low(-5, 17) in int32.
    let mut dt = I32;
    let m = 5000i64;
    // SAFETY: as above; dtype points to a local.
    let rc = unsafe {
        (shims().randint_low)(
            -5,
            17,
            &m,
            1,
            &mut dt,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    ok(rc, "randint_low");
    let (b, _, got_dt) = read_back(h, m as usize, 1);
    assert_eq!(got_dt, I32);
    let v: Vec<i32> = b
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(v.iter().all(|x| (-5..17).contains(x)));
    assert!(
        (-5..17).all(|x| v.contains(&x)),
        "every value of [-5, 17) drawn"
    );
    delete(h);
    // Out of the dtype's range.
    let mut dt = U8;
    // SAFETY: as above.
    let rc = unsafe {
        (shims().randint_low)(
            0,
            300,
            &m,
            1,
            &mut dt,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            &mut h,
        )
    };
    assert_eq!(rc, 1);
    assert!(last_error().contains("out of bounds"), "{}", last_error());
}
