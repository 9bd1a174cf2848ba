"""HuggingFace `transformers` decoders of issue 28 (item 6), random weights, nothing downloaded:
the models' own modeling code (LlamaForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM) built from
the Hub configs' field values (written out below), exported the way a user exports one for
ExecuTorch: `transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM` with
`generation_config.cache_implementation = "static"`, a static cache of `max_cache` positions and a
dynamic prefill length 1..max_t.

  hf_llama1b  Llama-3.2-1B    hidden 2048, 16 layers, 32/8 heads x 64, MLP 8192, vocab 128256,
                              tied, rope theta 500000 with llama3 scaling (factor 32)
  hf_qwen06b  Qwen3-0.6B      hidden 1024, 28 layers, 16/8 heads x 128, MLP 3072, vocab 151936,
                              tied, q/k RMSNorm, rope theta 1e6
  hf_gemma1b  Gemma-3-1B      hidden 1152, 26 layers, 4/1 heads x 256, MLP 6912 (GELU tanh), vocab
                              262144, tied, embeddings scaled by sqrt(hidden), four norms a layer
                              ((1 + w) weights), sliding window 512 on 5 of every 6 layers
                              (local rope theta 1e4, global 1e6), q/k RMSNorm

Weights: tests/models/real_init.py's recipe for a tied head (its docstring): the embedding rows
carry a planted permutation and layer 0's MLP swaps the halves, so the greedy token after t is
pi(t) with a wide top-1/top-2 margin (tokens of two implementations can be compared over 64 steps).
Gemma differs in three places, handled here: its norm weights are offsets (w = effective - 1);
its embedding is scaled by sqrt(hidden), so the swap must be that much larger; and its MLP output
goes through post_feedforward_layernorm before the residual add, which resets the swap's scale:
layer 0's post-norm weight on the swapped channels sets it instead (gamma * s * sqrt(h), see
_gemma_fixups). The tiny configs (tiny=True) keep every structural field (tying, q/k norm,
sliding window pattern, rope types) at small sizes, for the CPU tests.

Used by tests/models/decode_llama.py (--model hf_llama1b|hf_qwen06b|hf_gemma1b), which owns the
export, the reference and the manifest; `--mode margins` there checks the margins on the CPU.
"""

import math

import torch

import real_init

# config.json of meta-llama/Llama-3.2-1B, Qwen/Qwen3-0.6B, google/gemma-3-1b-it (the fields that
# shape the model; ids and bookkeeping as published)
CONFIGS = {
    "hf_llama1b": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "mlp_bias": False, "num_attention_heads": 32,
        "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "use_cache": True, "vocab_size": 128256,
    },
    "hf_qwen06b": {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
        "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
        "max_position_embeddings": 40960, "max_window_layers": 28, "num_attention_heads": 16,
        "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True, "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936,
    },
    "hf_gemma1b": {
        "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": [1, 106],
        "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 1152, "initializer_range": 0.02, "intermediate_size": 6912,
        "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 26,
        "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 512,
        "sliding_window_pattern": 6, "use_cache": True, "vocab_size": 262144,
    },
}
TITLES = {"hf_llama1b": "HF Llama-3.2-1B-shaped", "hf_qwen06b": "HF Qwen3-0.6B-shaped",
          "hf_gemma1b": "HF Gemma-3-1B-shaped"}
_SMALL = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "head_dim": 64, "vocab_size": 4096}
TINY = {
    "hf_llama1b": dict(_SMALL, num_hidden_layers=2, num_key_value_heads=2),
    "hf_qwen06b": dict(_SMALL, num_hidden_layers=2, num_key_value_heads=2),
    # six layers: five sliding (window 8, shorter than a test's positions) and one global
    "hf_gemma1b": dict(_SMALL, num_hidden_layers=6, num_key_value_heads=1, sliding_window=8,
                       query_pre_attn_scalar=64),
}
# real_init's tied-head recipe (the knobs of its qwen06b); Gemma's activation is GELU (tanh)
KNOBS = dict(std=0.02, s=4.0, gamma=5.0, bias=16.0, gate_z=4.0)
RECIPE_VERSION = 1


def hf_config(name, tiny=False):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    d = dict(CONFIGS[name], **(TINY[name] if tiny else {}))
    return CONFIG_MAPPING[d["model_type"]].from_dict(d)


