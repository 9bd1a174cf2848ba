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
import re
import struct
import sys

# runner_json: beside this file in the bundle (scripts/gpu_bundle.sh), in tests/models in the repository.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner_json  # noqa: E402  et_cuda_run --json's reader

MODEL_ORDER = ["deep_bf16", "heavy_bf16", "mlp_f32", "conv_f32", "attn_bf16", "encdec",
               "et15dev_deep_bf16", "et15dev_mlp_f32", "et15dev_conv_f32", "et15dev_attn_bf16",
               "et15_mlp_f32", "et15_mlp_devio_f32"]
TORCH_ORDER = ["torch eager", "torch cudagraph", "torch aoti"]
GRAPH_TARGET_MODELS = ["mlp_f32", "conv_f32", "attn_bf16", "deep_bf16"]

ERROR = re.compile(r"^et_cuda_run: (.*)$")
ENQUEUE = re.compile(r"^(\S+) enqueue: (.*)$")
PIPELINE = re.compile(r"^pipeline (round-trip|device-chain|speedup|check): (.*)$")
MEM = re.compile(r"^mem: (.*)$")
STATS = re.compile(r"^stats: (.*)$")
REFUSAL = "expected device_type=CUDA"


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


def ratio(a, b, digits=2):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fx(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}x"


# ------------------------------------------------------------------ the .ptd file (FlatTensor)


def _u32(b, o):
    return struct.unpack_from("<I", b, o)[0]


def _table_field(b, table, index):
    """Offset of field `index` of the flatbuffer table at `table`, or None when absent."""
    vtable = table - struct.unpack_from("<i", b, table)[0]
    vlen = struct.unpack_from("<H", b, vtable)[0]
    slot = 4 + 2 * index
    if slot + 2 > vlen:
        return None
    off = struct.unpack_from("<H", b, vtable + slot)[0]
    return table + off if off else None


def _vector(b, field):
    start = field + _u32(b, field)
    return start + 4, _u32(b, start)


def ptd_segments(path):
    """{key: segment size in bytes} of an ExecuTorch .ptd file (FlatTensor: a flatbuffer with
    file identifier FT01, its segments after it; extension/flat_tensor/serialize/flat_tensor.fbs:
    FlatTensor{version, segments: [DataSegment{offset, size}], named_data: [NamedData{key,
    segment_index, tensor_layout}]})."""
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < 8 or b[4:8] != b"FT01":
        raise ValueError(f"{path}: not a FlatTensor file (no FT01 identifier)")
    root = _u32(b, 0)
    sizes = []
    seg_field = _table_field(b, root, 1)
    if seg_field is not None:
        start, n = _vector(b, seg_field)
        for i in range(n):
            t = start + 4 * i + _u32(b, start + 4 * i)
            size_field = _table_field(b, t, 1)
            sizes.append(struct.unpack_from("<Q", b, size_field)[0] if size_field is not None else 0)
    out = {}
    nd_field = _table_field(b, root, 2)
    if nd_field is not None:
        start, n = _vector(b, nd_field)
        for i in range(n):
            t = start + 4 * i + _u32(b, start + 4 * i)
            key_field = _table_field(b, t, 0)
            idx_field = _table_field(b, t, 1)
            if key_field is None:
                continue
            s = key_field + _u32(b, key_field)
            key = b[s + 4: s + 4 + _u32(b, s)].decode("utf-8", "replace")
            idx = _u32(b, idx_field) if idx_field is not None else 0
            out[key] = sizes[idx] if idx < len(sizes) else None
    return out


def weights_bytes(manifest, method=None):
    """(bytes of one method's weights blob, key, note) from the manifest's .ptd files: the key
    `<method>_weights_blob` (ExecuTorch 1.2), else the largest key with "weights" in it."""
    if not manifest or not os.path.exists(manifest):
        return None, None, "no manifest"
    try:
        with open(manifest) as f:
            man = json.load(f)
    except (OSError, ValueError) as e:
        return None, None, f"manifest: {e}"
    folder = os.path.dirname(manifest)
    segs = {}
    for d in man.get("data") or []:
        p = d if os.path.isabs(d) else os.path.join(folder, d)
        try:
            segs.update(ptd_segments(p))
        except (OSError, ValueError, struct.error, IndexError) as e:
            return None, None, f"{os.path.basename(p)}: {e}"
    if method and f"{method}_weights_blob" in segs:
        k = f"{method}_weights_blob"
        return segs[k], k, ""
    cands = [(v, k) for k, v in segs.items() if "weight" in k and v]
    if not cands:
        return None, None, "no weights blob in the .ptd files"
    v, k = max(cands)
    return v, k, "largest weights blob"


