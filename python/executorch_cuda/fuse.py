"""Decoder-layer fusions over the companion's ``et_cuda.et_linear`` nodes (after
``passes.rewrite`` turned the linears into them), each proven on the graph:

- **gated MLP**: ``mul(silu(linear(x, Wg)), linear(x, Wu))`` (or ``gelu(..., approximate="tanh")``)
  -> one ``et_linear(x, cat(Wg, Wu), act=1|2)``; also over a weight already concatenated
  (``gate, up = linear(x, W).chunk(2, -1)``, as Phi-3 writes it) -> ``et_linear(x, W, act)``;
- ``dropout(x, p, train=False)`` (Phi-3's, in eval) is ``x`` and leaves the graph first;
- **siblings**: plain linears that read the same ``x`` (Q, K and V) -> one linear over the
  concatenated weights, then slices of its result;
- **RMSNorm prologue**: a linear whose ``x`` is an RMSNorm of ``h`` -> the linear of ``h`` with
  the norm folded in. The candidate is found by its shape in the graph (an ``rsqrt`` of a mean of
  squares plus a constant, a weight of size ``[K]``), then *evaluated*: the subgraph from ``h``
  and the weight to ``x`` runs on random inputs and must equal one of the two formulas of
  ``ops.et_linear`` bit for bit, else nothing changes;
- **residual epilogue**: ``add(r, linear(...))`` -> the linear with ``residual=r``;
- **residual plus norm**: ``add(r, rmsnorm(y))`` (a norm after the attention or the MLP, as
  Gemma and OLMo-2 have; proven as the prologue's norms are) -> ``et_add_rmsnorm(y, r, w)``;
- **residual plus norm, then the linear**: ``et_linear(et_add_rmsnorm(...), ...)`` ->
  ``et_add_rmsnorm_linear`` (one kernel in decode; its second result, the sum, serves the sum's
  other readers).

The concatenated weights are new parameters of the exported program; weights no node uses
any more leave it. Needs the ``ExportedProgram`` (its state holds the weights)."""

import operator

import torch
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

from .subgraph import cut

aten = torch.ops.aten


def _lin():
    return torch.ops.et_cuda.et_linear.default


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _is_lin(n):
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target == _lin()


def _plain(n):
    """An et_linear with no norm, residual or act."""
    a = n.args
    return _is_lin(n) and a[3] is None and a[4] is None and a[5] == 0 and a[8] == 0


def _fake(fn, *args):
    vals = [_val(a) if isinstance(a, torch.fx.Node) else a for a in args]
    mode = next((v.fake_mode for v in vals if hasattr(v, "fake_mode")), None)
    if mode is None:
        return None
    with mode:
        return fn(*vals)


