"""bench/table.py's readers and shared helpers: the model orders, the runner log's line
patterns, number formatting, the .ptd file's segments (FlatTensor) and the runner logs
(et_cuda_run --json's records, the text lines that stay text).
"""
import json
import os
import re
import struct
import sys

# runner_json: beside this file in the bundle (scripts/gpu_bundle.sh), in tests/models in the repository.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models"))
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
