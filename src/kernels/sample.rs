//! The next token of a generation loop chosen on the device (`kernels/sample.cu`):
//! greedy, or temperature / top-p sampling with the caller's uniform number. The
//! kernel writes the token id straight into page-locked host memory, so the caller
//! waits once and reads back 8 bytes instead of the row. Greedy spreads the row over
//! many blocks (`et_argmax`, one launch); sampling is one block (`et_sample`).
//! The C entry point is `et_cuda_sample` (`src/ffi/sample.rs` through `api::sample`);
//! `et_cuda_sample_async` queues the same kernels without a wait (`ring`).

pub mod host;
mod ring;

pub(crate) use ring::{asks_for_feed, copy_armed_feed, copy_feed};
pub use ring::{fed, sample_async, wait, SAMPLED_TOKEN};

use super::{param, Module, Resident};
use crate::cuda::memory::{self, DeviceAlloc, PinnedBuffer};
use crate::cuda::{self, ContextGuard};
use crate::dtype::{self, codes};
use crate::error::{invalid, Error, Result};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

static MODULES: Resident = Resident::new(&super::images::SAMPLE, "sampling");

/// Per device: a page-locked slot for the token and the greedy kernel's device
/// scratch. The lock also serialises the device's samplers, which share them: a
/// waiting call holds it from the launch until the kernel has finished; an asynchronous
/// one while it queues (its kernels and copies are ordered on the legacy default stream,
/// as every sampler launch is).
///
/// Lifetime: made by the device's first sampling call, through the library's own
/// allocators (pinned staging, the device's stream-ordered pool) and counted like
/// their other allocations; freed by [`release`] (`et_cuda_sample_release`), which
/// the last method of the device also calls when it is destroyed (the release of
/// its kernels' [`super::Lease`]). A caller that samples with no method loaded frees
/// them with `et_cuda_sample_release`.
static SLOTS: Mutex<Vec<Option<Slot>>> = Mutex::new(Vec::new());

struct Slot {
    token: PinnedBuffer,
    /// `SCRATCH_BYTES` of device memory from the pool: `et_argmax`'s blocks-done counter
    /// (a u32 at offset 0, zeroed when allocated; each launch leaves it at 0), the feed (the
    /// last asynchronous call's token, an i64 at `FEED_AT`) and the per-block partials (8
    /// bytes each, from `PARTIALS_AT`).
    scratch: DeviceAlloc,
    /// The asynchronous calls' host copies (made by the first one).
    ring: Option<ring::Ring>,
    device: Arc<cuda::DeviceState>,
}

/// Free the memory the sampler keeps for device `ordinal` (nothing to do when it has none;
/// the next sampling call makes it again). Waits for a sampling call in progress on the
/// device, whose kernel has finished when it returns.
pub fn release(ordinal: i32) -> Result<()> {
    let i = usize::try_from(ordinal)
        .map_err(|_| Error::invalid_argument(format!("device index {ordinal} is negative")))?;
    let slot = {
        let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        slots.get_mut(i).and_then(Option::take)
    };
    let Some(slot) = slot else {
        return Ok(());
    };
    let device = slot.device.clone();
    // The scratch's free is ordered on the legacy default stream.
    let _legacy = device.legacy_use();
    let _g = ContextGuard::device(&device)?;
    if slot.ring.is_some() {
        // Host copies of asynchronous calls may still be queued there: their pinned slots
        // are freed below.
        cuda::stream::synchronize(std::ptr::null_mut())?;
    }
    drop(slot);
    Ok(())
}

/// Largest row: the kernel's masses are sums of weights below 2^40 in 64 bits.
pub const MAX_VOCAB: i64 = 1 << 22;
/// Threads of `et_sample`'s one block (`THREADS` in `kernels/sample.cu`).
const THREADS: u32 = 1024;
/// Threads per block of `et_argmax` (`ARGMAX_THREADS`).
const ARGMAX_THREADS: i64 = 256;
/// Fewest ids per `et_argmax` block before the grid stops growing (4 loads a thread).
const MIN_CHUNK: i64 = 4 * ARGMAX_THREADS;
/// Most `et_argmax` blocks: the partials the scratch holds.
const MAX_BLOCKS: i64 = 1024;
const PARTIALS_AT: usize = 256;
/// The feed (`ring`): the token of the last asynchronous call, an i64 in the scratch.
const FEED_AT: u64 = 8;
const SCRATCH_BYTES: usize = PARTIALS_AT + 8 * MAX_BLOCKS as usize;

