"""Real-scale decoders of issue 21, random weights (nothing downloaded):
  llama1b  Llama-3.2-1B-shaped (models.LLAMA1B_CFG: hidden 2048, 16 layers, 32/8 heads x 64,
           SwiGLU 8192, vocab 128256, untied head, static KV cache 1024), bf16;
  qwen06b  Qwen3-0.6B-shaped (28 layers, hidden 1024, 16/8 heads x 128, q/k norm, SwiGLU 3072,
           vocab 151936, tied embeddings, static KV cache 1024), bf16.
  hf_llama1b, hf_qwen06b, hf_gemma1b  HuggingFace transformers' own modeling code in the shapes of
           Llama-3.2-1B, Qwen3-0.6B and Gemma-3-1B (tests/models/hf_models.py), exported through
           TorchExportableModuleForDecoderOnlyLM (static cache --max-cache 512, prefill T in
           1..--max-t 128), bf16 (bench/hf_scale.sh); --tiny: small sizes for the CPU tests.
The weights come from real_init.py's recipe (random, with a planted next-token permutation so
that every greedy step has a wide top-1/top-2 margin; tests/models/margin_check.py checks the
margins with numpy, no torch).
Variants: base (ExecuTorch's CudaPartitioner as it is), companion (python/executorch_cuda
rewrites small-M linears and decode attention first), int4 (torchao's tile-packed int4 weights,
ExecuTorch's int4 path; its expected tokens are the quantized model's own eager greedy ones).
Writes <out>/<tag>/{model.pte, *.ptd, manifest.json, export.json} (tag: the variant for llama1b,
else <model>_<variant>) for `et_cuda_run --manifest ... --generate N`.

  decode_llama.py OUT [--model llama1b] [--variants base,companion] [--steps 32] [--mode all]
    --mode all     eager greedy tokens (GPU, bf16), then each variant exported in turn, the
                   tokens in each manifest (tests/models/decode_gpu.sh); cached by cache_key
    --mode export  the variants only (no eager run; bf16 manifests carry no tokens: pass the
                   reference's with --expect-tokens), for one export per process
    --mode ref     PyTorch's rows on the same model (bench/real_scale.sh): eager greedy tokens
                   (written at once to OUT/ref_<model>.json), torch.compile(mode="reduce-overhead")
                   compiled and warmed up, then, when the file --go exists (the caller's timing
                   slot), decode tok/s of eager and compiled and the pinned host-to-device
                   bandwidth; OUT/ref_<model>.json again, then OUT/ref_<model>.done
    --mode margins margin_check.py's check with torch on the CPU (float32 on bf16-rounded weights):
                   OUT/margins_<model>.json
  --device cpu and --fake-aoti (tests/models/fake_aoti.py) let the export and the reference run
  on a machine without a GPU (tests/models/test_hf_cpu.py); such programs cannot run.
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

import hf_models  # noqa: E402
import models as M  # noqa: E402
import real_init  # noqa: E402
import suite_lib  # noqa: E402
from torch_rows import decode_loop, h2d_bandwidth  # noqa: E402  (PyTorch's rows)

QWEN06B_CFG = real_init.QWEN06B
assert real_init.LLAMA1B == M.LLAMA1B_CFG, "real_init.LLAMA1B and models.LLAMA1B_CFG differ"
# name: (config, tied embeddings, recipe knobs) (real_init.py)
MODELS = real_init.MODELS
# The dynamic T bound (prefill length) of the exported forward of the hand-written models: 128 by
# default (REAL_MAX_T), as exports for chat use 128-2048; the companion no longer depends on it.
MAX_T = int(os.environ.get("REAL_MAX_T", "128"))
HF_MAX_T, HF_MAX_CACHE = 128, 512  # the HF models' defaults (--max-t, --max-cache)


class TorchBackend:
    """real_init.weights' array library: torch on the CPU, one seeded generator."""

    def __init__(self, g):
        self.g = g

    def randn(self, shape):
        return torch.randn(shape, generator=self.g)

    def randperm(self, n):
        return torch.randperm(n, generator=self.g)

    def zeros(self, shape):
        return torch.zeros(shape)

    def arange(self, n):
        return torch.arange(n)


