"""Programs for the runner's GPU checks (runner/gpu/check.sh), exported with
ExecuTorch's CudaPartitioner (PyTorch 2.11 + ExecuTorch 1.2 on the GPU machine).

  python3 export_checks.py OUTDIR [dyn_mlp] [tiny_decoder] [tiny_decoder_dev]

dyn_mlp:      Linear(64,128) -> ReLU -> Linear(128,10), float32, with a dynamic
              batch Dim("b", 1..64); four cases of batch 4, 7, 33, 1.
tiny_decoder: a one-layer attention decoder with its KV cache in registered
              buffers updated with index_copy_ (state inside the program);
              forward(input_ids int64 [1, T], cache_position int64 [T]) -> logits
              float32 [1, T, 64], T dynamic in 1..16, cache of 32 positions.
              Cases: prefill of a 5-token prompt, then two single-token steps
              (state carries); "generate": the prompt and eager's 8 greedy tokens.
tiny_decoder_dev: the same decoder, weights and cases, with its inputs and outputs
              planned in device memory (ExecuTorch >= 1.4 only, so not in the
              default set: tests/models/decode_llama.py's --device-logits
              configuration). The token ids reach the delegate through
              ExecuTorch's _h2d_copy and the logits stay on the device, so the
              runner picks tokens there and --overlap feeds them back.
References: eager PyTorch on the CPU in float32, from the same weights (fixed
seeds). Each program is written to OUTDIR/<name>/ with a manifest.json in the
format of runner/README.md.
"""
import copy
import json
import os
import sys
import time
import traceback

import torch
from torch.export import Dim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "models"))

DT = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.int64: "int64"}


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(64, 128)
        self.l2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class TinyDecoder(torch.nn.Module):
    def __init__(self, vocab=64, dim=32, max_seq=32):
        super().__init__()
        self.dim = dim
        self.emb = torch.nn.Embedding(vocab, dim)
        self.q = torch.nn.Linear(dim, dim, bias=False)
        self.k = torch.nn.Linear(dim, dim, bias=False)
        self.v = torch.nn.Linear(dim, dim, bias=False)
        self.out = torch.nn.Linear(dim, vocab, bias=False)
        self.register_buffer("k_cache", torch.zeros(max_seq, dim))
        self.register_buffer("v_cache", torch.zeros(max_seq, dim))
        self.register_buffer("slots", torch.arange(max_seq))

    def forward(self, input_ids, cache_position):
        x = self.emb(input_ids)[0]  # [T, D]
        self.k_cache.index_copy_(0, cache_position, self.k(x))
        self.v_cache.index_copy_(0, cache_position, self.v(x))
        scores = self.q(x) @ self.k_cache.t() / (self.dim**0.5)  # [T, S]
        visible = self.slots[None, :] <= cache_position[:, None]
        scores = scores.masked_fill(~visible, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ self.v_cache  # [T, D]
        return self.out(x + y)[None]  # [1, T, V]


def raw(t, path):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t.view(torch.int16).numpy().tofile(path)
    else:
        t.numpy().tofile(path)


def spec(t, f):
    return {"dtype": DT[t.dtype], "sizes": list(t.shape), "file": f}


def lower(module, example, dynamic_shapes, config=None):
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    ep = torch.export.export(module, example, dynamic_shapes=dynamic_shapes, strict=True)
    part = [CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])]
    edge = to_edge_transform_and_lower(ep, partitioner=part, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch(config) if config is not None else edge.to_executorch()


def write(out, name, program, cases, extra):
    """cases: [(inputs, outputs)] for method forward, run in this order."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.pte"), "wb") as f:
        f.write(program.buffer)
    program.write_tensor_data_to_file(d)
    manifest = {"model": "model.pte", "data": sorted(f for f in os.listdir(d) if f.endswith(".ptd"))}
    manifest.update(extra)
    manifest["methods"] = {"forward": []}
    for ci, (ins, outs) in enumerate(cases):
        case = {"inputs": [], "outputs": []}
        for kind, tensors in (("in", ins), ("out", outs)):
            for i, t in enumerate(tensors):
                f = f"forward.case{ci}.{kind}{i}.bin"
                raw(t, os.path.join(d, f))
                case["inputs" if kind == "in" else "outputs"].append(spec(t, f))
        manifest["methods"]["forward"].append(case)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def dyn_mlp(out):
    torch.manual_seed(1)
    m = MLP().eval()
    xs = [torch.randn(b, 64) for b in (4, 7, 33, 1)]
    b = Dim("b", min=1, max=64)
    program = lower(m, (xs[0],), {"x": {0: b}})
    with torch.no_grad():
        cases = [((x,), (m(x),)) for x in xs]
    write(out, "dyn_mlp", program, cases,
          {"reference": "eager-cpu-fp32", "tolerance": {"atol": 1e-4, "rtol": 1e-4}})


def tiny_decoder(out, new_tokens=8, name="tiny_decoder", config=None):
    torch.manual_seed(2)
    m = TinyDecoder().eval()
    prompt = [3, 17, 42, 5, 9]
    t = Dim("t", min=1, max=16)
    example = (torch.tensor([prompt]), torch.arange(len(prompt)))
    program = lower(copy.deepcopy(m), example, {"input_ids": {1: t}, "cache_position": {0: t}}, config)

    # Eager, state carried: the cases (prefill, two steps) and the greedy tokens.
    ref = copy.deepcopy(m)
    cases, tokens = [], []
    with torch.no_grad():
        ids, pos = torch.tensor([prompt]), torch.arange(len(prompt))
        for step in range(new_tokens):
            logits = ref(ids, pos)
            if step < 3:
                cases.append(((ids.clone(), pos.clone()), (logits.clone(),)))
            tokens.append(int(torch.argmax(logits[0, -1])))
            ids = torch.tensor([[tokens[-1]]])
            pos = torch.tensor([len(prompt) + step])
    extra = {
        "reference": "eager-cpu-fp32",
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
        "generate": {"prefill_method": "forward", "decode_method": "forward", "prompt_ids": prompt,
                     "tokens": tokens, "max_seq_len": 32},
    }
    write(out, name, program, cases, extra)


def tiny_decoder_dev(out):
    from decode_llama import backend_config
    from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig  # noqa: F401 (>= 1.4)

    tiny_decoder(out, name="tiny_decoder_dev", config=backend_config(device_logits=True))


def main():
    out = sys.argv[1]
    want = set(sys.argv[2:]) or {"dyn_mlp", "tiny_decoder"}
    report = {}
    programs = (("dyn_mlp", dyn_mlp), ("tiny_decoder", tiny_decoder), ("tiny_decoder_dev", tiny_decoder_dev))
    for name, fn in programs:
        if name not in want:
            continue
        t0 = time.time()
        try:
            fn(out)
            report[name] = "ok"
            print(f"export {name}: ok {time.time() - t0:.1f}s", flush=True)
        except Exception as e:  # report and go on with the next program
            traceback.print_exc()
            report[name] = repr(e)[:300]
            print(f"export {name}: FAILED {report[name]}", flush=True)
    print(json.dumps(report))
    return 0 if all(v == "ok" for v in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
