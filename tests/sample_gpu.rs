//! GPU tests of the device-side next-token choice (`et_cuda_sample`, `et_cuda_sample_async`,
//! `kernels/sample.cu`) through the C ABI of the built cdylib: greedy against
//! `torch.argmax`'s rule, sampling against a CPU model of the same algorithm
//! (f32 weights, fixed-point masses, top-p threshold, pick in id order) over
//! many draws, the distribution of many draws, special rows, bad arguments,
//! and the time per call. They need a CUDA device: ignored by a plain `cargo test`.
#![allow(clippy::missing_transmute_annotations)]

mod common;

use common::*;
use executorch_cuda::ffi::ET_CUDA_STATUS_OK;
use std::ffi::{c_void, CString};

const F16: i32 = 5;
const F32: i32 = 6;
const BF16: i32 = 15;

type SampleFn =
    unsafe extern "C" fn(*const c_void, i32, i64, i32, f64, f64, u64, u64, *mut i64) -> i32;
type UniformFn = unsafe extern "C" fn(u64, u64, *mut f64) -> i32;

fn sym<T>(n: &str) -> T {
    api(); // dlopen(RTLD_GLOBAL) of the cdylib
    let c = CString::new(n).unwrap();
    // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    assert!(!p.is_null(), "missing {n}");
    // SAFETY: the caller names T as the symbol's C signature (src/ffi/sample.rs).
    unsafe { std::mem::transmute_copy(&p) }
}

fn sample_fn() -> SampleFn {
    sym("et_cuda_sample")
}

fn uniform(seed: u64, step: u64) -> f64 {
    let mut u = -1.0;
    let f = sym::<UniformFn>("et_cuda_sample_uniform");
    // SAFETY: out-pointer to a local.
    let st = unsafe { f(seed, step, &mut u) };
    assert_eq!(st, 0);
    u
}

/// A row of logits in `dtype`, as device bytes, and the values the device reads.
fn encode(values: &[f32], dtype: i32) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut seen = Vec::new();
    for &v in values {
        match dtype {
            F32 => {
                bytes.extend_from_slice(&v.to_le_bytes());
                seen.push(v);
            }
            BF16 => {
                let b = (v.to_bits() >> 16) as u16; // truncation: any bf16 will do
                bytes.extend_from_slice(&b.to_le_bytes());
                seen.push(f32::from_bits((b as u32) << 16));
            }
            _ => {
                let h = f16_bits(v);
                bytes.extend_from_slice(&h.to_le_bytes());
                seen.push(f16_value(h));
            }
        }
    }
    (bytes, seen)
}

/// f32 -> f16 bits for values in the normal f16 range, NaN and infinities (truncating).
fn f16_bits(v: f32) -> u16 {
    if v.is_nan() {
        return 0x7e00;
    }
    if v.is_infinite() {
        return if v > 0.0 { 0x7c00 } else { 0xfc00 };
    }
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let e = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if e <= 0 {
        return sign;
    }
    if e >= 31 {
        return sign | 0x7bff;
    }
    sign | ((e as u16) << 10) | ((b >> 13) & 0x3ff) as u16
}

fn f16_value(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f32;
    match e {
        0 => sign * m * 2f32.powi(-24),
        31 if m == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        _ => sign * (1.0 + m / 1024.0) * 2f32.powi(e - 15),
    }
}

/// `torch.argmax`: the first maximum, NaN the largest.
fn argmax(v: &[f32]) -> i64 {
    let mut best = 0;
    for i in 1..v.len() {
        if v[best].is_nan() {
            break;
        }
        if v[i].is_nan() || v[i] > v[best] {
            best = i;
        }
    }
    best as i64
}

/// The CPU model of the kernel: weights, kept set, and the pick for `u`.
struct Model {
    w: Vec<u64>,
    kept: Vec<bool>,
}

fn model(v: &[f32], temperature: f64, top_p: f64) -> Option<Model> {
    let top = v
        .iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if top == f32::NEG_INFINITY {
        return None;
    }
    let inv = (1.0 / temperature) as f32;
    let p: Vec<f32> = v
        .iter()
        .map(|&x| {
            if x.is_nan() || x == f32::NEG_INFINITY {
                0.0
            } else if top == f32::INFINITY {
                if x == f32::INFINITY {
                    1.0
                } else {
                    0.0
                }
            } else {
                ((x - top) * inv).exp()
            }
        })
        .collect();
    let w: Vec<u64> = p
        .iter()
        .map(|&x| (x * 1_099_511_627_776.0) as u64)
        .collect();
    let mut kept: Vec<bool> = p.iter().map(|&x| x > 0.0).collect();
    if top_p < 1.0 {
        let total: u64 = w.iter().sum();
        let target = ((top_p * total as f64).ceil() as u64).max(1);
        let mut order: Vec<usize> = (0..v.len()).filter(|&i| w[i] > 0).collect();
        order.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap().then(a.cmp(&b)));
        let mut acc = 0;
        kept = vec![false; v.len()];
        for i in order {
            if acc >= target {
                break;
            }
            acc += w[i];
            kept[i] = true;
        }
    }
    Some(Model { w, kept })
}

