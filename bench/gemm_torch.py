"""PyTorch's GEMM on the shapes of the library's `gemm_bench`
(src/kernels/gemm/bench.rs), timed the same way: a CUDA graph of back-to-back
`F.linear(x, W)` calls (bf16, weights rotating over copies totalling >= 256 MiB
so that they come from HBM), CUDA events around its replays, the median of 5
after a warm-up. Prints one table with the bench's columns, to set beside it.

    python3 bench/gemm_torch.py            (on the GPU machine; torch with CUDA)
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hbm  # noqa: E402  the card's HBM bandwidth by its name

SHAPES = [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192), (3072, 1024), (1024, 3072)]
MS = [32, 128, 512]
PEAK_TFLOPS = 989.0  # dense bf16, H100 SXM and H200 alike


def time_graph(fn, reps):
    """GPU time per call (us) of `reps` calls of fn(i) captured into one graph."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for i in range(3):  # warm-up outside the capture (cuBLAS picks its kernels)
            fn(i)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for i in range(reps):
            fn(i)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for it in range(6):
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        if it:
            times.append(e0.elapsed_time(e1) * 1000.0 / reps)
    return sorted(times)[len(times) // 2]


def main():
    torch.manual_seed(0)
    bw = hbm.Hbm(torch.cuda.get_device_name())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}: F.linear (bf16, no bias) in a CUDA graph; "
          f"%HBM of {bw.label}")
    print(f"{'N':>5} {'K':>5} {'M':>4} | {'us':>8} {'TFLOP/s':>7} {'%peak':>5} {'GB/s':>6} {'%HBM':>5}")
    for n, k in SHAPES:
        copies = max(1, -(-(256 << 20) // (n * k * 2)))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        for m in MS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            reps = min(max(copies * 2, 20), 200)
            us = time_graph(lambda i: F.linear(x, ws[i % copies]), reps)
            tflops = 2.0 * m * n * k / us / 1e6
            gbs = (n * k + m * k + m * n) * 2 / us / 1e3
            print(f"{n:>5} {k:>5} {m:>4} | {us:>8.2f} {tflops:>7.1f} {tflops / PEAK_TFLOPS * 100:>4.0f}% "
                  f"{gbs:>6.0f} {bw.pct(gbs):>4.0f}%")
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
