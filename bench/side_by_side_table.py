#!/usr/bin/env python3
"""The results file of bench/side_by_side.sh: ExecuTorch 1.4.1 programs through this backend and
through upstream's C++ backend (v1.4.1 and a main commit), plain and in the best configuration.

  side_by_side_table.py --index runs.tsv [--notes notes.txt] [--title T] [--real-scale MODEL --ref REF.json]
                        --out FILE

runs.tsv, tab-separated, one runner call per line:
  program, backend ("ours" or the upstream build's label), config ("plain" | "best"),
  kind ("cases" | "cold" | "steady"), rc (or "skipped" / "not run" / "not exported"), log, tokens N,
  rounds R
A relative log path is relative to the index's folder. Each log is bench/sbs_exec.py's: the
runner's --json output (runner/README.md, "--json"; read with tests/models/runner_json.py) and
the closing "sbs:" line (launch time, wall, CPU).

What each column is:
  cases           the manifest's cases (`--manifest M`): passed / run, largest max_abs_err
  tokens          --generate's greedy tokens against the manifest's eager tokens (MATCH / MISMATCH),
                  and "same as ours plain": every token equal to our plain run's
  TTFT, prefill, decode, host waits/token   the runner's generate line of the steady run (the last
                  of R rounds, without first-call costs)
  host CPU ms/token   (CPU time of the steady run - CPU time of the cold run) / ((R - 1) x N): the
                  process's CPU time per generated token once loaded (both runs load the same way)
  cold start      process start -> first token of the cold run (1 round): first_token_ms of its
                  PyTorchObserver line - the launch time on the same clock
  load            model_load_end_ms - model_load_start_ms (program and methods loaded)
  device MiB      `--mem`: loaded / peak beyond the CUDA context
  host µs per decode execute   ours only (`--stats`): the runner's generate-lib line (library time inside
                  et_cuda_execute, of that the run call or graph launch) of the steady run's last round
  load phases     ours only: the runner's load_phases line of the 1-round run (fetch, .so open, container,
                  weight upload and its rate, against the reference's pinned host-to-device rate)
--real-scale MODEL (bench/side_by_side.sh --real-scale): programs et14_MODEL_base and et14_MODEL_companion;
  the targets of issue 22 first: ours / upstream, best configuration, on the base export (>= 1.0x), and ours
  on the companion export (best) / upstream (best) on the base export, upstream's own export (>= 1.5x).
  --ref: decode_llama.py --mode ref's JSON (eager greedy tokens of the same prompt, the pinned
  host-to-device rate): runs the runner could not check (UNCHECKED) are compared with its tokens.
--out must not exist (results are never replaced; bench/results.py names the file).
"""
import argparse
import json
import os
import sys

# The log reader and number formatting: beside this file (parse_log: bench/test_table.sh calls it here).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from side_by_side_logs import NOT_RUN, fmt, num, parse_log, short  # noqa: E402