# ------------------------------------------------------------------ runner logs


def _text_value(v, fmt_):
    """A --json figure as the text line printed it (%.1f, %.2f, %.3g): the table's figures,
    ratios and targets come out as they did from the text lines."""
    return None if v is None else float(fmt_ % v)


def parse_json_record(r, rec):
    """One et_cuda_run --json record into parse_et_log's result."""
    kind = rec["kind"]
    if kind in ("bench", "bench-wait"):
        r["bench"].setdefault(kind, {}).update(n=rec.get("n"), p50=_text_value(rec.get("p50_us"), "%.1f"),
                                               p99=_text_value(rec.get("p99_us"), "%.1f"),
                                               host=_text_value(rec.get("cpu_mean_us"), "%.1f"))
    elif kind in ("bench-lib", "bench-wait-lib"):
        r["bench"].setdefault(kind[:-4], {}).update(io=rec.get("io"),
                                                    lib_exec=_text_value(rec.get("lib_execute_us"), "%.1f"),
                                                    overhead=_text_value(rec.get("backend_overhead_us"), "%.1f"),
                                                    waits=_text_value(rec.get("host_waits_per_call"), "%.2f"))
    elif kind == "case":
        err = rec.get("max_abs_err")
        r["checks"].append((rec.get("case", "?"), "PASS" if rec.get("pass") else "FAIL",
                            "n/a" if err is None else "%.3g" % err, rec.get("problem") or ""))
    elif kind == "generate":  # one per round: the last one is the steady round's
        g = runner_json.text_fields(rec)
        g["result"] = rec.get("verdict")
        r["generate"] = g


def parse_et_log(path):
    """A bench/run.sh log: the command, et_cuda_run --json's records (bench, case, generate) and its
    text lines (errors, enqueue, pipeline, mem, stats)."""
    r = {"checks": [], "errors": [], "enqueue": [], "pipeline": {}, "bench": {}, "generate": None, "mem": None,
         "stats": None, "cmd": "", "refused": None}
    if not path or not os.path.exists(path):
        return r
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("$ ") and not r["cmd"]:
                r["cmd"] = line[2:]
            elif rec := runner_json.record(line):
                parse_json_record(r, rec)
            elif m := ERROR.match(line):
                r["errors"].append(m[1])
            elif m := ENQUEUE.match(line):
                r["enqueue"].append((m[1], kv(m[2])))
            elif m := PIPELINE.match(line):
                r["pipeline"][m[1]] = m[2]
            elif m := MEM.match(line):
                body = m[1]
                r["mem"] = {"na": body} if body.startswith("n/a") else {k: num(v) for k, v in kv(body).items()}
            elif m := STATS.match(line):
                body = m[1]
                r["stats"] = None if body.startswith("n/a") else {k: int(v) for k, v in kv(body).items()
                                                                   if v.isdigit()}
    r["refused"] = next((e for e in r["errors"] if REFUSAL in e), None)
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
    if rc == "not run":
        return "not run (the build refused ExecuTorch 1.2 programs above)"
    if rc in ("124", "137"):
        return f"timeout (rc {rc})"
    if parsed["refused"]:
        return "REFUSED: " + refusal_text(parsed["refused"])
    if parsed["errors"]:
        return "error: " + parsed["errors"][-1]
    if rc not in ("0", "1"):
        return f"exit status {rc}"
    return "ok"


def refusal_text(err):
    i = err.find("Tensor ")
    text = err[i:] if i >= 0 else err
    while text.endswith(")") and text.count(")") > text.count("("):
        text = text[:-1]  # the runner's "(<ExecuTorch's messages>)" wrapper
    return text


def backend_label(backend):
    if not backend or backend == "ours":
        return "ours"
    name = backend.split(":", 1)[1] if ":" in backend else backend
    if name.startswith("main-"):
        return "upstream main " + name[5:]
    return "upstream " + name.split("-")[0]


# ------------------------------------------------------------------ the report


