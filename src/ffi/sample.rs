//! The C API's token choice: `et_cuda_sample` (on the device), `et_cuda_sample_async`,
//! `et_cuda_sample_wait` and `et_cuda_sample_fed` (on the device, without a wait), `et_cuda_sample_host`,
//! `et_cuda_sample_release` and `et_cuda_sample_uniform`, over `crate::api::sample`.

use super::types::*;
use super::{guard, write_out, EtCuda};
use crate::api::sample::{self, Sampling};
use crate::api::{DType, Device, DevicePtr};
use crate::error::{invalid, Result};
use std::ffi::c_void;

/// The dtype of logits given to `who`: a code this backend does not know is refused as the
/// samplers refuse a dtype they do not take.
fn logits_dtype(who: &str, code: i32) -> Result<DType> {
    DType::try_from(code).map_err(|_| sample::unsupported_logits(who, code))
}

/// A device row's arguments as the safe API takes them.
fn device_row(
    logits: *const c_void,
    dtype: i32,
    device: i32,
) -> Result<(DevicePtr, DType, Device)> {
    Ok((
        DevicePtr::from_raw(logits.cast_mut()),
        logits_dtype("sample", dtype)?,
        Device::cuda(device)?,
    ))
}

/// Choose the next token from one row of `vocab` logits on the device and write its id to
/// `*out_token` (-1 when sampling finds no weight: every logit NaN or -inf). `logits` is device
/// memory of `device` holding `vocab` elements of `dtype` (`c10::ScalarType` code: 6 float32,
/// 15 bfloat16, 5 float16; 1 <= `vocab` <= 2^22). Runs after all work queued before on the
/// device's streams, then waits for its own kernel: one host wait, 8 bytes read back.
/// `temperature` 0 is greedy (the first maximum, NaN counting as the largest, as `torch.argmax`);
/// any other `temperature` must be within [1e-6, 1e6] (else `INVALID_ARGUMENT`, checked before
/// anything reaches the device), and samples from softmax(logits / temperature) restricted to
/// the smallest set of most likely tokens whose mass reaches `top_p` (in (0, 1]; ties by lower
/// id), with the uniform number of `step` in the sequence seeded by `seed` (counter-based: the
/// same seed and step give the same token, whatever came before). The first call on a device
/// allocates a page-locked token slot and 8,448 bytes of device scratch, kept for later calls
/// and freed by `et_cuda_sample_release`, or when the last method of the device is destroyed.
///
/// # Safety
/// `logits` must be device memory of `device` readable for `vocab` elements of `dtype`;
/// `out_token` null or valid for a write of an `int64_t`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn et_cuda_sample(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    device: i32,
    temperature: f64,
    top_p: f64,
    seed: u64,
    step: u64,
    out_token: *mut i64,
) -> EtCudaStatus {
    let how = Sampling {
        temperature,
        top_p,
        seed,
        step,
    };
    // SAFETY: forwarded contract (logits for `choose`, out_token for `pick`).
    unsafe {
        pick("et_cuda_sample", out_token, || {
            let (logits, dtype, device) = device_row(logits, dtype, device)?;
            sample::sample(logits, dtype, vocab, device, &how)
        })
    }
}

/// The value of an int64 input of one element (host memory) that asks for the token of the
/// device's last `et_cuda_sample_async` instead (INT64_MIN: no token id is negative), copied on
/// the device in stream order. Two places see it: an execute's host input (a CudaPartitioner
/// program whose inputs are not planned in device memory: ExecuTorch 1.2), dtype-checked; and
/// the ordered host-to-device copy of ExecuTorch's `_h2d_copy` for an input planned in device
/// memory (ExecuTorch >= 1.4, through the adapter's device allocator), 8 bytes with this value,
/// only for the first such copy after each `et_cuda_sample_async`. An operator outside the
/// delegate that reads the token ids would see INT64_MIN itself.
pub const ET_CUDA_SAMPLED_TOKEN: i64 = i64::MIN;

/// Queue the choice `et_cuda_sample` makes (the same rules and arguments) without a host wait,
/// and write its ticket to `*out_ticket` for `et_cuda_sample_wait`. After all work queued before
/// on the device's streams, the token goes to the device's feed and, asynchronously, to a
/// page-locked host slot. The next execute on the device whose int64 input of one element
/// holds `ET_CUDA_SAMPLED_TOKEN` reads the token from the feed, on the device: a token loop
/// can queue step n + 1 before step n's token reaches the host, so the device does not wait
/// for the host's launches. The first call on a device adds 8 page-locked slots and 8 events
/// to what `et_cuda_sample` keeps there (freed with it).
///
/// # Safety
/// As `et_cuda_sample`, with `out_ticket` null or valid for a write of a `uint64_t`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn et_cuda_sample_async(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    device: i32,
    temperature: f64,
    top_p: f64,
    seed: u64,
    step: u64,
    out_ticket: *mut u64,
) -> EtCudaStatus {
    let how = Sampling {
        temperature,
        top_p,
        seed,
        step,
    };
    guard::<EtCuda>("et_cuda_sample_async", || {
        if out_ticket.is_null() {
            return invalid("out_ticket is null");
        }
        let (logits, dtype, device) = device_row(logits, dtype, device)?;
        // SAFETY: forwarded contract.
        let ticket = unsafe { sample::sample_async(logits, dtype, vocab, device, &how) }?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_ticket, ticket, "out_ticket") }
    })
}

