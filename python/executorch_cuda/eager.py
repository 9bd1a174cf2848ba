"""Attention written out as matmuls -> one ``scaled_dot_product_attention`` node.

HF ``transformers``' ``eager`` attention (``attn_implementation="eager"``) and many
hand-written models compute ``softmax(q @ k^T * s + mask, -1) @ v`` from aten ops
(``matmul``, ``mul``/``div`` by the scale, ``add`` of an additive mask or ``masked_fill`` of
the hidden keys (``~mask``) with -inf or a dtype's lowest value, ``softmax`` (in fp32 or not),
a cast back, eval-mode ``dropout``, ``matmul``). ``convert`` finds that
shape, then proves it: the nodes between q, k, v, the mask and the result are cut out and
run on random values of the graph's dtype (twice, with a mask that hides keys) and must give what
``F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=s)`` gives, within the
rounding of the dtype (the written-out form rounds the probabilities to the dtype before
the second product; SDPA and this library's kernels keep them in fp32). A proven one
becomes an SDPA node, which ``passes.rewrite`` then routes like any other when its mask
and caches qualify (``accept``); anything else is left as it is. Gemma-2's logit
soft-capping (``tanh`` of the scores) is not an SDPA and is not matched.
"""

import torch

from .subgraph import concrete, cut

