#!/usr/bin/env python3
"""Size limits of the crate's sources: no file in src/ over 500 lines and no
function over 80 lines (counted from its `fn` line to its closing brace).

Prints every file and function over its limit and exits 1 when there is any.
A file whose first line contains `@generated` (a generated table) is skipped.
Comments, string literals (plain, byte and raw) and char literals are blanked
before the braces are matched, so a brace inside them does not count.

    python3 scripts/size_check.py [ROOT]   (ROOT: the repository, default: this script's parent)
"""
import os
import re
import sys

MAX_FILE_LINES = 500
MAX_FN_LINES = 80

FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def is_ident(c):
    return c.isalnum() or c == "_"


def blank(src):
    """Return `src` with comments and literals turned into spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)

    def keep_newlines(text):
        return "".join("\n" if c == "\n" else " " for c in text)

    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c in "rb" and (i == 0 or not is_ident(src[i - 1])) and (
            m := re.match(r"b?r(#*)\"", src[i:i + 300])
        ):
            # A raw string: r"..", r#".."#, br"..".
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the
            # former is blanked.
            if nxt == "\\":
                j = src.find("'", i + 3)
                j = n if j < 0 else j + 1
            elif i + 2 < n and src[i + 2] == "'":
                j = i + 3
            else:
                out.append(c)
                i += 1
                continue
            out.append(keep_newlines(src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(src):
    """Yield (name, first line, line count) of every function over the limit."""
    code = blank(src)
    line_starts = [0] + [k + 1 for k, c in enumerate(code) if c == "\n"]

    def line_of(pos):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    for m in FN_RE.finditer(code):
        # The body starts at the first `{` after the signature; a `;` first
        # means a declaration without a body (trait item, extern block).
        j, paren = m.end(), 0
        while j < len(code):
            ch = code[j]
            if ch in "([":
                paren += 1
            elif ch in ")]":
                paren -= 1
            elif ch == ";" and paren == 0:
                j = -1
                break
            elif ch == "{" and paren == 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        depth = 0
        k = j
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        first, last = line_of(m.start()), line_of(k)
        count = last - first + 1
        if count > MAX_FN_LINES:
            yield m.group(1), first, count


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    src_dir = os.path.join(root, "src")
    problems = 0
    for dirpath, dirnames, filenames in os.walk(src_dir):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            lines = src.splitlines()
            if lines and "@generated" in lines[0]:
                continue
            if len(lines) > MAX_FILE_LINES:
                print(f"{rel}: {len(lines)} lines (limit {MAX_FILE_LINES})")
                problems += 1
            for fn, first, count in long_functions(src):
                print(f"{rel}:{first}: fn {fn}: {count} lines (limit {MAX_FN_LINES})")
                problems += 1
    if problems:
        print(f"size_check: {problems} over the limits")
        return 1
    print(f"size_check: ok (files <= {MAX_FILE_LINES} lines, functions <= {MAX_FN_LINES} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
