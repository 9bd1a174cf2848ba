#!/usr/bin/env python3
"""Launch gaps of CUDA-graph decode steps from a kernel timeline (bench/trace/cupti_trace.c):

    python3 bench/trace/trace_table.py k.tsv [--title NAME] [--skip 2]

The graph with the most kernel records is the decode step; its records, in start order, are cut
into replays of one record per graph node. For each replay (the first --skip left out): span
(first start to last end), busy (the union of the kernels' intervals), gap = span - busy (the GPU
idle inside the step), overlap (kernels running at once, from programmatic dependent launch).
Prints a markdown summary: medians over the replays, the idle time before each kind of kernel,
and the time between replays (the host's)."""
import argparse
import statistics
import sys
from collections import defaultdict


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 6:
                continue
            rows.append((int(p[0]), int(p[1]), int(p[2]), int(p[3]), int(p[4]), p[5]))
    return rows


def kind(name):
    """A kernel's family: ours by prefix, Triton's and others by their first words."""
    for pre in ("et_attn_decw", "et_attn_dec", "et_attn_combine", "et_attn", "et_kv_write",
                "et_lin_norm", "et_lin_epi", "et_lin", "et_gemv", "et_argmax", "et_sample"):
        if name.startswith(pre):
            return name if name.startswith("et_lin_") and "_v" in name else pre
    if name.startswith("triton_"):
        return "triton_" + name.split("_")[1] + " " + "_".join(name.split("_")[2:5])
    return name[:40]


def summarize(rows, skip):
    by_graph = defaultdict(list)
    for r in rows:
        if r[2]:
            by_graph[r[2]].append(r)
    if not by_graph:
        return None
    gid, recs = max(by_graph.items(), key=lambda kv: len(kv[1]))
    recs.sort()
    n = len({r[3] for r in recs})
    reps = [recs[i:i + n] for i in range(0, len(recs) - n + 1, n)]
    reps = reps[skip:] if len(reps) > skip else reps
    spans, busys, overlaps, between = [], [], [], []
    gap_before = defaultdict(list)
    dur = defaultdict(list)
    prev_end = None
    for rep in reps:
        start, end = rep[0][0], max(r[1] for r in rep)
        if prev_end is not None:
            between.append((start - prev_end) / 1e3)
        prev_end = end
        spans.append((end - start) / 1e3)
        busy, cur_s, cur_e, total = 0, None, None, 0
        reach = None
        for r in rep:
            total += r[1] - r[0]
            g = 0 if reach is None else r[0] - reach
            gap_before[kind(r[5])].append(max(g, 0) / 1e3)
            dur[kind(r[5])].append((r[1] - r[0]) / 1e3)
            reach = r[1] if reach is None else max(reach, r[1])
            if cur_s is None or r[0] > cur_e:
                if cur_s is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = r[0], r[1]
            else:
                cur_e = max(cur_e, r[1])
        busy += cur_e - cur_s
        busys.append(busy / 1e3)
        overlaps.append((total - busy) / 1e3)
    k = len(reps)
    return {
        "graph": gid, "nodes": n, "replays": k,
        "span": statistics.median(spans), "busy": statistics.median(busys),
        "gap": statistics.median(s - b for s, b in zip(spans, busys)),
        "overlap": statistics.median(overlaps),
        "between": statistics.median(between) if between else 0.0,
        "kinds": sorted(((name, len(v) / k, sum(dur[name]) / k, sum(v) / k)
                         for name, v in gap_before.items()), key=lambda t: -(t[2] + t[3])),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tsv")
    ap.add_argument("--title", default=None)
    ap.add_argument("--skip", type=int, default=2)
    a = ap.parse_args(argv)
    s = summarize(load(a.tsv), a.skip)
    title = a.title or a.tsv
    if s is None:
        print(f"### {title}\n\nno CUDA-graph kernels in the timeline\n")
        return 1
    print(f"### {title}\n")
    print(f"Graph {s['graph']}: {s['nodes']} kernels a replay, {s['replays']} replays measured "
          f"(medians). Step span {s['span']:.1f} µs = kernels busy {s['busy']:.1f} µs + idle "
          f"{s['gap']:.1f} µs; kernels overlapping each other {s['overlap']:.1f} µs (PDL); "
          f"between replays (host) {s['between']:.1f} µs; span alone would give "
          f"{1e6 / s['span']:.0f} tok/s.\n")
    print("| kernel | per step | kernel µs per step | idle µs before it, per step |")
    print("| --- | ---: | ---: | ---: |")
    for name, cnt, d, g in s["kinds"]:
        print(f"| `{name}` | {cnt:.0f} | {d:.1f} | {g:.1f} |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
