"""The RoPE + KV-cache write fold (``executorch_cuda.rope``): proven on the graph, results and
caches equal to the eager program's, refused for look-alikes; on a hand-written decoder and on
tiny HF ``transformers`` decoders (Llama, Qwen3, Gemma-3) exported as users export them."""

import importlib.util
import operator
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the package's own tests run without torch (test_package.py)
    torch = None

HAVE_TF = importlib.util.find_spec("transformers") is not None


def _rot(x, split):
    return torch.cat((-x[..., split:], x[..., :split]), -1)


def _decoder(split=None, lmax=32, heads=4, kv=2, hd=64, hidden=128, put=False):
    """One attention layer with RoPE and index_copy_ caches (``put``: written as
    ``cache[:, :, pos] = x``, which exports as index_put_); ``split`` moves the rotation's cut
    off the half (a look-alike the graph's shape cannot tell apart)."""
    split = hd // 2 if split is None else split

    class Dec(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(hidden, heads * hd, bias=False)
            self.k = torch.nn.Linear(hidden, kv * hd, bias=False)
            self.v = torch.nn.Linear(hidden, kv * hd, bias=False)
            self.o = torch.nn.Linear(heads * hd, hidden, bias=False)
            self.register_buffer("k_cache", torch.zeros(1, kv, lmax, hd))
            self.register_buffer("v_cache", torch.zeros(1, kv, lmax, hd))
            self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, hd, 2).float() / hd))

        def forward(self, x, cache_position):
            b, t, _ = x.shape
            f = cache_position.float()[:, None] * self.inv_freq[None]
            emb = torch.cat((f, f), -1)
            cos, sin = emb.cos().to(x.dtype)[None, None], emb.sin().to(x.dtype)[None, None]
            q = self.q(x).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(x).view(b, t, kv, hd).transpose(1, 2)
            v = self.v(x).view(b, t, kv, hd).transpose(1, 2)
            q = q * cos + _rot(q, split) * sin
            k = k * cos + _rot(k, split) * sin
            if put:
                self.k_cache[:, :, cache_position] = k
                self.v_cache[:, :, cache_position] = v
            else:
                self.k_cache.index_copy_(2, cache_position, k)
                self.v_cache.index_copy_(2, cache_position, v)
            kk = self.k_cache.repeat_interleave(heads // kv, dim=1)
            vv = self.v_cache.repeat_interleave(heads // kv, dim=1)
            mask = torch.arange(lmax) <= cache_position[:, None]
            y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask[None, None])
            return self.o(y.transpose(1, 2).reshape(b, t, heads * hd))

    torch.manual_seed(0)
    return Dec().to(torch.bfloat16)


def _export(m, hidden=128):
    t = torch.export.Dim("t", min=1, max=16)
    x, pos = torch.randn(1, 4, hidden, dtype=torch.bfloat16), torch.arange(4)
    return torch.export.export(m, (x, pos), dynamic_shapes={"x": {1: t}, "cache_position": {0: t}},
                               strict=False)


def _steps(prompt=5, decode=4):
    """(input length, positions) of a prefill then single-token steps."""
    out, p = [], 0
    for n in [prompt] + [1] * decode:
        out.append(torch.arange(p, p + n))
        p += n
    return out


def _targets(ep):
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


@unittest.skipIf(torch is None, "torch is not installed here (the GPU script runs these)")
class Fold(unittest.TestCase):
    def test_hand_written_decoder_folds_and_keeps_results_and_caches(self):
        self._folds_and_keeps_results_and_caches(put=False)

    def test_caches_written_by_index_put_fold_too(self):
        self._folds_and_keeps_results_and_caches(put=True)

    def _folds_and_keeps_results_and_caches(self, put):
        import executorch_cuda

        want_m, ep = _decoder(put=put), _export(_decoder(put=put))
        self.assertIn("aten.index_put_.default" if put else "aten.index_copy_.default",
                      _targets(ep))
        ep, report = executorch_cuda.prepare(ep, positions="cache_position")
        self.assertEqual(report["rope"], 1, report)
        self.assertEqual(report["rope_skipped"], [], report)
        names = _targets(ep)
        # q, k and v come from the merged QKV linear: the fold reads its result packed.
        self.assertEqual(report["rope_packed"], 1, report)
        self.assertIn("et_cuda.et_attention_rope_qkv.default", names)
        self.assertNotIn("et_cuda.et_attention_rope.default", names)
        for gone in ("aten.index_copy_.default", "aten.index_put_.default", "aten.neg.default"):
            self.assertNotIn(gone, names)
        got_m = ep.module()
        torch.manual_seed(1)
        for pos in _steps():
            x = torch.randn(1, len(pos), 128, dtype=torch.bfloat16)
            torch.testing.assert_close(got_m(x, pos).float(), want_m(x, pos).float(),
                                       atol=3e-2, rtol=3e-2)
        state = dict(got_m.named_buffers())
        for name in ("k_cache", "v_cache"):
            torch.testing.assert_close(state[name].float(), getattr(want_m, name).float(),
                                       atol=2e-2, rtol=2e-2)
        # Functionalized as ExecuTorch's to_edge does it: the caches become buffer mutations of
        # the op (written in place by Inductor, not copied).
        dec = ep.run_decompositions({})
        self.assertIn("auto_functionalized_v2", " ".join(_targets(dec)))
        muts = sorted(s.target for s in dec.graph_signature.output_specs
                      if s.kind.name == "BUFFER_MUTATION")
        self.assertEqual(muts, ["k_cache", "v_cache"])

    def test_a_rotation_cut_off_the_half_is_evaluated_and_left_alone(self):
        import executorch_cuda

        want_m, ep = _decoder(split=16), _export(_decoder(split=16))
        ep, report = executorch_cuda.prepare(ep, positions="cache_position")
        self.assertEqual(report["rope"], 0, report)
        self.assertEqual(report["attention"], 1, report)
        self.assertIn("do not compute", " ".join(report["rope_skipped"]), report)
        self.assertIn("aten.index_copy_.default", _targets(ep))
        pos = torch.arange(3)
        x = torch.randn(1, 3, 128, dtype=torch.bfloat16)
        torch.testing.assert_close(ep.module()(x, pos).float(), want_m(x, pos).float(),
                                   atol=3e-2, rtol=3e-2)

    def test_rope_false_keeps_the_unfused_attention(self):
        import executorch_cuda

        ep, report = executorch_cuda.prepare(_export(_decoder()), positions="cache_position",
                                             rope=False)
        self.assertEqual((report["rope"], report["attention"]), (0, 1), report)
        self.assertIn("et_cuda.et_attention.default", _targets(ep))

    def test_the_reference_op_writes_rotated_keys_at_the_positions(self):
        from executorch_cuda import ops

        torch.manual_seed(2)
        q, k, v = (torch.randn(1, h, 2, 64, dtype=torch.bfloat16) for h in (4, 2, 2))
        kc, vc = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16), torch.zeros(1, 2, 8, 64,
                                                                           dtype=torch.bfloat16)
        cos, sin = (torch.randn(1, 1, 2, 64, dtype=torch.bfloat16) for _ in range(2))
        y = torch.ops.et_cuda.et_attention_rope(q, k, v, kc, vc, torch.tensor([3]), cos, sin,
                                                0.125, 0)
        kr = ops._rope_ref(k, cos, sin)
        torch.testing.assert_close(kc[:, :, 3:5], kr)
        torch.testing.assert_close(vc[:, :, 3:5], v)
        self.assertEqual(int(kc[:, :, :3].abs().sum()) + int(kc[:, :, 5:].abs().sum()), 0)
        self.assertEqual(tuple(y.shape), (1, 4, 2, 64))

    def test_the_packed_op_reads_q_k_v_where_they_lie_in_any_order(self):
        from executorch_cuda import ops  # noqa: F401  (registers the ops)

        torch.manual_seed(4)
        d, hq, hkv, t = 64, 4, 2, 3
        # Columns: v, then q, then k (not the merge's order), in a wider row.
        qkv = torch.randn(1, t, (hq + 2 * hkv) * d + 8, dtype=torch.bfloat16)
        v_off, q_off, k_off = 0, hkv * d, (hq + hkv) * d
        q, k, v = (qkv[..., o:o + h * d].unflatten(-1, (h, d)).transpose(1, 2)
                   for o, h in ((q_off, hq), (k_off, hkv), (v_off, hkv)))
        cos, sin = (torch.randn(1, 1, t, d, dtype=torch.bfloat16) for _ in range(2))
        pos = torch.tensor([5])
        caches = [torch.randn(1, hkv, 16, d, dtype=torch.bfloat16) for _ in range(2)]
        mine = [c.clone() for c in caches]
        want = torch.ops.et_cuda.et_attention_rope(q, k, v, caches[0], caches[1], pos, cos, sin,
                                                   0.125, 0)
        got = torch.ops.et_cuda.et_attention_rope_qkv(qkv, mine[0], mine[1], pos, cos, sin, 0.125,
                                                      0, hq, q_off, k_off, v_off)
        torch.testing.assert_close(got, want)
        for a, b in zip(mine, caches):
            torch.testing.assert_close(a, b)


