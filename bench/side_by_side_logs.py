"""bench/side_by_side_table.py's reader of one runner log (et_cuda_run --json's records and the
text lines that stay text) and its number formatting."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models"))
import runner_json  # noqa: E402  (runner_json: tests/models in the repository, et_cuda_run --json's reader)

KV = re.compile(r"(\w+)=(\S+)")
NOT_RUN = ("skipped", "not run", "not exported")  # rc values of rows without a runner call


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def parse_log(path):
    """A bench/sbs_exec.py log: et_cuda_run --json's records (case, generate, generate-lib: each of the
    last two once per round, the last round's kept), its text lines (mem, stats, load_phases, the
    PyTorchObserver line, errors) and sbs_exec.py's closing line."""
    r = {"cases": [], "gen": None, "obs": None, "mem": None, "stats": None, "sbs": None, "error": None,
         "genlib": None, "load": None}
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        r["error"] = f"no log {path}"
        return r
    for ln in lines:
        rec = runner_json.record(ln)
        if rec and rec["kind"] == "case":
            i = str(rec.get("case", "")).split()[0][len("case"):]
            r["cases"].append((rec.get("method"), int(i) if i.isdigit() else -1, rec.get("max_abs_err"),
                               rec.get("pass") is True))
        elif rec and rec["kind"] == "generate":
            r["gen"] = dict(runner_json.text_fields(rec), result=rec.get("verdict"))
        elif rec and rec["kind"] == "generate-lib":
            r["genlib"] = runner_json.text_fields(rec)
        elif ln.startswith("PyTorchObserver "):
            try:
                r["obs"] = json.loads(ln[len("PyTorchObserver "):])
            except ValueError:
                pass
        elif ln.startswith("mem: ") and "n/a" not in ln:
            r["mem"] = dict(KV.findall(ln))
        elif ln.startswith("load_phases: "):
            r["load"] = dict(KV.findall(ln))
        elif ln.startswith("stats: ") and "n/a" not in ln:
            r["stats"] = dict(KV.findall(ln))
        elif ln.startswith("sbs: rc="):
            r["sbs"] = dict(KV.findall(ln))
        elif ln.startswith("et_cuda_run: ") or ln.startswith("sbs: cannot start"):
            r["error"] = ln.split(": ", 1)[1]
    return r


def fmt(v, d=1):
    return "–" if v is None else f"{v:.{d}f}"


def short(s, n=120):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n - 1] + "…"
