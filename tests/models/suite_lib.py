"""Shared machinery of export_suite.py (ExecuTorch 1.2) and export_et15.py
(ExecuTorch 1.5.1): program specs, eager references and tolerances, lowering,
the manifest (the format of tests/fixtures' manifests, runner/README.md, plus the
extensions tests/models/README.md lists), the delegate blobs' imported
symbols, and the parallel driver (one subprocess per program).
"""
import argparse
import concurrent.futures
import contextlib
import copy
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
}
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


# ----------------------------------------------------------------------------- IO files


def json_safe(v):
    """Non-finite floats as strings: the runner's JSON parser (like JSON itself) has no NaN/Infinity."""
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return str(v)
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def write_raw(t, path):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    elif t.dtype == torch.bool:
        t = t.to(torch.uint8)
    t.numpy().tofile(path)


def tensor_entry(t, file):
    return {"dtype": DTYPE_NAMES[t.dtype], "sizes": list(t.shape), "file": file}


# ----------------------------------------------------------------------------- ELF dynamic symbols (no nm needed)


def elf_dynamic_symbols(data):
    """(undefined, defined) global/weak dynamic symbol names of an ELF64 little-endian file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not an ELF64 little-endian file")
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        name, typ, flags, addr, offset, size, link, info, align, entsize = struct.unpack_from("<IIQQQQIIQQ", data, off)
        sections.append((typ, offset, size, link, entsize))
    undefined, defined = set(), set()
    for typ, offset, size, link, entsize in sections:
        if typ != 11:  # SHT_DYNSYM
            continue
        str_off = sections[link][1]
        for j in range(1, size // (entsize or 24)):
            st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, offset + j * 24)
            bind = st_info >> 4
            if bind not in (1, 2) or st_name == 0:  # GLOBAL, WEAK
                continue
            end = data.index(b"\0", str_off + st_name)
            sym = data[str_off + st_name:end].decode("utf-8", "replace")
            (undefined if st_shndx == 0 else defined).add(sym)
    return sorted(undefined), sorted(defined)


# ----------------------------------------------------------------------------- lowering


def compile_spec_list(method, extra):
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    specs = [CudaBackend.generate_method_name_compile_spec(method)]
    for k, v in extra.items():
        specs.append(CompileSpec(k, v.encode("utf-8")))
    return specs


@contextlib.contextmanager
def lowering_patches(p):
    """The program's Inductor config and extra supported fallback kernels, for its lowering only."""
    with contextlib.ExitStack() as stack:
        if p.inductor_config:
            import torch._inductor.config as inductor_config

            stack.enter_context(inductor_config.patch(p.inductor_config))
        if p.extra_fallback_kernels:
            from executorch.backends.cuda.cuda_backend import CudaBackend

            orig = CudaBackend.get_supported_fallback_kernels.__func__

            def patched(cls):
                d = dict(orig(cls))
                d.update({k: None for k in p.extra_fallback_kernels})
                return d

            CudaBackend.get_supported_fallback_kernels = classmethod(patched)
            stack.callback(setattr, CudaBackend, "get_supported_fallback_kernels", classmethod(orig))
        yield


def so_imports(so_bytes):
    """Undefined dynamic symbols of a .so: `nm -D --undefined-only` when nm exists, else the
    ELF parser above (the two must agree when both run)."""
    undef, _ = elf_dynamic_symbols(so_bytes)
    nm = shutil.which("nm")
    if nm:
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(so_bytes)
            f.flush()
            out = subprocess.run([nm, "-D", "--undefined-only", f.name], capture_output=True, text=True, check=True).stdout
        by_nm = sorted({line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()})
        if set(by_nm) != set(undef):
            raise RuntimeError(f"nm -D and the ELF parser disagree: {sorted(set(by_nm) ^ set(undef))[:10]}")
    return set(undef)


