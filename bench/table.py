"""Collect bench/run.sh's results into one markdown file.

  table.py --index runs.tsv --torch torch.jsonl [--notes notes.txt] [--out RESULTS.md]

runs.tsv: "model<TAB>variant<TAB>rc<TAB>log" per et_cuda_run invocation (rc
"skipped" when it was not run); each log holds et_cuda_run's output. torch.jsonl:
torch_bench.py's rows. Prints the markdown and writes it to --out.
"""
import argparse
import json
import os
import re

MODEL_ORDER = ["deep_bf16", "heavy_bf16", "mlp_f32", "conv_f32", "attn_bf16", "encdec"]
TORCH_ORDER = ["torch eager", "torch cudagraph", "torch aoti"]

BENCH = re.compile(r"^(\S+) (bench|bench-wait): n=(\d+) warmup=(\d+) min=([\d.]+)us p50=([\d.]+)us p99=([\d.]+)us "
                   r"cpu_mean=([\d.]+)us")
LIB = re.compile(r"^(\S+) (bench|bench-wait)-lib: io=(\w+) executes_per_call=([\d.]+) lib_execute_us=([\d.]+) "
                 r"run_us=([\d.]+) backend_overhead_us=([-\d.]+) host_waits_per_call=([\d.]+)")
CHECK = re.compile(r"^(\S+) (case\d+(?: device-io)?): max_abs_err=(\S+) (PASS|FAIL)(.*)$")
ERROR = re.compile(r"^et_cuda_run: (.*)$")
ENQUEUE = re.compile(r"^(\S+) enqueue: (.*)$")
PIPELINE = re.compile(r"^pipeline (round-trip|device-chain|speedup|check): (.*)$")


def kv(text):
    return dict(re.findall(r"(\w+)=(\S+)", text))


def num(v):
    try:
        return float(str(v).rstrip("usx"))
    except (TypeError, ValueError):
        return None


def fmt(v, digits=1):
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    return f"{v:.{digits}f}"


def short(text, n=160):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def parse_et_log(path):
    r = {"checks": [], "errors": [], "enqueue": [], "pipeline": {}, "bench": {}}
    if not path or not os.path.exists(path):
        return r
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if m := BENCH.match(line):
                r["bench"].setdefault(m[2], {}).update(n=int(m[3]), p50=float(m[6]), p99=float(m[7]), host=float(m[8]))
            elif m := LIB.match(line):
                r["bench"].setdefault(m[2], {}).update(io=m[3], lib_exec=float(m[5]), overhead=float(m[7]),
                                                       waits=float(m[8]))
            elif m := CHECK.match(line):
                r["checks"].append((m[2], m[4], m[3], m[5].lstrip(": ")))
            elif m := ERROR.match(line):
                r["errors"].append(m[1])
            elif m := ENQUEUE.match(line):
                r["enqueue"].append((m[1], kv(m[2])))
            elif m := PIPELINE.match(line):
                r["pipeline"][m[1]] = m[2]
    return r


def check_summary(checks):
    if not checks:
        return "–"
    bad = [c for c in checks if c[1] != "PASS"]
    if not bad:
        return "PASS (" + ", ".join(f"{c[0]} {c[2]}" for c in checks) + ")"
    return "FAIL: " + "; ".join(f"{c[0]} err {c[2]} {c[3]}" for c in bad)


