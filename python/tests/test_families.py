"""executorch_cuda.prepare() with its defaults on tiny decoders of many HF ``transformers``
families, each exported as a user exports it (TorchExportableModuleForDecoderOnlyLM, static
cache of 64, default strict mode, a dynamic prefill of 1..32 tokens, or T = 1 only, or a prefill
bound equal to the cache): the prepared program's logits equal the unprepared program's over a
prefill and decode steps (the et_cuda ops' reference implementations run on the CPU), and the
report shows which folds engaged. Families the folds do not know (interleaved or partial RoPE,
norms over all heads, RoPE in fp32) must keep their results with the plain ``et_attention``.

ExecuTorch's own Llama (``executorch.examples.models.llama``, from the ExecuTorch site of
``ET_CUDA_PY_SITE``, default ``.deps/py``) is checked the same way where it imports.

Run: python3 -m unittest discover -s python/tests -p 'test_families.py' -v
"""

import os
import sys
import unittest

try:
    import torch
except ImportError:  # the package's tests run without torch in CI
    torch = None

try:
    import transformers  # noqa: F401
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    HAVE_TF = True
except Exception:  # noqa: BLE001 - any import failure means the tests cannot run
    HAVE_TF = False

LAYERS = 2
# Head size 64, as the decode kernels take (64, 128, 256).
COMMON = dict(vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=LAYERS,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
NO_KV = {k: v for k, v in COMMON.items() if k != "num_key_value_heads"}
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "high_freq_factor": 4.0,
               "low_freq_factor": 1.0, "original_max_position_embeddings": 128}

# family: (config class name, its arguments, the report entries it must show)
FAMILIES = {
    # Llama-3.2: llama3 RoPE scaling, tied head.
    "llama32": ("LlamaConfig", dict(COMMON, head_dim=64, tie_word_embeddings=True,
                                    rope_theta=500000.0, rope_scaling=LLAMA3_ROPE),
                dict(rope=2, rope_packed=2, gated_mlp=2, residual=4)),
    # Biases on every projection: no gated-MLP fold (it takes no bias), RoPE still folds.
    "llama_bias": ("LlamaConfig", dict(COMMON, head_dim=64, attention_bias=True, mlp_bias=True),
                   dict(rope=2, rope_packed=2, gated_mlp=0, residual=4)),
    "mistral_window": ("MistralConfig", dict(COMMON, head_dim=64, sliding_window=8),
                       dict(window=2, rope=2, gated_mlp=2)),
    "qwen2": ("Qwen2Config", dict(COMMON), dict(rope=2, rope_packed=2, gated_mlp=2)),
    "qwen3": ("Qwen3Config", dict(COMMON, head_dim=64), dict(rope=2, rope_norm=2, gated_mlp=2)),
    # One layer without RoPE (no_rope_layer_interval): only the other one folds.
    "smollm3": ("SmolLM3Config", dict(COMMON, pad_token_id=0, no_rope_layer_interval=2),
                dict(rope=1, gated_mlp=2)),
    "gemma": ("GemmaConfig", dict(COMMON, head_dim=64), dict(rope=2, gated_mlp=2)),
    "gemma2": ("Gemma2Config", dict(COMMON, head_dim=64, sliding_window=8),
               dict(window=1, rope=2, add_norm=4, add_norm_linear=4)),
    "gemma3": ("Gemma3TextConfig", dict(COMMON, head_dim=64, sliding_window=8,
                                        layer_types=["sliding_attention", "full_attention"]),
               dict(window=1, rope=2, rope_norm=2, add_norm=4, add_norm_linear=4)),
    "phi3": ("Phi3Config", dict(COMMON, pad_token_id=0), dict(rope=2, gated_mlp=2, residual=4)),
    "starcoder2": ("Starcoder2Config", dict(COMMON), dict(rope=2, residual=4)),
    "granite": ("GraniteConfig", dict(COMMON, embedding_multiplier=12.0, residual_multiplier=0.22,
                                      attention_multiplier=0.015625, logits_scaling=8.0),
                dict(rope=2, gated_mlp=2)),
    "exaone4": ("Exaone4Config", dict(COMMON, head_dim=64), dict(rope=2, rope_norm=2, add_norm=4, add_norm_linear=4)),
    # Not folded: norms over all heads and RoPE in fp32 (OLMo-2), interleaved RoPE (Cohere,
    # Helium), partial RoPE (StableLM, GPT-NeoX, Phi-2, GLM).
    "olmo2": ("Olmo2Config", dict(COMMON), dict(rope=0, add_norm=4, add_norm_linear=4)),
    "cohere": ("CohereConfig", dict(COMMON), dict(rope=0)),
    "helium": ("HeliumConfig", dict(COMMON, head_dim=64), dict(rope=0)),
    "stablelm": ("StableLmConfig", dict(COMMON, partial_rotary_factor=0.25), dict(rope=0)),
    "gpt_neox": ("GPTNeoXConfig", dict(NO_KV, rotary_pct=0.25), dict(rope=0)),
    "phi": ("PhiConfig", dict(NO_KV, partial_rotary_factor=0.5), dict(rope=0)),
    "glm": ("GlmConfig", dict(COMMON, head_dim=64, pad_token_id=0), dict(rope=0)),
}


