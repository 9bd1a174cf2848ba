"""The native side of the package: finding ``libexecutorch_cuda.so`` and the
adapter ``libexecutorch_cuda_backend.so``, and ``enable()``, which loads them into
the process so that ExecuTorch's runtime (``executorch.runtime``, or any
``libexecutorch.so`` user in the process) has ``"CudaBackend"``.

No torch here: ctypes and the standard library only.

Where the libraries are looked for, first match wins:

1. ``$EXECUTORCH_CUDA_LIB_DIR`` (a folder holding both libraries, e.g. ``build/``);
2. ``lib/`` inside this package (a wheel built with the libraries bundled);
3. ``$EXECUTORCH_CUDA_PREFIX/lib`` (``cmake --install build --prefix <prefix>``).
"""

import ctypes
import importlib.util
import os
import re
import threading

ADAPTER = "libexecutorch_cuda_backend.so"
LIBRARY = "libexecutorch_cuda.so.0"
BACKEND_NAME = "CudaBackend"
_MARKER = re.compile(rb"executorch_cuda:built-against-executorch=([^\x00]*)\x00")
# EtCudaStatus codes (include/executorch_cuda.h).
_STATUS_NO_DEVICE = 2

_lock = threading.Lock()
_state = {"enabled": None, "lib": None, "executorch": None}


class NativeLibraryError(RuntimeError):
    """A native library is missing, unreadable or does not load."""


class ExecutorchVersionError(RuntimeError):
    """The installed ExecuTorch is not the one the adapter was built against."""


class NoCudaDeviceError(RuntimeError):
    """No CUDA driver or device: the backend cannot run programs here."""


