"""Helpers and tables of bench/real_scale.sh (issue 21's real-scale rows). No torch needed.

  real_scale_table.py run LOG [--timeout S] -- CMD...   run CMD (stdout+stderr to LOG), then append
        "real_scale: rc= wall_s= max_rss_kib=" (the child's peak RSS from getrusage); exit status: CMD's
  real_scale_table.py readbw FILE...     page-cache read rate of the files ("readbw: bytes= s= gb_s=")
  real_scale_table.py ctx                CUDA context creation through libcuda.so.1 (ctypes):
        "ctx: init_ms= ctx_ms= total_ms=" or "ctx: n/a (...)"
  real_scale_table.py brief LOG [--width N]   one line about an et_cuda_run --generate log (its
        last round's figures, the library's line, or the runner's error) for a script's timeline
  real_scale_table.py census CSV [--md OUT.md] [--title T] [--gpu NAME]   one decode step from an ncu
        CSV log (ncu --csv --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,
        dram__bytes_write.sum --log-file CSV <runner> --generate 4): per-kernel table (% of the HBM
        bandwidth of --gpu, bench/hbm.py; the H200's, marked assumed, without it); prints "census: {json}"
  real_scale_table.py report WORK --out OUT.md [--census-out C.md] [--command TEXT]
        the results file from WORK (bench/real_scale.sh's layout, below); rewrites only OUT.md
        and C.md, which the caller named (bench/results.py name) for this run

WORK layout: export/<tag>/{manifest.json,export.json} (tests/models/decode_llama.py; tag: base,
companion, int4, qwen06b_base, qwen06b_companion), export/ref_<model>.json (decode_llama.py --mode ref),
logs/run_<tag>_<eager|graphs>.log (et_cuda_run --generate --json under `run`, read by parse_run, which
also reads the text lines of older logs; the library's "load_phases:"
line, where it prints one, gives the Load table's phase times and measured upload rate), logs/ncu_<tag>.csv,
logs/ctx.txt, logs/readbw_<tag>.txt, timeline.txt, env.txt (its first line nvidia-smi's: the GPU's name,
which gives the floor's bandwidth through bench/hbm.py).
"""
import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hbm  # noqa: E402  the GPU's HBM bandwidth, for the floors and the "% of HBM" columns
# The census and the log readers (bench/hf_scale_table.py reaches them through this module too).
from real_scale_census import census, census_md, cmd_census  # noqa: E402
import report_lib  # noqa: E402
from real_scale_logs import (cmd_brief, f, kv_bytes_per_token, load_json, load_phases_upload,  # noqa: E402,F401
                             parse_run, verdict)
MODEL_OF = {"base": "llama1b", "companion": "llama1b", "int4": "llama1b",
            "qwen06b_base": "qwen06b", "qwen06b_companion": "qwen06b"}
TITLES = {"llama1b": "Llama-3.2-1B-shaped", "qwen06b": "Qwen3-0.6B-shaped"}


# ----------------------------------------------------------------------------- small commands