def _model(family, dtype, attn="sdpa"):
    import transformers as tf

    cls, kwargs, _ = FAMILIES[family]
    cfg = getattr(tf, cls)(**kwargs)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    make = tf.Gemma3ForCausalLM if cls == "Gemma3TextConfig" else tf.AutoModelForCausalLM.from_config
    model = make(cfg).eval().to(dtype)
    model.generation_config.cache_implementation = "static"
    return model


def _export(model, max_t, lmax=64):
    w = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=lmax)
    with torch.no_grad():
        if max_t == 1:
            return w.export(input_ids=torch.zeros(1, 1, dtype=torch.long),
                            cache_position=torch.arange(1))
        t = torch.export.Dim("t", min=1, max=max_t)
        return w.export(input_ids=torch.zeros(1, 4, dtype=torch.long), cache_position=torch.arange(4),
                        dynamic_shapes={"input_ids": {1: t}, "cache_position": {0: t}})


def _steps(max_t):
    """Token counts of a prefill, decode steps, a second prefill and one more step."""
    return (1,) * 10 if max_t == 1 else (7, 1, 1, 1, 5, 1)


class _Check(unittest.TestCase):
    """The check the test classes share (no tests of its own)."""

    def check(self, family, dtype=None, max_t=32, attn="sdpa"):
        import executorch_cuda

        dtype = dtype or torch.bfloat16
        model = _model(family, dtype, attn)
        ref, ep = _export(model, max_t), _export(model, max_t)
        ep, report = executorch_cuda.prepare(ep, positions="cache_position")
        # Every linear of the decoder is ours, every attention too, whatever the family.
        self.assertEqual(report["attention"], LAYERS, report)
        self.assertEqual(report["gemv"], report["linear"], report)
        self.assertGreaterEqual(report["linear"], 4 * LAYERS + 1, report)
        for key, want in FAMILIES[family][2].items():
            self.assertEqual(report.get(key, 0), want, f"{family}: {key} in {report}")
        m0, m1 = ref.module(), ep.module()
        torch.manual_seed(3)
        start = 0
        with torch.no_grad():
            for n in _steps(max_t):
                pos = torch.arange(start, start + n)
                start += n
                ids = torch.randint(0, 128, (1, n))
                a = m0(input_ids=ids, cache_position=pos).float()
                b = m1(input_ids=ids, cache_position=pos).float()
                err = ((a - b).abs().max() / a.abs().max()).item()
                self.assertLess(err, 0.03, f"{family}: logits at positions {pos.tolist()}")
        return report


@unittest.skipIf(torch is None or not HAVE_TF, "needs torch and transformers")
class Families(_Check):
    """One test per family of FAMILIES: bf16, prefill 1..32."""


def _case(family):
    def test(self):
        self.check(family)
    test.__name__ = f"test_{family}"
    test.__doc__ = f"{family}: {FAMILIES[family][2]}"
    return test


for _f in FAMILIES:
    setattr(Families, f"test_{_f}", _case(_f))


