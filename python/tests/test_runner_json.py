"""tests/models/runner_json.py (the reader of et_cuda_run --json) on canned output: needs
neither torch nor a GPU."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "models"))

import runner_json  # noqa: E402

# What et_cuda_run --manifest m.json --bench 3 --json and a two-round token loop print
# (runner/json.cpp's format), with log lines and upstream's PyTorchObserver line between.
CANNED = """\
I 00:00:00.000 executorch:cuda_backend.cpp:1] a log line
{"kind":"case","method":"forward","case":"case0","max_abs_err":5.96e-08,"pass":true,"problem":""}
{"kind":"case","method":"forward","case":"case1","max_abs_err":0.5,"pass":false,"problem":"output 0: \\"x\\" differs"}
{"kind":"bench","method":"forward","n":3,"warmup":0,"min_us":41.5,"p50_us":46.25,"p99_us":61,"cpu_mean_us":47.75}
{"kind":"bench-lib","method":"forward","io":"host","executes_per_call":1,"lib_execute_us":5.5,"run_us":4,"backend_overhead_us":1.5,"host_waits_per_call":1}
{"kind":"generate","round":1,"rounds":2,"decode_tok_s":null,"tokens":[1,2],"expected":null,"verdict":"UNCHECKED"}
{"kind":"generate","round":2,"rounds":2,"decode_tok_s":1333.5,"tokens":[5,6],"expected":[5,6],"verdict":"MATCH"}
{"kind":"generate-lib","round":2,"decode_executes":63,"lib_execute_us":5.7,"run_us":4.5,"graph_replays":63,"graph_captures":0}
PyTorchObserver {"prompt_tokens":32,"generated_tokens":64}
{"kind": broken
[1, 2, 3]
"""


class RunnerJsonTest(unittest.TestCase):
    def test_reads_the_object_lines_and_skips_the_rest(self):
        recs = runner_json.records(CANNED)
        self.assertEqual([r["kind"] for r in recs],
                         ["case", "case", "bench", "bench-lib", "generate", "generate", "generate-lib"])
        self.assertEqual(recs[1]["problem"], 'output 0: "x" differs')

    def test_selects_by_kind_and_fields(self):
        self.assertEqual(len(runner_json.of_kind(CANNED, "case", method="forward")), 2)
        self.assertEqual(runner_json.of_kind(CANNED, "case", pass_=True), [])
        failed = [r["case"] for r in runner_json.of_kind(CANNED, "case") if not r["pass"]]
        self.assertEqual(failed, ["case1"])
        self.assertEqual(runner_json.last(CANNED, "bench", method="forward")["p50_us"], 46.25)
        gen = runner_json.last(CANNED, "generate")
        self.assertEqual((gen["round"], gen["decode_tok_s"], gen["verdict"]), (2, 1333.5, "MATCH"))
        self.assertIsNone(runner_json.last(CANNED, "bench-wait"))
        self.assertIsNone(runner_json.last("", "case"))

    def test_text_fields_read_as_the_text_line_did(self):
        gen = runner_json.last(CANNED, "generate")
        self.assertEqual(runner_json.text_fields(gen),
                         {"round": "2", "rounds": "2", "decode_tok_s": "1333.5", "tokens": "5,6", "expected": "5,6",
                          "verdict": "MATCH"})
        first = runner_json.of_kind(CANNED, "generate")[0]
        self.assertEqual((runner_json.text_fields(first)["decode_tok_s"], runner_json.text_fields(first)["expected"]),
                         ("n/a", "none"))
        lib = runner_json.text_fields(runner_json.last(CANNED, "generate-lib"))
        self.assertEqual((lib["lib_execute_us"], lib["run_us"], lib["graph_replays"]), ("5.70", "4.50", "63"))
        self.assertIsNone(runner_json.record("PyTorchObserver {}"))
        self.assertIsNone(runner_json.record('{"no_kind": 1}'))

    def test_brief_lines(self):
        self.assertEqual(runner_json.brief(runner_json.last(CANNED, "generate")),
                         "generate: round=2 rounds=2 decode_tok_s=1333.5 verdict=MATCH")
        with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
            f.write(CANNED)
            f.flush()
            out = subprocess.run([sys.executable, runner_json.__file__, "brief", f.name, "bench", "case"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
        self.assertEqual(len(out), 3)
        self.assertEqual(out[2], "bench: method=forward n=3 warmup=0 min_us=41.5 p50_us=46.25 p99_us=61 cpu_mean_us=47.75")


if __name__ == "__main__":
    unittest.main()
