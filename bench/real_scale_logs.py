"""bench/real_scale_table.py's readers of the runner's logs (et_cuda_run --generate --json, and
the text lines of older logs), the `brief` command, and the small helpers of its tables."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models"))
import runner_json  # noqa: E402  et_cuda_run --json's reader

# ----------------------------------------------------------------------------- runner logs

KV = re.compile(r"(\w+)=([^\s]+)")


def cmd_brief(a):
    """One line about a --generate log for a script's timeline: the last round's figures (its
    tokens left out) and the library's line, or the runner's error."""
    r = parse_run(a.log)
    if r is None:
        print("no log")
        return 0
    parts = []
    if r["rounds"]:
        d = r["rounds"][-1]
        parts.append("generate: " + " ".join(f"{k}={v}" for k, v in d.items()
                                             if k not in ("tokens", "expected", "verdict")) + " " + d["verdict"])
    if r.get("lib"):
        parts.append("generate-lib: " + " ".join(f"{k}={v}" for k, v in r["lib"][-1].items()))
    if r.get("error"):
        parts.append("et_cuda_run: " + r["error"])
    print(" | ".join(parts)[: a.width])
    return 0


def parse_run(path):
    """Figures of one et_cuda_run --generate log (written by `run`)."""
    r = {"log": os.path.basename(path), "rounds": []}
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for ln in text.splitlines():
        rec = runner_json.record(ln)
        if rec is not None and rec["kind"] == "generate":
            d = runner_json.text_fields(rec)
            d["verdict"] = verdict(d, rec.get("verdict", ""))
            r["rounds"].append(d)
            continue
        if rec is not None and rec["kind"] == "generate-lib":
            r.setdefault("lib", []).append(runner_json.text_fields(rec))
            continue
        # Text lines: logs written before --json.
        m = re.match(r"^generate(?: \(round (\d+) of (\d+)\))?: (.*)$", ln)
        if m:
            d = dict(KV.findall(m.group(3)))
            d["verdict"] = verdict(d, m.group(3).split()[-1])
            r["rounds"].append(d)
            continue
        m = re.match(r"^generate-lib(?: \(round (\d+) of (\d+)\))?: (.*)$", ln)
        if m:
            r.setdefault("lib", []).append(dict(KV.findall(m.group(3))))
        elif ln.startswith("PyTorchObserver "):
            try:
                r["observer"] = json.loads(ln.split(" ", 1)[1])
            except ValueError:
                pass
        elif ln.startswith("stats: ") and "n/a" not in ln:
            r["stats"] = {k: float(v) for k, v in KV.findall(ln)}
        elif ln.startswith("mem: ") and "n/a" not in ln:
            r["mem"] = dict(KV.findall(ln))
        elif ln.startswith("load_phases: ") and "load_phases" not in r:
            r["load_phases"] = dict(KV.findall(ln))  # the library's per-phase load timers (newer builds)
        elif ln.startswith("real_scale: "):
            r["proc"] = dict(KV.findall(ln))
        elif ln.startswith("et_cuda_run: ") and "error" not in r:
            r["error"] = ln[len("et_cuda_run: "):][:300]
    return r


def load_phases_upload(lp):
    """(upload GB/s, measured?) from a parsed load_phases line: its upload_gbps, else
    upload_bytes / upload_ms; (None, False) without the line or usable figures."""
    if not lp:
        return None, False
    try:
        return float(lp["upload_gbps"]), True
    except (KeyError, ValueError):
        pass
    try:
        ms, n = float(lp["upload_ms"]), float(lp["upload_bytes"])
        return (n / (ms / 1e3) / 1e9, True) if ms > 0 else (None, False)
    except (KeyError, ValueError):
        return None, False


def verdict(d, word):
    """The runner's MATCH/MISMATCH, with where a mismatch starts: "MISMATCH at 17"
    means tokens 0-16 equal the expected ones (with near-tied logits one flip changes
    everything after it, so the first difference is what can be compared)."""
    if word != "MISMATCH":
        return word
    got, want = d.get("tokens", "").split(","), d.get("expected", "").split(",")
    k = 0
    while k < min(len(got), len(want)) and got[k] == want[k]:
        k += 1
    return f"MISMATCH at {k}"


def f(v, fmt="{:.1f}"):
    try:
        return fmt.format(float(v))
    except (TypeError, ValueError):
        return "n/a"


def load_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def kv_bytes_per_token(cfg, prompt_len, steps):
    """Mean KV-cache bytes a decode step reads (bf16; the valid positions only)."""
    per_pos = 2 * cfg["layers"] * cfg["kv_heads"] * cfg["head_dim"] * 2
    positions = [prompt_len + i + 1 for i in range(steps - 1)]  # step i attends to prompt_len + i + 1 slots
    return per_pos * sum(positions) / max(len(positions), 1)
