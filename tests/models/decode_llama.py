"""Llama-3.2-1B-shaped decoder (hidden 2048, 16 layers, 32/8 heads x 64, SwiGLU
8192, vocab 128256, static KV cache 1024, bf16; the Qwen3Decoder of models.py
with that configuration, random weights) exported with CudaPartitioner, with
and without the export companion (python/executorch_cuda), plus eager greedy
tokens on the GPU. Writes <out>/<variant>/{model.pte, *.ptd, manifest.json}
for `et_cuda_run --manifest ... --generate N`. Exports are cached: a variant
whose folder has a manifest with the same key (this file, the companion's
sources, torch/executorch versions) is not exported again.

  python3 tests/models/decode_llama.py OUT [--variants base,companion] [--steps 32]
"""

import argparse
import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import models as M  # noqa: E402
import suite_lib  # noqa: E402

LLAMA_1B = dict(vocab=128256, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, ffn=8192, max_seq=1024)
PROMPT_LEN = 8
MAX_T = 64


def make(seed, cfg=LLAMA_1B):
    g = M.seeded(seed)
    m = M.Qwen3Decoder(cfg).eval()
    M.init_decoder_weights(m, g)
    return m


def cache_key():
    h = hashlib.sha256()
    files = [os.path.abspath(__file__)]
    pkg = os.path.join(ROOT, "python", "executorch_cuda")
    files += sorted(os.path.join(pkg, f) for f in os.listdir(pkg) if f.endswith(".py"))
    for f in files:
        with open(f, "rb") as fh:
            h.update(fh.read())
    h.update(json.dumps(suite_lib.versions(), sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def export(variant, out, model, prompt, tokens, key):
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    d = os.path.join(out, variant)
    man_path = os.path.join(d, "manifest.json")
    if os.path.exists(man_path):
        with open(man_path) as f:
            if json.load(f).get("cache_key") == key:
                print(f"{variant}: cached export in {d}")
                return d
    os.makedirs(d, exist_ok=True)
    t0 = time.time()
    T = torch.export.Dim("T", min=1, max=MAX_T)
    ep = torch.export.export(model, (prompt.cuda(), torch.arange(PROMPT_LEN, device="cuda")),
                             dynamic_shapes=({1: T}, {0: T}), strict=False)
    report = {}
    if variant == "companion":
        import executorch_cuda

        ep, report = executorch_cuda.prepare(ep, positions="cache_position")
        print(f"{variant}: companion rewrite {report}")
    _, et, _ = suite_lib.lower({"forward": ep}, {}, ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
    with open(os.path.join(d, "model.pte"), "wb") as f:
        f.write(et.buffer)
    et.write_tensor_data_to_file(d)
    man = {
        "model": "model.pte",
        "data": sorted(f for f in os.listdir(d) if f.endswith(".ptd")),
        "methods": {},
        "generate": {"prefill_method": "forward", "decode_method": "forward",
                     "prompt_ids": [int(x) for x in prompt[0]], "tokens": tokens, "max_seq_len": LLAMA_1B["max_seq"]},
        "cache_key": key,
        "companion": {k: v for k, v in report.items() if k != "patched"},
        "export_s": round(time.time() - t0, 1),
        "versions": suite_lib.versions(),
    }
    with open(man_path, "w") as f:
        json.dump(man, f, indent=1, default=str)
    print(f"{variant}: exported in {man['export_s']} s to {d}")
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--variants", default="base,companion")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    suite_lib.ensure_flatc()
    torch.backends.cuda.matmul.allow_tf32 = False
    prompt = torch.randint(3, LLAMA_1B["vocab"], (1, PROMPT_LEN), generator=M.seeded(a.seed + 1))
    key = cache_key()
    # Eager greedy tokens (bf16, GPU), from a fresh model (zero cache).
    tok_path = os.path.join(a.out, "eager_tokens.json")
    tokens = None
    if os.path.exists(tok_path):
        with open(tok_path) as f:
            saved = json.load(f)
        if saved.get("cache_key") == key and len(saved["tokens"]) >= a.steps:
            tokens = saved["tokens"][: a.steps]
    if tokens is None:
        m = make(a.seed).to(torch.bfloat16).cuda()
        tokens, margins = suite_lib.greedy(m, prompt, a.steps, torch.bfloat16, "cuda")
        os.makedirs(a.out, exist_ok=True)
        with open(tok_path, "w") as f:
            json.dump({"cache_key": key, "tokens": tokens, "min_margin": min(margins)}, f)
        print(f"eager: {a.steps} greedy tokens, min top1-top2 margin {min(margins):.3f}")
        del m
        torch.cuda.empty_cache()
    for v in a.variants.split(","):
        model = make(a.seed).to(torch.bfloat16).cuda()
        export(v, a.out, model, prompt, tokens, key)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
