"""CPU test of the HF transformers path of bench/hf_scale.sh (tests/models/hf_models.py and
decode_llama.py's HF models), at hf_models.TINY's sizes; no GPU:
  1. the builders: the same seed gives the same weights, the head is tied, every parameter is
     filled from the recipe (no HF default init left), Gemma's norms are offsets;
  2. greedy decoding walks the planted permutation (distinct tokens, positive margins);
  3. torch.export through TorchExportableModuleForDecoderOnlyLM (float32 and bf16, T dynamic in
     1..max_t): the exported module's greedy tokens equal eager's, again from position 0 (a second
     round over the same cache), and T = 1 and T = max_t both run;
  4. executorch_cuda.prepare(ep, positions="cache_position") with its defaults on that export
     (the report; the linears are rewritten when the prefill bound is within the companion's);
  5. decode_llama.py end to end: --mode export with AOTInductor stubbed (tests/models/fake_aoti.py,
     an ExecuTorch 1.5.1 site on PYTHONPATH: HF_TEST_SITE, else skipped visibly) writes the
     manifest and export.json bench/hf_scale.sh reads; --mode ref on the CPU (torch.compile
     reduce-overhead included) writes the reference's JSON and its ready/done files; --mode margins.

  /work/venv/bin/python tests/models/test_hf_cpu.py [--models hf_llama1b,...] [--quick]
--quick: steps 1-4 only. Ends with "hf_cpu: N passed, N failed" (exit status 1 on a failure).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402

import hf_models  # noqa: E402
import models as M  # noqa: E402
import suite_lib  # noqa: E402
from decode_llama import TorchBackend  # noqa: E402

RESULT = {"pass": 0, "fail": 0}


def check(cond, what):
    RESULT["pass" if cond else "fail"] += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    return cond


def fresh(name, dtype=torch.float32, max_cache=64):
    return hf_models.make(name, TorchBackend(M.seeded(1234)), max_cache, dtype, "cpu", tiny=True)


class Exported(torch.nn.Module):
    def __init__(self, ep):
        super().__init__()
        self.m = ep.module()

    def forward(self, ids, pos):
        return self.m(input_ids=ids, cache_position=pos)


def builders(name):
    a, b = hf_models.build(name, TorchBackend(M.seeded(7)), tiny=True), hf_models.build(name, TorchBackend(M.seeded(7)), tiny=True)
    sa, sb = a.state_dict(), b.state_dict()
    check(all(torch.equal(sa[k], sb[k]) for k in sa), f"{name}: the same seed gives the same weights")
    check(a.lm_head.weight.data_ptr() == a.model.embed_tokens.weight.data_ptr(), f"{name}: the head is the embedding")
    c = hf_models.build(name, TorchBackend(M.seeded(8)), tiny=True)
    check(not torch.equal(c.model.embed_tokens.weight, a.model.embed_tokens.weight), f"{name}: another seed, other weights")
    norms = [p for n, p in a.named_parameters() if "norm" in n and "layers.0.post_feedforward" not in n]
    mean = torch.cat([p.detach().flatten() for p in norms]).mean().item()
    want = 0.0 if name == "hf_gemma1b" else 1.0  # Gemma's RMSNorm scales by (1 + w)
    check(abs(mean - want) < 0.2, f"{name}: norm weights around {want} (mean {mean:.3f})")
    if name == "hf_gemma1b":
        w = a.model.layers[0].post_feedforward_layernorm.weight.detach()
        check(float(w[0]) > 50, f"{name}: layer 0's post-MLP norm carries the swap ({float(w[0]):.0f})")


def export_checks(name, dtype, max_t=32, steps=16):
    prompt = torch.randint(3, hf_models.TINY[name]["vocab_size"], (1, 8), generator=M.seeded(99))
    eager = fresh(name, dtype)
    toks, margins = suite_lib.greedy(eager, prompt, steps, dtype, "cpu")
    check(len(set(toks)) >= 4 and min(margins) > 1.0,
          f"{name} {dtype}: eager greedy: {len(set(toks))} distinct of {steps}, min margin {min(margins):.2f}")
    t0 = time.time()
    with torch.no_grad():
        ep = fresh(name, dtype).export(prompt, max_t)
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    check(names == ["input_ids", "cache_position"], f"{name} {dtype}: exported inputs {names} ({time.time() - t0:.1f} s)")
    prog = Exported(ep)
    t1, _ = suite_lib.greedy(prog, prompt, steps, dtype, "cpu")
    check(t1 == toks, f"{name} {dtype}: exported greedy tokens equal eager's ({steps})")
    t2, _ = suite_lib.greedy(prog, prompt, steps, dtype, "cpu")
    check(t2 == toks, f"{name} {dtype}: a second round from position 0 gives them again")
    with torch.no_grad():
        for T in (1, max_t):
            out = prog(torch.randint(3, 100, (1, T)), torch.arange(T))
            check(tuple(out.shape) == (1, T, hf_models.TINY[name]["vocab_size"]), f"{name} {dtype}: T = {T} runs")
    return ep


def companion(name, ep):
    import executorch_cuda

    try:
        ep2, report = executorch_cuda.prepare(ep, positions="cache_position")
    except Exception as e:  # noqa: BLE001 - reported as the failure
        check(False, f"{name}: executorch_cuda.prepare raised {type(e).__name__}: {e}")
        return
    rep = {k: v for k, v in report.items() if k != "patched"}
    check(ep2 is not None and "gemv" in report, f"{name}: prepare(ep, positions='cache_position'): {json.dumps(rep)[:300]}")
    check(report.get("gemv", 0) > 0, f"{name}: linears rewritten at a prefill bound of 32 ({report.get('gemv')})")
    ep2.graph_module.graph.lint()


def run(cmd, env):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    tail = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()][-3:]
    return p.returncode, tail, time.time() - t0


def end_to_end(name, site):
    py = sys.executable
    dl = os.path.join(HERE, "decode_llama.py")
    common = ["--model", name, "--tiny", "--device", "cpu", "--prompt-len", "8", "--steps", "12"]
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ)
        rc, tail, s = run([py, dl, d, "--mode", "margins"] + common, env)
        m = json.load(open(os.path.join(d, f"margins_{name}.json"))) if rc == 0 else {}
        check(rc == 0 and m.get("min_margin", 0) > 0, f"{name}: --mode margins ({s:.0f} s): min {m.get('min_margin')}, "
              f"{m.get('min_margin_ulps')} ulps, {m.get('distinct_tokens')} distinct" + ("" if rc == 0 else f": {tail}"))
        go = os.path.join(d, "go")
        open(go, "w").close()
        rc, tail, s = run([py, dl, d, "--mode", "ref", "--go", go] + common, env)
        r = json.load(open(os.path.join(d, f"ref_{name}.json"))) if rc == 0 else {}
        ok = rc == 0 and os.path.exists(os.path.join(d, f"ref_{name}.done")) and len(r.get("tokens") or []) == 12
        check(ok, f"{name}: --mode ref on the CPU ({s:.0f} s): compile {r.get('compile_status')}, "
              f"compiled tokens match {r.get('compile_tokens_match')}" + ("" if ok else f": {tail}"))
        check(r.get("compile_tokens_match") is True and r.get("slot", {}).get("eager", {}).get("tokens_match") is True,
              f"{name}: torch.compile(reduce-overhead) and eager decode loops give the reference's tokens")
        if not site:
            print(f"skip {name}: decode_llama.py --mode export (no ExecuTorch site: set HF_TEST_SITE)")
            return
        env["PYTHONPATH"] = site + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        rc, tail, s = run([py, dl, d, "--mode", "export", "--variants", "base,companion", "--fake-aoti",
                           "--device-logits"] + common, env)
        check(rc == 0, f"{name}: --mode export base,companion with AOTInductor stubbed ({s:.0f} s)" + ("" if rc == 0 else f": {tail}"))
        for v in ("base", "companion"):
            p = os.path.join(d, f"{name}_{v}")
            try:
                man = json.load(open(os.path.join(p, "manifest.json")))
                e = json.load(open(os.path.join(p, "export.json")))
            except OSError as err:
                check(False, f"{name}_{v}: {err}")
                continue
            g = man.get("generate", {})
            check(len(g.get("prompt_ids", [])) == 8 and g.get("max_seq_len") == 512 and os.path.exists(os.path.join(p, "model.pte"))
                  and man.get("data"), f"{name}_{v}: manifest (prompt_ids, max_seq_len 512, model.pte, {man.get('data')})")
            check(len(e.get("prefill_ids", [])) == 128 and e.get("config", {}).get("layers") == hf_models.TINY[name]["num_hidden_layers"]
                  and e.get("read_bytes_per_token_weights", 0) > 0, f"{name}_{v}: export.json (128 prefill ids, config, bytes read)")
            if v == "companion":
                check("gemv" in (e.get("companion") or {}), f"{name}_companion: the companion's report {e.get('companion')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(hf_models.CONFIGS))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    site = os.environ.get("HF_TEST_SITE", "")
    for name in a.models.split(","):
        builders(name)
        export_checks(name, torch.float32)
        ep = export_checks(name, torch.bfloat16)
        companion(name, ep)
        if not a.quick:
            end_to_end(name, site)
    print(f"hf_cpu: {RESULT['pass']} passed, {RESULT['fail']} failed")
    return 1 if RESULT["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