@unittest.skipIf(torch is None or not HAVE_TF, "needs torch and transformers")
class ExportShapes(_Check):
    """Other prefill bounds and dtypes than the families' runs."""

    def test_decode_only_exports(self):
        for family in ("llama32", "qwen3", "gemma3"):
            with self.subTest(family=family):
                self.check(family, max_t=1)

    def test_a_prefill_bound_equal_to_the_cache(self):
        for family in ("llama32", "mistral_window", "gemma3"):
            with self.subTest(family=family):
                self.check(family, max_t=64)

    def test_float16(self):
        for family in ("llama32", "qwen3", "gemma3"):
            with self.subTest(family=family):
                self.check(family, dtype=torch.float16)

    def test_eager_attention_ends_as_the_same_fused_ops(self):
        # attn_implementation="eager": q @ k^T * s + mask, softmax in fp32, @ v, as matmuls
        # (python/executorch_cuda/eager.py proves them an SDPA first).
        for family in ("llama32", "qwen3", "gemma3", "phi3"):
            with self.subTest(family=family):
                report = self.check(family, attn="eager")
                self.assertEqual(report["eager_attention"], LAYERS, report)

    def test_gemma2_soft_capping_keeps_its_eager_attention(self):
        import executorch_cuda

        ep = _export(_model("gemma2", torch.bfloat16, "eager"), 32)
        _, report = executorch_cuda.prepare(ep, positions="cache_position")
        self.assertEqual((report["eager_attention"], report.get("attention", 0)), (0, 0), report)
        self.assertEqual(report["gemv"], report["linear"], report)

    def test_float32_is_left_alone(self):
        import executorch_cuda

        ep = _export(_model("llama32", torch.float32), 32)
        _, report = executorch_cuda.prepare(ep, positions="cache_position")
        self.assertEqual((report.get("linear", 0), report.get("attention", 0)), (0, 0), report)
        self.assertEqual(len(report["skipped_attention"]), LAYERS, report)


def _executorch_llama():
    """ExecuTorch's Llama definition from its pip site (no native parts needed), or None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    site = os.environ.get("ET_CUDA_PY_SITE") or os.path.join(root, ".deps", "py")
    if site not in sys.path:
        sys.path.append(site)
    try:
        from executorch.examples.models.llama.llama_transformer import construct_transformer
        from executorch.examples.models.llama.model_args import ModelArgs
    except Exception:  # noqa: BLE001 - not installed, or another ExecuTorch layout
        return None
    return construct_transformer, ModelArgs


@unittest.skipIf(torch is None, "needs torch")
class ExecuTorchLlama(unittest.TestCase):
    """examples/models/llama's transformer (start position input, mask buffer narrowed at
    it, index_copy_ caches, GQA by repeat_interleave) with its Meta and HF RoPE: every linear
    rewritten and the logits equal; its attention keeps ExecuTorch's lowering (the mask reads
    the token count from the ids: report["skipped_attention"])."""

    def test_prepare_keeps_the_results(self):
        import executorch_cuda

        found = _executorch_llama()
        if found is None:
            self.skipTest("no executorch.examples.models.llama (set ET_CUDA_PY_SITE)")
        construct, model_args = found
        for hf_rope in (False, True):
            args = model_args(dim=256, n_layers=LAYERS, n_heads=4, n_kv_heads=2, vocab_size=128,
                              hidden_dim=512, max_seq_len=64, max_context_len=64,
                              use_kv_cache=True, enable_dynamic_shape=True, use_hf_rope=hf_rope,
                              generate_full_logits=True)
            torch.manual_seed(0)
            m = construct(args).eval().to(torch.bfloat16)
            t = torch.export.Dim("t", min=1, max=32)

            def export():
                with torch.no_grad():
                    return torch.export.export(
                        m, (torch.zeros(1, 4, dtype=torch.long),),
                        {"attn_options": {"input_pos": torch.tensor([0])}},
                        dynamic_shapes=({1: t}, {"input_pos": {0: torch.export.Dim.STATIC}}),
                        strict=False)

            ref, ep = export(), export()
            ep, report = executorch_cuda.prepare(ep, positions="attn_options_input_pos")
            self.assertEqual((report["linear"], report["gated_mlp"]), (7 * LAYERS + 1, LAYERS), report)
            self.assertEqual(len(report["skipped_attention"]), LAYERS, report)
            m0, m1 = ref.module(), ep.module()
            torch.manual_seed(3)
            start = 0
            with torch.no_grad():
                for n in (7, 1, 1, 5, 1):
                    ids, opts = torch.randint(0, 128, (1, n)), {"input_pos": torch.tensor([start])}
                    start += n
                    a, b = m0(ids, attn_options=opts), m1(ids, attn_options=opts)
                    a, b = (x[0] if isinstance(x, tuple) else x for x in (a, b))
                    self.assertTrue(torch.equal(a, b), (hf_rope, start))


if __name__ == "__main__":
    unittest.main()
