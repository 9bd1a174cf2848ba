"""Tests of the export companion (python/executorch_cuda). The mapping-table
tests need only Python; the op and graph-rewrite tests need torch and are
skipped, with the reason printed, where it is not installed.
Run: python3 -m unittest discover -s python/tests -v"""

import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

# shims.py imports torch only inside functions.
from executorch_cuda import shims  # noqa: E402


def _rust_shims():
    """{name: [C parameter types]} of the library's aoti_torch_cuda_et_* entry points."""
    with open(os.path.join(ROOT, "src", "ffi", "shim", "decode.rs")) as f:
        src = f.read()
    out = {}
    for m in re.finditer(r'pub unsafe extern "C" fn (aoti_torch_cuda_et_\w+)\(([^)]*)\)', src):
        params = [p.split(":")[1].strip() for p in m.group(2).split(",") if p.strip()]
        out[m.group(1)] = params
    return out


RUST_TO_C = {"AtenTensorHandle": "AtenTensorHandle", "*mut AtenTensorHandle": "AtenTensorHandle*",
             "f64": "double", "i64": "int64_t"}


class MappingTable(unittest.TestCase):
    def test_every_op_maps_to_a_shim_the_library_exports_with_the_same_signature(self):
        rust = _rust_shims()
        self.assertEqual(len(rust), 4, rust)
        self.assertEqual(set(rust), {shims.shim_name(op) for op in shims.C_SHIMS})
        for op, decl in shims.C_SHIMS.items():
            m = re.fullmatch(r"AOTITorchError (\w+)\((.*)\)", decl)
            self.assertIsNotNone(m, decl)
            self.assertEqual(m.group(1), shims.shim_name(op))
            c_params = [p.strip() for p in m.group(2).split(",")]
            self.assertEqual(c_params, [RUST_TO_C[p] for p in rust[m.group(1)]], op)

    def test_fallback_names_cover_op_and_shim(self):
        names = shims.fallback_kernel_names()
        for op in shims.C_SHIMS:
            self.assertIn(f"et_cuda::{op}", names)
            self.assertIn(f"aoti_torch_cuda_{op}", names)


def _toy(dtype, hidden=128, heads=4, kv=2, hd=64, lmax=32, bias=True):
    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(hidden, heads * hd, bias=False)
            self.k = torch.nn.Linear(hidden, kv * hd, bias=False)
            self.v = torch.nn.Linear(hidden, kv * hd, bias=False)
            self.o = torch.nn.Linear(heads * hd, hidden, bias=bias)
            self.register_buffer("k_cache", torch.zeros(1, kv, lmax, hd))
            self.register_buffer("v_cache", torch.zeros(1, kv, lmax, hd))

        def forward(self, x, cache_position):
            b, t, _ = x.shape
            q = self.q(x).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(x).view(b, t, kv, hd).transpose(1, 2)
            v = self.v(x).view(b, t, kv, hd).transpose(1, 2)
            self.k_cache.index_copy_(2, cache_position, k)
            self.v_cache.index_copy_(2, cache_position, v)
            kk = self.k_cache.repeat_interleave(heads // kv, dim=1)
            vv = self.v_cache.repeat_interleave(heads // kv, dim=1)
            mask = torch.arange(lmax) <= cache_position[:, None]
            y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask[None, None])
            return self.o(y.transpose(1, 2).reshape(b, t, heads * hd))

    torch.manual_seed(0)
    return Toy().to(dtype)


@unittest.skipIf(torch is None, "torch is not installed here (the GPU script runs these)")
class Companion(unittest.TestCase):
    def test_reference_ops_match_plain_torch(self):
        import executorch_cuda  # noqa: F401

        torch.manual_seed(1)
        x, w, b = torch.randn(3, 5, 40), torch.randn(24, 40), torch.randn(24)
        torch.testing.assert_close(torch.ops.et_cuda.et_gemv(x, w), x @ w.t())
        torch.testing.assert_close(torch.ops.et_cuda.et_gemv_bias(x, w, b), x @ w.t() + b)
        q = torch.randn(1, 8, 3, 64)
        kc, vc = torch.randn(1, 2, 16, 64), torch.randn(1, 2, 16, 64)
        pos = torch.tensor([9, 10, 11])
        mask = torch.arange(16) <= pos[:, None]
        want = F.scaled_dot_product_attention(q, kc.repeat_interleave(4, 1), vc.repeat_interleave(4, 1),
                                              attn_mask=mask, scale=0.1)
        for got in (torch.ops.et_cuda.et_decode_attention(q, kc, vc, pos, 0.1),
                    torch.ops.et_cuda.et_decode_attention(q, kc, vc, pos[:1], 0.1),
                    torch.ops.et_cuda.et_decode_attention_len(q, kc, vc, 12, 0.1)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)

    def _export(self, dtype, dynamic=True):
        m = _toy(dtype)
        x = torch.randn(1, 3, 128).to(dtype)
        pos = torch.tensor([4, 5, 6])
        ds = None
        if dynamic:
            t = torch.export.Dim("t", min=1, max=16)
            ds = {"x": {1: t}, "cache_position": {0: t}}
        ep = torch.export.export(m, (x, pos), dynamic_shapes=ds, strict=False)
        return ep, x, pos

    def test_rewrite_routes_linears_and_cache_attention_and_keeps_results(self):
        import executorch_cuda

        ep, x, pos = self._export(torch.bfloat16)
        want = _toy(torch.bfloat16)(x, pos).float()
        ep, report = executorch_cuda.prepare(ep, positions="cache_position")
        self.assertEqual(report["gemv"], 4, report)
        self.assertEqual(report["attention"], 1, report)
        targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
        self.assertIn("et_cuda.et_gemv_bias.default", targets)
        self.assertNotIn("aten.scaled_dot_product_attention.default", targets)
        self.assertNotIn("aten.linear.default", targets)
        got = ep.module()(x, pos).float()
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
        # The ops survive the decompositions ExecuTorch's to_edge runs.
        dec = ep.run_decompositions({})
        names = {str(n.target) for n in dec.graph.nodes if n.op == "call_function"}
        self.assertIn("et_cuda.et_decode_attention.default", names)
        self.assertIn("et_cuda.et_gemv.default", names)
        self.assertIn("aoti_torch_cuda_et_gemv", str(executorch_cuda.custom_ops_to_c_shims()))

    def test_rewrite_respects_max_m_dtype_and_a_missing_positions_input(self):
        import executorch_cuda

        ep, _, _ = self._export(torch.bfloat16)
        report = executorch_cuda.rewrite(ep.graph_module, ep, max_m=8, positions="nothing")
        self.assertEqual(report["gemv"], 0, report)  # T up to 16 > 8
        self.assertEqual(report["attention"], 0, report)
        self.assertIn("positions", report["skipped_attention"][0])
        ep32, _, _ = self._export(torch.float32, dynamic=False)
        report = executorch_cuda.rewrite(ep32.graph_module, ep32, positions="cache_position")
        self.assertEqual((report["gemv"], report["attention"]), (0, 0), report)


if __name__ == "__main__":
    unittest.main(verbosity=2)