@unittest.skipIf(torch is None or not HAVE_TF, "needs torch and transformers")
class HfFamilies(unittest.TestCase):
    """Tiny HF decoders (head size 64) exported through TorchExportableModuleForDecoderOnlyLM
    (strict, as tests/models/hf_models.py exports), every layer folded, tokens' logits as the
    unprepared program's over a prefill and decode steps."""

    def check(self, family):
        import transformers as tf
        from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

        import executorch_cuda
        import mask_models as mm

        cfg = mm.hf_config(family, 2)
        cfg.head_dim, cfg.hidden_size = 64, 256
        torch.manual_seed(0)
        make = tf.Gemma3ForCausalLM if family == "gemma3" else tf.AutoModelForCausalLM.from_config
        model = make(cfg).eval().to(torch.bfloat16)
        model.generation_config.cache_implementation = "static"

        def export():
            w = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=64)
            t = torch.export.Dim("t", min=1, max=32)
            ids, cp = torch.zeros(1, 4, dtype=torch.long), torch.arange(4)
            with torch.no_grad():
                return w.export(input_ids=ids, cache_position=cp, strict=True,
                                dynamic_shapes={"input_ids": {1: t}, "cache_position": {0: t}})

        ref, ep = export(), export()
        ep, report = executorch_cuda.prepare(ep, positions="cache_position")
        self.assertEqual((report["rope"], report["rope_skipped"]), (2, []), report)
        # One cos and one sin node for every layer, and inputs taken as they lie: AOTInductor
        # then stores them once and passes views (no copy kernels per layer).
        # Every fold reads the fused QKV result (Phi-3: its own packed projection) as it lies.
        self.assertEqual(report["rope_packed"], 2, report)
        folds = [n for n in ep.graph.nodes
                 if n.target == torch.ops.et_cuda.et_attention_rope_qkv.default]
        self.assertEqual(len(folds), 2)
        for n in folds:
            src = n.args[0]
            if src.target is operator.getitem:  # y of et_add_rmsnorm_linear (Gemma's layers after the first)
                self.assertEqual((src.args[0].target, src.args[1]),
                                 (torch.ops.et_cuda.et_add_rmsnorm_linear.default, 0), src)
            else:
                self.assertEqual(src.target, torch.ops.et_cuda.et_linear.default, src)
        # (Gemma-3's sliding layers have a RoPE of their own.)
        self.assertEqual(len({(n.args[4], n.args[5]) for n in folds}), 2 if family == "gemma3" else 1)
        for op in (torch.ops.et_cuda.et_attention_rope, torch.ops.et_cuda.et_attention_rope_qkv):
            self.assertIn(torch.Tag.flexible_layout, op.default.tags)
        m0, m1 = ref.module(), ep.module()
        torch.manual_seed(3)
        with torch.no_grad():
            for pos in _steps(7, 4):
                ids = torch.randint(0, 128, (1, len(pos)))
                a = m0(input_ids=ids, cache_position=pos).float()
                b = m1(input_ids=ids, cache_position=pos).float()
                torch.testing.assert_close(b, a, atol=4e-2, rtol=4e-2)
        return report

    def test_llama(self):
        report = self.check("llama")
        self.assertEqual((report["rope_norm"], report["add_norm"]), (0, 0), report)

    def test_qwen3_with_its_heads_norms_before_the_transpose(self):
        self.assertEqual(self.check("qwen3")["rope_norm"], 2)

    def test_phi3_packed_qkv_and_gate_up(self):
        # The rotation is cat([rope(q[..., :64]), q[..., 64:]]) with nothing passed through;
        # gate and up are halves of one linear; the residual adds read dropout(p=0, eval).
        report = self.check("phi3")
        self.assertEqual((report["gated_mlp"], report["residual"]), (2, 4), report)

    def test_gemma3_sliding_and_global_layers_with_heads_norms_after_the_transpose(self):
        report = self.check("gemma3")
        self.assertEqual((report["window"], report["rope_norm"]), (1, 2), report)
        # Its norms after the attention and the MLP, before the residual adds.
        self.assertEqual(report["add_norm"], 4, report)


if __name__ == "__main__":
    unittest.main()
