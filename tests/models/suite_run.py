"""The model suite's check phase and report (used by gpu_suite.sh; testable without a GPU).

  suite_run.py run     --runner BIN --models DIR --out DIR [--backends "ours up=/lib.so"] [--timeout S] [--deadline T]
  suite_run.py symbols --lib libexecutorch_cuda.so --models DIR --out DIR
  suite_run.py report  --models DIR --out DIR [--sdpa DIR] [--notes FILE]
  suite_run.py pack    --models DIR --out DIR [--limit-mb 15] [--files 1]
  suite_run.py parse   LOG       # print what a runner log parses to (debugging)

Modes are data: MODES below (name -> runner arguments and when they apply), plus
SUITE_EXTRA_MODES="name:args;name2:args" ({methods} is replaced by the program's
comma-separated method names; {first} by its first method). SUITE_MODES=a,b keeps
only those modes. Backends: SUITE_BACKENDS or --backends, space-separated entries
"ours" (the runner's own library) or "name=/path/lib.so" (passed as --backend-lib PATH).
"""
import argparse
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner_json  # noqa: E402  (et_cuda_run --json's reader)
import suite_report  # noqa: E402  (the report command)

# name: (runner args, applies(manifest) -> None or a reason it does not apply)
MODES = {
    "host": ([], lambda m: None),
    "shared_stream": (["--option", "use_shared_cuda_stream=true"], lambda m: None),
    "device_out": (["--option", "skip_copy_output_to_cpu_for_method={methods}"], lambda m: None),
    "device_io": (["--device-io", "--bench", "3", "--warmup", "1"],
                  lambda m: ("inputs are memory-planned" if m.get("alloc_graph_input") is not False or
                             any(any(v) for v in (m.get("inputs_planned") or {}).values())
                             else "stateful: the device-io re-run of case 0 would see the advanced cache"
                             if m.get("stateful") else None)),
    "generate": (["--generate", "16", "--stats"], lambda m: None if m.get("generate") else "no generate section"),
}

CASE_RE = re.compile(r"^(\S+) (case\d+(?:[ \w-]*)?): max_abs_err=(\S+) (PASS|FAIL)(?:: (.*))?$")
GEN_RE = re.compile(r"^generate:")
ERR_RE = re.compile(r"^et_cuda_run: (.*)$")


def modes_table():
    modes = dict(MODES)
    extra = os.environ.get("SUITE_EXTRA_MODES", "")
    for ent in [e for e in extra.split(";") if e.strip()]:
        name, _, args = ent.partition(":")
        argv = shlex.split(args)
        # A mode that runs the token loop applies only where the generate mode does.
        modes[name.strip()] = (argv, MODES["generate"][1] if "--generate" in argv else (lambda m: None))
    keep = [k for k in os.environ.get("SUITE_MODES", "").split(",") if k]
    if keep:
        modes = {k: v for k, v in modes.items() if k in keep}
    return modes


def backends_table(spec):
    out = []
    for ent in spec.split():
        if "=" in ent:
            name, path = ent.split("=", 1)
            out.append((name, ["--backend-lib", path]))
        else:
            out.append((ent, []))
    return out or [("ours", [])]


def programs(models_dir):
    """[(name, manifest path, manifest)] sorted by name."""
    out = []
    for mp in sorted(glob.glob(os.path.join(models_dir, "*", "manifest.json"))):
        try:
            with open(mp) as f:
                out.append((os.path.basename(os.path.dirname(mp)), mp, json.load(f)))
        except Exception as e:
            out.append((os.path.basename(os.path.dirname(mp)), mp, {"_error": repr(e)}))
    return out


# ----------------------------------------------------------------------------- parsing


