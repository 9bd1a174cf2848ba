"""Issue 9's root-cause step: ExecuTorch 1.2's Triton SDPA kernel, called directly.

  python3 tests/models/sdpa_check.py [--out DIR] [--no-compiled] [--budget S]
  python3 tests/models/sdpa_check.py --self-test      # no GPU: the table/narrowing code on a planted bug

Part A calls executorch.backends.cuda.triton.kernels.sdpa.sdpa (the triton_op
`triton::sdpa` that ExecuTorch 1.2's ReplaceEdgeOpWithTritonOpPass puts in place of
aten.scaled_dot_product_attention; arguments: query, key, value [B,H,L,D] bf16,
attn_mask (bool, [B, H or 1, Lq, Lk]) or None, dropout_p 0.0, is_causal, scale
(0.0 = 1/sqrt(D)), enable_gqa False) on PyTorch CUDA tensors, against
F.scaled_dot_product_attention in float32 (math backend, TF32 off) on the same
(bf16-rounded) inputs. Shapes: Whisper's attention (B1 H4 D32: non-causal self
64x64, causal self 8x8 as is_causal and as the bool mask HF passes, cross 8x64),
then head dims and lengths around the kernel's block sizes, input layouts
(transposed views, storage offsets), mask shapes/strides, scales, dtypes.
An element passes when |out - ref| <= 2e-2 + 2e-2 |ref|.

Part B (unless --no-compiled): a Whisper-style attention block that calls
torch.ops.triton.sdpa, run eagerly, through torch.compile, and through AOTInductor
(torch._inductor.aoti_compile_and_package, with the inductor options ExecuTorch
1.2's CudaBackend uses), each against the float32 reference: separates a kernel
bug from a compilation bug.

Output: a table on stdout and in OUT/sdpa_check.md, OUT/sdpa_check.json, and,
when something fails, the property analysis and the smallest failing case as a
standalone script OUT/sdpa_repro.py.
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

ATOL = RTOL = 2e-2


# ----------------------------------------------------------------------------- cases


def case(name, B=1, H=4, Lq=64, Lk=64, D=32, dtype="bfloat16", mask="none", causal=False, scale="prescaled",
         layout="contiguous", group="whisper", sharp=1.0):
    return dict(name=name, B=B, H=H, Lq=Lq, Lk=Lk, D=D, dtype=dtype, mask=mask, causal=causal, scale=scale,
                layout=layout, group=group, sharp=sharp)


def all_cases():
    cs = [
        # Whisper's four attentions, exactly as the HF sdpa path calls them (scale=1.0, q pre-scaled)
        case("whisper enc self 64x64", Lq=64, Lk=64),
        case("whisper dec self 8x8 bool mask", Lq=8, Lk=8, mask="causal_b11"),
        case("whisper dec self 8x8 is_causal", Lq=8, Lk=8, causal=True),
        case("whisper dec cross 8x64", Lq=8, Lk=64),
    ]
    # the real whisper-tiny's shapes (1500 source positions, 6 heads of 64)
    cs.append(case("whisper-tiny enc self 1500x1500 H6 D64", H=6, Lq=1500, Lk=1500, D=64, group="whisper-tiny"))
    cs.append(case("whisper-tiny cross 4x1500 H6 D64", H=6, Lq=4, Lk=1500, D=64, group="whisper-tiny"))
    cs.append(case("whisper-tiny dec self 4x4 mask H6 D64", H=6, Lq=4, Lk=4, D=64, mask="causal_b11",
                   group="whisper-tiny"))
    for f in (4.0, 16.0):  # sharper softmax: large logits
        cs.append(case(f"sharp x{f:g} self 64x64", sharp=f, group="values"))
        cs.append(case(f"sharp x{f:g} cross 8x64", Lq=8, Lk=64, sharp=f, group="values"))
    for D in (16, 17, 32, 63, 64, 65, 128):
        cs.append(case(f"head dim {D}", D=D, group="head_dim"))
        cs.append(case(f"head dim {D} causal", D=D, causal=True, group="head_dim"))
    for L in (1, 7, 16, 17, 33, 63, 64, 65, 100, 128, 200):
        cs.append(case(f"self L={L}", Lq=L, Lk=L, group="length"))
        cs.append(case(f"cross 8x{L}", Lq=8, Lk=L, group="length"))
        cs.append(case(f"causal mask L={L}", Lq=L, Lk=L, mask="causal_b11", group="length"))
    for lay in ("transposed", "offset", "transposed_offset"):
        cs.append(case(f"layout {lay}", layout=lay, group="layout"))
        cs.append(case(f"layout {lay} cross", Lq=8, Lk=64, layout=lay, group="layout"))
        cs.append(case(f"layout {lay} D=65", D=65, layout=lay, group="layout"))
    for m in ("causal_bh", "random_b11", "random_bh", "causal_expand", "causal_noncontig"):
        cs.append(case(f"mask {m} 8x8", Lq=8, Lk=8, mask=m, group="mask"))
        cs.append(case(f"mask {m} 64x64", Lq=64, Lk=64, mask=m, group="mask"))
        cs.append(case(f"mask {m} 64x64 D=65", Lq=64, Lk=64, D=65, mask=m, group="mask"))
    for s in ("default", "explicit", "half"):
        cs.append(case(f"scale {s}", scale=s, group="scale"))
    for B, H in ((2, 4), (3, 2), (1, 1), (2, 16)):
        cs.append(case(f"B{B} H{H}", B=B, H=H, group="batch_heads"))
        cs.append(case(f"B{B} H{H} mask", B=B, H=H, Lq=8, Lk=8, mask="causal_b11", group="batch_heads"))
    for dt in ("float32", "float16"):
        cs.append(case(f"dtype {dt}", dtype=dt, group="dtype"))
    return cs


# ----------------------------------------------------------------------------- inputs


def make_inputs(c, device, seed=0):
    """q, k, v (kernel dtype, the requested layout), mask, scale, and the fp32 reference."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    dt = getattr(torch, c["dtype"])
    B, H, Lq, Lk, D = c["B"], c["H"], c["Lq"], c["Lk"], c["D"]

    def t(L):
        # activations of a Whisper-like layer: O(1) entries, [B,L,H,D] as the projections make them
        x = torch.randn(B, L, H, D, generator=g) * 1.5
        base = x if "transposed" in c["layout"] else x.transpose(1, 2).contiguous()
        base = base.to(dt).to(device)
        if "offset" in c["layout"]:  # same values at storage offset 7
            store = torch.zeros(7 + base.numel(), dtype=dt, device=device)
            view = store[7:].view(base.shape)
            view.copy_(base)
            base = view
        return base.transpose(1, 2) if "transposed" in c["layout"] else base

    q, k, v = t(Lq), t(Lk), t(Lk)
    if c.get("sharp", 1.0) != 1.0:
        q = (q.float() * c["sharp"]).to(dt)
    scale_arg = 0.0
    if c["scale"] == "prescaled":
        q = (q.float() * D ** -0.5).to(dt)
        scale_arg, ref_scale = 1.0, 1.0
    elif c["scale"] == "explicit":
        scale_arg = ref_scale = D ** -0.5
    elif c["scale"] == "half":
        scale_arg = ref_scale = 0.5
    else:
        ref_scale = None
    mask = None
    m = c["mask"]
    causal_2d = torch.arange(Lq)[:, None] >= torch.arange(Lk)[None, :]  # top-left aligned, as SDPA
    if m == "causal_b11":
        mask = causal_2d[None, None].expand(B, 1, Lq, Lk).contiguous()
    elif m == "causal_bh":
        mask = causal_2d[None, None].expand(B, H, Lq, Lk).contiguous()
    elif m == "random_b11":
        mask = torch.rand(B, 1, Lq, Lk, generator=g) > 0.3
        mask[..., 0] = True
    elif m == "random_bh":
        mask = torch.rand(B, H, Lq, Lk, generator=g) > 0.3
        mask[..., 0] = True
    elif m == "causal_expand":
        mask = causal_2d[None, None].expand(B, H, Lq, Lk)  # stride 0 on B and H
    elif m == "causal_noncontig":
        mask = causal_2d.t().contiguous().t()[None, None].expand(B, 1, Lq, Lk)
    if mask is not None:
        mask = mask.to(device)
    # reference: float32 math on the same rounded values
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=mask, is_causal=c["causal"], scale=ref_scale)
    return q, k, v, mask, scale_arg, ref


