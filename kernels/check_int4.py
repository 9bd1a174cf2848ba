#!/usr/bin/env python3
"""GPU harness for aoti_torch_cuda__weight_int4pack_mm (needs a CUDA GPU and
PyTorch 2.11 with CUDA).

    python3 kernels/check_int4.py path/to/libexecutorch_cuda.so

Loads our library with ctypes, wraps torch CUDA tensors with our
aoti_torch_create_tensor_from_blob, calls aoti_torch_cuda__weight_int4pack_mm
and checks the result against (a) dequantise-then-matmul in fp32 and (b)
torch._weight_int4pack_mm itself, on weights packed by
torch._convert_weight_to_int4pack on CUDA, for many (M, N, K, group,
innerKTiles) and for every kernel configuration the library can be forced
to; outputs come from a poisoned pool (NaN-filled memory the allocator hands
back), then one case on a side stream (through our stream guard), the
forced-PTX (JIT) path in a subprocess, and the timings: CUDA events, median
per call with the GPU queue kept full, several weight sets rotated so that
L2 does not hold them, against torch's _weight_int4pack_mm and a bf16
torch.matmul of the same shape.

Streams: our shim launches on the thread's current stream for the device,
which is the legacy default stream (handle 0) when nothing set one; that is
the stream PyTorch uses when no other stream is current, so the calls and
torch's kernels are ordered without any synchronisation here.

Each phase (correctness, configs, streams, ptx, bench) runs in its own
process with a timeout, so an error that poisons the CUDA context, or a hang,
stays inside its phase; nothing stops at the first failure. If the first
call fails (our kernel module does not load), the driver's error is printed.
Details go to $OUT (or --out):
int4_results.json and int4_log.txt; the compact table is printed last.
Exit status: 0 when every check passed, 1 otherwise, 2 when the library or
the GPU could not be used at all.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

import torch

BF16, I32 = 15, 3
DEVICE_CUDA = 1
GROUPS = (32, 64, 128, 256)
IKTS = (2, 4, 8)

LOG = []


def log(msg=""):
    print(msg, flush=True)
    LOG.append(msg)


# ------------------------------------------------------------- the library


class Lib:
    def __init__(self, path):
        self.so = ctypes.CDLL(os.path.abspath(path))
        so = self.so
        H = ctypes.c_void_p
        so.aoti_torch_create_tensor_from_blob.argtypes = [
            ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int32,
            ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(H)]
        so.aoti_torch_create_tensor_from_blob.restype = ctypes.c_int32
        so.aoti_torch_empty_strided.argtypes = [
            ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
            ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(H)]
        so.aoti_torch_empty_strided.restype = ctypes.c_int32
        so.aoti_torch_cuda__weight_int4pack_mm.argtypes = [H, H, ctypes.c_int64, H, ctypes.POINTER(H)]
        so.aoti_torch_cuda__weight_int4pack_mm.restype = ctypes.c_int32
        so.aoti_torch_get_data_ptr.argtypes = [H, ctypes.POINTER(ctypes.c_void_p)]
        so.aoti_torch_get_data_ptr.restype = ctypes.c_int32
        so.aoti_torch_get_sizes.argtypes = [H, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))]
        so.aoti_torch_get_sizes.restype = ctypes.c_int32
        so.aoti_torch_get_dtype.argtypes = [H, ctypes.POINTER(ctypes.c_int32)]
        so.aoti_torch_get_dtype.restype = ctypes.c_int32
        so.aoti_torch_delete_tensor_object.argtypes = [H]
        so.aoti_torch_delete_tensor_object.restype = ctypes.c_int32
        so.aoti_torch_create_cuda_stream_guard.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(H)]
        so.aoti_torch_create_cuda_stream_guard.restype = ctypes.c_int32
        so.aoti_torch_delete_cuda_stream_guard.argtypes = [H]
        so.aoti_torch_delete_cuda_stream_guard.restype = ctypes.c_int32
        so.et_cuda_last_error.argtypes = []
        so.et_cuda_last_error.restype = ctypes.c_char_p
        so.et_cuda_debug_int4mm_tuning.argtypes = [ctypes.c_int32] * 4
        so.et_cuda_debug_int4mm_tuning.restype = ctypes.c_int32

    def last_error(self):
        m = self.so.et_cuda_last_error()
        return m.decode(errors="replace") if m else ""

    def wrap(self, t):
        """An AtenTensorHandle borrowing torch tensor t (must stay alive)."""
        dt = {torch.bfloat16: BF16, torch.int32: I32}[t.dtype]
        n = t.dim()
        sizes = (ctypes.c_int64 * n)(*t.shape)
        strides = (ctypes.c_int64 * n)(*t.stride())
        h = ctypes.c_void_p()
        rc = self.so.aoti_torch_create_tensor_from_blob(
            ctypes.c_void_p(t.data_ptr()), n, sizes, strides, 0, dt,
            DEVICE_CUDA, t.device.index or 0, ctypes.byref(h))
        if rc != 0:
            raise RuntimeError("create_tensor_from_blob: " + self.last_error())
        return h

    def delete(self, h):
        self.so.aoti_torch_delete_tensor_object(h)

    def call(self, hx, hw, group, hs):
        """Raw call: (rc, output handle)."""
        out = ctypes.c_void_p()
        rc = self.so.aoti_torch_cuda__weight_int4pack_mm(hx, hw, group, hs, ctypes.byref(out))
        return rc, out

    def as_torch(self, h, shape):
        """A torch view of our tensor's memory (zero-copy; the handle must outlive it)."""
        p = ctypes.c_void_p()
        assert self.so.aoti_torch_get_data_ptr(h, ctypes.byref(p)) == 0
        sp = ctypes.POINTER(ctypes.c_int64)()
        assert self.so.aoti_torch_get_sizes(h, ctypes.byref(sp)) == 0
        dt = ctypes.c_int32()
        assert self.so.aoti_torch_get_dtype(h, ctypes.byref(dt)) == 0
        got = [sp[i] for i in range(len(shape))]
        if got != list(shape) or dt.value != BF16:
            raise RuntimeError(f"output has sizes {got} dtype {dt.value}, want {list(shape)} bf16")

        class Iface:
            __cuda_array_interface__ = {
                "shape": tuple(shape), "typestr": "<i2", "data": (p.value or 0, False),
                "version": 3, "strides": None, "stream": None,
            }
        return torch.as_tensor(Iface(), device="cuda").view(torch.bfloat16)

    def mm(self, x, packed, group, qsz, with_addr=False):
        """Our op on torch tensors; returns a torch copy of the output
        (and the address our output had, with with_addr)."""
        hx, hw, hs = self.wrap(x), self.wrap(packed), self.wrap(qsz)
        try:
            rc, out = self.call(hx, hw, group, hs)
            if rc != 0:
                raise RuntimeError(self.last_error())
            try:
                shape = (x.shape[0], packed.shape[0] * 8)
                if x.shape[0] == 0:
                    y, addr = torch.empty(shape, dtype=torch.bfloat16, device="cuda"), 0
                else:
                    view = self.as_torch(out, shape)
                    y, addr = view.clone(), view.data_ptr()
                return (y, addr) if with_addr else y
            finally:
                self.delete(out)
        finally:
            for h in (hx, hw, hs):
                self.delete(h)

    def poison_pool(self, m, n):
        """Allocate [m, n] bf16 from our pool, fill it with NaN, free it: the next
        allocation of that size on this stream is likely that block. Returns its address."""
        sizes = (ctypes.c_int64 * 2)(m, n)
        h = ctypes.c_void_p()
        rc = self.so.aoti_torch_empty_strided(2, sizes, None, BF16, DEVICE_CUDA, 0, ctypes.byref(h))
        if rc != 0:
            raise RuntimeError("empty_strided: " + self.last_error())
        t = self.as_torch(h, (m, n))
        t.view(torch.int16).fill_(-1)  # 0xFFFF: a NaN in bf16
        p = t.data_ptr()
        del t
        self.delete(h)
        return p

    def tuning(self, kind=0, a=0, b=0, c=0):
        if self.so.et_cuda_debug_int4mm_tuning(kind, a, b, c) != 0:
            raise RuntimeError(self.last_error())


