"""RoPE and the KV-cache write folded into the attention op.

A decoder layer as HF ``transformers`` (and most hand-written models) writes it
rotates q and the new keys (``x * cos + rotate_half(x) * sin``), writes the
rotated keys and the values into static caches at the new tokens' positions
(``index_copy_`` as HF's static cache does, or ``cache[:, :, pos] = x``, which
exports as ``index_put_``), and attends over the written caches. ``fold`` replaces
the three with one ``et_cuda.et_attention_rope`` (which writes the caches
itself) when each part is proven on the graph:

- the RoPE: the nodes between x, cos and sin and the rotated result are cut
  out of the graph and run on random values; they must compute
  ``ops._rope_ref`` (same cos and sin nodes for q and k);
- the heads' RMSNorm before the rotation (Qwen3's and Gemma-3's ``q_norm`` and
  ``k_norm``), when q and k both have one of the same kind, proven as ``fuse``
  proves a linear's norm (run on random values, equal bit for bit), folded too;
- the write: an in-place ``index_copy_`` along dim 2 of each cache (or
  ``index_put_`` with the index on dim 2 only, its value a view of the
  ``[B, Hkv, T, D]`` keys without the batch of 1), whose
  index evaluates to the positions input for every position vector the
  attention mask was proven on (``mask._cases``), and nothing else reads or
  writes the caches or the intermediate values.

Anything else keeps the plain ``et_attention`` over the written caches; the
reason is returned (and listed in the report as ``rope_skipped``).
"""

import torch

from . import mask as _mask
from . import ops
from .subgraph import concrete, cut

aten = torch.ops.aten
_INPLACE_WRITES = (aten.index_copy_.default, aten.index_put_.default)
_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default,
          aten.squeeze.dim, aten.squeeze.default)


def _is(n, *targets):
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _write(w):
    """(cache, index, value, views) of an in-place cache write along the positions dimension
    (``value`` the ``[B, Hkv, T, D]`` node written, ``views`` the views between it and the
    write, to erase with it), else the reason."""
    if _is(w, aten.index_copy_.default):
        if w.args[1] not in (2, -2):
            return "the cache writes are not index_copy_ along the positions dimension"
        return w.args[0], w.args[2], w.args[3], []
    idx = w.args[1] if len(w.args) > 1 else None
    acc = w.args[3] if len(w.args) > 3 else w.kwargs.get("accumulate", False)
    if acc or not isinstance(idx, (list, tuple)) or len(idx) != 3 or idx[0] is not None \
            or idx[1] is not None or not isinstance(idx[2], torch.fx.Node):
        return "the cache writes are not index_put_ at [:, :, positions]"
    value, views = w.args[2], []
    while _is(value, *_VIEWS) and len(value.users) == 1:
        views.append(value)
        value = value.args[0]
    cv, vv = _val(w.args[0]), _val(value)
    if not isinstance(cv, torch.Tensor) or not isinstance(vv, torch.Tensor) or vv.dim() != 4 \
            or cv.dim() != 4 or vv.shape[0] != cv.shape[0]:
        return "the index_put_ value is not the [B, Hkv, T, D] keys or values"
    return w.args[0], idx[2], value, views


def _rotated_half(cat):
    """x for ``cat([-x[..., h:], x[..., :h]], -1)``, else None."""
    if not _is(cat, aten.cat.default) or len(cat.args[0]) != 2:
        return None
    neg, lo = cat.args[0]
    if not _is(neg, aten.neg.default) or not _is(lo, aten.slice.Tensor):
        return None
    hi = neg.args[0]
    if not _is(hi, aten.slice.Tensor) or hi.args[0] is not lo.args[0]:
        return None
    return lo.args[0]


def _rotated_part(n):
    """The rotated node of ``cat([rope(x[..., :r]), x[..., r:]], -1)`` when the passed-through
    part is empty (a partial-rotary layout with every dimension rotated, as Phi-3 writes it),
    else ``n``."""
    if _is(n, aten.cat.default) and len(n.args[0]) == 2 and (n.args[1:] or (0,))[0] in (-1, 3):
        rest = _val(n.args[0][1])
        if isinstance(rest, torch.Tensor) and rest.dim() == 4 and rest.shape[-1] == 0:
            return n.args[0][0]
    return n


def _source(x):
    """``x`` without the aliases in front of it."""
    while _is(x, aten.alias.default):
        x = x.args[0]
    return x


