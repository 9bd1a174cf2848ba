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
  ``et_add_rmsnorm_linear`` (its second result, the sum, serves the sum's
  other readers).

The norm fusions (the last four) are in ``fuse_norm.py``. The concatenated weights are new
parameters of the exported program; weights no node uses any more leave it. Needs the
``ExportedProgram`` (its state holds the weights)."""

import operator

import torch
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

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


def fuse(ep, report):
    """Run the six fusions on ``ep`` in place (see the module docs); counts go to ``report``."""
    from .fuse_norm import add_norm, add_norm_linear, norm_prologue, residual

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