/// The token of `ticket` (from `et_cuda_sample_async` on `device`), once it has reached the
/// host (a host wait unless it already has): written to `*out_token`, -1 when sampling found no
/// weight. The last 8 tickets of a device can be waited for, each any number of times; an older
/// one, one not issued, or a device where no asynchronous call ran is `INVALID_ARGUMENT`.
///
/// # Safety
/// `out_token` null or valid for a write of an `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_sample_wait(
    device: i32,
    ticket: u64,
    out_token: *mut i64,
) -> EtCudaStatus {
    // SAFETY: forwarded contract (out_token for `pick`).
    unsafe {
        pick("et_cuda_sample_wait", out_token, || {
            sample::wait(Device::cuda(device)?, ticket)
        })
    }
}

/// Whether an input took the token of `ticket` (from `et_cuda_sample_async` on `device`) from
/// the device's feed, written to `*out_fed`: an execute's host input holding
/// `ET_CUDA_SAMPLED_TOKEN`, or ExecuTorch's host-to-device copy of one planned in device
/// memory, after that call and before the next. A token loop that queued a step fed with
/// `ET_CUDA_SAMPLED_TOKEN` can so check that the step's token ids reached the device through
/// this library: false means something else read them (and saw INT64_MIN). The last 8
/// tickets of a device can be asked about; an older one, one not issued, or a device where no
/// asynchronous call ran is `INVALID_ARGUMENT`.
///
/// # Safety
/// `out_fed` null or valid for a write of a `bool`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_sample_fed(
    device: i32,
    ticket: u64,
    out_fed: *mut bool,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_sample_fed", || {
        if out_fed.is_null() {
            return invalid("out_fed is null");
        }
        let fed = sample::fed(Device::cuda(device)?, ticket)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_fed, fed, "out_fed") }
    })
}

/// The token `et_cuda_sample` would choose (the same rules, arguments and draws), from a row
/// of `vocab` logits of `dtype` (float32, bfloat16 or float16) in host memory, chosen on the
/// host: no device, no driver needed, any `vocab` >= 1. `*out_token` is -1 when sampling finds
/// no weight (every logit NaN or -inf). The runner's `--sample-on-host` and the Python
/// package's host rows use it.
///
/// # Safety
/// `logits` must be host memory readable for `vocab` elements of `dtype`; `out_token` null or
/// valid for a write of an `int64_t`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn et_cuda_sample_host(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    temperature: f64,
    top_p: f64,
    seed: u64,
    step: u64,
    out_token: *mut i64,
) -> EtCudaStatus {
    let how = Sampling {
        temperature,
        top_p,
        seed,
        step,
    };
    // SAFETY: forwarded contract (logits for `choose`, out_token for `pick`).
    unsafe {
        pick("et_cuda_sample_host", out_token, || {
            sample::sample_host(logits, logits_dtype("sample_host", dtype)?, vocab, &how)
        })
    }
}

/// Free the memory `et_cuda_sample` keeps for `device` (its first call there makes it; the
/// next call makes it again). The last `et_cuda_destroy` of a method on the device does this
/// too: call it before exiting when sampling with no method loaded (e.g. for a leak checker).
/// OK without doing anything (and without a driver) when the sampler holds nothing for
/// `device`; `INVALID_ARGUMENT` for a negative `device`.
#[no_mangle]
pub extern "C" fn et_cuda_sample_release(device: i32) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_sample_release", || {
        sample::release(Device::cuda(device)?)
    })
}

/// The uniform number in [0, 1) that `et_cuda_sample` draws with at `step` of the sequence
/// seeded by `seed` (splitmix64 of the pair, 53 bits), for a host-side sampler that wants the
/// same draws.
///
/// # Safety
/// `out` must be null or valid for a write of a `double`.
#[no_mangle]
pub unsafe extern "C" fn et_cuda_sample_uniform(
    seed: u64,
    step: u64,
    out: *mut f64,
) -> EtCudaStatus {
    guard::<EtCuda>("et_cuda_sample_uniform", || {
        if out.is_null() {
            return invalid("out is null");
        }
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out, sample::uniform(seed, step), "out") }
    })
}

/// The guarded body of both samplers: `choose` (unsafe: it reads the caller's logits) runs
/// once `out_token` is known to be non-null, and its token (-1 for none) is written there.
///
/// # Safety
/// `out_token` null or valid for a write of an `int64_t`; `choose` safe to call.
unsafe fn pick(
    name: &'static str,
    out_token: *mut i64,
    choose: impl FnOnce() -> Result<Option<i64>>,
) -> EtCudaStatus {
    guard::<EtCuda>(name, || {
        if out_token.is_null() {
            return invalid("out_token is null");
        }
        let token = choose()?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { write_out(out_token, token.unwrap_or(-1), "out_token") }
    })
}
