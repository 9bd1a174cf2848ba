//! Decode attention over a static KV cache: the checks, the split choice and
//! the launches of the attention kernels of `kernels/decode.cu`.
//!
//! `q` `[B, Hq, Lq, D]` (any strides), `k_cache` and `v_cache` `[B, Hkv, Lmax, D]`
//! (unit stride along `D`, other strides multiples of 8 elements, 16-byte
//! aligned), `Hq` a multiple of `Hkv` (query head `h` reads KV head `h / (Hq/Hkv)`),
//! `D` 64, 128 or 256, all bf16 or all fp16 on one CUDA device. Query `i` sits at
//! cache position `p_i` and sees the keys `0..=p_i` (causal within the new
//! tokens, nothing past them). The positions come from
//! - a device int64 tensor `pos`: `Lq` elements (one per query) or one element
//!   (the first query's; `p_i = pos[0] + i`), read by the kernel, so the call
//!   never waits on the host and can be captured into a CUDA graph; or
//! - a host `valid_len`: the last query sits at `valid_len - 1`
//!   (`p_i = valid_len - Lq + i`), checked against `[Lq, Lmax]`.
//!
//! Device positions outside `[0, Lmax)` are clamped into it by the kernel (no
//! read past the cache); they cannot be checked without a host wait.
//!
//! The result is a new contiguous `[B, Hq, Lq, D]` tensor of `q`'s dtype
//! (softmax and sums in fp32). Work split: blocks of 16 query rows (the
//! `Hq/Hkv * Lq` rows of one KV head, head-major) times `nsplit` chunks of the
//! cache (a multiple of 32 keys each), chosen so that there are about two
//! blocks per SM; with `nsplit > 1` the blocks write fp32 partial results
//! (unnormalised output, running max, sum) to a workspace from the
//! stream-ordered pool and a second kernel combines them.

use super::{module, Module};
use crate::cuda::{self, ContextGuard};
use crate::dtype::codes as dtype;
use crate::dtype::describe;
use crate::error::{invalid, Result};
use crate::tensor::{self, Device, Tensor};

/// Query rows per block (`ATTN_ROWS`), keys per tile (`ATTN_TILE`), threads per block.
const ROWS: i64 = 16;
const TILE: i64 = 32;
const THREADS: u32 = 128;

/// Where the queries sit in the cache.
#[derive(Debug, Clone, Copy)]
pub enum Positions<'a> {
    /// A device int64 tensor of `Lq` or 1 elements.
    Device(&'a Tensor),
    /// The number of valid cache positions after this step, known on the host.
    ValidLen(i64),
}

/// The kernel's argument block (`AttnArgs` in `kernels/decode.cu`, same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Args {
    pub q: u64,
    pub qs: [i64; 4],
    pub k: u64,
    pub ks: [i64; 3],
    pub v: u64,
    pub vs: [i64; 3],
    pub pos: u64,
    pub start: i64,
    pub pos_n: i32,
    pub hq: i32,
    pub hkv: i32,
    pub lq: i32,
    pub lmax: i32,
    pub chunk: i32,
    pub nsplit: i32,
    pub rgroups: i32,
    pub scale_log2: f32,
    pub out: u64,
    pub part_o: u64,
    pub part_ml: u64,
    /// A sliding window (> 0: keys `p - window < j <= p`), or 0.
    pub window: i32,
    /// 1: the output is laid out `[B, Lq, Hq, D]` ([`Layout::Bthd`]).
    pub out_bthd: i32,
    /// `et_attention_rope` ([`rope`]): new keys, new values, cos, sin and their strides.
    pub kn: u64,
    pub kns: [i64; 4],
    pub vn: u64,
    pub vns: [i64; 4],
    pub cs: u64,
    pub css: [i64; 3],
    pub sn: u64,
    pub sns: [i64; 3],
    /// 1: q (and the new keys) rotated.
    pub rope: i32,
    /// 1: the short-context kernel writes the new keys and values itself.
    pub write: i32,
    /// The heads' RMSNorm before the rotation ([`rope::HeadNorm`]): q's and the keys' weights,
    /// the mode (0: none), eps and the weight offset.
    pub qnw: u64,
    pub knw: u64,
    pub norm_mode: i32,
    pub eps: f32,
    pub norm_off: f32,
}