def make(model, seed):
    """float32 CPU module, the same weights in every process (CPU generator)."""
    cfg, tied, _ = MODELS[model]
    g = M.seeded(seed)
    m = M.Qwen3Decoder(cfg).eval()
    params = dict(m.named_parameters())
    shapes = [(n, tuple(p.shape)) for n, p in params.items()]
    if shapes != real_init.param_shapes(cfg, tied):  # the recipe names every parameter by its FQN
        raise RuntimeError(f"{model}: Qwen3Decoder's parameters are not real_init.param_shapes'")
    with torch.no_grad():
        for name, w in real_init.weights(model, shapes, TorchBackend(g)):
            if tied and name == "lm_head.weight":
                continue
            params[name].copy_(w)
            del w
    if tied:  # the head is the embedding
        m.lm_head.weight = m.embed_tokens.weight
    return m


def make_prompt(model, seed, n, vocab=None):
    vocab = vocab or MODELS[model][0]["vocab"]
    return torch.randint(3, vocab, (1, n), generator=M.seeded(seed + 1))


class Spec:
    """What the exporter and the reference need of a model: one of real_init.MODELS
    (models.Qwen3Decoder) or one of hf_models.CONFIGS (HF transformers' modeling code through
    TorchExportableModuleForDecoderOnlyLM). a: the command line (--model, --max-t, --max-cache,
    --tiny)."""

    def __init__(self, a):
        self.name, self.hf = a.model, a.model in hf_models.CONFIGS
        self.tiny = self.hf and a.tiny
        if self.hf:
            self.max_t = a.max_t or HF_MAX_T
            self.max_seq = a.max_cache or HF_MAX_CACHE
            cfg = hf_models.CONFIGS[a.model]
            self.vocab = hf_models.TINY[a.model]["vocab_size"] if self.tiny else cfg["vocab_size"]
        else:
            self.max_t, self.max_seq, self.vocab = a.max_t or MAX_T, MODELS[a.model][0]["max_seq"], None

    def module(self, seed, device="cuda", dtype=torch.bfloat16, round_to=None):
        """A fresh module (zero cache): forward(input_ids [1, T], cache_position [T]) -> logits;
        round_to: the weights rounded to that dtype first (the margin check)."""
        if self.hf:
            return hf_models.make(self.name, TorchBackend(M.seeded(seed)), self.max_seq, dtype, device, self.tiny,
                                  round_to)
        return make(self.name, seed).to(round_to or dtype).to(dtype).to(device)

    def prompt(self, seed, n):
        return make_prompt(self.name, seed, n, self.vocab)

    def describe(self, m):
        if not self.hf:
            return describe(self.name, m)
        cfg = hf_models.shape_cfg(self.name, m.hf.config, self.max_seq)
        return {"model": self.name, "config": cfg, "tied_embeddings": cfg["tied"], "tiny": self.tiny,
                "transformers_class": type(m.hf).__name__, "max_t": self.max_t,
                "weights_recipe": dict(hf_models.knobs(self.name), version=hf_models.RECIPE_VERSION,
                                       real_init=real_init.RECIPE_VERSION),
                "parameters": sum(p.numel() for p in m.hf.parameters()), "read_bytes_per_token_weights": read_bytes(m.hf)}

    def export(self, m, prompt):
        """torch.export of m on prompt with T dynamic in 1..max_t (strict)."""
        if self.hf:
            return m.export(prompt, self.max_t)
        T = torch.export.Dim("T", min=1, max=self.max_t)
        return torch.export.export(m, (prompt, torch.arange(prompt.shape[1], device=prompt.device)),
                                   dynamic_shapes=({1: T}, {0: T}), strict=True)


def tensor_bytes(t):
    """Bytes of a tensor, or of the plain tensors inside a tensor subclass (torchao's int4)."""
    if type(t) in (torch.Tensor, torch.nn.Parameter) or not hasattr(t, "__tensor_flatten__"):
        return t.numel() * t.element_size()
    names, _ = t.__tensor_flatten__()
    return sum(tensor_bytes(getattr(t, n)) for n in names)


def read_bytes(m):
    """Bytes of the state one decode step reads: every parameter and buffer except the
    embedding table (one row of it is read) and the KV caches (counted apart); a tied head
    is counted once, as the head (named_parameters lists it under both names)."""
    total, seen = 0, set()
    for name, t in list(m.named_parameters(remove_duplicate=False)) + list(m.named_buffers()):
        if name.endswith("embed_tokens.weight") or name.endswith(("k_cache", "v_cache", "rope_cos", "rope_sin", "key_pos")):
            continue
        plain = type(t) in (torch.Tensor, torch.nn.Parameter)
        key = t.data_ptr() if plain else id(t)
        if key in seen:
            continue
        seen.add(key)
        try:
            total += tensor_bytes(t)
        except Exception:  # noqa: BLE001 - an unknown subclass: its logical size
            total += t.numel() * t.element_size()
    return total


