//! The same choice as the device sampler (`kernels/sample.cu`) on a row in host memory: the
//! runner's and the Python package's host sampling (`et_cuda_sample_host`), one
//! implementation for both.
//!
//! Greedy: the first maximum, NaN counting as the largest (`torch.argmax`). Sampled: f32
//! weights `exp((x - max) * (1 / T))` (NaN and -inf weigh 0; with a +inf logit, the +inf ones
//! weigh 1 and the others 0), as 2^40 fixed-point integers; the smallest set of most likely
//! tokens whose mass reaches `ceil(top_p * total)` (ties by lower id), found as the kernel
//! finds it: a radix search over the weights' float bits, three levels of 10 bits; then
//! the token where the running mass, in id order, passes `uniform * kept`. The sums are 128
//! bits wide, so a row of any length is exact (the device's 64-bit sums are the same numbers
//! up to its 2^22 ids). A row gives the device's token except where the two `exp` results
//! differ by an ulp right at a boundary.

use super::Sampling;
use crate::dtype::codes;
use crate::error::{invalid, Result};

/// 2^40: a weight in [0, 1] as a fixed-point integer.
const SCALE: f32 = 1_099_511_627_776.0;
/// Weights are at most 1.0 (float bits at most 0x3F80_0000): bits 29..0 order them, searched
/// 10 bits a level.
const BUCKETS: usize = 1024;

/// Types every bit pattern of which is a value (what [`HostRow::new`] may view bytes as).
trait Plain: Copy {}
impl Plain for f32 {}
impl Plain for u16 {}

/// A row of logits in host memory: `float32`, `bfloat16` or `float16` values.
#[derive(Debug, Clone, Copy)]
pub enum HostRow<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
    F16(&'a [u16]),
}

