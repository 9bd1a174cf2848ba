"""bench/table.py's report sections: the latency, upstream, token-loop, memory, sharing and
int4 tables, as methods of Report (its mixin Sections; they read the Report's rows)."""
import re

from table_read import MODEL_ORDER, TORCH_ORDER, backend_label, fmt, fx, ratio, short, weights_bytes


class Sections:
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
