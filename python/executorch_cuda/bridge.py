"""ExecuTorch's C++ runtime from Python without ExecuTorch's Python bindings:
``libexecutorch_cuda_pybridge.so`` (adapter/python_bridge.cpp) is a C API
over ExecuTorch's ``Module``, called with ctypes, so it works with any torch
(or none: numpy arrays in and out). The path for a Python whose torch is not
the one ``executorch.runtime``'s bindings were compiled against (runtime.py;
ExecuTorch 1.5.1's need torch 2.13, PyTorch 2.11 makes them misread every
tensor).

    from executorch_cuda import bridge
    prog = bridge.load("examples/mlp/model.pte", "examples/mlp/aoti_cuda_blob.ptd")
    (y,) = prog.forward(x)        # x: numpy array or torch tensor; y: torch tensor (numpy without torch)

Outputs are copied out of the method's memory (device outputs through the
library's ordered copy), so they stay valid after the next execute.
"""

import ctypes
import os

from . import native
from .runtime import InputError

BRIDGE = "libexecutorch_cuda_pybridge.so"
_MAX_DIMS = 16
_CODES = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "float64": 7,
          "bool": 11, "bfloat16": 15}
_NAMES = {v: k for k, v in _CODES.items()}
_SIZES = {"uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "float32": 4, "float64": 8,
          "bool": 1, "bfloat16": 2}


class Value(ctypes.Structure):
    _fields_ = [("tag", ctypes.c_int32), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("device_type", ctypes.c_int32), ("device_index", ctypes.c_int32), ("pad", ctypes.c_int32),
                ("data", ctypes.c_void_p), ("nbytes", ctypes.c_uint64), ("sizes", ctypes.c_int64 * _MAX_DIMS),
                ("int_value", ctypes.c_int64), ("double_value", ctypes.c_double)]


_lib = {}


def library():
    """The bridge, loaded after enable() (which loads ExecuTorch's runtime and the backend)."""
    if "lib" not in _lib:
        native.enable(require_device=False, local_executorch=True)
        path = os.path.join(native.library_dir(), BRIDGE)
        if not os.path.isfile(path):
            raise native.NativeLibraryError(f"executorch_cuda: no {path} (built with the project: cmake --build build)")
        et_dir = native._state["executorch"]
        for dep in ("libexecutorch_threadpool.so", "libexecutorch_kernels_optimized.so"):
            if os.path.isfile(os.path.join(et_dir, dep)):
                native._load_global(os.path.join(et_dir, dep))
        lib = native._load_global(path)
        lib.etpy_last_error.restype = ctypes.c_char_p
        lib.etpy_load.restype = ctypes.c_void_p
        lib.etpy_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.etpy_destroy.argtypes = [ctypes.c_void_p]
        lib.etpy_method_meta.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(Value), ctypes.c_size_t]
        lib.etpy_execute.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Value), ctypes.c_size_t,
                                     ctypes.POINTER(Value), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
        _lib["lib"] = lib
    return _lib["lib"]


def _error(lib, what):
    return RuntimeError(f"executorch_cuda: {what}: {lib.etpy_last_error().decode('utf-8', 'replace')}")


_DTYPE_NAMES = {}  # dtype object -> name ("float32"), filled as dtypes are met


def _dtype_name(dtype):
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _describe(x):
    """(dtype name, shape, device type, device index, contiguous, data pointer) of a
    numpy array or a torch tensor, or None for anything else."""
    mod = type(x).__module__
    if mod.startswith("torch") and hasattr(x, "data_ptr"):
        dev = x.device
        return (_dtype_name(x.dtype), tuple(x.shape), dev.type, dev.index or 0, x.is_contiguous(), x.data_ptr())
    if mod == "numpy":
        return (_dtype_name(x.dtype), tuple(x.shape), "cpu", 0, bool(x.flags["C_CONTIGUOUS"]), x.ctypes.data)
    return None


def _torch():
    if "torch" not in _lib:
        try:
            import torch
        except ImportError:
            torch = None
        _lib["torch"] = torch
    return _lib["torch"]