/// Which kernel makes a greedy choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Greedy {
    /// `et_argmax` over many blocks (what [`sample`] uses).
    Blocks,
    /// `et_sample`'s one block, as before `et_argmax` (kept for comparison by tests).
    OneBlock,
}

/// The grid of `et_argmax` for a row of `vocab` ids on a device of `sm_count` SMs:
/// `(blocks, chunk)`, block k owning ids [k * chunk, min((k + 1) * chunk, vocab)).
/// About two blocks per SM, fewer when the row has under `MIN_CHUNK` ids a block;
/// `chunk` is a multiple of `ARGMAX_THREADS` and no block is empty.
fn argmax_grid(vocab: i64, sm_count: i32) -> (u32, i32) {
    let vocab = vocab.clamp(1, MAX_VOCAB) as u64;
    let threads = ARGMAX_THREADS as u64;
    let want = (2 * sm_count.max(1) as u64).min(MAX_BLOCKS as u64);
    let blocks = want.min(vocab.div_ceil(MIN_CHUNK as u64));
    let chunk = vocab.div_ceil(blocks).div_ceil(threads) * threads;
    // Both fit: blocks <= MAX_BLOCKS, chunk < vocab + ARGMAX_THREADS.
    (vocab.div_ceil(chunk) as u32, chunk as i32)
}

