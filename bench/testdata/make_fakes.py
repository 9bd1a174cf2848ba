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
Existing manifests are left alone.
"""
import argparse
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_WEIGHTS = 4 << 20  # bytes of qwen3_pd_bf16's fake prefill weights blob (fake_runner.py uses it too)
BUILDS = {
    "main-cff6f4dd32": ("refs/heads/main", "cff6f4dd32e630945b7188512c1f2b4f102b05ad", True),
    "v1.4.1-e4d02f41f7": ("v1.4.1", "e4d02f41f7909e8ed5bf4a14ffc520d733453d9f", True),
    "v1.2.0-0b0e2c5cdd": ("v1.2.0", "0b0e2c5cdd67c8b4396a46ea1d1aa72ffb0128d7", False),
    "v1.2.0-own-runtime": ("v1.2.0", "0b0e2c5cdd67c8b4396a46ea1d1aa72ffb0128d7", False),
}


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


def decoder(name):
    prompt = [17, 230, 5, 981, 44, 12]
    tokens = [(37 * i + 11 * len(name)) % 997 + 2 for i in range(16)]
    m = {"model": "model.pte", "data": [], "methods": {}, "stateful": True,
         "generate": {"prefill_method": "forward", "decode_method": "forward", "prompt_ids": prompt,
                      "tokens": tokens, "max_seq_len": 64}}
    data = None
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
    a = ap.parse_args()
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
            m, data = decoder(name)
            write_program(os.path.join(a.suite, name), m, data)
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
