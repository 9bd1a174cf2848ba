"""The results file of bench/hf_scale.sh (issue 28 item 6: HF transformers decoders). No torch needed.

  hf_scale_table.py WORK --out OUT.md [--census-out C.md] [--command TEXT] [--note TEXT]

--note: a paragraph under the title (e.g. that the file was re-rendered from a call's raw output).

WORK layout (hf_scale.sh): plan.txt (models=, variants=, prompt=, steps=, prefill=, max_t=, max_cache=),
export/<model>_<variant>/{manifest.json,export.json} and export/ref_<model>.json
(tests/models/decode_llama.py), logs/run_<model>_<variant>_<graphs|shared|plain>.log and
logs/prefill_<model>_<variant>.log (et_cuda_run under real_scale_table.py run), with plan.txt's ab=VAR
logs/run_<model>_<variant>_graphs_ab<0|1>_<round>.log (the A/B of that switch), logs/ncu_<model>_<variant>.csv,
logs/export_<model>_<variant>.log, env.txt, timeline.txt. The runner logs, the ncu census and the
floor are read with bench/real_scale_table.py's code; the floor's bandwidth is the HBM bandwidth of the
GPU named on env.txt's first line (nvidia-smi's, bench/hbm.py; the H200's 4.8 TB/s, marked assumed,
for a name it does not know).

Re-rendering a finished call's output ($OUT/raw/*.json and logs.tar.xz unpacked) needs the WORK layout
back: plan.txt, env.txt, timeline.txt and logs/ from logs.tar.xz, raw/ref_<m>.json as export/ref_<m>.json,
raw/export_<m>_<v>.json as export/<m>_<v>/export.json.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hbm  # noqa: E402
import real_scale_table as rst  # noqa: E402
import report_lib  # noqa: E402

TITLES = {"hf_llama1b": "HF Llama-3.2-1B-shaped", "hf_qwen06b": "HF Qwen3-0.6B-shaped",
          "hf_gemma1b": "HF Gemma-3-1B-shaped"}
SHORT = {"hf_llama1b": "Llama-1B", "hf_qwen06b": "Qwen3-0.6B", "hf_gemma1b": "Gemma-3-1B"}
FLOOR_TARGET = {"hf_llama1b": 0.80, "hf_qwen06b": 0.65, "hf_gemma1b": 0.60}  # issue 28's targets
MODES = (("plain", ""), ("graphs", " + graphs"), ("shared", " + graphs + shared stream"))
f = rst.f


def read_plan(work):
    plan = {"models": "hf_llama1b hf_qwen06b hf_gemma1b", "variants": "base companion", "prompt": "32",
            "steps": "64", "prefill": "128", "max_t": "128", "max_cache": "512", "ab": ""}
    try:
        with open(os.path.join(work, "plan.txt")) as fh:
            for ln in fh:
                k, _, v = ln.strip().partition("=")
                if k:
                    plan[k] = v
    except OSError:
        pass
    plan["models"], plan["variants"] = plan["models"].split(), plan["variants"].split()
    return plan


def tok_s(steady):
    try:
        return float(steady["decode_tok_s"])
    except (TypeError, KeyError, ValueError):
        return None


class Report:
    def __init__(self, work, command, note=""):
        self.w, self.command, self.note, self.L, self.figs, self.targets = work, command, note, [], [], []
        self.plan = read_plan(work)
        self.hbm = hbm.from_env(os.path.join(work, "env.txt"))
        self.exports, self.runs, self.prefill, self.refs, self.ab = {}, {}, {}, {}, {}
        for m in self.plan["models"]:
            self.refs[m] = rst.load_json(os.path.join(work, "export", f"ref_{m}.json")) or {}
            for v in self.plan["variants"]:
                e = rst.load_json(os.path.join(work, "export", f"{m}_{v}", "export.json"))
                if e:
                    self.exports[(m, v)] = e
                for mode, _ in MODES:
                    r = rst.parse_run(os.path.join(work, "logs", f"run_{m}_{v}_{mode}.log"))
                    if r:
                        self.runs[(m, v, mode)] = r
                for val in (0, 1):
                    for rnd in (1, 2):
                        r = rst.parse_run(os.path.join(work, "logs", f"run_{m}_{v}_graphs_ab{val}_{rnd}.log"))
                        if r:
                            self.ab.setdefault((m, v, val), []).append(r)
                p = rst.parse_run(os.path.join(work, "logs", f"prefill_{m}_{v}.log"))
                if p:
                    self.prefill[(m, v)] = p

    def fig(self, key, value, unit, better, what):
        if value is not None:
            self.figs.append(f"<!-- figure: {key} | {value:.6g} | {unit} | {better} | {what} -->")

    def target(self, what, figure, ok):
        self.targets.append(f"| {what} | {figure} | {'**PASS**' if ok else ('**MISS**' if ok is not None else 'n/a')} |")

    def info(self, m):
        """The model's description: the reference's, else an export's."""
        ref = self.refs.get(m) or {}
        if ref.get("read_bytes_per_token_weights"):
            return ref
        return next((self.exports[(m, v)] for v in self.plan["variants"] if (m, v) in self.exports), {})

    def floor(self, m):
        """(seconds per token at the GPU's HBM bandwidth, KV bytes per token) or (None, None)."""
        src = self.info(m)
        wb, cfg = src.get("read_bytes_per_token_weights"), src.get("config")
        if not wb or not cfg:
            return None, None
        kv = rst.kv_bytes_per_token(cfg, int(self.plan["prompt"]), int(self.plan["steps"]))
        return (wb + kv) / self.hbm.bytes_s, kv

    def prefill_ms(self, m, v):
        """Steady time to the first token of the prefill run (the last of its rounds), and its length."""
        p = self.prefill.get((m, v))
        if not p or not p["rounds"]:
            return None, (p or {}).get("error")
        last = p["rounds"][-1]
        try:
            return (float(last["ttft_ms"]), int(last.get("prompt_tokens", 0))), None
        except (KeyError, ValueError):
            return None, "no ttft_ms"

    def model_section(self, m):
        src, ref = self.info(m), self.refs.get(m) or {}
        L, variants = self.L, self.plan["variants"]
        if not src and not any(k[0] == m for k in self.runs):
            L += [f"## {TITLES.get(m, m)}", "", "Not exported and no reference (see Exports and the timeline).", ""]
            return
        fl, kv = self.floor(m)
        cfg = src.get("config") or {}
        L += [f"## {TITLES.get(m, m)} decoder ({src.get('transformers_class', 'transformers')}), bf16", ""]
        if src:
            sw = f", sliding window {cfg['sliding_window']} on {cfg.get('layer_types')}" if cfg.get("sliding_window") else ""
            L.append(f"{src.get('parameters', 0) / 1e9:.3f} B parameters (random, seeded, planted margins), "
                     f"{(src.get('read_bytes_per_token_weights') or 0) / 1e9:.3f} GB of weights read per token (the tied "
                     f"embedding counted once, as the head), {(kv or 0) / 1e6:.2f} MB of KV cache per token on average "
                     f"(valid positions only){sw}; static cache {self.plan['max_cache']}, prefill T in 1..{self.plan['max_t']}. "
                     f"Floor: {f(1 / fl if fl else None, '{:.0f}')} tok/s ((weights + KV) / {self.hbm.label}).")
        if ref.get("tokens"):
            L.append(f"Eager PyTorch (bf16, GPU, the same wrapper module): {len(ref['tokens'])} greedy tokens after a "
                     f"{len(ref.get('prompt_ids') or [])}-token prompt, {ref.get('distinct_tokens')} distinct, smallest "
                     f"top-1/top-2 logit margin {f(ref.get('min_margin'), '{:.3f}')}.")
        L += ["", "| run | decode tok/s | % of floor | vs torch.compile | prefill ms (tokens) | TTFT ms (cold / warm) | "
              "host µs per decode execute (lib / run call) | waits/token | graph replays | tokens vs eager |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        slot = ref.get("slot") if isinstance(ref.get("slot"), dict) else {}
        tc = (slot.get("compile") or {}).get("decode_tok_s")
        best = {}
        for v in variants:
            for mode, label in MODES:
                r = self.runs.get((m, v, mode))
                pf, pf_err = self.prefill_ms(m, v) if mode == "plain" else (None, None)
                pf_cell = f"{pf[0]:.2f} ({pf[1]})" if pf else (f"failed: {pf_err}" if pf_err else "")
                if r is None:
                    if mode == "plain" and pf_cell:
                        L.append(f"| ours, {v}{label} | not run | | | {pf_cell} | | | | | |")
                    continue
                steady, first, lib = (r["rounds"][-1], r["rounds"][0], (r.get("lib") or [None])[-1]) if r["rounds"] else (None,) * 3
                if steady is None:
                    L.append(f"| ours, {v}{label} | failed: {r.get('error', 'no generate line')} (rc "
                             f"{(r.get('proc') or {}).get('rc', '?')}) | | | {pf_cell} | | | | | |")
                    best[(v, mode)] = (None, "failed")
                    continue
                t = tok_s(steady)
                best[(v, mode)] = (t, steady.get("verdict"), lib)
                L.append(f"| ours, {v}{label} | {f(t)} | {f(t * fl * 100 if t and fl else None)} % | "
                         f"{f(t / tc if t and tc else None, '{:.2f}')}x | {pf_cell} | {f(first.get('ttft_ms'))} / "
                         f"{f(steady.get('ttft_ms'))} | {f((lib or {}).get('lib_execute_us'))} / {f((lib or {}).get('run_us'))} | "
                         f"{steady.get('host_waits_per_token', 'n/a')} | {(lib or {}).get('graph_replays', 'n/a')} | "
                         f"{steady.get('verdict')} |")
                self.fig(f"hf.{m[3:]}.{v}.{mode}.decode_tok_s", t, "tok/s", "higher",
                         f"{TITLES.get(m, m)} bf16 (HF), {self.plan['prompt']}-token prompt, {self.plan['steps']} greedy tokens")
        if slot.get("eager"):
            e = slot["eager"]
            L.append(f"| PyTorch eager | {f(e.get('decode_tok_s'))} | {f(e['decode_tok_s'] * fl * 100 if fl else None)} % | | | "
                     f"{f(e.get('ttft_ms'))} | | 1 | | {'reference' if e.get('tokens_match') else 'MISMATCH (eager vs eager)'} |")
        if slot.get("compile"):
            c = slot["compile"]
            cg = ref.get("compile_cudagraph_counters")
            L.append(f"| torch.compile(mode=\"reduce-overhead\") | {f(c.get('decode_tok_s'))} | "
                     f"{f(c['decode_tok_s'] * fl * 100 if fl else None)} % | 1.00x | | {f(c.get('ttft_ms'))} | | 1 | "
                     f"{'cudagraph counters ' + json.dumps(cg) if cg else ''} | {'MATCH' if c.get('tokens_match') else 'MISMATCH'} |")
        elif ref:
            L.append(f"| torch.compile(mode=\"reduce-overhead\") | not measured: {ref.get('compile_status', 'no ref')}; "
                     f"slot: {ref.get('slot', 'not reached') if not slot else 'no compile row'} | | | | | | | | |")
        if fl:
            L.append(f"| floor ((weights + KV) / {self.hbm.label}) | {1 / fl:.0f} | 100 % | | | | | | | |")
        L.append("")
        self.model_targets(m, best, fl, tc)

    def model_targets(self, m, best, fl, tc):
        s, goal = SHORT.get(m, m), FLOOR_TARGET.get(m, 0.6)
        c = best.get(("companion", "graphs")) or (None, None)
        t = c[0]
        self.target(f"{s} companion + graphs >= {goal * 100:.0f} % of the floor",
                    f"{f(t)} tok/s = {f(t * fl * 100 if t and fl else None)} %", None if not (t and fl) else t * fl >= goal)
        self.target(f"{s} companion + graphs >= 3x torch.compile", f"{f(t)} vs {f(tc)} tok/s "
                    f"({f(t / tc if t and tc else None, '{:.2f}')}x)", None if not (t and tc) else t >= 3 * tc)
        pc, _ = self.prefill_ms(m, "companion")
        pb, _ = self.prefill_ms(m, "base")
        self.target(f"{s} prefill ({self.plan['prefill']} tokens): companion no slower than base",
                    f"{f(pc[0] if pc else None, '{:.2f}')} vs {f(pb[0] if pb else None, '{:.2f}')} ms",
                    None if not (pc and pb) else pc[0] <= pb[0])
        lib = c[2] if len(c) > 2 else None
        us = float(lib["lib_execute_us"]) if lib and lib.get("lib_execute_us") not in (None, "n/a") else None
        self.target(f"{s} companion: host time per replayed decode execute <= 10 µs",
                    f"{f(us)} µs ({(lib or {}).get('graph_replays', 'n/a')} replays of "
                    f"{(lib or {}).get('decode_executes', 'n/a')} executes)", None if us is None else us <= 10)
        verdicts = {f"{v}/{mode}": b[1] for (v, mode), b in sorted(best.items())}
        ok = None if not verdicts else all(x == "MATCH" for x in verdicts.values())
        bad = ", ".join(f"{k}: {x}" for k, x in verdicts.items() if x != "MATCH")
        self.target(f"{s}: tokens equal to eager's ({self.plan['steps']} greedy) in every mode",
                    f"{sum(x == 'MATCH' for x in verdicts.values())} of {len(verdicts)} runs MATCH{'; ' + bad if bad else ''}", ok)

    def exports_section(self):
        L = self.L
        L += ["## Exports", "", "TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=...).export(input_ids, "
              "cache_position, dynamic_shapes={T}), then for the companion `executorch_cuda.prepare(ep, positions=\"cache_position\")` "
              "with its defaults, then `to_edge_transform_and_lower` with CudaPartitioner (ExecuTorch 1.5.1, logits left on "
              "the device).", "",
              "| program | export s (torch.export / lowering) | .ptd GB | companion report |", "| --- | ---: | ---: | --- |"]
        for m in self.plan["models"]:
            for v in self.plan["variants"]:
                e = self.exports.get((m, v))
                if e:
                    L.append(f"| {m}_{v} | {e.get('export_s')} ({e.get('torch_export_s')} / {e.get('lower_s')}) | "
                             f"{f((e.get('ptd_bytes') or 0) / 1e9, '{:.3f}')} | {json.dumps(e.get('companion') or {})} |")
                    continue
                log = os.path.join(self.w, "logs", f"export_{m}_{v}.log")
                tail = "(no log)"
                if os.path.exists(log):
                    with open(log, errors="replace") as fh:
                        tail = ([ln.strip() for ln in fh.read().splitlines() if ln.strip()][-1:] or ["(empty log)"])[0]
                L.append(f"| {m}_{v} | not exported: `{tail[:200]}` | | |")
        L.append("")

    def ab_section(self):
        """The --ab runs: per model and variant, graphs decode tok/s with the switch at 0 and at 1
        (--ab VAR), or unset and at its value (--ab VAR=VALUE; a path shown by its file name), or
        without and with a flag of et_cuda_run (--ab --FLAG)."""
        var = self.plan.get("ab")
        if not var or not self.ab:
            return
        if var.startswith("--"):
            sides = ("without", var)
        elif "=" in var:
            name, value = var.split("=", 1)
            sides = ("built-in", f"{name}={os.path.basename(value) or value}")
        else:
            sides = (f"{var}=0", f"{var}=1")
        L = self.L
        L += [f"## A/B of `{var}` (graphs, the two settings in turn, two runs each)", "",
              f"| model | variant | {sides[0]} tok/s | {sides[1]} tok/s | change (means) | tokens vs eager |",
              "| --- | --- | ---: | ---: | ---: | --- |"]
        for m in self.plan["models"]:
            for v in self.plan["variants"]:
                cols, verdicts = [], set()
                for val in (0, 1):
                    ts = []
                    for r in self.ab.get((m, v, val), []):
                        steady = r["rounds"][-1] if r["rounds"] else None
                        ts.append(tok_s(steady) if steady else None)
                        verdicts.add(str(steady.get("verdict")) if steady else "failed")
                    cols.append(ts)
                if not any(cols):
                    continue
                means = [sum(t for t in ts if t) / len([t for t in ts if t]) if any(ts) else None for ts in cols]
                change = (means[1] / means[0] - 1) * 100 if all(means) else None
                L.append(f"| {SHORT.get(m, m)} | {v} | {', '.join(f(t) for t in cols[0])} | {', '.join(f(t) for t in cols[1])} | "
                         f"{'n/a' if change is None else f'{change:+.1f} %'} | {', '.join(sorted(verdicts))} |")
        L.append("")

    def census_section(self, census_out):
        rows, parts = [], []
        for m in self.plan["models"]:
            for v in self.plan["variants"]:
                p = os.path.join(self.w, "logs", f"ncu_{m}_{v}.csv")
                if not os.path.exists(p):
                    continue
                s, krows = rst.census(p)
                parts += rst.census_md(f"{m}_{v} (plain, one decode step)", p, s, krows, self.hbm)
                rows.append(report_lib.census_row(f"{m}_{v}", s, bool(krows), self.hbm))
                if krows:
                    self.fig(f"hf.{m[3:]}.{v}.step_kernels", s["step_kernels"], "kernels", "lower",
                             "kernels per decode step (ncu)")
        if not rows:
            return
        self.L += ["## Census of one decode step (ncu)", "",
                   f"Per-kernel tables: `{os.path.basename(census_out) if census_out else 'not written'}`. ncu --clock-control "
                   "none, caches flushed before each kernel (so the kernel times add up to more than a graph replay; the "
                   f"gaps between kernels are not measured here). HBM: {self.hbm.label}.", ""] + report_lib.census_table(self.hbm)
        self.L += rows + [""]
        if census_out:
            with open(census_out, "w") as fh:
                fh.write("# Census of one decode step (ncu), bench/hf_scale.sh\n\n" + "\n".join(parts) + "\n")

    def build(self, census_out=None):
        L = self.L
        date = time.strftime("%Y-%m-%d", time.gmtime())
        commit = report_lib.read_line(os.path.join(self.w, "timeline.txt"), "commit:") or "unknown"
        L += report_lib.head(f"HF transformers decoders at real scale (issue 28), {date}, bundle {commit}", self.w,
                             self.command, self.note)
        L += ["Decode tok/s: the steady round (2nd of 2) of `et_cuda_run --generate N --generate-rounds 2`; plain: "
              "no options; graphs: `enable_cuda_graph_for_method=forward`; shared stream: `use_shared_cuda_stream=true` "
              "too. Prefill: the steady TTFT (3rd of 3 rounds) of a separate plain run on the export's "
              f"{self.plan['prefill']}-token prompt. Tokens are compared with eager PyTorch's (`--expect-tokens`).", ""]
        for m in self.plan["models"]:
            self.model_section(m)
        self.ab_section()
        self.census_section(census_out)
        self.exports_section()
        return report_lib.finish(L, "Targets of issue 28", self.targets, self.w, self.figs)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work")
    ap.add_argument("--out", required=True)
    ap.add_argument("--census-out", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    report_lib.write_whole(a.out, Report(a.work, a.command, a.note).build(a.census_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
