"""Write-only buffers: a buffer of the exported program that no node reads, only overwrites
(``aten.copy(buffer, src)`` with ``src`` of the buffer's sizes and dtype, whose result is then
the new value). HF ``transformers``' static cache keeps one such scalar per layer
(``cumulative_length``): every call overwrites it with ``cache_position[0]`` and writes back
``cache_position[0] + T``, and nothing in the program reads its old value. Each of those writes
is a kernel of its own in the lowered program (one per layer and decode step).

``drop_write_only(ep)`` removes such buffers from ``ep`` in place: the copies become their
source, the buffer's input and its mutation output leave the signature, and the buffer leaves
the state. The program's outputs do not change (proven on the graph: the buffer's only users
are those copies). A buffer another method reads (ExecuTorch programs of several methods
sharing mutable buffers) is written by that method's own program, not this one; pass
``keep=`` the names to keep them anyway."""

import torch
from torch.export.graph_signature import InputKind, OutputKind

aten = torch.ops.aten


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _overwrite_source(p, c, inplace):
    """``src`` when ``c`` is ``copy(p, src)`` (``copy_`` with ``inplace``) and ``src`` has p's
    sizes, dtype and device (so that the copy is ``src``, whatever p held)."""
    op = aten.copy_.default if inplace else aten.copy.default
    if c.op != "call_function" or c.target != op or len(c.args) < 2 or c.args[0] is not p \
            or c.kwargs.get("non_blocking", False):
        return None
    src, pv = c.args[1], _val(p)
    sv = _val(src)
    if not isinstance(src, torch.fx.Node) or pv is None or sv is None or sv.dtype != pv.dtype \
            or tuple(sv.shape) != tuple(pv.shape) or sv.device != pv.device:
        return None
    return src


def drop_write_only(ep, keep=()):
    """Drop the write-only buffers of ``ep`` (see the module docs); returns their names.

    Two forms of the graph: as ``torch.export`` gives it (in-place ops: the buffer's only user
    is ``copy_(buffer, src)``, which becomes ``clone(src)``, and later in-place ops write that
    clone), and functional (after ``run_decompositions``: every user is ``copy(buffer, src)``,
    which becomes ``src``, and the buffer's mutation output leaves the signature)."""
    sig = ep.graph_signature
    g = ep.graph_module.graph
    placeholders = {n.name: n for n in g.nodes if n.op == "placeholder"}
    mutated = {s.target: s for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION}
    dropped = []
    for spec in list(sig.input_specs):
        if spec.kind != InputKind.BUFFER or spec.target in keep:
            continue
        p = placeholders.get(spec.arg.name)
        if p is None or not p.users:
            continue
        functional = spec.target in mutated
        users = list(p.users)
        if not functional and len(users) != 1:
            continue
        sources = {c: _overwrite_source(p, c, not functional) for c in users}
        if any(s is None for s in sources.values()):
            continue
        for c, src in sources.items():
            new = src
            if not functional:
                with g.inserting_before(c):
                    new = g.call_function(aten.clone.default, (src,))
                new.meta["val"] = _val(c)
            c.replace_all_uses_with(new)
            g.erase_node(c)
        if functional:
            out = next(n for n in g.nodes if n.op == "output")
            mspec = mutated[spec.target]
            outs = list(out.args[0])
            del outs[list(sig.output_specs).index(mspec)]
            out.args = (tuple(outs),)
            sig.output_specs = [s for s in sig.output_specs if s is not mspec]
        sig.input_specs = [s for s in sig.input_specs if s is not spec]
        g.erase_node(p)
        ep.state_dict.pop(spec.target, None)
        ep.constants.pop(spec.target, None)
        dropped.append(spec.target)
    if dropped:
        g.eliminate_dead_code()
        g.lint()
        ep.graph_module.recompile()
    return dropped


__all__ = ["drop_write_only"]
