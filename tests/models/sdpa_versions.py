"""Does the Triton SDPA kernel of the ExecuTorch on PYTHONPATH have the two bugs sdpa_check.py
found in ExecuTorch 1.2's (unmasked key columns past Lk without mask and without causal; the
mask's head stride ignored)? A few direct kernel calls against PyTorch's math SDPA in fp32.

  PYTHONPATH=<site> python3 tests/models/sdpa_versions.py        (on a CUDA machine)

Prints one line per case and a last line "sdpa_versions <executorch version>: N PASS, M FAIL".
Exit 0 when it ran (whatever the verdicts), 77 without CUDA, 1 when the kernel cannot be imported.
"""
import importlib.metadata as md
import sys

import torch
import torch.nn.functional as F


def main():
    if not torch.cuda.is_available():
        print("sdpa_versions: no CUDA device")
        return 77
    try:
        from executorch.backends.cuda.triton.kernels.sdpa import sdpa
    except Exception as e:  # noqa: BLE001 - report whatever the import raised
        print(f"sdpa_versions: cannot import the kernel: {e}")
        return 1
    version = md.version("executorch")
    torch.manual_seed(0)
    B, H, D = 1, 4, 32
    dt = torch.bfloat16
    cases = []
    for lq, lk in [(1, 1), (8, 7), (17, 17), (8, 65), (100, 100), (64, 128)]:
        cases.append((f"no mask Lq={lq} Lk={lk}", lq, lk, "none"))
    for lq, lk in [(8, 8), (16, 33)]:
        cases.append((f"mask per batch (broadcast heads) Lq={lq} Lk={lk}", lq, lk, "b1"))
        cases.append((f"mask per head Lq={lq} Lk={lk}", lq, lk, "bh"))
    npass = nfail = 0
    for name, lq, lk, mask_kind in cases:
        q = torch.randn(B, H, lq, D, device="cuda").to(dt)
        k = torch.randn(B, H, lk, D, device="cuda").to(dt)
        v = torch.randn(B, H, lk, D, device="cuda").to(dt)
        mask = None
        if mask_kind != "none":
            heads = 1 if mask_kind == "b1" else H
            mask = torch.rand(B, heads, lq, lk, device="cuda") > 0.3
            mask[..., 0] = True  # no fully masked row
        scale = D ** -0.5
        try:
            out = sdpa(q, k, v, mask, 0.0, False, scale, False)
        except Exception as e:  # noqa: BLE001 - a refusal is a result too
            print(f"{name}: REJECTED ({str(e).splitlines()[0][:120]})")
            continue
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
            ref = F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(),
                attn_mask=None if mask is None else mask.expand(B, H, lq, lk),
                is_causal=False, scale=scale)
        err = (out.float() - ref).abs()
        ok = bool((err <= 2e-2 + 2e-2 * ref.abs()).all())
        npass += ok
        nfail += not ok
        print(f"{name}: {'PASS' if ok else 'FAIL'} max abs err {err.max().item():.4g}")
    print(f"sdpa_versions executorch {version}: {npass} PASS, {nfail} FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
