#!/usr/bin/env python3
"""The architecture's import rules, checked on the sources (no dependencies):
  1. no import circles between the files of src/ (a file's `crate::a::b` and `super::x`
     references, outside its unit tests and comments; a module and its own submodules excepted);
  2. the C API's files (src/ffi/) use the public safe API and the C-free types only: no
     `crate::delegate`, `crate::cuda`, `crate::aoti`, nor the shim ABI (`crate::shim`, its own
     layer beside the C API, which the generated code calls back into);
  3. below the two C surfaces, nothing uses them: no file outside src/ffi/ and src/shim/ uses
     `crate::ffi` or `crate::shim` (both share only `crate::boundary`, the one guard).
Prints every violation and exits 1 when there is one."""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def sources():
    out = {}
    for p in glob.glob(os.path.join(ROOT, "**", "*.rs"), recursive=True):
        rel = os.path.relpath(p, ROOT)[:-3].replace(os.sep, "/")
        name = rel[:-4] if rel.endswith("/mod") else rel
        text = open(p, encoding="utf-8").read()
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", text)[0]
        out[name] = re.sub(r"//.*", "", text)
    return out


def edges(files):
    g = {}
    for m, s in files.items():
        refs = set()
        for x in re.findall(r"crate::((?:[a-z_0-9]+::)*[a-z_0-9]+)", s):
            parts = x.split("::")
            for k in range(len(parts), 0, -1):
                cand = "/".join(parts[:k])
                if cand in files:
                    refs.add(cand)
                    break
        parent = "/".join(m.split("/")[:-1])
        for x in re.findall(r"super::([a-z_0-9]+)", s):
            cand = (parent + "/" + x).strip("/")
            if cand in files:
                refs.add(cand)
        g[m] = {r for r in refs if r != m and not m.startswith(r + "/") and not r.startswith(m + "/")}
    return g


def cycles(g):
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def main():
    files = sources()
    bad = []
    for c in cycles(edges(files)):
        bad.append("import circle: " + " <-> ".join(c))
    for m, s in sorted(files.items()):
        if m == "ffi" or m.startswith("ffi/"):
            for x in sorted(set(re.findall(r"crate::(delegate|cuda|aoti|shim)\b", s))):
                bad.append(f"src/{m}.rs uses crate::{x} (the C API goes through the safe API)")
        elif not (m == "shim" or m.startswith("shim/") or m == "lib"):
            for x in sorted(set(re.findall(r"crate::(ffi|shim)\b", s))):
                bad.append(f"src/{m}.rs uses crate::{x} (the C surfaces are the top layer)")
    for b in bad:
        print(b)
    print(f"layers_check: {'ok (no import circles; the C API uses the safe API only; nothing below uses the C surfaces)' if not bad else str(len(bad)) + ' problem(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
