#!/usr/bin/env python3
"""Exports a small Llama-style decoder with a static KV cache for et_cuda_run's
text generation (README.md, "An LLM on a GPU machine").

    python3 examples/export_llm.py --tokenizer tokenizer.json --out llm/
    et_cuda_run --model_path llm/model.pte --data_path llm/aoti_cuda_blob.ptd \
        --tokenizer_path tokenizer.json --prompt "Once upon a time"

Needs a CUDA machine with torch 2.11 and executorch 1.5.1 (AOTInductor compiles
the model for the GPU it runs on). Not run on the CPU-only CI: the runner's
text path is tested there with the model suite's decoders on the GPU machine
(runner/README.md, "Text generation").

The weights are random (seeded) unless --checkpoint names a state dict saved
with torch.save whose names and shapes match this module's: the point is the
program's interface, which is what et_cuda_run's token loop reads:

    forward(input_ids int64 [1, T], cache_position int64 [T]) -> logits float32 [1, T, V]

with T dynamic (1..--max-prefill), the KV cache in the program's mutable
buffers (updated in place at cache_position), and a constant method
get_max_seq_len that tells the runner how long the cache is.
"""

import argparse
import json
import os

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, max_seq_len, theta=10000.0):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv)  # [S, D/2]
    return torch.cos(angles), torch.sin(angles)


def rotate(x, cos, sin):
    # x: [1, H, T, D]; cos/sin: [T, D/2]. Pairs (even, odd) rotated by the angle.
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, max_seq_len):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o = torch.nn.Linear(heads * self.head_dim, dim, bias=False)
        shape = (1, kv_heads, max_seq_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def forward(self, x, cos, sin, cache_position, mask):
        t = x.shape[1]
        q = self.q(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(1, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(1, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # The cache is state inside the program: written in place, read whole.
        self.k_cache.index_copy_(2, cache_position, k)
        self.v_cache.index_copy_(2, cache_position, v)
        rep = self.heads // self.kv_heads
        keys = self.k_cache.repeat_interleave(rep, dim=1)
        values = self.v_cache.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.o(out.transpose(1, 2).reshape(1, t, -1))


class Block(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden, max_seq_len):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads, max_seq_len)
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin, cache_position, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache_position, mask)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(torch.nn.Module):
    def __init__(self, vocab, dim=256, layers=4, heads=8, kv_heads=2, hidden=768, max_seq_len=256):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, kv_heads, hidden, max_seq_len) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        cos, sin = rope_tables(dim // heads, max_seq_len)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("slots", torch.arange(max_seq_len), persistent=False)

    def forward(self, input_ids, cache_position):
        x = self.embed(input_ids)
        cos, sin = self.cos[cache_position], self.sin[cache_position]
        # Token i sees the cache slots up to its own position (later slots
        # hold stale values from an earlier generation, or zeros).
        mask = (self.slots[None, :] <= cache_position[:, None])[None, None]  # [1, 1, T, S]
        for block in self.blocks:
            x = block(x, cos, sin, cache_position, mask)
        return self.head(self.norm(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json: the vocabulary size comes from it")
    ap.add_argument("--out", default="llm", help="output folder (model.pte, aoti_cuda_blob.ptd)")
    ap.add_argument("--max-seq-len", type=int, default=256, help="the KV cache's length")
    ap.add_argument("--max-prefill", type=int, default=128, help="the most prompt tokens per call")
    ap.add_argument("--checkpoint", help="a torch.save'd state dict for this module (default: random weights)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with open(args.tokenizer, encoding="utf-8") as f:
        tok = json.load(f)
    base = tok["model"]["vocab"]  # {token: id} (BPE, WordPiece) or [[piece, score], ...] (Unigram)
    ids = list(base.values()) if isinstance(base, dict) else list(range(len(base)))
    vocab = max(ids + [t["id"] for t in tok.get("added_tokens", [])]) + 1
    torch.manual_seed(args.seed)
    model = Decoder(vocab, max_seq_len=args.max_seq_len).eval()
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"), strict=False)
    model = model.to("cuda")

    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    t = torch.export.Dim("T", min=1, max=args.max_prefill)
    example = (torch.zeros(1, 4, dtype=torch.long, device="cuda"), torch.arange(4, device="cuda"))
    with torch.no_grad():
        ep = torch.export.export(
            model, example, dynamic_shapes={"input_ids": {1: t}, "cache_position": {0: t}}, strict=True
        )
    # ExecuTorch's Triton SDPA kernel is off: README.md, "Known problem".
    specs = [CudaBackend.generate_method_name_compile_spec("forward"), CompileSpec("triton_kernel_mode", b"OFF")]
    edge = to_edge_transform_and_lower(
        ep,
        partitioner=[CudaPartitioner(specs)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
        constant_methods={"get_max_seq_len": args.max_seq_len, "get_vocab_size": vocab},
    )
    prog = edge.to_executorch()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model.pte"), "wb") as f:
        f.write(prog.buffer)
    prog.write_tensor_data_to_file(args.out)
    print(f"wrote {args.out}/model.pte and its .ptd: vocab {vocab}, cache {args.max_seq_len}, prefill <= {args.max_prefill}")


if __name__ == "__main__":
    main()
