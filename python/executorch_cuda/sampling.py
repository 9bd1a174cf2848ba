"""Choosing the next token from a logits row, as ``et_cuda_run`` does
(runner/sampling.cpp, runner/README.md "Text generation"): greedy is the first
maximum with NaN as the largest (``torch.argmax``); with a temperature, f32
weights ``exp((x - max) / T)`` as 2^40 fixed-point integers, the smallest top-p
set of most likely tokens (ties by lower id, the threshold found by the radix
search the device kernel uses), one counter-based draw per sampled token
(splitmix64 of the seed and the token's index).

On the device (``et_cuda_sample``, one id read back) when the logits are a CUDA
tensor; on the host (numpy) otherwise, with the same draws. The host's
``exp`` may differ from the device's by an ulp right at a boundary, as the
runner's host sampler may.
"""

import ctypes

import numpy as np

from . import native

_MASK = (1 << 64) - 1
_SCALE = np.float32(1099511627776.0)  # 2^40
_CODES = {"float32": 6, "bfloat16": 15, "float16": 5}


def draw(seed, step):
    """The uniform number in [0, 1) of ``step`` in the sequence seeded by ``seed``."""
    z = (seed ^ ((step * 0xD1B54A32D192ED03) & _MASK)) & _MASK
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return (z >> 11) * 2.0**-53


def argmax(row):
    """torch.argmax's rule: the first maximum, the first NaN as the largest."""
    row = np.asarray(row)
    nan = np.flatnonzero(np.isnan(row))
    return int(nan[0]) if nan.size else int(np.argmax(row))


def _threshold(p, w, target):
    """(bits, ties): the top-p threshold as the device finds it (radix search over
    the weights' float bits 29..0, 10 bits a level, from the largest bucket down)."""
    bits = p.view(np.uint32)
    live = w != 0
    prefix, above, k = 0, 0, 0
    counts = None
    for level in range(3):
        shift = 20 - 10 * level
        sel = live if level == 0 else live & ((bits >> np.uint32(shift + 10)) == prefix)
        b = ((bits[sel] >> np.uint32(shift)) & np.uint32(1023)).astype(np.int64)
        counts = np.bincount(b, minlength=1024)
        # Exact integer sums per bucket: each weight < 2^41 split in 2^21 halves, whose
        # float64 sums stay below 2^53 for any vocabulary up to 2^31 ids.
        ws = w[sel]
        lo = np.bincount(b, weights=(ws & np.uint64(0x1FFFFF)).astype(np.float64), minlength=1024)
        hi = np.bincount(b, weights=(ws >> np.uint64(21)).astype(np.float64), minlength=1024)
        sums = [int(h) * (1 << 21) + int(lo_) for h, lo_ in zip(hi, lo)]
        k = 1023
        while k > 0 and above + sums[k] < target:
            above += sums[k]
            k -= 1
        prefix = (prefix << 10) | k
    tie = int(np.float32(np.array([prefix], np.uint32).view(np.float32)[0]) * _SCALE)
    need = (target - above + tie - 1) // tie if (above < target and tie > 0) else 1
    return prefix, min(max(need, 1), int(counts[k]))


class Sampler:
    """Greedy (temperature 0) or sampled; ``pick(logits)`` for a torch tensor or
    numpy row (the last row of [.., T, V] logits is used)."""

    def __init__(self, temperature=0.0, top_p=1.0, seed=0):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature, self.top_p, self.seed = float(temperature), float(top_p), int(seed)
        self.step = 0
        self.on_device = False  # where the last token was chosen

    @property
    def greedy(self):
        return self.temperature == 0

    def pick(self, logits):
        row = logits.reshape(-1, logits.shape[-1])[-1] if hasattr(logits, "reshape") else logits
        if type(row).__module__.startswith("torch") and row.device.type == "cuda":
            return self._on_device(row)
        self.on_device = False
        if type(row).__module__.startswith("torch"):
            row = row.float().numpy()
        return self.pick_host(np.asarray(row, dtype=np.float32))

    def _on_device(self, row):
        dtype = str(row.dtype).replace("torch.", "")
        if dtype not in _CODES:
            self.on_device = False
            return self.pick_host(row.float().cpu().numpy())
        row = row.contiguous()
        lib = native.library()
        lib.et_cuda_sample.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int32,
                                       ctypes.c_double, ctypes.c_double, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.c_int64)]
        lib.et_cuda_sample.restype = ctypes.c_int32
        step = 0 if self.greedy else self._take_step()
        out = ctypes.c_int64(-1)
        status = lib.et_cuda_sample(row.data_ptr(), _CODES[dtype], row.numel(), row.device.index or 0,
                                    self.temperature, self.top_p, self.seed, step, ctypes.byref(out))
        if status != 0:
            raise RuntimeError("executorch_cuda: et_cuda_sample: " + lib.et_cuda_last_error().decode("utf-8", "replace"))
        self.on_device = True
        return out.value

    def _take_step(self):
        s = self.step
        self.step += 1
        return s

    def pick_host(self, row):
        """The token for a float32 numpy row; -1 when nothing can be drawn."""
        if self.greedy:
            return argmax(row)
        u = draw(self.seed, self._take_step())
        ok = ~np.isnan(row)
        if not ok.any() or np.max(row[ok]) == -np.inf:
            return -1
        top = np.float32(np.max(row[ok]))
        inv = np.float32(1.0 / self.temperature)
        live = ok & (row != -np.inf)
        p = np.zeros(row.shape, np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            if top == np.inf:
                p[live] = np.where(row[live] == np.inf, np.float32(1), np.float32(0))
            else:
                p[live] = np.exp((row[live] - top) * inv, dtype=np.float32)
        w = (p * _SCALE).astype(np.uint64)
        total = int(w.sum(dtype=np.uint64))
        bits = p.view(np.uint32)
        kept = w.copy()
        if self.top_p < 1:
            import math

            target = max(1, int(math.ceil(self.top_p * float(total))))
            t_bits, ties = _threshold(p, w, target)
            tie_ids = np.flatnonzero((bits == t_bits) & (w > 0))
            kept[bits < t_bits] = 0
            kept[tie_ids[ties:]] = 0
        total_kept = int(kept.sum(dtype=np.uint64))
        if total_kept == 0:
            return argmax(row)
        target = min(int(u * float(total_kept)), total_kept - 1)
        acc = np.cumsum(kept, dtype=np.uint64)
        return int(np.searchsorted(acc, np.uint64(target), side="right"))