def check_expected_imports(p, delegates):
    """Fail the export when no .so of the program imports one of p.expect_imports."""
    if not p.expect_imports:
        return {}
    if "fake_aoti" in sys.modules:  # the stub .so imports nothing of ours
        return {s: "not checked (fake AOTInductor)" for s in p.expect_imports}
    found = set()
    for dl in delegates:
        for _key, data in dl.get("_so", []):
            found |= so_imports(data)
    missing = [s for s in p.expect_imports if s not in found]
    if missing:
        raise RuntimeError(f"{p.name}: no AOTInductor .so imports {missing} (the program does not test what it is for)")
    return {s: True for s in p.expect_imports}


def lower(eps, extra_specs, backend_config):
    """eps: {method: ExportedProgram} -> (EdgeProgramManager, ExecutorchProgramManager)."""
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    parts = {m: [CudaPartitioner(compile_spec_list(m, extra_specs))] for m in eps}
    cfg = EdgeCompileConfig(_check_ir_validity=False)
    if list(eps) == ["forward"]:
        edge = to_edge_transform_and_lower(eps["forward"], partitioner=parts["forward"], compile_config=cfg)
    else:
        edge = to_edge_transform_and_lower(eps, partitioner=parts, compile_config=cfg)
    delegates = delegate_info(edge, list(eps))
    et = edge.to_executorch(backend_config)
    return edge, et, delegates


def _blob_bytes(b):
    if isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(b)
    for attr in ("read_bytes", "to_bytes", "data"):
        f = getattr(b, attr, None)
        if callable(f):
            try:
                return bytes(f())
            except Exception:
                pass
        elif isinstance(f, (bytes, bytearray)):
            return bytes(f)
    path = getattr(b, "path", None) or getattr(b, "_path", None)
    if path and os.path.exists(path):
        return open(path, "rb").read()
    try:
        return bytes(b)
    except Exception:
        return b""


def decode_processed(pb):
    """The delegate's processed payload, decoded: ExecuTorch 1.2: empty (keys are
    <method>_so_blob / <method>_weights_blob); "<so_key>\\n<weights_key>" text;
    or ExecuTorch 1.5.1's binary ETCUDAFQN3 per-FQN weight metadata."""
    if not pb:
        return {"format": "empty"}
    if pb.startswith(b"ETCUDAFQN"):
        magic = pb[:10].decode()
        o = 10

        def s():
            nonlocal o
            n, = struct.unpack_from("<I", pb, o)
            o += 4
            v = pb[o:o + n].decode("utf-8", "replace")
            o += n
            return v

        so_key = s()
        n, = struct.unpack_from("<I", pb, o)
        o += 4
        entries = []
        for _ in range(n):
            fqn, key = s(), s()
            nbytes, dtype, dev, off, ndim = struct.unpack_from("<QiiqI", pb, o)
            o += struct.calcsize("<QiiqI")
            sizes = list(struct.unpack_from(f"<{ndim}q", pb, o))
            o += 8 * ndim
            strides = list(struct.unpack_from(f"<{ndim}q", pb, o))
            o += 8 * ndim
            entries.append({"fqn": fqn, "storage_key": key, "storage_nbytes": nbytes, "scalar_type": dtype,
                            "device_type": dev, "storage_offset": off, "sizes": sizes, "strides": strides})
        return {"format": magic, "so_key": so_key, "entries": entries, "trailing_bytes": len(pb) - o}
    try:
        text = pb.decode("utf-8")
        return {"format": "text-lines", "lines": text.splitlines()}
    except UnicodeDecodeError:
        return {"format": "binary", "size": len(pb), "head_hex": pb[:32].hex()}