class State:
    """The exported program's weights: read them, add concatenations, drop orphans."""

    def __init__(self, ep):
        self.ep = ep
        self.gm = ep.graph_module
        self.specs = {s.arg.name: s for s in ep.graph_signature.input_specs
                      if isinstance(s.arg, TensorArgument)}
        self.added = 0

    def tensor(self, node):
        s = self.specs.get(node.name) if isinstance(node, torch.fx.Node) else None
        if s is None or node.op != "placeholder":
            return None
        if s.kind in (InputKind.PARAMETER, InputKind.BUFFER) and s.target in self.ep.state_dict:
            if s.kind == InputKind.BUFFER and s.persistent is False:
                return None
            return self.ep.state_dict[s.target]
        if s.kind == InputKind.CONSTANT_TENSOR:
            return self.ep.constants.get(s.target)
        return None

    def constant(self, node):
        """Whether ``node`` is a parameter or constant (never a buffer: those can be written)."""
        s = self.specs.get(node.name) if isinstance(node, torch.fx.Node) else None
        return s is not None and s.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR)

    def add(self, like, tensor, suffix):
        """A new parameter placed after the parameter ``like``; returns its placeholder."""
        spec = self.specs[like.name]
        target = f"{spec.target}.{suffix}"
        while target in self.ep.state_dict:
            target += "_"
        name = f"p_etc_fused_{self.added}_{suffix}"
        self.added += 1
        g = self.gm.graph
        last = [n for n in g.nodes if n.op == "placeholder"
                and self.specs.get(n.name) is not None
                and self.specs[n.name].kind == InputKind.PARAMETER][-1]
        with g.inserting_after(last):
            node = g.placeholder(name)
        mode = _val(like).fake_mode
        node.meta["val"] = mode.from_tensor(tensor, static_shapes=True)
        self.ep.state_dict[target] = torch.nn.Parameter(tensor, requires_grad=False)
        new = InputSpec(kind=InputKind.PARAMETER, arg=TensorArgument(name=name), target=target)
        specs = list(self.ep.graph_signature.input_specs)
        at = next(i for i, s in enumerate(specs) if s.arg.name == last.name) + 1
        specs.insert(at, new)
        self.ep.graph_signature.input_specs = specs
        self.specs[name] = new
        return node

    def drop_orphans(self, candidates):
        """Remove the parameters among ``candidates`` that no node uses any more."""
        g = self.gm.graph
        dropped = set()
        for n in candidates:
            if n.op == "placeholder" and not n.users and n.name in self.specs \
                    and self.specs[n.name].kind == InputKind.PARAMETER:
                target = self.specs[n.name].target
                if any(s.target == target for k, s in self.specs.items() if k != n.name):
                    continue
                g.erase_node(n)
                self.ep.state_dict.pop(target, None)
                dropped.add(n.name)
        if dropped:
            self.ep.graph_signature.input_specs = [
                s for s in self.ep.graph_signature.input_specs if s.arg.name not in dropped]
            for k in dropped:
                self.specs.pop(k, None)
        return len(dropped)


def _replace(g, old, new):
    new.meta["val"] = _val(old) if "val" not in new.meta else new.meta["val"]
    old.replace_all_uses_with(new)


def _new_lin(g, at, args):
    with g.inserting_before(at):
        n = g.call_function(_lin(), tuple(args))
    n.meta["val"] = _fake(_lin(), *args)
    return n


def gated_mlp(state, report):
    g = state.gm.graph
    orphans = []
    for m in list(g.nodes):
        if m.op != "call_function" or m.target != aten.mul.Tensor or len(m.args) != 2:
            continue
        for a, u in ((m.args[0], m.args[1]), (m.args[1], m.args[0])):
            act = _gate_act(a)
            if act is None:
                continue
            if _packed_gated_mlp(state, m, a, u, act, report):
                break
            gl = a.args[0]
            if not (_plain(gl) and _plain(u) and gl.args[0] is u.args[0] and len(gl.users) == 1
                    and len(u.users) == 1 and len(a.users) == 1 and gl.args[2] is None
                    and u.args[2] is None):
                continue
            wg, wu = state.tensor(gl.args[1]), state.tensor(u.args[1])
            if wg is None or wu is None or wg.shape != wu.shape or wg.dtype != wu.dtype:
                continue
            w = state.add(gl.args[1], torch.cat([wg, wu], 0), "gate_up")
            new = _new_lin(g, m, [gl.args[0], w, None, None, None, 0, 0.0, 0.0, act])
            _replace(g, m, new)
            orphans += [gl.args[1], u.args[1]]
            for n in (m, a, gl, u):
                g.erase_node(n)
            report["gated_mlp"] += 1
            break
    return orphans


