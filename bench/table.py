"""Collect bench/run.sh's results into one markdown file.

  table.py --index runs.tsv [--torch torch.jsonl] [--notes notes.txt] [--int4 int4_results.json]
           [--gen-n N] [--out RESULTS.md]

runs.tsv: one et_cuda_run invocation per line, tab-separated: model, variant, rc, log,
and optionally section, backend ("ours" or "upstream:<build folder>"), manifest, wall
seconds (rc "skipped" when the time budget left no room, "not run" when run.sh chose not
to). A relative log or manifest path is taken relative to the index file's folder. Each
log holds et_cuda_run --json's output (runner/README.md, "--json": the records; mem, stats,
enqueue, pipeline and error lines stay text). torch.jsonl:
torch_bench.py's rows. int4_results.json: kernels/check_int4.py's results (or its
bench phase's part file). Prints the markdown and writes it to --out, which must not exist
(results files are never replaced: bench/results.py names a fresh one).

Variants (what run.sh names them): "check: ..." (a run that must fail), "pipeline ...",
"enqueue ...", "gen ..." (token loop), "mem ..." (memory only), everything else a
latency row from the --bench lines ("... + wait per call" is the bench-wait line).
"""
import argparse
import json
import os
import sys

# The readers and the report's sections: beside this file (here and in the bundle, scripts/gpu_bundle.sh).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table_read import (  # noqa: E402
    GRAPH_TARGET_MODELS, MODEL_ORDER, backend_label, check_summary, fmt, fx, num, parse_et_log,
    refusal_text, short, status_of)
from table_sections import Sections  # noqa: E402

# ------------------------------------------------------------------ the report