def compare(out, ref):
    o, r = out.float(), ref.float()
    d = (o - r).abs()
    bad = (d > ATOL + RTOL * r.abs()) | torch.isnan(o)
    worst = None
    if bad.any():
        idx = torch.nonzero(bad)[0].tolist()
        worst = {"index": idx, "got": float(o[tuple(idx)]), "ref": float(r[tuple(idx)])}
        # which query rows / heads are wrong: the pattern tells the cause
        rows = torch.nonzero(bad.any(dim=-1))
        worst["bad_rows"] = sorted(set(int(x) for x in rows[:, 2].tolist()))[:40]
        worst["bad_heads"] = sorted(set(int(x) for x in rows[:, 1].tolist()))
        worst["bad_batches"] = sorted(set(int(x) for x in rows[:, 0].tolist()))
        worst["bad_fraction"] = float(bad.float().mean())
    return float(torch.nan_to_num(d, nan=float("inf")).max()), not bool(bad.any()), worst


# ----------------------------------------------------------------------------- part A


def run_direct(kernel, cases, device, deadline=0.0):
    rows = []
    for c in cases:
        row = dict(c)
        if deadline and time.time() > deadline:
            row.update(err=None, status="SKIPPED", error="time budget")
            rows.append(row)
            continue
        try:
            q, k, v, mask, scale, ref = make_inputs(c, device)
            out = kernel(q, k, v, mask, 0.0, c["causal"], scale, False)
            if device == "cuda":
                torch.cuda.synchronize()
            err, ok, worst = compare(out, ref)
            row.update(err=err, status="PASS" if ok else "FAIL", worst=worst,
                       q_strides=list(q.stride()), q_offset=q.storage_offset(),
                       mask_shape=list(mask.shape) if mask is not None else None,
                       mask_strides=list(mask.stride()) if mask is not None else None)
        except Exception as e:
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            refused = any(w in msg for w in ("Expected", "must", "requires", "mismatch"))
            row.update(err=None, status="REJECTED" if refused else "ERROR", error=msg)
        rows.append(row)
    return rows


