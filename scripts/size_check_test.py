#!/usr/bin/env python3
"""scripts/size_check.py can fail: in each language (Rust, C, C++, Python, shell)
a function of 81 lines must be reported and one of 80 must not, braces inside
comments and strings must not count, a file of 501 lines must be reported; on a
tree with such a file, the check must exit 1 when its folder is enforced and 0
(reporting it) when it is not.

    python3 scripts/size_check_test.py
"""
import contextlib
import io
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import size_check  # noqa: E402  (scripts/ on sys.path)

LIMIT = size_check.MAX_FN_LINES


def body(n, line):
    """n lines of `line` (the body of a function of n + 2 lines)."""
    return "".join(line + "\n" for _ in range(n))


def rust(name, lines):
    return (f"/// {{ a brace in a comment\nfn {name}(x: &str) -> usize {{\n"
            + body(lines - 2, '    let _ = "}}"; let _ = \'}\'; // }')
            + "}\nfn after() {}\n")


def cpp(name, lines):
    return (f"#include <string>\n// {{\nstatic int {name}(const std::string &s) const noexcept {{\n"
            + body(lines - 2, '  if (s == "}") { s.size(); } /* } */')
            + "}\nint after() { return 0; }\n")


def c(name, lines):
    return (f"int {name}(int argc, char **argv)\n{{\n"
            + body(lines - 3, "  if (argc) { argv[0][0] = '}'; }")
            + "}\n")


def python(name, lines):
    return f"def {name}(x):\n" + body(lines - 2, "    x += 1  # }") + "    return x\n"


def shell(name, lines):
    return f"{name}() {{\n" + body(lines - 2, '  echo "}" # }') + "}\nafter() { :; }\n"


CASES = [("x.rs", rust, "fn"), ("x.cpp", cpp, "function"), ("x.c", c, "function"),
         ("x.py", python, "def"), ("x.sh", shell, "function")]


def reported(path, src):
    return size_check.check_file(path, path, src)


def main():
    failures, checked = [], []

    def expect(ok, what):
        checked.append(what)
        if not ok:
            print("FAIL: " + what)
            failures.append(what)

    for path, make, kind in CASES:
        long_src, short_src = make("too_long", LIMIT + 1), make("short_enough", LIMIT)
        got = reported(path, long_src)
        want = f"{path}:"
        expect(any(line.startswith(want) and f"{kind} too_long: {LIMIT + 1} lines" in line for line in got),
               f"{path}: a function of {LIMIT + 1} lines is reported ({got})")
        got = reported(path, short_src)
        expect(got == [], f"{path}: a function of {LIMIT} lines is not reported ({got})")
        names = [f[1] for f in size_check.functions(path, short_src)]
        expect("short_enough" in names, f"{path}: the function is found at all ({names})")

    big = "".join(f"x{i} = {i}\n" for i in range(size_check.MAX_FILE_LINES + 1))
    got = reported("big.py", big)
    expect(got == [f"big.py: {size_check.MAX_FILE_LINES + 1} lines (limit {size_check.MAX_FILE_LINES})"],
           f"a file of {size_check.MAX_FILE_LINES + 1} lines is reported ({got})")
    expect(reported("big.py", big[:big.rindex("x")]) == [],
           f"a file of {size_check.MAX_FILE_LINES} lines is not reported")

    # End to end: one folder of FOLDERS holding a function over the limit, enforced (a subprocess,
    # the real ENFORCED list) and, with ENFORCED patched to leave that folder out, only reported.
    folder = size_check.ENFORCED[0]
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, folder))
        with open(os.path.join(tmp, folder, "x.sh"), "w", encoding="utf-8") as f:
            f.write(shell("too_long", LIMIT + 1))
        p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "size_check.py"), tmp],
                           capture_output=True, text=True)
        out = p.stdout + p.stderr
        expect(p.returncode == 1 and f"{folder}/x.sh:1: function too_long" in out,
               f"a long function in enforced {folder}/ exits 1 and is named (rc {p.returncode}: {out.strip()})")
        saved, argv = size_check.ENFORCED, sys.argv
        size_check.ENFORCED = [f for f in size_check.FOLDERS if f != folder]
        sys.argv = ["size_check.py", tmp]
        try:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = size_check.main()
        finally:
            size_check.ENFORCED, sys.argv = saved, argv
        out = buf.getvalue()
        expect(rc == 0 and f"{folder}/x.sh:1: function too_long" in out and "not enforced yet" in out,
               f"the same in a folder not enforced exits 0 and is named (rc {rc}: {out.strip()})")

    if failures:
        print(f"size_check_test: {len(failures)} failed")
        return 1
    print(f"size_check_test: ok ({len(checked)} checks: a function one line over the limit is reported "
          "in Rust, C, C++, Python and shell, one at the limit is not; a file over the limit; the exit status)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
