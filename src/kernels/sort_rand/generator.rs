//! The per-device generator: `rand`, `randint`, the seed and the state (Philox offsets advanced on the device).

use super::{cuda_ordinal, grid_for, module, param, Module};
use crate::cuda::{self, check, ContextGuard};
use crate::dtype;
use crate::dtype::codes;
use crate::error::{invalid, Error, Result};
use crate::tensor::{contiguous_strides, Device, Tensor};
use cudarc::driver::sys;

/// Dtypes `rand` writes.
pub const RAND_DTYPES: [i32; 4] = [
    codes::FLOAT32,
    codes::FLOAT64,
    codes::FLOAT16,
    codes::BFLOAT16,
];
/// Elements per Philox block (4 words) for a `rand` of `dtype`.
pub fn rand_per_block(dtype: i32) -> u64 {
    if dtype == codes::FLOAT64 {
        2
    } else {
        4
    }
}

/// Check `rand`'s dtype.
pub fn check_rand_dtype(dtype: i32) -> Result<()> {
    if RAND_DTYPES.contains(&dtype) {
        Ok(())
    } else {
        invalid(format!(
            "rand: dtype {} is not supported (float32, float64, float16, bfloat16)",
            dtype::describe(dtype)
        ))
    }
}

/// Check `randint(low, high)` into `dtype` as PyTorch does (low < high, both
/// within the dtype); the number of values, `high - low`, as an unsigned
/// 64-bit number (`[i64::MIN, i64::MAX)` gives `u64::MAX`).
pub fn check_randint(low: i64, high: i64, dtype: i32) -> Result<u64> {
    let (lo, hi) = match dtype {
        codes::INT64 => (i64::MIN, i64::MAX),
        codes::INT32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        codes::INT16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        codes::INT8 => (i64::from(i8::MIN), i64::from(i8::MAX)),
        codes::UINT8 => (0, i64::from(u8::MAX)),
        other => {
            return invalid(format!(
                "randint: dtype {} is not supported (int64, int32, int16, int8, uint8)",
                dtype::describe(other)
            ))
        }
    };
    if low >= high {
        return invalid(format!(
            "randint: low must be less than high, but got low={low} >= high={high}"
        ));
    }
    // high is exclusive: its largest value is high - 1 (no overflow: high > low >= i64::MIN).
    if low < lo || high - 1 > hi {
        return invalid(format!(
            "randint: [{low}, {high}) is out of bounds for {}",
            dtype::describe(dtype)
        ));
    }
    Ok((high as u64).wrapping_sub(low as u64))
}

/// Sizes of a new tensor from the caller (no negative sizes).
pub fn check_sizes(sizes: &[i64], what: &str) -> Result<()> {
    if let Some(s) = sizes.iter().find(|&&s| s < 0) {
        return invalid(format!("{what}: negative size {s} in {sizes:?}"));
    }
    Ok(())
}

/// Enqueue the advance of the device's offset by `words` (after a draw, same stream).
fn advance(m: &Module, stream: sys::CUstream, words: u64) -> Result<()> {
    let mut w = words;
    let mut params = [param(&mut w)];
    // SAFETY: rng_advance(u64) touches only the module's own state variable.
    unsafe { m.launch("rng_advance", (1, 1, 1), 32, 0, stream, &mut params) }
}

/// `torch.rand(sizes, dtype)` on device `ordinal`: a new contiguous tensor of
/// uniform values in [0, 1), drawn from the device's generator on the current
/// stream (which then advances by the words drawn). No host wait.
pub fn rand(sizes: Vec<i64>, dtype: i32, ordinal: i32) -> Result<Tensor> {
    check_sizes(&sizes, "rand")?;
    check_rand_dtype(dtype)?;
    let strides = contiguous_strides(&sizes);
    let t = crate::cuda::memory::empty_strided(sizes, strides, dtype, Device::Cuda(ordinal))?;
    let n = t.numel();
    if n == 0 {
        return Ok(t);
    }
    let per = rand_per_block(dtype);
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let mut out = t.data_ptr() as u64;
    let mut n64 = n;
    let mut dt = dtype;
    let blocks = (n as u64).div_ceil(per);
    let mut params = [param(&mut out), param(&mut n64), param(&mut dt)];
    // SAFETY: rng_uniform(ptr, i64, int); the output holds n contiguous elements of `dtype`,
    // the kernel writes indices below n only.
    unsafe {
        m.launch(
            "rng_uniform",
            (grid_for(blocks as i64), 1, 1),
            256,
            0,
            stream,
            &mut params,
        )?
    };
    advance(&m, stream, blocks * 4)?;
    Ok(t)
}

