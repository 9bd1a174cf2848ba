"""suite_run.py report: summary.md from the exports' reports, the checks' results.json, the
symbol report, sdpa_check's table and the packing note (suite_run.py's cmd_report calls
cmd_report here with its programs(models_dir) reader)."""
import glob
import json
import os


def fmt_err(e):
    return "-" if e is None else f"{e:.3g}"


def cmd_report(a, programs):
    L = ["# Model suite results", ""]
    if a.notes and os.path.exists(a.notes):
        L += ["```", open(a.notes).read().rstrip(), "```", ""]
    L += exports_section(a, programs)
    # results
    rp = os.path.join(a.out, "results.json")
    results = json.load(open(rp)) if os.path.exists(rp) else []
    tol = {name: man.get("tolerance") for name, _, man in programs(a.models)}
    counts = {}
    modes = []
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        if r["mode"] not in modes:
            modes.append(r["mode"])
    L += checks_section(results, tol, counts, modes)
    L += notes_section(results)
    L += generation_section(results)
    L += extra_sections(a)
    text = "\n".join(L) + "\n"
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def exports_section(a, programs):
    """The exports: each program, its exporter and status (from the .export_report.*.json files)."""
    L = ["## Exports", "", "| program | exporter | status |", "| --- | --- | --- |"]
    reports = {}
    for rp in sorted(glob.glob(os.path.join(a.models, ".export_report.*.json"))):
        try:
            reports.update({k: (os.path.basename(rp).split(".")[2], v) for k, v in json.load(open(rp)).items()})
        except Exception:
            pass
    for name, mp, man in programs(a.models):
        if name not in reports:
            reports[name] = ("?", "present")
    for n in sorted(reports):
        ex, st = reports[n]
        L.append(f"| {n} | {ex} | {str(st)[:300].replace('|', '/')} |")
    L.append("")
    return L


def checks_section(results, tol, counts, modes):
    """The checks table, program x backend by mode, and the totals."""
    L = ["## Checks (et_cuda_run --manifest)", "",
         "Cell: result and max abs error over the cases (tolerance: atol + rtol|ref| from the manifest); "
         "n/a: the mode does not apply (see below).", "",
         "| program | backend | tolerance | " + " | ".join(modes) + " |",
         "| --- | --- | --- | " + " | ".join("---" for _ in modes) + " |"]
    grid = {}
    for r in results:
        grid.setdefault((r["program"], r["backend"]), {})[r["mode"]] = r
    for (prog, be), row in grid.items():
        t = tol.get(prog) or {}
        tt = f"{t.get('atol', 0):.3g} + {t.get('rtol', 0):.3g}" if t else "-"
        cells = []
        for m in modes:
            r = row.get(m)
            if r is None:
                cells.append("")
            elif r["status"] in ("n/a", "SKIPPED(time)"):
                cells.append(r["status"])
            else:
                has_cases = r.get("cases") not in (None, "0/0")
                cells.append(r["status"] + (f" {fmt_err(r.get('max_err'))} ({r['cases']})" if has_cases else ""))
        L.append(f"| {prog} | {be} | {tt} | " + " | ".join(cells) + " |")
    L += ["", "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
    return L


def notes_section(results):
    """The notes on the cells that are not PASS, one per distinct reason."""
    L = []
    notes = [r for r in results if r["status"] not in ("PASS",)]
    if notes:
        L += ["### Notes on the cells that are not PASS", ""]
        seen = set()
        for r in notes:
            note = r.get("why") or r.get("error") or r.get("first_problem") or ""
            if not note and r["status"] in ("CRASH", "TIMEOUT", "ERROR") or r["status"].startswith("CRASH"):
                note = "last line: " + (r.get("tail") or "(no output)")
            if r["status"] == "FAIL(known)":
                note = (r.get("known_failure") or "") + ("; " + note if note else "")
            key = (r["program"], r["backend"], r["status"], note)
            if r["status"] == "n/a":
                key = ("n/a", r["mode"], note)
            if key in seen:
                continue
            seen.add(key)
            if r["status"] == "n/a":
                progs = sorted({x["program"] for x in notes if x["status"] == "n/a" and x["mode"] == r["mode"]
                                and (x.get("why") or "") == note})
                who = f"{r['mode']} on {', '.join(progs)}"
            else:
                who = f"{r['program']} / {r['backend']} / {r['mode']}"
            L.append(f"- {who}: {r['status']}: {str(note)[:300]}" + (f" [log: {r['log']}]" if r.get("log") else ""))
        L.append("")
    return L


def generation_section(results):
    """The token loops: tokens against the expected ones and their figures."""
    L = []
    gens = [r for r in results if r.get("generate")]
    if gens:
        L += ["## Generation (--generate 16; with rounds > 1 the figures are the last round's)", "",
              "| program | backend | mode | tokens | rounds | TTFT ms | prefill tok/s | decode tok/s | host waits/token |",
              "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]

        def num(v, fmt):
            return fmt.format(v) if isinstance(v, (int, float)) else "?"
        for r in gens:
            g, mtr = r["generate"], r.get("gen_metrics", {})
            L.append(f"| {r['program']} | {r['backend']} | {r['mode']} | {'MATCH' if g['match'] else 'MISMATCH'} "
                     f"| {num(mtr.get('rounds', 1), '{:.0f}')} | {num(mtr.get('ttft_ms'), '{:.3f}')} "
                     f"| {num(mtr.get('prefill_tok_s'), '{:.0f}')} | {num(mtr.get('tok_s'), '{:.0f}')} "
                     f"| {num(mtr.get('waits_per_token'), '{:.2f}')} |")
        L.append("")
        for r in gens:
            g = r["generate"]
            if not g["match"]:
                L.append(f"- {r['program']} / {r['backend']} / {r['mode']}: tokens={g['tokens']} expected={g['expected']}")
        L.append("")
        L.append("")
    return L


def extra_sections(a):
    """The symbols report, sdpa_check's table and the packing note, where there are."""
    L = []
    sp = os.path.join(a.out, "symbols.txt")
    if os.path.exists(sp):
        L += ["## Symbols the exported .so files import but the library does not define", "", "```",
              open(sp).read().rstrip(), "```", ""]
    if a.sdpa:
        sm = os.path.join(a.sdpa, "sdpa_check.md")
        L += ["## sdpa_check", ""]
        L += [open(sm).read()] if os.path.exists(sm) else ["(no sdpa_check.md: see logs)"]
    pk = os.path.join(a.out, "pack.txt")
    if os.path.exists(pk):
        L += ["## models.tar.xz", "", open(pk).read()]
    return L
