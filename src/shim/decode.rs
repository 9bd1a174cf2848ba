//! The export companion's ops (`python/executorch_cuda/`), as C shims that an
//! AOTInductor `.so` imports when the program was exported with the
//! companion's `aot_inductor.custom_ops_to_c_shims` mapping. Signatures (ours;
//! the companion declares exactly these to Inductor):
//!
//! ```c
//! // et_cuda::et_gemv(Tensor x, Tensor weight) -> Tensor
//! AOTITorchError aoti_torch_cuda_et_gemv(AtenTensorHandle x, AtenTensorHandle weight,
//!                                        AtenTensorHandle* ret0);
//! // et_cuda::et_gemv_bias(Tensor x, Tensor weight, Tensor bias) -> Tensor
//! AOTITorchError aoti_torch_cuda_et_gemv_bias(AtenTensorHandle x, AtenTensorHandle weight,
//!                                             AtenTensorHandle bias, AtenTensorHandle* ret0);
//! // et_cuda::et_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor pos,
//! //                           float scale) -> Tensor
//! AOTITorchError aoti_torch_cuda_et_decode_attention(AtenTensorHandle q, AtenTensorHandle k_cache,
//!     AtenTensorHandle v_cache, AtenTensorHandle pos, double scale, AtenTensorHandle* ret0);
//! // et_cuda::et_decode_attention_len(Tensor q, Tensor k_cache, Tensor v_cache, int valid_len,
//! //                               float scale) -> Tensor
//! AOTITorchError aoti_torch_cuda_et_decode_attention_len(AtenTensorHandle q,
//!     AtenTensorHandle k_cache, AtenTensorHandle v_cache, int64_t valid_len, double scale,
//!     AtenTensorHandle* ret0);
//! // et_cuda::et_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor pos,
//! //                        float scale, int window) -> Tensor   ([B, Lq, Hq, D] in memory)
//! AOTITorchError aoti_torch_cuda_et_attention(AtenTensorHandle q,
//!     AtenTensorHandle k_cache, AtenTensorHandle v_cache, AtenTensorHandle pos, double scale,
//!     int64_t window, AtenTensorHandle* ret0);
//! // et_cuda::et_attention_rope(Tensor q, Tensor k, Tensor v, Tensor(a!) k_cache,
//! //     Tensor(b!) v_cache, Tensor pos, Tensor cos, Tensor sin, float scale, int window,
//! //     Tensor? q_norm, Tensor? k_norm, int norm_mode, float eps, float norm_offset)
//! //     -> Tensor   (writes the caches; [B, Lq, Hq, D] in memory)
//! AOTITorchError aoti_torch_cuda_et_attention_rope(AtenTensorHandle q, AtenTensorHandle k,
//!     AtenTensorHandle v, AtenTensorHandle k_cache, AtenTensorHandle v_cache,
//!     AtenTensorHandle pos, AtenTensorHandle cos, AtenTensorHandle sin, double scale,
//!     int64_t window, AtenTensorHandle* q_norm, AtenTensorHandle* k_norm, int64_t norm_mode,
//!     double eps, double norm_offset, AtenTensorHandle* ret0);
//! // et_cuda::et_attention_rope_qkv(Tensor qkv, Tensor(a!) k_cache, Tensor(b!) v_cache,
//! //     Tensor pos, Tensor cos, Tensor sin, float scale, int window, int heads, int q_off,
//! //     int k_off, int v_off, Tensor? q_norm, Tensor? k_norm, int norm_mode, float eps,
//! //     float norm_offset) -> Tensor   (q, k, v: column ranges of qkv [B, Lq, N])
//! AOTITorchError aoti_torch_cuda_et_attention_rope_qkv(AtenTensorHandle qkv,
//!     AtenTensorHandle k_cache, AtenTensorHandle v_cache, AtenTensorHandle pos,
//!     AtenTensorHandle cos, AtenTensorHandle sin, double scale, int64_t window, int64_t heads,
//!     int64_t q_off, int64_t k_off, int64_t v_off, AtenTensorHandle* q_norm,
//!     AtenTensorHandle* k_norm, int64_t norm_mode, double eps, double norm_offset,
//!     AtenTensorHandle* ret0);
//! // et_cuda::et_linear(Tensor x, Tensor weight, Tensor? bias, Tensor? norm_weight,
//! //     Tensor? residual, int norm_mode, float eps, float norm_offset, int act) -> Tensor
//! AOTITorchError aoti_torch_cuda_et_linear(AtenTensorHandle x, AtenTensorHandle weight,
//!     AtenTensorHandle* bias, AtenTensorHandle* norm_weight, AtenTensorHandle* residual,
//!     int64_t norm_mode, double eps, double norm_offset, int64_t act, AtenTensorHandle* ret0);
//! ```
//!
//! `et_add_rmsnorm`'s shim is in `norm.rs`.
//!
//! Optional tensors (`Tensor?`) come as a pointer to a handle, null for `None`.
//!
//! Each returns a new tensor the caller owns, computed on the device's current
//! stream without a host wait. The work and the argument rules are in
//! `crate::kernels::gemv`, `crate::kernels::linear` and `crate::kernels::attention`.

