"""Graph rewrites that route decode-hot ops of an exported program to the
companion's ops:

- ``aten.linear`` / ``aten.mm`` (with a transposed weight) / ``aten.addmm``
  (with a transposed weight, ``beta = alpha = 1``) whose weight is a 2-d bf16 or
  fp16 parameter/buffer/constant -> ``et_cuda.et_linear``, whatever the rows
  ``M``: the library picks its GEMV (decode) or its prefill path when it runs.
  Then, with ``fuse`` (and the ``ExportedProgram``), ``fuse.fuse`` merges the
  decoder layer around them (gated MLP, Q/K/V siblings, RMSNorm prologue,
  residual epilogue).
- ``aten.scaled_dot_product_attention`` whose key and value are a static KV
  cache ``[B, Hkv, Lmax, D]`` (a buffer, possibly written by ``index_copy`` /
  ``index_put`` / ``copy_`` first, possibly expanded to the query heads by
  ``repeat_interleave`` or ``unsqueeze/expand/reshape``), with an attention mask
  computed from the positions input (``positions``: the name of the int64 input
  holding the cache positions of the new tokens, default: the only 1-d int64
  user input whose name contains "pos") -> ``et_cuda.et_decode_attention(q,
  k_cache, v_cache, positions, scale)``.

  The mask is proven, not assumed (``mask.classify_mask``): its subgraph is run
  for position vectors covering the cache and must let query i see exactly the
  positions ``0..=positions[i]`` (causal) or ``positions[i]-W < j <=
  positions[i]`` (a sliding window of W) -> ``et_cuda.et_attention(q, k_cache,
  v_cache, positions, scale, W or 0)``, whose result is laid out for the output
  projection.
  Any other mask (padding, future positions, a bias) stays with ExecuTorch's
  lowering and the report says why.

  With ``rope`` (the default), when q and the new keys are rotated by RoPE and
  the caches written by ``index_copy_`` or ``index_put_`` at the positions, all of it proven on
  the graph (``rope.plan``), the op is ``et_cuda.et_attention_rope(q, k, v,
  k_cache, v_cache, positions, cos, sin, scale, W or 0)`` instead: it rotates,
  writes the caches in place and attends (report ``rope``; ``rope_skipped``
  says why not, per SDPA).
"""

import operator

import torch

from . import ops  # noqa: F401  (registers the ops)
from . import rope as _rope

aten = torch.ops.aten
_LOW = (torch.bfloat16, torch.float16)


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _is_weight(ep, n):
    """A parameter, buffer or lifted constant (a placeholder of the state), or a get_attr."""
    if not isinstance(n, torch.fx.Node):
        return False
    if n.op == "get_attr":
        return True
    if n.op != "placeholder" or ep is None:
        return n.op == "placeholder" and ep is None
    sig = ep.graph_signature
    return (
        n.name in sig.inputs_to_parameters
        or n.name in sig.inputs_to_buffers
        or n.name in getattr(sig, "inputs_to_lifted_tensor_constants", {})
    )


def _transposed_weight(n):
    """w for t(w) / permute(w, [1, 0]) / transpose(w, 0, 1)."""
    if not isinstance(n, torch.fx.Node) or n.op != "call_function":
        return None
    if n.target in (aten.t.default, aten.numpy_T.default):
        return n.args[0]
    if n.target == aten.permute.default and list(n.args[1]) == [1, 0]:
        return n.args[0]
    if n.target == aten.transpose.int and sorted(int(a) % 2 for a in n.args[1:3]) == [0, 1]:
        return n.args[0]
    return None


def _unchanging(ep, n):
    """A weight no step of the program writes: a parameter, a constant, or a buffer the graph
    does not mutate. The fused linear reads its weight before the kernel before it has ended
    (a programmatic dependent launch), so a weight written by the program must not get there."""
    if not _is_weight(ep, n):
        return False
    if ep is None or n.op != "placeholder":
        return True
    sig = ep.graph_signature
    buf = sig.inputs_to_buffers.get(n.name)
    return buf is None or buf not in set(sig.buffers_to_mutate.values())


_CACHE_WRITES = {
    aten.index_copy.default,
    aten.index_copy_.default,
    aten.index_put.default,
    aten.index_put_.default,
    aten.copy_.default,
    aten.copy.default,
    aten.slice_scatter.default,
}


