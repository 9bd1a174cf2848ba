#!/usr/bin/env python3
"""Stand-in for et_cuda_run in bench/run.sh's and bench/side_by_side.sh's CPU tests
(BENCH_TEST_CPU=1, SBS_TEST_CPU=1): prints the runner's output with --json (runner/README.md,
"--json": the case, bench, bench-lib, generate and generate-lib records as JSON lines, one
generate record per round; mem, stats, load_phases, enqueue, pipeline and PyTorchObserver lines
as text) with made-up numbers, so that the scripts' plumbing and their tables can be tested
without a GPU. Only the --json output is imitated: without --json it exits 2. It reads the
manifest (methods, cases, generate) but never the program. What it imitates:
- our backend (no --backend-lib): bench-lib lines, --stats (graph and sharing counters), --mem;
- --backend-lib .../<build>/libupstream_cuda_backend.so: no bench-lib lines, "stats: n/a";
  main-* and v1.4.* refuse programs not named et15* or et14* with upstream's message, as they do
  ExecuTorch 1.2 programs;
- --device-io on a manifest without "alloc_graph_input": false: the memory-planned refusal;
- qwen3_pd_bf16 --generate without share_mutable_buffers_across_methods: tokens differ after
  the first (the decode method does not see the prefill's cache).
- a manifest without expected tokens (bench/side_by_side.sh --real-scale, decode_llama.py's
  export): make_fakes.fake_tokens(prompt), "expected=none UNCHECKED", exit status 0;
- ours with --generate: a "load_phases:" line after the load, and with --stats "generate-lib:";
- FAKE_UPSTREAM_GRAPH_ROUNDS=1: upstream with enable_cuda_graph_for_method refuses a second round
  (as upstream does when the next prefill's size differs from the captured one).
FAKE_SLEEP="a+b=S,...": sleep S seconds first when the command line contains a and b (a hang, for
the timeouts of bench/side_by_side.sh's CPU test).
The numbers are fixed functions of the command line (without --json); they mean nothing.
"""
import json
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fakes import fake_tokens  # noqa: E402


def upstream_needs_device_inputs(build, program):
    """main / v1.4: a program whose method inputs are typed CUDA needs device memory as input."""
    return build.startswith(("main-", "v1.4")) and "devio" in program


HELP = """usage: et_cuda_run (fake, for bench/run.sh's CPU test)
  --json  --mem  --stats  --device-io  --cases-on-device  --bench N  --generate N  --backend-lib PATH  --option K=V
"""


def jline(kind, **fields):
    """A JSON line as runner/json.cpp writes it: "kind" first, no spaces, numbers as %.9g."""
    def val(v):
        if isinstance(v, float):
            return "%.9g" % v
        if isinstance(v, list):
            return "[" + ",".join(str(x) for x in v) + "]"
        return json.dumps(v)
    return "{" + ",".join(json.dumps(k) + ":" + val(v) for k, v in [("kind", kind)] + list(fields.items())) + "}"


def main(argv):
    if "--help" in argv:
        print(HELP, end="")
        return 0
    args, flags = parse_argv(argv)
    if "--json" not in flags:
        print("et_cuda_run (fake): only the --json output is imitated", file=sys.stderr)
        return 2
    argv = [a for a in argv if a != "--json"]
    line = " ".join(argv)
    for entry in filter(None, os.environ.get("FAKE_SLEEP", "").split(",")):
        pat, secs = entry.rsplit("=", 1)
        if all(part in line for part in pat.split("+")):
            time.sleep(float(secs))
    opts = dict(o.split("=", 1) for o in args["options"])
    man_path = args.get("manifest", "")
    with open(man_path) as f:
        man = json.load(f)
    program = os.path.basename(os.path.dirname(man_path))
    lib = args.get("backend-lib", "")
    build = os.path.basename(os.path.dirname(lib)) if lib else ""
    ours = not lib
    seed = zlib.crc32(" ".join(argv).encode()) % 1000 / 1000.0
    base = 20.0 + 3 * len(program) + 10 * seed
    if "enable_cuda_graph_for_method" in opts:
        base *= 0.45
    if not ours:
        base *= 1.4
    mem = {"loaded": 4.0 + len(program) / 4, "peak": 6.0 + len(program) / 4}
    if program == "qwen3_pd_bf16":
        w = 4.0  # MiB, make_fakes.FAKE_WEIGHTS; 12 MiB of kernels and pools; sharing saves 3.9 MiB
        mem["loaded"] = 12.0 + (w + 0.1 if "weight_sharing_across_methods" in opts else 2 * w)
        if args.get("method") == "prefill":
            mem["loaded"] = 8.0 + w
        mem["peak"] = mem["loaded"] + 2

    def out(s):
        print(s, flush=True)

    def finish(rc, err=None):
        if "--mem" in flags:
            out(f"mem: device=0 total_mib=143771.0 context_mib=523.0 loaded_mib={mem['loaded']:.1f} "
                f"peak_mib={mem['peak']:.1f} end_mib={mem['loaded']:.1f} samples=4")
        if "--stats" in flags and rc == 0:
            if ours:
                g = "enable_cuda_graph_for_method" in opts
                shared = (4 << 20) - 65536 if "weight_sharing_across_methods" in opts else 0
                out(f"stats: executes=1000 host_waits=2 driver_allocs=3 pool_allocs=10 pool_frees=8 live_allocs=4 "
                    f"live_bytes=4096 bytes_htod=1024 bytes_dtoh=64 bytes_dtod=0 execute_host_ns=1000000 "
                    f"run_host_ns=900000 graph_captures={1 if g else 0} graph_replays={998 if g else 0} "
                    f"graph_fallbacks=0 shared_constant_bytes={shared}")
            else:
                out(f"stats: n/a (the backend library {lib} has no et_cuda_stats)")
        if err:
            print(f"et_cuda_run: {err}", file=sys.stderr, flush=True)
        return rc

    upstream_refuses = build.startswith(("main-", "v1.4")) and not program.startswith(("et15", "et14"))
    if upstream_refuses:
        return finish(1, f"{man_path}: executing 'forward' failed: Error::InvalidArgument (Tensor 0 expected "
                         "device_type=CUDA (1), got 0. Device info may not be properly propagated from CudaPartitioner.)")
    if args["generate"]:
        return fake_generate(args, flags, opts, man, man_path, program, ours, base, out, finish)
    return fake_cases(args, flags, opts, man, man_path, build, program, ours, seed, base, out, finish)