def parse_log(text, rc):
    """Runner output -> {status, max_err, cases, generate, error, observer, stats}."""
    res = {"cases": [], "generate": None, "error": None, "observer": None, "stats": None, "rc": rc}
    for line in text.splitlines():
        line = line.rstrip()
        r = runner_json.record(line)
        if r is not None and r["kind"] == "case":
            err = r.get("max_abs_err")
            res["cases"].append({"method": r.get("method"), "case": r.get("case"),
                                 "err": float("nan") if err is None else float(err), "ok": bool(r.get("pass")),
                                 "problem": r.get("problem") or None})
            continue
        if r is not None and r["kind"] == "generate":
            kv = runner_json.text_fields(r)
            verdict = r.get("verdict") if r.get("verdict") in ("MATCH", "MISMATCH") else None
            res["generate"] = {"tokens": kv.get("tokens", ""), "expected": kv.get("expected", ""),
                               "match": (verdict == "MATCH") if verdict else (rc == 0),
                               "verdict": verdict, "line": line[:400], "fields": kv}
            continue
        # Text lines: logs of runs before --json (and of runners without it).
        m = CASE_RE.match(line)
        if m:
            err = m.group(3)
            try:
                errv = float(err)
            except ValueError:
                errv = float("nan")
            res["cases"].append({"method": m.group(1), "case": m.group(2), "err": errv, "ok": m.group(4) == "PASS",
                                 "problem": m.group(5)})
            continue
        if GEN_RE.match(line):
            kv = dict(re.findall(r"(\w[\w/]*)=([^\s]+)", line))
            verdict = re.search(r"\b(MATCH|MISMATCH)\b", line)
            res["generate"] = {"tokens": kv.get("tokens", ""), "expected": kv.get("expected", ""),
                               "match": (verdict.group(1) == "MATCH") if verdict else (rc == 0),
                               "verdict": verdict.group(1) if verdict else None, "line": line[:400], "fields": kv}
            continue
        if line.startswith("PyTorchObserver "):
            try:
                res["observer"] = json.loads(line[len("PyTorchObserver "):])
            except ValueError:
                res["observer"] = {"_unparsed": line[:300]}
            continue
        if line.startswith("stats: "):
            res["stats"] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
            continue
        e = ERR_RE.match(line)
        if e and res["error"] is None:
            res["error"] = e.group(1)[:300]
    if rc in (124, 137) or rc == "timeout":
        status = "TIMEOUT"
    elif isinstance(rc, int) and (rc < 0 or rc > 128):
        sig = -rc if rc < 0 else rc - 128
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        status = f"CRASH({name})"
    elif res["error"] and ("unknown flag" in res["error"] or "unknown option" in res["error"]):
        status = "UNSUPPORTED"
    elif res["cases"] or res["generate"]:
        ok = all(c["ok"] for c in res["cases"]) and (res["generate"] is None or res["generate"]["match"])
        status = "PASS" if ok and rc == 0 else "FAIL"
    else:
        status = "ERROR"
    res["status"] = status
    errs = [c["err"] for c in res["cases"] if c["err"] == c["err"]]
    res["max_err"] = max(errs) if errs else None
    return res


def gen_metrics(res):
    """TTFT (ms), decode tok/s, host waits per token from the observer/stats/generate fields."""
    out = {}
    ob = res.get("observer") or {}
    try:
        if "first_token_ms" in ob and "inference_start_ms" in ob:
            out["ttft_ms"] = ob["first_token_ms"] - ob["inference_start_ms"]
        n = ob.get("generated_tokens")
        if n and "inference_end_ms" in ob and "prompt_eval_end_ms" in ob:
            dt = (ob["inference_end_ms"] - ob["prompt_eval_end_ms"]) / 1000.0
            if dt > 0:
                out["tok_s"] = (n - 1) / dt if n > 1 else None
    except Exception:
        pass
    f = (res.get("generate") or {}).get("fields", {})
    for k, name in (("ttft_ms", "ttft_ms"), ("tok_s", "tok_s"), ("tok/s", "tok_s"), ("decode_tok_s", "tok_s"),
                    ("prefill_tok_s", "prefill_tok_s"), ("host_waits_per_token", "waits_per_token"),
                    ("waits_per_token", "waits_per_token"), ("waits/token", "waits_per_token"),
                    ("rounds", "rounds")):
        if k in f:
            try:
                out.setdefault(name, float(f[k]))
            except ValueError:
                pass
    st = res.get("stats") or {}
    # Fallback for runners without the field: the whole run's waits (every round) over its tokens.
    if "host_waits" in st and res.get("generate") and "rounds" not in f:
        ntok = len([t for t in res["generate"]["tokens"].split(",") if t])
        if ntok:
            out.setdefault("waits_per_token", round(st["host_waits"] / ntok, 2))
    return out


# ----------------------------------------------------------------------------- run


