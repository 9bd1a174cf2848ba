//! Devices, device memory, copies and the caller stream: the process-wide
//! functions of the safe API (the C API's `et_cuda_device_count`,
//! `et_cuda_alloc_device`, `et_cuda_device_allocate`, copies, caller stream).

use crate::cuda::{self, copy, memory, stream};
use crate::error::Result;
use crate::kernels::sample;
use crate::stats::Stats;
use std::ffi::c_void;

/// Number of CUDA devices (a `NoDevice` error without a driver).
pub fn device_count() -> Result<i32> {
    cuda::device_count()
}

/// The CUDA driver's version (e.g. 13000).
pub fn driver_version() -> Result<i32> {
    cuda::driver_version()
}

/// Free and total memory of a device, from the driver.
pub fn mem_info(device: i32) -> Result<(usize, usize)> {
    cuda::mem_info(device)
}

/// Process-wide counters (with the generated code's modules loaded now).
pub fn global_stats() -> Stats {
    let mut s = crate::stats::global().snapshot();
    s.generated_modules = crate::aoti::owned::recorded().0 as u64;
    s
}

/// Whether `ptr` is CUDA device memory (a `NoDevice` error without a driver).
pub fn is_device_pointer(ptr: *const c_void) -> Result<bool> {
    cuda::is_device_pointer(ptr)
}

/// `nbytes` of device memory on `device` from plain `cuMemAlloc` (synchronous; for tools
/// and tests). Free with [`free_device`].
pub fn alloc_device(device: i32, nbytes: usize) -> Result<*mut c_void> {
    memory::alloc_device_sync(device, nbytes)
}

/// Free memory from [`alloc_device`] (synchronous); null is ignored.
///
/// # Safety
/// `ptr` must be null or come from [`alloc_device`], not freed yet and no longer in use.
pub unsafe fn free_device(ptr: *mut c_void) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { memory::free_device_sync(ptr) }
}

/// `nbytes` of device memory on `device` from the library's stream-ordered pool, ordered on
/// the device's legacy default stream, aligned to `alignment` (a power of two ≤ 256).
/// Free with [`device_deallocate`].
pub fn device_allocate(device: i32, nbytes: usize, alignment: usize) -> Result<*mut c_void> {
    memory::external_allocate(device, nbytes, alignment)
}

/// Free (stream-ordered) memory from [`device_allocate`]; null is ignored, a pointer it did
/// not hand out is an `InvalidArgument` error.
pub fn device_deallocate(ptr: *mut c_void) -> Result<()> {
    memory::external_deallocate(ptr)
}

/// Live allocations made by [`device_allocate`].
pub fn device_allocations() -> usize {
    memory::external_count()
}

/// Copy `nbytes` between any two host or device ranges, waiting for the copy (tools, tests).
///
/// # Safety
/// `dst` and `src` must each be valid for `nbytes` bytes (host or device memory).
pub unsafe fn copy_blocking(dst: *mut c_void, src: *const c_void, nbytes: usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { copy::copy_bytes_blocking(dst, src, nbytes) }
}

/// Copy host memory to device memory of `device`, ordered on its legacy default stream;
/// returns once the source may be reused.
///
/// # Safety
/// `src` must be readable host memory and `dst` device memory of `device`, `nbytes` each.
pub unsafe fn copy_host_to_device(
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    device: i32,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { copy::copy_htod_ordered(dst, src, nbytes, device) }
}

/// Copy device memory of `device` to host memory after the work queued before on the
/// device's streams (one host wait).
///
/// # Safety
/// `src` must be device memory of `device` and `dst` writable host memory, `nbytes` each.
pub unsafe fn copy_device_to_host(
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    device: i32,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { copy::copy_dtoh_ordered(dst, src, nbytes, device) }
}

/// Order this thread's executes on `stream` (a `CUstream`; null is the legacy default
/// stream) until [`clear_caller_stream`] or a replacement.
///
/// # Safety
/// `stream` must stay a live stream until it is cleared or replaced.
pub unsafe fn set_caller_stream(stream: *mut c_void) {
    stream::set_caller_stream(Some(stream::CallerStream(stream.cast())));
}

/// Stop ordering this thread's executes on a caller stream.
pub fn clear_caller_stream() {
    stream::set_caller_stream(None);
}

/// This thread's caller stream, if one is set (`Some(null)` is the legacy default stream).
pub fn caller_stream() -> Option<*mut c_void> {
    stream::caller_stream().map(|c| c.0.cast())
}

/// Orders the executes of this thread on a stream the caller owns, until dropped.
pub struct CallerStreamGuard {
    prev: Option<stream::CallerStream>,
}

