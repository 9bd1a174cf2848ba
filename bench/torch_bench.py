"""PyTorch baselines for the benchmark models, on the GPU: eager, CUDA graph
replay, and PyTorch's own AOTInductor runtime (each AOTI step in a subprocess,
because loading AOTI packages is reported to crash in torch 2.11.0+cu130).

  torch_bench.py eager  --models deep_bf16,mlp_f32 [--models-dir D] [--fixtures F] [--out FILE]
        eager and CUDA-graph rows (one process)
  torch_bench.py aoti   --models ... --pkg-dir P [--compile-only] [--gdb] [--deadline EPOCH] [--out FILE]
        per model: compile+package (subprocess, cached in P/<name>.pt2), then load+time
        (subprocess); a crash is reported as "segfault (signal N)" with the stderr tail,
        and with --gdb the first crash is re-run under cuda-gdb for a backtrace
  torch_bench.py aoti-compile NAME --pkg FILE   /   aoti-run NAME --pkg FILE
        the subprocess steps (print "ROW {json}")

Models come from models.build (the same weights as bench/export.py and the
fixtures); the fixture models' inputs are read from --fixtures/<name>/ and
compared with the rebuilt ones (inputs_match). Each row is one JSON line (also
appended to --out): model, variant, status, n, p50_us, p99_us, min_us, host_us
(thread CPU time per call, including the synchronize), host_waits_per_call (the
explicit torch.cuda.synchronize), max_err (vs the manifest's expected output
when there is one, else vs eager).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402

NP_DTYPES = {"float32": "float32", "bfloat16": "int16", "float16": "int16", "int64": "int64", "int32": "int32", "bool": "bool"}
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}
ITERS = {"heavy_bf16": 100}  # per-model iteration counts (default --n)


def emit(row, out=None):
    line = json.dumps(row, sort_keys=True)
    print("ROW " + line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def read_tensor(folder, spec):
    import numpy as np

    raw = np.fromfile(os.path.join(folder, spec["file"]), dtype=NP_DTYPES[spec["dtype"]])
    t = torch.from_numpy(raw.copy())
    if spec["dtype"] in ("bfloat16", "float16"):
        t = t.view(TORCH_DTYPES[spec["dtype"]])
    return t.reshape(spec["sizes"])


def manifest_case(name, models_dir, fixtures, method="forward"):
    """(folder, case) of the first case of `method`, from the fixtures or the exported models."""
    for root in ([fixtures] if name in models.FIXTURE_MODELS else []) + [models_dir]:
        if not root:
            continue
        folder = os.path.join(root, name)
        path = os.path.join(folder, "manifest.json")
        if os.path.exists(path):
            with open(path) as f:
                cases = json.load(f)["methods"].get(method) or []
            if cases:
                return folder, cases[0]
    return None, None


def prepare(name, models_dir, fixtures, device, move_module=True):
    """module on `device`, inputs on `device`, expected outputs (or None), inputs_match."""
    methods = models.build(name)
    if "forward" not in methods:
        raise ValueError(f"{name} has no forward method")
    module, args = methods["forward"]
    folder, case = manifest_case(name, models_dir, fixtures)
    expected, match = None, None
    if case is not None:
        try:
            file_args = tuple(read_tensor(folder, s) for s in case["inputs"])
            match = len(file_args) == len(args) and all(torch.equal(a, b) for a, b in zip(args, file_args))
            args = file_args  # what et_cuda_run gets
            expected = [read_tensor(folder, s) for s in case["outputs"]]
        except Exception as e:
            print(f"{name}: cannot read the manifest's tensors: {e!r}", file=sys.stderr)
    if move_module:
        module = module.to(device)
    args = tuple(a.to(device) for a in args)
    return module, args, expected, match


def max_err(outs, expected):
    outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
    if expected is None or len(outs) != len(expected):
        return None
    return max(float((o.detach().float().cpu() - e.float()).abs().max()) for o, e in zip(outs, expected))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_calls(fn, n, warmup, device):
    """p50/p99/min of wall time and mean thread CPU time per call; each call is followed by a synchronize."""
    for _ in range(warmup):
        fn()
    sync(device)
    wall, cpu = [], 0
    for _ in range(n):
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        fn()
        sync(device)
        wall.append((time.perf_counter_ns() - t0) / 1e3)
        cpu += time.thread_time_ns() - c0
    wall.sort()

    def pct(p):
        return wall[min(len(wall) - 1, int(p * (len(wall) - 1) + 0.5))]

    return {"n": n, "warmup": warmup, "p50_us": round(pct(0.5), 2), "p99_us": round(pct(0.99), 2),
            "min_us": round(wall[0], 2), "host_us": round(cpu / n / 1e3, 2),
            "host_waits_per_call": 1.0 if device.type == "cuda" else 0.0}


def iters(name, a):
    return min(a.n, ITERS.get(name, a.n))


# ---------------------------------------------------------------- eager + CUDA graph

def cmd_eager(a):
    device = torch.device(a.device)
    for name in a.models.split(","):
        base = {"source": "torch", "model": name}
        try:
            module, args, expected, match = prepare(name, a.models_dir, a.fixtures, device)
        except Exception as e:
            traceback.print_exc()
            for v in ("torch eager", "torch cudagraph"):
                emit({**base, "variant": v, "status": f"error: {type(e).__name__}: {str(e)[:300]}"}, a.out)
            continue
        base["inputs_match"] = match
        n = iters(name, a)
        with torch.inference_mode():
            try:
                ref = module(*args)
                sync(device)
                row = time_calls(lambda: module(*args), n, a.warmup, device)
                emit({**base, "variant": "torch eager", "status": "ok", "max_err": max_err(ref, expected), **row}, a.out)
            except Exception as e:
                traceback.print_exc()
                emit({**base, "variant": "torch eager", "status": f"error: {type(e).__name__}: {str(e)[:300]}"}, a.out)
                continue
            if device.type != "cuda":
                emit({**base, "variant": "torch cudagraph", "status": "skipped: not on a GPU"}, a.out)
                continue
            try:
                static_args = tuple(x.clone() for x in args)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        module(*static_args)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = module(*static_args)
                graph.replay()
                torch.cuda.synchronize()
                err = max_err(static_out, expected)
                row = time_calls(graph.replay, n, a.warmup, device)
                emit({**base, "variant": "torch cudagraph", "status": "ok", "max_err": err, **row}, a.out)
                del graph, static_out, static_args
            except Exception as e:
                traceback.print_exc()
                emit({**base, "variant": "torch cudagraph", "status": f"error: {type(e).__name__}: {str(e)[:300]}"}, a.out)
        del module, args
        if device.type == "cuda":
            torch.cuda.empty_cache()


# ---------------------------------------------------------------- AOTInductor (subprocess steps)

def cmd_aoti_compile(a):
    device = torch.device(a.device)
    t0 = time.time()
    module, args, _, _ = prepare(a.name, a.models_dir, a.fixtures, device)
    os.makedirs(os.path.dirname(os.path.abspath(a.pkg)), exist_ok=True)
    tmp = a.pkg + ".tmp.pt2"
    with torch.no_grad():
        ep = torch.export.export(module, args)
    path = torch._inductor.aoti_compile_and_package(ep, package_path=tmp)
    os.replace(path, a.pkg)
    emit({"step": "aoti-compile", "model": a.name, "status": "ok", "seconds": round(time.time() - t0, 1), "pkg": a.pkg})


def cmd_aoti_run(a):
    device = torch.device(a.device)
    _, args, expected, match = prepare(a.name, a.models_dir, a.fixtures, device, move_module=False)
    print(f"aoti-run {a.name}: loading {a.pkg}", file=sys.stderr, flush=True)
    runner = torch._inductor.aoti_load_package(a.pkg)
    print(f"aoti-run {a.name}: loaded", file=sys.stderr, flush=True)
    with torch.inference_mode():
        out = runner(*args)
        sync(device)
        row = time_calls(lambda: runner(*args), iters(a.name, a), a.warmup, device)
    emit({"source": "torch", "model": a.name, "variant": "torch aoti", "status": "ok", "inputs_match": match,
          "max_err": max_err(out, expected), **row})


# ---------------------------------------------------------------- AOTInductor (orchestration)

def child_cmd(a, step, name, pkg, n=None):
    cmd = [sys.executable, "-X", "faulthandler", os.path.abspath(__file__), step, name, "--pkg", pkg,
           "--device", a.device, "--warmup", str(a.warmup), "--n", str(n if n is not None else a.n)]
    if a.models_dir:
        cmd += ["--models-dir", a.models_dir]
    if a.fixtures:
        cmd += ["--fixtures", a.fixtures]
    return cmd


def describe_exit(rc):
    if rc == -signal.SIGKILL:
        return "killed (signal 9: timeout or out of memory)"
    if rc < 0:
        sig = -rc
        if sig == signal.SIGSEGV:
            return f"segfault (signal {sig})"
        try:
            return f"{signal.Signals(sig).name} (signal {sig})"
        except ValueError:
            return f"signal {sig}"
    return f"exit status {rc}"


def tail(text, n=1500):
    """The end of a child's stderr, without faulthandler's long list of extension modules."""
    lines = [("Extension modules: ..." if ln.startswith("Extension modules:") else ln) for ln in (text or "").splitlines()]
    return "\n".join(lines)[-n:]


def last_row(stdout):
    for line in reversed((stdout or "").splitlines()):
        if line.startswith("ROW "):
            try:
                return json.loads(line[4:])
            except ValueError:
                pass
    return None


def remaining(a):
    return a.deadline - time.time() if a.deadline else 1e9


def run_child(cmd, timeout, log):
    """(returncode, stdout, stderr); returncode -9 on timeout."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1))
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = -signal.SIGKILL
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")) + f"\n[killed after {timeout:.0f}s]"
    if log:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n[rc={rc} after {time.time() - t0:.1f}s]\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return rc, out, err


