"""Proves what an attention mask over a static KV cache means, by running it.

``classify_mask(gm, mask_node, pos_node, lmax, ep)`` cuts out of the graph
the nodes that compute ``mask_node`` (an SDPA's ``attn_mask``) from the
positions input ``pos_node`` (the 1-d int input holding the cache positions of
the new tokens) and the program's constants, runs that subgraph for several
position vectors (one token at positions spread over the cache; prefills and
chunks of several lengths within the export's bounds of ``T``, whose longest
runs tile the cache so that every position is a query at least once) and
compares what each query sees with:

- ``"causal"``: query i sees exactly the keys ``0 <= j <= pos[i]``;
- ``"window"``: query i sees exactly the keys ``pos[i] - W < j <= pos[i]``
  (``W`` keys, its own included; ``window = W``). This is HF ``transformers``'
  convention: ``masking_utils.sliding_window_overlay`` keeps
  ``kv_idx > q_idx - sliding_window`` on top of ``kv_idx <= q_idx``, so
  Gemma-3's ``sliding_window = 512`` means query p sees keys p-511..p. A window
  at least as wide as the cache is reported as causal (it is, over the cache).

Anything else is ``"other"``, with the reason (the first query that breaks
the pattern, an input other than the positions the mask reads, a mask whose
values are not a mask, a subgraph that failed to run, ...).

Masks: bool (True = visible) or additive float (0 = visible, -inf or a value
<= -1e4 = hidden; anything in between is a bias, not a mask), of any shape
that broadcasts to ``[B, H, T, lmax]`` with the same rows for every batch and
head. The subgraph may read the positions, parameters, buffers and lifted
constants (their values come from ``ep``; get_attr attributes from ``gm``)
and sizes equal to ``T`` (``input_ids.shape[1]`` when the export ties it to
the positions' length). Reading anything else (an ``attention_mask`` input,
token ids) makes it ``"other"``. Nothing of the program is modified: state
values are cloned before they run.

Verdicts are cached per (graph, mask node, positions node, lmax): models
share one mask across their layers.
"""

import weakref
from dataclasses import dataclass
from typing import Optional

import torch

HIDDEN_BELOW = -1.0e4  # an additive mask value at or below this hides the key
_TILE_ELEMS = 1 << 22  # [T, lmax] entries of one run that tiles the cache
_RUN_ELEMS = 1 << 24  # the most entries of one run, and of all tiles together
_CACHE = weakref.WeakKeyDictionary()  # fx.Graph -> {(mask, pos, lmax): MaskVerdict}


@dataclass(frozen=True)
class MaskVerdict:
    kind: str  # "causal" | "window" | "other"
    window: Optional[int]  # W for "window", else None
    reason: str  # what was evaluated, or why it is "other"


def _other(reason):
    return MaskVerdict("other", None, reason)


def classify_mask(gm, mask_node, pos_node, lmax, ep=None) -> MaskVerdict:
    """See the module's doc. Never raises: a failure is an ``"other"`` verdict."""
    try:
        graph = gm.graph
        key = (mask_node, pos_node, lmax)
        cached = _CACHE.get(graph, {}).get(key)
        if cached is not None:
            return cached
    except Exception as e:  # noqa: BLE001 - never raise on weird input
        return _other(f"not a graph module ({type(e).__name__}: {e})")
    threads = torch.get_num_threads()
    try:
        # The tensors are small: one thread is fastest, and many threads on a busy
        # machine made one classification 20-50x slower (1.2 s instead of 30 ms).
        torch.set_num_threads(1)
        verdict = _classify(gm, mask_node, pos_node, lmax, ep)
    except Exception as e:  # noqa: BLE001 - never raise on weird graphs
        verdict = _other(f"classifying the mask failed: {type(e).__name__}: {e}")
    finally:
        torch.set_num_threads(threads)
    try:
        _CACHE.setdefault(graph, {})[key] = verdict
    except TypeError:  # unhashable key: no caching, same answer
        pass
    return verdict


