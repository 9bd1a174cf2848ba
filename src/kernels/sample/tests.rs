//! CPU tests of the sampler: the committed device code, argument checks, the draws, and
//! et_argmax's grid and merge rule modelled on the host.

use super::*;

#[test]
fn the_image_has_both_kernels_the_launches_name() {
    // Its hashes: `kernels::images`' test, as for every image.
    let text = crate::kernels::images::SAMPLE.ptx_text();
    for name in ["et_sample", "et_argmax"] {
        assert!(
            text.contains(&format!(".entry {name}(")),
            "the launches name {name}"
        );
    }
}

#[test]
fn argmax_grid_covers_the_row_without_empty_blocks() {
    let mut vocabs = vec![1, 2, 255, 256, 257, 1023, 1024, 1025, 4097, 32_000];
    vocabs.extend([128_256, 151_936, 262_144, MAX_VOCAB - 1, MAX_VOCAB]);
    vocabs.extend((0..200).map(|i| 1 + (i * 2_654_435_761i64) % MAX_VOCAB));
    for sm in [1, 46, 108, 132, 148, 700] {
        for &v in &vocabs {
            let (blocks, chunk) = argmax_grid(v, sm);
            let (b, c) = (i64::from(blocks), i64::from(chunk));
            assert!(
                (1..=MAX_BLOCKS).contains(&b),
                "vocab {v} sm {sm}: {b} blocks"
            );
            assert!(
                b <= (2 * i64::from(sm)).max(1),
                "vocab {v} sm {sm}: {b} blocks"
            );
            assert_eq!(c % ARGMAX_THREADS, 0, "vocab {v} sm {sm}: chunk {c}");
            assert!(
                (b - 1) * c < v && v <= b * c,
                "vocab {v} sm {sm}: {b} x {c}"
            );
            // No more blocks than rows of MIN_CHUNK ids.
            assert!(
                b <= (v + MIN_CHUNK - 1) / MIN_CHUNK,
                "vocab {v} sm {sm}: {b} blocks"
            );
        }
    }
    assert_eq!(argmax_grid(128_256, 132), (126, 1024));
    assert_eq!(argmax_grid(MAX_VOCAB, 132), (261, 16_128));
    assert_eq!(argmax_grid(1, 132), (1, 256));
}

/// `better` of kernels/sample.cu: NaN first, then larger values, then lower ids.
fn better(a: f32, ia: i32, b: f32, ib: i32) -> bool {
    if a.is_nan() != b.is_nan() {
        return a.is_nan();
    }
    if !a.is_nan() && a != b {
        return a > b;
    }
    ia < ib
}

fn keep_better(best: &mut (f32, i32), c: (f32, i32)) {
    if better(c.0, c.1, best.0, best.1) {
        *best = c;
    }
}

/// et_argmax on the host: each block's threads (strided, ARGMAX_LOADS at a time as
/// the kernel reads), the block's best to its partial, then the merge of the
/// partials in `order`.
fn argmax_blocks(row: &[f32], blocks: u32, chunk: i32, order: &[usize]) -> i32 {
    const NONE: (f32, i32) = (f32::NEG_INFINITY, i32::MAX);
    let (t, chunk) = (ARGMAX_THREADS as usize, chunk as usize);
    let partials: Vec<(f32, i32)> = (0..blocks as usize)
        .map(|k| {
            let (lo, hi) = (k * chunk, ((k + 1) * chunk).min(row.len()));
            let mut block = NONE;
            for tid in 0..t {
                let mut mine = NONE;
                for v in (lo + tid..hi).step_by(t) {
                    keep_better(&mut mine, (row[v], v as i32));
                }
                keep_better(&mut block, mine);
            }
            block
        })
        .collect();
    let mut best = NONE;
    for &k in order {
        keep_better(&mut best, partials[k]);
    }
    best.1
}

/// torch.argmax: the first maximum, NaN the largest.
fn first_max(v: &[f32]) -> i32 {
    let mut best = 0;
    for i in 1..v.len() {
        if v[best].is_nan() {
            break;
        }
        if v[i].is_nan() || v[i] > v[best] {
            best = i;
        }
    }
    best as i32
}

#[test]
fn slices_and_merge_give_torch_argmax() {
    let mut state = 7u64;
    let mut noise = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        ((state >> 40) % 64) as f32 * 0.25 - 8.0 // many ties
    };
    for &(vocab, sm) in &[(1usize, 132), (2, 132), (1023, 4), (4097, 2), (40_000, 8)] {
        let (blocks, chunk) = argmax_grid(vocab as i64, sm);
        let c = chunk as usize;
        let base: Vec<f32> = (0..vocab).map(|_| noise()).collect();
        let mut rows = vec![
            base.clone(),
            vec![1.5; vocab],
            vec![f32::NEG_INFINITY; vocab],
        ];
        let mut edit = |f: &dyn Fn(&mut Vec<f32>)| {
            let mut r = base.clone();
            f(&mut r);
            rows.push(r);
        };
        edit(&|r| r[vocab - 1] = 100.0);
        edit(&|r| r[vocab - 1] = f32::NAN);
        edit(&|r| r[0] = f32::NAN);
        // Equal maxima on both sides of every block boundary: the earlier wins.
        edit(&|r| (c - 1..vocab).step_by(c).for_each(|i| r[i] = 50.0));
        edit(&|r| {
            (c..vocab)
                .step_by(c)
                .for_each(|i| [r[i - 1], r[i]] = [50.0; 2])
        });
        edit(&|r| (vocab / 2..vocab).step_by(3).for_each(|i| r[i] = f32::NAN));
        edit(&|r| r.iter_mut().for_each(|x| *x = -x.abs() * 0.0)); // +0 and -0
        edit(&|r| {
            (vocab / 3..vocab)
                .step_by(5)
                .for_each(|i| r[i] = f32::INFINITY)
        });
        let forward: Vec<usize> = (0..blocks as usize).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        for (n, row) in rows.iter().enumerate() {
            let want = first_max(row);
            for order in [&forward, &backward] {
                assert_eq!(
                    argmax_blocks(row, blocks, chunk, order),
                    want,
                    "vocab {vocab} row {n}"
                );
            }
        }
    }
}

