//! Decode attention over a static KV cache: the checks, the split choice and
//! the launches of the attention kernels of `kernels/decode.cu`.
//!
//! `q` `[B, Hq, Lq, D]` (any strides), `k_cache` and `v_cache` `[B, Hkv, Lmax, D]`
//! (unit stride along `D`, other strides multiples of 8 elements, 16-byte
//! aligned), `Hq` a multiple of `Hkv` (query head `h` reads KV head `h / (Hq/Hkv)`),
//! `D` 64 or 128, all bf16 or all fp16 on one CUDA device. Query `i` sits at
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

use super::module;
use crate::cuda::{self, ContextGuard};
use crate::dtype::codes as dtype;
use crate::error::{invalid, Result};
use crate::tensor::{self, Device, Tensor};
use std::ffi::c_void;

/// Every attention entry point of `kernels/decode.cu` (checked against the PTX by a test).
#[cfg(test)]
pub const KERNELS: &[&str] = &[
    "et_attn_bf16_d64",
    "et_attn_combine_bf16_d64",
    "et_attn_bf16_d128",
    "et_attn_combine_bf16_d128",
    "et_attn_f16_d64",
    "et_attn_combine_f16_d64",
    "et_attn_f16_d128",
    "et_attn_combine_f16_d128",
];

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

fn dt_name(code: i32) -> String {
    match code {
        dtype::BFLOAT16 => "bfloat16".into(),
        dtype::FLOAT16 => "float16".into(),
        dtype::INT64 => "int64".into(),
        dtype::INT32 => "int32".into(),
        dtype::FLOAT32 => "float32".into(),
        other => format!("dtype code {other}"),
    }
}