/// How the result `[B, Hq, Lq, D]` lies in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Contiguous `[B, Hq, Lq, D]`.
    Bhtd,
    /// `[B, Lq, Hq, D]` in memory (strides `(Lq*Hq*D, D, Hq*D, 1)`): what the output
    /// projection reads after `transpose(1, 2).reshape(B, Lq, Hq*D)`, with no copy.
    Bthd,
}

/// The checked problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub b: i64,
    pub hq: i64,
    pub hkv: i64,
    pub lq: i64,
    pub lmax: i64,
    pub d: i64,
    pub dtype: i32,
    /// Keys the split covers: `Lmax` with device positions, else `valid_len`.
    pub span: i64,
    /// First query's position when given on the host.
    pub start: Option<i64>,
    /// Elements of the device positions tensor (0 with a host `valid_len`).
    pub pos_n: i64,
    pub device: i32,
}

/// Check every argument (see the module docs). Devices are checked last.
pub fn check(q: &Tensor, k: &Tensor, v: &Tensor, pos: Positions, scale: f64) -> Result<Problem> {
    let dt = q.dtype;
    check_dtypes_and_ranks(q, k, v)?;
    let (b, hq, lq, d, hkv, lmax) = check_sizes(q, k, scale)?;
    check_strides(q, k, v)?;
    let (span, start, pos_n, pos_dev) = check_positions(pos, lq, lmax)?;
    let device = check_device(q, k, v, pos_dev)?;
    Ok(Problem {
        b,
        hq,
        hkv,
        lq,
        lmax,
        d,
        dtype: dt,
        span,
        start,
        pos_n,
        device,
    })
}