impl CallerStreamGuard {
    /// Use `stream` (a `CUstream`/`cudaStream_t`; null is the legacy default stream).
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream (or null) for as long as the guard lives.
    pub unsafe fn new(stream: *mut c_void) -> CallerStreamGuard {
        CallerStreamGuard {
            prev: stream::set_caller_stream(Some(stream::CallerStream(stream.cast()))),
        }
    }
}

impl Drop for CallerStreamGuard {
    fn drop(&mut self) {
        stream::set_caller_stream(self.prev);
    }
}

/// The next token from one row of `vocab` logits of `dtype` (a `c10::ScalarType` code:
/// float32, bfloat16 or float16) in device memory of `device`, chosen on the device after
/// all work queued before on the device's streams; one host wait, 8 bytes read back.
/// `temperature == 0` is greedy (the first maximum, NaN the largest); otherwise
/// softmax(logits / temperature) within top-p, drawn with [`sample_uniform`]`(seed, step)`,
/// and `temperature` must be within [1e-6, 1e6] (an `InvalidArgument` error naming it,
/// before anything reaches the device). The memory it keeps per device is freed by
/// [`sample_release`], or when the device's last method is destroyed.
/// `None` when sampling finds no weight (every logit NaN or -inf).
///
/// # Safety
/// `logits` must be device memory of `device` readable for `vocab` elements of `dtype`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sample(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    device: i32,
    temperature: f64,
    top_p: f64,
    seed: u64,
    step: u64,
) -> Result<Option<i64>> {
    let how = sample::Sampling {
        temperature,
        top_p,
        uniform: sample::uniform(seed, step),
    };
    // SAFETY: forwarded contract.
    unsafe { sample::sample(logits, dtype, vocab, device, &how) }
}

/// The token [`sample`] would choose, from a row of `vocab` logits of `dtype` in host memory,
/// on the host (`kernels::sample::host`): for rows on the host, of any length. `None` when
/// sampling finds no weight (every logit NaN or -inf).
///
/// # Safety
/// `logits` must be host memory readable for `vocab` elements of `dtype`.
pub unsafe fn sample_host(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    temperature: f64,
    top_p: f64,
    seed: u64,
    step: u64,
) -> Result<Option<i64>> {
    let size = crate::dtype::element_size(dtype).filter(|_| {
        [
            crate::dtype::codes::FLOAT32,
            crate::dtype::codes::BFLOAT16,
            crate::dtype::codes::FLOAT16,
        ]
        .contains(&dtype)
    });
    let Some(size) = size else {
        return Err(crate::Error::invalid_argument(format!(
            "sample_host: logits of {}; float32, bfloat16 or float16 expected",
            crate::dtype::describe(dtype)
        )));
    };
    let bytes = usize::try_from(vocab)
        .ok()
        .filter(|&n| n >= 1)
        .and_then(|n| n.checked_mul(size))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            crate::Error::invalid_argument(format!("sample_host: a row of {vocab} logits"))
        })?;
    if logits.is_null() {
        return Err(crate::Error::invalid_argument(
            "sample_host: logits is null".to_string(),
        ));
    }
    // SAFETY: non-null, readable for `bytes` (caller's contract), which fit an isize.
    let row = unsafe { std::slice::from_raw_parts(logits.cast::<u8>(), bytes) };
    let how = sample::Sampling {
        temperature,
        top_p,
        uniform: sample::uniform(seed, step),
    };
    sample::host::pick(&sample::host::HostRow::new(row, dtype)?, &how)
}

/// Free the memory [`sample`] keeps for `device` (a page-locked token slot and a few KB of
/// device scratch, made by its first call there; the next call makes them again). The
/// device's last method frees them too when it is destroyed: this is for a caller that
/// samples with no method loaded, before it exits. Nothing to do (and no driver needed)
/// when the sampler holds nothing for `device`.
pub fn sample_release(device: i32) -> Result<()> {
    sample::release(device)
}

/// The greedy token of [`sample`] (temperature 0) chosen by the sampler's one-block kernel
/// instead of the many-block one [`sample`] uses: for tests that compare the two (results
/// and time). Not part of the supported API.
///
/// # Safety
/// As [`sample`].
#[doc(hidden)]
pub unsafe fn sample_greedy_one_block(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    device: i32,
) -> Result<i64> {
    let how = sample::Sampling {
        temperature: 0.0,
        top_p: 1.0,
        uniform: 0.0,
    };
    // SAFETY: forwarded contract.
    let token = unsafe {
        sample::sample_with(logits, dtype, vocab, device, &how, sample::Greedy::OneBlock)
    }?;
    token.ok_or_else(|| crate::Error::internal("sample: greedy found no token".to_string()))
}

/// The uniform number in [0, 1) that [`sample`] draws with at `step` of a run seeded with
/// `seed` (counter-based: splitmix64 of the pair).
pub fn sample_uniform(seed: u64, step: u64) -> f64 {
    sample::uniform(seed, step)
}
