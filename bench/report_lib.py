"""What the two real-scale results files (`real_scale_table.py`, issue 21; `hf_scale_table.py`,
issue 28) write the same way: the head (title, note, command, machine), the census table's rows,
the targets put first and the call's timeline last, and the file written whole or not at all."""
import os


def read_line(path, prefix):
    """The rest of the first line of `path` that starts with `prefix`, or None."""
    try:
        with open(path) as fh:
            for ln in fh:
                if ln.startswith(prefix):
                    return ln[len(prefix):].strip()
    except OSError:
        pass
    return None


def head(title, work, command="", note=""):
    """The file's first lines: the title, the note, the command, env.txt's machine line."""
    L = [f"# {title}", ""]
    if note:
        L += [note, ""]
    if command:
        L += ["Command (one GPU call):", "", "```", command, "```", ""]
    env = os.path.join(work, "env.txt")
    if os.path.exists(env):
        with open(env) as fh:
            L += ["Machine: " + "; ".join(ln.strip() for ln in fh if ln.strip()), ""]
    return L


def census_table(hbm):
    """The census table's header lines."""
    return [f"| program | kernels | kernel µs | DRAM MB | GB/s | GEMM kernels | GEMM time share | GEMM GB/s (% of {hbm.tb_s}) | "
            "tok/s if back to back |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]


def census_row(name, s, has_step, hbm):
    """One program's census row from its step summary `s` (real_scale_census.census)."""
    if not has_step:
        return f"| {name} | no step found ({s['kernels_total']} kernels in the log) | | | | | | | |"
    return (f"| {name} | {s['step_kernels']} | {s['step_time_us']:.0f} | {s['step_dram_bytes'] / 1e6:.0f} | "
            f"{s['step_gb_s']:.0f} | {s['gemm_kernels']} | {s['gemm_share'] * 100:.0f} % | "
            f"{s['gemm_gb_s']:.0f} ({hbm.pct(s['gemm_gb_s']):.0f} %) | {s['kernel_bound_tok_s']:.0f} |")


def finish(L, targets_title, targets, work, figs):
    """The text: `L` with the targets table before its first section and the timeline after it."""
    table = [f"## {targets_title}", "", "| target | figure | verdict |", "| --- | --- | --- |"] + targets + [""]
    i = next((k for k, ln in enumerate(L) if ln.startswith("## ")), len(L))
    L[i:i] = table
    tl = os.path.join(work, "timeline.txt")
    if os.path.exists(tl):
        with open(tl) as fh:
            L += ["## Timeline of the call", "", "```"] + [ln.rstrip() for ln in fh if not ln.startswith("commit:")] + ["```", ""]
    return "\n".join(L + figs) + "\n"


def write_whole(path, text):
    """Write `text` to `path` through a temporary file, so that a reader never sees half of it."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
