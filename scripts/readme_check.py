#!/usr/bin/env python3
"""README.md true by construction: fails (exit 1, one line per problem, each
saying what to change where) when

- a file of src/ is missing from the "## Layout" section, or the section
  names a src/ file that does not exist;
- a Rust test file that needs a GPU (it says "needs a CUDA device") is not
  named in the layout's `tests/` line;
- a documented size is more than 10 % off what it measures: the fixtures,
  the example program's `.so` and weights, and (with --lib/--stripped, as
  scripts/install_test.sh passes them) the installed library;
- a size is written in decimal KB or MB (the sizes are binary: KiB, MiB).

    python3 scripts/readme_check.py [--root DIR] [--lib FILE --stripped FILE]

Run by scripts/test.sh (the layout, the tests line and the file sizes) and by
scripts/install_test.sh (the library's sizes as built and as installed).
"""
import argparse
import os
import re
import sys

TOLERANCE = 0.10
UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
NUM = r"([0-9][0-9.,]*) (KiB|MiB|GiB|bytes|B)"
FIXTURES = ("mlp_f32", "conv_f32", "attn_bf16")


def section(text, title):
    """The lines of `## title` up to the next `## ` heading."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else None


def bullets(body):
    """The section's bullets, each joined into one line (continuations indented)."""
    out = []
    for line in body.splitlines():
        if line.startswith("- "):
            out.append(line[2:])
        elif out and line.startswith("  "):
            out[-1] += " " + line.strip()
    return out


def listed_src_files(body):
    """src/ paths named in the layout: `src/a/b.rs`, and bare names after one
    (`src/a/b.rs`, `c.rs`: c.rs is src/a/c.rs)."""
    listed = {}
    for b in bullets(body):
        base = None
        for tok in re.findall(r"`([^`]+)`", b.split(": ", 1)[0]):
            if tok.startswith("src/"):
                listed[tok] = b
                base = os.path.dirname(tok)
            elif base and "/" not in tok and tok.endswith(".rs"):
                listed[f"{base}/{tok}"] = b
    return listed


