use super::*;

/// A plain reference of the sampled choice: the kept set by sorting (most likely first, ties
/// by lower id) instead of the radix search, then the draw over it in id order.
fn reference(row: &[f32], how: &Sampling) -> Option<i64> {
    let top = row
        .iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if top == f32::NEG_INFINITY {
        return None;
    }
    let inv = (1.0 / how.temperature) as f32;
    let w: Vec<u64> = row
        .iter()
        .map(|&x| {
            if x.is_nan() || x == f32::NEG_INFINITY {
                0
            } else if top == f32::INFINITY {
                u64::from(x == f32::INFINITY) << 40
            } else {
                (((x - top) * inv).exp() * SCALE) as u64
            }
        })
        .collect();
    let total: u128 = w.iter().map(|&v| u128::from(v)).sum();
    let mut keep = vec![false; row.len()];
    if how.top_p < 1.0 {
        let target = ((how.top_p * total as f64).ceil() as u128).max(1);
        let mut order: Vec<usize> = (0..row.len()).filter(|&v| w[v] > 0).collect();
        order.sort_by(|&a, &b| w[b].cmp(&w[a]).then(a.cmp(&b)));
        let mut mass = 0u128;
        for v in order {
            if mass >= target {
                break;
            }
            keep[v] = true;
            mass += u128::from(w[v]);
        }
    } else {
        keep.iter_mut().zip(&w).for_each(|(k, &v)| *k = v > 0);
    }
    let sum: u128 = (0..row.len())
        .filter(|&v| keep[v])
        .map(|v| u128::from(w[v]))
        .sum();
    let target = ((how.uniform * sum as f64) as u128).min(sum - 1);
    let mut acc = 0u128;
    for v in 0..row.len() {
        if keep[v] {
            acc += u128::from(w[v]);
            if acc > target {
                return Some(v as i64);
            }
        }
    }
    None
}

/// A small deterministic generator for the rows.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn sampled_choices_equal_the_sorting_reference() {
    let mut g = Lcg(7);
    let mut checked = 0;
    for case in 0..400 {
        let n = 1 + (g.next() * 3000.0) as usize;
        // Coarse values make many equal weights: the ties rule matters.
        let coarse = case % 3 == 0;
        let mut row: Vec<f32> = (0..n)
            .map(|_| {
                let x = (g.next() * 16.0 - 8.0) as f32;
                if coarse {
                    x.round()
                } else {
                    x
                }
            })
            .collect();
        if case % 7 == 0 {
            row[(g.next() * n as f64) as usize] = f32::NAN;
            row[(g.next() * n as f64) as usize] = f32::NEG_INFINITY;
        }
        let how = Sampling {
            temperature: [0.3, 0.8, 1.0, 2.5][case % 4],
            top_p: [1.0, 0.9, 0.5, 0.05, 1e-9][case % 5],
            uniform: g.next(),
        };
        let got = pick(&HostRow::F32(&row), &how).unwrap();
        assert_eq!(got, reference(&row, &how), "case {case}: n {n}, {how:?}");
        checked += 1;
    }
    assert_eq!(checked, 400);
}

#[test]
fn edge_rows() {
    let s = |t: f64, p: f64, u: f64| Sampling {
        temperature: t,
        top_p: p,
        uniform: u,
    };
    let nan = f32::NAN;
    let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
    // Greedy: first maximum, NaN the largest.
    assert_eq!(
        pick(&HostRow::F32(&[1.0, 3.0, 3.0]), &s(0.0, 1.0, 0.0)).unwrap(),
        Some(1)
    );
    assert_eq!(
        pick(&HostRow::F32(&[1.0, nan, 9.0, nan]), &s(0.0, 1.0, 0.0)).unwrap(),
        Some(1)
    );
    assert_eq!(pick(&HostRow::F32(&[]), &s(0.0, 1.0, 0.0)).unwrap(), None);
    // Sampled: nothing to choose, +inf logits only, NaN and -inf never chosen.
    assert_eq!(
        pick(&HostRow::F32(&[nan, ninf]), &s(1.0, 1.0, 0.5)).unwrap(),
        None
    );
    for u in [0.0, 0.3, 0.99] {
        assert_eq!(
            pick(&HostRow::F32(&[1.0, inf, 2.0, inf]), &s(1.0, 1.0, u))
                .unwrap()
                .map(|t| t % 2),
            Some(1)
        );
        assert_eq!(
            pick(&HostRow::F32(&[nan, 0.0, ninf]), &s(1.0, 0.5, u)).unwrap(),
            Some(1)
        );
    }
    // Equal logits: the draw walks the ids in order; top_p keeps the first ids.
    let flat = [0.0f32; 10];
    assert_eq!(
        pick(&HostRow::F32(&flat), &s(1.0, 1.0, 0.55)).unwrap(),
        Some(5)
    );
    assert_eq!(
        pick(&HostRow::F32(&flat), &s(1.0, 0.2, 0.99)).unwrap(),
        Some(1)
    );
    // Out of the rule: an error, never a NaN weight.
    for bad in [
        s(1e-40, 1.0, 0.5),
        s(1e46, 1.0, 0.5),
        s(1.0, 0.0, 0.5),
        s(1.0, 1.0, 1.0),
    ] {
        assert!(pick(&HostRow::F32(&flat), &bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_three_dtypes_read_the_same_values() {
    let vals = [0.5f32, -2.0, 3.25, 1e-5, -0.0, 65504.0];
    let bf: Vec<u16> = vals.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
    // f16 bits of the same values (exact in f16, the subnormal rounded).
    let f16: [u16; 6] = [0x3800, 0xc000, 0x4280, 0x00a8, 0x8000, 0x7bff];
    let rows = [HostRow::F32(&vals), HostRow::Bf16(&bf), HostRow::F16(&f16)];
    for r in &rows {
        assert_eq!(argmax(r), Some(5));
        assert_eq!(r.get(2), 3.25);
    }
    assert_eq!(half_to_f32(0x00a8), 168.0 * 2f32.powi(-24));
    assert!(half_to_f32(0x7e00).is_nan());
    assert_eq!(half_to_f32(0xfc00), f32::NEG_INFINITY);
    let bytes = [0u8; 10];
    assert!(HostRow::new(&bytes[..6], codes::FLOAT32).is_err());
    assert!(HostRow::new(&bytes, codes::INT64).is_err());
}