def status_of(rc, parsed):
    if rc == "skipped":
        return "skipped (time budget)"
    if rc == "124" or rc == "137":
        return f"timeout (rc {rc})"
    if parsed["errors"]:
        return "error: " + parsed["errors"][-1]
    if rc not in ("0", "1"):
        return f"exit status {rc}"
    return "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--torch", default="")
    ap.add_argument("--notes", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()

    rows, problems, pipeline_lines, enqueue_lines, checks = [], [], [], [], []
    if os.path.exists(a.index):
        with open(a.index) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 4:
                    continue
                model, variant, rc, log = parts[:4]
                p = parse_et_log(log)
                status = status_of(rc, p)
                if variant.startswith("check:"):
                    # A run that must fail: device IO on a program whose inputs are planned.
                    refused = any("memory-planned" in e for e in p["errors"])
                    checks.append(f"{model} / {variant[6:].strip()}: " +
                                  ("PASS (refused: memory-planned inputs)" if refused else f"FAIL ({short(status, 200)})"))
                    continue
                if variant.startswith("pipeline"):
                    for k in ("round-trip", "device-chain", "speedup", "check"):
                        if k in p["pipeline"]:
                            pipeline_lines.append(f"{k}: {p['pipeline'][k]}")
                    if status != "ok" or not p["pipeline"]:
                        problems.append(f"{model} / {variant}: {short(status, 300)}")
                    continue
                if variant.startswith("enqueue"):
                    for method, d in p["enqueue"]:
                        enqueue_lines.append((model, d))
                    if status != "ok" or not p["enqueue"]:
                        problems.append(f"{model} / {variant}: {short(status, 300)}")
                    continue
                for label, suffix in (("bench", ""), ("bench-wait", " + wait per call")):
                    b = p["bench"].get(label, {})
                    if label == "bench-wait" and not b:
                        continue
                    rows.append({"model": model, "variant": variant + suffix, "p50": b.get("p50"), "p99": b.get("p99"),
                                 "host": b.get("host"), "lib_exec": b.get("lib_exec"), "waits": b.get("waits"),
                                 "overhead": b.get("overhead"), "check": check_summary(p["checks"]), "status": status})
                if "bench" not in p["bench"] or status != "ok":
                    problems.append(f"{model} / {variant}: {short(status, 300)}")

    torch_rows = []
    if a.torch and os.path.exists(a.torch):
        with open(a.torch) as f:
            for line in f:
                try:
                    torch_rows.append(json.loads(line))
                except ValueError:
                    continue
    crash_notes = []
    for t in torch_rows:
        if t.get("source") != "torch" or "variant" not in t:
            continue
        check = "–"
        if t.get("max_err") is not None:
            check = f"max_err {t['max_err']:.3g}"
        if t.get("inputs_match") is False:
            check += " (inputs differ from the manifest's!)"
        status = t.get("status", "?")
        rows.append({"model": t["model"], "variant": t["variant"], "p50": t.get("p50_us"), "p99": t.get("p99_us"),
                     "host": t.get("host_us"), "lib_exec": None,
                     "waits": t.get("host_waits_per_call") if status == "ok" else None, "overhead": None,
                     "check": check, "status": status})
        if status != "ok":
            problems.append(f"{t['model']} / {t['variant']}: {short(status, 200)}")
            if t.get("stderr_tail"):
                crash_notes.append((f"{t['model']} / {t['variant']}: {status}", t["stderr_tail"], t.get("gdb"),
                                    t.get("gdb_frames") or []))

    # Order: model order, then et rows as run, then the torch rows.
    def key(r):
        mi = MODEL_ORDER.index(r["model"]) if r["model"] in MODEL_ORDER else len(MODEL_ORDER)
        ti = TORCH_ORDER.index(r["variant"]) + 1000 if r["variant"] in TORCH_ORDER else 0
        return (mi, ti)

    order = {id(r): i for i, r in enumerate(rows)}
    rows.sort(key=lambda r: (key(r), order[id(r)]))
    eager = {r["model"]: r["p50"] for r in rows if r["variant"] == "torch eager" and r["p50"]}

    out = ["# executorch-cuda benchmark", ""]
    if a.notes and os.path.exists(a.notes):
        with open(a.notes) as f:
            head = [ln.rstrip() for ln in f if ln.startswith(("gpu:", "python:"))]
        out += [f"- {ln}" for ln in head] + [""]
    out += ["## Latency per call", "",
            "| model | variant | p50 µs | p99 µs | host µs/call | lib execute µs/call | host waits/call | "
            "backend overhead µs | eager p50 / p50 | check |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        speed = "–"
        if r["p50"] and r["model"] in eager:
            speed = f"{eager[r['model']] / r['p50']:.2f}x"
        p50 = fmt(r["p50"]) if r["p50"] is not None else short(r["status"], 60)
        out.append(f"| {r['model']} | {r['variant']} | {p50} | {fmt(r['p99'])} | {fmt(r['host'])} | "
                   f"{fmt(r['lib_exec'])} | {fmt(r['waits'], 2)} | {fmt(r['overhead'])} | {speed} | "
                   f"{short(r['check'], 70)} |")
    out += ["", "host µs/call: thread CPU time per call. lib execute: host time inside et_cuda_execute per call; "
            "backend overhead: (execute_host_ns - run_host_ns) / executes, i.e. the library's own host time per "
            "execute outside the AOTI container's run. torch rows wait with torch.cuda.synchronize once per call.", ""]

    out += ["## Pipeline encoder → decoder (encdec)", ""]
    out += [f"- {ln}" for ln in pipeline_lines] or ["- (no result)"]
    out += ["", "## Enqueue (N executes without a wait, then one wait for the GPU)", ""]
    if enqueue_lines:
        out += ["| model | n | enqueue µs/call | total µs/call | enqueue / total | host waits while enqueuing | output on device |",
                "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for model, d in enqueue_lines:
            out.append(f"| {model} | {d.get('n', '?')} | {d.get('enqueue_per_call_us', '?')} | "
                       f"{d.get('total_per_call_us', '?')} | {d.get('enqueue_over_total', '?')} | "
                       f"{d.get('host_waits', '?')} | {d.get('output_on_device', '?')} |")
    else:
        out.append("- (no result)")

    if checks:
        out += ["", "## Checks", ""] + [f"- {c}" for c in checks]
    if problems or crash_notes:
        out += ["", "## Problems", ""]
        out += [f"- {short(p, 220)}" for p in problems[:25]]
        if len(problems) > 25:
            out.append(f"- ... and {len(problems) - 25} more (see logs/)")
        for title, stderr_tail, gdb, frames in crash_notes[:3]:
            out += ["", f"### {title}", "", "```", stderr_tail[-700:].strip()]
            if gdb:
                out += ["--- cuda-gdb: " + short(gdb, 200)] + [short(fr, 170) for fr in frames[:12]]
            out += ["```"]
    if a.notes and os.path.exists(a.notes):
        with open(a.notes) as f:
            rest = [ln.rstrip() for ln in f if ln.strip() and not ln.startswith(("gpu:", "python:"))]
        if rest:
            out += ["", "## Notes", ""] + [f"- {short(ln, 300)}" for ln in rest[-25:]]
    text = "\n".join(out) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
