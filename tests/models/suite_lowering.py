"""suite_lib.py's lowering half (suite_lib re-exports every name): the manifest's IO files, the
ELF dynamic symbols of a delegate's .so (no nm needed), and the lowering: compile specs, the
patches around it, the delegates' imports and blobs, the memory plan.
"""
import contextlib
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import torch

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
}

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
