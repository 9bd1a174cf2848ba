"""Greedy margins of the real-scale decoders (tests/models/decode_llama.py) without torch: numpy
only, at the real sizes. Builds the weights with the same recipe (real_init.py; numpy's random
numbers, not torch's: the same statistics, not the same weights), mirrors Qwen3Decoder's forward
(RMSNorm, RoPE, GQA attention with a causal KV cache, SwiGLU, q/k norm for qwen06b), runs a
--prompt-len token prompt and --steps greedy steps, and reports the smallest top-1/top-2 margin,
absolute and in bf16 ulps of the top logit, and the number of distinct tokens.

  python3 tests/models/margin_check.py [--model llama1b|qwen06b|all] [--bf16] [--ablate] [--json F]

--bf16 rounds the weights to bf16 and every op's output to bf16 (eager PyTorch bf16 rounds after
each op; accumulation stays float32), and also compares its tokens with the float32 run's.
--ablate also runs with every random layer's attention and MLP skipped (the swap MLP of the tied
model kept): how many tokens the layers decide. Memory: ~7 GB for llama1b (float32 weights).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_init  # noqa: E402


class NumpyBackend:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def randn(self, shape):
        return self.rng.standard_normal(shape, dtype=np.float32)

    def randperm(self, n):
        return self.rng.permutation(n)

    def zeros(self, shape):
        return np.zeros(shape, np.float32)

    def arange(self, n):
        return np.arange(n)


def bf16(x):
    """Round float32 to the nearest bf16 (ties to even), kept in float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return r.view(np.float32)


def ulp_bf16(v):
    v = abs(float(v))
    return 2.0 ** (math.floor(math.log2(v)) - 7) if v > 0 else 2.0 ** -133