/// One dtype (bfloat16 or float16) for q and the caches, all 4-d, the caches of one size.
fn check_dtypes_and_ranks(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<()> {
    let dt = q.dtype;
    if dt != dtype::BFLOAT16 && dt != dtype::FLOAT16 {
        return invalid(format!(
            "et_cuda decode_attention: q must be bfloat16 or float16, not {}",
            describe(dt)
        ));
    }
    if k.dtype != dt || v.dtype != dt {
        return invalid(format!(
            "et_cuda decode_attention: q ({}), k_cache ({}) and v_cache ({}) must have one dtype",
            describe(dt),
            describe(k.dtype),
            describe(v.dtype)
        ));
    }
    if q.sizes.len() != 4 || k.sizes.len() != 4 || v.sizes.len() != 4 {
        return invalid(format!(
            "et_cuda decode_attention: q [B, Hq, Lq, D] and k/v caches [B, Hkv, Lmax, D] must be 4-d; sizes {:?}, {:?}, {:?}",
            q.sizes, k.sizes, v.sizes
        ));
    }
    if k.sizes != v.sizes {
        return invalid(format!(
            "et_cuda decode_attention: k_cache {:?} and v_cache {:?} must have the same sizes",
            k.sizes, v.sizes
        ));
    }
    Ok(())
}

/// The sizes against each other, the head size, the scale and the grid limits;
/// returns (B, Hq, Lq, D, Hkv, Lmax).
fn check_sizes(q: &Tensor, k: &Tensor, scale: f64) -> Result<(i64, i64, i64, i64, i64, i64)> {
    let (b, hq, lq, d) = (q.sizes[0], q.sizes[1], q.sizes[2], q.sizes[3]);
    let (hkv, lmax) = (k.sizes[1], k.sizes[2]);
    if k.sizes[0] != b || k.sizes[3] != d {
        return invalid(format!(
            "et_cuda decode_attention: q {:?} and the caches {:?} disagree on B or D",
            q.sizes, k.sizes
        ));
    }
    if d != 64 && d != 128 && d != 256 {
        return invalid(format!(
            "et_cuda decode_attention: head size D = {d} is not supported (64, 128 or 256)"
        ));
    }
    if hkv <= 0 || hq <= 0 || hq % hkv != 0 {
        return invalid(format!(
            "et_cuda decode_attention: query heads {hq} must be a positive multiple of KV heads {hkv}"
        ));
    }
    if lmax <= 0 {
        return invalid("et_cuda decode_attention: the cache has no positions (Lmax = 0)");
    }
    if lq > lmax {
        return invalid(format!(
            "et_cuda decode_attention: {lq} queries do not fit a cache of {lmax} positions"
        ));
    }
    if !scale.is_finite() {
        return invalid(format!(
            "et_cuda decode_attention: scale {scale} is not finite"
        ));
    }
    let lim = i64::from(i32::MAX);
    let rows = (hq / hkv).saturating_mul(lq);
    let rgroups = (rows + ROWS - 1) / ROWS;
    if b > 65535 || hkv.saturating_mul(rgroups) > 65535 || lmax > lim || hq > lim {
        return invalid(format!(
            "et_cuda decode_attention: B={b}, Hkv={hkv} x {rgroups} row groups or Lmax={lmax} exceed the grid"
        ));
    }
    Ok((b, hq, lq, d, hkv, lmax))
}

/// Non-negative q strides; caches with unit stride along D, 8-aligned other strides and 16-byte-aligned data.
fn check_strides(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<()> {
    if q.strides.iter().any(|&s| s < 0) {
        return invalid("et_cuda decode_attention: q has a negative stride");
    }
    for (t, what) in [(k, "k_cache"), (v, "v_cache")] {
        let s = &t.strides;
        if s[3] != 1 || s[..3].iter().any(|&x| x < 0 || x % 8 != 0) {
            return invalid(format!(
                "et_cuda decode_attention: {what} must have unit stride along D and other strides that are non-negative multiples of 8; strides {s:?}"
            ));
        }
        if (t.data_ptr() as usize) % 16 != 0 {
            return invalid(format!(
                "et_cuda decode_attention: {what}'s data pointer is not 16-byte aligned"
            ));
        }
    }
    Ok(())
}

/// The positions (a valid length or a device tensor); returns (span, start, positions count, positions device).
fn check_positions(
    pos: Positions,
    lq: i64,
    lmax: i64,
) -> Result<(i64, Option<i64>, i64, Option<Device>)> {
    let (span, start, pos_n, pos_dev) = match pos {
        Positions::ValidLen(n) => {
            if n < lq || n > lmax {
                return invalid(format!(
                    "et_cuda decode_attention: valid_len {n} must be in [Lq, Lmax] = [{lq}, {lmax}]"
                ));
            }
            (n, Some(n - lq), 0, None)
        }
        Positions::Device(p) => {
            if p.dtype != dtype::INT64 {
                return invalid(format!(
                    "et_cuda decode_attention: positions must be int64, not {}",
                    describe(p.dtype)
                ));
            }
            let n = p.numel();
            if !(n == 1 || n == lq) || !p.is_contiguous() {
                return invalid(format!(
                    "et_cuda decode_attention: positions must be a contiguous tensor of Lq = {lq} or 1 elements, not sizes {:?} strides {:?}",
                    p.sizes, p.strides
                ));
            }
            if (p.data_ptr() as usize) % 8 != 0 {
                return invalid("et_cuda decode_attention: positions are not 8-byte aligned");
            }
            (lmax, None, n, Some(p.device()))
        }
    };
    Ok((span, start, pos_n, pos_dev))
}

/// q, the caches and the device positions on one CUDA device; returns its ordinal.
fn check_device(q: &Tensor, k: &Tensor, v: &Tensor, pos_dev: Option<Device>) -> Result<i32> {
    let device = match (q.device(), k.device(), v.device(), pos_dev) {
        (Device::Cuda(a), Device::Cuda(x), Device::Cuda(y), p)
            if a == x && x == y && p.is_none_or(|p| p == Device::Cuda(a)) =>
        {
            a
        }
        (a, x, y, p) => {
            return invalid(format!(
                "et_cuda decode_attention: q, k_cache, v_cache (and positions) must be on one CUDA device; they are on {a:?}, {x:?}, {y:?}, {p:?}"
            ))
        }
    };
    Ok(device)
}

/// The sliding window as the kernel takes it (0: none).
fn check_window(window: i64) -> Result<i32> {
    match i32::try_from(window) {
        Ok(w) if w >= 0 => Ok(w),
        _ => invalid(format!(
            "et_cuda decode_attention: window {window} is not in 0..=2^31-1 (0: no window)"
        )),
    }
}

/// Check, allocate the output (and the split workspace) on the device's
/// current stream and enqueue the kernels there. No host wait.
pub fn decode_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos: Positions,
    scale: f64,
    window: i64,
    layout: Layout,
) -> Result<Tensor> {
    run(q, k, v, pos, (scale, window, layout), None)
}

/// [`decode_attention`] with RoPE applied to q and the new keys, and the new keys and values
/// written into `k` and `v` (the caches) first ([`rope`]).
pub fn attention_rope(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos: Positions,
    (scale, window, layout): (f64, i64, Layout),
    r: &Rope,
) -> Result<Tensor> {
    run(q, k, v, pos, (scale, window, layout), Some(r))
}

/// The result `[B, Hq, Lq, D]` of `p`, laid out as `layout` says.
fn alloc_out(p: &Problem, layout: Layout) -> Result<Tensor> {
    let sizes = vec![p.b, p.hq, p.lq, p.d];
    let strides = match layout {
        Layout::Bhtd => tensor::contiguous_strides(&sizes),
        Layout::Bthd => vec![p.lq * p.hq * p.d, p.d, p.hq * p.d, 1],
    };
    crate::cuda::memory::empty_strided(sizes, strides, p.dtype, Device::Cuda(p.device))
}

fn run(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos: Positions,
    (scale, window, layout): (f64, i64, Layout),
    r: Option<&Rope>,
) -> Result<Tensor> {
    let p = check(q, k, v, pos, scale)?;
    let window = check_window(window)?;
    if let Some(r) = r {
        rope::check(&p, r)?;
    }
    let dev = Device::Cuda(p.device);
    let out = alloc_out(&p, layout)?;
    if p.b == 0 || p.lq == 0 {
        return Ok(out);
    }
    let module = module(p.device)?;
    let (rgroups, chunk, nsplit) = split(&p, i64::from(module.sm_count));
    let nrows = p.b * p.hq * p.lq;
    let (part_o, part_ml) = split_workspaces(nrows, nsplit, p.d, dev)?;
    let combine = names(&p).1;
    let _ctx = ContextGuard::device(module.device())?;
    // The launch's kernel and grid; the short-context kernel's row groups are its own.
    let shape = launch_shape(&p, &module, (rgroups, nsplit), r.is_some());
    let mut args = Args {
        q: q.data_ptr() as u64,
        qs: [q.strides[0], q.strides[1], q.strides[2], q.strides[3]],
        k: k.data_ptr() as u64,
        ks: [k.strides[0], k.strides[1], k.strides[2]],
        v: v.data_ptr() as u64,
        vs: [v.strides[0], v.strides[1], v.strides[2]],
        pos: match pos {
            Positions::Device(t) => t.data_ptr() as u64,
            Positions::ValidLen(_) => 0,
        },
        start: p.start.unwrap_or(0),
        pos_n: p.pos_n as i32,
        hq: p.hq as i32,
        hkv: p.hkv as i32,
        lq: p.lq as i32,
        lmax: p.lmax as i32,
        chunk: chunk as i32,
        nsplit: nsplit as i32,
        rgroups: shape.rgroups as i32,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
        out: out.data_ptr() as u64,
        part_o: part_o.as_ref().map_or(0, |t| t.data_ptr() as u64),
        part_ml: part_ml.as_ref().map_or(0, |t| t.data_ptr() as u64),
        window,
        out_bthd: i32::from(layout == Layout::Bthd),
        ..Args::default()
    };
    let stream = cuda::stream::current(p.device).raw;
    let pdl = super::pdl_enabled();
    if let Some(r) = r {
        rope::fill(&mut args, r);
        args.write = i32::from(shape.writes);
        if !shape.writes {
            // SAFETY: `check` and `rope::check` proved `args` (just filled) for `p`.
            unsafe { launch::kv_write(&module, &p, &mut args, stream, pdl)? };
        }
    }
    // SAFETY: `check` (and `rope::check`) proved `args` for `p`; the output and workspaces were
    // just allocated with the sizes the grid writes.
    unsafe { launch::main(&module, &shape, &mut args, stream, pdl)? };
    if let (Some(po), Some(pm)) = (&part_o, &part_ml) {
        let shape = (nrows, nsplit, &args);
        // SAFETY: the workspaces hold nrows x nsplit partials written by the launch above
        // on the same stream, and `out` has the nrows rows the combine writes.
        unsafe { launch_combine(&module, combine, stream, &out, (po, pm), shape)? };
    }
    // The workspaces go back to the pool ordered after the kernels on this stream.
    drop((part_o, part_ml));
    Ok(out)
}

#[path = "attention/choice.rs"]
mod choice;
pub use choice::split;
use choice::{kv_write_name, launch_shape, names, Shape};
pub use choice::{set_decode_rows, set_decode_splits};
#[path = "attention/launch.rs"]
mod launch;
use launch::{launch_combine, split_workspaces};
#[path = "attention/rope.rs"]
pub mod rope;
#[cfg(test)]
pub use choice::{kernels, set_decode_kernel};
pub use rope::{split_packed, HeadNorm, Packed, Rope};

#[cfg(test)]
mod tests;
