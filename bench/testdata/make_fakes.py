#!/usr/bin/env python3
"""Stand-ins for bench/run.sh's CPU test (BENCH_TEST_CPU=1); nothing here is a real program.

  make_fakes.py [--upstream DIR] [--suite DIR --decoders a,b] [--fixtures DIR] [--models DIR --names a,b]

--upstream: DIR/upstream/<build>/libupstream_cuda_backend.so for the builds pack.sh ships
  (main and v1.4.1 mention enable_cuda_graph_for_method, as the real ones do; v1.2.0 does not;
  v1.2.0-own-runtime has its own libexecutorch.so), with BUILD_INFO.txt.
--suite: the model suite's decoders (manifest.json with a "generate" section; qwen3_pd_bf16
  with prefill/decode methods and testdata/two_methods.ptd as its weights) and its ExecuTorch
  1.5.1 MLPs. --fixtures: the three shared fixtures, when the folder has none (inputs planned).
--models: placeholder bench programs (inputs not planned; encdec with two methods).
--rs (with --suite): the decoders as tests/models/decode_llama.py --mode export writes them
  (bench/side_by_side.sh --real-scale): a 32-token prompt (RS_PROMPT), no tokens, an export.json.
--ref DIR --model M --go FILE [--steps N]: stand-in for decode_llama.py --mode ref: DIR/ref_M.json
  with N eager tokens (fake_runner.py's tokens for RS_PROMPT, the last RS_DIVERGE_AFTER.. changed)
  and DIR/ref_M.ready at once; when FILE exists, the slot (eager tok/s, host-to-device rates) and
  DIR/ref_M.done.
Existing manifests are left alone.
"""
import argparse
import json
import os
import struct
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_WEIGHTS = 4 << 20  # bytes of qwen3_pd_bf16's fake prefill weights blob (fake_runner.py uses it too)
BUILDS = {
    "main-cff6f4dd32": ("refs/heads/main", "cff6f4dd32e630945b7188512c1f2b4f102b05ad", True),
    "v1.4.1-e4d02f41f7": ("v1.4.1", "e4d02f41f7909e8ed5bf4a14ffc520d733453d9f", True),
    "v1.2.0-0b0e2c5cdd": ("v1.2.0", "0b0e2c5cdd67c8b4396a46ea1d1aa72ffb0128d7", False),
    "v1.2.0-own-runtime": ("v1.2.0", "0b0e2c5cdd67c8b4396a46ea1d1aa72ffb0128d7", False),
}


RS_PROMPT = [(97 * i + 5) % 1000 + 3 for i in range(32)]
RS_DIVERGE_AFTER = 100  # the fake reference's tokens equal the fake runner's up to here


def fake_tokens(prompt, n):
    """The tokens fake_runner.py generates for a manifest without expected tokens."""
    return [(sum(prompt) * 7 + 31 * j) % 1000 for j in range(n)]


def fake_ref(out, model, go, steps):
    os.makedirs(out, exist_ok=True)
    toks = fake_tokens(RS_PROMPT, steps)
    toks = toks[:RS_DIVERGE_AFTER] + [(t + 1) % 1000 for t in toks[RS_DIVERGE_AFTER:]]
    r = {"model": model, "prompt_ids": RS_PROMPT, "steps": steps, "tokens": toks, "min_margin": 0.0,
         "compile_status": "not tried"}
    path = os.path.join(out, f"ref_{model}.json")

    def write():
        with open(path + ".tmp", "w") as f:
            json.dump(r, f)
        os.replace(path + ".tmp", path)

    write()
    open(os.path.join(out, f"ref_{model}.ready"), "w").close()
    print(f"ref {model}: eager tokens written ({steps}) (fake)", flush=True)
    t0 = time.time()
    while not os.path.exists(go):
        if time.time() - t0 > 600:
            return
        time.sleep(0.1)
    r["slot"] = {"eager": {"decode_tok_s": 57.8, "ttft_ms": 20.5, "tokens_match": True},
                 "h2d": {"pinned": {"bytes": 1 << 30, "best_gb_s": 50.0, "median_gb_s": 49.0},
                         "pageable": {"bytes": 1 << 30, "best_gb_s": 8.0, "median_gb_s": 7.5}}}
    write()
    open(os.path.join(out, f"ref_{model}.done"), "w").close()
    print(f"ref {model}: {json.dumps(r['slot'])} (fake)", flush=True)


def tensor(dtype, sizes, file):
    return {"dtype": dtype, "sizes": sizes, "file": file}


def write_program(folder, manifest, data=None):
    if os.path.exists(os.path.join(folder, "manifest.json")):
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.pte"), "wb") as f:
        f.write(b"\0\0\0\0ET12 fake program for bench/run.sh's CPU test\n")
    for d in data or []:
        # two_methods.ptd (written by ExecuTorch 1.5.1's FlatTensorSerializer) with its metadata
        # patched to claim a 4 MiB prefill blob, the size of the real qwen3 weights; the segment
        # itself stays 3000 bytes (table.py reads only the metadata).
        with open(os.path.join(HERE, "two_methods.ptd"), "rb") as f:
            b = f.read()
        b = b.replace(struct.pack("<Q", 3000), struct.pack("<Q", FAKE_WEIGHTS), 1)
        with open(os.path.join(folder, d), "wb") as f:
            f.write(b)
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def simple(inputs, outputs, planned):
    m = {"model": "model.pte", "data": [], "methods": {"forward": [{"inputs": inputs, "outputs": outputs}]}}
    if not planned:
        m["alloc_graph_input"] = False
    return m


