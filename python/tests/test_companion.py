"""Tests of the export companion (python/executorch_cuda). The mapping-table
tests need only Python; the op and graph-rewrite tests need torch and are
skipped, with the reason printed, where it is not installed.
Run: python3 -m unittest discover -s python/tests -v"""

import copy
import itertools
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
    src = ""
    for name in ("decode.rs", "norm.rs"):
        with open(os.path.join(ROOT, "src", "shim", name)) as f:
            src += f.read()
    out = {}
    for m in re.finditer(r'pub unsafe extern "C" fn (aoti_torch_cuda_et_\w+)\(([^)]*)\)', src):
        params = [p.split(":")[1].strip() for p in m.group(2).split(",") if p.strip()]
        out[m.group(1)] = params
    return out


RUST_TO_C = {"AtenTensorHandle": "AtenTensorHandle", "*mut AtenTensorHandle": "AtenTensorHandle*",
             "*const AtenTensorHandle": "AtenTensorHandle*",
             "f64": "double", "i64": "int64_t"}


class MappingTable(unittest.TestCase):
    def test_every_op_maps_to_a_shim_the_library_exports_with_the_same_signature(self):
        rust = _rust_shims()
        self.assertEqual(len(rust), 10, rust)
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


def _toy(dtype, hidden=128, heads=4, kv=2, hd=64, lmax=32, bias=True, mask_fn=None, eager=False):
    """A one-layer static-cache decoder; ``mask_fn(p, j, pad)`` (p: positions [T, 1], j: the
    cache positions) replaces the causal mask; with ``pad`` the model takes a padding input;
    ``eager``: the attention written out (softmax(q k^T s, masked) v, as HF's eager attention)."""
    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(hidden, heads * hd, bias=False)
            self.k = torch.nn.Linear(hidden, kv * hd, bias=False)
            self.v = torch.nn.Linear(hidden, kv * hd, bias=False)
            self.o = torch.nn.Linear(heads * hd, hidden, bias=bias)
            self.register_buffer("k_cache", torch.zeros(1, kv, lmax, hd))
            self.register_buffer("v_cache", torch.zeros(1, kv, lmax, hd))

        def forward(self, x, cache_position, pad=None):
            b, t, _ = x.shape
            q = self.q(x).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(x).view(b, t, kv, hd).transpose(1, 2)
            v = self.v(x).view(b, t, kv, hd).transpose(1, 2)
            self.k_cache.index_copy_(2, cache_position, k)
            self.v_cache.index_copy_(2, cache_position, v)
            kk = self.k_cache.repeat_interleave(heads // kv, dim=1)
            vv = self.v_cache.repeat_interleave(heads // kv, dim=1)
            mask = torch.arange(lmax) <= cache_position[:, None]
            if mask_fn is not None:
                mask = mask_fn(cache_position[:, None], torch.arange(lmax), pad)
            if eager:
                sc = torch.matmul(q, kk.transpose(2, 3)) * hd ** -0.5
                sc = sc.masked_fill(~mask[None, None], float("-inf"))
                y = torch.matmul(torch.softmax(sc, dim=-1, dtype=torch.float32).to(q.dtype), vv)
            else:
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
        self.assertEqual(report["linear"], 4, report)
        self.assertEqual(report["merged"], 3, report)  # q, k and v read the same x
        self.assertEqual(report["attention"], 1, report)
        targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
        self.assertIn("et_cuda.et_linear.default", targets)
        self.assertNotIn("aten.scaled_dot_product_attention.default", targets)
        self.assertNotIn("aten.linear.default", targets)
        got = ep.module()(x, pos).float()
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
        # The ops survive the decompositions ExecuTorch's to_edge runs.
        dec = ep.run_decompositions({})
        names = {str(n.target) for n in dec.graph.nodes if n.op == "call_function"}
        self.assertIn("et_cuda.et_attention.default", names)
        self.assertIn("et_cuda.et_linear.default", names)
        self.assertIn("aoti_torch_cuda_et_linear", str(executorch_cuda.custom_ops_to_c_shims()))

    def test_masks_are_proven_before_the_attention_is_rewritten(self):
        import executorch_cuda

        bf = torch.bfloat16
        cases = {
            "future4": (lambda p, j, _: j <= p + 4, "mask"),
            "padding": (lambda p, j, pad: (j <= p) & pad, "mask"),
            "window5": (lambda p, j, _: (j <= p) & (j > p - 5), None),
        }
        for (name, (fn, skipped)), eager in itertools.product(cases.items(), (False, True)):
            m = _toy(bf, mask_fn=fn, eager=eager)
            x, pos = torch.randn(1, 3, 128).to(bf), torch.tensor([20, 21, 22])
            args = (x, pos) + ((torch.rand(32) > 0.2,) if name == "padding" else ())
            t = torch.export.Dim("t", min=1, max=16)
            ds = {"x": {1: t}, "cache_position": {0: t}}
            if name == "padding":
                ds["pad"] = None
            ep = torch.export.export(m, args, dynamic_shapes=ds, strict=False)
            want = _toy(bf, mask_fn=fn, eager=eager)(*args).float()
            ep, report = executorch_cuda.prepare(ep, positions="cache_position")
            got = ep.module()(*args).float()
            name = f"{name}{' (written out)' if eager else ''}"
            torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2, msg=name)
            if skipped:
                # Written out, it stays written out: no SDPA is made for a mask the kernel
                # would misread, and the report says why.
                self.assertEqual((report["attention"], report["eager_attention"]), (0, 0), (name, report))
                self.assertIn(skipped, report["skipped_attention"][0], name)
            else:
                self.assertEqual((report["attention"], report["window"], report["eager_attention"]),
                                 (1, 1, int(eager)), (name, report))
                targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
                self.assertIn("et_cuda.et_attention.default", targets)

    def test_every_linear_is_rewritten_whatever_the_row_bound(self):
        import executorch_cuda

        # T up to 16: the old default (max_m=64) and a smaller hint both rewrite every linear.
        for hint in (None, 8):
            ep, _, _ = self._export(torch.bfloat16)
            report = executorch_cuda.rewrite(ep.graph_module, ep, max_m=hint, positions="nothing")
            self.assertEqual(report["linear"], 4, report)
            self.assertEqual(report["attention"], 0, report)
            self.assertIn("positions", report["skipped_attention"][0])
        ep32, _, _ = self._export(torch.float32, dynamic=False)
        report = executorch_cuda.rewrite(ep32.graph_module, ep32, positions="cache_position")
        self.assertEqual((report["linear"], report["attention"]), (0, 0), report)

    def test_a_weight_the_program_writes_stays_with_the_lowering(self):
        import executorch_cuda

        class Adapted(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("w", torch.randn(32, 64).to(torch.bfloat16))
                self.fixed = torch.nn.Linear(64, 32, bias=False).to(torch.bfloat16)

            def forward(self, x, delta):
                self.w.add_(delta)  # the weight changes every step
                return F.linear(x, self.w) + self.fixed(x)

        m = Adapted()
        x, d = torch.randn(1, 64).to(torch.bfloat16), torch.randn(32, 64).to(torch.bfloat16)
        ep = torch.export.export(m, (x, d), strict=False)
        report = executorch_cuda.rewrite(ep.graph_module, ep, attention=False)
        self.assertEqual(report["linear"], 1, report)  # the parameter's linear only
        self.assertEqual(len(report["skipped_linear"]), 1, report)
        # It reads the in-place add's result, no constant: named with the reason.
        self.assertIn("is not a parameter, buffer or constant of the program", report["skipped_linear"][0])

    def test_linears_left_alone_are_named_with_the_reason(self):
        import executorch_cuda

        class Mixed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.f32 = torch.nn.Linear(64, 32)
                self.bf = torch.nn.Linear(64, 32, bias=False).to(torch.bfloat16)
                # torchao's tile-packed int4 weight and its scales and zeros (N = 64, K = 256)
                self.register_buffer("w4", torch.zeros(8, 2, 32, 4, dtype=torch.int32))
                self.register_buffer("sz", torch.zeros(2, 64, 2, dtype=torch.bfloat16))

            def forward(self, x, w_in):
                xb = x.to(torch.bfloat16)
                y4 = torch.ops.aten._weight_int4pack_mm(torch.zeros(1, 256, dtype=torch.bfloat16),
                                                        self.w4, 128, self.sz)
                # a weight that is an input of the program, and a product of two activations
                y_in = F.linear(xb, w_in)
                act = xb @ xb.t()
                return self.f32(x), self.bf(xb), y4, y_in, act

        x, w_in = torch.randn(1, 64), torch.randn(32, 64).to(torch.bfloat16)
        f32 = "torch.float32 weights (the kernels take bfloat16 and float16)"
        int4 = "int4 weight-only (aten._weight_int4pack_mm)"
        given = "is not a parameter, buffer or constant of the program"
        # As exported (aten.linear), then decomposed (t + mm/addmm: the products of two
        # activations are no linears and are not named; nor is a weight the program is given).
        for decompose, wants in ((False, [f32, given, int4]), (True, [f32, int4])):
            ep = torch.export.export(Mixed(), (x, w_in), strict=False)
            if decompose:
                ep = ep.run_decompositions()
            report = executorch_cuda.rewrite(ep.graph_module, ep, attention=False)
            self.assertEqual(report["linear"], 1, report)  # the bf16 parameter's linear
            why = "\n".join(report["skipped_linear"])
            self.assertEqual(len(report["skipped_linear"]), len(wants), why)
            for w in wants:
                self.assertIn(w, why)
            # the int4 product is still there, for the library's int4 kernel
            targets = [n.target for n in ep.graph_module.graph.nodes]
            self.assertIn(torch.ops.aten._weight_int4pack_mm.default, targets)

    def test_write_only_buffers_leave_and_read_ones_stay(self):
        from executorch_cuda.buffers import drop_write_only

        class Counters(torch.nn.Module):
            """HF's cumulative_length (overwritten, then read and bumped), a buffer read
            before it is written, and one written in part."""

            def __init__(self):
                super().__init__()
                self.register_buffer("length", torch.zeros((), dtype=torch.int64))
                self.register_buffer("total", torch.zeros((), dtype=torch.int64))
                self.register_buffer("row", torch.zeros(4, dtype=torch.int64))

            def forward(self, pos):
                self.length.copy_(pos[0])
                idx = torch.arange(pos.shape[0]) + self.length
                self.length.add_(pos.shape[0])
                y = idx * 2 + self.total
                self.total.copy_(pos[-1])
                self.row[:3].copy_(pos)
                return y + self.row.sum()

        pos = torch.arange(3, 6)
        for functional in (False, True):
            ep = torch.export.export(Counters(), (pos,), strict=False)
            if functional:
                ep = ep.run_decompositions({})
            want = Counters()(pos + 7)  # fresh buffers (a module of ep would write ep's)
            self.assertTrue(torch.equal(copy.deepcopy(ep).module()(pos + 7), want))
            self.assertEqual(drop_write_only(ep), ["length"], functional)
            self.assertNotIn("length", ep.state_dict)
            self.assertEqual(sorted(ep.state_dict), ["row", "total"])
            self.assertTrue(torch.equal(copy.deepcopy(ep).module()(pos + 7), want))
            after = ep.run_decompositions({})
            self.assertEqual(sorted(s.target for s in after.graph_signature.output_specs
                                    if s.target), ["row", "total"])
            got = after.module()(pos + 7)
            self.assertTrue(torch.equal(got, want), (functional, got, want))

    def test_linear_reference_op_matches_its_formula(self):
        import executorch_cuda  # noqa: F401

        torch.manual_seed(3)
        bf = torch.bfloat16
        x, w = torch.randn(2, 3, 64).to(bf), torch.randn(48, 64).to(bf)
        g, r = torch.randn(64).to(bf), torch.randn(2, 3, 24).to(bf)
        lin = torch.ops.et_cuda.et_linear
        torch.testing.assert_close(lin(x, w, None, None, None, 0, 0.0, 0.0, 0), F.linear(x, w))
        xf = x.float()
        xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        y = F.linear(g * xn.to(bf), w)
        want = F.silu(y[..., :24]) * y[..., 24:] + r
        torch.testing.assert_close(lin(x, w, None, g, r, 1, 1e-5, 0.0, 1), want)
        y = F.linear((xn * (1.0 + g.float())).to(bf), w)
        want = F.gelu(y[..., :24], approximate="tanh") * y[..., 24:]
        torch.testing.assert_close(lin(x, w, None, g, None, 2, 1e-5, 1.0, 2), want)


class _Norm(torch.nn.Module if torch is not None else object):
    """RMSNorm as HF Llama writes it (gemma=False) or as HF Gemma writes it."""

    def __init__(self, d, gemma=False):
        super().__init__()
        self.gemma = gemma
        self.weight = torch.nn.Parameter(torch.randn(d) * 0.1 + (0.0 if gemma else 1.0))

    def forward(self, x):
        xf = x.float()
        xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        if self.gemma:
            return (xn * (1.0 + self.weight.float())).type_as(x)
        return self.weight * xn.to(x.dtype)


def _layer_model(gemma=False, bad_norm=False, packed=None, post_norms=False):
    """Two hand-written decoder MLP blocks and a head: the patterns of fuse.py, and a
    look-alike norm (bad_norm: mean of |x| instead of x^2) that must not be folded.
    ``post_norms``: a norm of the attention's and of the MLP's result before each residual
    add (Gemma-2/3, OLMo-2).
    ``packed``: gate and up as halves of one linear ("chunk", "split", or "swapped": up is
    the first half, which the fused kernel's layout does not take)."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = _Norm(64, gemma)
            self.q = torch.nn.Linear(64, 64, bias=False)
            self.k = torch.nn.Linear(64, 32, bias=False)
            self.o = torch.nn.Linear(96, 64, bias=False)
            self.post = _Norm(64, gemma)
            self.gate = torch.nn.Linear(64, 128, bias=False)
            self.up = torch.nn.Linear(64, 128, bias=False)
            self.down = torch.nn.Linear(128, 64, bias=False)
            self.post_attn = _Norm(64, gemma)
            self.post_mlp = _Norm(64, gemma)
            if packed:
                self.gate_up = torch.nn.Linear(64, 256, bias=False)

        def forward(self, x):
            h = self.norm(x)
            if bad_norm:
                xf = x.float()
                h = (xf * torch.rsqrt(xf.abs().mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.norm.weight
            o = self.o(torch.cat([self.q(h), self.k(h)], -1))
            x = x + (self.post_attn(o) if post_norms else o)
            h = self.post(x)
            if packed:
                gu = self.gate_up(h)
                g, u = gu.split(128, -1) if packed == "split" else gu.chunk(2, -1)
                if packed == "swapped":
                    g, u = u, g
                return x + F.dropout(self.down(F.silu(g) * u), 0.1, training=False)
            act = F.gelu(self.gate(h), approximate="tanh") if gemma else F.silu(self.gate(h))
            d = self.down(act * self.up(h))
            return x + (self.post_mlp(d) if post_norms else d)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])
            self.norm = _Norm(64, gemma)
            self.head = torch.nn.Linear(64, 100, bias=False)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x))

    torch.manual_seed(5)
    return Model().to(torch.bfloat16).eval()


@unittest.skipIf(torch is None, "torch is not installed here (the GPU script runs these)")
class Fusions(unittest.TestCase):
    def _run(self, **kw):
        import executorch_cuda

        m = _layer_model(**kw)
        x = torch.randn(1, 5, 64).to(torch.bfloat16)
        t = torch.export.Dim("t", min=1, max=512)
        ep = torch.export.export(m, (x,), dynamic_shapes={"x": {1: t}}, strict=False)
        want = m(x)
        ep, report = executorch_cuda.prepare(ep, attention=False)
        got = ep.module()(x)
        return ep, report, got, want

    def test_llama_style_layers_fuse_and_stay_exact(self):
        ep, r, got, want = self._run()
        self.assertEqual((r["linear"], r["gated_mlp"], r["merged"], r["norm"], r["residual"]),
                         (13, 2, 4, 5, 4), r)
        lins = [n for n in ep.graph.nodes if n.op == "call_function" and "et_linear" in str(n.target)]
        self.assertEqual(len(lins), 2 * 4 + 1)
        # Unused weights leave the program; the concatenations join it.
        names = set(ep.state_dict)
        self.assertFalse(any(k.endswith(("q.weight", "gate.weight", "up.weight")) for k in names), names)
        self.assertEqual(sum(k.endswith(".gate_up") for k in names), 2, names)
        self.assertTrue(torch.equal(got, want))

    def test_gemma_style_norms_and_gelu_fuse_and_stay_exact(self):
        _, r, got, want = self._run(gemma=True)
        self.assertEqual((r["gated_mlp"], r["norm"], r["residual"]), (2, 5, 4), r)
        self.assertTrue(torch.equal(got, want))

    def test_norms_before_the_residual_adds_become_add_rmsnorm(self):
        for gemma in (True, False):
            ep, r, got, want = self._run(gemma=gemma, post_norms=True)
            # The O and down projections' adds now read a norm: no residual epilogue there.
            self.assertEqual((r["add_norm"], r["residual"], r["norm"]), (4, 0, 5), (gemma, r))
            # Each sum is read by one normed linear (the MLP's, the next layer's QKV, the
            # head's): the two ops become one, whose second result is the sum.
            self.assertEqual(r["add_norm_linear"], 4, r)
            ops = [n for n in ep.graph.nodes
                   if n.target == torch.ops.et_cuda.et_add_rmsnorm_linear.default]
            self.assertEqual(len(ops), 4)
            self.assertFalse([n for n in ep.graph.nodes if n.target == torch.ops.et_cuda.et_add_rmsnorm.default])
            self.assertEqual({n.args[3] for n in ops}, {2 if gemma else 1})
            self.assertTrue(torch.equal(got, want), gemma)
        _, r, _, _ = self._run(gemma=True)
        self.assertEqual(r["add_norm"], 0, r)

    def test_gate_and_up_as_halves_of_one_linear_fuse_in_place(self):
        for packed in ("chunk", "split"):
            _, r, got, want = self._run(packed=packed)
            self.assertEqual((r["gated_mlp"], r["residual"]), (2, 4), (packed, r))
            self.assertTrue(torch.equal(got, want), packed)
        _, r, got, want = self._run(packed="swapped")
        self.assertEqual(r["gated_mlp"], 0, r)
        self.assertTrue(torch.equal(got, want))

    def test_a_norm_look_alike_is_evaluated_and_left_alone(self):
        _, r, got, want = self._run(bad_norm=True)
        self.assertEqual(r["norm"], 3, r)  # the two post norms and the final one only
        self.assertTrue(torch.equal(got, want))

    def test_adds_of_a_tensor_and_a_symbolic_integer_are_no_residuals(self):
        # ExecuTorch's own Llama (examples/models/llama) adds its start position, an integer
        # read from a tensor, to an arange: the residual and add_norm passes met a SymInt
        # where they looked for a tensor (AttributeError before the fix).
        import executorch_cuda

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(64, 64, bias=False, dtype=torch.bfloat16)

            def forward(self, x, pos):
                start = pos[0].item()
                torch._check_is_size(start)
                torch._check(start < 64)
                idx = torch.arange(x.shape[1]) + start
                return self.a(x) + idx.to(x.dtype)[None, :, None]

        m, x, pos = M(), torch.randn(1, 5, 64).to(torch.bfloat16), torch.tensor([3])
        t = torch.export.Dim("t", min=1, max=32)
        ep = torch.export.export(m, (x, pos), dynamic_shapes={"x": {1: t}, "pos": None}, strict=False)
        ep, r = executorch_cuda.prepare(ep, attention=False)
        self.assertEqual((r["linear"], r["residual"], r.get("add_norm", 0)), (1, 0, 0), r)
        self.assertTrue(torch.equal(ep.module()(x, pos), m(x, pos)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