def delegate_info(edge, methods):
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    out = []
    for m in methods:
        gm = edge.exported_program(m).graph_module
        for name, mod in gm.named_modules():
            if not isinstance(mod, LoweredBackendModule):
                continue
            store = mod.named_data_store_output
            keys, sos = {}, []
            if store is not None:
                for key, entry in store.pte_data.items():
                    keys[key] = "pte"
                for tag, entries in store.external_data.items():
                    for key in entries:
                        keys[key] = f"external:{tag}"
                for key, entry in list(store.pte_data.items()) + [
                    (k, e) for ents in store.external_data.values() for k, e in ents.items()
                ]:
                    buf = store.buffers[entry.buffer_index]
                    data = _blob_bytes(buf)
                    if data[:4] == b"\x7fELF":
                        sos.append((key, data))
            specs = {s.key: s.value.decode("utf-8", "replace") for s in mod.compile_specs}
            out.append({
                "method": m,
                "module": name,
                "backend": mod.backend_id,
                "compile_specs": specs,
                "processed": decode_processed(bytes(mod.processed_bytes)),
                "named_data_keys": keys,
                "_so": sos,
            })
    return out


def write_imports(delegates, d):
    """imports.txt: per .so blob, its undefined dynamic symbols (aoti_torch_* and the rest)."""
    lines, seen = [], set()
    for dl in delegates:
        for key, data in dl.pop("_so", []):
            sha = hashlib.sha256(data).hexdigest()
            if sha in seen:
                continue
            seen.add(sha)
            try:
                undef, _ = elf_dynamic_symbols(data)
            except Exception as e:
                undef = [f"# cannot parse: {e!r}"]
            lines.append(f"# method={dl['method']} key={key} sha256={sha} bytes={len(data)}")
            lines.extend(undef)
    with open(os.path.join(d, "imports.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return len(seen)


def inputs_planned(et_program):
    planned = {}
    for plan in et_program.execution_plan:
        planned[plan.name] = [getattr(plan.values[i].val, "allocation_info", None) is not None for i in plan.inputs]
    return planned


def plan_info(et_program):
    """Per method: operators, planned buffer sizes and devices, IO tensors' devices."""
    info = {}

    def dev(v):
        eti = getattr(v, "extra_tensor_info", None)
        d = getattr(eti, "device_type", None) if eti is not None else None
        return getattr(d, "name", str(d)) if d is not None else "CPU(default)"

    for plan in et_program.execution_plan:
        ent = {
            "operators": [f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators],
            "non_const_buffer_sizes": list(plan.non_const_buffer_sizes),
            "delegates": [d.id for d in plan.delegates],
        }
        nbd = getattr(plan, "non_const_buffer_device", None)
        if nbd:
            ent["non_const_buffer_device"] = [
                {"buffer": b.buffer_idx, "device": getattr(b.device_type, "name", str(b.device_type)), "index": b.device_index}
                for b in nbd]
        ent["input_devices"] = [dev(plan.values[i].val) for i in plan.inputs]
        ent["output_devices"] = [dev(plan.values[i].val) for i in plan.outputs]
        info[plan.name] = ent
    return info


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
    dt = p.dtype
    notes = dict(p.notes)

    # ---- references (before export: nothing mutates these fresh modules' state)
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
    expected = ref_cpu
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

    # ---- export
    dev = "cuda" if (quant and (p.quant_needs_cuda or gpu)) else "cpu"
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

    t_lower = time.time()
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
    t_lower = time.time() - t_lower

    # ---- files
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
    n_so = write_imports(delegates, tmp)
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
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(json_safe(man), f, indent=1, allow_nan=False, default=str)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final))
    return (f"ok {time.time() - t0:.1f}s (lowering {t_lower:.1f}s, {size / 2**20:.2f} MiB, "
            f"tolerance atol={tol['atol']:.3g} rtol={tol['rtol']:.3g}, spread {need:.3g})")


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