def cmd_run(a):
    t0 = time.time()
    with open(a.log, "ab") as f:
        try:
            p = subprocess.run(a.argv, stdout=f, stderr=subprocess.STDOUT, timeout=a.timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = 124
        except OSError as e:
            f.write(f"real_scale: cannot run {a.argv[0]}: {e}\n".encode())
            rc = 127
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(a.log, "a") as f:
        f.write(f"real_scale: rc={rc} wall_s={time.time() - t0:.2f} max_rss_kib={ru.ru_maxrss}\n")
    return rc


def cmd_readbw(a):
    for path in a.files:
        buf = bytearray(64 << 20)
        n, t0 = 0, time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                n += k
        s = time.perf_counter() - t0
        print(f"readbw: file={os.path.basename(path)} bytes={n} s={s:.3f} gb_s={n / s / 1e9 if s else 0:.2f}")
    return 0


def cmd_ctx(_a):
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(f"ctx: n/a ({e})")
        return 0
    t0 = time.perf_counter()
    rc = cu.cuInit(0)
    t1 = time.perf_counter()
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    rc = rc or cu.cuDeviceGet(ctypes.byref(dev), 0)
    rc = rc or cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    rc = rc or cu.cuCtxSetCurrent(ctx)
    ptr = ctypes.c_uint64()
    rc = rc or cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
    t2 = time.perf_counter()
    if rc:
        print(f"ctx: n/a (CUDA driver error {rc})")
        return 0
    print(f"ctx: init_ms={(t1 - t0) * 1e3:.1f} ctx_ms={(t2 - t1) * 1e3:.1f} total_ms={(t2 - t0) * 1e3:.1f}")
    return 0


class Report:
    def __init__(self, work, command):
        self.w, self.command, self.L, self.figs, self.targets = work, command, [], [], []
        self.hbm = hbm.from_env(os.path.join(work, "env.txt"))
        self.exports = {}
        for tag in MODEL_OF:
            e = load_json(os.path.join(work, "export", tag, "export.json"))
            if e:
                self.exports[tag] = e
        self.refs = {m: load_json(os.path.join(work, "export", f"ref_{m}.json")) for m in TITLES}
        self.runs = {}
        for tag in MODEL_OF:
            for mode in ("eager", "graphs"):
                r = parse_run(os.path.join(work, "logs", f"run_{tag}_{mode}.log"))
                if r:
                    self.runs[(tag, mode)] = r

    def fig(self, key, value, unit, better, what):
        if value is not None:
            self.figs.append(f"<!-- figure: {key} | {value:.6g} | {unit} | {better} | {what} -->")

    def model_info(self, model):
        ref = self.refs.get(model) or {}
        e = next((self.exports[t] for t in ("base", "companion", "qwen06b_base", "qwen06b_companion")
                  if t in self.exports and MODEL_OF[t] == model), None)
        src = ref if ref.get("read_bytes_per_token_weights") else (e or {})
        return src, ref

    def floor(self, model, weights_bytes, prompt_len=32, steps=128):
        src, _ = self.model_info(model)
        cfg = src.get("config")
        if not cfg or not weights_bytes:
            return None, None
        kv = kv_bytes_per_token(cfg, prompt_len, steps)
        return (weights_bytes + kv) / self.hbm.bytes_s, kv

    def decode(self, r):
        """(steady round, first round, lib line of the last round)"""
        if not r or not r["rounds"]:
            return None, None, None
        return r["rounds"][-1], r["rounds"][0], (r.get("lib") or [None])[-1]

    def model_section(self, model, tags):
        src, ref = self.model_info(model)
        if not src and not any((t, m) in self.runs for t in tags for m in ("eager", "graphs")):
            return
        L = self.L
        L += [f"## {TITLES[model]} decoder, bf16", ""]
        wb = src.get("read_bytes_per_token_weights")
        steps = int(ref.get("steps") or 128)
        plen = len(ref.get("prompt_ids") or []) or 32
        fl, kv = self.floor(model, wb, plen, steps)
        if src:
            L.append(f"{src.get('parameters', 0) / 1e9:.3f} B parameters (random, seeded), "
                     f"{(wb or 0) / 1e9:.3f} GB of weights read per token (all but the embedding table; "
                     f"{'tied' if src.get('tied_embeddings') else 'untied'} head), "
                     f"{(kv or 0) / 1e6:.2f} MB of KV cache per token on average over the decode steps "
                     f"(valid positions only). Floor: {f(1 / fl if fl else None, '{:.0f}')} tok/s "
                     f"(bytes / {self.hbm.label}); counting the embedding table too, as issue 21 did: "
                     f"{f(self.hbm.bytes_s / (wb + src['config']['vocab'] * src['config']['hidden'] * 2) if wb else None, '{:.0f}')} tok/s.")
        if ref.get("tokens"):
            L.append(f"Eager PyTorch (bf16, GPU): {len(ref['tokens'])} greedy tokens after a {plen}-token prompt, "
                     f"{ref.get('distinct_tokens')} distinct, smallest top-1/top-2 logit margin "
                     f"{f(ref.get('min_margin'), '{:.3f}')}.")
        L += ["", "| run | decode tok/s | % of floor | vs torch.compile | TTFT ms (cold / warm) | "
              "host µs per decode execute (lib / run call) | waits/token | graph replays | tokens vs eager |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        slot = ref.get("slot") if isinstance(ref.get("slot"), dict) else {}
        tc = (slot.get("compile") or {}).get("decode_tok_s")
        best = {}
        for tag in tags:
            for mode in ("eager", "graphs"):
                r = self.runs.get((tag, mode))
                if r is None:
                    continue
                steady, first, lib = self.decode(r)
                name = f"ours, {tag.replace(model + '_', '')}" + (" + CUDA graphs" if mode == "graphs" else "")
                if steady is None:
                    L.append(f"| {name} | failed: {r.get('error', 'no generate line')} (rc "
                             f"{(r.get('proc') or {}).get('rc', '?')}) | | | | | | | |")
                    continue
                tok = float(steady.get("decode_tok_s", "nan")) if steady.get("decode_tok_s") not in (None, "n/a") else None
                best[(tag, mode)] = tok
                L.append(f"| {name} | {f(tok)} | {f(tok * fl * 100 if tok and fl else None)} % | "
                         f"{f(tok / tc if tok and tc else None, '{:.2f}')}x | {f(first.get('ttft_ms'))} / "
                         f"{f(steady.get('ttft_ms'))} | {f((lib or {}).get('lib_execute_us'))} / "
                         f"{f((lib or {}).get('run_us'))} | {steady.get('host_waits_per_token', 'n/a')} | "
                         f"{(lib or {}).get('graph_replays', 'n/a')} | {steady.get('verdict')} |")
                self.fig(f"real.{model}.{tag.replace(model + '_', '')}.{mode}.decode_tok_s", tok, "tok/s", "higher",
                         f"{TITLES[model]} bf16, 32-token prompt, 128 greedy tokens")
        if slot.get("eager"):
            L.append(f"| PyTorch eager | {f(slot['eager'].get('decode_tok_s'))} | "
                     f"{f(slot['eager']['decode_tok_s'] * fl * 100 if fl else None)} % | | "
                     f"{f(slot['eager'].get('ttft_ms'))} | | 1 | | reference |")
        if slot.get("compile"):
            c = slot["compile"]
            cg = ref.get("compile_cudagraph_counters")
            L.append(f"| torch.compile(mode=\"reduce-overhead\") | {f(c.get('decode_tok_s'))} | "
                     f"{f(c['decode_tok_s'] * fl * 100 if fl else None)} % | 1.00x | {f(c.get('ttft_ms'))} | | 1 | "
                     f"{'cudagraph counters ' + json.dumps(cg) if cg else ''} | "
                     f"{'MATCH' if c.get('tokens_match') else 'MISMATCH'} |")
        elif ref:
            L.append(f"| torch.compile(mode=\"reduce-overhead\") | not measured: {ref.get('compile_status', 'no ref')}; "
                     f"slot: {ref.get('slot', 'not reached') if not slot else 'no compile row'} | | | | | | | |")
        if fl:
            L.append(f"| floor ((weights + KV) / {self.hbm.label}) | {1 / fl:.0f} | 100 % | | | | | | |")
        L.append("")
        if model == "llama1b":
            self.llama_targets(best, fl, tc)
        else:
            b, c = best.get((tags[0], "graphs")), best.get((tags[1], "graphs")) if len(tags) > 1 else None
            self.target("Qwen3-0.6B shape: companion >= 2x today's lowering (graphs)",
                        f"{f(c)} vs {f(b)} tok/s ({f(c / b if b and c else None, '{:.2f}')}x)",
                        None if not (b and c) else c >= 2 * b)

    def target(self, what, figure, ok):
        self.targets.append(f"| {what} | {figure} | {'**PASS**' if ok else ('**MISS**' if ok is not None else 'n/a')} |")

    def llama_targets(self, best, fl, tc):
        for tag in ("base", "companion"):
            tok = best.get((tag, "graphs"))
            self.target(f"Llama-1B {tag} + graphs >= 50 % of the floor",
                        f"{f(tok)} tok/s = {f(tok * fl * 100 if tok and fl else None)} %",
                        None if not (tok and fl) else tok * fl >= 0.5)
            self.target(f"Llama-1B {tag} + graphs >= 1.0x torch.compile",
                        f"{f(tok)} vs {f(tc)} tok/s", None if not (tok and tc) else tok >= tc)
            r = self.runs.get((tag, "graphs"))
            lib = (r.get("lib") or [None])[-1] if r else None
            us = float(lib["lib_execute_us"]) if lib and lib.get("lib_execute_us") else None
            self.target(f"Llama-1B {tag}: host time per replayed decode execute <= 15 µs",
                        f"{f(us)} µs ({(lib or {}).get('graph_replays', 'n/a')} replays of "
                        f"{(lib or {}).get('decode_executes', 'n/a')} executes)", None if us is None else us <= 15)

    def int4_section(self):
        e = self.exports.get("int4")
        r = self.runs.get(("int4", "graphs")) or self.runs.get(("int4", "eager"))
        if not e and not r:
            return
        fl, _ = self.floor("llama1b", (e or {}).get("read_bytes_per_token_weights"))
        steady, first, lib = self.decode(r) if r else (None, None, None)
        tok = float(steady["decode_tok_s"]) if steady and steady.get("decode_tok_s") not in (None, "n/a") else None
        self.L += ["## Llama-3.2-1B-shaped, int4 tile-packed (torchao Int4WeightOnlyConfig(group_size=128))", "",
                   f"{(e or {}).get('read_bytes_per_token_weights', 0) / 1e9:.3f} GB read per token; floor "
                   f"{f(1 / fl if fl else None, '{:.0f}')} tok/s. Expected tokens: the quantized model's own eager "
                   f"greedy run (smallest margin {f((e or {}).get('eager_min_margin'), '{:.3f}')}).", "",
                   "| run | decode tok/s | % of floor | TTFT ms | tokens |", "| --- | ---: | ---: | ---: | --- |"]
        for mode in ("eager", "graphs"):
            rr = self.runs.get(("int4", mode))
            if not rr:
                continue
            s, fr, _ = self.decode(rr)
            t = float(s["decode_tok_s"]) if s and s.get("decode_tok_s") not in (None, "n/a") else None
            self.L.append(f"| ours, int4{' + CUDA graphs' if mode == 'graphs' else ''} | {f(t)} | "
                          f"{f(t * fl * 100 if t and fl else None)} % | {f((fr or {}).get('ttft_ms'))} | "
                          f"{(s or {}).get('verdict', rr.get('error', 'n/a'))} |")
            self.fig(f"real.llama1b.int4.{mode}.decode_tok_s", t, "tok/s", "higher", "Llama-1B int4 tile-packed")
        self.L.append("")
        self.target("Llama-1B int4 + graphs >= 40 % of its floor", f"{f(tok)} tok/s = "
                    f"{f(tok * fl * 100 if tok and fl else None)} %", None if not (tok and fl) else tok * fl >= 0.4)

    def load_section(self):
        L = self.L
        ctx = report_lib.read_line(os.path.join(self.w, "logs", "ctx.txt"), "ctx:")
        h2d = None
        for m in TITLES:
            s = (self.refs.get(m) or {}).get("slot")
            if isinstance(s, dict) and s.get("h2d"):
                h2d = s["h2d"]
                break
        pinned = (h2d or {}).get("pinned", {}).get("best_gb_s")
        L += ["## Load", "",
              "The runner's load time (PyTorchObserver model_load_end - model_load_start: program and method load, "
              "which includes the CUDA context, reading the named data, opening the .so, creating the container "
              "and uploading the weights). Where the library prints its `load_phases:` line (once per process, "
              "after the methods load), its timers fill the phase columns: fetch (ExecuTorch's named-data "
              "lookups, i.e. the file read), .so open, container creation and upload, and the upload rate is the "
              "measured one (upload bytes / upload time; staging through pinned or pageable host buffers). "
              "Without that line (older libraries) the phase columns are n/a and the upload rate is an "
              "estimate, marked ~: weights / (load - context - file read), context creation and the file read "
              "measured apart in the same call, the upload's rate if the read does not overlap it. "
              "weights / load: a lower bound on the upload rate either way. How ExecuTorch reads the files: "
              "the graphs runs with ExecuTorch's default (`--load-mode file`: each named-data piece read into "
              "memory), the eager runs mapped (`--load-mode mmap`, unless REAL_EAGER_LOAD_MODE says otherwise: "
              "the pages are read as the backend copies them).", "",
              f"Same machine, same call: CUDA context creation {ctx or 'n/a'}; pinned host-to-device "
              f"{f(pinned)} GB/s (best of 5, 1 GiB), pageable {f((h2d or {}).get('pageable', {}).get('best_gb_s'))} "
              "GB/s.", "",
              "| program | mode | weights GB (.ptd) | page-cache read GB/s | load ms | fetch ms | .so open ms | container ms | "
              "upload ms | weights / load GB/s | upload GB/s | % of pinned H2D | staging (peak MiB) | "
              "cold TTFT ms | cold start to first token ms | peak RSS MiB | RSS / weights | device MiB after load |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        ctx_ms = float(ctx.split("total_ms=")[1].split()[0]) if ctx and "total_ms=" in ctx else 0.0
        for (tag, mode), r in sorted(self.runs.items()):
            e = self.exports.get(tag) or {}
            wbytes = e.get("ptd_bytes")
            rb = report_lib.read_line(os.path.join(self.w, "logs", f"readbw_{tag}.txt"), "readbw:")
            rb_gbs = float(rb.split("gb_s=")[1]) if rb and "gb_s=" in rb else None
            o = r.get("observer") or {}
            load_ms = o["model_load_end_ms"] - o["model_load_start_ms"] if o else None
            lp = r.get("load_phases")
            up, measured = load_phases_upload(lp)
            if not measured:
                read_ms = wbytes / (rb_gbs * 1e9) * 1e3 if wbytes and rb_gbs else 0.0
                up = wbytes / ((load_ms - ctx_ms - read_ms) / 1e3) / 1e9 if load_ms and wbytes and load_ms > ctx_ms + read_ms else None
            up_cell = f(up) if measured or up is None else "~" + f(up)
            lp = lp or {}
            peak = lp.get("peak_host_staging_bytes")
            staging = f"{lp['staging']} ({f(float(peak) / 1048576 if peak else None, '{:.0f}')})" if lp.get("staging") else "n/a"
            first = r["rounds"][0] if r["rounds"] else {}
            cold = load_ms + float(first["ttft_ms"]) if load_ms is not None and first.get("ttft_ms") else None
            rss = float((r.get("proc") or {}).get("max_rss_kib", "nan")) / 1024
            L.append(f"| {tag} | {mode} | {f(wbytes / 1e9 if wbytes else None, '{:.3f}')} | {f(rb_gbs)} | "
                     f"{f(load_ms)} | {f(lp.get('fetch_ms'))} | {f(lp.get('so_open_ms'))} | {f(lp.get('container_ms'))} | "
                     f"{f(lp.get('upload_ms'))} | {f(wbytes / load_ms / 1e6 if wbytes and load_ms else None)} | {up_cell} | "
                     f"{f(up / pinned * 100 if up and pinned else None)} % | {staging} | "
                     f"{f(first.get('ttft_ms'))} | {f(cold)} | {f(rss, '{:.0f}')} | "
                     f"{f(rss * 1048576 / wbytes if wbytes else None, '{:.2f}')} | {(r.get('mem') or {}).get('loaded_mib', 'n/a')} |")
            if tag == "base" and mode == "graphs" and r["rounds"]:
                self.fig("real.llama1b.cold_start_ms", cold, "ms", "lower", "load + first token, Llama-1B base")
                if measured:
                    self.fig("real.llama1b.base.upload_gb_s", up, "GB/s", "higher",
                             f"weights upload, Llama-1B base (library timer, {lp.get('staging', '?')} staging)")
                if wbytes and rss == rss:
                    self.target("Load: peak RSS <= 0.3 x weights + 300 MiB (base, graphs)",
                                f"{rss:.0f} MiB vs {0.3 * wbytes / 1048576 + 300:.0f} MiB",
                                rss <= 0.3 * wbytes / 1048576 + 300)
                self.target(f"Load: upload >= 80 % of pinned H2D (base, graphs; {'measured' if measured else 'estimate'})",
                            f"{f(up)} vs {f(pinned)} GB/s", None if not (up and pinned) else up >= 0.8 * pinned)
        L.append("")

    def exports_section(self):
        L = self.L
        L += ["## Exports", "", "| program | export s (torch.export / lowering) | .ptd GB | companion rewrite |",
              "| --- | ---: | ---: | --- |"]
        for tag in MODEL_OF:
            e = self.exports.get(tag)
            if e:
                L.append(f"| {tag} | {e.get('export_s')} ({e.get('torch_export_s')} / {e.get('lower_s')}) | "
                         f"{f(e.get('ptd_bytes', 0) / 1e9, '{:.3f}')} | {json.dumps(e.get('companion') or {})} |")
            else:
                log = os.path.join(self.w, "logs", f"export_{tag}.log")
                if os.path.exists(log):
                    with open(log, errors="replace") as fh:
                        tail = [ln.strip() for ln in fh.read().splitlines() if ln.strip()][-1:] or ["(empty log)"]
                    L.append(f"| {tag} | not finished: `{tail[0][:200]}` | | |")
        L.append("")

    def census_section(self, census_out):
        rows, parts = [], []
        for tag in MODEL_OF:
            p = os.path.join(self.w, "logs", f"ncu_{tag}.csv")
            if not os.path.exists(p):
                continue
            s, krows = census(p)
            parts += census_md(f"{tag} (eager mode, one decode step)", p, s, krows, self.hbm)
            rows.append(report_lib.census_row(tag, s, bool(krows), self.hbm))
            if krows:
                self.fig(f"real.{MODEL_OF[tag]}.{tag}.step_kernels", s["step_kernels"], "kernels", "lower",
                         "kernels per decode step (ncu)")
        if not rows:
            return
        self.L += ["## Census of one decode step (ncu)", "",
                   f"Per-kernel tables: `{os.path.basename(census_out) if census_out else 'not written'}`. "
                   "ncu --clock-control none --cache-control all (caches flushed before each kernel). "
                   f"HBM: {self.hbm.label}.", ""] + report_lib.census_table(self.hbm)
        self.L += rows + [""]
        if census_out:
            with open(census_out, "w") as fh:
                fh.write("# Census of one decode step (ncu), bench/real_scale.sh\n\n" + "\n".join(parts) + "\n")

    def build(self, census_out=None):
        L = self.L
        date = time.strftime("%Y-%m-%d", time.gmtime())
        commit = report_lib.read_line(os.path.join(self.w, "timeline.txt"), "commit:") or "unknown"
        L += report_lib.head(f"Real-scale decode (issue 21), {date}, bundle {commit}", self.w, self.command)
        self.model_section("llama1b", ["base", "companion"])
        self.int4_section()
        self.model_section("qwen06b", ["qwen06b_base", "qwen06b_companion"])
        self.load_section()
        self.census_section(census_out)
        self.exports_section()
        return report_lib.finish(L, "Targets of issue 21", self.targets, self.w, self.figs)

def cmd_report(a):
    report_lib.write_whole(a.out, Report(a.work, a.command).build(a.census_out))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("log")
    r.add_argument("--timeout", type=float, default=None)
    b = sub.add_parser("readbw")
    b.add_argument("files", nargs="+")
    sub.add_parser("ctx")
    w = sub.add_parser("brief")
    w.add_argument("log")
    w.add_argument("--width", type=int, default=320)
    c = sub.add_parser("census")
    c.add_argument("csv")
    c.add_argument("--md", default="")
    c.add_argument("--title", default="")
    c.add_argument("--gpu", default="", help="the GPU's name (nvidia-smi's), for the %% of HBM columns")
    p = sub.add_parser("report")
    p.add_argument("work")
    p.add_argument("--out", required=True)
    p.add_argument("--census-out", default="")
    p.add_argument("--command", default="")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = []
    if argv[:1] == ["run"]:  # everything after the first "--" is the command, options or not
        if "--" not in argv or argv.index("--") == len(argv) - 1:
            ap.error("run: no command after --")
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    if a.cmd == "run":
        a.argv = command
        return cmd_run(a)
    return {"readbw": cmd_readbw, "ctx": cmd_ctx, "brief": cmd_brief, "census": cmd_census,
            "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