aten = torch.ops.aten
_CASTS = (aten.to.dtype, aten._to_copy.default, aten.to.dtype_layout, aten.type_as.default)
_DROPOUT = (aten.dropout.default,)
_SOFTMAX = (aten.softmax.int, aten._softmax.default)
_MATMUL = (aten.matmul.default, aten.bmm.default)
_CHECKS = (aten._assert_tensor_metadata.default,)
_NOT = (aten.bitwise_not.default, aten.logical_not.default)
# masked_fill values that hide a key: -inf, or at most fp16's lowest (HF: finfo(dtype).min).
_HIDE_AT_MOST = -65504.0
# How far the written-out form may be from SDPA in fp32 on unit-normal inputs: it rounds the
# scores and the probabilities to the dtype.
_TOLERANCE = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _is(n, *targets):
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _scalar(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _scores(s):
    """(q, kt, scale) of ``q @ kt * scale`` / ``q @ kt / d`` / ``q @ kt``, else None."""
    scale = 1.0
    if _is(s, aten.mul.Tensor, aten.div.Tensor) and len(s.args) == 2 and _scalar(s.args[1]):
        if s.args[1] == 0:
            return None
        scale = float(s.args[1]) if s.target == aten.mul.Tensor else 1.0 / float(s.args[1])
        s = s.args[0]
    if not _is(s, *_MATMUL):
        return None
    return s.args[0], s.args[1], scale


def match(out):
    """``(q, k, v, mask, scale)`` when ``out`` has the shape of written-out attention
    (nominated only: ``prove`` decides), else None."""
    if not _is(out, *_MATMUL) or len(out.args) != 2:
        return None
    p, v = out.args
    while _is(p, *_DROPOUT) and (len(p.args) < 3 or p.args[1] == 0.0 or p.args[2] is False):
        p = p.args[0]
    while _is(p, *_CASTS):
        p = p.args[0]
    if not _is(p, *_SOFTMAX) or p.args[1] not in (-1, 3):
        return None
    s, mask = p.args[0], None
    while _is(s, *_CASTS):  # softmax(scores.float())
        s = s.args[0]
    if _is(s, aten.add.Tensor) and len(s.args) == 2 and s.kwargs.get("alpha", 1) == 1:
        for a, b in (s.args, s.args[::-1]):
            if _scores(a) is not None and isinstance(b, torch.fx.Node):
                s, mask = a, b
                break
    elif _is(s, aten.masked_fill.Scalar) and len(s.args) == 3 and _is(s.args[1], *_NOT) \
            and _scalar(s.args[2]) and float(s.args[2]) <= _HIDE_AT_MOST:
        # scores.masked_fill(~keep, -inf): SDPA's boolean mask is `keep` (True: attend).
        s, mask = s.args[0], s.args[1].args[0]
        if not (isinstance(_val(mask), torch.Tensor) and _val(mask).dtype == torch.bool):
            return None
    found = _scores(s)
    if found is None:
        return None
    q, kt, scale = found
    if not _is(kt, aten.transpose.int) or sorted(int(d) % 4 for d in kt.args[1:3]) != [2, 3]:
        return None
    k = kt.args[0]
    vals = [_val(x) for x in (q, k, v, out)]
    if any(not isinstance(t, torch.Tensor) or t.dim() != 4 for t in vals):
        return None
    mv = _val(mask)
    if mask is not None and not (isinstance(mv, torch.Tensor) and (mv.is_floating_point() or mv.dtype == torch.bool)):
        return None
    return q, k, v, mask, scale


def prove(out, q, k, v, mask, scale):
    """``(None, nodes)`` when the nodes from (q, k, v, mask) to ``out`` compute SDPA on random
    values; else ``(reason, None)``."""
    inputs = [x for x in (q, k, v, mask) if x is not None]
    made = cut(out, inputs)
    if isinstance(made, torch.fx.Node):
        return f"the attention reads '{made.name}' ({made.op}), not only q, k, v and the mask", None
    module, sub = made
    gen = torch.Generator().manual_seed(0)
    shapes = [concrete(_val(x).shape) for x in inputs]
    dtype = _val(q).dtype
    tol = _TOLERANCE.get(dtype)
    if tol is None:
        return f"dtype {dtype}", None
    boolean = mask is not None and _val(mask).dtype == torch.bool  # True: attend
    for _ in range(2):
        xs = [torch.randn(s, generator=gen).to(dtype) for s in shapes[:3]]
        if mask is not None:
            hide = torch.rand(shapes[3], generator=gen) < 0.4
            hide[..., 0] = False  # every query sees a key
            if boolean:
                xs.append(~hide)
            else:
                xs.append(torch.zeros(shapes[3]).masked_fill(hide, float("-inf")).to(_val(mask).dtype))
        try:
            with torch.no_grad():
                got = module(*xs)
                want = torch.nn.functional.scaled_dot_product_attention(
                    *(x.float() for x in xs[:3]),
                    attn_mask=None if mask is None else xs[3] if boolean else xs[3].float(),
                    scale=scale)
        except Exception as e:  # noqa: BLE001 - a subgraph that does not run is no attention
            return f"the nodes do not run on their own ({type(e).__name__}: {e})", None
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return "the result has another shape than the attention's", None
        if not torch.allclose(got.float(), want, atol=tol, rtol=tol):
            return "the nodes do not compute softmax(q @ k^T * s + mask) @ v", None
    return None, sub


def convert(gm, accept):
    """Replace every proven written-out attention whose SDPA form ``accept(q, k, v, mask)``
    takes (None) by an SDPA node; returns (converted, [reasons for the others])."""
    g = gm.graph
    done, skipped = 0, []
    for out in list(g.nodes):
        found = match(out)
        if found is None:
            continue
        q, k, v, mask, scale = found
        why = accept(q, k, v, mask)
        if why is None:
            why, sub = prove(out, q, k, v, mask, scale)
        if why is not None:
            skipped.append(f"{out.name}: {why}")
            continue
        inner = sub - {out}
        checks = {u for m in inner for u in m.users if _is(u, *_CHECKS)}
        if any(u not in sub and u not in checks for m in inner for u in m.users):
            skipped.append(f"{out.name}: a product inside the attention has other readers")
            continue
        for c in checks:  # export's dtype/shape assertions on the products that go
            g.erase_node(c)
        with g.inserting_before(out):
            new = g.call_function(aten.scaled_dot_product_attention.default,
                                  (q, k, v, mask, 0.0, False), {"scale": scale})
        new.meta["val"] = out.meta.get("val")
        out.replace_all_uses_with(new)
        # Erased by hand, last first: dead code elimination keeps dropout (a random op).
        order = {m: i for i, m in enumerate(g.nodes)}
        for m in sorted(sub, key=order.get, reverse=True):
            g.erase_node(m)
        done += 1
    g.eliminate_dead_code()
    gm.recompile()
    return done, skipped


__all__ = ["match", "prove", "convert"]