def parse_argv(argv):
    """The runner's flags that the fake reads: (values by name, the other flags)."""
    args = {"options": [], "bench": 0, "warmup": 0, "enqueue": 0, "generate": 0, "generate-rounds": 1}
    flags = set()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--manifest", "--backend-lib", "--method", "--pipeline", "--prefill-method", "--decode-method",
                 "--prompt-ids", "--expect-tokens", "--data"):
            args[a[2:]] = argv[i + 1]
            i += 2
            continue
        if a in ("--bench", "--warmup", "--enqueue", "--generate", "--generate-rounds"):
            args[a[2:]] = int(argv[i + 1])
            i += 2
            continue
        if a == "--option":
            args["options"].append(argv[i + 1])
            i += 2
            continue
        if a.startswith("--"):
            flags.add(a)
        i += 1
    return args, flags


def fake_generate(args, flags, opts, man, man_path, program, ours, base, out, finish):
    """--generate: the load phases (ours), a generate record per round, PyTorchObserver."""
    gen = man.get("generate") or {}
    pre = args.get("prefill-method", gen.get("prefill_method", "forward"))
    dec = args.get("decode-method", gen.get("decode_method", "forward"))
    exp = gen.get("tokens", [])
    if args.get("expect-tokens"):
        exp = [int(x) for x in args["expect-tokens"].split(",")]
    n = args["generate"]
    rounds = args["generate-rounds"]
    if (not ours and "enable_cuda_graph_for_method" in opts and rounds > 1
            and os.environ.get("FAKE_UPSTREAM_GRAPH_ROUNDS") == "1"):
        return finish(1, f"{man_path}: executing 'forward' failed: Error::InvalidArgument (CUDA graph replay: "
                         "input 0 has sizes [1, 32], captured [1, 1] (made-up message of the fake runner))")
    if ours:
        w = 3031000000 if "llama1b" in program else 4 << 20
        out(f"load_phases: fetch_ms=600.0 so_open_ms=12.5 container_ms=30.0 upload_ms={w / 40e6:.1f} "
            f"upload_bytes={w} upload_gbps=40.00 staging=pinned peak_host_staging_bytes={64 << 20}")
    if exp:
        toks = [exp[j] if j < len(exp) else (exp[-1] * 7 + j) % 1000 for j in range(n)]
    else:
        toks = fake_tokens(gen.get("prompt_ids", []), n)
    if pre != dec and opts.get("share_mutable_buffers_across_methods") != "true":
        toks = toks[:1] + [(t + 1) % 1000 for t in toks[1:]]
    rate = 1e6 / (base * 8)
    k = min(n, len(exp))
    match = toks[:k] == exp[:k]
    g = "enable_cuda_graph_for_method" in opts
    for rnd in range(1, rounds + 1):  # a record per round; the first rounds slower (first-call costs)
        slow = 1.0 if rnd == rounds else 3.0
        out(jline("generate", round=rnd, rounds=rounds, prefill=pre, decode=dec,
                  prompt_tokens=len(gen.get("prompt_ids", [])), new_tokens=n, ttft_ms=round(base / 30 * slow, 3),
                  prefill_tok_s=round(rate * 3 / slow, 1), decode_tok_s=round(rate / slow, 1),
                  host_waits_per_token=1.0 if ours else None, sampler="host", sampling_us_per_token=0.5,
                  tokens=toks, expected=exp[:k] if exp else None,
                  verdict=("MATCH" if match else "MISMATCH") if exp else "UNCHECKED"))
        if ours and "--stats" in flags:
            out(jline("generate-lib", round=rnd, decode_executes=n - 1,
                      lib_execute_us=(12.5 if g else 1100.0) * slow, run_us=(11.5 if g else 1098.0) * slow,
                      graph_replays=n - 1 if g else 0, graph_captures=1 if g and rnd == 1 else 0))
    # Times on the monotonic clock in ms, as the runner's steady_clock: load 40 ms after start,
    # first token base/30 ms later (bench/side_by_side.sh's cold start reads them).
    t = time.monotonic() * 1000
    out('PyTorchObserver {"prompt_tokens":6,"generated_tokens":%d,"model_load_start_ms":%.3f,"model_load_end_ms":%.3f,'
        '"inference_start_ms":%.3f,"inference_end_ms":%.3f,"prompt_eval_end_ms":%.3f,"first_token_ms":%.3f,'
        '"aggregate_sampling_time_ms":0.1,"SCALING_FACTOR_UNITS_PER_SECOND":1000}'
        % (n, t, t + 40, t + 41, t + 41 + n * 8 * base / 1000, t + 41 + base / 30, t + 41 + base / 30))
    return finish(0 if match else 1)


