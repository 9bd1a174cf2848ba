"""bench/real_scale_table.py's ncu census: one decode step's kernels from an ncu CSV log, by
kind, with their share of the HBM bandwidth (bench/hbm.py); the `census` command."""
import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hbm  # noqa: E402  the GPU's HBM bandwidth, for the "% of HBM" columns

# ----------------------------------------------------------------------------- ncu census

UNIT = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0,
        "second": 1.0, "byte": 1, "b": 1, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9,
        "gb": 1e9, "kib": 1024, "mib": 1 << 20, "gib": 1 << 30}
METRICS = {"gpu__time_duration.sum": "s", "dram__bytes_read.sum": "rd", "dram__bytes_write.sum": "wr"}
GEMM_RE = re.compile(r"gemv|gemm|et_lin_[a-z0-9]+_v\d|int4mm|addmm|bmm|matmul|xmma|cutlass|(^|_)mm(_|$)|_mm_|fused_mm", re.I)
# Inductor's pointwise/reduction kernels are not matrix products whatever ops their names list.
POINTWISE_RE = re.compile(r"^triton_(poi|per|red)_")
ATTN_RE = re.compile(r"attn|attention|sdpa|flash|softmax", re.I)


def kind_of(name):
    if POINTWISE_RE.search(name):
        return "other"
    if GEMM_RE.search(name):
        return "GEMM"
    if ATTN_RE.search(name):
        return "attention"
    return "other"


def number(text):
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def parse_ncu_csv(path):
    """Kernels in launch order: [{"id", "name", "s", "rd", "wr"}] (seconds, bytes)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    kernels = {}
    for row in csv.DictReader(lines):
        try:
            kid = int(row.get("ID", ""))
        except ValueError:
            continue
        key = METRICS.get((row.get("Metric Name") or "").strip())
        v = number(row.get("Metric Value") or "")
        if key is None or v is None:
            continue
        unit = (row.get("Metric Unit") or "").strip().lower()
        k = kernels.setdefault(kid, {"id": kid, "name": (row.get("Kernel Name") or "").strip(), "s": None, "rd": None,
                                     "wr": None})
        k[key] = v * UNIT.get(unit, 1e-9 if key == "s" and not unit else 1)
    return [kernels[i] for i in sorted(kernels)]


def decode_step(kernels, min_len=4):
    """The last decode step: the largest N (at most a third of the kernels) such that the last
    3N kernel names are one block of N names three times (prefill + 3 decode steps gives exactly
    that with N = one step; a repeated layer inside a step is shorter and fails the test because
    a step ends with the head). Falls back to two repeats. Returns (kernels of the step, repeats)."""
    names = [k["name"] for k in kernels]
    for reps in (3, 2):
        for n in range(len(names) // reps, min_len - 1, -1):
            tail = names[-reps * n:]
            if all(tail[i * n:(i + 1) * n] == tail[:n] for i in range(1, reps)):
                return kernels[-n:], reps
    return [], 0


def census(path):
    ks = parse_ncu_csv(path)
    step, reps = decode_step(ks)
    out = {"kernels_total": len(ks), "step_kernels": len(step), "repeats": reps}
    if not step:
        return out, []
    agg = {}
    for k in step:
        a = agg.setdefault(k["name"], {"name": k["name"], "kind": kind_of(k["name"]), "count": 0, "s": 0.0, "rd": 0.0,
                                       "wr": 0.0})
        a["count"] += 1
        for f in ("s", "rd", "wr"):
            a[f] += k[f] or 0.0
    rows = sorted(agg.values(), key=lambda r: -r["s"])
    tot_s = sum(r["s"] for r in rows)
    tot_b = sum(r["rd"] + r["wr"] for r in rows)
    g = [r for r in rows if r["kind"] == "GEMM"]
    g_s, g_b = sum(r["s"] for r in g), sum(r["rd"] + r["wr"] for r in g)
    at = [r for r in rows if r["kind"] == "attention"]
    out.update(step_time_us=tot_s * 1e6, step_dram_bytes=tot_b, step_gb_s=tot_b / tot_s / 1e9 if tot_s else 0,
               gemm_kernels=sum(r["count"] for r in g), gemm_time_us=g_s * 1e6, gemm_share=g_s / tot_s if tot_s else 0,
               gemm_gb_s=g_b / g_s / 1e9 if g_s else 0, gemm_dram_bytes=g_b,
               attention_kernels=sum(r["count"] for r in at), attention_time_us=sum(r["s"] for r in at) * 1e6,
               kernel_bound_tok_s=1 / tot_s if tot_s else 0)
    return out, rows


def census_md(title, path, summary, rows, bw=None):
    """The per-kernel section; bw: the run's hbm.Hbm (the default: unknown GPU, assumed)."""
    bw = bw or hbm.Hbm()
    L = [f"### {title}", "", f"ncu log: `{os.path.basename(path)}`; {summary['kernels_total']} kernels profiled, "
         f"the last decode step found as {summary['step_kernels']} kernels repeated {summary['repeats']} times at "
         "the end of the log.", ""]
    if not rows:
        L += ["No repeating decode step found in the log (see the raw CSV).", ""]
        return L
    s = summary
    L += [f"Per step: {s['step_kernels']} kernels, {s['step_time_us']:.1f} µs of kernel time, "
          f"{s['step_dram_bytes'] / 1e6:.1f} MB of DRAM traffic ({s['step_gb_s']:.0f} GB/s, "
          f"{bw.pct(s['step_gb_s']):.1f} % of {bw.label}); kernels back to back would give "
          f"{s['kernel_bound_tok_s']:.0f} tok/s. GEMM kernels: {s['gemm_kernels']}, {s['gemm_time_us']:.1f} µs "
          f"({s['gemm_share'] * 100:.1f} % of the step), {s['gemm_gb_s']:.0f} GB/s "
          f"({bw.pct(s['gemm_gb_s']):.1f} % of HBM). Attention kernels: {s['attention_kernels']}, "
          f"{s['attention_time_us']:.1f} µs.", "",
          f"| kernel | kind | count | time µs | share | DRAM read MB | DRAM write MB | GB/s | % of {bw.tb_s} |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    tot = s["step_time_us"] / 1e6
    for r in rows:
        gbs = (r["rd"] + r["wr"]) / r["s"] / 1e9 if r["s"] else 0
        name = r["name"] if len(r["name"]) <= 90 else r["name"][:87] + "..."
        L.append(f"| `{name}` | {r['kind']} | {r['count']} | {r['s'] * 1e6:.1f} | {r['s'] / tot * 100:.1f} % | "
                 f"{r['rd'] / 1e6:.2f} | {r['wr'] / 1e6:.2f} | {gbs:.0f} | {bw.pct(gbs):.1f} % |")
    L.append("")
    return L


def cmd_census(a):
    summary, rows = census(a.csv)
    print("census: " + json.dumps(summary, sort_keys=True))
    if a.md:
        with open(a.md, "w") as f:
            f.write("\n".join(census_md(a.title or os.path.basename(a.csv), a.csv, summary, rows, hbm.Hbm(a.gpu))) + "\n")
    return 0
