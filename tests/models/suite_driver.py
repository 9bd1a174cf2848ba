"""The model suite's parallel export driver (export_suite.py, export_et15.py, export_et14.py call
main): one subprocess per program (the calling script again with --child), each with a time
limit and its own log and Inductor cache; the report of what was exported, cached or failed.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

from suite_lib import ensure_flatc, export_program


def main(registry, backend_config_fn, exporter, argv=None):
    ensure_flatc()
    ap = argparse.ArgumentParser(description=f"Export the model suite ({exporter}).")
    ap.add_argument("outdir")
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("SUITE_EXPORT_JOBS", "6")))
    ap.add_argument("--force", action="store_true", help="re-export programs that already have a manifest")
    ap.add_argument("--dry-run", action="store_true",
                    help="build, torch.export and compute references on the CPU; no lowering (no GPU needed)")
    ap.add_argument("--fake-aoti", action="store_true",
                    help="test only: lower with AOTInductor replaced by a stub (no GPU needed; not runnable programs)")
    ap.add_argument("--deadline", type=float, default=0, help="unix time after which no new export starts")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("SUITE_EXPORT_TIMEOUT", "420")),
                    help="seconds per program")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.list:
        for n in registry:
            print(n)
        return 0
    if a.child:
        return child(registry, backend_config_fn, exporter, a)
    names = [n for n in a.only.split(",") if n] or list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        ap.error(f"unknown program(s) {unknown}; known: {list(registry)}")
    os.makedirs(a.outdir, exist_ok=True)
    todo, report = [], {}
    for n in names:
        if not a.force and os.path.exists(os.path.join(a.outdir, n, "manifest.json")):
            report[n] = "cached"
            print(f"export {n}: cached", flush=True)
        else:
            todo.append(n)
    logdir = os.path.join(a.outdir, ".logs")
    os.makedirs(logdir, exist_ok=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for n, status in ex.map(lambda n: export_in_child(a, logdir, n), todo):
            report[n] = status
            print(f"export {n}: {status}", flush=True)
            if status.startswith("FAILED"):
                with open(os.path.join(a.outdir, f".{n}.failed.txt"), "w") as f:
                    f.write(status + "\n")
            else:
                try:
                    os.remove(os.path.join(a.outdir, f".{n}.failed.txt"))
                except OSError:
                    pass
    tag = "et" + "".join(exporter.split()[-1].split(".")[:2])  # executorch 1.2 -> et12, 1.5.1 -> et15
    with open(os.path.join(a.outdir, f".export_report.{tag}.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    return 1 if any(v.startswith("FAILED") for v in report.values()) else 0


def child(registry, backend_config_fn, exporter, a):
    n = a.child
    if a.fake_aoti:
        import fake_aoti

        fake_aoti.install()
    try:
        p = registry[n]()
        status = export_program(p, a.outdir, backend_config_fn, dry_run=a.dry_run, exporter=exporter)
        if a.dry_run:
            status = "dry-run " + status
        if a.fake_aoti:
            status = "fake-aoti " + status
    except Exception as e:
        traceback.print_exc()
        tb = traceback.format_exc().strip().splitlines()
        status = f"FAILED {type(e).__name__}: {str(e)[:600]} || " + " | ".join(l.strip() for l in tb[-8:])[-1500:]
    print("RESULT " + status.replace("\n", " "), flush=True)
    return 0


def export_in_child(a, logdir, n):
    """Program n exported by a child process (the calling script with --child), logged in logdir;
    returns (n, its RESULT line's status, or why there is none)."""
    if a.deadline and time.time() > a.deadline:
        return n, "SKIPPED (deadline)"
    cmd = [sys.executable, sys.argv[0], a.outdir, "--child", n]
    if a.dry_run:
        cmd.append("--dry-run")
    if a.fake_aoti:
        cmd.append("--fake-aoti")
    log = os.path.join(logdir, f"{n}.log")
    limit = a.timeout
    if a.deadline:
        limit = max(5.0, min(limit, a.deadline + 60 - time.time()))
    # One Inductor cache per program: two exports of the same module (qwen3_bf16 under
    # ExecuTorch 1.2 and 1.5.1) compile the same kernels, and sharing the cache directory
    # made one link while the other was replacing the kernels' object files.
    env = dict(os.environ)
    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "torchinductor_suite")
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, f"{os.path.basename(sys.argv[0])}.{n}")
    t0 = time.time()
    with open(log, "w") as lf:
        try:
            r = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, timeout=limit, env=env)
            rc = r.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    tail = open(log, errors="replace").read().splitlines()
    status = next((l[len("RESULT "):] for l in reversed(tail) if l.startswith("RESULT ")), None)
    if status is None:
        status = f"FAILED rc={rc} after {time.time() - t0:.0f}s: " + " | ".join(tail[-6:])[-1500:]
    return n, status