def find_cuda_gdb():
    for c in (os.environ.get("CUDA_GDB"), shutil.which("cuda-gdb"), "/usr/local/cuda/bin/cuda-gdb"):
        if c and os.path.exists(c):
            return c
    return None


def gdb_backtrace(a, cmd, log):
    """Re-run a crashing child under cuda-gdb; returns (summary, frames)."""
    gdb = find_cuda_gdb()
    if gdb is None:
        return "cuda-gdb not found", []
    budget = min(a.gdb_timeout, remaining(a) - 20)
    if budget < 30:
        return f"skipped: {remaining(a):.0f}s left", []
    gcmd = [gdb, "-batch", "-nx", "-ex", "set pagination off", "-ex", "set confirm off",
            "-ex", "set print thread-events off", "-ex", "run", "-ex", "bt 30", "-ex", "info threads",
            "--args"] + cmd
    rc, out, err = run_child(gcmd, budget, log)
    text = (out or "") + "\n" + (err or "")
    frames = [ln.strip() for ln in text.splitlines() if ln.lstrip().startswith("#")][:30]
    signal_lines = [ln.strip() for ln in text.splitlines() if "received signal" in ln or "Program terminated" in ln]
    summary = (signal_lines[0] if signal_lines else f"cuda-gdb {describe_exit(rc)}, no signal line")
    return summary, frames


