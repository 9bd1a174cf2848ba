#!/usr/bin/env python3
"""Launch gaps of CUDA-graph decode steps from a kernel timeline (bench/trace/cupti_trace.c):

    python3 bench/trace/trace_table.py k.tsv [--title NAME] [--skip 2]

The graph with the most kernel records is the decode step; its records, in start order, are cut
into replays of one record per graph node. For each replay (the first --skip left out): span
(first start to last end), busy (the union of the kernels' intervals), gap = span - busy (the GPU
idle inside the step), overlap (kernels running at once, from programmatic dependent launch), and
per kernel its advance: how far its end moves the step's end past every kernel before it (with
PDL a kernel starts early and waits, so its duration is not what it costs; the advances sum to
the span, less the first kernel's start-to-end). Prints a markdown summary: medians over the
replays, per kind of kernel its time, its advance and the idle time before it,
and the time between replays (the host's). When the timeline also holds the records outside the
graph (kernels, copies, driver calls: cupti_trace.c writes them), the time between replays is
broken down: per record kind, its median time inside the interval, and the records of the
median interval in order, with their offsets from the end of the replay before."""
import argparse
import bisect
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
    adv = defaultdict(list)
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
            adv[kind(r[5])].append(max(r[1] - (r[0] if reach is None else reach), 0) / 1e3)
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
    outside = sorted(r for r in rows if not r[2])
    breakdown, timeline = between_breakdown(reps, outside)
    return {
        "breakdown": breakdown, "timeline": timeline,
        "graph": gid, "nodes": n, "replays": k,
        "span": statistics.median(spans), "busy": statistics.median(busys),
        "gap": statistics.median(s - b for s, b in zip(spans, busys)),
        "overlap": statistics.median(overlaps),
        "between": statistics.median(between) if between else 0.0,
        "kinds": sorted(((name, len(v) / k, sum(dur[name]) / k, sum(adv[name]) / k, sum(v) / k)
                         for name, v in gap_before.items()), key=lambda t: -(t[3] + t[4])),
    }


def outside_kind(name):
    """A record outside the graph: a driver call or a copy by its name (sizes kept), a kernel by kind()."""
    if name.startswith("api ") or name.startswith("memcpy ") or name.startswith("memset "):
        return name
    return kind(name)


def between_breakdown(reps, outside):
    """Per interval between two replays: the time of each kind of record outside the graph inside
    it (clipped to the interval); medians over the intervals, and the median interval's records."""
    gaps = []
    for a, b in zip(reps, reps[1:]):
        lo, hi = max(r[1] for r in a), b[0][0]
        if hi > lo:
            gaps.append((lo, hi))
    if not gaps or not outside:
        return [], []
    starts = [r[0] for r in outside]
    longest = max(r[1] - r[0] for r in outside)
    per = defaultdict(list)
    inside = []
    for lo, hi in gaps:
        sums = defaultdict(float)
        recs = []
        # Records are sorted by start; one may start before the interval (a wait), but no
        # earlier than the longest record's length.
        i = bisect.bisect_left(starts, lo - longest)
        for r in outside[i:]:
            if r[0] >= hi:
                break
            o = min(r[1], hi) - max(r[0], lo)
            if o <= 0:
                continue
            sums[outside_kind(r[5])] += o / 1e3
            recs.append(r)
        for name, v in sums.items():
            per[name].append(v)
        inside.append(recs)
    n = len(gaps)
    breakdown = sorted(((name, len(v) / n, statistics.median(v + [0.0] * (n - len(v))))
                        for name, v in per.items()), key=lambda t: -t[2])
    order = sorted(range(n), key=lambda j: gaps[j][1] - gaps[j][0])
    mid = order[n // 2]
    lo, hi = gaps[mid]
    timeline = [((r[0] - lo) / 1e3, (r[1] - r[0]) / 1e3, outside_kind(r[5])) for r in inside[mid]]
    timeline.append(((hi - lo) / 1e3, 0.0, "next replay's first kernel"))
    return breakdown, timeline


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
    print("| kernel | per step | kernel µs per step | advance µs per step | advance µs each "
          "| idle µs before it, per step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, cnt, d, a, g in s["kinds"]:
        print(f"| `{name}` | {cnt:.0f} | {d:.1f} | {a:.1f} | {a / max(cnt, 1):.2f} | {g:.1f} |")
    print()
    if s["breakdown"]:
        print("Between replays, outside the graph (median µs inside the interval; driver calls are "
              "host time, the rest GPU time; they overlap):\n")
        print("| record | share of intervals with it | µs inside the interval |")
        print("| --- | ---: | ---: |")
        for name, share, us in s["breakdown"][:25]:
            print(f"| `{name}` | {share:.2f} | {us:.1f} |")
        print("\nThe median interval, record by record (µs from the end of the replay before):\n")
        print("| at µs | lasts µs | record |")
        print("| ---: | ---: | --- |")
        for at, d, name in s["timeline"][:60]:
            print(f"| {at:.1f} | {d:.1f} | `{name}` |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
