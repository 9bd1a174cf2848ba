"""ExecuTorch's Python runtime (``executorch.runtime``) with this project's
backend: ``load()`` enables the backend, checks that the installed torch is the
one ExecuTorch's Python bindings were compiled against, loads the program, and
wraps its methods so that a wrong input is one Python exception naming it.

    import executorch_cuda
    prog = executorch_cuda.load("examples/mlp/model.pte", "examples/mlp/aoti_cuda_blob.ptd")
    (y,) = prog.forward(torch.from_numpy(x))

Why the torch check: the pip wheel of ExecuTorch 1.5.1 ships its Python
bindings (``executorch/extension/pybindings/_C*.so``) compiled against PyTorch
2.13; the bindings inline c10's ``TensorImpl`` accessors, and PyTorch 2.11's
``TensorImpl`` is laid out differently (``device_opt_`` at byte 0xaa, 2.13:
0xa2). With torch 2.11, the first read of an input tensor's device
(``at::Tensor::device()`` in ``PyMethod::set_inputs``) reads other bytes and
fails with ``tensor does not have a device``, for every program (also a CPU
program without any delegate); other fields are misread as well (README.md,
"Python").
"""

from . import native

# ExecuTorch version -> the torch (major.minor) its pip wheel's Python bindings were
# compiled against (its TensorImpl layout). 1.5.1: the wheel's inlined device check
# reads TensorImpl byte 0xa4 and reports c10/core/TensorImpl.h:1303, both torch 2.13's.
PYBINDINGS_TORCH = {"1.5.1": "2.13", "1.5.0": "2.13"}

# c10::ScalarType codes (ExecuTorch uses the same) of the dtypes a program input takes.
_DTYPE_CODES = {
    "uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5,
    "float32": 6, "float64": 7, "bool": 11, "bfloat16": 15,
}
_CODE_NAMES = {v: k for k, v in _DTYPE_CODES.items()}


class TorchVersionError(RuntimeError):
    """The installed torch is not the one ExecuTorch's Python bindings need."""


class InputError(ValueError):
    """An input does not match what the method takes (count, type, dtype, shape, device)."""


def check_torch(version=None):
    """TorchVersionError unless torch's major.minor (``version``, default the
    installed torch's) is what the installed ExecuTorch's Python bindings were
    compiled against. Returns that version."""
    if version is None:
        import torch

        version = torch.__version__
    installed, _ = native.installed_executorch()
    need = PYBINDINGS_TORCH.get(native._base(installed))
    have = version.split("+", 1)[0]
    if need is not None and ".".join(have.split(".")[:2]) != need:
        raise TorchVersionError(
            f"executorch_cuda: executorch {installed}'s Python runtime (executorch.runtime) was compiled "
            f"against torch {need}.x, but torch {version} is installed: its bindings would misread "
            f"every tensor (RuntimeError: tensor does not have a device). Install torch=={need}.* next to "
            f"executorch=={native._base(installed)} for the Python runtime")
    return version


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