def _classify(gm, mask_node, pos_node, lmax, ep):
    if not isinstance(mask_node, torch.fx.Node):
        return _other(f"no mask node (got {type(mask_node).__name__})")
    if not isinstance(pos_node, torch.fx.Node) or pos_node.op != "placeholder":
        return _other("the positions node is not a placeholder of the graph")
    if not isinstance(lmax, int) or isinstance(lmax, bool) or lmax < 1:
        return _other(f"lmax {lmax!r} is not a positive int")
    pv = pos_node.meta.get("val")
    if not isinstance(pv, torch.Tensor) or pv.dim() != 1 or pv.dtype not in (torch.int64, torch.int32):
        return _other("the positions input is not a 1-d int64/int32 tensor")
    t_dim = pv.shape[0]
    t_expr = None if isinstance(t_dim, int) else t_dim.node.expr
    sub = _extract(gm, mask_node, pos_node, t_expr, ep)
    if isinstance(sub, str):
        return _other(sub)
    module, state = sub
    lo, hi = _t_bounds(t_dim, lmax, ep)
    if lo > hi:
        return _other(f"no query count T in the export's bounds fits a cache of {lmax}")
    rows = []  # (case, positions [T], visibility [T, lmax] bool)
    cases = _cases(lo, hi, lmax)
    for case, start, t in cases:
        pos = torch.arange(start, start + t, dtype=pv.dtype, device=pv.device)
        vals = [v.clone() for v in state]  # the subgraph may write to its inputs (copy_)
        with torch.no_grad():
            out = module(pos, t, *vals)
        vis = _visibility(out, t, lmax)
        if isinstance(vis, str):
            return _other(f"{case}: {vis}")
        rows.append((case, pos, vis))
    ts = f"T {lo}..{hi}" if lo < hi else f"T={lo}"
    ran = max(t for _, _, t in cases)
    if ran < hi:
        ts += f", run up to T={ran}"
    return _judge(rows, lmax, ts)


def _t_bounds(t_dim, lmax, ep):
    """The range of T (the positions' length) to evaluate, clipped to [1, lmax]: the
    export's range constraints, else the shape environment's range (whose lower
    bound 2 is an artifact of 0/1 specialization: export still runs T=1)."""
    if isinstance(t_dim, int):
        return max(t_dim, 1), min(t_dim, lmax) if t_dim <= lmax else 0
    lo, hi = 1, lmax
    try:
        expr = t_dim.node.expr
        r = getattr(ep, "range_constraints", {}).get(expr)
        if r is None:
            r = t_dim.node.shape_env.bound_sympy(expr)
            if r.lower == 2:
                r = type(r)(1, r.upper)
        if r.lower.is_finite:
            lo = max(lo, int(r.lower))
        if r.upper.is_finite:
            hi = min(hi, int(r.upper))
    except Exception:  # noqa: BLE001 - unknown bounds: the cache's own
        pass
    return lo, hi


