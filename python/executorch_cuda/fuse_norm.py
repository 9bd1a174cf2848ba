"""The norm fusions of ``fuse.py`` (see its module docs): the RMSNorm prologue folded into the
linear that reads it, the residual epilogue, the residual plus a norm after the attention or the
MLP (``et_add_rmsnorm``), and that sum read by the next linear (``et_add_rmsnorm_linear``). Each
norm is found by its shape, then proven by running its subgraph on random inputs."""

import operator

import torch

from .fuse import _fake, _is_lin, _new_lin, _replace, _val
from .subgraph import cut

aten = torch.ops.aten


# ---------------------------------------------------------------- RMSNorm prologue

_NORM_OPS = {aten._to_copy.default, aten.to.dtype, aten.pow.Tensor_Scalar, aten.mean.dim,
             aten.add.Tensor, aten.add.Scalar, aten.rsqrt.default, aten.mul.Tensor,
             aten.mul.Scalar, aten.type_as.default}


def _norm_candidate(state, x):
    """(h, weight node, eps) when ``x`` looks like an RMSNorm of ``h``, else None: the
    ``rsqrt`` nearest to ``x`` must be of ``mean(h.float()**2) + eps``, and exactly one 1-d
    weight of the program must lie between ``h`` and ``x``."""
    from collections import deque

    rs, seen, queue = None, {x}, deque([x])
    while queue and len(seen) < 24:
        n = queue.popleft()
        if n.op != "call_function" or n.target not in _NORM_OPS:
            continue
        if n.target == aten.rsqrt.default:
            rs = n
            break
        for a in n.all_input_nodes:
            if a not in seen:
                seen.add(a)
                queue.append(a)
    if rs is None:
        return None
    add = rs.args[0]
    if not (isinstance(add, torch.fx.Node) and add.target in (aten.add.Tensor, aten.add.Scalar)):
        return None
    eps, mean = add.args[1], add.args[0]
    if not isinstance(eps, (int, float)) or not (isinstance(mean, torch.fx.Node)
                                                 and mean.target == aten.mean.dim):
        return None
    sq = mean.args[0]
    if not isinstance(sq, torch.fx.Node) or sq.target not in (aten.pow.Tensor_Scalar, aten.mul.Tensor):
        return None
    hf = sq.args[0]
    casts = (aten._to_copy.default, aten.to.dtype)
    h = hf.args[0] if isinstance(hf, torch.fx.Node) and hf.target in casts else hf
    if not isinstance(h, torch.fx.Node):
        return None
    weights, stack, seen = set(), [x], {h}
    while stack and len(seen) < 32:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            if state.constant(n) and _val(n) is not None and _val(n).dim() == 1:
                weights.add(n)
            continue
        stack.extend(n.all_input_nodes)
    if len(weights) != 1:
        return None
    return h, weights.pop(), float(eps)


def _norm_mode(sub, dtype, k, eps):
    """Which formula of ``ops.et_linear`` the subgraph computes (1, 2 with offset), or None."""
    from .ops import _linear_ref  # noqa: F401  (the formulas below are its prologue)

    gen = torch.Generator().manual_seed(0)
    h = (torch.randn(3, 5, k, generator=gen) * 3).to(dtype)
    w = (torch.randn(k, generator=gen)).to(dtype)
    try:
        got = sub(h, w)
    except Exception:  # noqa: BLE001 - a region that does not run is not a norm
        return None
    if not isinstance(got, torch.Tensor) or got.dtype != dtype or got.shape != h.shape:
        return None
    xf = h.float()
    xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if torch.equal(got, w * xn.to(dtype)):
        return 1, 0.0
    for off in (1.0, 0.0):
        if torch.equal(got, (xn * (off + w.float())).to(dtype)):
            return 2, off
    return None


def norm_prologue(state, report):
    g = state.gm.graph
    cache = {}
    orphans = []
    for n in list(g.nodes):
        if not _is_lin(n) or n.args[5] != 0:
            continue
        x = n.args[0]
        if x not in cache:
            cache[x] = _prove_norm(state, x)
        found = cache[x]
        if found is None:
            continue
        h, wnode, mode, eps, off, row_slice = found
        if row_slice is not None:
            # The norm works row by row: the rows sliced after it are the rows of h sliced.
            with g.inserting_before(n):
                h2 = g.call_function(aten.slice.Tensor, (h, *row_slice.args[1:]))
            h2.meta["val"] = _fake(aten.slice.Tensor, h, *row_slice.args[1:])
            h = h2
        args = list(n.args)
        args[0], args[3], args[5], args[6], args[7] = h, wnode, mode, eps, off
        n.args = tuple(args)
        report["norm"] += 1
    return orphans


def _prove_norm(state, x):
    """(h, weight, mode, eps, offset, row slice or None) when ``x`` is an RMSNorm of ``h``,
    possibly followed by a slice of its rows (HF's ``hidden_states[:, -k:, :]``)."""
    row_slice = None
    while x.op == "call_function" and x.target == aten.alias.default:
        x = x.args[0]
    if x.op == "call_function" and x.target == aten.slice.Tensor and _val(x) is not None:
        dim = x.args[1] if len(x.args) > 1 else 0
        if dim % _val(x).dim() != _val(x).dim() - 1:
            row_slice, x = x, x.args[0]
    found = _prove_plain_norm(state, x)
    return None if found is None else (*found, row_slice)