def rope_parts(n):
    """(x, cos, sin) when ``n`` has the shape of ``x * cos + rotate_half(x) * sin`` (either
    operand order), else None. The shape only nominates: ``prove`` decides."""
    if not _is(n, aten.add.Tensor) or len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1:
        return None
    for a, b in (n.args, n.args[::-1]):
        if not (_is(a, aten.mul.Tensor) and _is(b, aten.mul.Tensor)):
            continue
        for rot, s in (b.args, b.args[::-1]):
            x = _rotated_half(rot)
            if x is None or not isinstance(s, torch.fx.Node):
                continue
            for ax, c in (a.args, a.args[::-1]):
                if ax is x and isinstance(c, torch.fx.Node):
                    return x, c, s
    return None


def prove(n, x, c, s):
    """None when the nodes from (x, cos, sin) to ``n`` compute ``ops._rope_ref`` on random
    values (T = 3 for a symbolic length), else the reason."""
    made = cut(n, [x, c, s])
    if isinstance(made, torch.fx.Node):
        return f"the rotation reads '{made.name}' ({made.op}), not only x, cos and sin"
    module, _ = made
    vals = [_val(m) for m in (x, c, s)]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return "no tensor metadata on x, cos or sin"
    gen = torch.Generator().manual_seed(0)
    xs, cs, ss = (torch.randn(concrete(v.shape), generator=gen, dtype=torch.float32) for v in vals)
    try:
        got = module(xs, cs, ss)
        want = ops._rope_ref(xs, cs, ss)
    except Exception as e:  # noqa: BLE001 - a subgraph that does not run is not a RoPE
        return f"the rotation does not run on its own ({type(e).__name__}: {e})"
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return "the rotation's result has another shape than x * cos + rotate_half(x) * sin"
    if not torch.allclose(got, want, atol=1e-5, rtol=1e-5):
        return "the nodes do not compute x * cos + rotate_half(x) * sin"
    return None


def _index_is_positions(gm, ep, idx, pos_node, lmax, cache):
    """None when the write index equals the positions input on the evaluated vectors."""
    if idx is pos_node:
        return None
    if idx in cache:
        return cache[idx]
    pv = _val(pos_node)
    t_dim = pv.shape[0]
    t_expr = None if isinstance(t_dim, int) else t_dim.node.expr
    sub = _mask._extract(gm, idx, pos_node, t_expr, ep)
    why = None
    if isinstance(sub, str):
        why = f"write index: {sub}"
    else:
        module, state = sub
        lo, hi = _mask._t_bounds(t_dim, lmax, ep)
        for case, start, t in _mask._cases(lo, hi, lmax):
            p = torch.arange(start, start + t, dtype=pv.dtype)
            try:
                with torch.no_grad():
                    out = module(p, t, *[v.clone() for v in state])
            except Exception as e:  # noqa: BLE001
                why = f"write index does not run ({type(e).__name__})"
                break
            if not isinstance(out, torch.Tensor) or out.reshape(-1).tolist() != p.tolist():
                why = f"write index is not the positions ({case})"
                break
    cache[idx] = why
    return why