class Method:
    """One method of a loaded program: ``execute(inputs)`` (or call it) checks the
    inputs against the method's metadata, then runs ExecuTorch's Method."""

    def __init__(self, name, method):
        self.name = name
        self._method = method
        meta = method.metadata
        self.num_inputs = meta.num_inputs()
        self.num_outputs = meta.num_outputs()
        self._inputs = []
        for i in range(self.num_inputs):
            try:
                info = meta.input_tensor_meta(i)
            except Exception:  # a non-tensor input: checked by ExecuTorch
                info = None
            if info is None:
                self._inputs.append(None)
            else:
                self._inputs.append((tuple(info.sizes()), info.dtype(), info.is_memory_planned()))

    def check(self, inputs):
        """InputError naming the first input that does not fit."""
        import torch

        where = f"method '{self.name}'"
        if not isinstance(inputs, (list, tuple)):
            raise InputError(f"{where}: inputs must be a list or tuple, got {type(inputs).__name__}")
        if len(inputs) != self.num_inputs:
            raise InputError(f"{where} takes {self.num_inputs} inputs, got {len(inputs)}")
        for i, (x, spec) in enumerate(zip(inputs, self._inputs)):
            if spec is None:
                continue
            sizes, code, planned = spec
            if type(x) is not torch.Tensor:  # what ExecuTorch's bindings accept (no subclasses)
                raise InputError(f"{where} input {i}: expected a torch.Tensor, got {type(x).__name__}")
            got = _DTYPE_CODES.get(_dtype_name(x.dtype))
            if got != code:
                want = _CODE_NAMES.get(code, f"dtype code {code}")
                raise InputError(f"{where} input {i}: dtype {_dtype_name(x.dtype)}, the method takes {want}")
            if x.dim() != len(sizes) or any(s > b for s, b in zip(x.shape, sizes)):
                raise InputError(f"{where} input {i}: shape {list(x.shape)}, the method takes {list(sizes)} "
                                 "(a dynamic dimension at most that)")
            if x.device.type not in ("cpu", "cuda"):
                raise InputError(f"{where} input {i}: on device {x.device}; only CPU and CUDA tensors run")
            if x.device.type == "cuda" and planned:
                raise InputError(
                    f"{where} input {i}: a CUDA tensor, but the program plans this input in host memory "
                    "(ExecuTorch copies a planned input with a host memcpy): pass x.cpu(), or export with "
                    "MemoryPlanningPass(alloc_graph_input=False) for device inputs")
            if not x.is_contiguous():
                raise InputError(f"{where} input {i}: not contiguous (strides {list(x.stride())}); "
                                 "pass x.contiguous()")

    def execute(self, inputs):
        self.check(inputs)
        return self._method.execute(list(inputs))

    def __call__(self, *inputs):
        return self.execute(list(inputs))


class Program:
    """A program loaded through ``executorch.runtime`` with the backend enabled;
    ``program.method("forward")`` or ``program.forward(...)``."""

    runtime = "executorch"

    def __init__(self, program, info):
        self._program = program
        self.backend = info
        self._methods = {}

    @property
    def method_names(self):
        return set(self._program.method_names)

    def method(self, name):
        if name not in self._methods:
            if name not in self._program.method_names:
                raise KeyError(f"no method '{name}' in the program (it has {sorted(self._program.method_names)})")
            m = self._program.load_method(name)
            if m is None:
                raise RuntimeError(f"executorch_cuda: ExecuTorch could not load method '{name}'")
            self._methods[name] = Method(name, m)
        return self._methods[name]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.method(name)


RUNTIMES = ("auto", "executorch", "bridge")


def load(pte, ptd=None, *, require_device=True, runtime="auto"):
    """Enable the backend and load ``pte`` (with its ``.ptd`` data file). Returns a
    Program whose ``runtime`` attribute says which runtime runs it:

    - ``"executorch"``: ExecuTorch's Python runtime (``executorch.runtime``), after
      checking that torch is the one its bindings were compiled against
      (``TorchVersionError`` otherwise);
    - ``"bridge"``: the same C++ runtime through ``executorch_cuda.bridge`` (any torch,
      or none: numpy arrays in and out);
    - ``"auto"`` (default): ``executorch.runtime`` when torch is installed and matches
      its bindings, else the bridge, with a ``RuntimeWarning`` saying why."""
    import os

    if runtime not in RUNTIMES:
        raise ValueError(f"executorch_cuda: runtime must be one of {RUNTIMES}, not {runtime!r}")
    for path in (pte, ptd):
        if path is not None and not os.path.isfile(path):
            raise FileNotFoundError(f"executorch_cuda: no such file: {path}")
    if runtime == "auto":
        why = _why_not_executorch_runtime()
        runtime = "bridge" if why else "executorch"
        if why:
            import warnings

            warnings.warn(f"executorch_cuda.load: running through executorch_cuda.bridge, as {why}",
                          RuntimeWarning, stacklevel=2)
    if runtime == "bridge":
        from . import bridge

        return bridge.load(pte, ptd, require_device=require_device)
    info = native.enable(require_device=require_device)
    check_torch()
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte), data_path=None if ptd is None else str(ptd))
    return Program(program, info)


def _why_not_executorch_runtime():
    """Why ``executorch.runtime`` cannot run programs here (no torch, another torch than its
    bindings', no ExecuTorch Python runtime), or None when it can."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed (executorch.runtime takes torch tensors)"
    try:
        check_torch()
    except TorchVersionError as e:
        return str(e).replace("executorch_cuda: ", "", 1)
    except native.NativeLibraryError as e:  # no executorch package at all
        return f"executorch.runtime is not available ({e})"
    return None