def _cases(lo, hi, lmax):
    """(label, first position, T): contiguous runs of positions. One token at
    positions spread over the cache (256 of them when T is always 1); the
    longest T as a prefill; runs of up to 4M mask entries tiling the cache
    (every position is a query at least once while the tiles add up to 16M
    entries, a cache of 4096; beyond that, tiles spread over it); a middle T as
    a prefill and as an off-aligned chunk; the shortest T > 1 as a prefill.
    Runs longer than 16M entries (T * lmax) are left out: the reason says up to
    which T was run."""
    out = []
    if lo <= 1 <= hi:
        step = max(lmax // (16 if hi > 1 else 256), 1)  # denser when T=1 is all there is
        ps = sorted({0, 1, 2, lmax // 2, lmax - 2, lmax - 1, *range(0, lmax, step)})
        out += [(f"T=1 at position {p}", p, 1) for p in ps if 0 <= p < lmax]
    top = min(hi, max(_RUN_ELEMS // lmax, 1))
    tile = min(top, max(_TILE_ELEMS // lmax, 2))
    if top > tile:
        out.append((f"T={top} at positions 0..{top - 1}", 0, top))
    if tile > 1:
        starts = list(range(0, lmax - tile + 1, tile))
        keep = max(_RUN_ELEMS // (tile * lmax), 2)
        if len(starts) > keep:  # evenly spread, the first one kept
            starts = [starts[i * len(starts) // keep] for i in range(keep)]
        if starts[-1] != lmax - tile:
            starts.append(lmax - tile)
        out += [(f"T={tile} at positions {s}..{s + tile - 1}", s, tile) for s in starts]
    mid = (max(lo, 2) + tile) // 2
    if 1 < mid < tile:
        s = min((lmax - mid) // 2 + 1, lmax - mid)
        out += [(f"T={mid} at positions 0..{mid - 1}", 0, mid),
                (f"T={mid} at positions {s}..{s + mid - 1}", s, mid)]
    small = max(lo, 2)
    if small < mid:
        out.append((f"T={small} at positions 0..{small - 1}", 0, small))
    return out


def _visibility(out, t, lmax):
    """The [t, lmax] bool visibility of an evaluated mask, or the reason it is none."""
    if not isinstance(out, torch.Tensor):
        return f"the mask evaluated to {type(out).__name__}, not a tensor"
    if out.dim() < 1 or out.dim() > 4:
        return f"the mask has {out.dim()} dimensions"
    if out.shape[-1] != lmax:
        return f"the mask spans {out.shape[-1]} keys, not the cache's {lmax}"
    rows_dim = out.shape[-2] if out.dim() >= 2 else 1
    if rows_dim not in (1, t):
        return f"the mask has {rows_dim} query rows for T={t}"
    m = out.reshape(-1, rows_dim, lmax)
    if m.dtype == torch.bool:
        vis = m
    elif m.is_floating_point():
        f = m.float()
        zero, hidden = f == 0, f <= HIDDEN_BELOW
        bad = ~(zero | hidden)
        if bool(bad.any()):
            v = f[bad][0].item()
            return f"additive mask value {v} is neither 0 (visible) nor <= {HIDDEN_BELOW:g} (hidden)"
        vis = zero
    else:
        return f"mask dtype {m.dtype} (SDPA masks are bool or float)"
    if m.shape[0] > 1 and not bool((vis == vis[:1]).all()):
        return "the mask differs across batch entries or heads"
    return vis[0].expand(t, lmax)


def _row_problem(where, p, row, w):
    """Why one query's visibility row is not the expected one (causal when w is None)."""
    seen = torch.nonzero(row).flatten()
    if seen.numel() == 0:
        return f"{where} sees no key"
    lo, hi = int(seen[0]), int(seen[-1])
    if hi > p:
        return f"{where} sees key {hi}"
    if hi < p:
        return f"{where} does not see key {p}"
    if seen.numel() != hi - lo + 1:
        gap = lo + int(torch.nonzero(~row[lo:hi + 1]).flatten()[0])
        return f"{where} sees key {lo} but not key {gap}"
    if w is None:
        return f"{where} sees keys {lo}..{p}, not 0..{p} as other queries do"
    return (f"{where} sees keys {lo}..{p}, not a window of {w} ({max(p - w + 1, 0)}..{p}) "
            "as other queries do")


def _expected(pos, lmax, w):
    keys = torch.arange(lmax, device=pos.device)
    p = pos[:, None]
    return (keys <= p) if w is None else (keys <= p) & (keys > p - w)


def _judge(rows, lmax, ts):
    """causal, window W, or other with the first query that breaks both. The window
    comes from each run's last (highest) query; every row is then compared with it."""
    w = None
    for case, pos, vis in rows:
        last = vis[-1]
        lo = int(torch.nonzero(last).flatten()[0]) if bool(last.any()) else 0
        if lo > 0:
            w = min(w, int(pos[-1]) - lo + 1) if w is not None else int(pos[-1]) - lo + 1
    for case, pos, vis in rows:
        if torch.equal(vis, _expected(pos, lmax, w).expand_as(vis)):
            continue
        bad = (vis != _expected(pos, lmax, w)).any(1)
        i = int(torch.nonzero(bad).flatten()[0])
        p = int(pos[i])
        return _other(_row_problem(f"{case}: query {i} at position {p}", p, vis[i], w))
    seen = torch.unique(torch.cat([pos for _, pos, _ in rows])).numel()
    n = f"{len(rows)} evaluated position vectors ({ts}; {seen} of the {lmax} cache positions as queries)"
    if w is None:
        return MaskVerdict("causal", None, f"causal in all {n}")
    return MaskVerdict("window", w, f"a sliding window of {w} keys in all {n}")


# --- the subgraph --------------------------------------------------------------------------


def _mutated_args(n):
    """The nodes ``n`` writes to in place (per its schema), for aten ops."""
    t = n.target
    schema = getattr(t, "_schema", None)
    if n.op != "call_function" or schema is None:
        return []
    out = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = n.args[i] if i < len(n.args) else n.kwargs.get(a.name)
            if isinstance(v, torch.fx.Node):
                out.append(v)
    return out


def _is_view(n):
    schema = getattr(n.target, "_schema", None)
    return (n.op == "call_function" and schema is not None and len(schema.returns) == 1
            and schema.returns[0].alias_info is not None and bool(n.args)
            and isinstance(n.args[0], torch.fx.Node))


def _state_value(ep, n):
    """The tensor behind a parameter/buffer/constant placeholder, or None."""
    if ep is None:
        return None
    sig = ep.graph_signature
    for table in (sig.inputs_to_parameters, sig.inputs_to_buffers,
                  getattr(sig, "inputs_to_lifted_tensor_constants", {})):
        if n.name in table:
            fqn = table[n.name]
            v = ep.state_dict.get(fqn)
            if v is None:
                v = ep.constants.get(fqn)
            return v if isinstance(v, torch.Tensor) else None
    return None


def _is_t(n, t_expr):
    v = n.meta.get("val")
    return t_expr is not None and isinstance(v, torch.SymInt) and v.node.expr == t_expr


def _extract(gm, mask_node, pos_node, t_expr, ep):
    """(module(pos, T, *state), [state values]) computing the mask, or the reason it cannot."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    if mask_node not in order or pos_node not in order:
        return "the mask or positions node is not in this graph"
    sub, t_nodes, state, stack = set(), set(), {}, [mask_node]
    while stack:
        n = stack.pop()
        if n in sub or n in t_nodes:
            continue
        if n is not pos_node and n is not mask_node and _is_t(n, t_expr):
            t_nodes.add(n)  # a size equal to T (e.g. input_ids.shape[1]): fed T
            continue
        if n.op == "get_attr" and isinstance(_attr(gm, n.target), torch.Tensor):
            state[n] = _attr(gm, n.target)  # fed a clone, like the placeholders of the state
        elif n.op == "placeholder" and n is not pos_node:
            v = _state_value(ep, n)
            if v is None and ep is None:
                return (f"the mask reads the placeholder '{n.name}' (pass ep: the values of "
                        "parameters, buffers and constants come from it)")
            if v is None:
                return f"the mask reads the input '{n.name}', not only the positions and constants"
            state[n] = v
        elif n.op not in ("placeholder", "call_function", "get_attr", "call_module", "call_method"):
            return f"the mask depends on a {n.op} node '{n.name}'"
        sub.add(n)
        stack.extend(n.all_input_nodes)
    for n, v in state.items():
        if v.is_meta or not (type(v) is torch.Tensor or type(v) is torch.nn.Parameter):
            return f"the value of '{n.name}' is not a plain tensor with data ({type(v).__name__})"
    why = _mutation_problem(sub, mask_node, order)
    if why:
        return why
    return _build(gm, sub, t_nodes, state, pos_node, mask_node, order)


def _mutation_problem(sub, mask_node, order):
    """A write from outside the subgraph that would change what it computes."""
    aliases, n = {mask_node}, mask_node
    while _is_view(n) and n.args[0] in sub:
        n = n.args[0]
        aliases.add(n)
    for s in sub:
        for u in s.users:
            if u in sub or s not in _mutated_args(u):
                continue
            if order[u] < order[mask_node]:
                return f"'{u.name}' writes to '{s.name}' before the mask is computed"
            if s in aliases:
                return f"'{u.name}' writes to the mask ('{s.name}') after it is computed"
    return None


def _build(gm, sub, t_nodes, state, pos_node, mask_node, order):
    g = torch.fx.Graph()
    env = {pos_node: g.placeholder("positions")}
    t_ph = g.placeholder("t")
    for n in t_nodes:
        env[n] = t_ph
    leaves = sorted(state, key=order.get)
    for i, n in enumerate(leaves):
        env[n] = g.placeholder(f"state_{i}")
    for n in sorted(sub, key=order.get):
        if n not in env:
            env[n] = g.node_copy(n, lambda a: env[a])
    g.output(env[mask_node])
    return torch.fx.GraphModule(gm, g), [state[n].detach() for n in leaves]


def _attr(gm, target):
    obj = gm
    for part in str(target).split("."):
        obj = getattr(obj, part, None)
    return obj


__all__ = ["MaskVerdict", "classify_mask", "HIDDEN_BELOW"]