class Report:
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
    def latency_table(self):
        def key(r):
            mi = MODEL_ORDER.index(r["model"]) if r["model"] in MODEL_ORDER else len(MODEL_ORDER)
            ti = TORCH_ORDER.index(r["variant"]) + 1000 if r["variant"] in TORCH_ORDER else 0
            return (mi, r["model"] if mi == len(MODEL_ORDER) else "", ti)

        order = {id(r): i for i, r in enumerate(self.rows)}
        self.rows.sort(key=lambda r: (key(r), order[id(r)]))
        eager = {r["model"]: r["p50"] for r in self.rows if r["variant"] == "torch eager" and r["p50"]}
        out = ["## Latency per call", "",
               "| model | variant | p50 µs | p99 µs | host µs/call | lib execute µs/call | host waits/call | "
               "backend overhead µs | eager p50 / p50 | device MiB (loaded / peak) | check |",
               "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in self.rows:
            speed = "–"
            if r["p50"] and r["model"] in eager:
                speed = f"{eager[r['model']] / r['p50']:.2f}x"
            p50 = fmt(r["p50"]) if r["p50"] is not None else short(r["status"], 70)
            mem = "–"
            if r["mem"] and "na" not in r["mem"] and not r["variant"].endswith("wait per call"):
                mem = f"{fmt(r['mem'].get('loaded_mib'))} / {fmt(r['mem'].get('peak_mib'))}"
            out.append(f"| {r['model']} | {r['variant']} | {p50} | {fmt(r['p99'])} | {fmt(r['host'])} | "
                       f"{fmt(r['lib_exec'])} | {fmt(r['waits'], 2)} | {fmt(r['overhead'])} | {speed} | {mem} | "
                       f"{short(r['check'], 70)} |")
        out += ["", "host µs/call: thread CPU time per call. lib execute: host time inside et_cuda_execute per call; "
                "backend overhead: (execute_host_ns - run_host_ns) / executes, the library's own host time per "
                "execute outside the AOTI container's run (with CUDA graphs: outside the input copies and the graph "
                "launch). torch rows wait with torch.cuda.synchronize once per call. Upstream rows have no library "
                "counters (–). \"upstream <version> (C++)\": upstream's own "
                "backend built from its sources (bench/upstream/) and opened with et_cuda_run --backend-lib. "
                "device MiB: et_cuda_run --mem (cuMemGetInfo beyond the CUDA context) after the methods were loaded, "
                "and the largest sample between steps.", ""]
        return out

    def upstream_table(self):
        ups = [r for r in self.rows if r["backend"].startswith("upstream")]
        if not ups:
            return ["## Ours vs upstream (C++)", "", "- no upstream row (see the notes)", ""]
        out = ["## Ours vs upstream (C++)", "",
               "Same program, same runner, same IO; ratio = ours p50 / upstream p50 (below 1: ours is faster). "
               "\"best\" compares the fastest configuration of each whose result is waited for (host IO, or "
               "\"+ wait per call\").", "",
               "| program | configuration | upstream build | upstream p50 µs | ours p50 µs | ours / upstream | upstream status |",
               "| --- | --- | --- | ---: | ---: | ---: | --- |"]
        pat = re.compile(r"^upstream (.+?) \(C\+\+\) (.*)$")
        best_pairs = {}
        for u in ups:
            m = pat.match(u["variant"])
            if not m:
                continue
            build, rest = m[1], m[2]
            ours = self.row(u["model"], "et default " + rest, "ours")
            op50 = ours["p50"] if ours else None
            st = "ok" if u["p50"] is not None else short(u["status"], 120)
            out.append(f"| {u['model']} | {rest} | {build} | {fmt(u['p50'])} | {fmt(op50)} | "
                       f"{fx(ratio(op50, u['p50']))} | {st} |")
            waited = rest == "host-io" or rest.endswith("+ wait per call")
            if waited and u["p50"] is not None:
                bp = best_pairs.setdefault((u["model"], build), [None, None])
                if bp[0] is None or u["p50"] < bp[0][1]:
                    bp[0] = (rest, u["p50"])
        for (model, build), bp in best_pairs.items():
            ours = [(r["variant"][len("et default "):], r["p50"]) for r in self.rows
                    if r["model"] == model and r["backend"] == "ours" and r["p50"] is not None
                    and r["variant"].startswith("et default ")
                    and (r["variant"].endswith("host-io") or r["variant"].endswith("+ wait per call"))]
            if ours:
                ob = min(ours, key=lambda x: x[1])
                out.append(f"| {model} | **best**: ours {ob[0]} vs upstream {bp[0][0]} | {build} | {fmt(bp[0][1])} | "
                           f"{fmt(ob[1])} | **{fx(ratio(ob[1], bp[0][1]))}** | |")
        out.append("")
        return out

    def token_table(self):
        out = ["## Token loop (`et_cuda_run --manifest M --generate N`)", ""]
        if not self.gen:
            return out + ["- (no result)", ""]
        n = self.a.gen_n
        out += [f"N = {n or '?'} tokens: prefill of the manifest's prompt, then N-1 single-token steps; tokens "
                "compared with the manifest's eager greedy tokens (the first ones given); \"same tokens as ours\": all "
                "N tokens equal to those of our first run that matched (else our plain run).", "",
                "| decoder | run | TTFT ms | prefill tok/s | decode tok/s | host waits/token | device MiB (loaded / peak) | "
                "tokens | same tokens as ours | status |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
        models = self.ordered_models([r["model"] for r in self.gen])
        for model in models:
            # The reference: our first run whose tokens match the manifest's (else our plain run).
            ours = [g for g in self.gen if g["model"] == model and g["variant"].startswith("gen et")]
            base = next((g for g in ours if (g["p"]["generate"] or {}).get("result") == "MATCH"),
                        self.gen_run(model, "gen et"))
            base_tokens = (base["p"]["generate"] or {}).get("tokens") if base else None
            for r in [g for g in self.gen if g["model"] == model]:
                g = r["p"]["generate"] or {}
                mem = r["p"]["mem"] or {}
                memtxt = f"{fmt(mem.get('loaded_mib'))} / {fmt(mem.get('peak_mib'))}" if "loaded_mib" in mem else "–"
                tok = "–"
                if g:
                    exp = g.get("expected", "none")
                    k = 0 if exp == "none" else len(exp.split(","))
                    tok = f"{g['result']}" + (f" (first {k} checked)" if k else "")
                same = "–"
                if g.get("tokens") and base_tokens and r is not base:
                    same = "yes" if g["tokens"] == base_tokens else "no"
                st = "ok" if r["status"] == "ok" else short(r["status"], 110)
                out.append(f"| {model} | {r['variant'][4:]} | {g.get('ttft_ms', '–')} | {g.get('prefill_tok_s', '–')} | "
                           f"{g.get('decode_tok_s', '–')} | {g.get('host_waits_per_token', '–')} | {memtxt} | {tok} | "
                           f"{same} | {st} |")
        out.append("")
        return out

    def memory_table(self):
        out = ["## Device memory (`et_cuda_run --mem`: cuMemGetInfo beyond the CUDA context)", ""]
        if not self.memrows:
            return out + ["- (no result)", ""]
        out += ["| program | backend | run | loaded MiB | peak MiB |", "| --- | --- | --- | ---: | ---: |"]
        pick = {}
        pref = ("host-io", "device-io", "gen et", "gen upstream")
        for r in self.memrows:
            key = (r["model"], backend_label(r["backend"]))
            v = r["variant"]
            rank = next((i for i, s in enumerate(pref) if v.endswith(s) or v.startswith(s)), len(pref))
            if "graphs" in v or "sharing" in v or "emulation" in v or "sync-always" in v or "(re-export)" in v:
                rank = len(pref) + 1
            if key not in pick or rank < pick[key][0]:
                pick[key] = (rank, r)
        for model in self.ordered_models([k[0] for k in pick]):
            for (m, b), (_rank, r) in pick.items():
                if m != model:
                    continue
                mem = r["p"]["mem"]
                out.append(f"| {m} | {b} | {r['variant']} | {fmt(mem.get('loaded_mib'))} | {fmt(mem.get('peak_mib'))} |")
        out.append("")
        out += self.sharing_lines
        return out

    def sharing_block(self):
        """qwen3_pd_bf16: two methods with the same weights, with and without sharing."""
        model = "qwen3_pd_bf16"
        runs = {v: self.gen_run(model, v) for v in ("gen et", "gen et + weight sharing", "gen et + weight+cache sharing")}
        one = next((r for r in self.runs if r["model"] == model and r["variant"] == "mem et prefill only"), None)
        if not any(runs.values()) and one is None:
            self.sharing = None
            return []
        manifest = next((r["manifest"] for r in list(runs.values()) + [one] if r and r["manifest"]), None)
        w, key, wnote = weights_bytes(manifest, "prefill")
        wmib = w / 2**20 if w else None
        out = [f"### {model}: prefill and decode with the same weights", "",
               f"One copy of the weights: {fmt(wmib, 2)} MiB (`{key or '?'}` in the .ptd{', ' + wnote if wnote else ''}).", "",
               "| run | loaded MiB | peak MiB | saved vs no sharing MiB | weights held (driver) | "
               "shared_constant_bytes (library) | weights held (library) | whole footprint / one copy | tokens |",
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        none_loaded = ((runs["gen et"] or {}).get("p", {}).get("mem") or {}).get("loaded_mib") if runs["gen et"] else None
        self.sharing = {}
        rows = [("mem et prefill only", one)] + list(runs.items())
        for v, r in rows:
            if r is None:
                out.append(f"| {v[4:] if v.startswith('gen ') else v} | not run | | | | | | | |")
                continue
            mem = r["p"]["mem"] or {}
            loaded = mem.get("loaded_mib")
            both = v != "mem et prefill only"
            saved = (none_loaded - loaded) if (none_loaded is not None and loaded is not None and both) else None
            held_drv = (2 * wmib - saved) / wmib if (saved is not None and wmib) else None
            shared = (r["p"]["stats"] or {}).get("shared_constant_bytes") if both else None
            held_lib = (2 * w - shared) / w if (shared is not None and w) else None
            whole = loaded / wmib if (loaded is not None and wmib) else None
            g = r["p"]["generate"] or {}
            if v != "mem et prefill only":
                self.sharing[v] = {"held_drv": held_drv, "held_lib": held_lib, "loaded": loaded, "saved": saved,
                                   "whole": whole}
            out.append(f"| {v[4:] if v.startswith('gen ') else v} | {fmt(loaded)} | {fmt(mem.get('peak_mib'))} | "
                       f"{fmt(saved)} | {fx(held_drv)} | {shared if shared is not None else '–'} | {fx(held_lib)} | "
                       f"{fx(whole)} | {g.get('result', short(r['status'], 40)) if both else '–'} |")
        out += ["", "weights held (driver) = (2 × one copy − saved) / one copy, where saved is the drop in device memory "
                "after load against the same program loaded without sharing (so the kernels, pools and KV caches, "
                "present in both runs, cancel out); weights held (library) = (2 × one copy − shared_constant_bytes) / "
                "one copy; whole footprint / one copy: everything the process holds on the device beyond the CUDA "
                "context (kernels and pools included) over one copy of the weights. cuMemGetInfo moves in 2 MiB pages.",
                ""]
        return out

    def int4_table(self):
        out = ["## int4 weight-only matmul (`kernels/check_int4.py`, bench phase)", ""]
        if not self.int4:
            return out + [f"- {self.int4_note or 'no rows'}", ""]
        out += ["Two timings per call, the weights rotated (larger than L2): *kernel* = the GPU's busy time "
                "per call from CUPTI (torch.profiler: the durations of the kernels, copies and memsets the call "
                "ran), the kernel's own speed; *queue* = median time between events around each call with the "
                "queue kept full (includes the gaps between launches). TB/s = bytes moved (packed weights, "
                "scales, activations, output) / time.", "",
                "| M | N = K | group | ikt | ours kernel µs | ours TB/s | torch `_weight_int4pack_mm` kernel µs | TB/s "
                "| bf16 matmul kernel µs | TB/s | ours queue µs | torch queue µs | bf16 queue µs |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in self.int4:
            def us(k):
                v = r.get(k)
                return f"{v * 1e3:.1f}" if isinstance(v, (int, float)) else "–"

            def tb(k):
                v = r.get(k)
                return f"{v:.2f}" if isinstance(v, (int, float)) else "–"

            err = f" ({short(r['error'], 60)})" if r.get("error") else ""
            out.append(f"| {r['m']} | {r['n']}{'' if r.get('n') == r.get('k') else ' / ' + str(r.get('k'))} | "
                       f"{r.get('group', '?')} | {r.get('ikt', '?')} | {us('ours_dev_ms')}{err} | {tb('ours_dev_TBps')} | "
                       f"{us('torch_int4_dev_ms')} | {tb('torch_int4_dev_TBps')} | {us('bf16_dev_ms')} | {tb('bf16_dev_TBps')} | "
                       f"{us('ours_ms')} | {us('torch_int4_ms')} | {us('bf16_ms')} |")
        if self.int4_note:
            out += ["", f"- {self.int4_note}"]
        out.append("")
        return out

    # -------------------------------------------------------------- targets
    def fig(self, key, value, unit, better, what):
        """A figure for the index's best-figures table (bench/results.py reads these lines)."""
        if isinstance(value, (int, float)):
            self.figs.append(f"<!-- figure: {key} | {value:.6g} | {unit} | {better} | {what} -->")

    def add_target(self, target, subject, measured, ok):
        verdict = "n/a" if ok is None else ("PASS" if ok else "MISS")
        self.targets.append((target, subject, measured, verdict))

    def compute_targets(self):
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
