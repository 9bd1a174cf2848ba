"""Shared machinery of export_suite.py (ExecuTorch 1.2) and export_et15.py
(ExecuTorch 1.5.1): program specs, eager references and tolerances, lowering,
the manifest (the format of tests/fixtures' manifests, runner/README.md, plus the
extensions tests/models/README.md lists), the delegate blobs' imported
symbols (the lowering and the files in suite_lowering.py; the parallel driver, one subprocess
per program, in suite_driver.py).
"""
import copy
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# The IO files, the ELF symbols and the lowering (suite_lowering.py), here under suite_lib.* as before.
from suite_lowering import (  # noqa: F401
    DTYPE_NAMES, check_expected_imports, elf_dynamic_symbols, inputs_planned, json_safe, lower, lowering_patches,
    plan_info, tensor_entry, write_imports, write_raw)
# (atol, rtol) floors per output dtype; the runner's defaults are 1e-4 (f32) and 2e-2 (16-bit).
FLOORS = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}
SPREAD_FACTOR = 3.0


def has_cuda():
    return torch.cuda.is_available()


# ----------------------------------------------------------------------------- program spec


@dataclass
class Program:
    """One exported program. factory(): a fresh float32 CPU module with the
    program's weights and initial state (called once per use: export, CPU
    reference, GPU reference). example/cases hold float32 inputs; they are cast
    to the program dtype (integers stay)."""

    name: str
    dtype: torch.dtype
    factories: Dict[str, Callable[[], torch.nn.Module]]
    example: Dict[str, tuple]
    cases: Dict[str, List[tuple]]
    dynamic: Dict[str, Any] = field(default_factory=dict)
    compile_specs: Dict[str, str] = field(default_factory=dict)  # extra CompileSpecs (key -> value), every method
    quantize: Optional[Callable[[torch.nn.Module], torch.nn.Module]] = None  # in place, on the module's device
    quant_needs_cuda: bool = False
    stateful: bool = False
    shared_module: bool = False  # all methods exported from ONE module instance (same FQNs)
    generate: Optional[Dict[str, Any]] = None  # filled by the builder (see decoder_program)
    known_failure: Optional[str] = None
    triton_retry_off: bool = False  # if the default (Triton SDPA) export fails for the dtype, retry with it OFF
    notes: Dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    et_config: Dict[str, Any] = field(default_factory=dict)  # ET 1.5.1: propagate-device / planning options
    inductor_config: Dict[str, Any] = field(default_factory=dict)  # torch._inductor.config.patch(...) while lowering
    extra_fallback_kernels: List[str] = field(default_factory=list)  # added to CudaBackend's supported list
    expect_imports: List[str] = field(default_factory=list)  # symbols some .so must import (else the export fails)


def cast_args(args, dtype, device="cpu"):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            a = a.to(dtype) if a.is_floating_point() else a
            a = a.to(device)
        out.append(a)
    return tuple(out)


def as_tuple(o):
    if isinstance(o, torch.Tensor):
        return (o,)
    return tuple(o)


def run_cases(module, cases, dtype, device, round_to=None):
    """Runs the cases in order on one module (state carries); outputs on the CPU. round_to:
    float inputs are first rounded to that dtype (the program's), then cast to dtype."""
    outs = []
    with torch.no_grad():
        for a in cases:
            if round_to is not None:
                a = cast_args(a, round_to)
            o = as_tuple(module(*cast_args(a, dtype, device)))
            outs.append(tuple(t.detach().cpu() for t in o))
    if device == "cuda":
        torch.cuda.synchronize()
    return outs