def src_files(root):
    files = []
    for d, dirs, names in os.walk(os.path.join(root, "src")):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for n in sorted(names):
            if not n.startswith("."):
                files.append(os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/"))
    return sorted(files)


def where_to_add(path, listed):
    """A sentence saying after which listed file the line for `path` goes."""
    d = os.path.dirname(path)
    same_dir = sorted(p for p in listed if os.path.dirname(p) == d or p.startswith(d + "/"))
    before = [p for p in same_dir if p < path]
    if before:
        return f"after the line of `{before[-1]}`"
    if same_dir:
        return f"before the line of `{same_dir[0]}`"
    parent = sorted(p for p in listed if p < path)
    return f"after the line of `{parent[-1]}`" if parent else "at the top of the src/ lines"


def check_layout(root, text, errors):
    body = section(text, "Layout")
    if body is None:
        errors.append('README.md has no "## Layout" section')
        return
    listed = listed_src_files(body)
    for path in src_files(root):
        if path not in listed:
            errors.append(f'README.md "## Layout" does not list {path}: add a line '
                          f"`- \\`{path}\\`: <what it does>.` {where_to_add(path, listed)}")
    for path in sorted(listed):
        if not os.path.exists(os.path.join(root, path)):
            errors.append(f'README.md "## Layout" lists {path}, which does not exist: remove or rename it')
    tests_line = next((b for b in bullets(body) if b.startswith("`tests/`")), None)
    if tests_line is None:
        errors.append('README.md "## Layout" has no line starting with `tests/`')
        return
    tests = os.path.join(root, "tests")
    for n in sorted(os.listdir(tests)):
        if n.endswith(".rs") and "needs a CUDA device" in test_source(os.path.join(tests, n)):
            if f"`{n}`" not in tests_line:
                errors.append(f'README.md "## Layout": tests/{n} needs a GPU ("needs a CUDA device"); '
                              f"name `{n}` among the GPU tests of the `tests/` line")


def test_source(path, seen=None):
    """A test file's text with that of the files it pulls in (`include!("..")`, `#[path = ".."]`,
    relative to its folder), recursively: a test split into pieces is read whole."""
    seen = set() if seen is None else seen
    path = os.path.normpath(path)
    if path in seen or not os.path.exists(path):
        return ""
    seen.add(path)
    text = open(path, encoding="utf-8").read()
    here = os.path.dirname(path)
    for rel in re.findall(r'include!\(\s*"([^"]+)"\s*\)|#\[path\s*=\s*"([^"]+)"\]', text):
        text += "\n" + test_source(os.path.join(here, rel[0] or rel[1]), seen)
    return text


def compare(what, where, number, unit, actual, errors, checked):
    claim = float(number.replace(",", "")) * UNITS[unit]
    ok = abs(actual - claim) <= TOLERANCE * actual
    line = f"{what}: README.md says {number} {unit}, it is {fmt(actual, unit)} ({actual} bytes)"
    checked.append(line)
    if not ok:
        errors.append(f"{line}, more than {TOLERANCE:.0%} off: update README.md ({where})")


def fmt(n, unit):
    v = n / UNITS[unit]
    return f"{v:.0f} {unit}" if unit in ("B", "bytes") else f"{v:.3g} {unit}"


def embedded_so_size(root, pte):
    """Size of the AOTInductor .so inside a .pte (examples/export_example.py's reader)."""
    sys.path.insert(0, os.path.join(root, "examples"))
    from export_example import embedded_shared_objects  # noqa: E402  (examples/ on sys.path)

    with open(pte, "rb") as f:
        sos = embedded_shared_objects(f.read())
    return len(sos[0]) if sos else 0


def tree_size(d, names=None):
    total = 0
    for sub in names or [""]:
        for dd, _, files in os.walk(os.path.join(d, sub)):
            total += sum(os.path.getsize(os.path.join(dd, f)) for f in files)
    return total


def file_claims(root):
    """(what, regex with the number and unit as groups 1 and 2, where, bytes measured)."""
    ex = os.path.join(root, "examples", "mlp")
    fx = os.environ.get("ET_CUDA_FIXTURES_CHECK", os.path.join(root, "tests", "fixtures"))
    return [
        ("the example's weights (examples/mlp/aoti_cuda_blob.ptd)", NUM + " of weights\\)",
         '"Set-up", the example program', lambda: os.path.getsize(os.path.join(ex, "aoti_cuda_blob.ptd"))),
        ("the example's AOTInductor .so (inside examples/mlp/model.pte)", r"AOTInductor `\.so` \(about " + NUM,
         '"Set-up", the example program', lambda: embedded_so_size(root, os.path.join(ex, "model.pte"))),
        ("the fixtures (tests/fixtures/{mlp_f32,conv_f32,attn_bf16})", r"three programs? of " + NUM + " in all",
         '"Set-up", the fixtures', lambda: tree_size(fx, FIXTURES)),
    ]


def check_file_sizes(root, text, errors, checked):
    for what, regex, where, measure in file_claims(root):
        m = re.search(regex, text)
        if not m:
            errors.append(f"README.md no longer states {what} (pattern {regex!r}, {where}): "
                          "state it again or change scripts/readme_check.py")
            continue
        compare(what, where, m.group(1), m.group(2), measure(), errors, checked)


def check_library_sizes(text, args, errors, checked):
    regex = r"no DWARF \(" + NUM + "; " + NUM + " with `--strip`"
    m = re.search(regex, text)
    if not m:
        errors.append(f"README.md no longer states the library's size (pattern {regex!r}, "
                      '"Using it from CMake")')
        return
    where = '"Using it from CMake", the table of installed files'
    if args.lib:
        compare("lib/libexecutorch_cuda.so.0 as built", where, m.group(1), m.group(2),
                os.path.getsize(args.lib), errors, checked)
    if args.stripped:
        compare("lib/libexecutorch_cuda.so.0 installed with --strip", where, m.group(3), m.group(4),
                os.path.getsize(args.stripped), errors, checked)


def check_units(text, errors):
    for i, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(r"\b[0-9][0-9.,]* ?(KB|MB|kB)\b(?!/s)", line):
            errors.append(f"README.md:{i}: {m.group(0)!r}: sizes are binary, write KiB or MiB "
                          "(and check the number: 1 MiB = 1,048,576 bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--lib", help="libexecutorch_cuda.so.0 as built (checks only the library's sizes)")
    ap.add_argument("--stripped", help="libexecutorch_cuda.so.0 as installed with --strip")
    args = ap.parse_args()
    with open(os.path.join(args.root, "README.md"), encoding="utf-8") as f:
        text = f.read()
    errors, checked = [], []
    if args.lib or args.stripped:
        check_library_sizes(text, args, errors, checked)
    else:
        check_layout(args.root, text, errors)
        check_file_sizes(args.root, text, errors, checked)
        check_units(text, errors)
    for line in errors:
        print(f"error: {line}")
    if errors:
        return 1
    n = len(src_files(args.root))
    what = "; ".join(checked)
    print("README.md: " + (what if args.lib or args.stripped else f"layout lists all {n} files of src/; {what}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
