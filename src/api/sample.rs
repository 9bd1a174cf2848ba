//! Choosing the next token from a row of logits, on the device or on the host (the C API's
//! `et_cuda_sample`, `et_cuda_sample_host`, `et_cuda_sample_release`, `et_cuda_sample_uniform`):
//! the safe face of `kernels::sample`.

use super::{DType, Device, DevicePtr};
use crate::error::{Error, Result};
use crate::kernels::sample;
use std::ffi::c_void;

/// How a token is chosen: `temperature == 0` is greedy (the first maximum, NaN the largest);
/// otherwise softmax(logits / temperature) within `top_p`, drawn with
/// [`uniform`]`(seed, step)`, and `temperature` must be within [1e-6, 1e6] (an
/// `InvalidArgument` error naming it, before anything reaches the device).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub temperature: f64,
    pub top_p: f64,
    /// The run's seed: the same seed and steps give the same tokens.
    pub seed: u64,
    /// The draw's index in the run (the token's position, say).
    pub step: u64,
}

impl Sampling {
    /// Greedy: the argmax (seed and step unused).
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        seed: 0,
        step: 0,
    };

    fn kernel(&self) -> sample::Sampling {
        sample::Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            uniform: sample::uniform(self.seed, self.step),
        }
    }
}

/// The dtypes of logits the samplers take.
const LOGITS: [DType; 3] = [DType::Float32, DType::BFloat16, DType::Float16];

/// The error for logits of a dtype the samplers do not take (`code`: its c10 `ScalarType`
/// code, known or not), naming the sampler (`who`).
pub(crate) fn unsupported_logits(who: &str, code: i32) -> Error {
    Error::invalid_argument(format!(
        "{who}: logits of {}; float32, bfloat16 or float16 expected",
        crate::dtype::describe(code)
    ))
}

/// The next token from one row of `vocab` logits of `dtype` (float32, bfloat16 or float16)
/// in device memory of `device`, chosen on the device after
/// all work queued before on the device's streams, as `how` says; one host wait, 8 bytes read
/// back. The memory it keeps per device is freed by [`release`], or when the device's last
/// method is destroyed. `None` when sampling finds no weight (every logit NaN or -inf).
///
/// # Safety
/// `logits` must be device memory of `device` readable for `vocab` elements of `dtype`.
pub unsafe fn sample(
    logits: DevicePtr,
    dtype: DType,
    vocab: i64,
    device: Device,
    how: &Sampling,
) -> Result<Option<i64>> {
    let (p, ordinal) = (logits.as_raw().cast_const(), device.ordinal());
    // SAFETY: forwarded contract.
    unsafe { sample::sample(p, dtype.code(), vocab, ordinal, &how.kernel()) }
}

/// The value of an int64 input of one element (in host memory) that asks an execute for the
/// token of its device's last [`sample_async`] instead: the execute copies that token on the
/// device, in stream order, so a token loop can queue step n + 1 before step n's token has
/// reached the host. No token id is negative; an execute given this value as a host input
/// when no asynchronous call has chosen a token on its device fails. Also taken by
/// [`super::memory::copy_host_to_device`] (ExecuTorch's `_h2d_copy` of an input planned in
/// device memory), for the first such 8-byte copy after each [`sample_async`].
pub const SAMPLED_TOKEN: i64 = sample::SAMPLED_TOKEN;

/// Queue the choice [`sample`] makes, without a host wait; the ticket for [`wait`]. The
/// token goes to the device's feed (what the next execute reads for an input holding
/// [`SAMPLED_TOKEN`]) and, asynchronously, to a page-locked host slot: one kernel and an
/// 8-byte copy after all work queued before on the device's streams. The first such call
/// on a device adds 8 page-locked slots and 8 events to what [`sample`] keeps there.
///
/// # Safety
/// As [`sample`].
pub unsafe fn sample_async(
    logits: DevicePtr,
    dtype: DType,
    vocab: i64,
    device: Device,
    how: &Sampling,
) -> Result<u64> {
    let (p, ordinal) = (logits.as_raw().cast_const(), device.ordinal());
    // SAFETY: forwarded contract.
    unsafe { sample::sample_async(p, dtype.code(), vocab, ordinal, &how.kernel()) }
}

