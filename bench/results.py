#!/usr/bin/env python3
"""Results kept, never rewritten: one dated file per benchmark or suite run, and an index.

A run's results file is named `<YYYY-MM-DD>-<short commit>[-<tag>].md`; when that name is taken
(a second run of the same commit on the same day) the name gets `-2`, `-3`, ... before `.md`.
Nothing here ever opens an existing results file for writing (files are created with mode "x").

The index (`bench/RESULTS.md`) has two parts that this script maintains:
  * "Runs": one line per results file (date, commit, file, what it measured), appended at the end;
  * "Current best figures": per figure key the best value over the runs, with a link to the run
    file that has it. A results file offers figures as HTML comments (invisible in the rendered
    markdown), one per line, written by bench/table.py and bench/side_by_side_table.py:
        <!-- figure: KEY | VALUE | UNIT | higher|lower | WHAT -->
    A new run replaces a key's row only when its value is better; keys it does not offer are
    left as they were.

  results.py name --dir DIR [--tag TAG] [--commit C] [--date D]   print a fresh path in DIR
  results.py add FILE [--dir bench/results] [--index bench/RESULTS.md] [--tag T] [--commit C]
                 [--date D] [--what TEXT]       copy FILE in under a fresh name, index it
  results.py check [--dir ...] [--index ...]   every results file indexed, every index line's file there

The commit: --commit, else $ET_RESULTS_COMMIT, else `git rev-parse --short=7 HEAD` where this
script lives, else a COMMIT file in $ET_RESULTS_BUNDLE (scripts/gpu_bundle.sh writes one), else
"nocommit". The date: --date, else today (UTC).
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "results")
DEFAULT_INDEX = os.path.join(HERE, "RESULTS.md")
NAME_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})-([0-9a-f]{4,40}(?:-dirty)?|nocommit)(?:-([A-Za-z0-9][A-Za-z0-9._-]*?))?(?:-(\d+))?\.md$")
FIGURE_RE = re.compile(r"^<!-- figure: (.+?) \| (.+?) \| (.*?) \| (higher|lower) \| (.*?) -->\s*$")
BEST_BEGIN = "<!-- best:begin -->"
BEST_END = "<!-- best:end -->"
RUNS_HEAD = "| date | commit | file | what it measured |"


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def commit_id(explicit=None):
    if explicit:
        return explicit
    env = os.environ.get("ET_RESULTS_COMMIT", "").strip()
    if env:
        return env
    try:
        out = subprocess.run(["git", "-C", HERE, "rev-parse", "--short=7", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    bundle = os.environ.get("ET_RESULTS_BUNDLE", "")
    for f in (os.path.join(bundle, "COMMIT") if bundle else "", os.path.join(HERE, "..", "COMMIT")):
        if f and os.path.isfile(f):
            c = open(f).read().split()
            if c:
                return c[0]
    return "nocommit"


def clean_tag(tag):
    tag = re.sub(r"[^A-Za-z0-9._-]+", "-", tag or "").strip("-.")
    return tag


def fresh_path(directory, date, commit, tag=""):
    """The first of DATE-COMMIT[-TAG].md, ...-2.md, ...-3.md that does not exist in DIRECTORY."""
    base = f"{date}-{commit}" + (f"-{clean_tag(tag)}" if clean_tag(tag) else "")
    path = os.path.join(directory, base + ".md")
    n = 2
    while os.path.exists(path):
        path = os.path.join(directory, f"{base}-{n}.md")
        n += 1
    return path


def create_new(directory, date, commit, tag, data):
    """Write DATA (bytes) to a fresh name; never replaces a file, even under a race."""
    os.makedirs(directory, exist_ok=True)
    while True:
        path = fresh_path(directory, date, commit, tag)
        try:
            with open(path, "xb") as f:
                f.write(data)
            return path
        except FileExistsError:
            continue


def figures(text):
    """[(key, value, unit, better, what)] offered by a results file."""
    out = []
    for line in text.splitlines():
        m = FIGURE_RE.match(line.strip())
        if not m:
            continue
        try:
            v = float(m.group(2))
        except ValueError:
            continue
        out.append((m.group(1).strip(), v, m.group(3).strip(), m.group(4), m.group(5).strip()))
    return out


def fmt_value(v):
    if v == int(v) and abs(v) >= 100:
        return str(int(v))
    return f"{v:.4g}"


def empty_index():
    return (
        "# Results\n\n"
        "Index of the runs (bench/results.py). Each run's figures are in its own file under "
        "`bench/results/`, never rewritten.\n\n"
        "## Current best figures\n\n" + BEST_BEGIN + "\n"
        "| key | figure | better | run | what |\n| --- | ---: | --- | --- | --- |\n" + BEST_END + "\n\n"
        "## Runs\n\n" + RUNS_HEAD + "\n| --- | --- | --- | --- |\n"
    )


def parse_best(lines, b, e):
    rows = {}
    for line in lines[b + 1:e]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or cells[0] in ("key", "---") or set(cells[0]) <= {"-", " "}:
            continue
        try:
            v = float(cells[1].split()[0])
        except (ValueError, IndexError):
            continue
        rows[cells[0]] = (v, line.rstrip("\n"), cells[2])
    return rows


def update_index(index, rel_link, date, commit, what, figs):
    text = open(index, encoding="utf-8").read() if os.path.exists(index) else empty_index()
    lines = text.split("\n")
    if BEST_BEGIN in lines and BEST_END in lines and figs:
        b, e = lines.index(BEST_BEGIN), lines.index(BEST_END)
        rows = parse_best(lines, b, e)
        changed = False
        for key, v, unit, better, fwhat in figs:
            old = rows.get(key)
            if old is not None:
                ov, _, obetter = old
                if (better == "higher" and v <= ov) or (better == "lower" and v >= ov):
                    continue
            name = os.path.basename(rel_link)
            rows[key] = (v, f"| {key} | {fmt_value(v)} {unit} | {better} | [{name}]({rel_link}) | {fwhat} |", better)
            changed = True
        if changed:
            head = [lines[b + 1], lines[b + 2]] if b + 2 < e and lines[b + 1].startswith("| key") else [
                "| key | figure | better | run | what |", "| --- | ---: | --- | --- | --- |"]
            body = [rows[k][1] for k in sorted(rows)]
            lines = lines[:b + 1] + head + body + lines[e:]
    text = "\n".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    name = os.path.basename(rel_link)
    text += f"| {date} | {commit} | [{name}]({rel_link}) | {what.replace('|', '/')} |\n"
    tmp = index + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, index)


def add(src, directory, index, date, commit, tag, what):
    data = open(src, "rb").read()
    path = create_new(directory, date, commit, tag, data)
    rel = os.path.relpath(path, os.path.dirname(os.path.abspath(index)))
    if not what:
        what = first_heading(data.decode("utf-8", "replace")) or os.path.basename(src)
    update_index(index, rel, date, commit, what, figures(data.decode("utf-8", "replace")))
    return path


def first_heading(text):
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def check(directory, index):
    problems = []
    text = open(index, encoding="utf-8").read()
    linked = set(re.findall(r"\]\(results/([^)]+\.md)\)", text))
    base = os.path.dirname(os.path.abspath(index))
    for name in sorted(linked):
        if not os.path.isfile(os.path.join(base, "results", name)):
            problems.append(f"index names results/{name}, which does not exist")
    runs = set()
    in_runs = False
    for line in text.splitlines():
        if line.startswith(RUNS_HEAD):
            in_runs = True
        elif in_runs:
            runs.update(re.findall(r"\]\(results/([^)]+\.md)\)", line))
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if not name.endswith(".md") or name == "README.md":
            continue
        if not NAME_RE.match(name):
            problems.append(f"results/{name}: not named <date>-<commit>[-<tag>].md")
        if name not in runs:
            problems.append(f"results/{name} has no line under Runs in {os.path.basename(index)}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("name")
    n.add_argument("--dir", required=True)
    a = sub.add_parser("add")
    a.add_argument("file")
    a.add_argument("--dir", default=DEFAULT_DIR)
    a.add_argument("--index", default=DEFAULT_INDEX)
    a.add_argument("--what", default="")
    c = sub.add_parser("check")
    c.add_argument("--dir", default=DEFAULT_DIR)
    c.add_argument("--index", default=DEFAULT_INDEX)
    for p in (n, a):
        p.add_argument("--tag", default="")
        p.add_argument("--commit", default="")
        p.add_argument("--date", default="")
    args = ap.parse_args(argv)
    if args.cmd == "name":
        os.makedirs(args.dir, exist_ok=True)
        print(fresh_path(args.dir, args.date or today(), commit_id(args.commit), args.tag))
        return 0
    if args.cmd == "add":
        date, commit = args.date or today(), commit_id(args.commit)
        tag = args.tag
        if not tag and not args.date and not args.commit:
            m = NAME_RE.match(os.path.basename(args.file))
            if m:  # a file named by `name` on the GPU machine keeps its date, commit and tag
                date, commit, tag = m.group(1), m.group(2), m.group(3) or ""
        print(add(args.file, args.dir, args.index, date, commit, tag, args.what))
        return 0
    problems = check(args.dir, args.index)
    for p in problems:
        print("results:", p)
    print(f"results: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
