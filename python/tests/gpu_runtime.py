#!/usr/bin/env python3
"""GPU checks of the Python path (README.md, "Python"), one command from the repo root:

    EXECUTORCH_CUDA_LIB_DIR=.dev/gpu python3 python/tests/gpu_runtime.py [--runner .dev/gpu/et_cuda_run]
        [--llm DIR] [--bench 2000] [--runtime auto|executorch|bridge] [--show-mismatch]
    (bash scripts/gpu.sh runtime [flags]: the same with the bundle's libraries and runner)

Runs through executorch.runtime when torch is 2.13 (what ExecuTorch 1.5.1's
Python bindings were compiled against), else through executorch_cuda.bridge
(ExecuTorch's C++ Module with ctypes; the executorch.runtime line says SKIP and
why; --show-mismatch runs one executorch.runtime execute anyway, in a child
process, to show upstream's error). Needs numpy, torch, a GPU; executorch
importable for the executorch.runtime path (the bridge uses the bundle's
libexecutorch.so when it is not). Prints one line per check (PASS, FAIL, SKIP
or MEASURED) and exits 1 on a FAIL:

1. enable(): "CudaBackend" registered in executorch.runtime;
2. the example program (examples/mlp), or each --manifest (suite programs),
   through the Python runtime: each case's outputs equal the expected ones within
   the manifest's tolerance, and their max_abs_err equals the one et_cuda_run
   prints for that case (the same kernels: the same bits); the outputs' device is
   printed;
3. bad inputs (dtype, shape, device, count): one InputError each;
4. bench: microseconds per execute through executorch.runtime (raw Method, and
   the package's checked wrapper) against et_cuda_run --bench's cpu_mean on the
   same program; the difference is the Python runtime's overhead per execute;
5. with --llm DIR (examples/export_llm.py's output: model.pte, aoti_cuda_blob.ptd):
   examples/generate.py and et_cuda_run --prompt print the same tokens.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import runner_json  # noqa: E402  (et_cuda_run --json's reader)

FAILED = []


def report(name, ok, detail):
    word = {True: "PASS", False: "FAIL", None: "SKIP", "info": "MEASURED"}[ok]
    print(f"{name}: {detail} {word}", flush=True)
    if ok is False:
        FAILED.append(name)


def runner_lines(runner, *args):
    r = subprocess.run([runner, *args], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


_DEFAULT_TOL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 2e-2}


def read_tensor(folder, spec, np, torch):
    """A manifest tensor (runner/README.md, "Manifest") as a torch tensor."""
    path = os.path.join(folder, spec["file"])
    dt = spec["dtype"]
    if dt == "bfloat16":
        t = torch.from_numpy(np.fromfile(path, dtype=np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.fromfile(path, dtype={"bool": np.bool_}.get(dt, dt)))
    return t.reshape(spec["sizes"])


def check_manifest(load, path, np, torch, runner):
    """Each case of the manifest through the Python runtime: within tolerance of the
    expected output, and the same max_abs_err as et_cuda_run prints for that case."""
    folder = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        manifest = json.load(f)
    tag = os.path.basename(folder)
    rc, out = runner_lines(runner, "--manifest", path, "--json")
    theirs = {(r["method"], r["case"]): f"{r['max_abs_err']:.3g}"
              for r in runner_json.of_kind(out, "case", **{"pass": True})}
    if rc != 0 or not theirs:
        report(f"{tag} et_cuda_run", False, f"exit {rc}: {out.strip()[-400:]}")
    data = manifest.get("data") or []
    prog = load(os.path.join(folder, manifest["model"]), os.path.join(folder, data[0]) if data else None)
    for method, cases in manifest.get("methods", {}).items():
        for i, case in enumerate(cases):
            ins = [read_tensor(folder, x, np, torch) for x in case["inputs"]]
            outs = prog.method(method).execute(ins)
            tol = dict(manifest.get("tolerance", {}), **case.get("tolerance", {}))
            worst, ok, devices = 0.0, len(outs) == len(case["outputs"]), set()
            for got, spec in zip(outs, case["outputs"]):
                want = read_tensor(folder, spec, np, torch).double()
                devices.add(str(got.device))
                got = got.cpu().double()
                if list(got.shape) != spec["sizes"]:
                    ok = False
                    continue
                d = (got - want).abs()
                a = tol.get("atol", _DEFAULT_TOL.get(spec["dtype"], 0.0))
                r = tol.get("rtol", _DEFAULT_TOL.get(spec["dtype"], 0.0))
                ok = ok and bool((d <= a + r * want.abs()).all())
                worst = max(worst, float(d.max()) if d.numel() else 0.0)
            ours, same = f"{worst:.3g}", theirs.get((method, f"case{i}"))
            report(f"{tag} {method} case{i}", ok and ours == same,
                   f"outputs on {sorted(devices)} max_abs_err={ours} et_cuda_run={same}")


def check_bad_inputs(prog, torch):
    import executorch_cuda as e

    cases = {
        "dtype": [torch.zeros(4, 32, dtype=torch.float64)],
        "shape": [torch.zeros(4, 33)],
        "device": [torch.zeros(4, 32, device="cuda")],
        "count": [torch.zeros(4, 32), torch.zeros(4, 32)],
    }
    for what, inputs in cases.items():
        try:
            prog.forward.execute(inputs)
            report(f"bad input {what}", False, "no exception")
        except e.InputError as x:
            report(f"bad input {what}", True, f"InputError: {x}")
    # After the refusals the method still runs.
    (y,) = prog.forward(torch.zeros(4, 32))
    report("after bad inputs", list(y.shape) == [4, 10], f"output {list(y.shape)}")


def bench(prog, torch, runner, n):
    mlp = os.path.join(ROOT, "examples", "mlp")
    x = torch.zeros(4, 32)
    raw = getattr(prog.forward, "_method", prog.forward)  # the bridge has no unchecked path
    for _ in range(50):
        raw.execute([x])
    figures = {}
    for name, call in (("raw", lambda: raw.execute([x])), ("checked", lambda: prog.forward.execute([x]))):
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        figures[name] = (time.perf_counter() - t0) / n * 1e6
    rc, out = runner_lines(runner, os.path.join(mlp, "model.pte"), "--data", os.path.join(mlp, "aoti_cuda_blob.ptd"),
                           "--bench", str(n), "--warmup", "50", "--json")
    rec = runner_json.last(out, "bench", method="forward")
    if rc != 0 or rec is None:
        report("bench", False, f"et_cuda_run --bench: exit {rc}: {out.strip()[-300:]}")
        return
    native = float(rec["cpu_mean_us"])
    print(f"bench et_cuda_run: {json.dumps(rec)}")
    report("bench", "info",
           f"us_per_execute raw={figures['raw']:.1f} checked={figures['checked']:.1f} et_cuda_run_cpu_mean={native:.1f} "
           f"overhead_raw={figures['raw'] - native:.1f} overhead_checked={figures['checked'] - native:.1f} "
           f"(target < 20 us; measured, not judged)")


def check_llm(llm, runner, runtime):
    tok = os.path.join(ROOT, "tokenizer", "testdata", "bpe.json")
    common = ["--model_path", os.path.join(llm, "model.pte"), "--data_path", os.path.join(llm, "aoti_cuda_blob.ptd"),
              "--tokenizer_path", tok, "--prompt", "The runner loads a program", "--seq_len", "64"]
    for extra in ([], ["--temperature", "0.8", "--top-p", "0.9", "--seed", "7"]):
        rc1, theirs = runner_lines(runner, *common, *extra)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "generate.py"), *common, *extra,
                            "--runtime", runtime],
                           capture_output=True, text=True, timeout=600)
        ours = r.stdout + r.stderr
        t1 = re.search(r"^generate: .*tokens=([0-9,]+)", theirs, re.M)
        t2 = re.search(r"^generate: .*tokens=([0-9,]+)", ours, re.M)
        name = "generate " + ("greedy" if not extra else "sampled")
        if rc1 != 0 or r.returncode != 0 or not t1 or not t2:
            report(name, False, f"et_cuda_run exit {rc1}, generate.py exit {r.returncode}: {ours.strip()[-400:]}")
            continue
        sampler = re.search(r"sampler=(\w+)", ours).group(1)
        report(name, t1.group(1) == t2.group(1), f"sampler={sampler} python={t2.group(1)} et_cuda_run={t1.group(1)}")


def show_mismatch():
    """One execute with the mismatched torch, in a child process (upstream's error)."""
    code = ("import sys, torch; sys.path.insert(0, %r)\n"
            "import executorch_cuda.native as n; n.enable()\n"
            "from executorch.runtime import Runtime\n"
            "p = Runtime.get().load_program(%r, data_path=%r)\n"
            "m = p.load_method('forward')\n"
            "try:\n    m.execute([torch.zeros(4, 32)]); print('executed')\n"
            "except RuntimeError as x:\n    print('RuntimeError:', str(x).splitlines()[0])\n"
            % (os.path.join(ROOT, "python"), os.path.join(ROOT, "examples/mlp/model.pte"),
               os.path.join(ROOT, "examples/mlp/aoti_cuda_blob.ptd")))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    print(f"mismatch demo (exit {r.returncode}): {(r.stdout + r.stderr).strip().splitlines()[-1:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", default=None)
    ap.add_argument("--llm", default=None)
    ap.add_argument("--bench", type=int, default=2000)
    ap.add_argument("--show-mismatch", action="store_true")
    ap.add_argument("--runtime", choices=("auto", "executorch", "bridge"), default="auto")
    ap.add_argument("--manifest", action="append",
                    help="a program's manifest (runner/README.md), repeatable; default examples/mlp/manifest.json")
    a = ap.parse_args()
    runner = a.runner or next((p for p in (os.path.join(ROOT, ".dev/gpu/et_cuda_run"), os.path.join(ROOT, "build/et_cuda_run"))
                               if os.path.exists(p)), None)
    import executorch_cuda as e

    try:
        info = e.enable()
    except (e.NativeLibraryError, e.ExecutorchVersionError, e.NoCudaDeviceError) as x:
        report("enable", None if isinstance(x, e.NoCudaDeviceError) else False, f"{type(x).__name__}: {x}")
        return 1 if FAILED else 0
    report("enable", info["registered"] is True, json.dumps(info))
    import numpy as np
    import torch

    runtime = a.runtime
    try:
        e.runtime.check_torch()
        if runtime == "auto":
            runtime = "executorch"
    except (e.TorchVersionError, e.NativeLibraryError) as x:
        report("executorch.runtime", None, str(x))
        if a.show_mismatch:
            show_mismatch()
        if runtime == "executorch":
            return 1 if FAILED else 0
        runtime = "bridge"
    print(f"runtime: {runtime} (torch {torch.__version__})", flush=True)
    pte, ptd = os.path.join(ROOT, "examples/mlp/model.pte"), os.path.join(ROOT, "examples/mlp/aoti_cuda_blob.ptd")
    if runtime == "executorch":
        from executorch.runtime import Runtime

        names = Runtime.get().backend_registry.registered_backend_names
        report("registered in executorch.runtime", "CudaBackend" in names and
               Runtime.get().backend_registry.is_available("CudaBackend"), f"{names}")
        load = e.load
    else:
        from executorch_cuda import bridge

        load = bridge.load
    prog = load(pte, ptd)
    if runner is None:
        report("runner", None, "no et_cuda_run (--runner PATH): comparisons against it skipped")
    def guarded(name, fn, *args):
        try:
            fn(*args)
        except Exception as x:  # one FAIL line per check, and the next check still runs
            report(name, False, f"{type(x).__name__}: {x}")

    if runner:
        for path in a.manifest or [os.path.join(ROOT, "examples/mlp/manifest.json")]:
            guarded(path, check_manifest, load, path, np, torch, runner)
    guarded("bad inputs", check_bad_inputs, prog, torch)
    if runner and a.bench > 0:
        guarded("bench", bench, prog, torch, runner, a.bench)
    if a.llm and runner:
        guarded("generate", check_llm, a.llm, runner, runtime)
    print("gpu_runtime: " + ("FAILED: " + ", ".join(FAILED) if FAILED else "all checks passed or skipped as shown"))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