#[test]
fn checks_name_what_is_wrong() {
    let ok = Sampling {
        temperature: 0.7,
        top_p: 0.9,
        uniform: 0.5,
    };
    assert!(ok.check().is_ok());
    for (bad, word) in [
        (
            Sampling {
                temperature: -1.0,
                ..ok
            },
            "temperature",
        ),
        (
            Sampling {
                temperature: f64::NAN,
                ..ok
            },
            "temperature",
        ),
        (Sampling { top_p: 0.0, ..ok }, "top_p"),
        (Sampling { top_p: 1.5, ..ok }, "top_p"),
        (Sampling { uniform: 1.0, ..ok }, "uniform"),
    ] {
        let e = bad.check().unwrap_err();
        assert!(e.to_string().contains(word), "{e}");
    }
    assert!(check_row(codes::INT64, 10)
        .unwrap_err()
        .to_string()
        .contains("int64"));
    assert!(check_row(codes::FLOAT32, 0).is_err());
    assert!(check_row(codes::FLOAT32, MAX_VOCAB + 1).is_err());
    assert!(check_row(codes::BFLOAT16, MAX_VOCAB).is_ok());
}

/// Issue 31: temperature 0 is greedy; any other must be within [1e-6, 1e6], else a clear
/// error naming it and the range.
#[test]
fn temperatures_outside_the_range_are_refused() {
    let ok = Sampling {
        temperature: 0.7,
        top_p: 0.9,
        uniform: 0.5,
    };
    for (bad, word) in [
        (
            Sampling {
                temperature: f64::INFINITY,
                ..ok
            },
            "temperature inf is outside [1e-6, 1e6]",
        ),
        // Above 1e6: the device's weights all equal (it used to turn greedy past ~1e45).
        (
            Sampling {
                temperature: 1e45,
                ..ok
            },
            "temperature 1e45 is outside [1e-6, 1e6] (0 is greedy)",
        ),
        (
            Sampling {
                temperature: 2e6,
                ..ok
            },
            "temperature 2000000.0 is outside",
        ),
        // Below 1e-6: 1/T overflows the weights.
        (
            Sampling {
                temperature: 1e-7,
                ..ok
            },
            "temperature 1e-7 is outside",
        ),
        (
            Sampling {
                temperature: 3e-39,
                ..ok
            },
            "temperature 3e-39 is outside",
        ),
    ] {
        let e = bad.check().unwrap_err();
        assert!(e.to_string().contains(word), "{e}");
    }
    // The ends of the range and greedy are accepted, and 1/T is finite and non-zero there.
    for t in [0.0, MIN_TEMPERATURE, MAX_TEMPERATURE] {
        let how = Sampling {
            temperature: t,
            ..ok
        };
        assert!(how.check().is_ok(), "{t}");
        let inv = how.inv_temp();
        assert!(inv.is_finite() && (t == 0.0) == (inv == 0.0), "{t}: {inv}");
    }
}

#[test]
fn uniform_is_counter_based_and_in_range() {
    let a: Vec<f64> = (0..1000).map(|i| uniform(42, i)).collect();
    assert!(a.iter().all(|u| (0.0..1.0).contains(u)));
    assert_eq!(uniform(42, 7), a[7]);
    // Known answers, also checked against the runner's host sampler (c_tests/runner_text_test.cpp).
    assert_eq!(uniform(42, 7), 0.9396161429871874);
    assert_eq!(uniform(0, 0), 0.8833108082136426);
    assert_eq!(uniform(7, 3), 0.8631908983827007);
    assert_ne!(uniform(43, 7), a[7]);
    let mean = a.iter().sum::<f64>() / a.len() as f64;
    assert!((mean - 0.5).abs() < 0.05, "{mean}");
}

/// Issue 31: a temperature outside the range is refused by the safe API before anything
/// reaches the device (here: no driver, and a null pointer that is never looked at).
#[test]
fn the_api_refuses_a_temperature_out_of_range_before_any_device_work() {
    let how = |temperature| crate::api::sample::Sampling {
        temperature,
        ..crate::api::sample::Sampling::GREEDY
    };
    use crate::api::{DType, Device, DevicePtr};
    let (null, d0) = (
        DevicePtr::from_raw(std::ptr::null_mut()),
        Device::cuda(0).unwrap(),
    );
    for t in [1e45, -1.0, 1e-9, f64::NAN] {
        // SAFETY: refused before the pointer is used.
        let e = unsafe { crate::api::sample::sample(null, DType::Float32, 8, d0, &how(t)) }
            .unwrap_err();
        assert_eq!(
            e.kind(),
            crate::error::ErrorKind::InvalidArgument,
            "{t}: {e}"
        );
        assert!(e.to_string().contains("temperature"), "{e}");
    }
}

/// The sampler's memory is released per device: a negative device is refused, a device
/// the sampler holds nothing for needs nothing (no driver either).
#[test]
fn release_needs_nothing_when_nothing_is_held() {
    assert!(release(6).is_ok());
    assert!(crate::api::sample::release(crate::api::Device::cuda(6).unwrap()).is_ok());
    let e = release(-5).unwrap_err();
    assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("-5"), "{e}");
}