impl Model {
    fn pick(&self, u: f64) -> i64 {
        let sum: u64 = self
            .w
            .iter()
            .zip(&self.kept)
            .filter(|(_, &k)| k)
            .map(|(w, _)| w)
            .sum();
        let target = ((u * sum as f64) as u64).min(sum - 1);
        let mut acc = 0;
        for (i, (&w, &k)) in self.w.iter().zip(&self.kept).enumerate() {
            if k && w > 0 {
                acc += w;
                if acc > target {
                    return i as i64;
                }
            }
        }
        unreachable!()
    }
}

fn device_sample(
    buf: &DevBuf,
    dtype: i32,
    vocab: usize,
    t: f64,
    top_p: f64,
    seed: u64,
    step: u64,
) -> i64 {
    let mut token = i64::MIN;
    // SAFETY: the buffer holds `vocab` elements of `dtype`; out-pointer to a local.
    let st = unsafe {
        sample_fn()(
            buf.ptr(),
            dtype,
            vocab as i64,
            0,
            t,
            top_p,
            seed,
            step,
            &mut token,
        )
    };
    assert_eq!(st, ET_CUDA_STATUS_OK, "et_cuda_sample: {}", last_error());
    token
}

/// Deterministic pseudo-normal values (sum of uniforms) scaled by `scale`.
fn logits(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let s: f64 = (0..4).map(|k| uniform(seed, (i * 4 + k) as u64)).sum();
            ((s - 2.0) * 1.7) as f32 * scale
        })
        .collect()
}

/// Deterministic values in [-8, 8) in steps of 1/64 (exact in bf16 and f16, many ties), cheap
/// enough for rows of 2^22.
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) % 1024) as f32 / 64.0 - 8.0
        })
        .collect()
}

