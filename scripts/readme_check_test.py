#!/usr/bin/env python3
"""scripts/readme_check.py can fail: run on a copy of README.md with one src/ file's
line removed, with a size 20 % off, with a decimal unit and with a GPU test left out of
the `tests/` line (also one whose GPU tests are in the files it includes), it must exit 1
naming each; on the README as it is, it must pass.

    python3 scripts/readme_check_test.py
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "scripts", "readme_check.py")


def run(root):
    p = subprocess.run([sys.executable, CHECK, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def tree(tmp, readme):
    """A root whose src/, tests/, examples/ are links to the real ones, with this README."""
    os.makedirs(tmp, exist_ok=True)
    for d in ("src", "tests", "examples"):
        os.symlink(os.path.join(ROOT, d), os.path.join(tmp, d))
    with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
        f.write(readme)
    return tmp


def main():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    cases = {
        "a src/ file missing": (
            readme.replace("- `src/cuda/event.rs`: events.\n", ""),
            "does not list src/cuda/event.rs: add a line `- \\`src/cuda/event.rs\\`: <what it does>.` after the line of"),
        "a size 20 % off": (
            re.sub(r"three programs of ([0-9.]+) MiB",
                   lambda m: f"three programs of {float(m.group(1)) * 1.2:.1f} MiB", readme),
            "the fixtures (tests/fixtures/{mlp_f32,conv_f32,attn_bf16}): README.md says"),
        "a decimal unit": (readme.replace("11 KiB of weights", "11 KB of weights"), "'11 KB': sizes are binary"),
        "a GPU test left out": (readme.replace("`sample_gpu.rs`, ", ""), "tests/sample_gpu.rs needs a GPU"),
        # bad_input.rs's GPU tests are in the files it pulls in with include!, not in the file itself.
        "a GPU test split into pieces left out": (
            readme.replace("program runs of `bad_input.rs`", "program runs of the bad-input corpus"),
            "tests/bad_input.rs needs a GPU"),
    }
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        rc, out = run(tree(os.path.join(tmp, "as_is"), readme))
        if rc != 0:
            print(f"FAIL: the README as it is does not pass:\n{out}")
            failures += 1
        for i, (name, (text, expect)) in enumerate(cases.items()):
            if text == readme:
                print(f"FAIL: {name}: the case changed nothing (README.md changed? update this test)")
                failures += 1
                continue
            rc, out = run(tree(os.path.join(tmp, str(i)), text))
            if rc != 1 or expect not in out:
                print(f"FAIL: {name}: exit {rc}, expected 1 with {expect!r}; got:\n{out}")
                failures += 1
    if failures:
        print(f"readme_check_test.py: {failures} failure(s)")
        return 1
    print(f"readme_check.py passes README.md and refuses each of {len(cases)} broken copies ({', '.join(cases)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
