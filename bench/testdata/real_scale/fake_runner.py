#!/usr/bin/env python3
"""Stands in for et_cuda_run --generate in bench/real_scale.sh's CPU test (REAL_RUNNER): prints the
lines the real runner prints, with figures that depend on the program and on CUDA graphs.
FAKE_RUNNER_FAIL=<tag> makes that program's run fail like a failed load. The library's load_phases line
(on stderr, as a library's log line may be) is left out for the tags in FAKE_NO_LOAD_PHASES (default int4:
an older library). HF tags (hf_<model>_<variant>, bench/hf_scale.sh's test): the rate follows the variant
and the shared stream; FAKE_RUNNER_MISMATCH=<tag> changes that program's token 5; --prompt-ids sets
prompt_tokens."""
import json
import os
import sys
import time

args = sys.argv[1:]
man = args[args.index("--manifest") + 1]
tag = os.path.basename(os.path.dirname(man))
n = int(args[args.index("--generate") + 1])
rounds = int(args[args.index("--generate-rounds") + 1]) if "--generate-rounds" in args else 1
graphs = any(a.startswith("enable_cuda_graph_for_method") for a in args)
if tag == os.environ.get("FAKE_RUNNER_FAIL"):
    print(f"et_cuda_run: {man}: loading method 'forward' failed: planted", file=sys.stderr)
    sys.exit(1)
if tag not in os.environ.get("FAKE_NO_LOAD_PHASES", "int4").split(","):
    print(f"load_phases: fetch_ms=612.3 so_open_ms=45.1 container_ms=3.2 upload_ms={100.0 if graphs else 125.0:.1f} "
          f"upload_bytes=3000000000 upload_gbps={30.0 if graphs else 24.0:.2f} staging={'pinned' if graphs else 'pageable'} "
          "peak_host_staging_bytes=134217728", file=sys.stderr, flush=True)
exp = args[args.index("--expect-tokens") + 1].split(",") if "--expect-tokens" in args else None
toks = (exp or [str(7 * i % 1000) for i in range(n)])[:n]
rate = {"base": 430.0, "companion": 1100.0, "int4": 2000.0}.get(tag, 900.0) * (1.1 if graphs else 1.0)
if tag.startswith("hf_"):
    shared = "use_shared_cuda_stream=true" in args
    rate = {"base": 400.0, "companion": 1600.0}[tag.rsplit("_", 1)[1]] * (1.2 if graphs else 1.0) * (1.05 if shared else 1.0)
    # an --ab switch (FAKE_AB_VAR names it) set and not 0: 10 % slower, so the A/B table has a change to show
    ab = os.environ.get("FAKE_AB_VAR")
    rate *= 0.9 if ab and os.environ.get(ab) not in (None, "0") else 1.0
    # an --ab flag of et_cuda_run (FAKE_AB_FLAG names it) given: 10 % slower too
    flag = os.environ.get("FAKE_AB_FLAG")
    rate *= 0.9 if flag and flag in args else 1.0
got = list(toks)
if tag == os.environ.get("FAKE_RUNNER_MISMATCH") and len(got) > 5:
    got[5] = "99999"
plen = len(args[args.index("--prompt-ids") + 1].split(",")) if "--prompt-ids" in args else 32
for r in range(1, rounds + 1):
    pre = f"generate (round {r} of {rounds})" if r < rounds else "generate"
    ttft = (250.0 if r == 1 else 12.5) * (plen / 32 if plen != 32 else 1)
    word = ('MATCH' if got == toks else 'MISMATCH') if exp else 'UNCHECKED'
    us = 9.5 if graphs else 140.0
    replays, captures = (n - 1 if r > 1 else n - 3) if graphs else 0, 0 if r > 1 or not graphs else 1
    if "--json" in args:  # runner/README.md, "--json"
        print(json.dumps({"kind": "generate", "round": r, "rounds": rounds, "prefill": "forward", "decode": "forward",
                          "prompt_tokens": plen, "new_tokens": n, "ttft_ms": ttft, "prefill_tok_s": 2560.0,
                          "decode_tok_s": rate, "host_waits_per_token": 1.0, "tokens": [int(t) for t in got],
                          "expected": [int(t) for t in toks] if exp else None, "verdict": word}))
        print(json.dumps({"kind": "generate-lib", "round": r, "decode_executes": n - 1, "lib_execute_us": us,
                          "run_us": us - 3, "graph_replays": replays, "graph_captures": captures}))
        continue
    print(f"{pre}: prefill=forward decode=forward prompt_tokens={plen} new_tokens={n} ttft_ms={ttft:.3f} "
          f"prefill_tok_s=2560.0 decode_tok_s={rate:.1f} host_waits_per_token=1.00 rounds={rounds} tokens={','.join(got)} "
          f"expected={','.join(toks) if exp else 'none'} {word}")
    lib = "generate-lib" + (f" (round {r} of {rounds})" if r < rounds else "")
    print(f"{lib}: decode_executes={n - 1} lib_execute_us={us:.2f} run_us={us - 3:.2f} "
          f"graph_replays={replays} graph_captures={captures}")
t = time.monotonic() * 1e3
print('PyTorchObserver {"prompt_tokens":32,"generated_tokens":%d,"model_load_start_ms":%.3f,"model_load_end_ms":%.3f,'
      '"inference_start_ms":%.3f,"inference_end_ms":%.3f,"prompt_eval_end_ms":%.3f,"first_token_ms":%.3f,'
      '"aggregate_sampling_time_ms":1.0,"SCALING_FACTOR_UNITS_PER_SECOND":1000}' % (n, t, t + 2100.0, t + 2100, t + 2400, t + 2112, t + 2112))
print("stats: executes=256 host_waits=256 driver_allocs=10 pool_allocs=0 pool_frees=0 live_allocs=5 live_bytes=3000000000 "
      "bytes_htod=3000100000 bytes_dtoh=65000000 bytes_dtod=0 execute_host_ns=5000000 run_host_ns=4000000 graph_captures=2 "
      "graph_replays=250 graph_fallbacks=0 shared_constant_bytes=0")
print("mem: device=0 total_mib=143771 context_mib=520 loaded_mib=3100 peak_mib=3300 end_mib=3300 samples=5")
sys.exit(0 if exp is None or True else 1)
