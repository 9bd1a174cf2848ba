"""Build hook of the Python package (pyproject.toml): the version from Cargo.toml,
and, when EXECUTORCH_CUDA_NATIVE_DIR names a folder holding the built libraries
(a CMake build folder or an install's lib/), a platform wheel carrying them in
executorch_cuda/lib/. Without it the wheel is pure Python and finds the
libraries at run time (python/executorch_cuda/native.py)."""

import os
import re
import shutil
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = ("libexecutorch_cuda_backend.so", "libexecutorch_cuda.so.0")
OPTIONAL = ("libexecutorch_cuda_pybridge.so",)  # executorch_cuda.bridge, when built


def cargo_version():
    with open(os.path.join(HERE, "Cargo.toml"), encoding="utf-8") as f:
        m = re.search(r'^version = "([0-9.]+)"', f.read(), re.M)
    if not m:
        raise SystemExit("setup.py: no version in Cargo.toml")
    return m.group(1)


def native_dir():
    d = os.environ.get("EXECUTORCH_CUDA_NATIVE_DIR")
    if not d:
        return None
    missing = [n for n in NATIVE if not os.path.isfile(os.path.join(d, n))]
    if missing:
        raise SystemExit(f"setup.py: EXECUTORCH_CUDA_NATIVE_DIR={d} has no {', '.join(missing)} "
                         "(build first: scripts/build_wheel.sh, or cmake --build build)")
    return d


class BuildPy(build_py):
    def run(self):
        # Start from an empty package folder: the scratch build folder outlives builds,
        # and a module or library left there by an earlier one would be packaged.
        shutil.rmtree(os.path.join(self.build_lib, "executorch_cuda"), ignore_errors=True)
        super().run()
        d = native_dir()
        if d:
            out = os.path.join(self.build_lib, "executorch_cuda", "lib")
            os.makedirs(out, exist_ok=True)
            for n in NATIVE + tuple(o for o in OPTIONAL if os.path.isfile(os.path.join(d, o))):
                # The real file (the build folder's .so.0 may be a copy or a link).
                shutil.copyfile(os.path.realpath(os.path.join(d, n)), os.path.join(out, n))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return native_dir() is not None


class BdistWheel(bdist_wheel):
    def get_tag(self):
        python, abi, plat = super().get_tag()
        if native_dir() is not None:
            # C libraries with no Python ABI: any Python 3 on this platform.
            return "py3", "none", sysconfig.get_platform().replace("-", "_").replace(".", "_")
        return python, abi, plat


# Scratch folders under .dev/ (ignored): build/ is CMake's.
SCRATCH = os.path.join(".dev", "pybuild")
os.makedirs(os.path.join(HERE, SCRATCH), exist_ok=True)
setup(version=cargo_version(), distclass=BinaryDistribution,
      cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel},
      options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}})
