"""The companion's custom ops (namespace ``et_cuda``), with plain-torch reference
implementations (used in eager mode and by export checks) and fake (meta)
implementations for tracing.

Each op is implemented in ``libexecutorch_cuda.so`` by the C shim
``aoti_torch_cuda_<op name>``: AOTInductor names a custom op's C shim
``aoti_torch_<device>_<op name without namespace>``, so the op names carry the
``et_`` prefix that keeps the shims apart from PyTorch's own.
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F

NAMESPACE = "et_cuda"


def _gemv_ref(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    y = torch.matmul(x.float(), weight.float().t())
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


@torch.library.custom_op("et_cuda::et_gemv", mutates_args=())
def et_gemv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for x ``[..., K]``, weight ``[N, K]`` (bf16/fp16), fp32 accumulation."""
    return _gemv_ref(x, weight)


@et_gemv.register_fake
def _(x, weight):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op("et_cuda::et_gemv_bias", mutates_args=())
def et_gemv_bias(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T + bias``."""
    return _gemv_ref(x, weight, bias)


@et_gemv_bias.register_fake
def _(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _rms_ref(x, weight, norm_mode, eps, norm_offset):
    """RMSNorm over the last dimension as the kernels compute it: mode 1 ``w * (x*r).to(T)``
    (Llama, Qwen3), mode 2 ``(x*r*(offset + w)).to(T)`` (Gemma), 0: ``x`` as it is."""
    if not norm_mode:
        return x
    xf = x.float()
    xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if norm_mode == 1:
        return weight * xn.to(x.dtype)
    return (xn * (norm_offset + weight.float())).to(x.dtype)


def _linear_ref(x, weight, bias, norm_weight, residual, norm_mode, eps, norm_offset, act):
    h = _rms_ref(x, norm_weight, norm_mode, eps, norm_offset)
    y = F.linear(h, weight, bias)
    if act:
        n = y.shape[-1] // 2
        gate, up = y[..., :n], y[..., n:]
        y = (F.silu(gate) if act == 1 else F.gelu(gate, approximate="tanh")) * up
    if residual is not None:
        y = y + residual
    return y


@torch.library.custom_op("et_cuda::et_linear", mutates_args=())
def et_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    norm_weight: Optional[torch.Tensor],
    residual: Optional[torch.Tensor],
    norm_mode: int,
    eps: float,
    norm_offset: float,
    act: int,
) -> torch.Tensor:
    """``act(rmsnorm(x) @ weight.T + bias) + residual``, each part optional, for every M
    (the library picks its fused GEMV or the prefill path when it runs).

    - ``norm_mode`` 0: no norm; 1: ``norm_weight * (x * r).to(dtype)`` (Llama, Qwen3);
      2: ``(x * r * (norm_offset + norm_weight)).to(dtype)`` in fp32 (Gemma), with
      ``r = rsqrt(mean(x^2) + eps)`` over the last dimension in fp32.
    - ``act`` 0: none; 1: ``silu(gate) * up``; 2: ``gelu_tanh(gate) * up``, where the
      product's first half is the gate and its second half the up projection.
    - ``residual``: added last (the result's sizes)."""
    return _linear_ref(x, weight, bias, norm_weight, residual, norm_mode, eps, norm_offset, act)


@et_linear.register_fake
def _(x, weight, bias, norm_weight, residual, norm_mode, eps, norm_offset, act):
    n = weight.shape[0] // 2 if act else weight.shape[0]
    return x.new_empty((*x.shape[:-1], n))


@torch.library.custom_op("et_cuda::et_add_rmsnorm", mutates_args=())
def et_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    norm_mode: int,
    eps: float,
    norm_offset: float,
) -> torch.Tensor:
    """``residual + rmsnorm(x)``, the norm rounded to the dtype first (as ``et_linear``'s
    norm: ``norm_mode`` 1 or 2): the norms Gemma and OLMo-2 put after the attention and the
    MLP, before the residual add."""
    return residual + _rms_ref(x, weight, norm_mode, eps, norm_offset)


@et_add_rmsnorm.register_fake
def _(x, residual, weight, norm_mode, eps, norm_offset):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("et_cuda::et_add_rmsnorm_linear", mutates_args=())
def et_add_rmsnorm_linear(
    x: torch.Tensor,
    residual: torch.Tensor,
    post_weight: torch.Tensor,
    post_mode: int,
    post_eps: float,
    post_offset: float,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    norm_weight: Optional[torch.Tensor],
    lin_residual: Optional[torch.Tensor],
    norm_mode: int,
    eps: float,
    norm_offset: float,
    act: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = et_add_rmsnorm(x, residual, post_weight, ...)`` then ``y = et_linear(h, weight,
    ...)``, as one op: returns ``(y, h)``. One kernel for decode rows (bf16, at most 8 rows):
    Gemma's norm after the attention (or the MLP), its residual add and the normed linear that
    reads the sum, with ``h`` kept for the next residual add."""
    h = residual + _rms_ref(x, post_weight, post_mode, post_eps, post_offset)
    y = _linear_ref(h, weight, bias, norm_weight, lin_residual, norm_mode, eps, norm_offset, act)
    return y, h


@et_add_rmsnorm_linear.register_fake
def _(x, residual, post_weight, post_mode, post_eps, post_offset, weight, bias, norm_weight,
      lin_residual, norm_mode, eps, norm_offset, act):
    n = weight.shape[0] // 2 if act else weight.shape[0]
    return (x.new_empty((*x.shape[:-1], n)), torch.empty_like(x, memory_format=torch.contiguous_format))


def _attention_ref(q, k_cache, v_cache, positions, scale, window=0):
    """q [B, Hq, Lq, D]; caches [B, Hkv, Lmax, D]; positions [Lq] (int64): query i sees keys 0..positions[i]."""
    b, hq, lq, d = q.shape
    hkv, lmax = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    k = k_cache.float().repeat_interleave(g, dim=1)
    v = v_cache.float().repeat_interleave(g, dim=1)
    s = torch.matmul(q.float(), k.transpose(-1, -2)) * scale
    keys = torch.arange(lmax, device=q.device)
    pos = positions.to(q.device).clamp(0, lmax - 1)
    visible = keys[None, :] <= pos[:, None]  # [Lq, Lmax]
    if window > 0:
        visible &= keys[None, :] > pos[:, None] - window
    s = s.masked_fill(~visible, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v).to(q.dtype)


def _positions(pos: torch.Tensor, lq: int) -> torch.Tensor:
    pos = pos.reshape(-1).long()
    if pos.numel() == 1:
        return pos + torch.arange(lq, device=pos.device)
    return pos


@torch.library.custom_op("et_cuda::et_decode_attention", mutates_args=())
def et_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of q ``[B, Hq, Lq, D]`` over static caches ``[B, Hkv, Lmax, D]`` (GQA by
    ``Hq / Hkv``); query i sits at ``pos[i]`` (or ``pos[0] + i`` when pos has one element)
    and sees the cache positions ``0..=`` its own."""
    return _attention_ref(q, k_cache, v_cache, _positions(pos, q.shape[2]), scale)


@et_decode_attention.register_fake
def _(q, k_cache, v_cache, pos, scale):
    return q.new_empty(q.shape).contiguous()


@torch.library.custom_op("et_cuda::et_attention", mutates_args=())
def et_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor, scale: float,
    window: int,
) -> torch.Tensor:
    """As ``et_decode_attention``, with an optional sliding window (``window`` > 0: query i at
    ``p`` sees the cache positions ``p - window < j <= p``; 0: all of ``0..=p``), and the
    result ``[B, Hq, Lq, D]`` laid out as ``[B, Lq, Hq, D]`` in memory (strides
    ``(Lq*Hq*D, D, Hq*D, 1)``), so that the usual ``transpose(1, 2).reshape(B, Lq, Hq*D)``
    before the output projection is a view, not a copy."""
    y = _attention_ref(q, k_cache, v_cache, _positions(pos, q.shape[2]), scale, window)
    return y.transpose(1, 2).contiguous().transpose(1, 2)


@et_attention.register_fake
def _(q, k_cache, v_cache, pos, scale, window):
    b, h, lq, d = q.shape
    return q.new_empty((b, lq, h, d)).transpose(1, 2)


def _rope_ref(x, cos, sin):
    """``x * cos + rotate_half(x) * sin`` (HF ``transformers``' RoPE: the halves of the last
    dimension rotated), in fp32, rounded once to ``x``'s dtype."""
    h = x.shape[-1] // 2
    xf = x.float()
    rot = torch.cat((-xf[..., h:], xf[..., :h]), -1)
    return (xf * cos.float() + rot * sin.float()).to(x.dtype)


# flexible_layout: AOTInductor hands the inputs over as they lie (views of the fused QKV result,
# one cos/sin buffer for every layer; the kernels take any strides) instead of copying each
# into the strides of the export's trace (its default for custom ops: three copy kernels per
# layer on the GPU).
@torch.library.custom_op("et_cuda::et_attention_rope", mutates_args=("k_cache", "v_cache"),
                         tags=(torch.Tag.flexible_layout,))
def et_attention_rope(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, scale: float,
    window: int, q_norm: Optional[torch.Tensor] = None, k_norm: Optional[torch.Tensor] = None,
    norm_mode: int = 0, eps: float = 0.0, norm_offset: float = 0.0,
) -> torch.Tensor:
    """A decoder layer's attention step in one op: RoPE (``x * cos + rotate_half(x) * sin``)
    applied to q ``[B, Hq, Lq, D]`` and to the new keys k ``[B, Hkv, Lq, D]``, the rotated
    keys and the values v ``[B, Hkv, Lq, D]`` written into the caches ``[B, Hkv, Lmax, D]``
    at the queries' positions (``index_copy_`` along dim 2; positions as in
    ``et_decode_attention``), then ``et_attention`` over the written caches. ``cos``/``sin``
    broadcast as ``[B, 1, Lq, D]`` (HF's ``cos.unsqueeze(1)``). Writes ``k_cache`` and
    ``v_cache`` in place; the result is laid out as ``et_attention``'s. With ``norm_mode`` 1
    or 2, each head's row of q and of k is first RMS-normed with ``q_norm`` / ``k_norm``
    (``_rms_ref``: Qwen3's and Gemma-3's per-head norms)."""
    return _attention_rope_ref(q, k, v, k_cache, v_cache, pos, cos, sin, scale, window, q_norm,
                               k_norm, norm_mode, eps, norm_offset)


def _attention_rope_ref(q, k, v, k_cache, v_cache, pos, cos, sin, scale, window, q_norm, k_norm,
                        norm_mode, eps, norm_offset):
    p = _positions(pos, q.shape[2])
    q = _rms_ref(q, q_norm, norm_mode, eps, norm_offset)
    k = _rms_ref(k, k_norm, norm_mode, eps, norm_offset)
    k_cache.index_copy_(2, p, _rope_ref(k, cos, sin))
    v_cache.index_copy_(2, p, v)
    y = _attention_ref(_rope_ref(q, cos, sin), k_cache, v_cache, p, scale, window)
    return y.transpose(1, 2).contiguous().transpose(1, 2)


@et_attention_rope.register_fake
def _(q, k, v, k_cache, v_cache, pos, cos, sin, scale, window, q_norm=None, k_norm=None,
      norm_mode=0, eps=0.0, norm_offset=0.0):
    b, h, lq, d = q.shape
    return q.new_empty((b, lq, h, d)).transpose(1, 2)


def _packed_views(qkv, k_cache, heads, q_off, k_off, v_off):
    """q ``[B, heads, T, D]`` and the new keys and values ``[B, Hkv, T, D]`` as views of the
    packed projection ``qkv`` ``[B, T, N]`` (``Hkv``, ``D``: the cache's)."""
    hkv, d = k_cache.shape[1], k_cache.shape[3]
    return tuple(qkv[..., o:o + h * d].unflatten(-1, (h, d)).transpose(1, 2)
                 for o, h in ((q_off, heads), (k_off, hkv), (v_off, hkv)))


@torch.library.custom_op("et_cuda::et_attention_rope_qkv", mutates_args=("k_cache", "v_cache"),
                         tags=(torch.Tag.flexible_layout,))
def et_attention_rope_qkv(
    qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, scale: float, window: int, heads: int, q_off: int,
    k_off: int, v_off: int, q_norm: Optional[torch.Tensor] = None,
    k_norm: Optional[torch.Tensor] = None, norm_mode: int = 0, eps: float = 0.0,
    norm_offset: float = 0.0,
) -> torch.Tensor:
    """``et_attention_rope`` with q, the new keys and the new values read from one packed
    projection ``qkv`` ``[B, T, N]`` (a fused QKV linear's result): ``heads`` query heads
    from column ``q_off``, the caches' ``Hkv`` heads of keys from ``k_off`` and of values
    from ``v_off``, each of the caches' head size. AOTInductor passes ``qkv`` as it lies, so
    the per-layer views of q, k and v (copies once ExecuTorch's edge dialect makes them
    ``view_copy``/``transpose_copy``) never exist."""
    q, k, v = _packed_views(qkv, k_cache, heads, q_off, k_off, v_off)
    return _attention_rope_ref(q, k, v, k_cache, v_cache, pos, cos, sin, scale, window, q_norm,
                               k_norm, norm_mode, eps, norm_offset)


@et_attention_rope_qkv.register_fake
def _(qkv, k_cache, v_cache, pos, cos, sin, scale, window, heads, q_off, k_off, v_off,
      q_norm=None, k_norm=None, norm_mode=0, eps=0.0, norm_offset=0.0):
    b, lq, d = qkv.shape[0], qkv.shape[1], k_cache.shape[3]
    return qkv.new_empty((b, lq, heads, d)).transpose(1, 2)


@torch.library.custom_op("et_cuda::et_decode_attention_len", mutates_args=())
def et_decode_attention_len(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, valid_len: int, scale: float
) -> torch.Tensor:
    """As ``et_decode_attention`` with the last query at ``valid_len - 1``."""
    lq = q.shape[2]
    pos = torch.arange(valid_len - lq, valid_len, device=q.device)
    return _attention_ref(q, k_cache, v_cache, pos, scale)


@et_decode_attention_len.register_fake
def _(q, k_cache, v_cache, valid_len, scale):
    return q.new_empty(q.shape).contiguous()


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
