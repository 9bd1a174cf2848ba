#!/usr/bin/env python3
"""Test double of et_cuda_run for tests/models/test_cpu.sh: prints runner-format lines for a
manifest (manifest_ext.md; JSON lines for the case and generate results with --json), with planted behaviours to exercise suite_run.py's parsing:
--backend-lib PATH containing "old" -> 'unknown flag'; programs named in FAKE_CRASH -> SIGSEGV;
in FAKE_SLEEP -> hang; known_failure programs -> FAIL; qwen3_pd_bf16 --generate -> MISMATCH."""
import json, os, signal, sys, time

args = sys.argv[1:]
man_path = args[args.index("--manifest") + 1]
man = json.load(open(man_path))
name = os.path.basename(os.path.dirname(man_path))
if "--backend-lib" in args and "old" in args[args.index("--backend-lib") + 1]:
    print("et_cuda_run: --backend-lib: unknown flag", file=sys.stderr)
    sys.exit(1)
if name in os.environ.get("FAKE_CRASH", "").split(","):
    print("forward case0: max_abs_err=0 PASS", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
if name in os.environ.get("FAKE_SLEEP", "").split(","):
    time.sleep(1000)
fail = bool(man.get("known_failure"))
as_json = "--json" in args
if "--generate" in args:
    g = man["generate"]
    n = int(args[args.index("--generate") + 1])
    toks = list(g["tokens"][:n])
    if name == "qwen3_pd_bf16":
        toks[3] = (toks[3] + 1) % 1000
    exp = g["tokens"][:n]
    if as_json:
        print(json.dumps({"kind": "generate", "prompt_tokens": len(g["prompt_ids"]), "tokens": toks,
                          "expected": exp, "verdict": "MATCH" if toks == exp else "MISMATCH"}))
    else:
        print(f"generate: prompt={len(g['prompt_ids'])} tokens={','.join(map(str, toks))} "
              f"expected={','.join(map(str, exp))} {'MATCH' if toks == exp else 'MISMATCH'}")
    print("PyTorchObserver " + json.dumps({"prompt_tokens": len(g["prompt_ids"]), "generated_tokens": n,
          "model_load_start_ms": 0, "model_load_end_ms": 50, "inference_start_ms": 100, "prompt_eval_end_ms": 103,
          "first_token_ms": 103, "inference_end_ms": 133, "SCALING_FACTOR_UNITS_PER_SECOND": 1000}))
    print(f"stats: executes={n} host_waits={n} driver_allocs=1")
    sys.exit(0 if toks == exp else 1)
rc = 0
for m, cases in man["methods"].items():
    for i, _ in enumerate(cases):
        ok = not fail
        problem = "" if ok else "output 0 element 3: got 1.5, expected 1"
        if as_json:
            print(json.dumps({"kind": "case", "method": m, "case": f"case{i}",
                              "max_abs_err": 0.00195 if ok else 0.5, "pass": ok, "problem": problem}))
        else:
            print(f"{m} case{i}: max_abs_err={'0.5' if not ok else '0.00195'} {'PASS' if ok else 'FAIL'}"
                  + ("" if ok else ": " + problem))
        rc |= 0 if ok else 1
    if "--device-io" in args:
        print(f"{m} case0 device-io: max_abs_err=0.00195 PASS")
        print(f"{m} bench: n=3 p50_us=12.0")
sys.exit(rc)
