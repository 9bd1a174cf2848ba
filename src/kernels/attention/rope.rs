//! `et_attention_rope`: the attention step of a decoder layer with its RoPE and its KV-cache
//! write. q and the new keys are rotated (`x * cos + rotate_half(x) * sin`, HF
//! `transformers`' convention: the two halves of the head dimension rotated, each rotated value
//! rounded to the dtype as a stored tensor would be), the rotated keys and the new values are
//! written into the caches at the queries' positions (positions outside the cache are not
//! written), then the attention runs over the written caches as
//! [`super::decode_attention`] does. The short-context kernel writes the caches itself (one
//! kernel for the whole step); otherwise `et_kv_write_*` writes them just before the split kernel.
//!
//! `k_new`, `v_new`: `[B, Hkv, Lq, D]` (any non-negative strides); `cos`, `sin`:
//! `[B | 1, 1, Lq, D]` (HF's `cos.unsqueeze(1)`; any non-negative strides); all of q's dtype,
//! on q's device. Optionally ([`HeadNorm`]) each head's row of q and of the new keys is
//! RMS-normed before the rotation (Qwen3's and Gemma-3's `q_norm` and `k_norm`).

use super::{Args, Problem};
use crate::dtype::describe;
use crate::error::{invalid, Result};
use crate::tensor::{Device, Tensor};

/// The new keys and values of this step, and the rotation.
#[derive(Debug, Clone, Copy)]
pub struct Rope<'a> {
    pub k_new: &'a Tensor,
    pub v_new: &'a Tensor,
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    /// An RMSNorm of each head's row of q and of the new keys before the rotation.
    pub norm: Option<HeadNorm<'a>>,
}

/// Qwen3's and Gemma-3's `q_norm` / `k_norm`: `r = rsqrt(mean(x^2) + eps)` over D in fp32;
/// mode 1: `w * (x * r).to(T)`; mode 2: `(x * r * (offset + w)).to(T)` (as `et_linear`'s norm).
#[derive(Debug, Clone, Copy)]
pub struct HeadNorm<'a> {
    pub q_weight: &'a Tensor,
    pub k_weight: &'a Tensor,
    pub mode: i64,
    pub eps: f64,
    pub offset: f64,
}

fn check_norm(p: &Problem, n: &HeadNorm) -> Result<()> {
    if !(n.mode == 1 || n.mode == 2) {
        return invalid(format!(
            "et_cuda attention_rope: norm_mode {} is not 1 or 2 (0: no norm, without weights)",
            n.mode
        ));
    }
    if !n.eps.is_finite() || n.eps < 0.0 || !n.offset.is_finite() {
        return invalid(format!(
            "et_cuda attention_rope: norm eps {} must be finite and >= 0, offset {} finite",
            n.eps, n.offset
        ));
    }
    for (t, what) in [(n.q_weight, "q_norm"), (n.k_weight, "k_norm")] {
        if t.sizes != [p.d] || t.strides != [1] {
            return invalid(format!(
                "et_cuda attention_rope: {what} must be a contiguous [D] = [{}], not sizes {:?} strides {:?}",
                p.d, t.sizes, t.strides
            ));
        }
        same_kind(p, t, what)?;
    }
    Ok(())
}

/// `t` of q's dtype, on q's device, with no negative stride.
fn same_kind(p: &Problem, t: &Tensor, what: &str) -> Result<()> {
    if t.dtype != p.dtype {
        return invalid(format!(
            "et_cuda attention_rope: {what} is {}, not q's {}",
            describe(t.dtype),
            describe(p.dtype)
        ));
    }
    if t.strides.iter().any(|&s| s < 0) {
        return invalid(format!(
            "et_cuda attention_rope: {what} has a negative stride"
        ));
    }
    if t.device() != Device::Cuda(p.device) {
        return invalid(format!(
            "et_cuda attention_rope: {what} is on {:?}, not on q's CUDA device {}",
            t.device(),
            p.device
        ));
    }
    Ok(())
}

/// Check the rotation's tensors against the checked attention problem.
pub(super) fn check(p: &Problem, r: &Rope) -> Result<()> {
    let new = [p.b, p.hkv, p.lq, p.d];
    for (t, what) in [(r.k_new, "k_new"), (r.v_new, "v_new")] {
        if t.sizes != new {
            return invalid(format!(
                "et_cuda attention_rope: {what} must be [B, Hkv, Lq, D] = {new:?}, not {:?}",
                t.sizes
            ));
        }
    }
    for (t, what) in [(r.cos, "cos"), (r.sin, "sin")] {
        let s = &t.sizes;
        if s.len() != 4 || !(s[0] == 1 || s[0] == p.b) || s[1] != 1 || s[2] != p.lq || s[3] != p.d {
            return invalid(format!(
                "et_cuda attention_rope: {what} must be [B or 1, 1, Lq, D] = [{}, 1, {}, {}], not {s:?}",
                p.b, p.lq, p.d
            ));
        }
    }
    for (t, what) in [
        (r.k_new, "k_new"),
        (r.v_new, "v_new"),
        (r.cos, "cos"),
        (r.sin, "sin"),
    ] {
        same_kind(p, t, what)?;
    }
    r.norm.as_ref().map_or(Ok(()), |n| check_norm(p, n))
}