/// Greedy rows of `n` logits: random, equal, -inf, and edits of the random row.
fn greedy_rows(n: usize) -> Vec<(&'static str, Vec<f32>)> {
    let base = noise(n, n as u64);
    let mut rows = vec![
        ("random", base.clone()),
        ("all equal", vec![1.5; n]),
        ("all -inf", vec![f32::NEG_INFINITY; n]),
    ];
    let mut edit = |name, f: &dyn Fn(&mut Vec<f32>)| {
        let mut r = base.clone();
        f(&mut r);
        rows.push((name, r));
    };
    edit("max last", &|r| r[n - 1] = 100.0);
    edit("max first and last", &|r| [r[0], r[n - 1]] = [100.0; 2]);
    // Every block boundary of et_argmax is a multiple of 256: equal maxima on both sides
    // of each one in the second half of the row (the earliest wins).
    edit("ties at block boundaries", &|r| {
        for i in (n / 2..n).filter(|&i| i > 0 && i % 256 == 0) {
            [r[i - 1], r[i]] = [50.0; 2];
        }
    });
    edit("NaN last", &|r| r[n - 1] = f32::NAN);
    edit("NaN first", &|r| r[0] = f32::NAN);
    edit("NaNs late, +inf earlier", &|r| {
        (n / 2..n).step_by(1001).for_each(|i| r[i] = f32::NAN);
        r[n / 4] = f32::INFINITY;
    });
    edit("+inf ties", &|r| {
        (n / 3..n).step_by(777).for_each(|i| r[i] = f32::INFINITY)
    });
    edit("-inf but one", &|r| {
        r.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
        r[n * 2 / 3] = -3.0;
    });
    edit("-0 before +0", &|r| {
        r.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
        r[n / 2..].iter_mut().step_by(2).for_each(|x| *x = -0.0);
        r[n - 1] = 0.0;
    });
    rows
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn greedy_is_torch_argmax() {
    require_gpu("greedy_is_torch_argmax");
    for dtype in [F32, BF16, F16] {
        for vocab in [1usize, 7, 33, 1000, 32_000, 151_936] {
            let mut v = logits(vocab.min(4096), 1, 3.0);
            v.resize(vocab, -1.0);
            // A repeated maximum late in the row: the first one wins.
            if vocab > 10 {
                v[vocab / 3] = 40.0;
                v[vocab - 2] = 40.0;
            }
            let (bytes, seen) = encode(&v, dtype);
            let buf = DevBuf::from_host(&bytes);
            assert_eq!(
                device_sample(&buf, dtype, vocab, 0.0, 1.0, 0, 0),
                argmax(&seen),
                "dtype {dtype} vocab {vocab}"
            );
        }
    }
    let (bytes, seen) = encode(&[1.0, f32::NAN, 5.0, f32::NAN], F32);
    let buf = DevBuf::from_host(&bytes);
    assert_eq!(device_sample(&buf, F32, 4, 0.0, 1.0, 0, 0), argmax(&seen));
    assert_eq!(argmax(&seen), 1);
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn greedy_over_many_blocks_is_torch_argmax() {
    require_gpu("greedy_over_many_blocks_is_torch_argmax");
    let sizes = [
        1usize,
        2,
        1023,
        1024,
        4097,
        32_000,
        128_256,
        151_936,
        1 << 22,
    ];
    let mut checked = 0;
    for vocab in sizes {
        for (name, v) in greedy_rows(vocab) {
            for dtype in [F32, BF16, F16] {
                let (bytes, seen) = encode(&v, dtype);
                let buf = DevBuf::from_host(&bytes);
                let want = argmax(&seen);
                // Twice: the blocks-done counter must be back at 0 after each launch.
                for _ in 0..2 {
                    assert_eq!(
                        device_sample(&buf, dtype, vocab, 0.0, 1.0, 0, 0),
                        want,
                        "{name}, dtype {dtype}, vocab {vocab}"
                    );
                }
                checked += 1;
            }
        }
    }
    println!("greedy over many blocks: {checked} rows equal to torch.argmax's rule");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn sampling_matches_the_cpu_model() {
    require_gpu("sampling_matches_the_cpu_model");
    let vocab = 50_000;
    for dtype in [BF16, F32] {
        let (bytes, seen) = encode(&logits(vocab, 7, 2.5), dtype);
        let buf = DevBuf::from_host(&bytes);
        for (t, top_p) in [(1.0, 1.0), (0.8, 0.9), (0.6, 0.5), (1.3, 0.95), (0.05, 0.7)] {
            let m = model(&seen, t, top_p).unwrap();
            let draws = 300;
            let (mut same, mut outside) = (0, 0);
            for step in 0..draws {
                let got = device_sample(&buf, dtype, vocab, t, top_p, 11, step);
                assert!((0..vocab as i64).contains(&got), "token {got}");
                outside += usize::from(!m.kept[got as usize]);
                same += usize::from(got == m.pick(uniform(11, step)));
                // The same seed and step: the same token.
                assert_eq!(got, device_sample(&buf, dtype, vocab, t, top_p, 11, step));
            }
            println!(
                "dtype {dtype} T={t} top_p={top_p}: {same}/{draws} draws equal to the CPU model, {outside} outside its kept set"
            );
            assert!(same * 100 >= draws as usize * 98, "{same}/{draws}");
            assert!(
                outside * 100 <= draws as usize,
                "{outside}/{draws} outside the kept set"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn draws_follow_the_distribution() {
    require_gpu("draws_follow_the_distribution");
    let v = [
        2.0f32,
        1.0,
        0.5,
        0.0,
        -1.0,
        -3.0,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let (bytes, _) = encode(&v, F32);
    let buf = DevBuf::from_host(&bytes);
    for top_p in [1.0, 0.8] {
        let m = model(&v, 1.0, top_p).unwrap();
        let sum: f64 =
            m.w.iter()
                .zip(&m.kept)
                .filter(|(_, &k)| k)
                .map(|(&w, _)| w as f64)
                .sum();
        let n = 20_000;
        let mut counts = [0usize; 8];
        for step in 0..n {
            counts[device_sample(&buf, F32, v.len(), 1.0, top_p, 5, step) as usize] += 1;
        }
        for (i, &count) in counts.iter().enumerate() {
            let p = if m.kept[i] { m.w[i] as f64 / sum } else { 0.0 };
            let expect = p * n as f64;
            let sigma = (n as f64 * p * (1.0 - p)).sqrt().max(1.0);
            println!("top_p={top_p} token {i}: {count} draws, expected {expect:.1}");
            assert!(
                (count as f64 - expect).abs() <= 5.0 * sigma,
                "token {i}: {count} vs {expect}"
            );
        }
    }
}

// Special rows, bad arguments, timing and memory (the tests keep their names: `include!`).
include!("sample_gpu/edge_cases_timing_memory.rs");

// et_cuda_sample_async, et_cuda_sample_wait and et_cuda_sample_fed against the waiting call, the ticket ring and the feed.
include!("sample_gpu/asynchronous.rs");