def dequantized_twin(qmod, make, dtype):
    """A float32 CPU copy of a weight-only-quantized module whose Linear weights are the
    quantized weights as the quantized kernel sees them: W^T = linear(I, W_q) computed by
    the quantized module itself (one product per element: exact), so that eager float32
    on the CPU is a reference for the quantized program like for the others. Every other
    parameter is the dtype-rounded original. The quantized Linears must have no bias."""
    twin = make().to(dtype).float().eval()
    tmods = dict(twin.named_modules())
    with torch.no_grad():
        for name, mod in qmod.named_modules():
            if not isinstance(mod, torch.nn.Linear) or type(mod.weight) in (torch.Tensor, torch.nn.Parameter):
                continue
            if mod.bias is not None:
                raise RuntimeError(f"{name}: quantized Linear with a bias")
            n_out, k = mod.weight.shape
            dev = mod.weight.device
            eye = torch.eye(k, dtype=dtype, device=dev)
            wt = torch.nn.functional.linear(eye, mod.weight)  # [k, n_out] = W^T
            tmods[name].weight.copy_(wt.t().float().cpu())
    return twin


def needed_atol(got, ref, rtol):
    """Smallest atol with which `got` passes against `ref` at rtol (|g-r| <= atol + rtol|r|)."""
    g, r = got.double(), ref.double()
    if g.numel() == 0:
        return 0.0
    d = (g - r).abs() - rtol * r.abs()
    if torch.isnan(d).any():
        return float("inf")
    return max(0.0, float(d.max()))


# ----------------------------------------------------------------------------- one program


def versions():
    import importlib.metadata as md

    v = {}
    for p in ("torch", "executorch", "torchao", "transformers", "torchvision", "triton"):
        try:
            v[p] = md.version(p)
        except Exception:
            v[p] = None
    return v


def export_program(p: Program, outdir, backend_config_fn, dry_run=False, exporter="executorch"):
    """Exports one program into outdir/<name>/ (written as .<name>.tmp, renamed when complete)."""
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    gpu = has_cuda()
    final = os.path.join(outdir, p.name)
    tmp = os.path.join(outdir, f".{p.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    notes = dict(p.notes)

    # ---- references (before export: nothing mutates these fresh modules' state)
    quant = p.quantize is not None
    expected, reference, spread, tol, need = eager_references(p, gpu, notes)

    # ---- export
    dev = "cuda" if (quant and (p.quant_needs_cuda or gpu)) else "cpu"
    eps = export_methods(p, dev)

    t_lower = time.time()
    et, delegates, specs = lower_methods(p, eps, dev, backend_config_fn, dry_run, notes)
    t_lower = time.time() - t_lower

    # ---- files
    planned = write_program_files(et, tmp, notes)
    n_so = write_imports(delegates, tmp)
    man = manifest_of(p, tmp, expected, (tol, reference, spread), (exporter, specs, planned, delegates, n_so),
                      notes, dry_run)
    write_cases(p, expected, tmp, man)
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(json_safe(man), f, indent=1, allow_nan=False, default=str)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final))
    return (f"ok {time.time() - t0:.1f}s (lowering {t_lower:.1f}s, {size / 2**20:.2f} MiB, "
            f"tolerance atol={tol['atol']:.3g} rtol={tol['rtol']:.3g}, spread {need:.3g})")