def _cache_base(ep, n):
    """The static cache [B, Hkv, Lmax, D] behind an SDPA key/value, or None.
    Walks back through GQA expansion and cache writes."""
    for _ in range(12):
        if not isinstance(n, torch.fx.Node):
            return None
        if n.op == "placeholder":
            return n if _is_weight(ep, n) else None
        if n.op != "call_function":
            return None
        t = n.target
        if t in _CACHE_WRITES:
            n = n.args[0]
        elif t in (aten.repeat_interleave.self_int,):
            if len(n.args) < 3 or n.args[2] not in (1, -3):
                return None
            n = n.args[0]
        elif t in (aten.reshape.default, aten.view.default, aten._unsafe_view.default,
                   aten.expand.default, aten.unsqueeze.default, aten.clone.default,
                   aten.contiguous.default, aten.alias.default):
            n = n.args[0]
        elif t == aten.slice.Tensor:
            # x[:, :, None] style indexing shows up as slices over whole dims.
            n = n.args[0]
        else:
            return None
    return None


def _ancestors_include(n, target, limit=400):
    seen, stack = set(), [n]
    while stack and len(seen) < limit:
        c = stack.pop()
        if not isinstance(c, torch.fx.Node) or c in seen:
            continue
        if c is target:
            return True
        seen.add(c)
        stack.extend(c.all_input_nodes)
    return False


def _find_positions(ep, gm, positions):
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    user = set(ep.graph_signature.user_inputs) if ep is not None else {n.name for n in phs}
    cands = []
    for n in phs:
        v = _val(n)
        if n.name not in user or v is None or v.dtype != torch.int64 or v.dim() != 1:
            continue
        if positions is not None and n.name == positions:
            return n
        if positions is None and "pos" in n.name:
            cands.append(n)
    return cands[0] if len(cands) == 1 else None


def _sdpa_parts(n):
    a = list(n.args) + [None] * 8
    kw = n.kwargs
    q, k, v = a[0], a[1], a[2]
    mask = kw.get("attn_mask", a[3])
    dropout = kw.get("dropout_p", a[4] if a[4] is not None else 0.0)
    causal = kw.get("is_causal", a[5] if a[5] is not None else False)
    scale = kw.get("scale", a[6])
    return q, k, v, mask, dropout, causal, scale


def _linear_parts(n):
    """(x, w, bias, refusal) of linear/mm/addmm ``n`` read as ``x @ w^T + bias``: w is None when
    ``n`` is no linear over a weight (an mm of two activations, say); refusal names an addmm the
    op cannot take."""
    if n.target == aten.linear.default:
        return n.args[0], n.args[1], n.args[2] if len(n.args) > 2 else n.kwargs.get("bias"), None
    if n.target == aten.mm.default:
        return n.args[0], _transposed_weight(n.args[1]), None, None
    b, x, wt = n.args[:3]
    w = _transposed_weight(wt)
    if n.kwargs.get("beta", 1) != 1 or n.kwargs.get("alpha", 1) != 1:
        return x, w, b, "addmm with beta or alpha other than 1"
    if _val(b) is None or _val(b).dim() != 1:
        return x, w, b, "addmm whose bias is not one row"
    return x, w, b, None


def _linear_refusal(ep, x, w):
    """Why the fused linear does not take a linear of ``x`` over weight ``w`` (None: it does)."""
    xv, wv = _val(x), _val(w)
    if xv is None or wv is None:
        return "no shape/dtype recorded on its input or weight"
    if not _is_weight(ep, w):
        return f"its weight ({w.name}) is not a parameter, buffer or constant of the program"
    if not _unchanging(ep, w):
        return f"its weight ({w.name}) is a buffer the program writes"
    if wv.dim() != 2:
        return f"its weight has {wv.dim()} dims, not 2"
    if wv.dtype not in _LOW:
        return f"{wv.dtype} weights (the kernels take bfloat16 and float16)"
    if xv.dtype != wv.dtype:
        return f"input {xv.dtype} and weight {wv.dtype} differ"
    return None if xv.dim() >= 1 else "a 0-d input"