def main(registry, backend_config_fn, exporter, argv=None):
    ensure_flatc()
    ap = argparse.ArgumentParser(description=f"Export the model suite ({exporter}).")
    ap.add_argument("outdir")
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("SUITE_EXPORT_JOBS", "6")))
    ap.add_argument("--force", action="store_true", help="re-export programs that already have a manifest")
    ap.add_argument("--dry-run", action="store_true",
                    help="build, torch.export and compute references on the CPU; no lowering (no GPU needed)")
    ap.add_argument("--fake-aoti", action="store_true",
                    help="test only: lower with AOTInductor replaced by a stub (no GPU needed; not runnable programs)")
    ap.add_argument("--deadline", type=float, default=0, help="unix time after which no new export starts")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("SUITE_EXPORT_TIMEOUT", "420")),
                    help="seconds per program")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.list:
        for n in registry:
            print(n)
        return 0
    if a.child:
        return child(registry, backend_config_fn, exporter, a)
    names = [n for n in a.only.split(",") if n] or list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        ap.error(f"unknown program(s) {unknown}; known: {list(registry)}")
    os.makedirs(a.outdir, exist_ok=True)
    todo, report = [], {}
    for n in names:
        if not a.force and os.path.exists(os.path.join(a.outdir, n, "manifest.json")):
            report[n] = "cached"
            print(f"export {n}: cached", flush=True)
        else:
            todo.append(n)
    logdir = os.path.join(a.outdir, ".logs")
    os.makedirs(logdir, exist_ok=True)

    def run_one(n):
        if a.deadline and time.time() > a.deadline:
            return n, "SKIPPED (deadline)"
        cmd = [sys.executable, sys.argv[0], a.outdir, "--child", n]
        if a.dry_run:
            cmd.append("--dry-run")
        if a.fake_aoti:
            cmd.append("--fake-aoti")
        log = os.path.join(logdir, f"{n}.log")
        limit = a.timeout
        if a.deadline:
            limit = max(5.0, min(limit, a.deadline + 60 - time.time()))
        # One Inductor cache per program: two exports of the same module (qwen3_bf16 under
        # ExecuTorch 1.2 and 1.5.1) compile the same kernels, and sharing the cache directory
        # made one link while the other was replacing the kernels' object files.
        env = dict(os.environ)
        base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "torchinductor_suite")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, f"{os.path.basename(sys.argv[0])}.{n}")
        t0 = time.time()
        with open(log, "w") as lf:
            try:
                r = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, timeout=limit, env=env)
                rc = r.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        tail = open(log, errors="replace").read().splitlines()
        status = next((l[len("RESULT "):] for l in reversed(tail) if l.startswith("RESULT ")), None)
        if status is None:
            status = f"FAILED rc={rc} after {time.time() - t0:.0f}s: " + " | ".join(tail[-6:])[-1500:]
        return n, status

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for n, status in ex.map(run_one, todo):
            report[n] = status
            print(f"export {n}: {status}", flush=True)
            if status.startswith("FAILED"):
                with open(os.path.join(a.outdir, f".{n}.failed.txt"), "w") as f:
                    f.write(status + "\n")
            else:
                try:
                    os.remove(os.path.join(a.outdir, f".{n}.failed.txt"))
                except OSError:
                    pass
    tag = "et" + "".join(exporter.split()[-1].split(".")[:2])  # executorch 1.2 -> et12, 1.5.1 -> et15
    with open(os.path.join(a.outdir, f".export_report.{tag}.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    return 1 if any(v.startswith("FAILED") for v in report.values()) else 0


def child(registry, backend_config_fn, exporter, a):
    n = a.child
    if a.fake_aoti:
        import fake_aoti

        fake_aoti.install()
    try:
        p = registry[n]()
        status = export_program(p, a.outdir, backend_config_fn, dry_run=a.dry_run, exporter=exporter)
        if a.dry_run:
            status = "dry-run " + status
        if a.fake_aoti:
            status = "fake-aoti " + status
    except Exception as e:
        traceback.print_exc()
        tb = traceback.format_exc().strip().splitlines()
        status = f"FAILED {type(e).__name__}: {str(e)[:600]} || " + " | ".join(l.strip() for l in tb[-8:])[-1500:]
    print("RESULT " + status.replace("\n", " "), flush=True)
    return 0