def _prove_plain_norm(state, x):
    xv = _val(x)
    if xv is None or xv.dtype not in (torch.bfloat16, torch.float16):
        return None
    c = _norm_candidate(state, x)
    if c is None:
        return None
    h, wnode, eps = c
    hv, wv = _val(h), _val(wnode)
    if hv is None or hv.dtype != xv.dtype or wv.dtype != xv.dtype or wv.shape[0] != xv.shape[-1]:
        return None
    made = cut(x, [h, wnode])
    if isinstance(made, torch.fx.Node):  # the region reads something else too
        return None
    got = _norm_mode(made[0], xv.dtype, int(wv.shape[0]), eps)
    if got is None:
        return None
    return h, wnode, got[0], eps, got[1]


# ---------------------------------------------------------------- residual epilogue

def _same_shape(a, b):
    """Whether two nodes' values are tensors of one dtype and shape (a symbolic size, a
    SymInt say, is no tensor)."""
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype \
        and tuple(str(d) for d in a.shape) == tuple(str(d) for d in b.shape)


def residual(state, report):
    g = state.gm.graph
    for a in list(g.nodes):
        if a.op != "call_function" or a.target != aten.add.Tensor or len(a.args) != 2 \
                or a.kwargs.get("alpha", 1) != 1:
            continue
        for lin, r in ((a.args[0], a.args[1]), (a.args[1], a.args[0])):
            if not (_is_lin(lin) and lin.args[4] is None and len(lin.users) == 1
                    and isinstance(r, torch.fx.Node) and r is not lin
                    and _same_shape(_val(lin), _val(r))):
                continue
            args = list(lin.args)
            args[4] = r
            new = _new_lin(g, a, args)
            _replace(g, a, new)
            g.erase_node(a)
            g.erase_node(lin)
            report["residual"] += 1
            break


# ---------------------------------------------------------------- residual plus norm

def add_norm(state, report):
    """``add(r, N(y))`` where ``N`` is an RMSNorm of ``y`` (proven as the prologue's are: found
    by its shape, then evaluated bit for bit) used by nothing else -> ``et_add_rmsnorm(y, r,
    weight)``: the norms Gemma and OLMo-2 put after the attention and the MLP."""
    from .ops import et_add_rmsnorm

    g = state.gm.graph
    op = et_add_rmsnorm._opoverload
    for a in list(g.nodes):
        if a.op != "call_function" or a.target != aten.add.Tensor or len(a.args) != 2 \
                or a.kwargs.get("alpha", 1) != 1:
            continue
        for nx, r in ((a.args[0], a.args[1]), (a.args[1], a.args[0])):
            if not (isinstance(nx, torch.fx.Node) and isinstance(r, torch.fx.Node)
                    and nx.op == "call_function" and len(nx.users) == 1
                    and _same_shape(_val(nx), _val(a)) and _same_shape(_val(r), _val(a))):
                continue
            found = _prove_plain_norm(state, nx)
            if found is None or not _same_shape(_val(found[0]), _val(nx)):
                continue
            h, wnode, mode, eps, off = found
            args = (h, r, wnode, mode, eps, off)
            with g.inserting_before(a):
                new = g.call_function(op, args)
            new.meta["val"] = _fake(op, *args)
            _replace(g, a, new)
            g.erase_node(a)
            report["add_norm"] += 1
            break


def add_norm_linear(state, report):
    """``et_linear(h, ...)`` with ``h = et_add_rmsnorm(...)`` its ``x`` (and no other argument)
    -> ``y, h = et_add_rmsnorm_linear(<et_add_rmsnorm's args>, <et_linear's after x>)`` in the
    sum's place, when the sum has exactly one such linear and the linear's other arguments come
    before the sum in the graph (weights do)."""
    from .ops import et_add_rmsnorm, et_add_rmsnorm_linear

    g = state.gm.graph
    op = et_add_rmsnorm_linear._opoverload
    order = {n: i for i, n in enumerate(g.nodes)}
    for a in list(g.nodes):
        if a.op != "call_function" or a.target != et_add_rmsnorm._opoverload:
            continue
        lins = [u for u in a.users if _is_lin(u) and u.args[0] is a and a not in u.args[1:]]
        if len(lins) != 1:
            continue
        lin = lins[0]
        if any(isinstance(v, torch.fx.Node) and order[v] > order[a] for v in lin.args[1:]):
            continue
        args = (*a.args, *lin.args[1:])
        with g.inserting_after(a):
            new = g.call_function(op, args)
        with g.inserting_after(new):
            y = g.call_function(operator.getitem, (new, 0))
        with g.inserting_after(y):
            h = g.call_function(operator.getitem, (new, 1))
        new.meta["val"] = _fake(op, *args)
        if new.meta["val"] is not None:
            y.meta["val"], h.meta["val"] = new.meta["val"]
        order[new] = order[y] = order[h] = order[a]
        lin.replace_all_uses_with(y)
        g.erase_node(lin)
        a.replace_all_uses_with(h)
        g.erase_node(a)
        report["add_norm_linear"] += 1