def narrow(rows):
    """Which properties separate the failing cases from the passing ones."""
    fails = [r for r in rows if r["status"] == "FAIL"]
    if not fails:
        return []
    lines = []
    keys = ["D", "Lq", "Lk", "mask", "causal", "scale", "layout", "B", "H", "dtype", "sharp"]
    for kk in keys:
        vals = sorted(set(str(r[kk]) for r in rows if r["status"] in ("PASS", "FAIL")))
        stat = []
        for val in vals:
            sel = [r for r in rows if str(r[kk]) == val and r["status"] in ("PASS", "FAIL")]
            nf = sum(r["status"] == "FAIL" for r in sel)
            stat.append(f"{val}: {nf}/{len(sel)} fail")
        lines.append(f"- {kk}: " + ", ".join(stat))
    pow2 = [r for r in fails if r["D"] & (r["D"] - 1) == 0]
    lines.append(f"- power-of-2 head dim path: {len(pow2)}/{len(fails)} failures; "
                 f"non-power-of-2 path: {len(fails) - len(pow2)}")
    return lines


def repro_script(r):
    c = {k: r[k] for k in ("B", "H", "Lq", "Lk", "D", "dtype", "mask", "causal", "scale", "layout", "sharp")}
    return f'''"""Smallest failing case of tests/models/sdpa_check.py (ExecuTorch 1.2 Triton SDPA).
Case: {r["name"]}: {json.dumps(c)}
Observed: max abs err {r["err"]:.4g} vs F.scaled_dot_product_attention (fp32 math); {json.dumps(r.get("worst"))}"""
import torch, torch.nn.functional as F
from executorch.backends.cuda.triton.kernels.sdpa import sdpa

torch.manual_seed(0)
B, H, Lq, Lk, D = {c["B"]}, {c["H"]}, {c["Lq"]}, {c["Lk"]}, {c["D"]}
dt = torch.{c["dtype"]}
def t(L):
    x = torch.randn(B, L, H, D) * 1.5
    x = x.to(dt).cuda()
    return {"x.transpose(1, 2)" if "transposed" in c["layout"] else "x.transpose(1, 2).contiguous()"}
q, k, v = t(Lq), t(Lk), t(Lk)
q = (q.float() * {c["sharp"]}).to(dt)
{"q = (q.float() * D ** -0.5).to(dt); scale = 1.0; ref_scale = 1.0" if c["scale"] == "prescaled" else
 "scale = D ** -0.5; ref_scale = scale" if c["scale"] == "explicit" else
 "scale = 0.5; ref_scale = 0.5" if c["scale"] == "half" else "scale = 0.0; ref_scale = None"}
mask = {"None" if c["mask"] == "none" else
        "(torch.arange(Lq)[:, None] >= torch.arange(Lk)[None, :])[None, None].expand(B, " +
        ("H" if c["mask"] in ("causal_bh", "causal_expand") else "1") + ", Lq, Lk)" +
        ("" if c["mask"] == "causal_expand" else ".contiguous()") + ".cuda()"
        if c["mask"].startswith("causal") else
        "(torch.rand(B, " + ("H" if c["mask"] == "random_bh" else "1") + ", Lq, Lk) > 0.3).cuda(); mask[..., 0] = True"}
out = sdpa(q, k, v, mask, 0.0, {c["causal"]}, scale, False)
with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, is_causal={c["causal"]}, scale=ref_scale)
d = (out.float() - ref).abs()
print("max abs err", d.max().item(), "bad", (d > 2e-2 + 2e-2 * ref.abs()).sum().item(), "of", d.numel())
'''