def eager_references(p, gpu, notes):
    """The eager references of every case: CPU fp32 (the expected outputs; for a quantized program,
    on the dequantized weights), GPU eager in the program's dtype where there is a GPU, and the
    tolerance from their spread. Returns (expected, reference, spread, tolerance, needed atol)."""
    dt = p.dtype
    quant = p.quantize is not None
    ref_cpu, ref_gpu, spread = {}, {}, {}
    if quant:
        qdev = "cuda" if (p.quant_needs_cuda or gpu) else "cpu"
        if qdev == "cuda" and not gpu:
            raise RuntimeError("quantization needs a CUDA device")
        spread["quant_vs_unquantized_max_abs"] = 0.0
        for m in p.factories:
            qmod = p.quantize(p.factories[m]().to(dt).to(qdev).eval())
            twin = dequantized_twin(qmod, p.factories[m], dt)
            ref_cpu[m] = run_cases(twin, p.cases[m], torch.float32, "cpu", round_to=dt)
            ref_gpu[m] = run_cases(qmod, p.cases[m], dt, qdev)
            base = run_cases(p.factories[m]().to(dt).to(qdev).eval(), p.cases[m], dt, qdev)
            for a, b in zip(ref_gpu[m], base):
                for x, y in zip(a, b):
                    spread["quant_vs_unquantized_max_abs"] = max(
                        spread["quant_vs_unquantized_max_abs"], float((x.double() - y.double()).abs().max()))
        reference = "eager-cpu-fp32 on the dequantized int4 weights"
        gpu_ref_on = gpu and qdev == "cuda"
    else:
        for m in p.factories:
            ref_cpu[m] = run_cases(p.factories[m]().to(dt).float().eval(), p.cases[m], torch.float32, "cpu",
                                   round_to=dt)
            if gpu:
                ref_gpu[m] = run_cases(p.factories[m]().to(dt).cuda().eval(), p.cases[m], dt, "cuda")
        reference = "eager-cpu-fp32"
        gpu_ref_on = gpu
    atol_floor, rtol = FLOORS[dt]
    need = 0.0
    per_case = {}
    if gpu_ref_on:
        for m in p.factories:
            per_case[m] = []
            for ci, (co, go) in enumerate(zip(ref_cpu[m], ref_gpu[m])):
                e_abs = max(float((g.double() - c.to(g.dtype).double()).abs().max()) for c, g in zip(co, go))
                e_need = max(needed_atol(g, c.to(g.dtype), rtol) for c, g in zip(co, go))
                per_case[m].append({"case": ci, "gpu_vs_cpu_max_abs": e_abs, "needed_atol": e_need})
                need = max(need, e_need)
        spread["gpu_eager_" + DTYPE_NAMES[dt] + "_vs_cpu_fp32"] = per_case
    spread["max_needed_atol"] = need
    tol = {"atol": max(atol_floor, SPREAD_FACTOR * need), "rtol": rtol}
    if need == float("inf"):
        tol = {"atol": atol_floor, "rtol": rtol}
        notes["tolerance_warning"] = "GPU eager produced NaN where the CPU did not"
    return ref_cpu, reference, spread, tol, need


def export_methods(p, dev):
    """torch.export of every method (one module shared by all when p.shared_module)."""
    dt = p.dtype
    quant = p.quantize is not None
    eps = {}
    shared = None
    for m in p.factories:
        if p.shared_module:
            if shared is None:
                shared = p.factories[m]().to(dt).to(dev).eval()
                if quant:
                    shared = p.quantize(shared)
            mod = shared
        else:
            mod = p.factories[m]().to(dt).to(dev).eval()
            if quant:
                mod = p.quantize(mod)
        eps[m] = torch.export.export(mod, cast_args(p.example[m], dt, dev), dynamic_shapes=p.dynamic.get(m), strict=True)
    if shared is not None:  # export must not have touched the real state
        for n, b in shared.named_buffers():
            if "cache" in n and b.is_floating_point() and float(b.abs().max()) != 0.0:
                raise RuntimeError(f"torch.export mutated buffer {n}")
    return eps