def _linear_node(g, ep, n, max_m):
    """(the et_linear node replacing linear/mm/addmm ``n``, inserted before it, or None; why
    not, when ``n`` is a linear over a weight that stays as it is)."""
    lin = torch.ops.et_cuda.et_linear.default
    x, w, b, why = _linear_parts(n)
    # An mm/addmm is a linear only over a weight of the program (not, say, q @ k^T).
    if w is None or (n.target != aten.linear.default and not _is_weight(ep, w)):
        return None, None
    why = why or _linear_refusal(ep, x, w)
    if why is None and b is not None and not _unchanging(ep, b):
        why = f"its bias ({b.name}) is not a constant of the program"
    if why is not None:
        return None, why
    with g.inserting_before(n):
        return g.call_function(lin, (x, w, b, None, None, 0, 0.0, 0.0, 0)), None


#: Why the int4 weight-only linears stay as they are (``report["skipped_linear"]``).
INT4_LEFT = ("int4 weight-only (aten._weight_int4pack_mm): stays with the library's int4 kernel; "
             "the fused decode path takes bfloat16 and float16 weights")


def _attention_node(gm, ep, n, pos_node, verdicts, index_cache, counts, rope):
    """(the node that replaces the SDPA node ``n``, the RoPE fold it took or the reason it took
    none), or (None, None) when ``n`` stays as it is (the reason goes to ``counts``)."""
    g = gm.graph
    q, k, v, mask, dropout, causal, scale = _sdpa_parts(n)
    why = _attention_blocker(ep, q, k, v, mask, dropout, causal, pos_node)
    if why:
        counts["skipped_attention"].append(f"{n.name}: {why}")
        return None, None
    kc, vc = _cache_base(ep, k), _cache_base(ep, v)
    verdict = _mask_verdict(gm, ep, mask, pos_node, kc, verdicts)
    if verdict.kind not in ("causal", "window"):
        counts["skipped_attention"].append(f"{n.name}: mask: {verdict.reason}")
        return None, None
    d = _val(q).shape[-1]
    s = float(scale) if scale is not None else ops.default_scale(int(d))
    window = int(verdict.window) if verdict.kind == "window" else 0
    counts["window"] += verdict.kind == "window"
    folded = _rope.plan(gm, ep, n, q, k, v, kc, vc, pos_node, index_cache) if rope else "rope=False"
    if isinstance(folded, tuple):
        counts["rope"] += 1
        counts["rope_norm"] += folded[2] is not None
        return _rope.fold(g, n, folded, s, window), folded
    counts["rope_skipped"].append(f"{n.name}: {folded}")
    # The cache as the SDPA reads it: after this step's write, before expansion.
    kc, vc = _written(k, kc), _written(v, vc)
    with g.inserting_before(n):
        new = g.call_function(torch.ops.et_cuda.et_attention.default, (q, kc, vc, pos_node, s, window))
    return new, folded


def rewrite(gm, ep=None, *, max_m=None, positions=None, linear=True, attention=True, fuse=True,
            rope=True):
    """Rewrite ``gm`` (an exported program's graph module) in place; returns
    ``{"linear": n, "gemv": n, "attention": n, "skipped_attention": [reasons],
    "skipped_linear": [reasons], ...}`` (each reason "node: why") with
    the fusions' counts (``fuse.fuse``) when ``ep`` is given and ``fuse`` is true.
    ``max_m`` is accepted and ignored (the ops dispatch on M when they run)."""
    g = gm.graph
    counts = {"linear": 0, "attention": 0, "window": 0, "skipped_attention": [], "rope": 0,
              "rope_norm": 0, "rope_skipped": [], "rope_shared": 0, "rope_packed": 0,
              "eager_attention": 0, "skipped_linear": []}
    attn = torch.ops.et_cuda.et_attention.default
    rope_attn = torch.ops.et_cuda.et_attention_rope.default
    index_cache = {}
    verdicts = {}
    pos_node = _find_positions(ep, gm, positions) if attention else None
    if attention and pos_node is not None:
        _written_out_attention(gm, ep, pos_node, verdicts, counts)
        # Every mask is evaluated before anything is rewritten.
        for n in g.nodes:
            if n.op == "call_function" and n.target == aten.scaled_dot_product_attention.default:
                q, k, v, mask, dropout, causal, _ = _sdpa_parts(n)
                if not _attention_blocker(ep, q, k, v, mask, dropout, causal, pos_node):
                    _mask_verdict(gm, ep, mask, pos_node, _cache_base(ep, k), verdicts)
    for n in list(g.nodes):
        if n.op != "call_function":
            continue
        new = None
        if linear and n.target in (aten.linear.default, aten.mm.default, aten.addmm.default):
            new, why = _linear_node(g, ep, n, max_m)
            if why:
                counts["skipped_linear"].append(f"{n.name}: {why}")
        elif linear and n.target == aten._weight_int4pack_mm.default:
            counts["skipped_linear"].append(f"{n.name}: {INT4_LEFT}")
        elif attention and n.target == aten.scaled_dot_product_attention.default:
            new, folded = _attention_node(gm, ep, n, pos_node, verdicts, index_cache, counts, rope)
        if new is not None:
            is_attn = new.target in (attn, rope_attn)
            new.meta["val"] = _fake_out(new) if is_attn else n.meta.get("val")
            n.replace_all_uses_with(new)
            g.erase_node(n)
            if new.target == rope_attn:
                _rope.erase(g, folded)
            counts["attention" if is_attn else "linear"] += 1
    if counts.get("rope"):
        counts["rope_shared"] = _rope.share_cos_sin(g)
    g.eliminate_dead_code()
    g.lint()
    gm.recompile()
    if fuse and linear and ep is not None and counts["linear"]:
        from .fuse import fuse as _fuse

        _fuse(ep, counts)
    if counts["rope"]:
        # After the fusions: the merged QKV linear's result is what the folds can read packed.
        counts["rope_packed"] = _rope.pack_qkv(gm.graph)
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    counts["gemv"] = counts["linear"]
    return counts


