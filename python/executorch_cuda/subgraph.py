"""The nodes between some inputs and a result, cut out of a graph to be run on their own:
how the companion's passes prove a pattern (run it on random values, compare with the op
it would become) rather than assume it."""

import torch


def cut(out, inputs):
    """``(GraphModule(*inputs) -> out, the nodes cut)``, or the first node outside ``inputs``
    that is not a call (a placeholder, a get_attr: what the result also reads)."""
    order = {m: i for i, m in enumerate(out.graph.nodes)}
    sub, stack = set(), [out]
    while stack:
        m = stack.pop()
        if m in sub or m in inputs:
            continue
        if m.op != "call_function":
            return m
        sub.add(m)
        stack.extend(m.all_input_nodes)
    g = torch.fx.Graph()
    env = {x: g.placeholder(f"in{i}") for i, x in enumerate(inputs)}
    for m in sorted(sub, key=order.get):
        env[m] = g.node_copy(m, lambda a: env[a])
    g.output(env[out])
    return torch.fx.GraphModule(torch.nn.Module(), g), sub


def concrete(shape, t=3):
    """A fake value's shape with every symbolic size set to ``t``."""
    return [int(d) if isinstance(d, int) else t for d in shape]


__all__ = ["cut", "concrete"]