def library_dir():
    """The folder holding both native libraries, or NativeLibraryError naming
    every place searched."""
    candidates = []
    env = os.environ.get("EXECUTORCH_CUDA_LIB_DIR")
    if env:
        candidates.append(("$EXECUTORCH_CUDA_LIB_DIR", env))
    candidates.append(("the package", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")))
    prefix = os.environ.get("EXECUTORCH_CUDA_PREFIX")
    if prefix:
        candidates.append(("$EXECUTORCH_CUDA_PREFIX/lib", os.path.join(prefix, "lib")))
    tried = []
    for what, folder in candidates:
        missing = [n for n in (ADAPTER, LIBRARY) if not os.path.isfile(os.path.join(folder, n))]
        if not missing:
            return folder
        tried.append(f"{what} ({folder}): no {' or '.join(missing)}")
        if what == "$EXECUTORCH_CUDA_LIB_DIR":
            # An explicit folder that lacks the libraries is an error, not a hint to look elsewhere.
            break
    raise NativeLibraryError(
        "executorch_cuda: the native libraries (" + ADAPTER + ", " + LIBRARY + ") were not found: "
        + "; ".join(tried)
        + ". Build them (scripts/run_example.sh or cmake --build build) and set "
        "EXECUTORCH_CUDA_LIB_DIR=<repo>/build, install them (cmake --install build --prefix P) and set "
        "EXECUTORCH_CUDA_PREFIX=P, or install a wheel built with them (scripts/build_wheel.sh)")


def built_against(adapter_path):
    """The ExecuTorch version recorded in the adapter at build time (read from the
    file, without loading it), or None for an adapter without the marker."""
    try:
        with open(adapter_path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise NativeLibraryError(f"executorch_cuda: cannot read {adapter_path}: {e}") from e
    m = _MARKER.search(data)
    return m.group(1).decode("ascii", "replace") if m else None


def installed_executorch():
    """(version, package folder) of the importable ``executorch``, read from its
    ``version.py`` without importing it (executorch's package imports torch)."""
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise NativeLibraryError(
            "executorch_cuda: the executorch package is not installed (pip install executorch==<the "
            "version the adapter was built against>)")
    root = list(spec.submodule_search_locations)[0]
    version = None
    try:
        with open(os.path.join(root, "version.py"), encoding="utf-8") as f:
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read())
            version = m.group(1) if m else None
    except OSError:
        pass
    return version, root


def _base(version):
    # "1.5.1+cpu" (a local build tag) is ABI-wise 1.5.1.
    return version.split("+", 1)[0] if version else version


def check_versions(adapter_path):
    """ExecutorchVersionError unless the installed executorch is the version the
    adapter was built against. Returns (built, installed, executorch folder)."""
    built = built_against(adapter_path)
    installed, root = installed_executorch()
    if built is None or built == "unknown":
        raise ExecutorchVersionError(
            f"executorch_cuda: {adapter_path} records no ExecuTorch version (built without the marker); "
            "rebuild it from this repository")
    if installed is None:
        raise ExecutorchVersionError(f"executorch_cuda: cannot read the version of executorch at {root}")
    if _base(built) != _base(installed):
        raise ExecutorchVersionError(
            f"executorch_cuda: the adapter {adapter_path} was built against ExecuTorch {built}, but executorch "
            f"{installed} is installed ({root}); their runtime ABI may differ. Install executorch=={_base(built)} "
            "or rebuild the adapter against the installed one")
    return built, installed, root


def _executorch_libraries(folder, adapter, local_first=False):
    """(built-against version, installed version, folder of libexecutorch.so): the
    installed executorch package's (version-checked), else, when no executorch
    package is installed (or ``local_first``: the bridge, which does not use the
    package), the copy of the build's ExecuTorch libraries next to ours
    (scripts/gpu_bundle.sh and installs put them there: the very files the
    adapter was linked against)."""
    if local_first and os.path.isfile(os.path.join(folder, "libexecutorch.so")):
        built = built_against(adapter)
        return built, f"{built} (the copy in {folder})", folder
    try:
        built, installed, root = check_versions(adapter)
        return built, installed, os.path.join(root, "lib")
    except NativeLibraryError:
        if not os.path.isfile(os.path.join(folder, "libexecutorch.so")):
            raise
        built = built_against(adapter)
        return built, f"{built} (the copy in {folder})", folder


def _load_global(path):
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        raise NativeLibraryError(f"executorch_cuda: cannot load {path}: {e}") from e


def _library(folder):
    lib = _load_global(os.path.join(folder, LIBRARY))
    lib.et_cuda_version.restype = ctypes.c_char_p
    lib.et_cuda_last_error.restype = ctypes.c_char_p
    lib.et_cuda_device_count.argtypes = [ctypes.POINTER(ctypes.c_int32)]
    lib.et_cuda_device_count.restype = ctypes.c_int32
    return lib


def device_count(lib=None):
    """The number of CUDA devices, or NoCudaDeviceError with the library's reason."""
    lib = lib or library()
    n = ctypes.c_int32(0)
    status = lib.et_cuda_device_count(ctypes.byref(n))
    if status != 0:
        reason = (lib.et_cuda_last_error() or b"").decode("utf-8", "replace")
        kind = "no CUDA device here" if status == _STATUS_NO_DEVICE else f"the device count failed (status {status})"
        raise NoCudaDeviceError(f"executorch_cuda: {kind} ({reason})")
    if n.value < 1:
        raise NoCudaDeviceError("executorch_cuda: no CUDA device (the driver reports 0 devices)")
    return n.value


def library():
    """``libexecutorch_cuda.so`` loaded (ctypes), for the C API (``et_cuda_*``)."""
    with _lock:
        if _state["lib"] is None:
            _state["lib"] = _library(library_dir())
        return _state["lib"]


def _registered(libexecutorch):
    try:
        fn = libexecutorch._ZN10executorch7runtime17get_backend_classEPKc
    except AttributeError:
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p]
    return bool(fn(BACKEND_NAME.encode()))


def enable(require_device=True, local_executorch=False):
    """Load the adapter (RTLD_GLOBAL) so that ``"CudaBackend"`` is registered in
    the process's ExecuTorch runtime (the ``libexecutorch.so`` that
    ``executorch.runtime`` uses). Idempotent; returns a dict describing what was
    loaded. Errors (one exception, nothing loaded that could crash):

    - NativeLibraryError: a library is missing or does not load;
    - ExecutorchVersionError: the installed executorch is not the version the
      adapter was built against;
    - NoCudaDeviceError (``require_device=True``): no driver or GPU. With
      ``require_device=False`` the backend is registered anyway and every
      program load fails with ExecuTorch's NotSupported error instead.

    ``local_executorch=True`` (the bridge) takes ExecuTorch's libraries from next
    to ours when they are there, whatever executorch package is installed.
    """
    with _lock:
        if _state["enabled"] is not None:
            return dict(_state["enabled"])
        folder = library_dir()
        adapter = os.path.join(folder, ADAPTER)
        built, installed, et_dir = _executorch_libraries(folder, adapter, local_executorch)
        # libexecutorch.so first, by path and global: the adapter's DT_NEEDED entry
        # (by SONAME) then binds to this copy, the one executorch.runtime loads too.
        et_lib = os.path.join(et_dir, "libexecutorch.so")
        if not os.path.isfile(et_lib):
            raise NativeLibraryError(f"executorch_cuda: executorch {installed} has no {et_lib}")
        libexecutorch = _load_global(et_lib)
        _state["executorch"] = et_dir
        if _state["lib"] is None:
            _state["lib"] = _library(folder)
        lib = _state["lib"]
        devices = 0
        try:
            devices = device_count(lib)
        except NoCudaDeviceError:
            if require_device:
                raise
        _load_global(adapter)
        info = {
            "library": os.path.join(folder, LIBRARY),
            "adapter": adapter,
            "library_version": lib.et_cuda_version().decode(),
            "executorch": installed,
            "built_against": built,
            "devices": devices,
            "registered": _registered(libexecutorch),
        }
        _state["enabled"] = info
        return dict(info)


def is_registered():
    """Whether ``"CudaBackend"`` is registered in the ExecuTorch runtime of this
    process (False when ExecuTorch's runtime library is not loaded at all)."""
    try:
        _, root = installed_executorch()
        lib = ctypes.CDLL(os.path.join(root, "lib", "libexecutorch.so"), mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except (OSError, NativeLibraryError):
        return False
    return _registered(lib)
