"""Builds prefixkv's extension module with the project's own CMake build
(pyproject.toml holds the metadata; docs/python.md, "pip install").

The module is the CMake target prefixkv_python_module (python/CMakeLists.txt):
configured in build/pip with the interpreter running this build (Release,
no -Werror), or built in an existing build directory named by
PREFIXKV_BUILD_DIR (configured for the same interpreter; CI reuses
build/release, so nothing is compiled twice). PREFIXKV_JOBS: parallel jobs.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
TARGET = "prefixkv_python_module"


def project_version():
    """The version of CMakeLists.txt's project(): one source of it."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(prefixkv VERSION ([0-9.]+)", text).group(1)


def cached(build_dir, name):
    """A variable's value in build_dir's CMakeCache.txt, or None."""
    match = re.search(rf"^{name}:[A-Z]+=(.*)$",
                      (build_dir / "CMakeCache.txt").read_text(), re.MULTILINE)
    return match.group(1) if match else None


class CMakeBuild(build_ext):
    """build_ext that runs CMake for the module and copies it into place."""

    def build_extension(self, ext):
        build_dir = self.configured_build_dir()
        jobs = os.environ.get("PREFIXKV_JOBS", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", TARGET, "-j", jobs],
                       check=True)
        built = sorted((build_dir / "python" / "prefixkv").glob("_prefixkv*.so"))
        if len(built) != 1:
            sys.exit(f"prefixkv: expected one _prefixkv*.so in {build_dir}/python/prefixkv, "
                     f"found {[p.name for p in built]}")
        dest = pathlib.Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], dest)

    def configured_build_dir(self):
        given = os.environ.get("PREFIXKV_BUILD_DIR")
        build_dir = pathlib.Path(given).resolve() if given else ROOT / "build" / "pip"
        if given and not (build_dir / "CMakeCache.txt").exists():
            sys.exit(f"prefixkv: PREFIXKV_BUILD_DIR={given} is not a configured CMake "
                     "build directory")
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir),
                            "-DCMAKE_BUILD_TYPE=Release", "-DPREFIXKV_PYTHON=ON",
                            f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        python = cached(build_dir, "Python3_EXECUTABLE")
        if python is None or cached(build_dir, "pybind11_DIR") in (None, "pybind11_DIR-NOTFOUND"):
            sys.exit(f"prefixkv: {build_dir} builds no Python module (CMake found no "
                     "Python 3 with numpy or no pybind11: install python3-dev "
                     "python3-numpy pybind11-dev)")
        if os.path.realpath(python) != os.path.realpath(sys.executable):
            sys.exit(f"prefixkv: {build_dir} builds the module for {python}, not for "
                     f"{sys.executable}; run pip with that interpreter or unset "
                     "PREFIXKV_BUILD_DIR")
        return build_dir


setup(version=project_version(),
      ext_modules=[Extension("prefixkv._prefixkv", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