impl HostRow<'_> {
    /// The row of `dtype` (an ExecuTorch dtype code) over `bytes`; an error names a dtype the
    /// sampler does not read or bytes that are not whole, aligned values.
    pub fn new(bytes: &[u8], dtype: i32) -> Result<HostRow<'_>> {
        fn cast<'a, T: Plain>(bytes: &'a [u8], what: &str) -> Result<&'a [T]> {
            // SAFETY: `Plain` types (f32, u16) have no invalid bit patterns; align_to keeps
            // the middle part aligned and inside `bytes`.
            let (head, mid, tail) = unsafe { bytes.align_to::<T>() };
            if !head.is_empty() || !tail.is_empty() {
                return invalid(format!(
                    "sample: the {what} logits are not aligned whole values ({} bytes)",
                    bytes.len()
                ));
            }
            Ok(mid)
        }
        match dtype {
            codes::FLOAT32 => Ok(HostRow::F32(cast(bytes, "float32")?)),
            codes::BFLOAT16 => Ok(HostRow::Bf16(cast(bytes, "bfloat16")?)),
            codes::FLOAT16 => Ok(HostRow::F16(cast(bytes, "float16")?)),
            _ => invalid(format!(
                "sample: logits of {}; float32, bfloat16 or float16 expected",
                crate::dtype::describe(dtype)
            )),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostRow::F32(v) => v.len(),
            HostRow::Bf16(v) | HostRow::F16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` as f32 (exact for every dtype).
    fn get(&self, i: usize) -> f32 {
        match self {
            HostRow::F32(v) => v[i],
            HostRow::Bf16(v) => f32::from_bits(u32::from(v[i]) << 16),
            HostRow::F16(v) => half_to_f32(v[i]),
        }
    }
}

fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let mag = match exp {
        0 => man as f32 * f32::powi(2.0, -24), // zero or subnormal: exact
        31 if man != 0 => return f32::NAN,
        31 => f32::INFINITY,
        _ => f32::from_bits(((exp + 112) << 23) | (man << 13)),
    };
    sign * mag
}

/// The first maximum, NaN counting as the largest; `None` for an empty row.
pub fn argmax(row: &HostRow<'_>) -> Option<i64> {
    if row.is_empty() {
        return None;
    }
    let n = row.len();
    let (mut best, mut best_value) = (0usize, row.get(0));
    let mut v = 1;
    while v < n && !best_value.is_nan() {
        let x = row.get(v);
        if x.is_nan() || x > best_value {
            best = v;
            best_value = x;
        }
        v += 1;
    }
    Some(best as i64)
}

/// The token of `row` chosen as `how` says (see the module docs). `None` when there is
/// nothing to choose: an empty row, or, sampling, every value NaN or -inf.
pub fn pick(row: &HostRow<'_>, how: &Sampling) -> Result<Option<i64>> {
    how.check()?;
    if how.temperature == 0.0 {
        return Ok(argmax(row));
    }
    let n = row.len();
    let top = (0..n)
        .map(|v| row.get(v))
        .filter(|x| !x.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if top == f32::NEG_INFINITY {
        return Ok(None);
    }
    let inv = (1.0 / how.temperature) as f32;
    let mut p = vec![0f32; n];
    let mut w = vec![0u64; n];
    let mut total: u128 = 0;
    for v in 0..n {
        let x = row.get(v);
        if x.is_nan() || x == f32::NEG_INFINITY {
            continue;
        }
        p[v] = if top == f32::INFINITY {
            if x == f32::INFINITY {
                1.0
            } else {
                0.0
            }
        } else {
            ((x - top) * inv).exp()
        };
        w[v] = (p[v] * SCALE) as u64;
        total += u128::from(w[v]);
    }
    let cut = if how.top_p < 1.0 {
        let target = ((how.top_p * total as f64).ceil() as u128).max(1);
        Some(threshold(&p, &w, target))
    } else {
        None
    };
    // Kept: weights above the threshold and the first `ties` (by id) equal to it; without
    // top-p, every weight above 0.
    let kept = |v: usize, ties_seen: &mut u128| -> u128 {
        let bits = p[v].to_bits();
        match cut {
            None => u128::from(w[v]),
            Some((t, _)) if bits > t => u128::from(w[v]),
            Some((t, ties)) if bits == t && w[v] > 0 => {
                *ties_seen += 1;
                if *ties_seen <= ties {
                    u128::from(w[v])
                } else {
                    0
                }
            }
            Some(_) => 0,
        }
    };
    let mut seen = 0;
    let sum: u128 = (0..n).map(|v| kept(v, &mut seen)).sum();
    if sum == 0 {
        return Ok(argmax(row)); // the top weight is 2^40: unreachable
    }
    let target = ((how.uniform * sum as f64) as u128).min(sum - 1);
    let (mut acc, mut seen) = (0u128, 0u128);
    for v in 0..n {
        acc += kept(v, &mut seen);
        if acc > target {
            return Ok(Some(v as i64));
        }
    }
    Ok(argmax(row)) // unreachable: acc reaches sum > target
}

/// The top-p threshold: `(bits, ties)`, the float bits of the weight at which the mass of the
/// larger weights stops being below `target`, and how many weights equal to it (first by
/// id) complete the set. O(n) a level.
fn threshold(p: &[f32], w: &[u64], target: u128) -> (u32, u128) {
    let mut prefix = 0u32;
    let mut above: u128 = 0; // mass of the weights above the bucket being refined
    let mut k = 0usize;
    let mut hist = vec![0u128; BUCKETS];
    let mut count = vec![0u128; BUCKETS];
    for level in 0..3 {
        let shift = 20 - 10 * level;
        hist.iter_mut().for_each(|h| *h = 0);
        count.iter_mut().for_each(|c| *c = 0);
        for (pv, &wv) in p.iter().zip(w) {
            if wv == 0 {
                continue;
            }
            let bits = pv.to_bits();
            if level > 0 && (bits >> (shift + 10)) != prefix {
                continue;
            }
            let b = ((bits >> shift) as usize) & (BUCKETS - 1);
            hist[b] += u128::from(wv);
            count[b] += 1;
        }
        k = BUCKETS - 1;
        while k > 0 && above + hist[k] < target {
            above += hist[k];
            k -= 1;
        }
        prefix = (prefix << 10) | k as u32;
    }
    let tie = u128::from((f32::from_bits(prefix) * SCALE) as u64);
    let need = if above < target && tie > 0 {
        (target - above).div_ceil(tie)
    } else {
        1
    };
    (prefix, need.max(1).min(count[k]))
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