def shape_cfg(name, cfg, max_cache):
    """The config in tests/models' own keys (bench/real_scale_table.py reads them), plus the
    attention pattern."""
    out = dict(vocab=cfg.vocab_size, hidden=cfg.hidden_size, layers=cfg.num_hidden_layers,
               heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
               ffn=cfg.intermediate_size, max_seq=max_cache, tied=bool(cfg.tie_word_embeddings),
               qk_norm=name != "hf_llama1b", rope=dict(cfg.rope_parameters or {}))
    if getattr(cfg, "layer_types", None) and getattr(cfg, "sliding_window", None):
        out["sliding_window"] = cfg.sliding_window
        out["layer_types"] = {t: list(cfg.layer_types).count(t) for t in sorted(set(cfg.layer_types))}
    return out


def knobs(name):
    return dict(KNOBS, act="gelu_tanh") if name == "hf_gemma1b" else dict(KNOBS)


def build(name, backend, tiny=False):
    """float32 CPU module (the HF CausalLM, eval mode) with real_init's weights drawn from
    backend (decode_llama.TorchBackend: one seeded CPU generator)."""
    from transformers import AutoModelForCausalLM

    cfg = hf_config(name, tiny)
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()
    if not cfg.tie_word_embeddings or m.lm_head.weight.data_ptr() != m.model.embed_tokens.weight.data_ptr():
        raise RuntimeError(f"{name}: expected a head tied to the embedding")
    params = dict(m.named_parameters())  # the tied head is listed once, as the embedding
    strip = {n: n[len("model."):] if n.startswith("model.") else n for n in params}
    shapes = [(strip[n], tuple(p.shape)) for n, p in params.items()]
    if shapes[0][0] != "embed_tokens.weight":
        raise RuntimeError(f"{name}: the embedding is not the first parameter ({shapes[0][0]})")
    rcfg = {"hidden": cfg.hidden_size, "vocab": cfg.vocab_size}
    back = {v: k for k, v in strip.items()}
    gemma = name == "hf_gemma1b"
    with torch.no_grad():
        for short, w in real_init.weights_for(rcfg, True, knobs(name), shapes, backend):
            if gemma and "norm" in short:
                w = w - 1.0  # Gemma's RMSNorm multiplies by (1 + weight)
            params[back[short]].copy_(w)
            del w
        if gemma:
            _gemma_fixups(m, cfg)
    m.generation_config.cache_implementation = "static"
    return m


def _gemma_fixups(m, cfg):
    """Layer 0's post_feedforward_layernorm: the swap's output y has y_j ~ gamma*s*u_j on the
    first h channels and little elsewhere, so the norm makes it u_j / sqrt(h/d); an effective
    weight of gamma*s*sqrt(h) there gives gamma*s*sqrt(d)*u_j, the swap real_init plants for an
    unscaled embedding, times Gemma's embedding scale sqrt(d)."""
    k = KNOBS
    d = cfg.hidden_size
    h = (d - 2) // 2
    w = m.model.layers[0].post_feedforward_layernorm.weight
    w[:h] = k["gamma"] * k["s"] * math.sqrt(h) - 1.0


class Decoder(torch.nn.Module):
    """forward(input_ids [1, T], cache_position [T]) -> logits [1, T, V], the exported module
    (TorchExportableModuleForDecoderOnlyLM's inner module with its static cache) called
    positionally, as suite_lib.greedy and decode_llama.decode_loop call a decoder."""

    def __init__(self, name, hf_model, max_cache, device):
        super().__init__()
        from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

        self.name = name
        self.hf = hf_model
        self.exportable = TorchExportableModuleForDecoderOnlyLM(hf_model, batch_size=1, max_cache_len=max_cache,
                                                                device=torch.device(device))
        self.inner = self.exportable.model
        self.max_cache = max_cache

    def forward(self, input_ids, cache_position):
        return self.inner(input_ids=input_ids, cache_position=cache_position)

    def export(self, prompt, max_t, strict=True):
        """torch.export through the wrapper's own export(), T dynamic in 1..max_t."""
        T = torch.export.Dim("T", min=1, max=max_t)
        return self.exportable.export(input_ids=prompt,
                                      cache_position=torch.arange(prompt.shape[1], device=prompt.device),
                                      dynamic_shapes={"input_ids": {1: T}, "cache_position": {0: T}}, strict=strict)


def make(name, backend, max_cache, dtype, device, tiny=False, round_to=None):
    """The Decoder of a fresh model (zero cache) in dtype on device; round_to: the weights
    rounded to that dtype first (the margin check: float32 arithmetic on bf16 weights)."""
    m = build(name, backend, tiny)
    if round_to is not None:
        m = m.to(round_to)
    return Decoder(name, m.to(dtype).to(device), max_cache, device)