def decoder(name, rs=False):
    prompt = [17, 230, 5, 981, 44, 12]
    tokens = [(37 * i + 11 * len(name)) % 997 + 2 for i in range(16)]
    m = {"model": "model.pte", "data": [], "methods": {}, "stateful": True,
         "generate": {"prefill_method": "forward", "decode_method": "forward", "prompt_ids": prompt,
                      "tokens": tokens, "max_seq_len": 64}}
    data = None
    if rs:  # decode_llama.py --mode export: no eager tokens in a bf16 manifest
        m["generate"] = {"prefill_method": "forward", "decode_method": "forward", "prompt_ids": RS_PROMPT,
                         "max_seq_len": 1024}
        m["companion"] = {"gemv": 113, "attention": 16} if name.endswith("_companion") else {}
        return m, None
    if name.endswith("qwen3_pd_bf16"):
        m["generate"].update(prefill_method="prefill", decode_method="decode")
        m["data"] = data = ["aoti_cuda_blob.ptd"]
        m["methods"] = {"prefill": [{"inputs": [tensor("int64", [1, 4], "p.in0.bin"), tensor("int64", [4], "p.in1.bin")],
                                     "outputs": [tensor("bfloat16", [1, 4, 1000], "p.out0.bin")]}]}
    return m, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream")
    ap.add_argument("--suite")
    ap.add_argument("--decoders", default="")
    ap.add_argument("--fixtures")
    ap.add_argument("--models")
    ap.add_argument("--names", default="")
    ap.add_argument("--rs", action="store_true")
    ap.add_argument("--ref")
    ap.add_argument("--model", default="llama1b")
    ap.add_argument("--go", default="")
    ap.add_argument("--steps", type=int, default=128)
    a = ap.parse_args()
    if a.ref:
        return fake_ref(a.ref, a.model, a.go, a.steps)
    if a.upstream:
        for b, (ref, commit, graphs) in BUILDS.items():
            d = os.path.join(a.upstream, "upstream", b)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "libupstream_cuda_backend.so"), "w") as f:
                f.write("fake backend library for the CPU test\n" + ("enable_cuda_graph_for_method\n" if graphs else ""))
            with open(os.path.join(d, "BUILD_INFO.txt"), "w") as f:
                f.write(f"ref: {ref}\ncommit: {commit}\n")
            if b.endswith("own-runtime"):
                open(os.path.join(d, "libexecutorch.so"), "w").close()
        print(f"fake upstream builds in {a.upstream}/upstream")
    if a.suite:
        for name in [n for n in a.decoders.split(",") if n]:
            m, data = decoder(name, a.rs)
            write_program(os.path.join(a.suite, name), m, data)
            if a.rs:
                with open(os.path.join(a.suite, name, "export.json"), "w") as f:
                    json.dump({"export_s": 1.0, "torch_export_s": 0.2, "lower_s": 0.7, "ptd_bytes": 3031000000,
                               "parameters": 1498000000, "companion": m["companion"],
                               "versions": {"executorch": "fake"}}, f)
        if a.rs:
            print(f"fake real-scale programs in {a.suite}")
            return
        write_program(os.path.join(a.suite, "et15_mlp_f32"),
                      simple([tensor("float32", [4, 64], "in0.bin")], [tensor("float32", [4, 10], "out0.bin")], True))
        write_program(os.path.join(a.suite, "et15_mlp_devio_f32"),
                      simple([tensor("float32", [4, 64], "in0.bin")], [tensor("float32", [4, 10], "out0.bin")], False))
        print(f"fake suite programs in {a.suite}")
    if a.fixtures:
        fx = {"mlp_f32": ([4, 64], [4, 10], "float32"), "conv_f32": ([2, 3, 16, 16], [2, 8], "float32"),
              "attn_bf16": ([2, 16, 64], [2, 16, 64], "bfloat16")}
        for name, (i, o, dt) in fx.items():
            write_program(os.path.join(a.fixtures, name),
                          simple([tensor(dt, i, "forward.case0.in0.bin")], [tensor(dt, o, "forward.case0.out0.bin")], True))
        print(f"fake fixtures in {a.fixtures} (where missing)")
    if a.models:
        for name in [n for n in a.names.split(",") if n]:
            if name == "encdec":
                m = {"model": "model.pte", "data": [], "alloc_graph_input": False, "methods": {
                    "encoder": [{"inputs": [tensor("float32", [4, 32], "e.in0.bin")], "outputs": [tensor("float32", [4, 64], "e.out0.bin")]}],
                    "decoder": [{"inputs": [tensor("float32", [4, 64], "d.in0.bin")], "outputs": [tensor("float32", [4, 8], "d.out0.bin")]}]}}
            else:
                m = simple([tensor("bfloat16", [1, 1024], "in0.bin")], [tensor("bfloat16", [1, 1024], "out0.bin")], False)
            write_program(os.path.join(a.models, name), m)
        print(f"fake bench programs in {a.models}")


if __name__ == "__main__":
    main()