def lower_methods(p, eps, dev, backend_config_fn, dry_run, notes):
    """The lowering (none for a dry run), once more with triton_kernel_mode=OFF where the program
    allows it; returns (the ExecuTorch program or None, the delegates, the compile specs)."""
    dt = p.dtype
    specs = dict(p.compile_specs)
    delegates = []
    if dry_run:
        et = None
    else:
        try:
            with lowering_patches(p):
                _, et, delegates = lower(eps, specs, backend_config_fn(p))
        except Exception as e:
            if not (p.triton_retry_off and "bfloat16" in str(e)):
                raise
            notes["triton_retry"] = f"default export failed ({type(e).__name__}: {str(e)[:300]}); exported with triton_kernel_mode=OFF"
            specs["triton_kernel_mode"] = "OFF"
            eps2 = {}
            for m in p.factories:
                mod = p.factories[m]().to(dt).to(dev).eval()
                eps2[m] = torch.export.export(mod, cast_args(p.example[m], dt, dev), dynamic_shapes=p.dynamic.get(m), strict=True)
            _, et, delegates = lower(eps2, specs, backend_config_fn(p))
        notes["expected_imports"] = check_expected_imports(p, delegates)
        if p.inductor_config:
            notes["inductor_config"] = dict(p.inductor_config)
    return et, delegates, specs


def write_program_files(et, tmp, notes):
    """model.pte and the .ptd files into tmp; returns which inputs are memory-planned."""
    planned = {}
    if et is not None:
        with open(os.path.join(tmp, "model.pte"), "wb") as f:
            f.write(et.buffer)
        et.write_tensor_data_to_file(tmp)
        try:
            planned = inputs_planned(et.executorch_program)
        except Exception as e:
            notes["inputs_planned_error"] = repr(e)
        try:
            notes["plans"] = plan_info(et.executorch_program)
        except Exception as e:
            notes["plan_info_error"] = repr(e)
    return planned


def manifest_of(p, tmp, expected, checks, lowered, notes, dry_run):
    """The manifest without its cases: checks = (tolerance, reference, spread); lowered = (exporter,
    compile specs, planned inputs, delegates, number of .so blobs)."""
    dt = p.dtype
    tol, reference, spread = checks
    exporter, specs, planned, delegates, n_so = lowered
    man = {
        "model": "model.pte",
        "data": sorted(f for f in os.listdir(tmp) if f.endswith(".ptd")),
        "methods": {},
        "tolerance": tol,
        "reference": reference,
        "spread": spread,
        "output_abs_max": {m: [max(float(t.float().abs().max()) for t in c) for c in expected[m]] for m in expected},
        "seed": p.seed,
        "dtype": DTYPE_NAMES[dt],
        "builder": f"tests/models ({p.name})",
        "exporter": exporter,
        "versions": versions(),
        "compile_specs": specs,
        "stateful": p.stateful,
        "dynamic": {m: str(p.dynamic.get(m)) for m in p.dynamic},
        "inputs_planned": planned,
        # as bench/export.py: false = graph inputs left out of memory planning (device pointers may be passed)
        "alloc_graph_input": any(any(v) for v in planned.values()) if planned else None,
        "delegates": [{k: v for k, v in d.items() if k != "_so"} for d in delegates],
        "so_blobs": n_so,
        "notes": notes,
        "dry_run": dry_run,
    }
    if p.known_failure:
        man["known_failure"] = p.known_failure
    if p.generate:
        man["generate"] = {k: v for k, v in p.generate.items() if not k.startswith("_")}
        if p.generate["prefill_method"] != p.generate["decode_method"]:
            man["generate_needs_shared_state"] = True
        for k in ("min_greedy_margin", "greedy_tokens_cpu_fp32", "greedy_tokens_agree", "greedy_device",
                  "seed_search_min_margin", "min_greedy_margin_cpu_fp32"):
            if k in p.generate.get("_info", {}):
                man[k] = p.generate["_info"][k]
    return man


def write_cases(p, expected, tmp, man):
    """Each case's inputs and expected outputs as raw files in tmp, listed in the manifest."""
    dt = p.dtype
    for m in p.factories:
        man["methods"][m] = []
        for ci, args in enumerate(p.cases[m]):
            ins = []
            for i, t in enumerate(cast_args(args, dt)):
                f = f"{m}.case{ci}.in{i}.bin"
                write_raw(t, os.path.join(tmp, f))
                ins.append(tensor_entry(t, f))
            outs = []
            for i, t in enumerate(expected[m][ci]):
                t = t.to(dt) if t.is_floating_point() else t
                f = f"{m}.case{ci}.out{i}.bin"
                write_raw(t, os.path.join(tmp, f))
                outs.append(tensor_entry(t, f))
            man["methods"][m].append({"inputs": ins, "outputs": outs})