def describe(model, m):
    cfg = MODELS[model][0]
    params = sum(p.numel() for p in m.parameters())
    return {"model": model, "config": cfg, "tied_embeddings": MODELS[model][1],
            "weights_recipe": dict(MODELS[model][2], version=real_init.RECIPE_VERSION), "parameters": params,
            "read_bytes_per_token_weights": read_bytes(m)}


def cache_key(model):
    """Covers the weights (real_init.py, models.py), this script and the companion package."""
    h = hashlib.sha256(model.encode())
    files = [os.path.abspath(__file__)] + [os.path.join(HERE, f) for f in ("real_init.py", "models.py", "hf_models.py")]
    pkg = os.path.join(ROOT, "python", "executorch_cuda")
    files += sorted(os.path.join(pkg, f) for f in os.listdir(pkg) if f.endswith(".py"))
    for f in files:
        with open(f, "rb") as fh:
            h.update(fh.read())
    h.update(json.dumps(suite_lib.versions(), sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def variant_dir(out, model, variant):
    return os.path.join(out, variant if model == "llama1b" else f"{model}_{variant}")


def quantize_int4(m):
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    quantize_(m, Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d"))
    return m


def backend_config(device_logits):
    """The program's ExecutorchBackendConfig: graph inputs left out of memory planning; with
    device_logits (ExecuTorch >= 1.4: PropagateDeviceConfig), the logits stay where the
    delegate leaves them, on the device, so the runner picks the token there (et_cuda_sample)
    instead of ExecuTorch copying the row to the host every step."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    if device_logits:
        try:
            from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig
        except ImportError:
            print("--device-logits: this ExecuTorch has no PropagateDeviceConfig; logits go to the host",
                  flush=True)
        else:
            return ExecutorchBackendConfig(
                propagate_device_config=PropagateDeviceConfig(skip_d2h_for_method_outputs=True),
                enable_non_cpu_memory_planning=True,
                memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False))
    return ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))


def export(variant, out, model, a, tokens, key):
    """model: the bf16 module on a.device (Spec.module); a: the command line (a.spec)."""
    d = variant_dir(out, a.model, variant)
    man_path = os.path.join(d, "manifest.json")
    if os.path.exists(man_path):
        with open(man_path) as f:
            if json.load(f).get("cache_key") == key:
                print(f"{variant}: cached export in {d}", flush=True)
                return d
    os.makedirs(d, exist_ok=True)
    t0 = time.time()
    prompt = a.spec.prompt(a.seed, a.prompt_len).to(a.device)
    info = a.spec.describe(model)
    # a second prompt as long as the prefill bound allows, up to 128 (bench/hf_scale.sh times its prefill)
    info["prefill_ids"] = [int(x) for x in a.spec.prompt(a.seed + 7, min(128, a.spec.max_t))[0]]
    margins = None
    if variant == "int4":
        model = quantize_int4(model)
        info["read_bytes_per_token_weights"] = read_bytes(model)
        info["quantization"] = "Int4WeightOnlyConfig(group_size=128, int4_packing_format='tile_packed_to_4d')"
        tokens, margins = suite_lib.greedy(model, prompt, a.steps, torch.bfloat16, a.device)
        info["eager_min_margin"] = min(margins)
        print(f"{variant}: eager int4 greedy, {a.steps} tokens, min margin {min(margins):.3f}", flush=True)
    with torch.no_grad():
        ep = a.spec.export(model, prompt)
    t_export = time.time() - t0
    report = {}
    if variant in ("companion", "companion_norope"):
        import executorch_cuda

        # companion_norope: the same without the RoPE + cache-write fold (a comparison row).
        ep, report = executorch_cuda.prepare(ep, positions="cache_position",
                                             rope=variant == "companion")
        print(f"{variant}: companion rewrite {report}", flush=True)
    _, et, _ = suite_lib.lower({"forward": ep}, {}, backend_config(a.device_logits))
    t_lower = time.time() - t0 - t_export
    with open(os.path.join(d, "model.pte"), "wb") as f:
        f.write(et.buffer)
    et.write_tensor_data_to_file(d)
    gen = {"prefill_method": "forward", "decode_method": "forward",
           "prompt_ids": [int(x) for x in prompt[0]], "max_seq_len": a.spec.max_seq}
    if tokens is not None:
        gen["tokens"] = tokens
    man = {
        "model": "model.pte",
        "data": sorted(f for f in os.listdir(d) if f.endswith(".ptd")),
        "methods": {},
        "generate": gen,
        "cache_key": key,
        "companion": {k: v for k, v in report.items() if k != "patched"},
        "export_s": round(time.time() - t0, 1),
        "versions": suite_lib.versions(),
    }
    info.update(variant=variant, export_s=man["export_s"], torch_export_s=round(t_export, 1),
                lower_s=round(t_lower, 1), companion=man["companion"], tokens=tokens,
                ptd_bytes=sum(os.path.getsize(os.path.join(d, f)) for f in man["data"]),
                pte_bytes=os.path.getsize(os.path.join(d, "model.pte")), versions=man["versions"])
    with open(os.path.join(d, "export.json"), "w") as f:
        json.dump(info, f, indent=1, default=str)
    with open(man_path, "w") as f:
        json.dump(man, f, indent=1, default=str)
    print(f"{variant}: exported in {man['export_s']} s to {d}", flush=True)
    return d


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def ref(a):
    path = os.path.join(a.out, f"ref_{a.model}.json")
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    prompt = a.spec.prompt(a.seed, a.prompt_len)
    m = a.spec.module(a.seed, a.device)
    r = a.spec.describe(m)
    r.update(prompt_ids=[int(x) for x in prompt[0]], steps=a.steps, build_s=round(time.time() - t0, 1))
    with torch.no_grad():
        toks, margins = suite_lib.greedy(m, prompt, a.steps, torch.bfloat16, a.device)
    r.update(tokens=toks, min_margin=min(margins), distinct_tokens=len(set(toks)),
             eager_tokens_s=round(time.time() - t0, 1))
    write_json(path, r)
    print(f"ref {a.model}: eager tokens written ({len(toks)}, min margin {min(margins):.3f})", flush=True)
    compiled, status = None, "not tried"
    if a.compile:
        try:
            import torch._dynamo.utils as dutils

            t1 = time.time()
            compiled = torch.compile(m, mode="reduce-overhead", dynamic=False)
            with torch.no_grad():
                for _ in range(3):  # compile both shapes, record the graphs, warm up
                    ctoks, _, _ = decode_loop(compiled, prompt, a.steps, a.device)
            skips = dict(dutils.counters.get("inductor", {}))
            skips = {k: v for k, v in skips.items() if "cudagraph" in k}
            status = "ok"
            r.update(compile_s=round(time.time() - t1, 1), compile_tokens_match=ctoks == toks,
                     compile_cudagraph_counters=skips)
        except Exception as e:  # noqa: BLE001 - reported in the results
            status = f"error: {type(e).__name__}: {str(e)[:300]}"
            compiled = None
    r["compile_status"] = status
    write_json(path, r)
    open(os.path.join(a.out, f"ref_{a.model}.ready"), "w").close()
    print(f"ref {a.model}: ready ({status}); waiting for {a.go}", flush=True)
    waited = time.time()
    while a.go and not os.path.exists(a.go):
        if time.time() - waited > a.go_timeout:
            r["slot"] = "no slot given (timed out waiting)"
            write_json(path, r)
            return
        time.sleep(0.1)
    slot = {}
    with torch.no_grad():
        if compiled is not None:
            best = None
            for _ in range(a.rounds):
                ctoks, ttft, dec = decode_loop(compiled, prompt, a.steps, a.device)
                best = (ttft, dec) if best is None or dec < best[1] else best
            slot["compile"] = {"decode_tok_s": round((a.steps - 1) / best[1], 1), "ttft_ms": round(best[0] * 1e3, 2),
                               "tokens_match": ctoks == toks, "rounds": a.rounds}
        etoks, ttft, dec = decode_loop(m, prompt, a.steps, a.device)
        slot["eager"] = {"decode_tok_s": round((a.steps - 1) / dec, 1), "ttft_ms": round(ttft * 1e3, 2),
                         "tokens_match": etoks == toks}
    del compiled
    if a.device == "cuda":
        slot["h2d"] = h2d_bandwidth()
    r["slot"] = slot
    write_json(path, r)
    open(os.path.join(a.out, f"ref_{a.model}.done"), "w").close()
    print(f"ref {a.model}: {json.dumps(slot)}", flush=True)


def check_margins(a):
    """--mode margins (margin_check.py's check, for any model here, on the CPU with torch):
    eager float32 on bf16-rounded weights, the smallest top-1/top-2 margin (absolute and in bf16
    ulps of the top logit there) and the number of distinct tokens; OUT/margins_<model>.json."""
    import margin_check

    t0 = time.time()
    m = a.spec.module(a.seed, "cpu", torch.float32, round_to=torch.bfloat16)
    build = time.time() - t0
    tops = []
    toks, mg = suite_lib.greedy(m, a.spec.prompt(a.seed, a.prompt_len), a.steps, torch.float32, "cpu", tops)
    ulps = [x / margin_check.ulp_bf16(t) for x, t in zip(mg, tops)]
    i = ulps.index(min(ulps))
    r = {"model": a.model, "tiny": a.spec.tiny, "prompt_len": a.prompt_len, "steps": a.steps,
         "min_margin": round(min(mg), 3), "min_margin_ulps": round(ulps[i], 1), "at_step": i,
         "top_logit_there": round(tops[i], 2), "margin_there": round(mg[i], 3),
         "top_logit_range": [round(min(tops), 2), round(max(tops), 2)], "distinct_tokens": len(set(toks)),
         "tokens_head": toks[:12], "build_s": round(build, 1), "decode_s": round(time.time() - t0 - build, 1)}
    os.makedirs(a.out, exist_ok=True)
    write_json(os.path.join(a.out, f"margins_{a.model}.json"), dict(r, tokens=toks, margins=mg))
    print(f"margins {a.model}: {json.dumps(r)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default="llama1b", choices=sorted(MODELS) + sorted(hf_models.CONFIGS))
    ap.add_argument("--variants", default="base,companion")
    ap.add_argument("--mode", default="all", choices=("all", "export", "ref", "margins"))
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--go", default="", help="ref: start timing when this file exists")
    ap.add_argument("--go-timeout", type=float, default=900)
    ap.add_argument("--rounds", type=int, default=2, help="ref: timed rounds of torch.compile (best)")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--device-logits", action="store_true",
                    help="export: leave the logits on the device (ExecuTorch >= 1.4), for sampling there")
    ap.add_argument("--max-t", type=int, default=0,
                    help=f"the exported prefill bound T (default {MAX_T}; HF models {HF_MAX_T})")
    ap.add_argument("--max-cache", type=int, default=0, help=f"HF models: static cache length (default {HF_MAX_CACHE})")
    ap.add_argument("--tiny", action="store_true", help="HF models: hf_models.TINY's small sizes (CPU tests)")
    ap.add_argument("--device", default="cuda", help="cpu: run on the CPU (tests; the timings mean nothing)")
    ap.add_argument("--fake-aoti", action="store_true",
                    help="export: AOTInductor stubbed (tests/models/fake_aoti.py): a program that cannot run")
    a = ap.parse_args()
    a.spec = Spec(a)
    if a.prompt_len > a.spec.max_t:
        ap.error(f"--prompt-len is at most the prefill bound {a.spec.max_t}")
    if a.spec.hf and a.prompt_len + a.steps > a.spec.max_seq:
        ap.error(f"--prompt-len + --steps must fit the cache ({a.spec.max_seq})")
    torch.backends.cuda.matmul.allow_tf32 = False
    if a.mode == "ref":
        return ref(a)
    if a.mode == "margins":
        return check_margins(a)
    suite_lib.ensure_flatc()
    if a.fake_aoti:
        import fake_aoti

        fake_aoti.install()
    key = cache_key(a.model) + ("-device-logits" if a.device_logits else "")
    if a.spec.hf:
        key += f"-t{a.spec.max_t}-c{a.spec.max_seq}" + ("-tiny" if a.spec.tiny else "")
    tokens = None
    if a.mode == "all":
        # Eager greedy tokens (bf16, GPU), from a fresh model (zero cache).
        tok_path = os.path.join(a.out, f"eager_tokens_{a.model}.json")
        if os.path.exists(tok_path):
            with open(tok_path) as f:
                saved = json.load(f)
            if saved.get("cache_key") == key and len(saved["tokens"]) >= a.steps:
                tokens = saved["tokens"][: a.steps]
        if tokens is None:
            m = a.spec.module(a.seed, a.device)
            tokens, margins = suite_lib.greedy(m, a.spec.prompt(a.seed, a.prompt_len), a.steps,
                                               torch.bfloat16, a.device)
            os.makedirs(a.out, exist_ok=True)
            with open(tok_path, "w") as f:
                json.dump({"cache_key": key, "tokens": tokens, "min_margin": min(margins)}, f)
            print(f"eager: {a.steps} greedy tokens, min top1-top2 margin {min(margins):.3f}", flush=True)
            del m
            torch.cuda.empty_cache()
    for v in a.variants.split(","):
        model = a.spec.module(a.seed, a.device)
        export(v, a.out, model, a, None if v == "int4" else tokens, key)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