def cmd_aoti(a):
    os.makedirs(a.pkg_dir, exist_ok=True)
    log = a.log or os.path.join(a.pkg_dir, "aoti.log")
    names = a.models.split(",")
    pkgs = {n: os.path.join(a.pkg_dir, f"{n}.pt2") for n in names}
    compile_status = {}

    # 1. Compile what is missing, all models in parallel (CPU-bound).
    todo = [n for n in names if not os.path.exists(pkgs[n])]
    procs = {}
    for n in todo:
        cmd = child_cmd(a, "aoti-compile", n, pkgs[n])
        procs[n] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), cmd, time.time())
    for n, (p, cmd, t0) in procs.items():
        try:
            out, err = p.communicate(timeout=max(min(a.compile_timeout, remaining(a) - 10) - (time.time() - t0), 1))
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            rc = -signal.SIGKILL
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n[rc={rc} after {time.time() - t0:.1f}s]\n--- stdout\n{out}\n--- stderr\n{err}\n")
        row = last_row(out)
        if rc == 0 and row:
            compile_status[n] = f"compiled in {row.get('seconds')}s"
        else:
            compile_status[n] = f"compile failed: {describe_exit(rc)}"
            emit({"source": "torch", "model": n, "variant": "torch aoti", "status": f"compile failed: {describe_exit(rc)}",
                  "stderr_tail": tail(err, 1200)}, a.out)
        print(f"aoti-compile {n}: {compile_status[n]}", flush=True)
    if a.compile_only:
        return

    # 2. Load and time each package in its own process.
    gdb_done = False
    for n in names:
        if not os.path.exists(pkgs[n]):
            if n not in compile_status:
                emit({"source": "torch", "model": n, "variant": "torch aoti", "status": "no package"}, a.out)
            continue
        if remaining(a) < 30:
            emit({"source": "torch", "model": n, "variant": "torch aoti", "status": f"skipped: {remaining(a):.0f}s left"}, a.out)
            continue
        cmd = child_cmd(a, "aoti-run", n, pkgs[n], iters(n, a))
        rc, out, err = run_child(cmd, min(a.run_timeout, remaining(a) - 10), log)
        row = last_row(out)
        if rc == 0 and row:
            emit(row, a.out)
            print(f"aoti-run {n}: ok", flush=True)
            continue
        status = describe_exit(rc)
        row = {"source": "torch", "model": n, "variant": "torch aoti", "status": status, "stderr_tail": tail(err, 1500)}
        print(f"aoti-run {n}: {status}\n{tail(err, 1500)}", flush=True)
        if rc < 0 and rc != -signal.SIGKILL and a.gdb and not gdb_done:
            gdb_done = True
            summary, frames = gdb_backtrace(a, child_cmd(a, "aoti-run", n, pkgs[n], 1), log)
            row["gdb"] = summary
            row["gdb_frames"] = frames
            print(f"cuda-gdb {n}: {summary}", flush=True)
            for fr in frames[:20]:
                print("  " + fr, flush=True)
        emit(row, a.out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["eager", "aoti", "aoti-compile", "aoti-run"])
    ap.add_argument("name", nargs="?", help="model (aoti-compile / aoti-run)")
    ap.add_argument("--models", default="deep_bf16,heavy_bf16,mlp_f32,conv_f32,attn_bf16")
    ap.add_argument("--models-dir", default="", help="bench/export.py's OUTDIR (manifests of our models)")
    ap.add_argument("--fixtures", default="", help="the fixtures folder (inputs of mlp_f32, conv_f32, attn_bf16)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=500, help="timed calls (heavy_bf16: at most 100)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", default="", help="append the JSON rows to this file")
    ap.add_argument("--pkg", default="", help="the .pt2 package (aoti-compile / aoti-run)")
    ap.add_argument("--pkg-dir", default="/tmp/et_cuda_bench/aoti")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--log", default="", help="aoti: the subprocesses' output (default PKG_DIR/aoti.log)")
    ap.add_argument("--gdb", action="store_true", help="re-run the first crashing aoti-run under cuda-gdb")
    ap.add_argument("--deadline", type=float, default=0, help="epoch seconds after which steps are skipped")
    ap.add_argument("--compile-timeout", type=float, default=300)
    ap.add_argument("--run-timeout", type=float, default=120)
    ap.add_argument("--gdb-timeout", type=float, default=150)
    a = ap.parse_args()
    if a.cmd in ("aoti-compile", "aoti-run") and (not a.name or not a.pkg):
        ap.error(f"{a.cmd} needs NAME and --pkg")
    {"eager": cmd_eager, "aoti": cmd_aoti, "aoti-compile": cmd_aoti_compile, "aoti-run": cmd_aoti_run}[a.cmd](a)


if __name__ == "__main__":
    main()
