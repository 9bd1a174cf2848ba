"""Tests of executorch_cuda.mask (classify_mask): the verdict on the masks of
static-cache decoders (python/tests/mask_models.py) and of tiny HF
``transformers`` decoders exported through TorchExportableModuleForDecoderOnlyLM.
Skipped, with the reason printed, where torch (or transformers) is not installed.
Run: python3 -m unittest discover -s python/tests -p 'test_mask.py' -v"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

try:
    import transformers
    from transformers.integrations import executorch as _hf_executorch  # noqa: F401
except Exception:  # noqa: BLE001 - missing, or too old to have the executorch integration
    transformers = None

if torch is None:
    print("test_mask: torch is not installed here; skipping the mask tests", file=sys.stderr)
elif transformers is None:
    print("test_mask: transformers (with integrations.executorch) is not installed here; "
          "skipping the HF model tests", file=sys.stderr)


def _verdicts(ep, positions="cache_position"):
    import mask_models as mm
    from executorch_cuda.mask import classify_mask

    sdpas, pos = mm.sdpa_masks(ep, positions)
    return [classify_mask(ep.graph_module, mask, pos, lmax, ep) for _, mask, lmax in sdpas]


@unittest.skipIf(torch is None, "torch is not installed here")
class HandWritten(unittest.TestCase):
    """Two-layer static-cache decoders exported with a dynamic T in 1..16, cache 32."""

    def check(self, mask, kind, window=None, reason=None, **kw):
        import mask_models as mm

        vs = _verdicts(mm.export_decoder(mask, **kw))
        self.assertEqual(len(vs), 2, vs)
        self.assertIs(vs[0], vs[1])  # one shared mask node, classified once
        v = vs[0]
        self.assertEqual((v.kind, v.window), (kind, window), v)
        if reason is not None:
            self.assertIn(reason, v.reason)
        return v

    def test_causal(self):
        v = self.check("causal", "causal")
        self.assertIn("T 1..16", v.reason)
        self.assertIn("32 of the 32 cache positions", v.reason)

    def test_causal_from_the_first_position_and_the_input_length_as_hf_builds_it(self):
        # The subgraph reads x.shape[1], which the export ties to the positions' length.
        self.check("causal", "causal", hf_positions=True)

    def test_causal_with_a_static_t(self):
        v = self.check("causal", "causal", dynamic=False)
        self.assertIn("T=3", v.reason)

    def test_four_future_positions_are_not_causal(self):
        self.check("future4", "other", reason="query 0 at position 0 sees key 4")
        self.check("future4", "other", reason="sees key 4", hf_positions=True)

    def test_a_padding_mask_input_is_not_causal(self):
        self.check("padding", "other", reason="reads the input 'attention_mask'")

    def test_sliding_windows(self):
        self.check("window5", "window", 5)
        self.check("window5_diff", "window", 5, hf_positions=True)
        self.check("additive_window5", "window", 5)

    def test_additive_float_masks(self):
        self.check("additive_inf", "causal")
        self.check("additive_min", "causal", hf_positions=True)
        self.check("alibi", "other", reason="additive mask value -0.5")

    def test_a_hole_in_the_middle_of_the_cache_is_found(self):
        self.check("hole", "other", reason="query 0 at position 20 sees key 0 but not key 10")

    def test_after_run_decompositions(self):
        import mask_models as mm

        vs = _verdicts(mm.export_decoder("window5").run_decompositions({}))
        self.assertEqual([(v.kind, v.window) for v in vs], [("window", 5)] * 2, vs)
        vs = _verdicts(mm.export_decoder("future4").run_decompositions({}))
        self.assertEqual([v.kind for v in vs], ["other"] * 2, vs)

    def test_bidirectional_window_and_per_head_masks(self):
        self.check("bidirectional3", "other", reason="sees key 3")
        self.check("heads_differ", "other", reason="differs across batch entries or heads")


@unittest.skipIf(torch is None, "torch is not installed here")
class WeirdInput(unittest.TestCase):
    def setUp(self):
        import mask_models as mm
        from executorch_cuda.mask import classify_mask

        self.classify = classify_mask
        self.ep = mm.export_decoder("causal")
        sdpas, self.pos = mm.sdpa_masks(self.ep)
        self.mask = sdpas[0][1]
        self.gm = self.ep.graph_module

    def kind(self, *args, reason=None):
        v = self.classify(*args)
        self.assertEqual(v.kind, "other", v)
        if reason:
            self.assertIn(reason, v.reason)

    def test_never_raises(self):
        x = next(n for n in self.gm.graph.nodes if n.name == "x")
        self.kind(self.gm, None, self.pos, 32, self.ep, reason="no mask node")
        self.kind(self.gm, self.mask, self.mask, 32, self.ep, reason="not a placeholder")
        self.kind(self.gm, self.mask, x, 32, self.ep, reason="not a 1-d int")
        self.kind(self.gm, self.mask, self.pos, 16, self.ep, reason="spans 32 keys")
        self.kind(self.gm, self.mask, self.pos, 0, self.ep, reason="lmax")
        self.kind(self.gm, x, self.pos, 32, self.ep, reason="reads the input 'x'")
        self.kind(None, self.mask, self.pos, 32, self.ep, reason="not a graph module")
        other = torch.fx.Graph()
        self.kind(torch.fx.GraphModule({}, other), self.mask, self.pos, 32, self.ep,
                  reason="not in this graph")

    def test_state_without_ep_is_named(self):
        import mask_models as mm

        ep = mm.export_hf("llama", 1, 16, 8) if transformers is not None else None
        if ep is None:
            self.skipTest("transformers is not installed here")
        ep = ep[0]
        sdpas, pos = mm.sdpa_masks(ep)
        v = self.classify(ep.graph_module, sdpas[0][1], pos, 16)  # the mask reads a constant
        self.assertEqual(v.kind, "other", v)
        self.assertIn("pass ep", v.reason)

    def test_a_write_before_the_mask_is_not_missed(self):
        # mask = arange(8) <= pos[:, None] + c after an add_(c, 4) that is not one of the
        # mask's ancestors: the graph computes the +4 mask, which must not look causal.
        aten = torch.ops.aten

        def build(write):
            g = torch.fx.Graph()
            pos = g.placeholder("pos")
            pos.meta["val"] = torch.zeros(3, dtype=torch.long)
            c = g.get_attr("c")
            if write:
                g.call_function(aten.add_.Tensor, (c, 4))
            col = g.call_function(aten.unsqueeze.default, (pos, 1))
            shifted = g.call_function(aten.add.Tensor, (col, c))
            keys = g.call_function(aten.arange.default, (8,))
            mask = g.call_function(aten.le.Tensor, (keys, shifted))
            g.output(mask)
            root = torch.nn.Module()
            root.register_buffer("c", torch.zeros((), dtype=torch.long))
            return torch.fx.GraphModule(root, g), mask, pos

        gm, mask, pos = build(True)
        self.kind(gm, mask, pos, 8, reason="writes to 'c' before the mask is computed")
        self.assertEqual(int(gm.c), 0)
        self.assertEqual(int(gm(torch.tensor([0, 1, 2])).sum()), 18)  # 5 + 6 + 7 keys: +4 mask
        gm, mask, pos = build(False)
        v = self.classify(gm, mask, pos, 8)
        self.assertEqual(v.kind, "causal", v)
        self.assertEqual(int(gm.c), 0)  # evaluated on a clone

    def test_the_subgraph_writes_to_a_clone_of_the_state(self):
        # c.copy_(pos[0]) inside the mask's subgraph, as HF's cumulative_length is written.
        aten = torch.ops.aten
        g = torch.fx.Graph()
        pos = g.placeholder("pos")
        pos.meta["val"] = torch.zeros(2, dtype=torch.long)
        c = g.get_attr("c")
        first = g.call_function(aten.select.int, (pos, 0, 0))
        cur = g.call_function(aten.copy_.default, (c, first))
        t = g.call_function(aten.arange.default, (2,))
        qpos = g.call_function(aten.add.Tensor, (t, cur))
        col = g.call_function(aten.unsqueeze.default, (qpos, 1))
        keys = g.call_function(aten.arange.default, (8,))
        mask = g.call_function(aten.le.Tensor, (keys, col))
        g.output(mask)
        root = torch.nn.Module()
        root.register_buffer("c", torch.full((), 3, dtype=torch.long))
        gm = torch.fx.GraphModule(root, g)
        v = self.classify(gm, mask, pos, 8)
        self.assertEqual(v.kind, "causal", v)
        self.assertEqual(int(gm.c), 3)


@unittest.skipIf(torch is None or transformers is None,
                 "torch or transformers (with integrations.executorch) is not installed here")
class HuggingFace(unittest.TestCase):
    """Tiny HF models exported through TorchExportableModuleForDecoderOnlyLM (static cache
    64, T in 1..32), as the issue's benchmark exports the real ones."""

    def test_llama_and_qwen3_are_causal(self):
        import mask_models as mm

        for family in ("llama", "qwen3"):
            ep, cfg = mm.export_hf(family, 2)
            vs = _verdicts(ep)
            self.assertEqual(len(vs), 2, family)
            for v in vs:
                self.assertEqual((v.kind, v.window), ("causal", None), (family, v))

    def test_gemma3_sliding_layers_are_windows_and_global_layers_causal(self):
        import mask_models as mm

        ep, cfg = mm.export_hf("gemma3", 3)
        consts = {k: v.clone() for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}
        vs = _verdicts(ep)
        self.assertEqual(len(vs), 3)
        for kind, v in zip(cfg.layer_types, vs):
            want = ("window", cfg.sliding_window) if kind == "sliding_attention" else ("causal", None)
            self.assertEqual((v.kind, v.window), want, (kind, v))
        self.assertEqual(cfg.layer_types.count("sliding_attention"), 2)
        # Evaluating the masks (which copy_ the first position into a constant) left the
        # program's constants as they were.
        for k, v in consts.items():
            self.assertTrue(torch.equal(ep.constants[k], v), k)


if __name__ == "__main__":
    unittest.main(verbosity=2)