/// Check every argument (see the module docs). Devices are checked last.
pub fn check(q: &Tensor, k: &Tensor, v: &Tensor, pos: Positions, scale: f64) -> Result<Problem> {
    let dt = q.dtype;
    if dt != dtype::BFLOAT16 && dt != dtype::FLOAT16 {
        return invalid(format!(
            "et_cuda decode_attention: q must be bfloat16 or float16, not {}",
            dt_name(dt)
        ));
    }
    if k.dtype != dt || v.dtype != dt {
        return invalid(format!(
            "et_cuda decode_attention: q ({}), k_cache ({}) and v_cache ({}) must have one dtype",
            dt_name(dt),
            dt_name(k.dtype),
            dt_name(v.dtype)
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
    let (b, hq, lq, d) = (q.sizes[0], q.sizes[1], q.sizes[2], q.sizes[3]);
    let (hkv, lmax) = (k.sizes[1], k.sizes[2]);
    if k.sizes[0] != b || k.sizes[3] != d {
        return invalid(format!(
            "et_cuda decode_attention: q {:?} and the caches {:?} disagree on B or D",
            q.sizes, k.sizes
        ));
    }
    if d != 64 && d != 128 {
        return invalid(format!(
            "et_cuda decode_attention: head size D = {d} is not supported (64 or 128)"
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
                    dt_name(p.dtype)
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

/// Rows groups, chunk (keys per split) and number of splits for a GPU of `sms` SMs.
pub fn split(p: &Problem, sms: i64) -> (i64, i64, i64) {
    let rows = p.hq / p.hkv * p.lq;
    let rgroups = (rows + ROWS - 1) / ROWS;
    let base = p.b * p.hkv * rgroups;
    let tiles = (p.span + TILE - 1) / TILE;
    let want = (2 * sms.max(1) + base - 1) / base;
    let nsplit = want.clamp(1, tiles.max(1));
    let chunk = ((p.span + nsplit - 1) / nsplit + TILE - 1) / TILE * TILE;
    let nsplit = (p.span + chunk - 1) / chunk;
    (rgroups, chunk, nsplit.max(1))
}

fn names(p: &Problem) -> (&'static str, &'static str) {
    match (p.dtype == dtype::BFLOAT16, p.d) {
        (true, 64) => ("et_attn_bf16_d64", "et_attn_combine_bf16_d64"),
        (true, _) => ("et_attn_bf16_d128", "et_attn_combine_bf16_d128"),
        (false, 64) => ("et_attn_f16_d64", "et_attn_combine_f16_d64"),
        (false, _) => ("et_attn_f16_d128", "et_attn_combine_f16_d128"),
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
) -> Result<Tensor> {
    let p = check(q, k, v, pos, scale)?;
    let dev = Device::Cuda(p.device);
    let sizes = vec![p.b, p.hq, p.lq, p.d];
    let out = Tensor::empty_strided(
        sizes.clone(),
        tensor::contiguous_strides(&sizes),
        p.dtype,
        dev,
    )?;
    if p.b == 0 || p.lq == 0 {
        return Ok(out);
    }
    let module = module(p.device)?;
    let (rgroups, chunk, nsplit) = split(&p, i64::from(module.sm_count));
    let nrows = p.b * p.hq * p.lq;
    let (part_o, part_ml) = if nsplit > 1 {
        let so = vec![nrows * nsplit * p.d];
        let sm = vec![nrows * nsplit * 2];
        (
            Some(Tensor::empty_strided(so, vec![1], dtype::FLOAT32, dev)?),
            Some(Tensor::empty_strided(sm, vec![1], dtype::FLOAT32, dev)?),
        )
    } else {
        (None, None)
    };
    let (name, combine) = names(&p);
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
        rgroups: rgroups as i32,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
        out: out.data_ptr() as u64,
        part_o: part_o.as_ref().map_or(0, |t| t.data_ptr() as u64),
        part_ml: part_ml.as_ref().map_or(0, |t| t.data_ptr() as u64),
    };
    let _ctx = ContextGuard::device(module.device())?;
    let stream = cuda::stream::current(p.device).raw;
    let grid = (nsplit as u32, (p.hkv * rgroups) as u32, p.b as u32);
    let mut params: [*mut c_void; 1] = [(&mut args as *mut Args).cast()];
    // SAFETY: the kernel takes one `AttnArgs` by value, which `Args` mirrors field for
    // field (repr(C)); `check` proved the sizes, strides and alignment it relies on, the
    // positions are int64 on this device (or absent), and the output and workspaces were
    // just allocated with the sizes the grid writes.
    unsafe { module.launch(name, grid, THREADS, 0, stream, &mut params)? };
    if let (Some(po), Some(pm)) = (&part_o, &part_ml) {
        let mut pop = po.data_ptr() as u64;
        let mut pmp = pm.data_ptr() as u64;
        let mut outp = out.data_ptr() as u64;
        let mut nr = nrows;
        let mut ns = nsplit as i32;
        let mut cparams: [*mut c_void; 5] = [
            (&mut pop as *mut u64).cast(),
            (&mut pmp as *mut u64).cast(),
            (&mut outp as *mut u64).cast(),
            (&mut nr as *mut i64).cast(),
            (&mut ns as *mut i32).cast(),
        ];
        let cgrid = (((nrows + 3) / 4) as u32, 1, 1);
        // SAFETY: (ptr, ptr, ptr, i64, int) as the combine kernel takes; the workspaces hold
        // nrows x nsplit partials written by the launch above on the same stream.
        unsafe { module.launch(combine, cgrid, 128, 0, stream, &mut cparams)? };
    }
    // The workspaces go back to the pool ordered after the kernels on this stream.
    drop((part_o, part_ml));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dt: i32, sizes: &[i64]) -> Tensor {
        Tensor::empty_strided(
            sizes.to_vec(),
            tensor::contiguous_strides(sizes),
            dt,
            Device::Cpu,
        )
        .expect("cpu tensor")
    }

    fn err(r: Result<Problem>) -> String {
        r.expect_err("should be refused").to_string()
    }

    #[test]
    fn args_layout_matches_the_kernel() {
        // AttnArgs: 4 pointers/longs blocks, 9 ints/floats, 3 pointers (4 bytes of padding).
        assert_eq!(
            std::mem::size_of::<Args>(),
            8 * (1 + 4 + 1 + 3 + 1 + 3 + 2) + 36 + 4 + 24
        );
        assert_eq!(std::mem::offset_of!(Args, out), 8 * 15 + 36 + 4);
    }

    #[test]
    fn refusals_name_the_problem() {
        let bf = dtype::BFLOAT16;
        let q = t(bf, &[1, 8, 1, 64]);
        let k = t(bf, &[1, 2, 128, 64]);
        let pos = t(dtype::INT64, &[1]);
        let ok = Positions::Device(&pos);
        assert!(err(check(&q, &k, &t(bf, &[1, 2, 64, 64]), ok, 0.1)).contains("same sizes"));
        assert!(err(check(
            &t(bf, &[1, 8, 1, 96]),
            &t(bf, &[1, 2, 8, 96]),
            &t(bf, &[1, 2, 8, 96]),
            ok,
            0.1
        ))
        .contains("D = 96"));
        assert!(
            err(check(&t(bf, &[1, 3, 1, 64]), &k, &k, ok, 0.1)).contains("multiple of KV heads")
        );
        assert!(
            err(check(&q, &t(dtype::FLOAT16, &[1, 2, 128, 64]), &k, ok, 0.1)).contains("one dtype")
        );
        assert!(err(check(&t(bf, &[1, 8, 200, 64]), &k, &k, ok, 0.1)).contains("do not fit"));
        assert!(err(check(
            &q,
            &k,
            &k,
            Positions::Device(&t(dtype::INT32, &[1])),
            0.1
        ))
        .contains("int64"));
        assert!(err(check(
            &q,
            &k,
            &k,
            Positions::Device(&t(dtype::INT64, &[3])),
            0.1
        ))
        .contains("Lq = 1 or 1"));
        assert!(err(check(&q, &k, &k, Positions::ValidLen(0), 0.1)).contains("valid_len 0"));
        assert!(err(check(&q, &k, &k, Positions::ValidLen(129), 0.1)).contains("valid_len 129"));
        assert!(err(check(&q, &k, &k, ok, f64::NAN)).contains("not finite"));
        // A cache view with a stride that is not a multiple of 8 (every 4th position).
        let mut kv = t(bf, &[1, 2, 128, 64]);
        kv.strides = vec![2 * 128 * 64, 128 * 64, 68, 1];
        assert!(err(check(&q, &kv, &kv, ok, 0.1)).contains("multiples of 8"));
        // All right except that the tensors are on the CPU.
        assert!(err(check(&q, &k, &k, ok, 0.1)).contains("one CUDA device"));
        assert!(err(check(&q, &k, &k, Positions::ValidLen(17), 0.1)).contains("one CUDA device"));
    }

    #[test]
    fn splits_cover_the_span_in_whole_tiles() {
        for (hq, hkv, lq, span) in [
            (32, 8, 1, 1024),
            (32, 8, 16, 1024),
            (8, 8, 1, 1),
            (8, 1, 4, 17),
            (16, 2, 3, 511),
            (4, 4, 1, 100_000),
        ] {
            let p = Problem {
                b: 1,
                hq,
                hkv,
                lq,
                lmax: span,
                d: 64,
                dtype: dtype::BFLOAT16,
                span,
                start: None,
                pos_n: 1,
                device: 0,
            };
            let (rg, chunk, nsplit) = split(&p, 132);
            assert_eq!(chunk % TILE, 0);
            assert!(
                chunk * nsplit >= span && chunk * (nsplit - 1) < span,
                "{chunk} {nsplit} {span}"
            );
            assert!(rg * ROWS >= hq / hkv * lq);
        }
    }
}
