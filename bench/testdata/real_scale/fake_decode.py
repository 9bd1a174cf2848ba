"""Stands in for tests/models/decode_llama.py in bench/real_scale.sh's CPU test (REAL_DECODE):
same flags; writes what the real one writes, with made-up numbers. FAKE_EXPORT_FAIL=<variant>
makes that export fail (with FAKE_EXPORT_FAIL_ONLY_WITH=<dir>: only when <dir> is on PYTHONPATH);
FAKE_EXPORT_S its time (default 0.3 s). Also stands in for the HF models (--model hf_*) in
bench/hf_scale.sh's CPU test (testdata/hf_scale/test.sh); FAKE_REF_S: the reference's eager time;
FAKE_READY_S: from its tokens to its ready file (torch.compile's warm-up; default 0.5 s)."""
import argparse
import json
import os
import sys
import time

CFG = {"llama1b": dict(vocab=128256, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, ffn=8192, max_seq=1024),
       "qwen06b": dict(vocab=151936, hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072, max_seq=1024),
       "hf_llama1b": dict(vocab=128256, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, ffn=8192, max_seq=512),
       "hf_qwen06b": dict(vocab=151936, hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072, max_seq=512),
       "hf_gemma1b": dict(vocab=262144, hidden=1152, layers=26, heads=4, kv_heads=1, head_dim=256, ffn=6912, max_seq=512,
                          sliding_window=512, layer_types={"full_attention": 4, "sliding_attention": 22})}
WEIGHTS = {"llama1b": 2471493632, "qwen06b": 1192230912, "hf_llama1b": 2471557120, "hf_qwen06b": 1192232960,
           "hf_gemma1b": 1999811840}
PARAMS = {"llama1b": 1498482688, "qwen06b": 596049920, "hf_llama1b": 1235814400, "hf_qwen06b": 596049920,
          "hf_gemma1b": 999885952}
TOKENS = [(7 * i + 3) % 1000 for i in range(128)]


def tag(model, v):
    return v if model == "llama1b" else f"{model}_{v}"


ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--model", default="llama1b")
ap.add_argument("--variants", default="base,companion")
ap.add_argument("--mode", default="all")
ap.add_argument("--steps", type=int, default=32)
ap.add_argument("--prompt-len", type=int, default=8)
ap.add_argument("--go", default="")
ap.add_argument("--go-timeout", type=float, default=900)
ap.add_argument("--no-compile", action="store_true")
ap.add_argument("--device-logits", action="store_true")
ap.add_argument("--max-t", type=int, default=64)
ap.add_argument("--max-cache", type=int, default=0)
a, _ = ap.parse_known_args()  # the HF path's other flags (--tiny, --device, ...) change nothing here
os.makedirs(a.out, exist_ok=True)
prompt = list(range(10, 10 + a.prompt_len))
base = {"model": a.model, "config": CFG[a.model], "tied_embeddings": a.model != "llama1b",
        "parameters": PARAMS[a.model], "read_bytes_per_token_weights": WEIGHTS[a.model]}
if a.mode == "ref":
    r = dict(base, prompt_ids=prompt, steps=a.steps, tokens=TOKENS[:a.steps], min_margin=1.25, distinct_tokens=a.steps,
             compile_status="not tried" if a.no_compile else "ok", compile_s=1.0, compile_tokens_match=True,
             compile_cudagraph_counters={})
    path = os.path.join(a.out, f"ref_{a.model}.json")
    time.sleep(float(os.environ.get("FAKE_REF_S", "0")))
    json.dump(r, open(path, "w"))
    print(f"ref {a.model}: eager tokens written", flush=True)
    time.sleep(float(os.environ.get("FAKE_READY_S", "0.5")))
    open(os.path.join(a.out, f"ref_{a.model}.ready"), "w").close()
    t0 = time.time()
    while not os.path.exists(a.go):
        if time.time() - t0 > a.go_timeout:
            sys.exit(0)
        time.sleep(0.05)
    r["slot"] = {"compile": {"decode_tok_s": 580.0, "ttft_ms": 30.0, "tokens_match": True, "rounds": 2},
                 "eager": {"decode_tok_s": 80.0, "ttft_ms": 40.0, "tokens_match": True},
                 "h2d": {"pinned": {"bytes": 1 << 30, "best_gb_s": 50.0, "median_gb_s": 49.0},
                         "pageable": {"bytes": 1 << 30, "best_gb_s": 20.0, "median_gb_s": 19.0}}}
    json.dump(r, open(path, "w"))
    open(os.path.join(a.out, f"ref_{a.model}.done"), "w").close()
    print(f"ref {a.model}: " + json.dumps(r["slot"]), flush=True)
    sys.exit(0)
for v in a.variants.split(","):
    time.sleep(float(os.environ.get("FAKE_EXPORT_S", "0.3")))
    only = os.environ.get("FAKE_EXPORT_FAIL_ONLY_WITH")  # fail only under this PYTHONPATH entry
    if v == os.environ.get("FAKE_EXPORT_FAIL") and (not only or only in os.environ.get("PYTHONPATH", "").split(":")):
        print(f"{v}: RuntimeError: planted export failure", flush=True)
        sys.exit(1)
    d = os.path.join(a.out, tag(a.model, v))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "aoti_cuda_blob.ptd"), "wb") as f:
        f.write(b"\0" * 4096)
    gen = {"prefill_method": "forward", "decode_method": "forward", "prompt_ids": prompt, "max_seq_len": 1024}
    if v == "int4":
        gen["tokens"] = TOKENS[:a.steps]
    json.dump({"model": "model.pte", "data": ["aoti_cuda_blob.ptd"], "methods": {}, "generate": gen},
              open(os.path.join(d, "manifest.json"), "w"))
    e = dict(base, variant=v, export_s=100.0, torch_export_s=20.0, lower_s=70.0, ptd_bytes=3e9 if a.model == "llama1b" else 1.5e9,
             companion={"gemv": 113, "attention": 16, "skipped_attention": []} if v == "companion" else {})
    e["prefill_ids"] = list(range(3, 3 + min(128, a.max_t)))
    if v == "int4":
        e["read_bytes_per_token_weights"] = 800000000
        e["eager_min_margin"] = 0.9
    json.dump(e, open(os.path.join(d, "export.json"), "w"))
    print(f"{v}: exported", flush=True)