# ----------------------------------------------------------------------------- part B


class WhisperAttn(torch.nn.Module):
    """Whisper's attention around torch.ops.triton.sdpa (what the ExecuTorch pass makes of it)."""

    def __init__(self, kind, d=128, h=4, use_triton=True):
        super().__init__()
        self.kind, self.h, self.hd, self.use_triton = kind, h, d // h, use_triton
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        for lin in (self.q, self.k, self.v, self.o):
            torch.nn.init.normal_(lin.weight, std=0.1)

    def forward(self, x, kv):
        B, L, D = x.shape
        src = kv if self.kind == "cross" else x
        q = (self.q(x) * self.hd ** -0.5).view(B, L, self.h, self.hd).transpose(1, 2).contiguous()
        k = self.k(src).view(B, -1, self.h, self.hd).transpose(1, 2).contiguous()
        v = self.v(src).view(B, -1, self.h, self.hd).transpose(1, 2).contiguous()
        mask = None
        if self.kind == "causal_mask":
            p = torch.arange(L, device=x.device)
            mask = (p[:, None] >= p[None, :])[None, None].expand(B, 1, L, L)
        if self.use_triton:
            y = torch.ops.triton.sdpa(q, k, v, mask, 0.0, False, 1.0, False)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
        return self.o(y.transpose(1, 2).reshape(B, L, D))