def _written_out_attention(gm, ep, pos_node, verdicts, counts):
    """Attention written out as matmuls (HF's eager attention) -> SDPA nodes, where the
    SDPA would then be routed (``eager.convert``): ``report["eager_attention"]``."""
    from . import eager as _eager

    def accept(q, k, v, mask):
        why = _attention_blocker(ep, q, k, v, mask, 0.0, False, pos_node)
        if why:
            return why
        verdict = _mask_verdict(gm, ep, mask, pos_node, _cache_base(ep, k), verdicts)
        return None if verdict.kind in ("causal", "window") else f"mask: {verdict.reason}"

    counts["eager_attention"], skipped = _eager.convert(gm, accept)
    counts["skipped_attention"] += skipped


def _fake_out(node):
    """The fake result of ``node`` from its arguments' fake values (its own strides)."""
    vals = [_val(a) if isinstance(a, torch.fx.Node) else a for a in node.args]
    mode = next(v.fake_mode for v in vals if hasattr(v, "fake_mode"))
    with mode:
        return node.target(*vals)


def _mask_verdict(gm, ep, mask, pos_node, kc, verdicts):
    """The mask's verdict (``mask.classify_mask``), once per mask node: the subgraph is
    evaluated before any node it reads is rewritten."""
    from .mask import classify_mask

    if mask not in verdicts:
        verdicts[mask] = classify_mask(gm, mask, pos_node, int(_val(kc).shape[2]), ep)
    return verdicts[mask]


def _written(n, base):
    """The last cache-write node between ``n`` and ``base`` (the written cache), else base."""
    while isinstance(n, torch.fx.Node) and n is not base:
        if n.op == "call_function" and n.target in _CACHE_WRITES:
            return n
        n = n.args[0] if n.args else None
    return base


def _attention_blocker(ep, q, k, v, mask, dropout, causal, pos_node):
    qv, kv = _val(q), _val(k)
    if qv is None or kv is None or qv.dim() != 4:
        return "no 4-d query metadata"
    if qv.dtype not in _LOW:
        return f"dtype {qv.dtype}"
    if int(qv.shape[-1]) not in (64, 128, 256):
        return f"head size {qv.shape[-1]} (the kernel has 64, 128 and 256)"
    if dropout not in (0, 0.0) or causal:
        return "dropout or is_causal"
    if pos_node is None:
        return "no positions input (pass positions=<name of the cache-position input>)"
    if mask is None or not _ancestors_include(mask, pos_node):
        return "the mask does not come from the positions input"
    kc, vc = _cache_base(ep, k), _cache_base(ep, v)
    if kc is None or vc is None:
        return "key/value are not a static cache buffer"
    cv = _val(kc)
    if cv is None or cv.dim() != 4 or _val(vc).shape != cv.shape:
        return "cache is not [B, Hkv, Lmax, D]"
    if int(qv.shape[1]) % int(cv.shape[1]) != 0:
        return "query heads not a multiple of cache heads"
    mv = _val(mask)
    if mv is not None and mv.shape[-1] != cv.shape[2]:
        return "mask does not span the cache"
    return None


__all__ = ["rewrite", "operator"]