/// The rotation's fields of the kernel's argument block (a broadcast batch of cos/sin reads
/// row 0 for every batch entry).
pub(super) fn fill(args: &mut Args, r: &Rope) {
    let s4 = |t: &Tensor| [t.strides[0], t.strides[1], t.strides[2], t.strides[3]];
    let s3 = |t: &Tensor| {
        let b = if t.sizes[0] == 1 { 0 } else { t.strides[0] };
        [b, t.strides[2], t.strides[3]]
    };
    args.kn = r.k_new.data_ptr() as u64;
    args.kns = s4(r.k_new);
    args.vn = r.v_new.data_ptr() as u64;
    args.vns = s4(r.v_new);
    args.cs = r.cos.data_ptr() as u64;
    args.css = s3(r.cos);
    args.sn = r.sin.data_ptr() as u64;
    args.sns = s3(r.sin);
    args.rope = 1;
    if let Some(n) = &r.norm {
        args.qnw = n.q_weight.data_ptr() as u64;
        args.knw = n.k_weight.data_ptr() as u64;
        args.norm_mode = n.mode as i32;
        args.eps = n.eps as f32;
        args.norm_off = n.offset as f32;
    }
}

/// Where q, the new keys and the new values lie in one packed projection `[B, Lq, N]` (the
/// result of a fused QKV linear): `heads` query heads of `D` (the caches' head size) from
/// column `q_off`, and the caches' `Hkv` heads of keys from `k_off` and of values from `v_off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub heads: i64,
    pub q_off: i64,
    pub k_off: i64,
    pub v_off: i64,
}

/// q `[B, Hq, Lq, D]` and the new keys and values `[B, Hkv, Lq, D]` as views of `qkv`
/// `[B, Lq, N]` (any non-negative strides), placed as `at` says; `Hkv` and `D` are the
/// cache `k_cache`'s `[B, Hkv, Lmax, D]`. Each view must lie inside the row of `N` columns.
pub fn split_packed(qkv: &Tensor, k_cache: &Tensor, at: Packed) -> Result<[Tensor; 3]> {
    let bad = |why: String| invalid(format!("et_cuda attention_rope_qkv: {why}"));
    if qkv.sizes.len() != 3 || k_cache.sizes.len() != 4 {
        return bad(format!(
            "qkv must be [B, Lq, N] and k_cache [B, Hkv, Lmax, D], not sizes {:?} and {:?}",
            qkv.sizes, k_cache.sizes
        ));
    }
    if qkv.strides.iter().any(|&s| s < 0) {
        return bad(format!("qkv has a negative stride ({:?})", qkv.strides));
    }
    let (b, lq, n) = (qkv.sizes[0], qkv.sizes[1], qkv.sizes[2]);
    let (hkv, d) = (k_cache.sizes[1], k_cache.sizes[3]);
    if at.heads <= 0 || hkv <= 0 || d <= 0 {
        return bad(format!(
            "{} query heads and the cache's {hkv} heads of {d} must be positive",
            at.heads
        ));
    }
    let (sb, sl, sd) = (qkv.strides[0], qkv.strides[1], qkv.strides[2]);
    let mut views = Vec::with_capacity(3);
    for (what, off, heads) in [
        ("q", at.q_off, at.heads),
        ("k", at.k_off, hkv),
        ("v", at.v_off, hkv),
    ] {
        let end = heads.checked_mul(d).and_then(|w| w.checked_add(off));
        if off < 0 || end.is_none_or(|e| e > n) {
            return bad(format!(
                "{what}: {heads} heads of {d} from column {off} do not fit a row of {n}"
            ));
        }
        let place = d.checked_mul(sd).zip(
            off.checked_mul(sd)
                .and_then(|o| o.checked_add(qkv.storage_offset)),
        );
        let Some((hs, offset)) = place else {
            return bad(format!("{what}'s strides or offset overflow"));
        };
        views.push(Tensor::view(
            qkv.storage.clone(),
            qkv.dtype,
            vec![b, heads, lq, d],
            vec![sb, hs, sl, sd],
            offset,
        )?);
    }
    match <[Tensor; 3]>::try_from(views) {
        Ok(v) => Ok(v),
        Err(_) => bad("three views expected".into()),
    }
}