def _halves(a, u):
    """The linear whose result ``a`` and ``u`` are the first and second halves of along the
    last dimension (``chunk(2, -1)``, or ``split`` in two equal parts), else None."""
    if not (isinstance(a, torch.fx.Node) and isinstance(u, torch.fx.Node)
            and a.target is operator.getitem and u.target is operator.getitem
            and a.args[0] is u.args[0] and (a.args[1], u.args[1]) == (0, 1)):
        return None
    sp, lin = a.args[0], a.args[0].args[0]
    v = _val(lin)
    if not _plain(lin) or not isinstance(v, torch.Tensor) or not isinstance(v.shape[-1], int) \
            or v.shape[-1] % 2 or len(sp.users) != 2 or len(lin.users) != 1:
        return None
    dim = sp.args[2] if len(sp.args) > 2 else sp.kwargs.get("dim", 0)
    if dim not in (-1, v.dim() - 1):
        return None
    if sp.target == aten.chunk.default and sp.args[1] == 2:
        return lin
    if sp.target == aten.split.Tensor and sp.args[1] == v.shape[-1] // 2:
        return lin
    if sp.target == aten.split_with_sizes.default and list(sp.args[1]) == [v.shape[-1] // 2] * 2:
        return lin
    return None


def _packed_gated_mlp(state, m, a, u, act, report):
    """``mul(act(gate), up)`` over halves of one linear's result -> that linear with ``act``."""
    g = state.gm.graph
    lin = _halves(a.args[0], u)
    if lin is None or lin.args[2] is not None or any(len(n.users) != 1 for n in (a, u, a.args[0])):
        return False
    new = _new_lin(g, m, [lin.args[0], lin.args[1], None, None, None, 0, 0.0, 0.0, act])
    _replace(g, m, new)
    sp = a.args[0].args[0]
    for n in (m, a, u, a.args[0], sp, lin):
        g.erase_node(n)
    report["gated_mlp"] += 1
    return True


def drop_identities(g):
    """Replace ``dropout(x, p, train=False)`` by ``x``."""
    for n in list(g.nodes):
        if n.op == "call_function" and n.target == aten.dropout.default and len(n.args) == 3 \
                and n.args[2] is False:
            n.replace_all_uses_with(n.args[0])
            g.erase_node(n)


def _gate_act(a):
    if not isinstance(a, torch.fx.Node) or a.op != "call_function":
        return None
    if a.target == aten.silu.default:
        return 1
    if a.target == aten.gelu.default and a.kwargs.get("approximate", a.args[1] if len(a.args) > 1 else "none") == "tanh":
        return 2
    return None


def siblings(state, report):
    g = state.gm.graph
    groups = {}
    for n in g.nodes:
        if _plain(n) and state.tensor(n.args[1]) is not None and state.constant(n.args[1]):
            groups.setdefault(n.args[0], []).append(n)
    orphans = []
    for x, members in groups.items():
        if len(members) < 2:
            continue
        ws = [state.tensor(n.args[1]) for n in members]
        bs = [n.args[2] for n in members]
        if len({(w.dtype, w.shape[1]) for w in ws}) != 1:
            continue
        if any(b is not None for b in bs):
            bt = [state.tensor(b) if b is not None else None for b in bs]
            if any(b is None for b in bt):
                continue
        else:
            bt = None
        w = state.add(members[0].args[1], torch.cat(ws, 0), "fused")
        b = state.add(members[0].args[2], torch.cat(bt, 0), "fused") if bt else None
        new = _new_lin(g, members[0], [x, w, b, None, None, 0, 0.0, 0.0, 0])
        start = 0
        orphans += [n.args[1] for n in members] + [b for b in bs if b is not None]
        for n, wt in zip(members, ws):
            end = start + wt.shape[0]
            with g.inserting_after(new):
                s = g.call_function(aten.slice.Tensor, (new, -1, start, end))
            s.meta["val"] = _fake(aten.slice.Tensor, new, -1, start, end)
            n.replace_all_uses_with(s)
            g.erase_node(n)
            start = end
        report["merged"] += len(members)
    return orphans


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


def fuse(ep, report):
    """Run the six fusions on ``ep`` in place (see the module docs); counts go to ``report``."""
    state = State(ep)
    for k in ("gated_mlp", "merged", "norm", "residual", "add_norm", "add_norm_linear"):
        report.setdefault(k, 0)
    drop_identities(state.gm.graph)
    orphans = gated_mlp(state, report)
    orphans += siblings(state, report)
    norm_prologue(state, report)
    residual(state, report)
    add_norm(state, report)
    add_norm_linear(state, report)
    g = state.gm.graph
    g.eliminate_dead_code()
    report["weights_dropped"] = state.drop_orphans(set(orphans))
    g.lint()
    state.gm.recompile()
    return report