/// Smallest and largest temperature besides 0 (greedy): outside them, 1 / temperature
/// would make the weights overflow or every weight equal (silently greedy, or uniform). The
/// runner's host sampler applies the same range.
pub const MIN_TEMPERATURE: f64 = 1e-6;
pub const MAX_TEMPERATURE: f64 = 1e6;

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
        let t = self.temperature;
        if t != 0.0 && !(MIN_TEMPERATURE..=MAX_TEMPERATURE).contains(&t) {
            return invalid(format!(
                "sample: temperature {t:?} is outside [{MIN_TEMPERATURE:e}, {MAX_TEMPERATURE:e}] (0 is greedy)"
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

    /// 1 / temperature as the kernel takes it (0: greedy); within [1e-6, 1e6] for the
    /// temperatures [`Sampling::check`] lets through, so never 0 or infinite in f32.
    fn inv_temp(&self) -> f32 {
        if self.temperature == 0.0 {
            0.0
        } else {
            (1.0 / self.temperature) as f32
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
    // SAFETY: forwarded contract.
    unsafe { sample_with(logits, dtype, vocab, ordinal, how, Greedy::Blocks) }
}

/// [`sample`] with the choice of kernel for greedy rows (sampling is always `et_sample`).
///
/// # Safety
/// As [`sample`].
pub unsafe fn sample_with(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    ordinal: i32,
    how: &Sampling,
    greedy: Greedy,
) -> Result<Option<i64>> {
    on_slot(logits, dtype, vocab, ordinal, how, |m, _, slot| {
        let out = slot.token.ptr();
        // SAFETY: the slot holds at least 8 bytes (PinnedBuffer's minimum is 256).
        unsafe { out.cast::<i64>().write(i64::MIN) };
        let row = Row {
            logits,
            dtype,
            vocab,
            out,
        };
        // SAFETY: the row is readable (caller's contract); the scratch is this device's, its
        // launches ordered on the legacy stream.
        unsafe { launch(m, &row, how, greedy, slot.scratch.ptr())? };
        cuda::stream::synchronize(std::ptr::null_mut())?;
        // SAFETY: the kernel finished (the legacy stream is synchronised); the slot is ours
        // while the lock is held.
        let token = unsafe { out.cast::<i64>().read() };
        token_of(token, vocab, how.temperature > 0.0)
    })
}

/// A sampling call's common start, for `f`: the row's checks, the device's module, its legacy
/// default stream and context held, and its slot (made by the first call) under the lock.
fn on_slot<T>(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    ordinal: i32,
    how: &Sampling,
    f: impl FnOnce(&Module, &Arc<cuda::DeviceState>, &mut Slot) -> Result<T>,
) -> Result<T> {
    let m = checked(logits, dtype, vocab, ordinal, how)?;
    let device = m.device().clone();
    let _legacy = device.legacy_use();
    let _g = ContextGuard::device(&device)?;
    let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    // ordinal >= 0: checked by `checked`.
    let slot = slot_of(&mut slots, ordinal as usize, &device)?;
    f(&m, &device, slot)
}

/// The token a kernel wrote for a row of `vocab` ids: `None` for -1 ("no weight") when
/// sampling (greedy always finds one), an error for anything out of range.
fn token_of(token: i64, vocab: i64, sampled: bool) -> Result<Option<i64>> {
    match token {
        -1 if sampled => Ok(None),
        t if (0..vocab).contains(&t) => Ok(Some(t)),
        t => Err(Error::cuda(format!(
            "sample: the kernel returned token {t} for a row of {vocab}"
        ))),
    }
}

/// The checks of a device row and the device's sampling module.
fn checked(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    ordinal: i32,
    how: &Sampling,
) -> Result<Arc<Module>> {
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
    module(ordinal)
}

/// Queue the kernel that chooses `row`'s token on the legacy default stream.
///
/// # Safety
/// `row` as [`sample`]'s contract; `scratch` the device's, its launches ordered on that stream.
unsafe fn launch(
    m: &Module,
    row: &Row,
    how: &Sampling,
    greedy: Greedy,
    scratch: sys::CUdeviceptr,
) -> Result<()> {
    if how.temperature == 0.0 && greedy == Greedy::Blocks {
        // SAFETY: forwarded contract.
        unsafe { launch_argmax(m, row, scratch) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { launch_sample(m, row, how) }
    }
}

/// One launch's row: `vocab` logits of `dtype` on the device, the token to `out`
/// (page-locked: device-addressable under unified addressing).
struct Row {
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    out: *mut u8,
}

/// The device's slot, made on first use (the device's context current).
fn slot_of<'a>(
    slots: &'a mut Vec<Option<Slot>>,
    i: usize,
    device: &Arc<cuda::DeviceState>,
) -> Result<&'a mut Slot> {
    if slots.len() <= i {
        slots.resize_with(i + 1, || None);
    }
    if slots[i].is_none() {
        let token = PinnedBuffer::new(device.clone(), 8)?;
        let scratch =
            memory::alloc_on_stream(device.clone(), SCRATCH_BYTES, std::ptr::null_mut(), None)?;
        // SAFETY: `scratch` holds SCRATCH_BYTES bytes of this device, allocated on the legacy
        // default stream, where the zeroing is ordered before any launch that uses it.
        unsafe {
            cudarc::driver::result::memset_d8_async(
                scratch.ptr(),
                0,
                SCRATCH_BYTES,
                std::ptr::null_mut(),
            )
        }
        .map_err(|e| cuda::driver_error(e, "cuMemsetD8Async(sampler scratch)"))?;
        slots[i] = Some(Slot {
            token,
            scratch,
            ring: None,
            device: device.clone(),
        });
    }
    slots[i]
        .as_mut()
        .ok_or_else(|| Error::internal("sample: no result slot".to_string()))
}

/// Queue `et_argmax` on the legacy default stream.
///
/// # Safety
/// `row` as [`sample`]'s contract; `scratch` is `SCRATCH_BYTES` of this device with the
/// counter at 0, used by no other launch until this one finishes.
unsafe fn launch_argmax(m: &Module, row: &Row, scratch: sys::CUdeviceptr) -> Result<()> {
    let (blocks, chunk) = argmax_grid(row.vocab, m.sm_count);
    let mut logits = row.logits as u64;
    let mut dt = row.dtype;
    let mut n = row.vocab as i32; // <= MAX_VOCAB
    let mut chunk = chunk;
    let mut partials = scratch + PARTIALS_AT as u64;
    let mut done = scratch;
    let mut out = row.out as u64;
    let mut params = [
        param(&mut logits),
        param(&mut dt),
        param(&mut n),
        param(&mut chunk),
        param(&mut partials),
        param(&mut done),
        param(&mut out),
    ];
    // SAFETY: et_argmax(const void*, int, int, int, Best*, u32*, i64*); block k reads ids
    // [k * chunk, min((k + 1) * chunk, vocab)) of the row, writes partials[k] (blocks <=
    // MAX_BLOCKS, the scratch's capacity), counts itself in `done`; one i64 goes to `out`.
    unsafe {
        m.launch(
            "et_argmax",
            (blocks, 1, 1),
            ARGMAX_THREADS as u32,
            0,
            std::ptr::null_mut(),
            &mut params,
        )
    }
}

/// Queue `et_sample` (one block) on the legacy default stream.
///
/// # Safety
/// `row` as [`sample`]'s contract.
unsafe fn launch_sample(m: &Module, row: &Row, how: &Sampling) -> Result<()> {
    let mut logits = row.logits as u64;
    let mut dt = row.dtype;
    let mut n = row.vocab as i32; // <= MAX_VOCAB
    let mut inv = how.inv_temp();
    let mut top_p = how.top_p as f32;
    let mut u = how.uniform;
    let mut out = row.out as u64;
    let mut params = [
        param(&mut logits),
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
        )
    }
}

#[cfg(test)]
mod tests;
