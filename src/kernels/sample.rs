//! The next token of a generation loop chosen on the device (`kernels/sample.cu`):
//! greedy, or temperature / top-p sampling with the caller's uniform number. One
//! block reads one row of logits and writes the token id straight into page-locked
//! host memory, so the caller waits once and reads back 8 bytes instead of the row.
//! The C entry point is `et_cuda_sample` (`src/ffi/memory.rs` through `api::memory`).

use super::{param, Module, Resident};
use crate::cuda::{self, memory::PinnedBuffer, ContextGuard};
use crate::dtype::{self, codes};
use crate::error::{invalid, Error, Result};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// sm_90 SASS + compute_80 PTX of `kernels/sample.cu`, from `kernels/build.sh`.
pub static FATBIN: &[u8] = include_bytes!("../../kernels/sample.fatbin");
/// The hashes `kernels/build.sh` recorded.
#[cfg(test)]
static RECORD: &str = include_str!("../../kernels/sample.sha256");

static MODULES: Resident = Resident::new(FATBIN, "sampling");

/// One page-locked slot per device for the token; the lock also serialises the
/// device's samplers, which share it.
static SLOTS: Mutex<Vec<Option<PinnedBuffer>>> = Mutex::new(Vec::new());

/// Largest row: the kernel's masses are sums of weights below 2^40 in 64 bits.
pub const MAX_VOCAB: i64 = 1 << 22;
/// Threads of the kernel's one block (`THREADS` in `kernels/sample.cu`).
const THREADS: u32 = 1024;

/// How to choose: `temperature == 0` is greedy (the first maximum, NaN counting as
/// the largest); otherwise softmax(logits / temperature) restricted to top-p, one
/// draw with `uniform`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub temperature: f64,
    pub top_p: f64,
    /// In [0, 1): the draw (ignored when greedy).
    pub uniform: f64,
}

impl Sampling {
    pub fn check(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return invalid(format!(
                "sample: temperature {} is not a finite number >= 0",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return invalid(format!("sample: top_p {} is not in (0, 1]", self.top_p));
        }
        if !(0.0..1.0).contains(&self.uniform) {
            return invalid(format!("sample: uniform {} is not in [0, 1)", self.uniform));
        }
        Ok(())
    }

    /// 1 / temperature as the kernel takes it (0: greedy). A temperature so small that
    /// its inverse overflows f32 keeps only the largest logits, as greedy would.
    fn inv_temp(&self) -> f32 {
        if self.temperature == 0.0 {
            0.0
        } else {
            (1.0 / self.temperature).min(f32::MAX as f64) as f32
        }
    }
}

/// The draw of step `step` of a generation seeded with `seed`: splitmix64 of the
/// pair, 53 bits in [0, 1). Counter-based, so step n needs no earlier draw.
pub fn uniform(seed: u64, step: u64) -> f64 {
    let mut z = seed ^ step.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn check_row(dtype: i32, vocab: i64) -> Result<()> {
    if ![codes::FLOAT32, codes::BFLOAT16, codes::FLOAT16].contains(&dtype) {
        return invalid(format!(
            "sample: logits of {}; float32, bfloat16 or float16 expected",
            dtype::describe(dtype)
        ));
    }
    if !(1..=MAX_VOCAB).contains(&vocab) {
        return invalid(format!(
            "sample: a row of {vocab} logits; 1 to {MAX_VOCAB} expected"
        ));
    }
    Ok(())
}

fn module(ordinal: i32) -> Result<Arc<Module>> {
    MODULES.get(ordinal)
}

/// The token chosen from the row of `vocab` logits of `dtype` at `logits` (device
/// memory of `ordinal`), after all work queued before on the device's blocking
/// streams (the legacy default stream orders it). One host wait. `None` when
/// sampling finds no weight (every logit NaN or -inf).
///
/// # Safety
/// `logits` must be device memory of `ordinal` readable for `vocab` elements of `dtype`.
pub unsafe fn sample(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    ordinal: i32,
    how: &Sampling,
) -> Result<Option<i64>> {
    check_row(dtype, vocab)?;
    how.check()?;
    match cuda::pointer_kind(logits)? {
        cuda::PointerKind::Device(o) if o == ordinal => {}
        cuda::PointerKind::Device(o) => {
            return invalid(format!(
                "sample: the logits are memory of cuda:{o}, not of cuda:{ordinal}"
            ))
        }
        _ => return invalid("sample: the logits are not device memory".to_string()),
    }
    let m = module(ordinal)?;
    let device = m.device().clone();
    let _legacy = device.legacy_use();
    let _g = ContextGuard::device(&device)?;
    let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    let i = ordinal as usize; // checked by pointer_kind's match above
    if slots.len() <= i {
        slots.resize_with(i + 1, || None);
    }
    if slots[i].is_none() {
        slots[i] = Some(PinnedBuffer::new(device.clone(), 8)?);
    }
    let Some(slot) = slots[i].as_ref().map(|b| b.ptr()) else {
        return Err(Error::internal("sample: no result slot".to_string()));
    };
    // SAFETY: the slot holds at least 8 bytes (PinnedBuffer's minimum is 256).
    unsafe { slot.cast::<i64>().write(i64::MIN) };
    let mut row = logits as u64;
    let mut dt = dtype;
    let mut n = vocab as i32; // <= MAX_VOCAB
    let mut inv = how.inv_temp();
    let mut top_p = how.top_p as f32;
    let mut u = how.uniform;
    let mut out = slot as u64; // page-locked memory is device-addressable (unified addressing)
    let mut params = [
        param(&mut row),
        param(&mut dt),
        param(&mut n),
        param(&mut inv),
        param(&mut top_p),
        param(&mut u),
        param(&mut out),
    ];
    // SAFETY: et_sample(const void*, int, int, float, float, double, i64*); the row is
    // `vocab` elements of `dtype` (caller's contract), the kernel writes one i64 to `out`.
    unsafe {
        m.launch(
            "et_sample",
            (1, 1, 1),
            THREADS,
            0,
            std::ptr::null_mut(),
            &mut params,
        )?
    };
    cuda::stream::synchronize(std::ptr::null_mut())?;
    // SAFETY: the kernel finished (the legacy stream is synchronised); the slot is ours
    // while the lock is held.
    let token = unsafe { slot.cast::<i64>().read() };
    match token {
        -1 if how.temperature > 0.0 => Ok(None),
        t if (0..vocab).contains(&t) => Ok(Some(t)),
        t => Err(Error::cuda(format!(
            "sample: the kernel returned token {t} for a row of {vocab}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kernels::{recorded_in, sha256_hex};

    fn recorded(what: &str) -> &'static str {
        recorded_in(RECORD, what).unwrap_or("")
    }

    #[test]
    fn committed_device_code_matches_its_source() {
        let src = include_bytes!("../../kernels/sample.cu");
        assert_eq!(
            sha256_hex(src),
            recorded("source"),
            "kernels/sample.cu changed since kernels/build.sh last ran: rebuild (kernels/build.sh sample) and commit"
        );
        assert_eq!(sha256_hex(FATBIN), recorded("fatbin"));
        let ptx = include_bytes!("../../kernels/sample.ptx");
        assert_eq!(sha256_hex(ptx), recorded("ptx"));
        assert!(RECORD.contains("nvcc 13.0 "), "{RECORD}");
        let text = std::str::from_utf8(ptx).expect("PTX is text");
        assert!(
            text.contains(".entry et_sample("),
            "the launch names et_sample"
        );
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
}
