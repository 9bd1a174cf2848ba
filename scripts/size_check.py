#!/usr/bin/env python3
"""Size limits of the project's sources: no file over 500 lines and no function
over 80 lines, in every folder of FOLDERS (Rust, C and C++, Python, shell).

A function is counted from its first line (`fn`, the C/C++ name, `def`, the
shell `name() {`) to its last: the closing brace, or for Python the last line
of its body. Per language:

- Rust (`.rs`): `fn NAME`, its body the braces after the signature; comments,
  string literals (plain, byte and raw) and char literals are blanked before
  the braces are matched, so a brace inside them does not count.
- C and C++ (`.c`, `.cpp`, `.cc`, `.h`, `.hpp`): a `{` whose statement ends in
  a parameter list `NAME(...)` (with `const`, `noexcept`, `override`, a
  trailing return type or a constructor's initialiser list after it), NAME not
  a keyword (`if`, `for`, `while`, `switch`, `catch`); comments, strings (raw
  ones too) and char literals blanked first.
- Python (`.py`): every `def` and `async def`, through `ast`.
- Shell (`.sh`): `NAME() {` (or `function NAME {`) up to the first line
  that is a `}` at the same indentation (or the same line for a one-liner).

Prints every file and function over its limit, folder by folder. Exits 1
when there is any in a folder of ENFORCED; a folder not yet enforced is only
reported. A file whose first line contains `@generated` is skipped, and so
are the folders of SKIP (the dated benchmark results).

    python3 scripts/size_check.py [ROOT]   (ROOT: the repository, default: this script's parent)
"""
import ast
import os
import re
import sys

MAX_FILE_LINES = 500
MAX_FN_LINES = 80

# Every folder checked, and those among them whose excesses fail the check.
FOLDERS = ["src", "scripts", "python/executorch_cuda", "python/tests", "tests", "tests/models", "c_tests", "runner", "bench"]
ENFORCED = FOLDERS  # all of them: every folder is within the limits
# Dated results, never rewritten: never checked.
SKIP = ["bench/results"]

RUST = (".rs",)
C_LIKE = (".c", ".cpp", ".cc", ".h", ".hpp")
PYTHON = (".py",)
SHELL = (".sh",)

FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
C_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
              "alignof", "static_assert", "defined", "do", "else", "try"}


def is_ident(c):
    return c.isalnum() or c == "_"


def keep_newlines(text):
    return "".join("\n" if c == "\n" else " " for c in text)


def quoted_end(src, i, quote):
    """The index after the literal opened by `quote` at i (backslash escapes)."""
    j, n = i + 1, len(src)
    while j < n and src[j] != quote:
        j += 2 if src[j] == "\\" else 1
    return min(j + 1, n)


def block_comment_end(src, i, nested):
    depth, j, n = 1, i + 2, len(src)
    while j < n and depth:
        if nested and src.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif src.startswith("*/", j):
            depth, j = depth - 1, j + 2
        else:
            j += 1
    return j


def comment_at(src, i, nested):
    """(the comment at `i` blanked, where it ends) for a `//` or `/* */` comment (Rust's
    block comments nest, C's do not), else None."""
    if src.startswith("//", i):
        j = src.find("\n", i)
        j = len(src) if j < 0 else j
        return " " * (j - i), j
    if src.startswith("/*", i):
        j = block_comment_end(src, i, nested=nested)
        return keep_newlines(src[i:j]), j
    return None


