"""The written-out attention pass (python/executorch_cuda/eager.py): what it matches, what
its proof refuses, and HF eager attention ending as the same fused ops as SDPA.

Run: python3 -m unittest discover -s python/tests -p 'test_eager.py' -v
"""

import unittest

try:
    import torch
except ImportError:  # the package's tests run without torch in CI
    torch = None


class _Attn(torch.nn.Module if torch is not None else object):
    """softmax(q @ k^T * s + mask) @ v, written out as a user might."""

    def __init__(self, style):
        super().__init__()
        self.style = style

    def forward(self, q, k, v, mask):
        if self.style == "div":
            s = torch.matmul(q, k.transpose(-2, -1)) / 8.0
        else:
            s = torch.matmul(q, k.transpose(2, 3)) * 0.125
        if self.style == "softcap":
            s = torch.tanh(s / 50.0) * 50.0
        if self.style == "masked":  # a boolean mask (True: attend), the hidden keys filled
            s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
        else:
            s = s + mask
        if self.style == "float":
            p = torch.softmax(s.float(), dim=-1).type_as(q)
        else:
            p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(torch.nn.functional.dropout(p, 0.0, False), v)


def _graph(style, dtype=torch.bfloat16 if torch is not None else None):
    args = (torch.randn(1, 4, 3, 64, dtype=dtype), torch.randn(1, 4, 16, 64, dtype=dtype),
            torch.randn(1, 4, 16, 64, dtype=dtype),
            torch.ones(1, 1, 3, 16, dtype=torch.bool) if style == "masked" else torch.zeros(1, 1, 3, 16, dtype=dtype))
    ep = torch.export.export(_Attn(style), args, strict=False)
    out = [n for n in ep.graph.nodes if n.op == "output"][0].args[0][0]
    return ep, out, args


@unittest.skipIf(torch is None, "needs torch")
class WrittenOut(unittest.TestCase):
    def test_the_forms_users_write_are_matched_and_proven(self):
        from executorch_cuda import eager

        for style in ("mul", "div", "float", "masked"):
            ep, out, _ = _graph(style)
            found = eager.match(out)
            self.assertIsNotNone(found, style)
            q, k, v, mask, scale = found
            self.assertEqual(scale, 0.125, style)
            why, sub = eager.prove(out, q, k, v, mask, scale)
            self.assertIsNone(why, style)
            self.assertIn(out, sub)

    def test_a_masked_fill_that_does_not_hide_is_no_mask(self):
        from executorch_cuda import eager

        class Filled(torch.nn.Module):
            def forward(self, q, k, v, mask):  # fills the hidden keys with 0, not -inf
                s = (torch.matmul(q, k.transpose(2, 3)) * 0.125).masked_fill(~mask, 0.0)
                return torch.matmul(torch.softmax(s, dim=-1), v)

        args = _graph("masked")[2]
        ep = torch.export.export(Filled(), args, strict=False)
        out = [n for n in ep.graph.nodes if n.op == "output"][0].args[0][0]
        self.assertIsNone(eager.match(out))

    def test_soft_capping_is_no_sdpa(self):
        from executorch_cuda import eager

        _, out, _ = _graph("softcap")
        self.assertIsNone(eager.match(out))

    def test_the_proof_refuses_what_the_nodes_do_not_compute(self):
        from executorch_cuda import eager

        ep, out, _ = _graph("mul")
        q, k, v, mask, _ = eager.match(out)
        why, sub = eager.prove(out, q, k, v, mask, 0.5)  # not the graph's scale
        self.assertIsNone(sub)
        self.assertIn("do not compute", why)
        why, _ = eager.prove(out, q, k, v, None, 0.125)  # the mask left out of the inputs
        self.assertIn("not only q, k, v and the mask", why)

    def test_convert_keeps_the_result_and_removes_the_products(self):
        from executorch_cuda import eager

        for dtype in (torch.bfloat16, torch.float32):
            ep, _, args = _graph("mul", dtype)
            want = ep.module()(*args)
            n, skipped = eager.convert(ep.graph_module, lambda *a: None)
            self.assertEqual((n, skipped), (1, []))
            targets = [x.target for x in ep.graph.nodes if x.op == "call_function"]
            self.assertIn(torch.ops.aten.scaled_dot_product_attention.default, targets)
            self.assertNotIn(torch.ops.aten.softmax.int, targets)
            got = ep.graph_module(*args)[0]
            torch.testing.assert_close(got.float(), want.float(), atol=3e-2, rtol=3e-2)
        ep, _, _ = _graph("mul")
        n, skipped = eager.convert(ep.graph_module, lambda *a: "not routed")
        self.assertEqual((n, skipped), (0, ["matmul_1: not routed"]))


if __name__ == "__main__":
    unittest.main()