/// The token of `ticket` (from [`sample_async`] on `device`), waiting until it has reached
/// the host; `None` when sampling found no weight. The last 8 tickets of a device can be
/// waited for, each any number of times; an older or unissued one is an `InvalidArgument`.
pub fn wait(device: Device, ticket: u64) -> Result<Option<i64>> {
    sample::wait(device.ordinal(), ticket)
}

/// Whether an input took the token of `ticket` (from [`sample_async`] on `device`) from the
/// device's feed: an execute's host input holding [`SAMPLED_TOKEN`], or the ordered
/// host-to-device copy of one planned in device memory, after that call and before the next.
/// A token loop that queued a step fed with [`SAMPLED_TOKEN`] can so check that the step's
/// token ids reached the device through this library (false: something else read them, and
/// saw `SAMPLED_TOKEN` itself). The last 8 tickets of a device can be asked about.
pub fn fed(device: Device, ticket: u64) -> Result<bool> {
    sample::fed(device.ordinal(), ticket)
}

/// The token [`sample`] would choose, from a row of `vocab` logits of `dtype` in host memory,
/// on the host (`kernels::sample::host`): for rows on the host, of any length. `None` when
/// sampling finds no weight (every logit NaN or -inf). A raw entry point (the C API's).
///
/// # Safety
/// `logits` must be host memory readable for `vocab` elements of `dtype`.
pub unsafe fn sample_host(
    logits: *const c_void,
    dtype: DType,
    vocab: i64,
    how: &Sampling,
) -> Result<Option<i64>> {
    if !LOGITS.contains(&dtype) {
        return Err(unsupported_logits("sample_host", dtype.code()));
    }
    let size = dtype.element_size();
    let bytes = usize::try_from(vocab)
        .ok()
        .filter(|&n| n >= 1)
        .and_then(|n| n.checked_mul(size))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid_argument(format!("sample_host: a row of {vocab} logits")))?;
    if logits.is_null() {
        return Err(Error::invalid_argument(
            "sample_host: logits is null".to_string(),
        ));
    }
    // SAFETY: non-null, readable for `bytes` (caller's contract), which fit an isize.
    let row = unsafe { std::slice::from_raw_parts(logits.cast::<u8>(), bytes) };
    sample::host::pick(
        &sample::host::HostRow::new(row, dtype.code())?,
        &how.kernel(),
    )
}

/// Free the memory [`sample`] keeps for `device` (a page-locked token slot and a few KB of
/// device scratch, made by its first call there; the next call makes them again). The
/// device's last method frees them too when it is destroyed: this is for a caller that
/// samples with no method loaded, before it exits. Nothing to do (and no driver needed)
/// when the sampler holds nothing for `device`.
pub fn release(device: Device) -> Result<()> {
    sample::release(device.ordinal())
}

/// The greedy token of [`sample`] (temperature 0) chosen by the sampler's one-block kernel
/// instead of the many-block one [`sample`] uses: for tests that compare the two (results
/// and time). Not part of the supported API.
///
/// # Safety
/// As [`sample`].
#[doc(hidden)]
pub unsafe fn sample_greedy_one_block(
    logits: DevicePtr,
    dtype: DType,
    vocab: i64,
    device: Device,
) -> Result<i64> {
    let how = Sampling::GREEDY.kernel();
    let (p, code, ordinal) = (logits.as_raw().cast_const(), dtype.code(), device.ordinal());
    // SAFETY: forwarded contract.
    let token =
        unsafe { sample::sample_with(p, code, vocab, ordinal, &how, sample::Greedy::OneBlock) }?;
    token.ok_or_else(|| Error::internal("sample: greedy found no token".to_string()))
}

/// The uniform number in [0, 1) that [`sample`] draws with at `step` of a run seeded with
/// `seed` (counter-based: splitmix64 of the pair).
pub fn uniform(seed: u64, step: u64) -> f64 {
    sample::uniform(seed, step)
}
