"""Test models for executorch_cuda.mask: small static-cache decoders whose only
difference is the attention mask, and tiny HF ``transformers`` decoders exported
the way ExecuTorch users export them. Importing this needs torch.

    /work/venv/bin/python python/tests/mask_models.py   prints the verdicts and how long
                                                        classifying each exported graph takes
"""

import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, os.path.dirname(HERE))

LMAX, HEADS, HD, HIDDEN, MAX_T = 32, 2, 16, 32, 16
NEG = torch.finfo(torch.float32).min


# name -> mask(p, j, extra) with p = positions[:, None], j = arange(LMAX); extra: the
# padding input where the model takes one.
MASKS = {
    "causal": lambda p, j, _: j <= p,
    "future4": lambda p, j, _: j <= p + 4,
    "window5": lambda p, j, _: (j <= p) & (j > p - 5),
    "window5_diff": lambda p, j, _: (j <= p) & ((p - j) < 5),
    "hole": lambda p, j, _: (j <= p) & ~((p == 20) & (j == 10)),
    "bidirectional3": lambda p, j, _: (p - j).abs() <= 3,
    "additive_inf": lambda p, j, _: torch.zeros(p.shape[0], LMAX).masked_fill(j > p, float("-inf")),
    "additive_min": lambda p, j, _: torch.where(j <= p, 0.0, NEG),
    "additive_window5": lambda p, j, _: torch.where((j <= p) & (j > p - 5), 0.0, NEG),
    "alibi": lambda p, j, _: torch.where(j <= p, -0.5 * (p - j), NEG),
    "padding": lambda p, j, pad: ((j <= p) & pad[:, None, :])[:, None],
    # head 0 causal, head 1 a window: [1, HEADS, T, LMAX]
    "heads_differ": lambda p, j, _: ((j <= p) & ((torch.arange(HEADS)[:, None, None] == 0)
                                                 | (j > p - 5)))[None],
}


class Decoder(torch.nn.Module):
    """Two attention layers over static caches that share one mask, as a decoder does."""

    def __init__(self, mask, hf_positions=False):
        super().__init__()
        self.mask, self.hf_positions = MASKS[mask], hf_positions
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, 3 * HEADS * HD) for _ in range(2))
        self.o = torch.nn.ModuleList(torch.nn.Linear(HEADS * HD, HIDDEN) for _ in range(2))
        for i in range(2):
            self.register_buffer(f"k{i}", torch.zeros(1, HEADS, LMAX, HD))
            self.register_buffer(f"v{i}", torch.zeros(1, HEADS, LMAX, HD))

    def forward(self, x, cache_position, attention_mask=None):
        b, t, _ = x.shape
        pos = cache_position
        if self.hf_positions:  # positions rebuilt from the first one and x's length, as HF does
            pos = cache_position[0] + torch.arange(x.shape[1])
        m = self.mask(pos[:, None], torch.arange(LMAX), attention_mask)
        m = m if m.dim() == 4 else m[None, None]
        for i in range(2):
            q, k, v = self.qkv[i](x).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
            kc, vc = getattr(self, f"k{i}"), getattr(self, f"v{i}")
            kc.index_copy_(2, cache_position, k)
            vc.index_copy_(2, cache_position, v)
            y = F.scaled_dot_product_attention(q, kc, vc, attn_mask=m)
            x = x + self.o[i](y.transpose(1, 2).reshape(b, t, HEADS * HD))
        return x


def export_decoder(mask, dynamic=True, hf_positions=False):
    torch.manual_seed(0)
    m = Decoder(mask, hf_positions).eval()
    x, pos = torch.randn(1, 3, HIDDEN), torch.tensor([4, 5, 6])
    args = (x, pos)
    ds = None
    if mask == "padding":
        args += (torch.ones(1, LMAX, dtype=torch.bool),)
    if dynamic:
        t = torch.export.Dim("t", min=1, max=MAX_T)
        ds = {"x": {1: t}, "cache_position": {0: t}}
        if mask == "padding":
            ds["attention_mask"] = None
    return torch.export.export(m, args, dynamic_shapes=ds, strict=False)


def sdpa_masks(ep, positions="cache_position"):
    """[(sdpa node, mask node, lmax)] in graph order, and the positions placeholder."""
    gm = ep.graph_module
    pos = next((n for n in gm.graph.nodes if n.op == "placeholder" and n.name == positions), None)
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target == torch.ops.aten.scaled_dot_product_attention.default:
            mask = n.args[3] if len(n.args) > 3 else n.kwargs.get("attn_mask")
            out.append((n, mask, int(n.args[1].meta["val"].shape[-2])))
    return out, pos


def hf_config(family, layers=2):
    """A tiny config of a HF family; Gemma-3 gets sliding layers (window 8) and a global one."""
    import transformers as tf

    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=256)
    if family == "llama":
        cfg = tf.LlamaConfig(**common)
    elif family == "qwen3":
        cfg = tf.Qwen3Config(**common)
    elif family == "gemma3":
        types = ["full_attention" if (i + 1) % 6 == 0 or i == layers - 1 else "sliding_attention"
                 for i in range(layers)]
        cfg = tf.Gemma3TextConfig(**common, sliding_window=8, layer_types=types)
    elif family == "phi3":  # one qkv_proj, one gate_up_proj (chunked), dropout in eval
        cfg = tf.Phi3Config(**common, pad_token_id=0)
    else:
        raise ValueError(family)
    cfg._attn_implementation = "sdpa"
    return cfg


def export_hf(family, layers=2, lmax=64, max_t=32, strict=False):
    """The model exported through TorchExportableModuleForDecoderOnlyLM with a static cache."""
    import transformers as tf
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    cfg = hf_config(family, layers)
    torch.manual_seed(0)
    if family == "gemma3":
        model = tf.Gemma3ForCausalLM(cfg).eval()
    else:
        model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    model.generation_config.cache_implementation = "static"
    w = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=lmax)
    t = torch.export.Dim("t", min=1, max=max_t)
    ids, cp = torch.zeros(1, 4, dtype=torch.long), torch.arange(4)
    ep = w.export(input_ids=ids, cache_position=cp,
                  dynamic_shapes={"input_ids": {1: t}, "cache_position": {0: t}}, strict=strict)
    return ep, cfg


def _timing():
    from executorch_cuda.mask import classify_mask

    for family, layers, lmax, max_t in (("llama", 16, 512, 128), ("qwen3", 28, 512, 128),
                                        ("gemma3", 26, 512, 128), ("gemma3", 6, 4096, 2048)):
        t0 = time.perf_counter()
        ep, cfg = export_hf(family, layers, lmax, max_t)
        t1 = time.perf_counter()
        sdpas, pos = sdpa_masks(ep)
        kinds = {}
        for _, mask, lm in sdpas:
            v = classify_mask(ep.graph_module, mask, pos, lm, ep)
            kinds[(v.kind, v.window)] = kinds.get((v.kind, v.window), 0) + 1
        t2 = time.perf_counter()
        print(f"{family}: {layers} layers, {len(ep.graph.nodes)} nodes, cache {lmax}, T 1..{max_t}: "
              f"export {t1 - t0:.1f} s, classifying {len(sdpas)} SDPA masks {1e3 * (t2 - t1):.1f} ms "
              f"-> {kinds}")


if __name__ == "__main__":
    _timing()