use super::Aoti;
use super::{give, named, optional, AOTITorchError, AtenTensorHandle};
use crate::boundary::guard;
use crate::error::invalid;
use crate::kernels::attention::{self, HeadNorm, Layout, Positions, Rope};
use crate::kernels::gemv;
use crate::kernels::linear::{self, Act, Fusion, Norm};

/// `y = act(rmsnorm(x) · weightᵀ + bias) + residual` (`crate::kernels::linear`), each part
/// optional: `norm_mode` 0 (none), 1 or 2 with `norm_weight`, `eps`, `norm_offset`; `act` 0,
/// 1 (SiLU(gate) · up) or 2 (GELU-tanh(gate) · up).
///
/// # Safety
/// Each handle must be null or live; each optional-tensor pointer null or readable (holding
/// a null or live handle); `ret0` null or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aoti_torch_cuda_et_linear(
    x: AtenTensorHandle,
    weight: AtenTensorHandle,
    bias: *const AtenTensorHandle,
    norm_weight: *const AtenTensorHandle,
    residual: *const AtenTensorHandle,
    norm_mode: i64,
    eps: f64,
    norm_offset: f64,
    act: i64,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_linear", || {
        // SAFETY: forwarded contract.
        let (x, w, b, g, r) = unsafe {
            (
                named(x, "x")?,
                named(weight, "weight")?,
                optional(bias, "bias")?,
                optional(norm_weight, "norm_weight")?,
                optional(residual, "residual")?,
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let fusion = Fusion {
            bias: b,
            norm: Norm::from_args(g, norm_mode, eps, norm_offset)?,
            residual: r,
            act: Act::from_code(act)?,
        };
        let y = linear::linear(x, w, &fusion)?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// `y = x · weightᵀ` (`x` `[..., K]`, `weight` `[N, K]`, bf16 or fp16).
///
/// # Safety
/// Each handle must be null or live; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_et_gemv(
    x: AtenTensorHandle,
    weight: AtenTensorHandle,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_gemv", || {
        // SAFETY: forwarded contract.
        let (x, w) = unsafe { (named(x, "x")?, named(weight, "weight")?) };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let y = gemv::gemv(x, w, None)?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// `y = x · weightᵀ + bias` (`bias` `[N]`).
///
/// # Safety
/// Each handle must be null or live; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_et_gemv_bias(
    x: AtenTensorHandle,
    weight: AtenTensorHandle,
    bias: AtenTensorHandle,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_gemv_bias", || {
        // SAFETY: forwarded contract.
        let (x, w, b) = unsafe {
            (
                named(x, "x")?,
                named(weight, "weight")?,
                named(bias, "bias")?,
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let y = gemv::gemv(x, w, Some(b))?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// Attention of `q` `[B, Hq, Lq, D]` over the caches `[B, Hkv, Lmax, D]`, query `i`
/// at position `pos[i]` (or `pos[0] + i`), a device int64 tensor.
///
/// # Safety
/// Each handle must be null or live; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_et_decode_attention(
    q: AtenTensorHandle,
    k_cache: AtenTensorHandle,
    v_cache: AtenTensorHandle,
    pos: AtenTensorHandle,
    scale: f64,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_decode_attention", || {
        // SAFETY: forwarded contract.
        let (q, k, v, p) = unsafe {
            (
                named(q, "q")?,
                named(k_cache, "k_cache")?,
                named(v_cache, "v_cache")?,
                named(pos, "pos")?,
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let y = attention::decode_attention(q, k, v, Positions::Device(p), scale, 0, Layout::Bhtd)?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// As [`aoti_torch_cuda_et_decode_attention`] with an optional sliding window (query `i` at
/// `p_i` sees the keys `p_i - window < j <= p_i`; `window` 0: all of `0..=p_i`), and the result
/// `[B, Hq, Lq, D]` laid out `[B, Lq, Hq, D]` in memory (`attention::Layout::Bthd`).
///
/// # Safety
/// Each handle must be null or live; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_et_attention(
    q: AtenTensorHandle,
    k_cache: AtenTensorHandle,
    v_cache: AtenTensorHandle,
    pos: AtenTensorHandle,
    scale: f64,
    window: i64,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_attention", || {
        // SAFETY: forwarded contract.
        let (q, k, v, p) = unsafe {
            (
                named(q, "q")?,
                named(k_cache, "k_cache")?,
                named(v_cache, "v_cache")?,
                named(pos, "pos")?,
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let y = attention::decode_attention(
            q,
            k,
            v,
            Positions::Device(p),
            scale,
            window,
            Layout::Bthd,
        )?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// [`aoti_torch_cuda_et_attention`] with RoPE applied to q and to the new keys `k`, and the
/// rotated keys and the new values `v` (`[B, Hkv, Lq, D]`) written into `k_cache` and
/// `v_cache` at the positions first (`attention::rope`); `cos`/`sin` `[B | 1, 1, Lq, D]`;
/// with `norm_mode` 1 or 2, q's and the keys' rows RMS-normed first with the weights `q_norm`
/// and `k_norm` (`attention::HeadNorm`; mode 0: both absent).
///
/// # Safety
/// Each handle must be null or live; each optional-tensor pointer null or readable (holding a
/// null or live handle); `ret0` null or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aoti_torch_cuda_et_attention_rope(
    q: AtenTensorHandle,
    k: AtenTensorHandle,
    v: AtenTensorHandle,
    k_cache: AtenTensorHandle,
    v_cache: AtenTensorHandle,
    pos: AtenTensorHandle,
    cos: AtenTensorHandle,
    sin: AtenTensorHandle,
    scale: f64,
    window: i64,
    q_norm: *const AtenTensorHandle,
    k_norm: *const AtenTensorHandle,
    norm_mode: i64,
    eps: f64,
    norm_offset: f64,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_attention_rope", || {
        // SAFETY: forwarded contract.
        let (q, k, v) = unsafe { (named(q, "q")?, named(k, "k")?, named(v, "v")?) };
        // SAFETY: forwarded contract.
        unsafe {
            rope_step(
                [q, k, v],
                [k_cache, v_cache, pos, cos, sin],
                (scale, window),
                (q_norm, k_norm, norm_mode, eps, norm_offset),
                ret0,
            )
        }
    })
}

/// [`aoti_torch_cuda_et_attention_rope`] with q, the new keys and the new values read from
/// one packed projection `qkv` `[B, Lq, N]` (a fused QKV linear's result, any strides):
/// `heads` query heads from column `q_off`, the caches' `Hkv` heads of keys from `k_off` and
/// of values from `v_off`, each of the caches' head size `D` (`attention::split_packed`).
///
/// # Safety
/// As [`aoti_torch_cuda_et_attention_rope`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aoti_torch_cuda_et_attention_rope_qkv(
    qkv: AtenTensorHandle,
    k_cache: AtenTensorHandle,
    v_cache: AtenTensorHandle,
    pos: AtenTensorHandle,
    cos: AtenTensorHandle,
    sin: AtenTensorHandle,
    scale: f64,
    window: i64,
    heads: i64,
    q_off: i64,
    k_off: i64,
    v_off: i64,
    q_norm: *const AtenTensorHandle,
    k_norm: *const AtenTensorHandle,
    norm_mode: i64,
    eps: f64,
    norm_offset: f64,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_attention_rope_qkv", || {
        // SAFETY: forwarded contract.
        let (qkv_t, kc) = unsafe { (named(qkv, "qkv")?, named(k_cache, "k_cache")?) };
        let at = attention::Packed {
            heads,
            q_off,
            k_off,
            v_off,
        };
        let [q, k, v] = attention::split_packed(qkv_t, kc, at)?;
        // SAFETY: forwarded contract.
        unsafe {
            rope_step(
                [&q, &k, &v],
                [k_cache, v_cache, pos, cos, sin],
                (scale, window),
                (q_norm, k_norm, norm_mode, eps, norm_offset),
                ret0,
            )
        }
    })
}

/// The optional heads' norm of the RoPE shims: both weights with a mode, or neither with 0.
type NormArgs = (
    *const AtenTensorHandle,
    *const AtenTensorHandle,
    i64,
    f64,
    f64,
);

/// The work of both RoPE shims once q, the new keys and the new values are tensors.
///
/// # Safety
/// As [`aoti_torch_cuda_et_attention_rope`] for the handles, pointers and `ret0`.
unsafe fn rope_step(
    [q, k, v]: [&crate::tensor::Tensor; 3],
    [k_cache, v_cache, pos, cos, sin]: [AtenTensorHandle; 5],
    (scale, window): (f64, i64),
    (q_norm, k_norm, norm_mode, eps, norm_offset): NormArgs,
    ret0: *mut AtenTensorHandle,
) -> crate::error::Result<()> {
    // SAFETY: forwarded contract.
    let (qn, kn) = unsafe { (optional(q_norm, "q_norm")?, optional(k_norm, "k_norm")?) };
    let norm = match (qn, kn, norm_mode) {
        (None, None, 0) => None,
        (Some(q_weight), Some(k_weight), mode) if mode != 0 => Some(HeadNorm {
            q_weight,
            k_weight,
            mode,
            eps,
            offset: norm_offset,
        }),
        _ => {
            return invalid(format!(
                "norm_mode {norm_mode} needs both q_norm and k_norm (0: neither)"
            ))
        }
    };
    // SAFETY: forwarded contract.
    let (kc, vc, p) = unsafe {
        (
            named(k_cache, "k_cache")?,
            named(v_cache, "v_cache")?,
            named(pos, "pos")?,
        )
    };
    // SAFETY: forwarded contract.
    let rope = unsafe {
        Rope {
            k_new: k,
            v_new: v,
            cos: named(cos, "cos")?,
            sin: named(sin, "sin")?,
            norm,
        }
    };
    if ret0.is_null() {
        return invalid("ret0 is null");
    }
    let shape = (scale, window, Layout::Bthd);
    let y = attention::attention_rope(q, kc, vc, Positions::Device(p), shape, &rope)?;
    // SAFETY: forwarded contract (checked non-null).
    unsafe { give(ret0, y) }
}

/// As [`aoti_torch_cuda_et_decode_attention`], with the number of valid cache
/// positions after this step given on the host (the last query at `valid_len - 1`).
///
/// # Safety
/// Each handle must be null or live; `ret0` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn aoti_torch_cuda_et_decode_attention_len(
    q: AtenTensorHandle,
    k_cache: AtenTensorHandle,
    v_cache: AtenTensorHandle,
    valid_len: i64,
    scale: f64,
    ret0: *mut AtenTensorHandle,
) -> AOTITorchError {
    guard::<Aoti>("aoti_torch_cuda_et_decode_attention_len", || {
        // SAFETY: forwarded contract.
        let (q, k, v) = unsafe {
            (
                named(q, "q")?,
                named(k_cache, "k_cache")?,
                named(v_cache, "v_cache")?,
            )
        };
        if ret0.is_null() {
            return invalid("ret0 is null");
        }
        let y = attention::decode_attention(
            q,
            k,
            v,
            Positions::ValidLen(valid_len),
            scale,
            0,
            Layout::Bhtd,
        )?;
        // SAFETY: forwarded contract (checked non-null).
        unsafe { give(ret0, y) }
    })
}

/// Benchmarks only (`tests/decode_gpu.rs`): force the fast GEMV variant of later
/// calls in this process, `variant` 0, 1 or 2 (8, 16 or 32 rows of the weight
/// per block, `crate::kernels::gemv::VARIANT_ROWS`), or -1 for the built-in
/// choice. Every variant handles every shape.
#[no_mangle]
pub extern "C" fn et_cuda_debug_gemv_tuning(variant: i32) -> AOTITorchError {
    guard::<Aoti>("et_cuda_debug_gemv_tuning", || {
        gemv::set_tuning((variant >= 0).then_some(variant))
    })
}

/// Tests and benchmarks only (`tests/decode_gpu.rs`): the short-context decode attention's
/// later launches split each KV head's keys over `n` blocks, 1 to 8 (one thread block cluster
/// where the device runs such clusters, else 1), or `n` = -1 goes back to `ET_CUDA_ATTN_SPLITS`
/// or the built-in choice. Anything else is refused.
#[no_mangle]
pub extern "C" fn et_cuda_debug_attn_splits(n: i32) -> AOTITorchError {
    debug_setting("et_cuda_debug_attn_splits", n, attention::set_decode_splits)
}

/// Tests and benchmarks only (`tests/decode_gpu.rs`): the short-context decode attention's
/// later launches take at most `n` (1, 2, 4 or 8) of a KV head's query rows a block where that
/// kernel is built and holds the step's new rows, or `n` = -1 goes back to `ET_CUDA_ATTN_ROWS`
/// or the built-in choice. Anything else is refused.
#[no_mangle]
pub extern "C" fn et_cuda_debug_attn_rows(n: i32) -> AOTITorchError {
    debug_setting("et_cuda_debug_attn_rows", n, attention::set_decode_rows)
}

/// A debug setter's body: -1 unsets, a non-negative `n` goes to `set` (which refuses what it
/// does not take), anything else is refused here.
fn debug_setting(
    what: &'static str,
    n: i32,
    set: fn(Option<u32>) -> crate::error::Result<()>,
) -> AOTITorchError {
    guard::<Aoti>(what, || match (n, u32::try_from(n)) {
        (-1, _) => set(None),
        (_, Ok(n)) => set(Some(n)),
        (_, Err(_)) => invalid(format!("{what}: {n} is not -1 or a setting")),
    })
}

/// Benchmarks only (`tests/decode_gpu.rs`): `on` != 0 makes the fused linear kernels'
/// later launches programmatic dependent launches, 0 plain launches (the default comes from
/// `ET_CUDA_PDL`, see `crate::kernels::pdl_enabled`).
#[no_mangle]
pub extern "C" fn et_cuda_debug_pdl(on: i32) -> AOTITorchError {
    guard::<Aoti>("et_cuda_debug_pdl", || {
        crate::kernels::set_pdl(on != 0);
        Ok(())
    })
}
