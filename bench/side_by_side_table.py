#!/usr/bin/env python3
"""The results file of bench/side_by_side.sh: ExecuTorch 1.4.1 programs through this backend and
through upstream's C++ backend (v1.4.1 and a main commit), plain and in the best configuration.

  side_by_side_table.py --index runs.tsv [--notes notes.txt] [--title T] --out FILE

runs.tsv, tab-separated, one runner call per line:
  program, backend ("ours" or the upstream build's label), config ("plain" | "best"),
  kind ("cases" | "cold" | "steady"), rc (or "skipped" / "not run"), log, tokens N, rounds R
A relative log path is relative to the index's folder. Each log is bench/sbs_exec.py's: the
runner's output lines (runner/README.md) and the closing "sbs:" line (launch time, wall, CPU).

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
--out must not exist (results are never replaced; bench/results.py names the file).
"""
import argparse
import json
import os
import re
import sys

KV = re.compile(r"(\w+)=(\S+)")


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def parse_log(path):
    r = {"cases": [], "gen": None, "obs": None, "mem": None, "stats": None, "sbs": None, "error": None}
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        r["error"] = f"no log {path}"
        return r
    for ln in lines:
        m = re.match(r"^(\w+) case(\d+)(?: device-io)?: max_abs_err=(\S+) (PASS|FAIL)", ln)
        if m:
            r["cases"].append((m.group(1), int(m.group(2)), num(m.group(3)), m.group(4) == "PASS"))
        elif ln.startswith("generate: "):
            d = dict(KV.findall(ln))
            d["result"] = "MATCH" if ln.rstrip().endswith(" MATCH") else (
                "MISMATCH" if ln.rstrip().endswith("MISMATCH") else "UNCHECKED")
            r["gen"] = d
        elif ln.startswith("PyTorchObserver "):
            try:
                r["obs"] = json.loads(ln[len("PyTorchObserver "):])
            except ValueError:
                pass
        elif ln.startswith("mem: ") and "n/a" not in ln:
            r["mem"] = dict(KV.findall(ln))
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
            p = parse_log(log) if log and rc not in ("skipped", "not run") else None
            self.runs.append(dict(program=prog, backend=backend, config=config, kind=kind, rc=rc, log=log, n=n,
                                  rounds=rounds, p=p))
        self.figs = []

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
        if r["rc"] in ("skipped", "not run"):
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

    # ------------------------------------------------------------------ output
    def render(self):
        a = self.a
        out = [f"# {a.title}", ""]
        notes = [ln.rstrip("\n") for ln in open(a.notes)] if a.notes and os.path.exists(a.notes) else []
        out += [f"- {short(n, 300)}" for n in notes if n.startswith(("gpu:", "python:", "upstream ", "exporter:",
                                                                     "runner:", "commit:"))]
        out += ["", "Configurations: *plain* = no option; *best* = `enable_cuda_graph_for_method=<decode method>`, "
                "`use_shared_cuda_stream=true`, `weight_sharing_across_methods=true` (ours: also "
                "`share_mutable_buffers_across_methods=true` on the prefill+decode program, which keeps its KV cache "
                "in one place). Same runner (`et_cuda_run`, upstream through `--backend-lib`), same program, same "
                "flags; upstream has no library counters (host waits n/a).", ""]
        progs, backs = self.programs(), self.backends()

        # outputs
        out += ["## Outputs", "",
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
                        toks = g.get("result", "?")
                        if ref and ref.get("tokens") and g.get("tokens"):
                            same = "yes" if g["tokens"] == ref["tokens"] else "no"
                    st = self.status(sr) if sr else self.status(cr)
                    out.append(f"| {prog} | {b} | {c} | {cases} | {toks} | {same} | {st} |")

        # token loop
        out += ["", "## Token loop (steady state: the last of R rounds)", "",
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

        # cold start, load, memory
        out += ["", "## Cold start, load, device memory (the 1-round run)", "",
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

        # ratios
        out += ["", "## Ours vs upstream (same program, same configuration)", "",
                "decode: ours / upstream decode tok/s (above 1: ours faster); cold start and peak memory: "
                "ours / upstream (below 1: ours less).", "",
                "| program | config | upstream build | decode tok/s ours | upstream | decode ours / upstream | "
                "cold start ours / upstream | peak MiB ours / upstream |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for prog in progs:
            for c in ("plain", "best"):
                osr, og = self.steady(prog, "ours", c)
                _, oc, _, _ = self.cold(prog, "ours", c)
                orr = self.get(prog, "ours", c, "cold")
                opk = num(((orr or {}).get("p") or {}).get("mem", {}).get("peak_mib")) if orr and orr["p"] and \
                    orr["p"]["mem"] else None
                for b in backs:
                    if b == "ours":
                        continue
                    usr, ug = self.steady(prog, b, c)
                    if usr is None and osr is None:
                        continue
                    _, uc, _, _ = self.cold(prog, b, c)
                    urr = self.get(prog, b, c, "cold")
                    upk = num(urr["p"]["mem"].get("peak_mib")) if urr and urr["p"] and urr["p"]["mem"] else None
                    fb = bool((usr or {}).get("fallback") or (osr or {}).get("fallback"))
                    if fb:  # compare 1-round runs with each other, never one with the other's steady run
                        osr = self.get(prog, "ours", c, "cold")
                        usr = self.get(prog, b, c, "cold")
                        og = (osr or {}).get("p", {}).get("gen") if osr and osr["p"] else None
                        ug = (usr or {}).get("p", {}).get("gen") if usr and usr["p"] else None
                    od = num((og or {}).get("decode_tok_s")) if osr and self.status(osr) == "ok" else None
                    ud = num((ug or {}).get("decode_tok_s")) if usr and self.status(usr) == "ok" else None
                    dr = od / ud if od and ud else None
                    cr = oc / uc if oc and uc else None
                    pr = opk / upk if opk and upk else None
                    ustat = "" if ud else f" ({self.status(usr)})"
                    if fb:
                        ustat += " (both 1-round runs: a steady run failed)"
                    out.append(f"| {prog} | {c} | {b} | {fmt(od)} | {fmt(ud)}{(' ' + short(ustat, 80)) if ustat else ''} | "
                               f"{'–' if dr is None else f'{dr:.2f}x'} | {'–' if cr is None else f'{cr:.2f}x'} | "
                               f"{'–' if pr is None else f'{pr:.2f}x'} |")
                    if dr is not None and not fb:
                        self.fig(f"sbs.decode_ours_over_upstream.{b.replace(' ', '_')}.{c}.{prog}", dr, "x", "higher",
                                 f"ExecuTorch 1.4.1 program, decode tok/s ours / upstream {b}, {c}")

        rest = [n for n in notes if not n.startswith(("gpu:", "python:", "upstream ", "exporter:", "runner:",
                                                       "commit:"))]
        problems = [f"{r['program']} / {r['backend']} / {r['config']} / {r['kind']}: {self.status(r)}"
                    for r in self.runs if self.status(r) not in ("ok",)]
        out += ["", "## What did not run or failed, and why", ""]
        out += [f"- {short(p, 250)}" for p in problems] or ["- nothing"]
        if rest:
            out += ["", "## Notes", ""] + [f"- {short(n, 300)}" for n in rest[-60:]]
        if self.figs:
            out += [""] + self.figs
        return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--notes", default="")
    ap.add_argument("--title", default="executorch-cuda side by side: ExecuTorch 1.4.1 programs, ours and upstream's "
                                       "C++ backend")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    text = Report(a).render()
    with open(a.out, "x") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