def blank(src):
    """Return Rust `src` with comments and literals turned into spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if (cm := comment_at(src, i, nested=True)) is not None:
            out.append(cm[0])
            i = cm[1]
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
            j = quoted_end(src, i, '"')
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


def blank_c(src):
    """Return C/C++ `src` with comments, strings and char literals turned into
    spaces (newlines kept); preprocessor lines too."""
    out = []
    i, n = 0, len(src)
    line_start = True
    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if line_start and c == "#":
            # A directive, with its backslash continuations.
            j = i
            while True:
                j = src.find("\n", j)
                if j < 0:
                    j = n
                    break
                if src[j - 1] != "\\":
                    break
                j += 1
            out.append(keep_newlines(src[i:j]))
            i = j
            continue
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
        if (cm := comment_at(src, i, nested=False)) is not None:
            out.append(cm[0])
            i = cm[1]
        elif c == "R" and nxt == '"' and (i == 0 or not is_ident(src[i - 1]) or src[i - 1] in "8uUL") and (
            m := re.match(r'R"([^()\\\s]{0,16})\(', src[i:i + 40])
        ):
            end = ")" + m.group(1) + '"'
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and src[i - 1].isalnum()):
            # A string or char literal (a ' between digits is a separator: 1'000).
            j = quoted_end(src, i, c)
            out.append(keep_newlines(src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Lines:
    """Line numbers of positions in a text."""

    def __init__(self, text):
        self.starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]

    def of(self, pos):
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1


def matching_brace(code, j):
    """The index of the `}` closing the `{` at j (len(code) if none)."""
    depth, k = 0, j
    while k < len(code):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
        k += 1
    return k


def rust_functions(src):
    """Yield (name, first line, line count) of every Rust function with a body."""
    code = blank(src)
    lines = Lines(code)
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
        k = matching_brace(code, j)
        first, last = lines.of(m.start()), lines.of(k)
        yield m.group(1), first, last - first + 1


# After a parameter list: qualifiers, a trailing return type, an initialiser list.
C_TAIL = re.compile(
    r"\)\s*(?:(?:const|volatile|noexcept(?:\s*\([^()]*\))?|override|final|mutable|&&?|"
    r"->\s*[\w:<>,\s*&]+?)\s*)*(?P<init>:\s*[\w:]+\s*[({][^;]*?)?$", re.S)


def c_function_name(header):
    """The function's name if `header` (a statement's text up to its `{`) is a
    function definition's head, else None."""
    header = header.strip()
    if not header.endswith(")") and not C_TAIL.search(header):
        return None
    m = C_TAIL.search(header)
    if not m:
        return None
    # The `(` opening the parameter list that the tail closes.
    close = m.start()
    depth, k = 0, close
    while k >= 0:
        if header[k] == ")":
            depth += 1
        elif header[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    if k < 0:
        return None
    name = re.search(r"([A-Za-z_~][\w:~]*(?:operator\s*\S+?)?)\s*$", header[:k])
    if not name:
        return None
    word = name.group(1).split("::")[-1]
    if word in C_KEYWORDS or re.match(r"^(?:else|do|return)\b", header):
        return None
    if "=" in re.sub(r"operator\s*\S+|[<>!=]=|\([^()]*\)", "", header[:k]):
        return None  # an initialised variable: `auto x = f(...) {` is not a definition
    return name.group(1)


def c_functions(src):
    """Yield (name, first line, line count) of every C/C++ function definition."""
    code = blank_c(src)
    lines = Lines(code)
    stmt_start = 0
    k = 0
    while k < len(code):
        ch = code[k]
        if ch in ";}":
            stmt_start = k + 1
        elif ch == "{":
            header = code[stmt_start:k]
            tail = C_TAIL.search(header.strip())
            if tail and tail.group("init") and is_ident(header.rstrip()[-1:] or " "):
                # A member's brace initialiser in a constructor's initialiser list.
                k = matching_brace(code, k) + 1
                continue
            name = c_function_name(header)
            if name:
                end = matching_brace(code, k)
                first_pos = stmt_start + len(header) - len(header.lstrip())
                first, last = lines.of(first_pos), lines.of(end)
                yield name, first, last - first + 1
            stmt_start = k + 1
        k += 1


def python_functions(src, path="<string>"):
    """Yield (name, first line, line count) of every Python function."""
    try:
        tree = ast.parse(src, filename=path)
    except SyntaxError as e:
        yield f"<syntax error: {e.msg}>", e.lineno or 1, MAX_FN_LINES + 1
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


SH_FN = re.compile(r"^(\s*)(?:function\s+([A-Za-z_][\w:.-]*)\s*(?:\(\))?|([A-Za-z_][\w:.-]*)\s*\(\))\s*([{(]?)(.*)$")


def shell_functions(src):
    """Yield (name, first line, line count) of every shell function."""
    lines = src.splitlines()
    for i, line in enumerate(lines):
        m = SH_FN.match(line)
        if not m:
            continue
        indent, name = m.group(1), m.group(2) or m.group(3)
        opener, rest = m.group(4), m.group(5).strip()
        if not opener and not (i + 1 < len(lines) and lines[i + 1].strip() in ("{", "(")):
            continue
        closer = ")" if opener == "(" else "}"
        if opener and re.search(r"(^|[;\s])" + re.escape(closer) + r"\s*(#.*|[<>|&].*)?$", rest):
            yield name, i + 1, 1
            continue
        end = re.compile(r"^" + re.escape(indent) + re.escape(closer) + r"(\s|$|[<>|&;])")
        last = next((j for j in range(i + 1, len(lines)) if end.match(lines[j])), len(lines) - 1)
        yield name, i + 1, last - i + 1


def functions(path, src):
    """(kind, name, first line, line count) of the functions of a file, by its extension."""
    if path.endswith(RUST):
        return [("fn", *f) for f in rust_functions(src)]
    if path.endswith(C_LIKE):
        return [("function", *f) for f in c_functions(src)]
    if path.endswith(PYTHON):
        return [("def", *f) for f in python_functions(src, path)]
    if path.endswith(SHELL):
        return [("function", *f) for f in shell_functions(src)]
    return []


def long_functions(src, path="x.rs"):
    """Yield (name, first line, line count) of every function over the limit."""
    for _kind, name, first, count in functions(path, src):
        if count > MAX_FN_LINES:
            yield name, first, count


def check_file(path, rel, src):
    """The lines reporting what in one file is over the limits."""
    lines = src.splitlines()
    if lines and "@generated" in lines[0]:
        return []
    out = []
    if len(lines) > MAX_FILE_LINES:
        out.append(f"{rel}: {len(lines)} lines (limit {MAX_FILE_LINES})")
    for kind, name, first, count in functions(path, src):
        if count > MAX_FN_LINES:
            out.append(f"{rel}:{first}: {kind} {name}: {count} lines (limit {MAX_FN_LINES})")
    return out


def source_files(root, folder):
    """The code files under root/folder (not those of a nested folder of FOLDERS or SKIP)."""
    others = [f for f in FOLDERS + SKIP if f != folder and f.startswith(folder + "/")]
    top = os.path.join(root, folder)
    for dirpath, dirnames, filenames in os.walk(top):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__"
                             and f"{rel_dir}/{d}" not in others)
        for name in sorted(filenames):
            if name.endswith(RUST + C_LIKE + PYTHON + SHELL):
                yield os.path.join(dirpath, name)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    failing = reported = 0
    for folder in FOLDERS:
        enforced = folder in ENFORCED
        for path in source_files(root, folder):
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            with open(path, encoding="utf-8") as f:
                src = f.read()
            for line in check_file(path, rel, src):
                print(line if enforced else f"{line} [not enforced yet]")
                if enforced:
                    failing += 1
                else:
                    reported += 1
    folders = ", ".join(f + "/" for f in ENFORCED)
    pending = [f + "/" for f in FOLDERS if f not in ENFORCED]
    tail = f"; {reported} over the limits in folders not enforced yet ({', '.join(pending)})" if reported else ""
    if failing:
        print(f"size_check: {failing} over the limits in {folders}{tail}")
        return 1
    print(f"size_check: ok in {folders} (files <= {MAX_FILE_LINES} lines, "
          f"functions <= {MAX_FN_LINES} lines){tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