def fake_cases(args, flags, opts, man, man_path, build, program, ours, seed, base, out, finish):
    """The manifest's cases, --bench and --enqueue lines, or --pipeline's."""
    methods = man.get("methods", {})
    if args.get("method"):
        methods = {args["method"]: methods.get(args["method"], [])}
    device_io = "--device-io" in flags or args["enqueue"] > 0
    if device_io and (args["bench"] or args["enqueue"]) and man.get("alloc_graph_input") is not False:
        return finish(1, f"{man_path}: --device-io: input 0 of method 'forward' is memory-planned, so ExecuTorch "
                         "would copy device memory with the host memcpy (re-export with ...)")
    if args.get("pipeline"):
        out("pipeline round-trip: methods=encoder,decoder n=50 warmup=2 p50=67.0us p99=88.1us per_iter_total=68.3us "
            "enqueue_total=3415.0us host_waits_per_iter=2.00")
        out("pipeline device-chain: methods=encoder,decoder n=50 warmup=2 p50=37.6us p99=55.8us per_iter_total=38.6us "
            "enqueue_total=1930.0us host_waits_per_iter=0.00")
        out("pipeline speedup: p50=1.78x per_iter_total=1.77x")
        out("pipeline check: device chain vs round trip, last output of 'decoder': max_abs_err=0 PASS")
        return finish(0)
    on_dev = "--cases-on-device" in flags
    if upstream_needs_device_inputs(build, program) and not on_dev:
        return finish(1, f"{man_path}: executing 'forward' failed: Error::InvalidArgument (Tensor 0 is not on "
                         "the device (made-up message of the fake runner))")
    for meth, cases in methods.items():
        for c in range(len(cases)):
            out(jline("case", method=meth, case=f"case{c}{' device-io' if on_dev else ''}", max_abs_err=0.0,
                      **{"pass": True}, problem=""))
        if not cases:
            continue
        if device_io and args["bench"] and not on_dev:
            out(jline("case", method=meth, case="case0 device-io", max_abs_err=0.0, **{"pass": True}, problem=""))
        if args["bench"]:
            n, w = args["bench"], args["warmup"]
            labels = ["bench"] + (["bench-wait"] if device_io else [])
            for lab in labels:
                p50 = base * (1.0 if lab == "bench" else 1.6)
                # at 0.1 µs, as the text line printed them (the JSON line's %.9g then keeps them exact)
                out(jline(lab, method=meth, n=n, warmup=w, min_us=round(p50 * 0.8, 1), p50_us=round(p50, 1),
                          p99_us=round(p50 * 1.5, 1), cpu_mean_us=round(p50 * 1.02, 1)))
                if ours:
                    ovh = 1.5 + seed if "enable_cuda_graph_for_method" in opts else 2.5 + seed
                    out(jline(lab + "-lib", method=meth, io="device" if device_io else "host", executes_per_call=1.0,
                              lib_execute_us=round(p50 * 0.9, 1), run_us=round(p50 * 0.9 - ovh, 1),
                              backend_overhead_us=round(ovh, 1),
                              host_waits_per_call=1.0 if (lab == "bench-wait" or not device_io) else 0.0))
        if args["enqueue"]:
            out(f"{meth} enqueue: n={args['enqueue']} enqueue_us=2220.0 total_us=2240.0 enqueue_per_call_us=44.4 "
                f"total_per_call_us=44.8 enqueue_over_total=0.992 host_waits=0 output_on_device=yes")
    return finish(0)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