/// Fill `out` (contiguous, integer dtype, on CUDA) with integers uniform in
/// `[low, high)` from the device's generator, on the current stream.
pub fn randint_into(out: &Tensor, low: i64, high: i64) -> Result<()> {
    let range = check_randint(low, high, out.dtype)?;
    let ordinal = cuda_ordinal(out, "out")?;
    if !out.is_contiguous() {
        return invalid(format!(
            "randint: out must be contiguous (sizes {:?}, strides {:?})",
            out.sizes, out.strides
        ));
    }
    let n = out.numel();
    if n == 0 {
        return Ok(());
    }
    let per: u64 = if range > 1 << 32 { 2 } else { 4 };
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let mut p = out.data_ptr() as u64;
    let mut n64 = n;
    let mut dt = out.dtype;
    let mut lo = low;
    let mut r = range;
    let blocks = (n as u64).div_ceil(per);
    let mut params = [
        param(&mut p),
        param(&mut n64),
        param(&mut dt),
        param(&mut lo),
        param(&mut r),
    ];
    // SAFETY: rng_randint(ptr, i64, int, i64, u64); `out` holds n contiguous elements of its
    // integer dtype, the kernel writes indices below n only; range > 0 (low < high).
    unsafe {
        m.launch(
            "rng_randint",
            (grid_for(blocks as i64), 1, 1),
            256,
            0,
            stream,
            &mut params,
        )?
    };
    advance(&m, stream, blocks * 4)
}

/// `torch.randint(low, high, sizes, dtype)` on device `ordinal`: a new contiguous tensor.
pub fn randint(low: i64, high: i64, sizes: Vec<i64>, dtype: i32, ordinal: i32) -> Result<Tensor> {
    check_sizes(&sizes, "randint")?;
    check_randint(low, high, dtype)?;
    let strides = contiguous_strides(&sizes);
    let t = crate::cuda::memory::empty_strided(sizes, strides, dtype, Device::Cuda(ordinal))?;
    randint_into(&t, low, high)?;
    Ok(t)
}

/// Set device `ordinal`'s generator to (`seed`, offset 0), in order on the
/// current stream (draws enqueued before it use the old state).
pub fn manual_seed(ordinal: i32, seed: u64) -> Result<()> {
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let (mut s, mut o) = (seed, 0u64);
    let mut params = [param(&mut s), param(&mut o)];
    // SAFETY: rng_set(u64, u64) touches only the module's own state variable.
    unsafe { m.launch("rng_set", (1, 1, 1), 32, 0, stream, &mut params) }
}

/// Device `ordinal`'s generator state (seed, offset in 32-bit words), after
/// waiting for the current stream.
pub fn rng_state(ordinal: i32) -> Result<(u64, u64)> {
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    check(
        // SAFETY: a live stream of this context (or the legacy stream, null).
        unsafe { sys::cuStreamSynchronize(stream) },
        "cuStreamSynchronize",
    )?;
    let (ptr, bytes) = m.global("et_rng_state")?;
    if bytes != 16 {
        return Err(Error::internal(format!(
            "et_rng_state has {bytes} bytes, not 16"
        )));
    }
    let mut state = [0u64; 2];
    check(
        // SAFETY: 16 bytes from the module's variable into a local array of 16 bytes.
        unsafe { sys::cuMemcpyDtoH_v2(state.as_mut_ptr().cast(), ptr, 16) },
        "cuMemcpyDtoH(et_rng_state)",
    )?;
    Ok((state[0], state[1]))
}
