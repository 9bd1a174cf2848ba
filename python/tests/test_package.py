"""CPU tests of the Python package (pyproject.toml, python/executorch_cuda):
the wheel builds and installs, ``import executorch_cuda`` needs no torch,
``enable()`` without a GPU is one exception (or a registered backend that
cannot run), never a crash, and each bad set-up is one named exception.
Run by scripts/python_test.sh (CI):

    EXECUTORCH_CUDA_LIB_DIR=build ET_CUDA_PY_SITE=.deps/py python3 -m unittest discover -s python/tests -v

Tests that need something absent (the built libraries, ExecuTorch's package,
numpy, g++, torch) are skipped with the reason printed."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

LIB_DIR = os.environ.get("EXECUTORCH_CUDA_LIB_DIR") or os.path.join(ROOT, "build")
SITE = os.environ.get("ET_CUDA_PY_SITE") or os.path.join(ROOT, ".deps", "py")
HAVE_LIBS = all(os.path.isfile(os.path.join(LIB_DIR, n))
                for n in ("libexecutorch_cuda_backend.so", "libexecutorch_cuda.so.0"))
HAVE_ET = os.path.isfile(os.path.join(SITE, "executorch", "lib", "libexecutorch.so"))
NEED = "needs the built libraries ({}) and ExecuTorch's package ({})".format(LIB_DIR, SITE)

try:
    import numpy as np
except ImportError:  # pragma: no cover - depends on the machine
    np = None
try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

# Run first in every child: hides any installed torch, so "without torch" holds
# whatever the machine has.
NO_TORCH = (
    "import os, sys\n"
    "sys.path = [p for p in sys.path if not os.path.isdir(os.path.join(p or '.', 'torch'))]\n"
)


def child(code, *paths, env=None, hide_torch=True):
    """Runs `code` in a fresh interpreter with `paths` first on sys.path; returns
    (returncode, stdout + stderr)."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("EXECUTORCH_CUDA_LIB_DIR", "EXECUTORCH_CUDA_PREFIX", "PYTHONPATH")}
    e.update(env or {})
    e["PYTHONPATH"] = os.pathsep.join(paths)
    r = subprocess.run([sys.executable, "-c", (NO_TORCH if hide_torch else "") + code], env=e,
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


ENABLE = (
    "import executorch_cuda as e\n"
    "try:\n"
    "    info = e.enable(require_device={req})\n"
    "    print('OK', info['registered'], info['devices'], info['built_against'])\n"
    "except (e.NoCudaDeviceError, e.ExecutorchVersionError, e.NativeLibraryError) as x:\n"
    "    print(type(x).__name__ + ':', x)\n"
    "    print('registered after the error:', e.is_registered())\n"
)


class Wheel(unittest.TestCase):
    """The wheel, pure and with the libraries; installed into a temp dir."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="et_cuda_wheel_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def build(self, native):
        out = os.path.join(self.tmp, "bundled" if native else "pure")
        env = dict(os.environ)
        env.pop("EXECUTORCH_CUDA_NATIVE_DIR", None)
        if native:
            env["EXECUTORCH_CUDA_NATIVE_DIR"] = LIB_DIR
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, ROOT],
                           env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wheels = [f for f in os.listdir(out) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        return os.path.join(out, wheels[0])

    def test_pure_wheel_imports_without_torch(self):
        whl = self.build(native=False)
        self.assertTrue(whl.endswith("-py3-none-any.whl"), whl)
        names = zipfile.ZipFile(whl).namelist()
        for n in ("native.py", "runtime.py", "sampling.py", "shims.py", "passes.py"):
            self.assertIn("executorch_cuda/" + n, names)
        self.assertFalse([n for n in names if n.endswith(".so") or ".so." in n], names)
        target = os.path.join(self.tmp, "pure_site")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, whl],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rc, out = child("import sys, executorch_cuda as e\n"
                        "print('torch' in sys.modules, sorted(e.C_SHIMS)[0], e.__file__)\n"
                        "try:\n    e.enable()\nexcept e.NativeLibraryError as x:\n    print('NativeLibraryError:', x)\n",
                        target)
        self.assertEqual(rc, 0, out)
        from executorch_cuda import shims

        self.assertIn(f"False {sorted(shims.C_SHIMS)[0]} " + target, out)
        # No libraries in a pure wheel and no variable set: one error naming where it looked.
        self.assertIn("NativeLibraryError: executorch_cuda: the native libraries", out)
        self.assertIn("EXECUTORCH_CUDA_LIB_DIR", out)

    @unittest.skipUnless(HAVE_LIBS and HAVE_ET, NEED)
    def test_bundled_wheel_enables(self):
        whl = self.build(native=True)
        self.assertTrue(whl.endswith("-py3-none-linux_x86_64.whl"), whl)
        names = zipfile.ZipFile(whl).namelist()
        self.assertIn("executorch_cuda/lib/libexecutorch_cuda_backend.so", names)
        self.assertIn("executorch_cuda/lib/libexecutorch_cuda.so.0", names)
        target = os.path.join(self.tmp, "bundled_site")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, whl],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The libraries come from the package itself (no variable set).
        rc, out = child(ENABLE.format(req=False) + "print(info['adapter'])\n", target, SITE)
        self.assertEqual(rc, 0, out)
        self.assertIn("OK True", out)
        self.assertIn(os.path.join(target, "executorch_cuda", "lib", "libexecutorch_cuda_backend.so"), out)
        if os.path.isfile(os.path.join(LIB_DIR, "libexecutorch_cuda_pybridge.so")) and np is not None:
            self.assertIn("executorch_cuda/lib/libexecutorch_cuda_pybridge.so", names)
            code = ("import numpy as np\nfrom executorch_cuda import bridge\n"
                    f"p = bridge.load({Bridge.pte!r}, require_device=False)\n"
                    "(y,) = p.forward(np.ones((2, 4), np.float32))\nprint('bridge', np.asarray(y).tolist())\n")
            rc, out = child(code, target, SITE, os.path.dirname(os.path.dirname(np.__file__)), hide_torch=False)
            self.assertEqual(rc, 0, out)
            # ones @ W.T + b: W = arange(12).reshape(3, 4) / 8 - 0.5, b = [0.25, -1, 2]
            self.assertIn("bridge [[-1.0, -0.25, 4.75], [-1.0, -0.25, 4.75]]", out)


@unittest.skipUnless(HAVE_LIBS and HAVE_ET, NEED)
class Enable(unittest.TestCase):
    """enable() from the source tree, the libraries from EXECUTORCH_CUDA_LIB_DIR."""

    env = {"EXECUTORCH_CUDA_LIB_DIR": LIB_DIR}

    def test_require_device(self):
        rc, out = child(ENABLE.format(req=True), os.path.join(ROOT, "python"), SITE, env=self.env)
        self.assertEqual(rc, 0, out)  # no crash either way
        if "NoCudaDeviceError" in out:
            self.assertIn("NoCudaDeviceError: executorch_cuda: no CUDA device here (", out)
            # Refused before the adapter was loaded: nothing registered.
            self.assertIn("registered after the error: False", out)
        else:
            self.assertRegex(out, r"OK True [1-9]")

    def test_registered_but_unavailable(self):
        rc, out = child(ENABLE.format(req=False) + "print(e.enable() == info, e.is_registered())\n",
                        os.path.join(ROOT, "python"), SITE, env=self.env)
        self.assertEqual(rc, 0, out)
        self.assertIn("OK True", out)
        self.assertIn("True True", out)  # idempotent, and CudaBackend is in ExecuTorch's registry

    def test_recorded_version(self):
        from executorch_cuda import native

        built = native.built_against(os.path.join(LIB_DIR, "libexecutorch_cuda_backend.so"))
        with open(os.path.join(SITE, "executorch", "version.py")) as f:
            self.assertIn(f"__version__ = \"{built}", f.read())

    def test_wrong_executorch_version(self):
        d = tempfile.mkdtemp(prefix="et_cuda_ver_")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(LIB_DIR, "libexecutorch_cuda_backend.so"), "rb") as f:
            data = f.read()
        key = b"executorch_cuda:built-against-executorch="
        i = data.index(key) + len(key)
        j = data.index(b"\0", i)
        fake = b"0.9"[: j - i].ljust(j - i, b"\0")
        with open(os.path.join(d, "libexecutorch_cuda_backend.so"), "wb") as f:
            f.write(data[:i] + fake + data[j:])
        shutil.copyfile(os.path.join(LIB_DIR, "libexecutorch_cuda.so.0"), os.path.join(d, "libexecutorch_cuda.so.0"))
        rc, out = child(ENABLE.format(req=False), os.path.join(ROOT, "python"), SITE,
                        env={"EXECUTORCH_CUDA_LIB_DIR": d})
        self.assertEqual(rc, 0, out)
        self.assertIn("ExecutorchVersionError: executorch_cuda: the adapter", out)
        self.assertIn("was built against ExecuTorch 0.9", out)
        self.assertIn("registered after the error: False", out)  # nothing loaded

    def test_missing_library(self):
        d = tempfile.mkdtemp(prefix="et_cuda_missing_")
        self.addCleanup(shutil.rmtree, d, True)
        shutil.copyfile(os.path.join(LIB_DIR, "libexecutorch_cuda_backend.so"),
                        os.path.join(d, "libexecutorch_cuda_backend.so"))
        rc, out = child(ENABLE.format(req=False), os.path.join(ROOT, "python"), SITE,
                        env={"EXECUTORCH_CUDA_LIB_DIR": d})
        self.assertEqual(rc, 0, out)
        self.assertIn(f"NativeLibraryError: executorch_cuda: the native libraries", out)
        self.assertIn(f"$EXECUTORCH_CUDA_LIB_DIR ({d}): no libexecutorch_cuda.so.0", out)

    def test_library_that_does_not_load(self):
        d = tempfile.mkdtemp(prefix="et_cuda_broken_")
        self.addCleanup(shutil.rmtree, d, True)
        shutil.copyfile(os.path.join(LIB_DIR, "libexecutorch_cuda_backend.so"),
                        os.path.join(d, "libexecutorch_cuda_backend.so"))
        with open(os.path.join(d, "libexecutorch_cuda.so.0"), "wb") as f:
            f.write(b"\x7fELF truncated")
        rc, out = child(ENABLE.format(req=False), os.path.join(ROOT, "python"), SITE,
                        env={"EXECUTORCH_CUDA_LIB_DIR": d})
        self.assertEqual(rc, 0, out)
        self.assertIn("NativeLibraryError: executorch_cuda: cannot load " + os.path.join(d, "libexecutorch_cuda.so.0"),
                      out)

    def test_missing_executorch(self):
        rc, out = child(ENABLE.format(req=False), os.path.join(ROOT, "python"), env=self.env)
        self.assertEqual(rc, 0, out)
        self.assertIn("NativeLibraryError: executorch_cuda: the executorch package is not installed", out)


class TorchCheck(unittest.TestCase):
    """check_torch() with a given torch version and a stand-in executorch 1.5.1 (any machine)."""

    def run_with_torch(self, version):
        d = tempfile.mkdtemp(prefix="et_cuda_torch_")
        self.addCleanup(shutil.rmtree, d, True)
        site = os.path.join(d, "site")
        os.makedirs(os.path.join(site, "executorch"))
        with open(os.path.join(site, "executorch", "version.py"), "w") as f:
            f.write("__version__ = '1.5.1+cpu'\n")
        code = ("import executorch_cuda.runtime as r\n"
                f"try:\n    print('OK', r.check_torch({version!r}))\n"
                "except r.TorchVersionError as x:\n    print('TorchVersionError:', x)\n")
        return child(code, os.path.join(ROOT, "python"), site)

    def test_torch_2_11_refused(self):
        rc, out = self.run_with_torch("2.11.0+cu130")
        self.assertEqual(rc, 0, out)
        self.assertIn("TorchVersionError: executorch_cuda: executorch 1.5.1+cpu's Python runtime", out)
        self.assertIn("compiled against torch 2.13.x, but torch 2.11.0+cu130 is installed", out)
        self.assertIn("tensor does not have a device", out)

    def test_torch_2_13_accepted(self):
        rc, out = self.run_with_torch("2.13.0")
        self.assertEqual(rc, 0, out)
        self.assertIn("OK 2.13.0", out)


class _Info:
    def __init__(self, sizes, dtype, planned):
        self._s, self._d, self._p = sizes, dtype, planned

    def sizes(self):
        return self._s

    def dtype(self):
        return self._d

    def is_memory_planned(self):
        return self._p


class _Meta:
    def __init__(self, infos):
        self.infos = infos

    def num_inputs(self):
        return len(self.infos)

    def num_outputs(self):
        return 1

    def input_tensor_meta(self, i):
        return self.infos[i]


class _FakeMethod:
    def __init__(self, infos):
        self.metadata = _Meta(infos)
        self.calls = 0

    def execute(self, inputs):
        self.calls += 1
        return ["ran"]


@unittest.skipIf(torch is None, "torch is not installed here (the input checks need torch tensors)")
class InputChecks(unittest.TestCase):
    """Method.check: each wrong input is one InputError naming it; ExecuTorch is not called."""

    def method(self, planned=True):
        from executorch_cuda.runtime import Method

        fake = _FakeMethod([_Info([4, 32], 6, planned), _Info([4], 4, planned)])
        return Method("forward", fake), fake

    def bad(self, inputs, message, planned=True):
        from executorch_cuda.runtime import InputError

        m, fake = self.method(planned)
        with self.assertRaises(InputError) as cm:
            m.execute(inputs)
        self.assertIn(message, str(cm.exception))
        self.assertEqual(fake.calls, 0)

    def test_good(self):
        m, fake = self.method()
        self.assertEqual(m(torch.zeros(4, 32), torch.zeros(4, dtype=torch.int64)), ["ran"])
        self.assertEqual(m.execute([torch.zeros(2, 32), torch.zeros(2, dtype=torch.int64)]), ["ran"])

    def test_bad(self):
        ids = torch.zeros(4, dtype=torch.int64)
        self.bad([torch.zeros(4, 32)], "method 'forward' takes 2 inputs, got 1")
        self.bad([torch.zeros(4, 32, dtype=torch.float16), ids], "input 0: dtype float16, the method takes float32")
        self.bad([torch.zeros(4, 33), ids], "input 0: shape [4, 33], the method takes [4, 32]")
        self.bad([torch.zeros(4, 32, 1), ids], "input 0: shape [4, 32, 1]")
        self.bad([torch.zeros(32, 4).t(), ids], "input 0: not contiguous")
        self.bad([torch.zeros(4, 32, device="meta"), ids], "input 0: on device meta")
        self.bad([torch.zeros(4, 32).numpy(), ids], "input 0: expected a torch.Tensor, got ndarray")
        self.bad([torch.nn.Parameter(torch.zeros(4, 32)), ids], "expected a torch.Tensor, got Parameter")
        self.bad(torch.zeros(4, 32), "inputs must be a list or tuple")


@unittest.skipUnless(HAVE_LIBS and HAVE_ET and np is not None
                     and os.path.isfile(os.path.join(LIB_DIR, "libexecutorch_cuda_pybridge.so")),
                     NEED + ", the bridge library and numpy")
class Bridge(unittest.TestCase):
    """executorch_cuda.bridge (ExecuTorch's C++ Module through ctypes, any torch or none)
    on a CPU program (python/tests/data/linear_cpu.pte: Linear(4, 3), weight
    arange(12)/8 - 0.5, bias [0.25, -1, 2], exported with to_edge().to_executorch())."""

    pte = os.path.join(HERE, "data", "linear_cpu.pte")

    @classmethod
    def setUpClass(cls):
        os.environ["EXECUTORCH_CUDA_LIB_DIR"] = LIB_DIR
        sys.path.insert(0, SITE)
        from executorch_cuda import bridge

        cls.bridge = bridge
        cls.prog = bridge.load(cls.pte, require_device=False)

    def test_runs_a_cpu_program(self):
        w = np.arange(12, dtype=np.float32).reshape(3, 4) / 8 - 0.5
        b = np.array([0.25, -1.0, 2.0], np.float32)
        x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
        for inputs in ([x], [torch.from_numpy(x)] if torch is not None else [x]):
            (y,) = self.prog.forward.execute(inputs)
            np.testing.assert_allclose(np.asarray(y), x @ w.T + b, rtol=1e-6, atol=1e-6)
        # Outputs are copies: the next execute does not change an earlier result.
        (y1,) = self.prog.forward(x)
        (y2,) = self.prog.forward(x * 2)
        np.testing.assert_allclose(np.asarray(y1), x @ w.T + b, rtol=1e-6, atol=1e-6)
        self.assertFalse(np.allclose(np.asarray(y1), np.asarray(y2)))

    def test_load_takes_the_bridge_when_executorch_runtime_cannot_run(self):
        import warnings

        import executorch_cuda
        from executorch_cuda import runtime

        why = runtime._why_not_executorch_runtime()
        if why is None:
            self.skipTest("torch matches executorch.runtime's bindings here: load() takes executorch.runtime")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            prog = executorch_cuda.load(self.pte, require_device=False)
        self.assertEqual(prog.runtime, "bridge")
        self.assertTrue(any("running through executorch_cuda.bridge" in str(w.message) for w in seen), seen)
        (y,) = prog.forward(np.ones((2, 4), np.float32))
        self.assertEqual(list(np.asarray(y).shape), [2, 3])
        self.assertEqual(executorch_cuda.load(self.pte, require_device=False, runtime="bridge").runtime, "bridge")
        with self.assertRaises(ValueError):
            executorch_cuda.load(self.pte, require_device=False, runtime="pybind")

    def test_bad_inputs(self):
        from executorch_cuda import InputError

        x = np.zeros((2, 4), np.float32)
        cases = [([x.astype(np.float64)], "input 0: dtype float64, the method takes float32"),
                 ([np.zeros((2, 5), np.float32)], "input 0: shape [2, 5], the method takes [2, 4]"),
                 ([x, x], "method 'forward' takes 1 inputs, got 2"),
                 (["x"], "input 0: expected a numpy array or torch tensor, got str"),
                 ([np.zeros((4, 2), np.float32).T], "input 0: not contiguous"),
                 (x, "inputs must be a list or tuple")]
        for inputs, message in cases:
            with self.assertRaises(InputError) as cm:
                self.prog.forward.execute(inputs)
            self.assertIn(message, str(cm.exception))
        (y,) = self.prog.forward(x)  # still runs
        self.assertEqual(list(np.asarray(y).shape), [2, 3])

    def test_bundle_layout_with_another_executorch_installed(self):
        """The GPU bundle's layout (our libraries and ExecuTorch's next to each other)
        with an executorch package of another version importable: the bridge uses the
        copies next to ours; enable() for executorch.runtime refuses the package."""
        d = tempfile.mkdtemp(prefix="et_cuda_bundle_")
        self.addCleanup(shutil.rmtree, d, True)
        for n in ("libexecutorch_cuda_backend.so", "libexecutorch_cuda.so.0", "libexecutorch_cuda_pybridge.so"):
            shutil.copyfile(os.path.join(LIB_DIR, n), os.path.join(d, n))
        for n in ("libexecutorch.so", "libexecutorch_threadpool.so", "libexecutorch_kernels_optimized.so"):
            shutil.copyfile(os.path.join(SITE, "executorch", "lib", n), os.path.join(d, n))
        other = os.path.join(d, "site")
        os.makedirs(os.path.join(other, "executorch"))
        with open(os.path.join(other, "executorch", "version.py"), "w") as f:
            f.write("__version__ = '1.2.0'\n")
        code = ("import numpy as np, executorch_cuda as e\nfrom executorch_cuda import bridge\n"
                "try:\n    e.enable(require_device=False)\n"
                "except e.ExecutorchVersionError as x:\n    print('runtime path:', x)\n"
                "import executorch_cuda.native as n\nn._state['enabled'] = None\n"
                f"p = bridge.load({self.pte!r}, require_device=False)\n"
                "(y,) = p.forward(np.ones((2, 4), np.float32))\n"
                "print('bridge', p.backend['executorch'], np.asarray(y)[0].tolist())\n")
        rc, out = child(code, os.path.join(ROOT, "python"), other, os.path.dirname(os.path.dirname(np.__file__)),
                        env={"EXECUTORCH_CUDA_LIB_DIR": d}, hide_torch=False)
        self.assertEqual(rc, 0, out)
        self.assertIn("runtime path: executorch_cuda: the adapter", out)
        self.assertIn("but executorch 1.2.0 is installed", out)
        self.assertIn(f"(the copy in {d}) [-1.0, -0.25, 4.75]", out)

    def test_bad_programs(self):
        with self.assertRaises(FileNotFoundError):
            self.bridge.load(os.path.join(HERE, "data", "missing.pte"), require_device=False)
        with tempfile.NamedTemporaryFile(suffix=".pte") as f:
            with open(self.pte, "rb") as src:
                f.write(src.read()[:200])
            f.flush()
            with self.assertRaises(RuntimeError) as cm:
                self.bridge.load(f.name, require_device=False)
            self.assertIn("cannot load program", str(cm.exception))
        with self.assertRaises(RuntimeError) as cm:
            self.prog.method("backward")
        self.assertIn("no method 'backward'", str(cm.exception))


def _compile_reference(tmp):
    """The runner's sampler (runner/sampling.cpp over the library's et_cuda_sample_host), or
    None without a C++ compiler or the built library (EXECUTORCH_CUDA_LIB_DIR)."""
    cxx = shutil.which("c++") or shutil.which("g++")
    lib_dir = os.environ.get("EXECUTORCH_CUDA_LIB_DIR", "")
    if cxx is None or not os.path.exists(os.path.join(lib_dir, "libexecutorch_cuda.so")):
        return None
    exe = os.path.join(tmp, "sampler_ref")
    r = subprocess.run([cxx, "-std=c++17", "-O1", "-I", os.path.join(ROOT, "runner"),
                        "-I", os.path.join(ROOT, "include"),
                        os.path.join(HERE, "sampler_ref.cpp"), os.path.join(ROOT, "runner", "sampling.cpp"),
                        "-L", lib_dir, "-Wl,-rpath," + os.path.abspath(lib_dir), "-Wl,--no-as-needed",
                        "-lexecutorch_cuda", "-ldl",
                        "-o", exe], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(r.stdout + r.stderr)
    return exe


@unittest.skipIf(np is None, "numpy is not installed here (the sampler needs it)")
class SamplerParity(unittest.TestCase):
    """executorch_cuda.sampling's numpy sampler picks what the runner's host sampler (the
    library's et_cuda_sample_host, through runner/sampling.cpp) picks: two implementations."""

    def test_same_tokens_as_the_runner(self):
        from executorch_cuda.sampling import Sampler, draw

        self.assertEqual(draw(7, 0), draw(7, 0))
        tmp = tempfile.mkdtemp(prefix="et_cuda_sampler_")
        self.addCleanup(shutil.rmtree, tmp, True)
        exe = _compile_reference(tmp)
        if exe is None:
            self.skipTest("no C++ compiler, or no built library (EXECUTORCH_CUDA_LIB_DIR), for the runner's sampler")
        rng = np.random.default_rng(3)
        v = 5000
        # Peaked rows (mostly the argmax) and flat ones (the draw and the top-p set decide).
        rows = [rng.standard_normal(v).astype(np.float32) * s for s in [4.0] * 20 + [0.3] * 20]
        tied = np.round(rng.standard_normal(v) * 2).astype(np.float32)  # many equal logits
        rows += [tied] * 20
        special = rng.standard_normal(v).astype(np.float32)
        special[::7] = -np.inf
        special[3] = np.nan
        rows += [special] * 5
        rows.append(np.full(v, -np.inf, np.float32))
        path = os.path.join(tmp, "rows.f32")
        np.concatenate(rows).astype(np.float32).tofile(path)
        for t, p, seed in ((0, 1, 0), (0.8, 1, 7), (0.8, 0.9, 7), (1.5, 0.5, 11), (0.3, 0.95, 2)):
            r = subprocess.run([exe, path, str(v), str(t), str(p), str(seed)], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            want = [int(x) for x in r.stdout.split()]
            s = Sampler(t, p, seed)
            got = [s.pick_host(row) for row in rows]
            self.assertEqual(got, want, f"temperature={t} top_p={p} seed={seed}")
            self.assertEqual(want[-1], -1 if t > 0 else 0)
            if t > 0:  # the flat rows' tokens are not simply their argmax
                self.assertGreater(sum(w != int(np.argmax(r)) for w, r in zip(want[20:40], rows[20:40])), 10)


if __name__ == "__main__":
    unittest.main()
