#!/usr/bin/env python3
"""ctest python.pip_install (issue 26): `pip install .` of this checkout into a
temporary prefix, offline (--no-build-isolation --no-index: Debian's
setuptools and wheel, nothing downloaded), then the whole pytest suite run
against the installed copy, not the build tree (conftest.py checks that
prefixkv is imported from PREFIXKV_PACKAGE_DIR).

PREFIXKV_BUILD_DIR (ctest sets it to the build directory) makes setup.py
build the module there, where it is already built: the test checks the
packaging, not a second compile. Exits with pytest's status.
"""
import glob
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    with tempfile.TemporaryDirectory(prefix="prefixkv-pip-") as tmp:
        prefix = os.path.join(tmp, "prefix")
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-index", "--no-cache-dir", "--quiet", "--prefix", prefix,
                        str(ROOT)], check=True)
        print(f"pip install: {time.monotonic() - started:.1f} s")
        # Debian's pip puts a prefix's packages in local/lib/python3.X/dist-packages.
        inits = glob.glob(os.path.join(prefix, "**", "prefixkv", "__init__.py"),
                          recursive=True)
        assert len(inits) == 1, inits
        package_dir = os.path.dirname(inits[0])
        env = dict(os.environ, PYTHONPATH=os.path.dirname(package_dir),
                   PREFIXKV_PACKAGE_DIR=package_dir, PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-rs", str(ROOT / "python" / "tests")], cwd=tmp,
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