class Model:
    def __init__(self, model, seed, round_bf16):
        self.cfg, self.tied, _ = real_init.MODELS[model]
        self.r = bf16 if round_bf16 else (lambda a: a)
        self.w = {}
        shapes = real_init.param_shapes(self.cfg, self.tied)
        for name, arr in real_init.weights(model, shapes, NumpyBackend(seed)):
            if self.tied and name == "lm_head.weight":
                self.w[name] = self.w["embed_tokens.weight"]
                continue
            self.w[name] = bf16(arr) if round_bf16 else np.ascontiguousarray(arr, dtype=np.float32)
        c = self.cfg
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
        f = np.outer(np.arange(c["max_seq"], dtype=np.float32), inv)
        emb = np.concatenate([f, f], axis=-1)
        self.cos, self.sin = self.r(np.cos(emb).astype(np.float32)), self.r(np.sin(emb).astype(np.float32))
        self.reset()

    def reset(self):
        c = self.cfg
        self.kc = [np.zeros((c["kv_heads"], c["max_seq"], c["head_dim"]), np.float32) for _ in range(c["layers"])]
        self.vc = [np.zeros_like(k) for k in self.kc]

    def norm(self, x, w, eps=1e-6):
        x32 = x.astype(np.float32)
        n = x32 / np.sqrt((x32 * x32).mean(-1, keepdims=True) + eps)
        return self.r(w * self.r(n))

    def lin(self, x, name):
        return self.r(x @ self.w[name].T)

    def rope(self, x, pos):  # x [H, T, hd]
        h = x.shape[-1] // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
        return self.r(self.r(x * self.cos[pos]) + self.r(rot * self.sin[pos]))

    def forward(self, ids, pos, ablate=False):
        """ids, pos: int arrays [T]; returns the last position's logits (float32)."""
        c, r = self.cfg, self.r
        H, KV, hd = c["heads"], c["kv_heads"], c["head_dim"]
        T = len(ids)
        x = self.w["embed_tokens.weight"][ids]
        for i in range(c["layers"]):
            p = f"layers.{i}."
            if not ablate:
                hn = self.norm(x, self.w[p + "input_layernorm.weight"])
                q = self.lin(hn, p + "self_attn.q_proj.weight").reshape(T, H, hd)
                k = self.lin(hn, p + "self_attn.k_proj.weight").reshape(T, KV, hd)
                v = self.lin(hn, p + "self_attn.v_proj.weight").reshape(T, KV, hd)
                if c.get("qk_norm", True):
                    q = self.norm(q, self.w[p + "self_attn.q_norm.weight"])
                    k = self.norm(k, self.w[p + "self_attn.k_norm.weight"])
                q = self.rope(q.transpose(1, 0, 2), pos)
                k = self.rope(k.transpose(1, 0, 2), pos)
                self.kc[i][:, pos] = k
                self.vc[i][:, pos] = v.transpose(1, 0, 2)
                S = int(pos[-1]) + 1
                kk = np.repeat(self.kc[i][:, :S], H // KV, axis=0)  # repeat_interleave on heads
                vv = np.repeat(self.vc[i][:, :S], H // KV, axis=0)
                sc = q @ kk.transpose(0, 2, 1) / math.sqrt(hd)  # [H, T, S]
                sc = np.where(pos[:, None] >= np.arange(S)[None, :], sc, -np.inf)
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                y = r((sc / sc.sum(-1, keepdims=True)) @ vv)  # [H, T, hd]
                x = r(x + self.lin(y.transpose(1, 0, 2).reshape(T, H * hd), p + "self_attn.o_proj.weight"))
            if not ablate or (self.tied and i == 0):
                hn = self.norm(x, self.w[p + "post_attention_layernorm.weight"])
                g = self.lin(hn, p + "gate_proj.weight")
                u = self.lin(hn, p + "up_proj.weight")
                a = r(r(g / (1.0 + np.exp(-g))) * u)
                x = r(x + self.lin(a, p + "down_proj.weight"))
        hn = self.norm(x[-1:], self.w["norm.weight"])
        return self.lin(hn, "lm_head.weight")[0]


def greedy(m, prompt, steps, ablate=False):
    m.reset()
    T = len(prompt)
    logits = m.forward(np.asarray(prompt), np.arange(T), ablate)
    toks, margins, tops = [], [], []
    for i in range(steps):
        top2 = np.partition(logits, -2)[-2:]
        t = int(np.argmax(logits))
        toks.append(t)
        tops.append(float(top2.max()))
        margins.append(float(top2.max() - top2.min()))
        if i + 1 < steps:
            logits = m.forward(np.array([t]), np.array([T + i]), ablate)
    return toks, margins, tops


def check(model, a):
    cfg = real_init.MODELS[model][0]
    prompt = np.random.default_rng(a.seed + 1).integers(3, cfg["vocab"], a.prompt_len).tolist()
    out = {"model": model, "recipe": real_init.MODELS[model][2], "prompt_len": a.prompt_len, "steps": a.steps}
    runs = [("float32", False)] + ([("bf16", True)] if a.bf16 else [])
    for label, rb in runs:
        t0 = time.time()
        m = Model(model, a.seed, rb)
        build = time.time() - t0
        toks, margins, tops = greedy(m, prompt, a.steps)
        ulps = [mg / ulp_bf16(tp) for mg, tp in zip(margins, tops)]
        i = int(np.argmin(ulps))
        res = {"min_margin": round(min(margins), 3), "min_margin_ulps": round(min(ulps), 1),
               "at_step": i, "top_logit_there": round(tops[i], 2), "margin_there": round(margins[i], 3),
               "top_logit_range": [round(min(tops), 2), round(max(tops), 2)],
               "distinct_tokens": len(set(toks)), "tokens_head": toks[:12],
               "build_s": round(build, 1), "decode_s": round(time.time() - t0 - build, 1)}
        if a.ablate:
            at, _, _ = greedy(m, prompt, a.steps, ablate=True)
            res["ablated_same_tokens"] = sum(x == y for x, y in zip(at, toks))
        out[label] = res
        out[label + "_tokens"] = toks
        print(f"{model} {label}: {json.dumps(res)}", flush=True)
        del m
    if a.bf16:
        same = sum(x == y for x, y in zip(out["float32_tokens"], out["bf16_tokens"]))
        out["bf16_vs_float32_same_tokens"] = same
        print(f"{model}: bf16-rounded vs float32 greedy tokens: {same}/{a.steps} equal", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="all", choices=sorted(real_init.MODELS) + ["all"])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--ablate", action="store_true")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    models = sorted(real_init.MODELS) if a.model == "all" else [a.model]
    res = [check(m, a) for m in models]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