def plan(gm, ep, sdpa, q, k, v, kc, vc, pos_node, index_cache):
    """The fold of one SDPA: ``(args, dead, norm)`` (the op's tensor arguments, the nodes to
    erase after the SDPA, in order, the heads' norms to fold or None) or the reason it does
    not apply."""
    kw, vw = k, v
    kchain, vchain = [], []
    while isinstance(kw, torch.fx.Node) and not _is(kw, *_INPLACE_WRITES) and kw is not kc:
        kchain.append(kw)
        kw = kw.args[0] if kw.args else None
    while isinstance(vw, torch.fx.Node) and not _is(vw, *_INPLACE_WRITES) and vw is not vc:
        vchain.append(vw)
        vw = vw.args[0] if vw.args else None
    if not _is(kw, *_INPLACE_WRITES) or not _is(vw, *_INPLACE_WRITES):
        return "the caches are not written in place by index_copy_ or index_put_"
    kwp, vwp = _write(kw), _write(vw)
    for parts in (kwp, vwp):
        if isinstance(parts, str):
            return parts
    (kcw, kidx, kval, kviews), (vcw, vidx, vval, vviews) = kwp, vwp
    if kcw is not kc or vcw is not vc:
        return "the writes are not to the caches the attention reads"
    lmax = int(_val(kc).shape[2])
    for idx in dict.fromkeys((kidx, vidx)):
        why = _index_is_positions(gm, ep, idx, pos_node, lmax, index_cache)
        if why:
            return why
    rq, rk = rope_parts(_rotated_part(q)), rope_parts(_rotated_part(kval))
    if rq is None or rk is None:
        return "no x * cos + rotate_half(x) * sin on q and the new keys"
    if rq[1] is not rk[1] or rq[2] is not rk[2]:
        return "q and the keys are rotated by different cos/sin"
    qx, cos, sin = _source(rq[0]), rq[1], rq[2]
    kx, vx = _source(rk[0]), vval
    for r, x in ((q, qx), (kval, kx)):
        why = prove(r, x, cos, sin)
        if why:
            return why
    qv, kv_, vv, cv, sv, cache = (_val(n) for n in (qx, kx, vx, cos, sin, kc))
    if any(not isinstance(t, torch.Tensor) for t in (qv, kv_, vv, cv, sv, cache)):
        return "no tensor metadata"
    if qv.dim() != 4 or kv_.dim() != 4 or vv.dim() != 4 or kv_.shape != vv.shape \
            or kv_.shape[1] != cache.shape[1] or kv_.shape[3] != cache.shape[3]:
        return "the new keys/values are not [B, Hkv, T, D] of the cache"
    if len({qv.dtype, kv_.dtype, vv.dtype, cv.dtype, sv.dtype, cache.dtype}) != 1:
        return "q, the new keys/values, cos/sin and the caches differ in dtype"
    for t in (cv, sv):
        if t.dim() != 4 or t.shape[1] != 1 or t.shape[3] != qv.shape[3]:
            return "cos/sin do not broadcast as [B, 1, T, D]"
    # Nothing else may read what disappears, nor touch the caches.
    chain = [kval] + kviews[::-1]
    for a, b in zip(chain, chain[1:] + [kw]):
        if set(a.users) != {b}:
            return "the rotated keys have other readers"
    if set(q.users) != {sdpa}:
        return "the rotated q has other readers"
    for w, chain, cache_node in ((kw, kchain, kc), (vw, vchain, vc)):
        if set(cache_node.users) != {w}:
            return f"the cache '{cache_node.name}' has other readers or writers"
        nodes = [w] + chain[::-1]
        for a, b in zip(nodes, nodes[1:] + [sdpa]):
            if set(a.users) != {b}:
                return f"'{a.name}' has other readers"
    dead = kchain + vchain + [kw, vw] + kviews + vviews
    nq, nk = _head_norm(ep, qx), _head_norm(ep, kx)
    norm = None
    if nq is not None and nk is not None and nq[2:] == nk[2:]:
        # h_q, h_k, w_q, w_k, mode, eps, offset, whether h is before the heads' transpose
        norm = (nq[0], nk[0], nq[1], nk[1], *nq[2:])
    return (qx, kx, vx, kc, vc, pos_node, cos, sin), dead, norm


def _head_norm(ep, x):
    """(h, weight, mode, eps, offset, transposed) when ``x`` is ``rmsnorm(h)`` (Gemma-3: the
    norm after the heads' transpose) or ``transpose(rmsnorm(h), 1, 2)`` (Qwen3: before it),
    the norm over the head dimension, proven as ``fuse`` proves a linear's norm; else None."""
    if ep is None or not isinstance(x, torch.fx.Node):
        return None
    from .fuse import State
    from .fuse_norm import _prove_plain_norm

    state = State(ep)
    found = _prove_plain_norm(state, x)
    if found is not None:
        return (*found, False)
    if not _is(x, aten.transpose.int) or sorted(int(d) % 4 for d in x.args[1:3]) != [1, 2]:
        return None
    found = _prove_plain_norm(state, x.args[0])
    return None if found is None else (*found, True)


def fold(g, sdpa, plan_, scale, window):
    """Insert the ``et_attention_rope`` node for ``plan_`` before ``sdpa`` (with the heads'
    norms folded in when both q and k have one of the same kind); returns it. The caller
    replaces the SDPA's uses, erases it, then calls ``erase``."""
    from .fuse import _fake

    args, _, norm = plan_
    extra = ()
    with g.inserting_before(sdpa):
        if norm is not None:
            hq, hk, wq, wk, mode, eps, off, transposed = norm
            q, k = hq, hk
            if transposed:
                q, k = (g.call_function(aten.transpose.int, (h, 1, 2)) for h in (hq, hk))
                for n, h in ((q, hq), (k, hk)):
                    n.meta["val"] = _fake(aten.transpose.int, h, 1, 2)
            args = (q, k, *args[2:])
            extra = (wq, wk, mode, eps, off)
        return g.call_function(torch.ops.et_cuda.et_attention_rope.default,
                               (*args, scale, window, *extra))


def erase(g, plan_):
    """Erase the cache writes and their views (no readers left once the SDPA is gone)."""
    dead = plan_[1]
    for n in dead:
        if not n.users:
            g.erase_node(n)