# ------------------------------------------------------------- test data


def make_case(m, n, k, group, ikt, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=g)
    w_u8 = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)
    scale = (torch.rand(k // group, n, generator=g) * 0.02 + 0.005).to(torch.bfloat16)
    zero = ((torch.rand(k // group, n, generator=g) - 0.5) * 0.2).to(torch.bfloat16)
    qsz = torch.stack([scale, zero], dim=2).contiguous().cuda()
    x = (torch.randn(m, k, generator=g)).to(torch.bfloat16).cuda()
    packed = torch.ops.aten._convert_weight_to_int4pack(w_u8.cuda(), ikt)
    # (a) fp32 dequantise-then-matmul, dequantisation rule (q - 8) * scale + zero.
    s32 = scale.float().repeat_interleave(group, dim=0).t().cuda()  # [n, k]
    z32 = zero.float().repeat_interleave(group, dim=0).t().cuda()
    w32 = (q.cuda().float() - 8.0) * s32 + z32
    ref = x.float() @ w32.t()
    return x, packed, qsz, ref, w32


def rel_err(a, ref):
    d = (a.float() - ref.float()).abs().max().item()
    return d / max(ref.float().abs().max().item(), 1e-6)


RESULTS = {"cases": [], "bench": [], "sweep": [], "extra": {}}
FAILS = []


def check_case(lib, m, n, k, group, ikt, seed, tag="", tol_ref=2e-2, tol_torch=1e-2):
    rec = dict(m=m, n=n, k=k, group=group, ikt=ikt, tag=tag)
    try:
        x, packed, qsz, ref, _ = make_case(m, n, k, group, ikt, seed)
        if m == 0:
            # Empty output, no launch (torch itself refuses M = 0 with a launch error).
            y = lib.mm(x, packed, group, qsz)
            rec["ok"] = tuple(y.shape) == (0, n)
            RESULTS["cases"].append(rec)
            if not rec["ok"]:
                FAILS.append(rec)
            return rec
        poisoned = lib.poison_pool(m, n)
        y, addr = lib.mm(x, packed, group, qsz, with_addr=True)
        rec["poison_reused"] = addr == poisoned
        t = torch.ops.aten._weight_int4pack_mm(x, packed, group, qsz)
        rec["nan"] = int(torch.isnan(y).sum().item())
        rec["err_ref"] = rel_err(y, ref)
        rec["err_torch"] = rel_err(y, t)
        rec["torch_err_ref"] = rel_err(t, ref)
        rec["equal_torch"] = float((y.view(torch.int16) == t.view(torch.int16)).float().mean().item()) if y.numel() else 1.0
        ok = rec["nan"] == 0 and rec["err_ref"] <= tol_ref and rec["err_torch"] <= tol_torch
        rec["ok"] = ok
    except Exception as e:  # noqa: BLE001 - recorded, never fatal
        rec["ok"] = False
        rec["error"] = f"{type(e).__name__}: {e}"
    RESULTS["cases"].append(rec)
    if not rec["ok"]:
        FAILS.append(rec)
        log(f"FAIL {tag} m={m} n={n} k={k} g={group} ikt={ikt}: "
            + (rec.get("error") or f"nan={rec['nan']} err_ref={rec['err_ref']:.3e} err_torch={rec['err_torch']:.3e}"))
    return rec


def correctness(lib, quick=False):
    log("== correctness: default kernel choice")
    seed = 1
    ms = (1, 3, 8, 17, 64, 256)
    for ikt in IKTS:
        for group in GROUPS:
            ksmall = max(16 * ikt, group)
            shapes = [(8, ksmall), (40, 1280), (264, 4096)]
            if quick:
                shapes = shapes[:2]
            for n, k in shapes:
                for m in ms:
                    seed += 1
                    check_case(lib, m, n, k, group, ikt, seed, tag="default")
    # Boundaries between kernels and odd sizes.
    for m in (2, 9, 15, 16, 31, 32, 33, 48, 63, 64, 65, 100, 1000):
        for ikt in IKTS:
            seed += 1
            check_case(lib, m, 8 * 37, 1536, 64, ikt, seed, tag="edge")
    check_case(lib, 0, 64, 256, 64, 8, 999, tag="m0")
    for m in (1, 4, 16, 100):
        seed += 1
        check_case(lib, m, 4096, 4096, 128, 8, seed, tag="big")
    check_case(lib, 5, 14336, 4096, 32, 8, 777, tag="big")
    check_case(lib, 5, 4096, 14336, 128, 8, 778, tag="big")
    n_ok = sum(r["ok"] for r in RESULTS["cases"])
    log(f"   {n_ok}/{len(RESULTS['cases'])} cases pass")


def configs():
    out = []
    for rows in (8, 16):
        for nt in (2, 4):
            for warps in (1, 2, 4, 8, 16):
                if rows * warps <= 128:
                    out.append(("skinny", rows, nt, warps))
    for mt in (2, 4):
        for nt in (2, 4):
            out.append(("tiled", mt, nt, 0))
    return out


def set_config(lib, cfg):
    kind, a, b, c = cfg
    lib.tuning(1 if kind == "skinny" else 2, a, b, c)


def correctness_all_configs(lib):
    log("== correctness: every kernel configuration (forced)")
    before = len(FAILS)
    count = 0
    seed = 5000
    for cfg in configs():
        set_config(lib, cfg)
        ms = (1, 5, 2 * cfg[1] + 3) if cfg[0] == "skinny" else (1, 17, 70)
        for ikt in IKTS:
            for m, n, k, g in ((ms[0], 8, max(16 * ikt, 32), 32), (ms[1], 72, 1280, 64), (ms[2], 136, 2048, 256)):
                seed += 1
                check_case(lib, m, n, k, g, ikt, seed, tag=f"cfg{cfg}")
                count += 1
    lib.tuning(0)
    log(f"   {count - (len(FAILS) - before)}/{count} cases pass")


def side_stream(lib):
    log("== a torch side stream through our stream guard")
    rec = {"ok": False}
    try:
        x, packed, qsz, ref, _ = make_case(8, 512, 2048, 128, 8, 4242)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            guard = ctypes.c_void_p()
            rc = lib.so.aoti_torch_create_cuda_stream_guard(ctypes.c_void_p(s.cuda_stream), 0, ctypes.byref(guard))
            if rc != 0:
                raise RuntimeError(lib.last_error())
            try:
                torch.cuda._sleep(20_000_000)  # keep the side stream busy: ordering must hold anyway
                y = lib.mm(x, packed, 128, qsz)
            finally:
                lib.so.aoti_torch_delete_cuda_stream_guard(guard)
        torch.cuda.current_stream().wait_stream(s)
        rec["err_ref"] = rel_err(y, ref)
        rec["ok"] = rec["err_ref"] < 2e-2 and not torch.isnan(y).any().item()
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {e}"
    RESULTS["extra"]["side_stream"] = rec
    if not rec["ok"]:
        FAILS.append({"tag": "side_stream", **rec})
    log(f"   {'ok' if rec['ok'] else 'FAIL'} {rec}")


def no_host_wait(lib):
    log("== the call does not wait for the GPU")
    rec = {}
    try:
        x, packed, qsz, _, _ = make_case(4, 4096, 4096, 128, 8, 31)
        hx, hw, hs = lib.wrap(x), lib.wrap(packed), lib.wrap(qsz)
        rc, out = lib.call(hx, hw, 128, hs)  # warm (module, pool)
        if rc != 0:
            raise RuntimeError(lib.last_error())
        lib.delete(out)
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time queued ahead
        t0 = time.perf_counter()
        rc, out = lib.call(hx, hw, 128, hs)
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        lib.delete(out)
        for h in (hx, hw, hs):
            lib.delete(h)
        rec = {"rc": rc, "host_s": host, "ok": rc == 0 and host < 0.02}
    except Exception as e:  # noqa: BLE001
        rec = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    RESULTS["extra"]["no_host_wait"] = rec
    if not rec["ok"]:
        FAILS.append({"tag": "no_host_wait", **rec})
    log(f"   {'ok' if rec['ok'] else 'FAIL'} {rec}")


# ----------------------------------------------------------------- timing


def time_calls(fn_list, iters):
    """Median GPU time per call (ms) with the queue kept full: a sleep kernel
    first, so the host enqueues every call (and its events) before the GPU
    reaches them and the host's own speed does not show."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)
    t0 = time.perf_counter()
    for i in range(iters):
        starts[i].record()
        fn_list[i % len(fn_list)]()
        ends[i].record()
    host = (time.perf_counter() - t0) / iters
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(ms), host * 1e3


def device_time(fn_list, iters):
    """GPU busy time per call (ms) from CUPTI (torch.profiler): the sum of the durations of the
    kernels, memcpys and memsets the calls ran, over the calls. Unlike time_calls it leaves out
    the gaps between consecutive launches, so it is the kernel's own speed."""
    from torch.profiler import ProfilerActivity, profile

    for f in fn_list:
        f()
    torch.cuda.synchronize()
    # No sleep kernel in front here: CUPTI times each kernel by itself, gaps or not (and
    # torch.cuda._sleep's spin kernel would be counted).
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(iters):
            fn_list[i % len(fn_list)]()
        torch.cuda.synchronize()
    total_us = 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total_us += e.time_range.elapsed_us()
    return total_us / iters / 1e3


def bench_shape(lib, m, n, k, group=128, ikt=8, sets=None, iters=200, compare=True):
    wbytes = n * k // 2
    if sets is None:
        sets = max(3, min(24, (400 << 20) // wbytes))  # >= ~400 MB of weights, > L2
    xs = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    packs, scales, handles = [], [], []
    for _ in range(sets):
        packs.append(torch.randint(-2**31, 2**31 - 1, (n // 8, k // (ikt * 16), 32, ikt // 2),
                                   dtype=torch.int32, device="cuda"))
        s = torch.empty(k // group, n, 2, device="cuda").uniform_(0.001, 0.01).to(torch.bfloat16)
        scales.append(s)
    hx = lib.wrap(xs)
    for p, s in zip(packs, scales):
        handles.append((lib.wrap(p), lib.wrap(s)))

    def ours(i):
        def f():
            rc, out = lib.call(hx, handles[i][0], group, handles[i][1])
            if rc != 0:
                raise RuntimeError(lib.last_error())
            lib.delete(out)  # stream-ordered free: no wait
        return f

    nbytes = wbytes + (k // group) * n * 4 + m * k * 2 + m * n * 2
    row = {"m": m, "n": n, "k": k, "group": group, "ikt": ikt, "bytes": nbytes, "sets": sets}
    try:
        for f in [ours(i) for i in range(sets)]:
            f()
        row["ours_ms"], row["ours_host_ms"] = time_calls([ours(i) for i in range(sets)], iters)
        row["ours_TBps"] = nbytes / row["ours_ms"] / 1e9
        try:
            row["ours_dev_ms"] = device_time([ours(i) for i in range(sets)], iters)
            row["ours_dev_TBps"] = nbytes / row["ours_dev_ms"] / 1e9
        except Exception as e:  # noqa: BLE001
            row["dev_error"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001
        row["error"] = f"{type(e).__name__}: {e}"
    if compare:
        try:
            fns = [(lambda p=p, s=s: torch.ops.aten._weight_int4pack_mm(xs, p, group, s)) for p, s in zip(packs, scales)]
            row["torch_int4_ms"], _ = time_calls(fns, iters)
            row["torch_int4_TBps"] = nbytes / row["torch_int4_ms"] / 1e9
            row["torch_int4_dev_ms"] = device_time(fns, iters)
            row["torch_int4_dev_TBps"] = nbytes / row["torch_int4_dev_ms"] / 1e9
        except Exception as e:  # noqa: BLE001
            row["torch_int4_error"] = str(e)
        try:
            bsets = max(2, min(sets, (800 << 20) // (n * k * 2)))
            ws = [torch.randn(n, k, device="cuda").to(torch.bfloat16) for _ in range(bsets)]
            fns = [(lambda w=w: torch.matmul(xs, w.t())) for w in ws]
            row["bf16_ms"], _ = time_calls(fns, iters)
            row["bf16_TBps"] = (n * k * 2 + m * k * 2 + m * n * 2) / row["bf16_ms"] / 1e9
            row["bf16_TFLOPs"] = 2 * m * n * k / row["bf16_ms"] / 1e9
            row["bf16_dev_ms"] = device_time(fns, iters)
            row["bf16_dev_TBps"] = (n * k * 2 + m * k * 2 + m * n * 2) / row["bf16_dev_ms"] / 1e9
            del ws
        except Exception as e:  # noqa: BLE001
            row["bf16_error"] = str(e)
    lib.delete(hx)
    for a, b in handles:
        lib.delete(a)
        lib.delete(b)
    del packs, scales
    torch.cuda.empty_cache()
    return row


def benchmarks(lib, sweep=True):
    log("== timings (median GPU time per call, queue kept full, weights rotated)")
    for n_k in (4096, 8192):
        for m in (1, 4, 16):
            row = bench_shape(lib, m, n_k, n_k)
            RESULTS["bench"].append(row)
            log("   " + json.dumps(row))
    for m in (64, 256, 1024, 4096):
        row = bench_shape(lib, m, 4096, 4096, iters=50)
        RESULTS["bench"].append(row)
        log("   " + json.dumps(row))
    for g in (32, 256):
        row = bench_shape(lib, 1, 4096, 4096, group=g)
        RESULTS["bench"].append(row)
        log("   " + json.dumps(row))
    row = bench_shape(lib, 1, 4096, 4096, ikt=2)
    RESULTS["bench"].append(row)
    log("   " + json.dumps(row))
    if not sweep:
        return
    log("== configuration sweep (forced kernels; ours only)")
    for n_k in (4096, 8192):
        for m in (1, 4, 16):
            for cfg in configs():
                if cfg[0] == "skinny" and (m > 2 * cfg[1] or cfg[3] < 4):
                    continue
                if cfg[0] == "tiled" and m < 16:
                    continue
                set_config(lib, cfg)
                row = bench_shape(lib, m, n_k, n_k, iters=100, compare=False)
                row["cfg"] = list(cfg)
                RESULTS["sweep"].append(row)
                log("   " + json.dumps(row))
    for m in (64, 256, 1024):
        for cfg in configs():
            if cfg[0] == "skinny" and (m > 64 or cfg[1] != 16 or cfg[3] < 4):
                continue
            set_config(lib, cfg)
            row = bench_shape(lib, m, 4096, 4096, iters=50, compare=False)
            row["cfg"] = list(cfg)
            RESULTS["sweep"].append(row)
            log("   " + json.dumps(row))
    lib.tuning(0)


def table():
    lines = ["", "int4mm (ours) vs torch._weight_int4pack_mm vs bf16 torch.matmul, H200, median GPU us per call",
             f"{'M':>5} {'N=K':>5} {'g':>4} {'ikt':>3} | {'ours us':>8} {'TB/s':>6} {'host us':>7} | {'torch4 us':>9} {'TB/s':>6} | {'bf16 us':>8} {'TB/s':>6} {'TFLOP/s':>7}"
             " || GPU busy time (CUPTI): ours us TB/s | torch4 us TB/s | bf16 us TB/s"]
    for r in RESULTS["bench"]:
        def f(key, scale=1e3, fmt="{:8.1f}"):
            v = r.get(key)
            return fmt.format(v * scale) if isinstance(v, (int, float)) else " " * (len(fmt.format(0.0)) - 1) + "-"
        lines.append(
            f"{r['m']:>5} {r['n']:>5} {r['group']:>4} {r['ikt']:>3} | {f('ours_ms')} {f('ours_TBps', 1, '{:6.2f}')} {f('ours_host_ms', 1e3, '{:7.1f}')} | "
            f"{f('torch_int4_ms', 1e3, '{:9.1f}')} {f('torch_int4_TBps', 1, '{:6.2f}')} | {f('bf16_ms')} {f('bf16_TBps', 1, '{:6.2f}')} {f('bf16_TFLOPs', 1, '{:7.1f}')}"
            + f" || {f('ours_dev_ms')} {f('ours_dev_TBps', 1, '{:6.2f}')} | {f('torch_int4_dev_ms')} {f('torch_int4_dev_TBps', 1, '{:6.2f}')}"
            f" | {f('bf16_dev_ms')} {f('bf16_dev_TBps', 1, '{:6.2f}')}"
            + (f"  ERROR {r['error']}" if "error" in r else "")
            + (f"  (CUPTI: {r['dev_error']})" if "dev_error" in r else ""))
    if RESULTS["sweep"]:
        best = {}
        for r in RESULTS["sweep"]:
            key = (r["m"], r["n"])
            t = r.get("ours_dev_ms", r.get("ours_ms"))
            if t is not None and (key not in best or t < best[key][0]):
                best[key] = (t, r)
        lines.append("best forced configuration per shape (GPU busy time where measured): " + "; ".join(
            f"M={m} N=K={n}: {b['cfg']} {t * 1e3:.1f}us {b['bytes'] / t / 1e9:.2f}TB/s" for (m, n), (t, b) in sorted(best.items())))
    cases = RESULTS["cases"]
    worst_ref = max((c.get("err_ref", 0) for c in cases if "err_ref" in c), default=float("nan"))
    worst_t = max((c.get("err_torch", 0) for c in cases if "err_torch" in c), default=float("nan"))
    eq = [c["equal_torch"] for c in cases if "equal_torch" in c]
    reused = [c["poison_reused"] for c in cases if "poison_reused" in c]
    lines.append(f"poisoned pool: the output reused the NaN-filled block in {sum(reused)}/{len(reused)} cases")
    lines.append(f"correctness: {sum(c['ok'] for c in cases)}/{len(cases)} cases pass; worst err vs fp32 ref {worst_ref:.2e}, "
                 f"vs torch {worst_t:.2e}; bit-equal to torch on {100 * statistics.mean(eq) if eq else 0:.1f}% of elements")
    for k, v in RESULTS["extra"].items():
        if isinstance(v, dict):
            lines.append(f"{k}: {'ok' if v.get('ok') else 'FAIL'}")
    if "ptx_load_s" in RESULTS["extra"]:
        lines.append(f"PTX path: module load + first call {RESULTS['extra']['ptx_load_s']:.1f} s")
    for name, st in RESULTS.get("phases", {}).items():
        if st["rc"] != 0:
            lines.append(f"phase {name}: rc={st['rc']} after {st['seconds']} s")
    lines.append("RESULT: " + ("PASS" if not FAILS else f"FAIL ({len(FAILS)} failures, see int4_log.txt)"))
    return "\n".join(lines)


def probe(lib):
    """The first call loads our kernel module: report the driver's error if that fails."""
    x, packed, qsz, ref, _ = make_case(1, 64, 256, 64, 8, 0)
    hx, hw, hs = lib.wrap(x), lib.wrap(packed), lib.wrap(qsz)
    rc, out = lib.call(hx, hw, 64, hs)
    if rc != 0:
        log("FIRST CALL FAILED (kernel module load or launch): " + lib.last_error())
        FAILS.append({"tag": "probe", "error": lib.last_error()})
        return False
    y = lib.as_torch(out, (1, 64)).float()
    torch.cuda.synchronize()
    lib.delete(out)
    for h in (hx, hw, hs):
        lib.delete(h)
    log(f"   first call ok (max |y - ref| / max |ref| = {rel_err(y, ref):.2e})")
    return True


def ptx_subset(lib):
    for ikt in IKTS:
        for m in (1, 9, 40, 100):
            check_case(lib, m, 72, 1280, 64, ikt, 100 + m + ikt, tag="ptx")
    for cfg in configs()[::3]:
        set_config(lib, cfg)
        m = 3 if cfg[0] == "skinny" else 33
        check_case(lib, m, 136, 2048, 128, 8, 300, tag=f"ptx cfg{cfg}")
    lib.tuning(0)
    log(f"   PTX path: {sum(c['ok'] for c in RESULTS['cases'])}/{len(RESULTS['cases'])} cases pass")


# Phases, each in its own process (a CUDA error that poisons the context, or a
# hang, stays inside one phase): name, timeout in seconds, environment extras.
PHASES = [
    ("correctness", 120, {}),
    ("configs", 90, {}),
    ("streams", 45, {}),
    ("ptx", 120, {"ET_CUDA_KERNELS_PTX": os.path.join(os.path.dirname(os.path.abspath(__file__)), "int4mm.ptx")}),
    ("bench", 200, {}),
]


def run_phase(args):
    """Child: run one phase, write its part of the results."""
    torch.backends.cuda.matmul.allow_tf32 = False
    part = os.path.join(args.out, f"int4_part_{args.phase}.json")
    try:
        lib = Lib(args.lib)
        if args.phase == "ptx":
            log("== the PTX (JIT) path: ET_CUDA_KERNELS_PTX=kernels/int4mm.ptx")
            t0 = time.perf_counter()
            ok = probe(lib)
            RESULTS["extra"]["ptx_load_s"] = time.perf_counter() - t0
            if ok:
                ptx_subset(lib)
        elif probe(lib):
            if args.phase == "correctness":
                correctness(lib, args.quick)
            elif args.phase == "configs":
                correctness_all_configs(lib)
            elif args.phase == "streams":
                side_stream(lib)
                no_host_wait(lib)
            elif args.phase == "bench":
                benchmarks(lib, sweep=not args.quick)
    except Exception:  # noqa: BLE001
        FAILS.append({"tag": args.phase, "error": traceback.format_exc()})
        log(traceback.format_exc())
    with open(part, "w") as f:
        json.dump({"results": RESULTS, "fails": FAILS, "log": LOG}, f, default=str)
    return 0 if not FAILS else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--out", default=os.environ.get("OUT", "int4_out"))
    ap.add_argument("--quick", action="store_true", help="fewer shapes, no sweep")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.phase:
        return run_phase(args)

    t_start = time.perf_counter()
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch")
        return 2
    try:
        Lib(args.lib)
    except OSError as e:
        print(f"cannot load {args.lib}: {e}")
        return 2
    log(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, library {args.lib}")
    log("streams: our shim launches on the thread's current stream for the device, the legacy "
        "default stream when nothing set one, which is the stream PyTorch uses by default")
    status = {}
    for name, timeout, extra in PHASES:
        if name == "bench" and args.no_bench:
            continue
        if name == "configs" and args.quick:
            continue
        cmd = [sys.executable, os.path.abspath(__file__), args.lib, "--phase", name, "--out", args.out]
        if args.quick:
            cmd.append("--quick")
        t0 = time.perf_counter()
        sys.stdout.flush()
        try:
            rc = subprocess.run(cmd, env=dict(os.environ, **extra), timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        dt = time.perf_counter() - t0
        part = os.path.join(args.out, f"int4_part_{name}.json")
        got = None
        if os.path.exists(part):
            with open(part) as f:
                got = json.load(f)
            os.remove(part)
        if got is None:
            FAILS.append({"tag": name, "error": f"phase ended without results (rc={rc})"})
            LOG.append(f"== phase {name}: no results (rc={rc}, {dt:.0f} s)")
        else:
            LOG.extend(got["log"])
            for key in ("cases", "bench", "sweep"):
                RESULTS[key].extend(got["results"][key])
            RESULTS["extra"].update(got["results"]["extra"])
            FAILS.extend(got["fails"])
        status[name] = {"rc": rc, "seconds": round(dt, 1), "failures": len(got["fails"]) if got else None}
        print(f"-- phase {name}: rc={rc}, {dt:.0f} s", flush=True)
    RESULTS["phases"] = status
    RESULTS["seconds"] = time.perf_counter() - t_start
    RESULTS["fails"] = FAILS
    with open(os.path.join(args.out, "int4_results.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    try:
        t = table()
    except Exception:  # noqa: BLE001 - the JSON is written already
        t = "table failed:\n" + traceback.format_exc()
    LOG.append(t)
    with open(os.path.join(args.out, "int4_log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")
    print(t)
    print(f"({RESULTS['seconds']:.0f} s; details in {args.out}/int4_results.json and int4_log.txt)")
    return 0 if not FAILS else 1


if __name__ == "__main__":
    sys.exit(main())