class Report:
    def __init__(self, a):
        self.a = a
        self.runs = []
        base = os.path.dirname(os.path.abspath(a.index))
        for line in open(a.index):
            f = line.rstrip("\n").split("\t")
            if len(f) < 6:
                continue
            prog, backend, config, kind, rc, log = f[:6]
            n = int(f[6]) if len(f) > 6 and f[6].isdigit() else 0
            rounds = int(f[7]) if len(f) > 7 and f[7].isdigit() else 1
            if log and not os.path.isabs(log):
                log = os.path.join(base, log)
            p = parse_log(log) if log and rc not in NOT_RUN else None
            self.runs.append(dict(program=prog, backend=backend, config=config, kind=kind, rc=rc, log=log, n=n,
                                  rounds=rounds, p=p))
        self.figs = []
        self.ref = None
        if getattr(a, "ref", "") and os.path.exists(a.ref):
            try:
                with open(a.ref) as f:
                    self.ref = json.load(f)
            except ValueError:
                self.ref = None

    def get(self, prog, backend, config, kind):
        for r in self.runs:
            if (r["program"], r["backend"], r["config"], r["kind"]) == (prog, backend, config, kind):
                return r
        return None

    def programs(self):
        seen = []
        for r in self.runs:
            if r["program"] not in seen:
                seen.append(r["program"])
        return seen

    def backends(self):
        seen = []
        for r in self.runs:
            if r["backend"] not in seen:
                seen.append(r["backend"])
        return seen  # "ours" first: side_by_side.sh runs it first

    @staticmethod
    def status(r):
        if r is None:
            return "not run"
        if r["rc"] in NOT_RUN:
            return r["rc"]
        p = r["p"]
        if r["rc"] == "124":
            return "TIMEOUT"
        if r["rc"] != "0":
            if p and p["error"]:
                return "error: " + short(p["error"], 110)
            if p and p["gen"] and p["gen"].get("result") == "MISMATCH":
                return "tokens MISMATCH"
            return f"exit status {r['rc']}"
        return "ok"

    def fig(self, key, value, unit, better, what):
        if isinstance(value, (int, float)):
            self.figs.append(f"<!-- figure: {key} | {value:.6g} | {unit} | {better} | {what} -->")

    # ------------------------------------------------------------------ derived figures
    def steady(self, prog, b, c):
        """The steady run, or, when it failed and the 1-round run did not (upstream replays one
        captured input size, so a second round's prefill can be refused), the 1-round run."""
        r = self.get(prog, b, c, "steady")
        if r is not None and self.status(r) not in ("ok", "tokens MISMATCH"):
            cold = self.get(prog, b, c, "cold")
            if cold is not None and self.status(cold) == "ok" and cold["p"] and cold["p"]["gen"]:
                cold = dict(cold, fallback=self.status(r))
                return cold, cold["p"]["gen"]
        g = r["p"]["gen"] if r and r["p"] else None
        return r, g

    def cpu_per_token(self, prog, b, c):
        s, cold = self.get(prog, b, c, "steady"), self.get(prog, b, c, "cold")
        if not s or not cold or not s["p"] or not cold["p"] or not s["p"]["sbs"] or not cold["p"]["sbs"]:
            return None
        if s["rc"] != "0" or cold["rc"] != "0" or s["rounds"] <= 1 or not s["n"]:
            return None
        d = num(s["p"]["sbs"].get("cpu_s")) - num(cold["p"]["sbs"].get("cpu_s"))
        return 1000.0 * d / ((s["rounds"] - 1) * s["n"])

    def cold(self, prog, b, c):
        r = self.get(prog, b, c, "cold")
        if not r or not r["p"]:
            return r, None, None, None
        o, s = r["p"]["obs"] or {}, r["p"]["sbs"] or {}
        start = num(s.get("launch_ms"))
        first = num(o.get("first_token_ms"))
        cold = first - start if first is not None and start is not None and r["rc"] == "0" else None
        ls, le = num(o.get("model_load_start_ms")), num(o.get("model_load_end_ms"))
        load = le - ls if ls is not None and le is not None else None
        ttft = num((r["p"]["gen"] or {}).get("ttft_ms"))
        return r, cold, load, ttft

    def peak(self, prog, b, c):
        r = self.get(prog, b, c, "cold")
        return num(r["p"]["mem"].get("peak_mib")) if r and r["p"] and r["p"]["mem"] else None

    def compare(self, pa, ba, pb, bb, c):
        """(pa, ba) against (pb, bb) in configuration c: decode tok/s of both, their ratio, cold start and
        peak memory ratios. Steady runs, or, when either steady run failed and fell back to its 1-round
        run, both 1-round runs (never one run's steady figure against the other's 1-round figure)."""
        osr, og = self.steady(pa, ba, c)
        usr, ug = self.steady(pb, bb, c)
        if usr is None and osr is None:
            return None
        fb = bool((usr or {}).get("fallback") or (osr or {}).get("fallback"))
        if fb:
            osr, usr = self.get(pa, ba, c, "cold"), self.get(pb, bb, c, "cold")
            og = osr["p"]["gen"] if osr and osr["p"] else None
            ug = usr["p"]["gen"] if usr and usr["p"] else None
        od = num((og or {}).get("decode_tok_s")) if osr and self.status(osr) == "ok" else None
        ud = num((ug or {}).get("decode_tok_s")) if usr and self.status(usr) == "ok" else None
        oc, uc = self.cold(pa, ba, c)[1], self.cold(pb, bb, c)[1]
        opk, upk = self.peak(pa, ba, c), self.peak(pb, bb, c)
        ot, ut = num((og or {}).get("ttft_ms")), num((ug or {}).get("ttft_ms"))
        return dict(od=od, ud=ud, dr=od / ud if od and ud else None, cr=oc / uc if oc and uc else None,
                    pr=opk / upk if opk and upk else None, tr=ot / ut if od and ud and ot and ut else None,
                    ot=ot if od else None, ut=ut if ud else None, fb=fb,
                    ostat=self.status(osr), ustat=self.status(usr),
                    rounds="1-round runs" if fb else f"{(usr or osr)['rounds']}-round runs")

    def vs_ref(self, g):
        """The generate line's verdict; an UNCHECKED run's tokens against the --ref tokens."""
        res = g.get("result", "?")
        ref = (self.ref or {}).get("tokens")
        if res != "UNCHECKED" or not ref or not g.get("tokens"):
            return res
        t = [int(x) for x in g["tokens"].split(",") if x.strip().lstrip("-").isdigit()]
        k = min(len(t), len(ref))
        same = next((i for i in range(k) if t[i] != ref[i]), k)
        return "MATCH (eager reference)" if same == k else f"MISMATCH (first {same} of {k} equal)"

    @staticmethod
    def x(v):
        return "–" if v is None else f"{v:.2f}x"

    def targets(self, model):
        """bench/side_by_side.sh --real-scale: issue 22's two real-scale targets, one row per upstream build."""
        base, comp = f"et14_{model}_base", f"et14_{model}_companion"
        ups = [b for b in self.backends() if b != "ours"]
        rows, detail = [], []
        for key, what, pa, goal in (("best", "ours / upstream, best vs best, on the base export", base, 1.0),
                                    ("companion", "ours on the companion export (best) / upstream (best) on "
                                                  "upstream's own export", comp, 1.5)):
            for b in ups:
                r = self.compare(pa, "ours", base, b, "best")
                label = f"{what}, upstream {b}: >= {goal:.1f}x"
                if r is None or r["dr"] is None:
                    why = "not run" if r is None else "; ".join(
                        f"{n} on {q}: {st}" for n, q, st, v in (("ours", pa, r["ostat"], r["od"]),
                                                                 (b, base, r["ustat"], r["ud"])) if v is None)
                    rows.append(f"| {label} | – ({why}) | n/a |")
                    continue
                rows.append(f"| {label} | {r['od']:.1f} vs {r['ud']:.1f} tok/s = {r['dr']:.2f}x ({r['rounds']}) | "
                            f"**{'PASS' if r['dr'] >= goal else 'MISS'}** |")
                detail.append(f"| {pa} (ours) vs {base} ({b}) | best | {r['rounds']} | {r['od']:.1f} | {r['ud']:.1f} | "
                              f"{r['dr']:.2f}x | {fmt(r['ot'], 3)} / {fmt(r['ut'], 3)} | {self.x(r['cr'])} | "
                              f"{self.x(r['pr'])} |")
                self.fig(f"sbs_rs.{model}.{key}_over_upstream.{b.replace(' ', '_')}", r["dr"], "x", "higher",
                         f"{what} ({b}), decode tok/s, {r['rounds']}")
        return rows, detail

    def host_section(self, progs, backs):
        """Host time per token: the process's CPU (every backend) and ours' library counters."""
        rows = []
        for prog in progs:
            for b in backs:
                for c in ("plain", "best"):
                    sr = self.get(prog, b, c, "steady")
                    if sr is None or not sr["p"]:
                        continue
                    gl = sr["p"]["genlib"] or {}
                    cpu = self.cpu_per_token(prog, b, c)
                    if not gl and cpu is None:
                        continue
                    rep = f"{gl.get('graph_replays', '–')} / {gl.get('decode_executes', '–')}" if gl else "–"
                    rows.append(f"| {prog} | {b} | {c} | {fmt(cpu, 3)} | {fmt(num(gl.get('lib_execute_us')), 2)} | "
                                f"{fmt(num(gl.get('run_us')), 2)} | {rep} | {self.status(sr)} |")
        if not rows:
            return []
        return ["", "## Host time per token (the steady run)", "",
                "host CPU: the process's CPU time per generated token once loaded (every backend); lib / run: "
                "host µs per decode execute inside the library's et_cuda_execute / of that in the run call or "
                "graph launch (the runner's generate-lib line, ours only).", "",
                "| program | backend | config | host CPU ms/token | lib µs/execute | run µs/execute | "
                "graph replays / decode executes | status |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"] + rows

    def load_section(self, progs):
        """Ours' load_phases line of each 1-round run, against the reference's pinned H2D rate."""
        h2d = num((((self.ref or {}).get("slot") or {}).get("h2d") or {}).get("pinned", {}).get("best_gb_s"))
        rows = []
        for prog in progs:
            for c in ("plain", "best"):
                r, _, load, _ = self.cold(prog, "ours", c)
                lp = (r or {}).get("p") and r["p"]["load"]
                if not lp:
                    continue
                gbs = num(lp.get("upload_gbps"))
                ub, st = num(lp.get("upload_bytes")), num(lp.get("peak_host_staging_bytes"))
                share = f"{100 * gbs / h2d:.0f} %" if gbs and h2d else "–"
                rows.append(f"| {prog} | {c} | {fmt(load)} | {fmt(num(lp.get('fetch_ms')))} | "
                            f"{fmt(num(lp.get('so_open_ms')))} | {fmt(num(lp.get('container_ms')))} | "
                            f"{fmt(num(lp.get('upload_ms')))} | {fmt(ub / 1e9 if ub else None, 3)} | {fmt(gbs, 2)} | "
                            f"{share} | {lp.get('staging', '–')} | {fmt(st / 2**20 if st else None)} |")
                if gbs:
                    self.fig(f"sbs.load_upload_gbps.{c}.{prog}", gbs, "GB/s", "higher",
                             f"weight upload rate at load, ours {c}")
        if not rows:
            return []
        return ["", "## Load phases (ours, the 1-round run)", "",
                "The runner's load_phases line (this library only): fetch (reading the named data), .so open, "
                "container creation, weight upload; % of pinned H2D: the upload rate against "
                + (f"the reference's pinned host-to-device copy in the same call ({h2d:.1f} GB/s)." if h2d else
                   "the pinned host-to-device copy rate (not measured in this call)."), "",
                "| program | config | load ms | fetch ms | .so open ms | container ms | upload ms | upload GB | "
                "upload GB/s | % of pinned H2D | staging | peak host staging MiB |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"] + rows

    # ------------------------------------------------------------------ output
    def render(self):
        a = self.a
        rs = getattr(a, "real_scale", "")
        title = a.title or (f"executorch-cuda side by side at real scale: {RS_TITLES.get(rs, rs)} decoder, "
                            "ExecuTorch 1.4.1 exports, ours and upstream's C++ backend" if rs else DEFAULT_TITLE)
        out = [f"# {title}", ""]
        notes = [ln.rstrip("\n") for ln in open(a.notes)] if a.notes and os.path.exists(a.notes) else []
        out += [f"- {short(n, 300)}" for n in notes if n.startswith(HEAD)]
        if rs:
            rows, detail = self.targets(rs)
            out += ["", "## Targets (issue 22, real scale)", "",
                    f"Programs: `et14_{rs}_base` (tests/models/decode_llama.py, ExecuTorch 1.4.1's CudaPartitioner as "
                    f"it is: upstream's own export) and `et14_{rs}_companion` (the same model and weights with this "
                    "repository's export companion, python/executorch_cuda, before the lowering; only ours can load "
                    "it). 32-token prompt, greedy tokens as in the runs below. Decode tok/s from the steady runs, or "
                    "from both 1-round runs when a steady run failed (upstream replays one captured input size).", "",
                    "| target | figure | verdict |", "| --- | --- | --- |"] + rows
            if detail:
                out += ["", "| compared | config | runs | decode tok/s ours | upstream | decode ours / upstream | "
                            "TTFT ms ours / upstream | cold start ours / upstream | peak MiB ours / upstream |",
                        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"] + detail
        out += ["", "Configurations: *plain* = no option; *best* = `enable_cuda_graph_for_method=<decode method>`, "
                "`use_shared_cuda_stream=true`, `weight_sharing_across_methods=true` (ours: also "
                "`share_mutable_buffers_across_methods=true` on the prefill+decode program, which keeps its KV cache "
                "in one place). Same runner (`et_cuda_run`, upstream through `--backend-lib`), same program, same "
                "flags; upstream has no library counters (host waits n/a).", ""]
        progs, backs = self.programs(), self.backends()
        out += self.outputs_section(progs, backs)
        out += self.token_loop_section(progs, backs)
        out += self.cold_start_section(progs, backs)
        out += self.ratio_section(progs, backs)
        out += self.host_section(progs, backs) + self.load_section(progs)
        rest = [n for n in notes if not n.startswith(HEAD)]
        problems = [f"{r['program']} / {r['backend']} / {r['config']} / {r['kind']}: {self.status(r)}"
                    for r in self.runs if self.status(r) not in ("ok",)]
        out += ["", "## What did not run or failed, and why", ""]
        out += [f"- {short(p, 250)}" for p in problems] or ["- nothing"]
        if rest:
            out += ["", "## Notes", ""] + [f"- {short(n, 300)}" for n in rest[-60:]]
        if self.figs:
            out += [""] + self.figs
        return "\n".join(out) + "\n"

    def outputs_section(self, progs, backs):
        """The "Outputs" table: cases, tokens against eager and against ours plain."""
        out = ["## Outputs", "",
                "| program | backend | config | cases | tokens vs eager | same tokens as ours plain | status |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for prog in progs:
            _, ref = self.steady(prog, "ours", "plain")
            if ref is None:
                _, ref = self.steady(prog, "ours", "best")
            for b in backs:
                for c in ("plain", "best"):
                    cr = self.get(prog, b, c, "cases")
                    sr, g = self.steady(prog, b, c)
                    if cr is None and sr is None:
                        continue
                    cases = "–"
                    if cr and cr["p"] and cr["p"]["cases"]:
                        cs = cr["p"]["cases"]
                        errs = [e for _, _, e, _ in cs if e is not None]
                        cases = f"{sum(1 for x in cs if x[3])}/{len(cs)} (max err {max(errs):.3g})" if errs else \
                            f"{sum(1 for x in cs if x[3])}/{len(cs)}"
                    elif cr:
                        cases = self.status(cr)
                    toks = "–"
                    same = "–"
                    if g:
                        toks = self.vs_ref(g)
                        if ref and ref.get("tokens") and g.get("tokens"):
                            same = "yes" if g["tokens"] == ref["tokens"] else "no"
                    st = self.status(sr) if sr else self.status(cr)
                    out.append(f"| {prog} | {b} | {c} | {cases} | {toks} | {same} | {st} |")
        return out

    def token_loop_section(self, progs, backs):
        """The steady token loop table (the last of R rounds); its figures."""
        out = ["", "## Token loop (steady state: the last of R rounds)", "",
                "| program | backend | config | rounds x tokens | TTFT ms | prefill tok/s | decode tok/s | "
                "host waits/token | host CPU ms/token | status |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for prog in progs:
            for b in backs:
                for c in ("plain", "best"):
                    sr, g = self.steady(prog, b, c)
                    if sr is None:
                        continue
                    g = g or {}
                    st = self.status(sr)
                    cpu = self.cpu_per_token(prog, b, c)
                    if sr.get("fallback"):
                        st = f"ok in the 1-round run; the {self.get(prog, b, c, 'steady')['rounds']}-round run: " \
                             + short(sr["fallback"], 90)
                        cpu = None
                    out.append(f"| {prog} | {b} | {c} | {sr['rounds']} x {sr['n']} | {fmt(num(g.get('ttft_ms')), 3)} | "
                               f"{fmt(num(g.get('prefill_tok_s')))} | {fmt(num(g.get('decode_tok_s')))} | "
                               f"{g.get('host_waits_per_token', '–')} | {fmt(cpu, 3)} | {st} |")
                    dt = num(g.get("decode_tok_s"))
                    if b == "ours" and self.status(sr) == "ok" and dt and not sr.get("fallback"):
                        self.fig(f"sbs.decode_tok_s.{c}.{prog}", dt, "tok/s", "higher",
                                 f"ExecuTorch 1.4.1 program, token loop, ours {c}")
        return out

    def cold_start_section(self, progs, backs):
        """Cold start, load and device memory (the 1-round run); its figures."""
        out = ["", "## Cold start, load, device memory (the 1-round run)", "",
                "| program | backend | config | process start → first token ms | load ms | TTFT ms (first round) | "
                "device MiB (loaded / peak) | status |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
        for prog in progs:
            for b in backs:
                for c in ("plain", "best"):
                    r, cold, load, ttft = self.cold(prog, b, c)
                    if r is None:
                        continue
                    mem = (r["p"] or {}).get("mem") if r["p"] else None
                    ms = f"{fmt(num(mem.get('loaded_mib')))} / {fmt(num(mem.get('peak_mib')))}" if mem else "–"
                    out.append(f"| {prog} | {b} | {c} | {fmt(cold)} | {fmt(load)} | {fmt(ttft, 3)} | {ms} | "
                               f"{self.status(r)} |")
                    if b == "ours" and cold is not None:
                        self.fig(f"sbs.cold_start_ms.{c}.{prog}", cold, "ms", "lower",
                                 f"ExecuTorch 1.4.1 program, process start to first token, ours {c}")
        return out

    def ratio_section(self, progs, backs):
        """Ours against each upstream build, same program and configuration; its figures."""
        out = ["", "## Ours vs upstream (same program, same configuration)", "",
                "decode: ours / upstream decode tok/s (above 1: ours faster); cold start and peak memory: "
                "ours / upstream (below 1: ours less).", "",
                "| program | config | upstream build | decode tok/s ours | upstream | decode ours / upstream | "
                "cold start ours / upstream | peak MiB ours / upstream |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for prog in progs:
            for c in ("plain", "best"):
                for b in backs:
                    if b == "ours" or not any(x["program"] == prog and x["backend"] == b for x in self.runs):
                        continue
                    r = self.compare(prog, "ours", prog, b, c)
                    if r is None:
                        continue
                    ustat = "" if r["ud"] else f" ({r['ustat']})"
                    if r["fb"]:
                        ustat += " (both 1-round runs: a steady run failed)"
                    out.append(f"| {prog} | {c} | {b} | {fmt(r['od'])} | {fmt(r['ud'])}{(' ' + short(ustat, 80)) if ustat else ''} | "
                               f"{self.x(r['dr'])} | {self.x(r['cr'])} | {self.x(r['pr'])} |")
                    if r["dr"] is not None and not r["fb"]:
                        self.fig(f"sbs.decode_ours_over_upstream.{b.replace(' ', '_')}.{c}.{prog}", r["dr"], "x",
                                 "higher", f"ExecuTorch 1.4.1 program, decode tok/s ours / upstream {b}, {c}")
        return out

DEFAULT_TITLE = "executorch-cuda side by side: ExecuTorch 1.4.1 programs, ours and upstream's C++ backend"
RS_TITLES = {"llama1b": "Llama-3.2-1B-shaped", "qwen06b": "Qwen3-0.6B-shaped"}
HEAD = ("gpu:", "python:", "upstream ", "exporter:", "runner:", "commit:")  # notes shown at the top


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--notes", default="")
    ap.add_argument("--title", default="")
    ap.add_argument("--real-scale", default="", choices=("", "llama1b", "qwen06b"))
    ap.add_argument("--ref", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    text = Report(a).render()
    with open(a.out, "x") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