# Pure ops that may lead from the shared angles to each layer's cos/sin (HF recasts and
# unsqueezes them per layer); nodes equal in target and arguments compute the same tensor.
_SHAREABLE = (aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.unsqueeze.default,
              aten.view.default, aten.reshape.default, aten.expand.default, aten.slice.Tensor,
              aten.transpose.int, aten.mul.Tensor, aten.cos.default, aten.sin.default,
              aten.cat.default, aten.alias.default)


def share_cos_sin(g):
    """Replace each ``et_attention_rope``'s cos/sin argument (and the nodes before it, up to
    anything that is not one of ``_SHAREABLE``) by the first node of the graph computing the
    same thing: every layer then reads one cos and one sin tensor, made once, instead of a
    recast copy of its own (a kernel per layer in the AOTInductor program). Returns the
    number of nodes replaced."""
    op = torch.ops.et_cuda.et_attention_rope.default
    wanted = set()
    for n in g.nodes:
        if _is(n, op):
            stack = [n.args[6], n.args[7]]
            while stack:
                m = stack.pop()
                if _is(m, *_SHAREABLE) and m not in wanted:
                    wanted.add(m)
                    stack.extend(m.all_input_nodes)
    seen, replaced = {}, 0

    def key_of(a):
        if isinstance(a, (list, tuple)):
            return tuple(key_of(x) for x in a)
        return ("node", a.name) if isinstance(a, torch.fx.Node) else (type(a).__name__, repr(a))

    for n in list(g.nodes):
        if n not in wanted:
            continue
        key = (str(n.target), key_of(n.args), key_of(tuple(sorted(n.kwargs.items()))))
        first = seen.setdefault(key, n)
        if first is not n:
            n.replace_all_uses_with(first)
            replaced += 1
    return replaced


def _packed_part(x):
    """(base, first column, heads) when ``x`` is ``base[..., a:b].view(B, T, H, D)
    .transpose(1, 2)`` with ``base`` a ``[B, T, N]`` tensor, else None."""
    if not _is(x, aten.transpose.int) or sorted(int(d) % 4 for d in x.args[1:3]) != [1, 2]:
        return None
    h = x.args[0]
    if not _is(h, *_VIEWS[:3]):
        return None
    s = h.args[0]
    if not _is(s, aten.slice.Tensor) or len(s.args) < 2 or int(s.args[1]) not in (-1, 2) \
            or (len(s.args) > 4 and s.args[4] != 1):
        return None
    base, hv, sv = s.args[0], _val(h), _val(s.args[0])
    if not isinstance(hv, torch.Tensor) or not isinstance(sv, torch.Tensor) or hv.dim() != 4 \
            or sv.dim() != 3 or not isinstance(sv.shape[2], int):
        return None
    n = int(sv.shape[2])
    start = s.args[2] if len(s.args) > 2 and s.args[2] is not None else 0
    if not isinstance(start, int):
        return None
    start = start + n if start < 0 else start
    if hv.shape[0] != sv.shape[0] or hv.shape[1] != sv.shape[1] or not isinstance(hv.shape[2], int):
        return None
    return base, start, int(hv.shape[2])


def pack_qkv(g):
    """Give each ``et_attention_rope`` whose q, new keys and new values are head views of
    column ranges of one ``[B, T, N]`` tensor (the fused QKV linear's result, or a model's own
    packed projection) that tensor instead: ``et_attention_rope_qkv``. ExecuTorch's edge
    dialect turns the views into ``view_copy``/``transpose_copy``, which AOTInductor computes
    as three copy kernels per layer; the packed op reads the columns where they lie. Returns
    the number of ops rewritten."""
    op, packed = torch.ops.et_cuda.et_attention_rope.default, torch.ops.et_cuda.et_attention_rope_qkv.default
    done = 0
    for n in list(g.nodes):
        if not _is(n, op):
            continue
        parts = [_packed_part(a) for a in n.args[:3]]
        if any(p is None for p in parts) or len({id(p[0]) for p in parts}) != 1:
            continue
        (base, q_off, heads), (_, k_off, hk), (_, v_off, hv) = parts
        cache = _val(n.args[3])
        if not isinstance(cache, torch.Tensor) or hk != cache.shape[1] or hv != cache.shape[1]:
            continue
        with g.inserting_before(n):
            new = g.call_function(packed, (base, *n.args[3:10], heads, q_off, k_off, v_off,
                                           *n.args[10:]))
        new.meta["val"] = n.meta.get("val")
        n.replace_all_uses_with(new)
        g.erase_node(n)
        done += 1
    return done


__all__ = ["rope_parts", "prove", "plan", "fold", "erase", "share_cos_sin", "pack_qkv"]
