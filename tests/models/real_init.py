"""Weights of the real-scale decoders (tests/models/decode_llama.py, issue 21), written once for
two array libraries: decode_llama.py fills its torch module with them, margin_check.py runs the
same recipe with numpy (no torch there) and checks the greedy margins. Pure Python: the array
library comes in as a small backend (randn, randperm, zeros, arange) whose arrays support
slicing, integer-array indexing, assignment into slices and scalar arithmetic (torch and numpy
both do).

Why not plain random weights: with a vocabulary of 128K-152K, random Gaussian logits of ~100 tie
in bf16 (resolution 0.5 there) at almost every step, so no two implementations agree on 128
greedy tokens. The recipe gives every step one clear winner, a fixed permutation of the current
token, on top of the random layers:

  untied head (llama1b): embedding E = s*U (U ~ N(0,1)), so the residual stream stays aligned
      with the current token's row through the random layers (each adds O(1) per coordinate);
      head row v = c*U[perm[v]] + noise*N(0,1): the logit of v is largest where perm[v] is the
      current token. c = 4a/sqrt(d) keeps the logits O(100).
  tied head (qwen06b): the head IS the embedding, so E_t alone would predict t again. Each row is
      E_j = s*[u_j, u_pi(j), B/s, r_j] (halves of h = (d-2)//2 channels, a constant 'bias'
      channel, one random channel). Layer 0's MLP holds a swap: h of its units have the gate
      reading only the bias channel (silu of a constant: a constant positive factor), the up
      projection reading the second half, the down projection writing the first half, so
      x_1 ~ E_t + gamma*s*[u_pi(t), 0, ...]. Then logit(pi(t)) ~ gamma*s^2*h against
      logit(t) ~ s^2*2h: pi(t) wins when gamma > 2 (the bias channel adds the same to all).
The rest (norm weights 1+0.1*N, linears N(0, std^2)) is random as before; greedy decoding walks
the permutation's cycle (long for a random permutation of 128K), so the tokens vary.
"""

import math

LLAMA1B = dict(vocab=128256, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, ffn=8192,
               max_seq=1024, qk_norm=False, rope_theta=500000.0)
QWEN06B = dict(vocab=151936, hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072,
               max_seq=1024, qk_norm=True, rope_theta=1000000.0)

# name: config, tied embeddings, recipe knobs (see the module docstring)
MODELS = {
    "llama1b": (LLAMA1B, False, dict(std=0.02, s=4.0, a=0.5, noise=0.01)),
    "qwen06b": (QWEN06B, True, dict(std=0.02, s=4.0, gamma=5.0, bias=16.0, gate_z=4.0)),
}
RECIPE_VERSION = 2  # part of decode_llama.py's cache key through this file's bytes


def param_shapes(cfg, tied):
    """(name, shape) of Qwen3Decoder(cfg).named_parameters(), in its order (the head last;
    a tied model still lists it: the recipe yields the embedding's array for it)."""
    d, f, hd = cfg["hidden"], cfg["ffn"], cfg["head_dim"]
    out = [("embed_tokens.weight", (cfg["vocab"], d))]
    for i in range(cfg["layers"]):
        p = f"layers.{i}."
        out.append((p + "input_layernorm.weight", (d,)))
        out += [(p + "self_attn.q_proj.weight", (cfg["heads"] * hd, d)),
                (p + "self_attn.k_proj.weight", (cfg["kv_heads"] * hd, d)),
                (p + "self_attn.v_proj.weight", (cfg["kv_heads"] * hd, d)),
                (p + "self_attn.o_proj.weight", (d, cfg["heads"] * hd))]
        if cfg.get("qk_norm", True):
            out += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        out += [(p + "post_attention_layernorm.weight", (d,)),
                (p + "gate_proj.weight", (f, d)), (p + "up_proj.weight", (f, d)), (p + "down_proj.weight", (d, f))]
    out += [("norm.weight", (d,)), ("lm_head.weight", (cfg["vocab"], d))]
    return out


def swap_silu(z):
    return z / (1.0 + math.exp(-z))


def swap_act(k, z):
    """The MLP's activation at z: SiLU, or (k["act"] == "gelu_tanh", Gemma) GELU's tanh form."""
    if k.get("act", "silu") == "gelu_tanh":
        return 0.5 * z * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))
    return swap_silu(z)


def weights(model, names_shapes, B):
    """Yields (name, array) for each (name, shape) in names_shapes (the embedding first, the
    head last), float32 arrays of backend B. For a tied model the head's array is the
    embedding's (the caller ties them)."""
    cfg, tied, k = MODELS[model]
    return weights_for(cfg, tied, k, names_shapes, B)


def weights_for(cfg, tied, k, names_shapes, B):
    """weights() for a config and knobs given directly (tests/models/hf_models.py: the HF
    shapes, their parameter names without the "model." prefix)."""
    d, V = cfg["hidden"], cfg["vocab"]
    s, std = k["s"], k["std"]
    E = U = None
    head = None
    for name, shape in names_shapes:
        if name == "lm_head.weight":
            head = (name, shape)
            continue
        if name == "embed_tokens.weight":
            if not tied:
                U = B.randn((V, d))
                E = U * s
            else:
                h = (d - 2) // 2
                u = B.randn((V, h))
                perm = B.randperm(V)
                E = B.zeros((V, d))
                E[:, :h] = u * s
                E[:, h:2 * h] = u[perm] * s
                E[:, 2 * h] = k["bias"]
                E[:, 2 * h + 1:] = B.randn((V, d - 2 * h - 1)) * s
                del u
            yield name, E
        elif "norm" in name:
            yield name, B.randn(shape) * 0.1 + 1.0
        else:
            W = B.randn(shape) * std
            if tied and name.startswith("layers.0.") and name.endswith(("gate_proj.weight", "up_proj.weight", "down_proj.weight")):
                W = _swap(name, W, d, k, B)
            yield name, W
    if head is not None:
        if tied:
            yield head[0], E
        else:
            perm = B.randperm(V)
            c = 4.0 * k["a"] / math.sqrt(d)
            H = U[perm] * c
            if k["noise"]:
                H += B.randn((V, d)) * k["noise"]
            yield head[0], H


def _swap(name, W, d, k, B):
    """Layer 0's MLP units 0..h-1: out[j] += gamma*s*x[h+j]/rms(x) for the first half j < h
    (see the module docstring). The post-attention norm in front is 1+0.1*N per channel: its
    weights on the bias channel and the second half scale the swap a little, per channel."""
    h = (d - 2) // 2
    j = B.arange(h)
    s, rms = k["s"], k["s"]  # rms(x) of layer 0's residual ~ s (the embedding dominates it)
    bias_n = k["bias"] / rms  # the bias channel after the norm
    g = k["gate_z"] / bias_n  # gate pre-activation ~ gate_z: silu of it ~ gate_z
    if name.endswith("gate_proj.weight"):  # [ffn, d]: unit j reads the bias channel only
        W[:h] = 0.0
        W[:h, 2 * h] = g
    elif name.endswith("up_proj.weight"):  # unit j reads x[h+j] only
        W[:h] = 0.0
        W[j, h + j] = 1.0
    else:  # down [d, ffn]: unit j writes channel j only
        W[:, :h] = 0.0
        # x[h+j] after the norm is s*u/rms ~ u; the output should be gamma*s*u
        W[j, j] = k["gamma"] * s / swap_act(k, k["gate_z"])
    return W