class Method:
    def __init__(self, program, name):
        lib = library()
        self._program, self.name = program, name
        n_in, n_out = ctypes.c_size_t(), ctypes.c_size_t()
        metas = (Value * 64)()
        if lib.etpy_method_meta(program._h, name.encode(), ctypes.byref(n_in), ctypes.byref(n_out), metas, 64):
            raise _error(lib, f"method '{name}'")
        self.num_inputs, self.num_outputs = n_in.value, n_out.value
        # Per tensor input: (dtype name, sizes bound, planned in host memory); None otherwise.
        self._specs = []
        for i in range(min(n_in.value, 64)):
            m = metas[i]
            bound = tuple(m.sizes[k] for k in range(m.ndim))
            self._specs.append((_NAMES.get(m.dtype, f"dtype code {m.dtype}"), bound, bool(m.int_value))
                               if m.tag == 0 else None)
        self._bname = name.encode()
        self._ins = (Value * max(1, self.num_inputs))()
        self._outs = (Value * max(1, self.num_outputs))()
        self._n_out = ctypes.c_size_t()

    def _value(self, i, x):
        where = f"method '{self.name}' input {i}"
        v = Value()
        if isinstance(x, bool):
            v.tag, v.int_value = 3, int(x)
            return v
        if isinstance(x, int):
            v.tag, v.int_value = 1, x
            return v
        if isinstance(x, float):
            v.tag, v.double_value = 2, x
            return v
        d = _describe(x)
        if d is None:
            raise InputError(f"{where}: expected a numpy array or torch tensor, got {type(x).__name__}")
        dtype, shape, dev, index, contiguous, ptr = d
        spec = self._specs[i] if i < len(self._specs) else None
        if spec is not None:
            want, bound, planned = spec
            if dtype != want:
                raise InputError(f"{where}: dtype {dtype}, the method takes {want}")
            if shape != bound and (len(shape) != len(bound) or any(s > b for s, b in zip(shape, bound))):
                raise InputError(f"{where}: shape {list(shape)}, the method takes {list(bound)} "
                                 "(a dynamic dimension at most that)")
            if dev == "cuda" and planned:
                raise InputError(f"{where}: a CUDA tensor, but the program plans this input in host memory "
                                 "(ExecuTorch copies a planned input with a host memcpy): pass x.cpu()")
        if dev not in ("cpu", "cuda"):
            raise InputError(f"{where}: on device {dev}; only CPU and CUDA tensors run")
        if not contiguous:
            raise InputError(f"{where}: not contiguous; pass a contiguous copy")
        if len(shape) > _MAX_DIMS or dtype not in _CODES:
            raise InputError(f"{where}: {dtype} of rank {len(shape)} is not supported")
        v.tag, v.dtype, v.ndim, v.data = 0, _CODES[dtype], len(shape), ptr
        v.device_type, v.device_index = (1 if dev == "cuda" else 0), index
        v.sizes[: len(shape)] = shape
        return v

    def _out(self, v):
        if v.tag == 1:
            return v.int_value
        if v.tag == 2:
            return v.double_value
        if v.tag == 3:
            return bool(v.int_value)
        if v.tag != 0:
            return None
        shape = [v.sizes[k] for k in range(v.ndim)]
        name = _NAMES.get(v.dtype)
        if name is None:
            raise RuntimeError(f"executorch_cuda: method '{self.name}' returned dtype code {v.dtype}")
        torch = _torch()
        if torch is not None:
            out = torch.empty(shape, dtype=getattr(torch, name))
            dst = out.data_ptr()
        else:
            import numpy as np

            out = np.empty(shape, dtype=np.uint16 if name == "bfloat16" else name)  # bf16: raw bits
            dst = out.ctypes.data
        n = int(v.nbytes)
        if n and v.device_type == 1:
            lib = native.library()
            lib.et_cuda_copy_device_to_host.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                        ctypes.c_int32]
            if lib.et_cuda_copy_device_to_host(dst, v.data, n, v.device_index):
                raise RuntimeError("executorch_cuda: " + lib.et_cuda_last_error().decode("utf-8", "replace"))
        elif n:
            ctypes.memmove(dst, v.data, n)
        return out

    def execute(self, inputs):
        if not isinstance(inputs, (list, tuple)):
            raise InputError(f"method '{self.name}': inputs must be a list or tuple, got {type(inputs).__name__}")
        if len(inputs) != self.num_inputs:
            raise InputError(f"method '{self.name}' takes {self.num_inputs} inputs, got {len(inputs)}")
        lib = library()
        ins, outs = self._ins, self._outs
        for i, x in enumerate(inputs):  # `inputs` keeps the buffers alive through the call
            ins[i] = self._value(i, x)
        if lib.etpy_execute(self._program._h, self._bname, ins, len(inputs), outs, self.num_outputs,
                            ctypes.byref(self._n_out)):
            raise _error(lib, f"execute '{self.name}'")
        return [self._out(outs[i]) for i in range(self._n_out.value)]

    def __call__(self, *inputs):
        return self.execute(list(inputs))


class Program:
    runtime = "bridge"

    def __init__(self, pte, ptd=None, require_device=True):
        for path in (pte, ptd):
            if path is not None and not os.path.isfile(path):
                raise FileNotFoundError(f"executorch_cuda: no such file: {path}")
        self.backend = native.enable(require_device=require_device, local_executorch=True)
        lib = library()
        self._h = lib.etpy_load(str(pte).encode(), None if ptd is None else str(ptd).encode())
        if not self._h:
            raise _error(lib, "load")
        self._methods = {}

    def method(self, name):
        if name not in self._methods:
            self._methods[name] = Method(self, name)
        return self._methods[name]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.method(name)

    def close(self):
        if getattr(self, "_h", None):
            library().etpy_destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def load(pte, ptd=None, *, require_device=True):
    return Program(pte, ptd, require_device=require_device)