# ----------------------------------------------------------------------------- decoders: seeds, greedy tokens, cases


def greedy(module, prompt, n, dtype, device, tops=None):
    """Eager greedy decoding with the module's own cache: (tokens, margins); each step's top
    logit is appended to the list tops when one is given."""
    toks, margins = [], []
    T = prompt.shape[1]
    with torch.no_grad():
        logits = module(prompt.to(device), torch.arange(T, device=device))
        for i in range(n):
            row = logits[0, -1].float()
            top = torch.topk(row, 2).values
            margins.append(float(top[0] - top[1]))
            if tops is not None:
                tops.append(float(top[0]))
            toks.append(int(row.argmax()))
            if i + 1 < n:
                logits = module(torch.tensor([[toks[-1]]], device=device), torch.tensor([T + i], device=device))
    return toks, margins


def pick_decoder_seed(make, base_seed, prompt, n, dtype, threshold=0.5, tries=40, quantize=None, qdev="cpu"):
    """First seed from base_seed whose greedy run keeps the top-1/top-2 margin >= threshold
    at every step, else the seed with the largest minimum. Unquantized: CPU fp32 on the
    dtype-rounded weights (the same on every machine). Quantized: the quantized module in
    the program's dtype on qdev (quantization changes the logits a lot)."""
    best = None
    for s in range(base_seed, base_seed + tries):
        if quantize is None:
            m = make(s).to(dtype).float().eval()
            toks, margins = greedy(m, prompt, n, torch.float32, "cpu")
        else:
            m = quantize(make(s).to(dtype).to(qdev).eval())
            toks, margins = greedy(m, prompt, n, dtype, qdev)
        if best is None or min(margins) > best[1]:
            best = (s, min(margins))
        if min(margins) >= threshold:
            return s, min(margins)
    return best


def decoder_generate(make, seed, prompt, n, dtype, quantize=None):
    """Greedy tokens in the program's dtype on the GPU (the CPU in a dry run without
    a GPU), plus the CPU fp32 tokens and whether they agree."""
    info = {}
    gpu = has_cuda()
    dev = "cuda" if gpu else "cpu"
    m = make(seed).to(dtype).to(dev).eval()
    if quantize is not None:
        m = quantize(m)
    toks, margins = greedy(m, prompt, n, dtype, dev)
    info["greedy_device"] = f"{dev}-{DTYPE_NAMES[dtype]}" + ("-quantized" if quantize else "")
    info["min_greedy_margin"] = min(margins)
    if True:
        ref = make(seed).to(dtype).float().eval() if quantize is None else dequantized_twin(m, lambda: make(seed), dtype)
        ctoks, cmarg = greedy(ref, prompt, n, torch.float32, "cpu")
        info["greedy_tokens_cpu_fp32"] = ctoks
        info["greedy_tokens_agree"] = ctoks == toks
        info["min_greedy_margin_cpu_fp32"] = min(cmarg)
    return toks, info


# ----------------------------------------------------------------------------- driver


def ensure_flatc():
    """The .pte/.ptd writers run flatc: use the one in the executorch package."""
    if os.environ.get("FLATC_EXECUTABLE"):
        return
    try:
        import importlib.util

        spec = importlib.util.find_spec("executorch")
        f = os.path.join(list(spec.submodule_search_locations)[0], "data", "bin", "flatc")
        if os.path.exists(f):
            if not os.access(f, os.X_OK):
                os.chmod(f, 0o755)
            os.environ["FLATC_EXECUTABLE"] = f
    except Exception as e:
        print(f"warning: no flatc found ({e!r})", flush=True)