ET12_INDUCTOR_OPTIONS = {  # the numeric-relevant part of ExecuTorch 1.2's CudaBackend.get_aoti_compile_options
    "loop_ordering_after_fusion": False,
    "emulate_precision_casts": True,
    "max_autotune": True,
    "max_autotune_gemm_backends": "TRITON",
    "max_autotune_conv_backends": "TRITON",
}


def run_compiled(deadline, tmpdir):
    rows = []
    kinds = {"self64": ("self", 64, 64), "causal8_mask": ("causal_mask", 8, 8), "cross8x64": ("cross", 8, 64)}
    for name, (kind, lq, lk) in kinds.items():
        torch.manual_seed(0)
        m = WhisperAttn(kind).to(torch.bfloat16).cuda().eval()
        x = torch.randn(1, lq, 128, device="cuda").to(torch.bfloat16)
        kv = torch.randn(1, lk, 128, device="cuda").to(torch.bfloat16)
        ref_m = WhisperAttn(kind, use_triton=False).cuda().eval()
        ref_m.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
        with torch.no_grad(), torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
            ref = ref_m(x.float(), kv.float())
        for how in ("eager", "torch.compile", "aoti(et1.2 options)", "aoti(default options)"):
            row = {"block": name, "how": how}
            if time.time() > deadline:
                row.update(status="SKIPPED (time)")
                rows.append(row)
                continue
            t0 = time.time()
            try:
                with torch.no_grad():
                    if how == "eager":
                        out = m(x, kv)
                    elif how == "torch.compile":
                        torch._dynamo.reset()
                        out = torch.compile(m)(x, kv)
                    else:
                        opts = dict(ET12_INDUCTOR_OPTIONS) if "et1.2" in how else {}
                        ep = torch.export.export(m, (x, kv), strict=True)
                        pkg = torch._inductor.aoti_compile_and_package(
                            ep, package_path=os.path.join(tmpdir, f"{name}_{len(opts)}.pt2"), inductor_configs=opts)
                        out = torch._inductor.aoti_load_package(pkg)(x, kv)
                torch.cuda.synchronize()
                if isinstance(out, (list, tuple)):
                    out = out[0]
                err, ok, worst = compare(out, ref)
                row.update(err=err, status="PASS" if ok else "FAIL", worst=worst)
            except Exception as e:
                row.update(status="ERROR", error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            row["seconds"] = round(time.time() - t0, 1)
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- report


def table(rows):
    out = ["| case | shape B,H,Lq,Lk,D | mask | causal | scale | layout | dtype | max abs err | result |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        err = "-" if r.get("err") is None else f"{r['err']:.3g}"
        res = r["status"] + (f" ({r['error']})" if r.get("error") else "")
        out.append(f"| {r['name']} | {r['B']},{r['H']},{r['Lq']},{r['Lk']},{r['D']} | {r['mask']} | {r['causal']} | "
                   f"{r['scale']} | {r['layout']} | {r['dtype']} | {err} | {res} |")
    return out


def report(rows, comp, out_dir, header):
    lines = [f"# sdpa_check: {header}", "", f"Element passes when |out - ref| <= {ATOL} + {RTOL}|ref|; "
             "reference: F.scaled_dot_product_attention, float32, math backend.", "", "## Part A: the kernel, called directly", ""]
    lines += table(rows)
    n = {s: sum(r["status"] == s for r in rows) for s in ("PASS", "FAIL", "REJECTED", "ERROR", "SKIPPED")}
    lines += ["", f"Part A: {n['PASS']} PASS, {n['FAIL']} FAIL, {n['REJECTED']} REJECTED (input the kernel refuses), "
              f"{n['ERROR']} ERROR, {n['SKIPPED']} SKIPPED (time)", ""]
    fails = [r for r in rows if r["status"] == "FAIL"]
    if fails:
        lines += ["### Failing cases: where the wrong elements are", ""]
        for r in fails:
            lines.append(f"- {r['name']}: err {r['err']:.3g}; {json.dumps(r.get('worst'))}")
        lines += ["", "### Which input properties go with the failures", ""] + narrow(rows)
        small = min(fails, key=lambda r: r["B"] * r["H"] * (r["Lq"] + r["Lk"]) * r["D"])
        with open(os.path.join(out_dir, "sdpa_repro.py"), "w") as f:
            f.write(repro_script(small))
        lines += ["", f"Smallest failing case: {small['name']} -> sdpa_repro.py:", "", "```python",
                  repro_script(small).rstrip(), "```"]
    if comp is not None:
        lines += ["", "## Part B: a Whisper attention block calling torch.ops.triton.sdpa", "",
                  "| block | how | max abs err | result | s |", "| --- | --- | --- | --- | --- |"]
        for r in comp:
            err = "-" if r.get("err") is None else f"{r['err']:.3g}"
            lines.append(f"| {r['block']} | {r['how']} | {err} | {r['status']}"
                         f"{' (' + r['error'] + ')' if r.get('error') else ''}"
                         f"{' ' + json.dumps(r['worst']) if r.get('worst') else ''} | {r.get('seconds', '-')} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "sdpa_check.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "sdpa_check.json"), "w") as f:
        json.dump({"direct": rows, "compiled": comp}, f, indent=1, default=str)
    return text, n


def planted_bug_kernel(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa):
    """--self-test: a reference implementation with a planted bug (keys past 64 are
    ignored), to check that the table, the narrowing and the repro work."""
    if q.dtype != torch.bfloat16:
        raise RuntimeError("Expected bfloat16 inputs")
    s = None if scale == 0.0 else scale
    k2, v2, m2 = k, v, mask
    if k.shape[2] > 64:
        k2, v2 = k[:, :, :64], v[:, :, :64]
        m2 = mask[..., :64] if mask is not None else None
    if is_causal and k2.shape[2] != q.shape[2]:
        raise RuntimeError("Causal masking requires L_q == L_kv")
    return F.scaled_dot_product_attention(q.float(), k2.float(), v2.float(), attn_mask=m2, is_causal=is_causal,
                                          scale=s).to(q.dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-compiled", action="store_true")
    ap.add_argument("--budget-a", type=float, default=180, help="seconds for part A (cases after it are skipped)")
    ap.add_argument("--budget", type=float, default=120, help="seconds for part B")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cases = all_cases()
    if a.self_test:
        rows = run_direct(planted_bug_kernel, cases, "cpu")
        text, n = report(rows, None, a.out, "SELF-TEST with a planted bug (keys past 64 dropped), CPU")
        print(text)
        ok = n["FAIL"] > 0 and all(r["status"] == "FAIL" for r in rows if r["Lk"] > 64 and r["status"] != "REJECTED")
        ok = ok and all(r["status"] == "PASS" for r in rows if r["Lk"] <= 64 and r["dtype"] == "bfloat16")
        print("self-test:", "OK" if ok else "BROKEN")
        return 0 if ok else 1
    if not torch.cuda.is_available():
        print("sdpa_check: no CUDA device (use --self-test on a machine without one)")
        return 2
    from executorch.backends.cuda.triton.kernels.sdpa import sdpa as et_sdpa

    import importlib.metadata as md

    header = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, executorch {md.version('executorch')}, "
              f"triton {md.version('triton')}")
    t0 = time.time()
    rows = run_direct(et_sdpa, cases, "cuda", time.time() + a.budget_a)
    report(rows, None, a.out, header + " (part A only: written before part B)")
    comp = None
    if not a.no_compiled:
        import tempfile

        try:
            comp = run_compiled(time.time() + a.budget, tempfile.mkdtemp(prefix="sdpa_check_"))
        except Exception:
            comp = [{"block": "-", "how": "-", "status": "ERROR", "error": traceback.format_exc()[-300:]}]
    text, n = report(rows, comp, a.out, header + f", {time.time() - t0:.0f}s")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