def cmd_run(a):
    modes = modes_table()
    backends = backends_table(a.backends if a.backends is not None else os.environ.get("SUITE_BACKENDS", "ours"))
    logdir = os.path.join(a.out, "runs")
    os.makedirs(logdir, exist_ok=True)
    results = []
    progs = programs(a.models)
    only = [p for p in (a.only or "").split(",") if p]
    for name, mp, man in progs:
        if only and name not in only:
            continue
        methods = ",".join(man.get("methods", {}).keys())
        first = next(iter(man.get("methods", {}) or {"forward": 0}))
        for bname, bargs in backends:
            for mode, (margs, applies) in modes.items():
                row = {"program": name, "backend": bname, "mode": mode, "exporter": man.get("exporter", "?"),
                       "known_failure": man.get("known_failure")}
                why = applies(man) if "_error" not in man else "manifest unreadable"
                if why:
                    row.update(status="n/a", why=why)
                    results.append(row)
                    continue
                if a.deadline and time.time() > a.deadline - 3:
                    row.update(status="SKIPPED(time)")
                    results.append(row)
                    continue
                args = [x.replace("{methods}", methods).replace("{first}", first) for x in margs]
                cmd = [a.runner, "--manifest", mp, "--json"] + args + bargs
                log = os.path.join(logdir, f"{name}.{bname}.{mode}.log")
                limit = a.timeout
                if a.deadline:
                    limit = max(3, min(limit, a.deadline - time.time()))
                t0 = time.time()
                try:
                    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=limit,
                                       cwd=os.path.dirname(mp))
                    rc, text = p.returncode, p.stdout.decode("utf-8", "replace")
                except subprocess.TimeoutExpired as e:
                    rc, text = "timeout", (e.stdout or b"").decode("utf-8", "replace")
                except OSError as e:
                    rc, text = 127, f"et_cuda_run: {a.runner}: cannot run: {e}"
                with open(log, "w") as f:
                    f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n" + text + f"\n[rc={rc}]\n")
                res = parse_log(text, rc)
                if res["status"] == "FAIL" and man.get("known_failure"):
                    res["status"] = "FAIL(known)"
                elif res["status"] == "FAIL" and res["generate"] and man.get("generate_needs_shared_state") \
                        and all(c["ok"] for c in res["cases"]):
                    # prefill and decode are separate delegates with separate cache copies
                    res["status"] = "FAIL(shared state)"
                row.update({k: res[k] for k in ("status", "max_err", "error", "rc")})
                row["cases"] = f"{sum(c['ok'] for c in res['cases'])}/{len(res['cases'])}"
                row["first_problem"] = next((f"{c['method']} {c['case']}: {c['problem']}" for c in res["cases"]
                                             if not c["ok"] and c["problem"]), None)
                if res["generate"]:
                    row["generate"] = res["generate"]
                    row["gen_metrics"] = gen_metrics(res)
                    row["expected_tokens"] = (man.get("generate") or {}).get("tokens")
                if res["generate"] and not res["generate"]["match"]:
                    row["first_problem"] = (f"generate MISMATCH tokens={res['generate']['tokens']} "
                                            f"expected={res['generate']['expected']}")
                tail = [ln for ln in text.splitlines() if ln.strip()]
                row["tail"] = tail[-1][:200] if tail else ""
                row["seconds"] = round(time.time() - t0, 1)
                row["log"] = os.path.relpath(log, a.out)
                results.append(row)
                print(f"[run] {name} / {bname} / {mode}: {row['status']} "
                      f"max_err={row.get('max_err')} cases={row['cases']} ({row['seconds']}s)"
                      + (f" {row['error']}" if row.get("error") else ""), flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    return 0


# ----------------------------------------------------------------------------- symbols


def cmd_symbols(a):
    from suite_lib import elf_dynamic_symbols

    out = []
    try:
        with open(a.lib, "rb") as f:
            defined = set(elf_dynamic_symbols(f.read())[1])
        out.append(f"library: {a.lib} ({len(defined)} defined dynamic symbols, "
                   f"{sum(s.startswith('aoti_torch') for s in defined)} aoti_torch_*)")
    except Exception as e:
        defined = None
        out.append(f"library: {a.lib}: cannot read ({e!r}); listing every aoti_torch_* import")
    need = {}
    for imp in sorted(glob.glob(os.path.join(a.models, "*", "imports.txt"))):
        prog = os.path.basename(os.path.dirname(imp))
        for line in open(imp):
            s = line.strip()
            if s.startswith("aoti_torch") or s.startswith("AOTI"):
                need.setdefault(s, set()).add(prog)
    missing = {s: p for s, p in need.items() if defined is None or s not in defined}
    out.append(f"aoti_torch_* symbols imported by the exported .so files: {len(need)}; missing from the library: "
               f"{len(missing)}")
    for s in sorted(missing):
        out.append(f"  MISSING {s}  <- {', '.join(sorted(missing[s]))}")
    text = "\n".join(out) + "\n"
    with open(os.path.join(a.out, "symbols.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "symbols.json"), "w") as f:
        json.dump({"missing": {s: sorted(p) for s, p in missing.items()},
                   "imported": {s: sorted(p) for s, p in need.items()}}, f, indent=1)
    print(text)
    return 0


# ----------------------------------------------------------------------------- report


def cmd_report(a):
    return suite_report.cmd_report(a, programs)


# ----------------------------------------------------------------------------- pack


def _tar_xz(item):
    """One program folder as a compressed tar (an xz stream of its own)."""
    import io
    import lzma

    arcname, path = item
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(path, arcname=arcname)
    return arcname, lzma.compress(buf.getvalue(), preset=6)


def cmd_pack(a):
    """models.tar.xz (then models_2.tar.xz, ... up to --files): the exported programs, smallest
    first, each file within --limit-mb. Each program is its own tar in its own xz stream
    (compressed in parallel), concatenated: extract with `tar -xJif models.tar.xz` (-i: read past
    each member archive's end)."""
    import concurrent.futures

    items = [(name, os.path.dirname(mp)) for name, mp, man in programs(a.models)]
    items += [(os.path.basename(rp), rp) for rp in glob.glob(os.path.join(a.models, ".export_report.*.json"))]
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as ex:
        blobs = list(ex.map(_tar_xz, items))
    blobs.sort(key=lambda x: (not x[0].startswith("."), len(x[1])))
    limit = a.limit_mb * 2**20
    bins = [[] for _ in range(max(1, a.files))]  # first fit, smallest first
    sizes = [0] * len(bins)
    left = []
    for name, data in blobs:
        for i in range(len(bins)):
            if sizes[i] + len(data) <= limit:
                bins[i].append((name, data))
                sizes[i] += len(data)
                break
        else:
            left.append(f"{name} ({len(data) / 2**20:.1f} MiB compressed)")
    parts = []
    for i, b in enumerate(bins):
        if not b and i > 0:
            continue
        fname = "models.tar.xz" if i == 0 else f"models_{i + 1}.tar.xz"
        with open(os.path.join(a.out, fname), "wb") as f:
            for _, data in b:
                f.write(data)
        n = sum(not name.startswith(".") for name, _ in b)
        parts.append(f"{fname}: {n} program(s), {sizes[i] / 2**20:.1f} MiB")
    msg = ("; ".join(parts) + " (extract: tar -xJif FILE)"
           + (f"; left out (over {a.files} x {a.limit_mb} MiB): {', '.join(left)}" if left else "; nothing left out")
           + "\n")
    with open(os.path.join(a.out, "pack.txt"), "w") as f:
        f.write(msg)
    print(msg)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--runner", required=True)
    r.add_argument("--models", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--backends", default=None)
    r.add_argument("--only", default=os.environ.get("SUITE_ONLY", ""))
    r.add_argument("--timeout", type=float, default=float(os.environ.get("SUITE_RUN_TIMEOUT", "60")))
    r.add_argument("--deadline", type=float, default=0)
    s = sub.add_parser("symbols")
    s.add_argument("--lib", required=True)
    s.add_argument("--models", required=True)
    s.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("--models", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--sdpa", default=None)
    p.add_argument("--notes", default=None)
    k = sub.add_parser("pack")
    k.add_argument("--models", required=True)
    k.add_argument("--out", required=True)
    k.add_argument("--limit-mb", type=float, default=15.0)
    k.add_argument("--files", type=int, default=1, help="at most this many files of --limit-mb each")
    q = sub.add_parser("parse")
    q.add_argument("log")
    a = ap.parse_args()
    if a.cmd == "parse":
        text = open(a.log, errors="replace").read()
        rc = re.search(r"\[rc=(-?\d+|timeout)\]", text)
        rcv = rc.group(1) if rc else 0
        rcv = int(rcv) if rcv != "timeout" else "timeout"
        print(json.dumps(parse_log(text, rcv), indent=1, default=str))
        return 0
    return {"run": cmd_run, "symbols": cmd_symbols, "report": cmd_report, "pack": cmd_pack}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
