"""decode_llama.py's PyTorch rows: the eager greedy loop as the runner does it, timed, and the
host-to-device copy bandwidth (pinned and pageable)."""
import time

import torch


def decode_loop(fn, prompt, steps, dev="cuda"):
    """Greedy loop as the runner does it (one host read per token): (tokens, ttft_s, decode_s)."""
    T = prompt.shape[1]
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    logits = fn(prompt.to(dev), torch.arange(T, device=dev))
    toks = [int(logits[0, -1].argmax())]
    t1 = time.perf_counter()
    for i in range(steps - 1):
        logits = fn(torch.tensor([[toks[-1]]], device=dev), torch.tensor([T + i], device=dev))
        toks.append(int(logits[0, -1].argmax()))
    t2 = time.perf_counter()
    return toks, t1 - t0, t2 - t1


def h2d_bandwidth(nbytes=1 << 30, reps=5):
    """Pinned (and pageable) host-to-device copy bandwidth, GB/s: best and median of reps."""
    out = {}
    for kind in ("pinned", "pageable"):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(kind == "pinned"))
        host.fill_(1)
        dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        rates = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            dev.copy_(host, non_blocking=True)
            e1.record()
            e1.synchronize()
            rates.append(nbytes / (e0.elapsed_time(e1) / 1e3) / 1e9)
        rates.sort()
        out[kind] = {"bytes": nbytes, "best_gb_s": round(rates[-1], 2), "median_gb_s": round(rates[len(rates) // 2], 2)}
        del host, dev
    return out