class Report(Sections):
    def __init__(self, a):
        self.a = a
        self.rows = []        # latency rows (et and torch)
        self.gen = []         # token-loop runs
        self.memrows = []     # every run with a mem line
        self.problems, self.pipeline_lines, self.enqueue_lines, self.checks = [], [], [], []
        self.crash_notes = []
        self.targets = []     # (target, subject, measured, verdict)
        self.figs = []        # "<!-- figure: ... -->" lines for bench/results.py
        self.runs = []
        base = os.path.dirname(os.path.abspath(a.index))
        self.index_dir = base

    def path(self, p):
        if not p:
            return p
        return p if os.path.isabs(p) else os.path.join(self.index_dir, p)

    # -------------------------------------------------------------- reading
    def read_index(self):
        if not os.path.exists(self.a.index):
            return
        with open(self.a.index) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 4:
                    continue
                parts += [""] * (8 - len(parts))
                model, variant, rc, log, section, backend, manifest, wall = parts[:8]
                p = parse_et_log(self.path(log))
                run = {"model": model, "variant": variant, "rc": rc, "log": log, "section": section,
                       "backend": backend or ("upstream" if variant.startswith("upstream") else "ours"),
                       "manifest": self.path(manifest), "wall": num(wall), "p": p, "status": status_of(rc, p)}
                self.runs.append(run)
                self.classify(run)

    def classify(self, run):
        model, variant, p, status = run["model"], run["variant"], run["p"], run["status"]
        if p["mem"] and "na" not in p["mem"]:
            self.memrows.append(run)
        if variant.startswith("check:"):
            # A run that must fail: device IO on a program whose inputs are planned.
            refused = any("memory-planned" in e for e in p["errors"])
            self.checks.append(f"{model} / {variant[6:].strip()}: " +
                               ("PASS (refused: memory-planned inputs)" if refused else f"FAIL ({short(status, 200)})"))
            return
        if variant.startswith("pipeline"):
            for k in ("round-trip", "device-chain", "speedup", "check"):
                if k in p["pipeline"]:
                    self.pipeline_lines.append(f"{k}: {p['pipeline'][k]}")
            if status != "ok" or not p["pipeline"]:
                self.problems.append(f"{model} / {variant}: {short(status, 300)}")
            return
        if variant.startswith("enqueue"):
            for _method, d in p["enqueue"]:
                self.enqueue_lines.append((model, d))
            if status != "ok" or not p["enqueue"]:
                self.problems.append(f"{model} / {variant}: {short(status, 300)}")
            return
        if variant.startswith("gen "):
            self.gen.append(run)
            if status != "ok" and not status.startswith("REFUSED") or (status == "ok" and p["generate"] is None):
                self.problems.append(f"{model} / {variant}: {short(status if status != 'ok' else 'no generate line', 300)}")
            return
        if variant.startswith("mem "):
            if status != "ok":
                self.problems.append(f"{model} / {variant}: {short(status, 300)}")
            return
        for label, suffix in (("bench", ""), ("bench-wait", " + wait per call")):
            b = p["bench"].get(label, {})
            if label == "bench-wait" and not b:
                continue
            stats = p["stats"] or {}
            self.rows.append({"model": model, "variant": variant + suffix, "backend": run["backend"],
                              "p50": b.get("p50"), "p99": b.get("p99"), "host": b.get("host"),
                              "lib_exec": b.get("lib_exec"), "waits": b.get("waits"), "overhead": b.get("overhead"),
                              "check": check_summary(p["checks"]), "status": status, "stats": stats,
                              "mem": p["mem"], "run": run})
        if "bench" not in p["bench"] or status != "ok":
            if not (variant.startswith("upstream") and (status.startswith("REFUSED") or run["rc"] == "not run")):
                self.problems.append(f"{model} / {variant}: {short(status, 300)}")

    def read_torch(self):
        if not self.a.torch or not os.path.exists(self.a.torch):
            return
        with open(self.a.torch) as f:
            torch_rows = []
            for line in f:
                try:
                    torch_rows.append(json.loads(line))
                except ValueError:
                    continue
        for t in torch_rows:
            if t.get("source") != "torch" or "variant" not in t:
                continue
            check = "–"
            if t.get("max_err") is not None:
                check = f"max_err {t['max_err']:.3g}"
            if t.get("inputs_match") is False:
                check += " (inputs differ from the manifest's!)"
            status = t.get("status", "?")
            self.rows.append({"model": t["model"], "variant": t["variant"], "backend": "torch", "p50": t.get("p50_us"),
                              "p99": t.get("p99_us"), "host": t.get("host_us"), "lib_exec": None,
                              "waits": t.get("host_waits_per_call") if status == "ok" else None, "overhead": None,
                              "check": check, "status": status, "stats": {}, "mem": None, "run": None})
            if status != "ok":
                self.problems.append(f"{t['model']} / {t['variant']}: {short(status, 200)}")
                if t.get("stderr_tail"):
                    self.crash_notes.append((f"{t['model']} / {t['variant']}: {status}", t["stderr_tail"], t.get("gdb"),
                                             t.get("gdb_frames") or []))

    def read_int4(self):
        self.int4 = []
        self.int4_note = ""
        path = self.a.int4
        if not path or not os.path.exists(path):
            self.int4_note = "no int4 results (the int4 section did not run or wrote nothing)"
            return
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            self.int4_note = f"cannot read {path}: {e}"
            return
        if "results" in d and isinstance(d["results"], dict):  # check_int4.py's bench phase part file
            fails = d.get("fails") or []
            d = d["results"]
            if fails:
                self.int4_note = f"{len(fails)} failure(s) recorded by the bench phase: " + short(
                    "; ".join(str(x.get("error", x))[:200] for x in fails), 400)
        self.int4 = [r for r in d.get("bench", []) if isinstance(r, dict) and "m" in r]

    # -------------------------------------------------------------- lookups
    def row(self, model, variant, backend=None):
        for r in self.rows:
            if r["model"] == model and r["variant"] == variant and (backend is None or r["backend"] == backend):
                return r
        return None

    def run_status(self, model, variant):
        """The status of the run named `variant` (without " + wait per call"), or "not run"."""
        variant = variant.replace(" + wait per call", "")
        for r in self.runs:
            if r["model"] == model and r["variant"] == variant:
                return r["status"] if r["status"] != "ok" else "no bench line"
        return "not run"

    def gen_run(self, model, variant):
        for r in self.gen:
            if r["model"] == model and r["variant"] == variant:
                return r
        return None

    def ordered_models(self, names):
        seen = []
        for n in names:
            if n not in seen:
                seen.append(n)
        return sorted(seen, key=lambda n: (MODEL_ORDER.index(n) if n in MODEL_ORDER else len(MODEL_ORDER), seen.index(n)))

    # -------------------------------------------------------------- sections
    # -------------------------------------------------------------- targets
    def fig(self, key, value, unit, better, what):
        """A figure for the index's best-figures table (bench/results.py reads these lines)."""
        if isinstance(value, (int, float)):
            self.figs.append(f"<!-- figure: {key} | {value:.6g} | {unit} | {better} | {what} -->")

    def add_target(self, target, subject, measured, ok):
        verdict = "n/a" if ok is None else ("PASS" if ok else "MISS")
        self.targets.append((target, subject, measured, verdict))

    def compute_targets(self):
        self.graph_targets()
        self.decode_targets()
        self.sharing_target()
        self.int4_targets()

    def graph_targets(self):
        # Issue 13: graphs, waited per call, against PyTorch's CUDA-graph replay.
        for m in GRAPH_TARGET_MODELS:
            g = self.row(m, "et default device-io + graphs + wait per call", "ours")
            t = self.row(m, "torch cudagraph")
            if g is None or g["p50"] is None or t is None or t["p50"] is None:
                why = []
                if g is None or g["p50"] is None:
                    why.append("graphs row: " + short(g["status"] if g else self.run_status(
                        m, "et default device-io + graphs"), 90))
                if t is None or t["p50"] is None:
                    why.append("torch cudagraph: " + (short(t["status"], 80) if t else "not run"))
                self.add_target("graphs + wait p50 ≤ torch cudagraph p50", m, "not measured (" + "; ".join(why) + ")", None)
            else:
                self.add_target("graphs + wait p50 ≤ torch cudagraph p50", m,
                                f"{g['p50']:.1f} µs vs {t['p50']:.1f} µs ({g['p50'] / t['p50']:.2f}x)", g["p50"] <= t["p50"])
            if g is not None and g["p50"] is not None:
                self.fig(f"graphs_wait_p50_us.{m}", g["p50"], "µs", "lower",
                         "device-io + graphs + wait per call, p50" + (f" (torch cudagraph {t['p50']:.1f} µs)"
                                                                      if t is not None and t["p50"] is not None else ""))
            if g is not None and g["overhead"] is not None:
                st = g["stats"] or {}
                rep = st.get("graph_replays")
                extra = f"; {rep} replays, {st.get('graph_captures', '?')} captures, {st.get('graph_fallbacks', '?')} fallbacks" if rep is not None else ""
                ok = g["overhead"] <= 5.0 and (rep is None or rep > 0)
                self.fig(f"replay_overhead_us.{m}", g["overhead"], "µs", "lower", "backend overhead per replayed execute")
                self.add_target("backend overhead per replayed execute ≤ 5 µs", m,
                                f"{g['overhead']:.1f} µs (lib execute {fmt(g['lib_exec'])} µs/call{extra})", ok)
            else:
                self.add_target("backend overhead per replayed execute ≤ 5 µs", m, "not measured (" + short(
                    self.run_status(m, "et default device-io + graphs"), 90) + ")", None)

    def decode_targets(self):
        # Issue 13: decode tok/s with graphs.
        for model in self.ordered_models([r["model"] for r in self.gen]):
            graphs = [r for r in self.gen if r["model"] == model and r["variant"].startswith("gen et") and "graphs" in r["variant"]]
            if not graphs:
                continue
            ours = graphs[0]
            og = ours["p"]["generate"] or {}
            ot = num(og.get("decode_tok_s"))
            if ot is None or og.get("result") == "MISMATCH":
                self.add_target("decode tok/s with graphs", model,
                                f"not measured: {short(ours['status'] if ours['status'] != 'ok' else 'tokens ' + str(og.get('result')), 100)}",
                                False if og.get("result") == "MISMATCH" else None)
                continue
            self.fig(f"decode_tok_s.graphs.{model}", ot, "tok/s", "higher",
                     f"token loop, {self.a.gen_n or '?'} tokens, ours: {ours['variant'][4:]}")
            ups = [r for r in self.gen if r["model"] == model and r["variant"].startswith("gen upstream")
                   and r["variant"].endswith("+ graphs") and r["status"] == "ok" and r["p"]["generate"]
                   and num(r["p"]["generate"].get("decode_tok_s"))]
            if ups:
                best = max(ups, key=lambda r: num(r["p"]["generate"]["decode_tok_s"]))
                ut = num(best["p"]["generate"]["decode_tok_s"])
                self.add_target("decode tok/s with graphs ≥ 1.3× upstream with its graphs", model,
                                f"{ot:.0f} vs {ut:.0f} tok/s ({best['variant'][4:]}): {ot / ut:.2f}x", ot >= 1.3 * ut)
            else:
                plain = [r for r in self.gen if r["model"] == model and r["variant"].startswith("gen upstream")
                         and r["status"] == "ok" and num((r["p"]["generate"] or {}).get("decode_tok_s"))]
                info = "".join(f"; {r['variant'][4:]} (no graphs) {num(r['p']['generate']['decode_tok_s']):.0f} tok/s: "
                               f"{ot / num(r['p']['generate']['decode_tok_s']):.2f}x" for r in plain)
                base_v = "gen et + weight+cache sharing" if "sharing" in ours["variant"] else "gen et"
                base = self.gen_run(model, base_v)
                bt = num(((base or {}).get("p", {}).get("generate") or {}).get("decode_tok_s")) if base else None
                if bt is None:
                    self.add_target("decode tok/s with graphs ≥ 2× ours without (upstream cannot run it with graphs)",
                                    model, "not measured (no run without graphs)", None)
                else:
                    self.add_target("decode tok/s with graphs ≥ 2× ours without (upstream cannot run it with graphs)",
                                    model, f"{ot:.0f} vs {bt:.0f} tok/s: {ot / bt:.2f}x{info}", ot >= 2 * bt)

    def sharing_target(self):
        # Issue 13: two methods, one copy of the weights.
        sh = getattr(self, "sharing", None)
        if sh is not None:
            cands = [(v, d) for v, d in sh.items() if "sharing" in v and d.get("held_drv") is not None]
            if cands:
                v, d = min(cands, key=lambda x: x[1]["held_drv"])
                lib = f"; library counter {fx(d['held_lib'])}" if d.get("held_lib") is not None else ""
                text = (f"{d['held_drv']:.2f}x ({v[7:]}: {fmt(d['saved'])} MiB saved by the driver's count{lib}; "
                        f"whole footprint {fx(d['whole'])})")
                if d["held_drv"] < 0.5:
                    # More memory went away than one copy of the weights: not attributable to sharing.
                    self.add_target("two-method program: weights held ≤ 1.05× one copy", "qwen3_pd_bf16",
                                    text + ": more than one copy saved, so the drop is not the weights alone", None)
                else:
                    self.add_target("two-method program: weights held ≤ 1.05× one copy", "qwen3_pd_bf16", text,
                                    d["held_drv"] <= 1.05)
                    self.fig("weights_held.qwen3_pd_bf16", d["held_drv"], "x", "lower",
                             f"two-method program, weights held / one copy, {v[7:]}, driver's count")
            else:
                self.add_target("two-method program: weights held ≤ 1.05× one copy", "qwen3_pd_bf16",
                                "not measured (no sharing run with memory figures, or no weights size)", None)

    def int4_targets(self):
        # Issue 15: int4 GEMV bandwidth (M ≤ 8, K = N ≥ 4096).
        for r in self.int4:
            if r.get("m", 99) <= 8 and r.get("n") == r.get("k") and r.get("n", 0) >= 4096 and r.get("group") == 128 \
                    and r.get("ikt") == 8:
                tb = r.get("ours_dev_TBps")
                how = "kernel time (CUPTI)"
                if not isinstance(tb, (int, float)):
                    tb, how = r.get("ours_TBps"), "queue time"
                if how.startswith("kernel"):
                    self.fig(f"int4_tb_s.M{r['m']}.NK{r['n']}", tb, "TB/s", "higher",
                             f"int4 GEMV kernel time (CUPTI), M={r['m']} N=K={r['n']}")
                self.add_target("int4 GEMV ≥ 2.4 TB/s (50 % of HBM)", f"M={r['m']} N=K={r['n']}",
                                f"{tb:.2f} TB/s ({how})" if isinstance(tb, (int, float))
                                else f"not measured ({short(r.get('error', '?'), 60)})",
                                (tb >= 2.4) if isinstance(tb, (int, float)) else None)

    def info_lines(self):
        """Figures the issues ask for that are not targets."""
        out = []
        for v in ("gen et", "gen et + graphs"):
            q = self.gen_run("qwen3_bf16", v)
            i = self.gen_run("qwen3_int4tp_bf16", v)
            if q and i:
                qt = num((q["p"]["generate"] or {}).get("decode_tok_s"))
                it = num((i["p"]["generate"] or {}).get("decode_tok_s"))
                if qt and it:
                    out.append(f"- int4 vs bf16 decoder ({v[4:]}): qwen3_int4tp_bf16 {it:.0f} tok/s, qwen3_bf16 {qt:.0f} "
                               f"tok/s: {it / qt:.2f}x (a small model: decode is launch-bound, not weight-bound)")
        return out

    # -------------------------------------------------------------- output
    def render(self):
        out = ["# executorch-cuda benchmark", ""]
        notes_head, notes_rest = [], []
        if self.a.notes and os.path.exists(self.a.notes):
            with open(self.a.notes) as f:
                for ln in f:
                    ln = ln.rstrip()
                    if not ln.strip():
                        continue
                    (notes_head if ln.startswith(("gpu:", "python:")) else notes_rest).append(ln)
        out += [f"- {ln}" for ln in notes_head] + [""]
        self.sharing_lines = self.sharing_block()
        self.compute_targets()
        out += ["## Targets", "", "| target | subject | measured | result |", "| --- | --- | --- | --- |"]
        out += [f"| {t} | {s} | {m} | **{v}** |" for t, s, m, v in self.targets] or ["| (none measured) | | | |"]
        info = self.info_lines()
        if info:
            out += [""] + info
        out.append("")
        out += self.latency_table()
        out += self.upstream_table()
        out += self.token_table()
        out += self.memory_table()
        out += self.int4_table()
        out += ["## Pipeline encoder → decoder (encdec)", ""]
        out += [f"- {ln}" for ln in self.pipeline_lines] or ["- (no result)"]
        out += ["", "## Enqueue (N executes without a wait, then one wait for the GPU)", ""]
        if self.enqueue_lines:
            out += ["| model | n | enqueue µs/call | total µs/call | enqueue / total | host waits while enqueuing | output on device |",
                    "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
            for model, d in self.enqueue_lines:
                out.append(f"| {model} | {d.get('n', '?')} | {d.get('enqueue_per_call_us', '?')} | "
                           f"{d.get('total_per_call_us', '?')} | {d.get('enqueue_over_total', '?')} | "
                           f"{d.get('host_waits', '?')} | {d.get('output_on_device', '?')} |")
        else:
            out.append("- (no result)")
        if self.checks:
            out += ["", "## Checks", ""] + [f"- {c}" for c in self.checks]
        refusals = {}
        for r in self.runs:
            if r["p"]["refused"]:
                refusals.setdefault(backend_label(r["backend"]), (r["model"], r["variant"], refusal_text(r["p"]["refused"])))
        out += ["", "## What could not run, and why", ""]
        for b, (m, v, msg) in refusals.items():
            out.append(f"- {b} refuses programs exported by ExecuTorch 1.2 (e.g. {m} / {v}): `{short(msg, 200)}`")
        skipped = [f"{r['model']} / {r['variant']}" for r in self.runs if r["rc"] == "skipped"]
        if skipped:
            out.append(f"- skipped for time ({len(skipped)}): " + short(", ".join(skipped), 600))
        notrun = [f"{r['model']} / {r['variant']}" for r in self.runs if r["rc"] == "not run"]
        if notrun:
            out.append(f"- not run, the build having refused ExecuTorch 1.2 programs already ({len(notrun)}): "
                       + short(", ".join(notrun), 400))
        out += [f"- {short(p, 220)}" for p in self.problems[:40]]
        if len(self.problems) > 40:
            out.append(f"- ... and {len(self.problems) - 40} more (see bench_logs.tar.xz)")
        if not (refusals or skipped or notrun or self.problems):
            out.append("- nothing")
        for title, stderr_tail, gdb, frames in self.crash_notes[:3]:
            out += ["", f"### {title}", "", "```", stderr_tail[-700:].strip()]
            if gdb:
                out += ["--- cuda-gdb: " + short(gdb, 200)] + [short(fr, 170) for fr in frames[:12]]
            out += ["```"]
        if notes_rest:
            out += ["", "## Notes", ""] + [f"- {short(ln, 300)}" for ln in notes_rest[-40:]]
        walls = [r["wall"] for r in self.runs if r["wall"]]
        if walls:
            out += ["", f"({len(walls)} et_cuda_run calls, {sum(walls):.0f} s in all, longest {max(walls):.1f} s)"]
        if self.figs:
            out += [""] + self.figs
        return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--torch", default="")
    ap.add_argument("--notes", default="")
    ap.add_argument("--int4", default="")
    ap.add_argument("--gen-n", type=int, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rep = Report(a)
    rep.read_index()
    rep.read_torch()
    rep.read_int4()
    text = rep.render()
    if a.out:
        # A results file is never replaced (bench/results.py): refuse a name that is taken.
        with open(a.out, "x") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
