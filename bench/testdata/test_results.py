"""bench/results.py on a throwaway folder: fresh names, no overwrite, the best-figures table, check.
  python3 test_results.py BENCH_DIR SCRATCH_DIR   (bench/test_table.sh runs it)"""
import os
import sys

sys.path.insert(0, sys.argv[1])
import results as r  # noqa: E402

d = sys.argv[2]
os.makedirs(d + "/results")
idx = d + "/RESULTS.md"
a = d + "/a.md"
with open(a, "w") as f:
    f.write("# run a\n<!-- figure: k.tok | 100 | tok/s | higher | decode -->\n"
            "<!-- figure: k.us | 5.0 | µs | lower | p50 -->\n")
p1 = r.add(a, d + "/results", idx, "2026-01-02", "abc1234", "bench", "")
assert os.path.basename(p1) == "2026-01-02-abc1234-bench.md", p1
before = open(p1, "rb").read()
b = d + "/b.md"
with open(b, "w") as f:
    f.write("# run b\n<!-- figure: k.tok | 90 | tok/s | higher | decode -->\n"
            "<!-- figure: k.us | 4.0 | µs | lower | p50 -->\n")
p2 = r.add(b, d + "/results", idx, "2026-01-02", "abc1234", "bench", "second")
assert os.path.basename(p2) == "2026-01-02-abc1234-bench-2.md", p2
assert open(p1, "rb").read() == before, "the first file changed"
p3 = r.add(b, d + "/results", idx, "2026-01-02", "abc1234", "bench", "third")
assert os.path.basename(p3) == "2026-01-02-abc1234-bench-3.md", p3
text = open(idx).read()
# the higher-is-better key keeps run a's 100; the lower-is-better key moves to run b's 4
assert "| k.tok | 100 tok/s | higher | [2026-01-02-abc1234-bench.md](results/2026-01-02-abc1234-bench.md) | decode |" in text, text
assert "| k.us | 4 µs | lower | [2026-01-02-abc1234-bench-2.md](results/2026-01-02-abc1234-bench-2.md) | p50 |" in text, text
assert text.count("| 2026-01-02 | abc1234 |") == 3, text
assert text.rstrip().endswith("| third |"), text
assert "| run a |" in text, "--what defaults to the file's first heading"
assert r.check(d + "/results", idx) == [], r.check(d + "/results", idx)
with open(d + "/results/2026-01-03-abc1234.md", "w") as f:
    f.write("x")
assert any("no line under Runs" in p for p in r.check(d + "/results", idx))
# a tag cannot leave the folder
p4 = r.add(a, d + "/results", idx, "2026-01-02", "abc1234", "../../x", "")
assert os.path.dirname(p4) == d + "/results" and os.path.basename(p4) == "2026-01-02-abc1234-x.md", p4
# an existing name is never opened for writing, even by the low-level writer
try:
    with open(p1, "xb"):
        pass
    raise AssertionError("mode x opened an existing file")
except FileExistsError:
    pass
print("ok")
