"""Shared fixtures of the prefixkv pytest suite (run by ctest: python/CMakeLists.txt)."""
import os
import random

import numpy as np
import pytest

import prefixkv

# python.pip_install (install_and_test.py) runs the suite against an installed
# copy: it must be the one imported, not the build tree's.
if os.environ.get("PREFIXKV_PACKAGE_DIR"):
    assert os.path.dirname(prefixkv.__file__) == os.environ["PREFIXKV_PACKAGE_DIR"], \
        f"prefixkv imported from {prefixkv.__file__}"

SEED = int(os.environ.get("PREFIXKV_SEED", random.randrange(1 << 32)))
print(f"[seed] python suite: PREFIXKV_SEED={SEED}")


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "pkv")


@pytest.fixture
def engine(data_dir):
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=64 << 20, quiet=True) as e:
        yield e


def kv_layers(rng, layers, tokens, heads=2, dim=8, dtype=np.float32):
    """Per layer [keys, values], each [1, heads, tokens, dim] of `dtype`
    (uint16: bfloat16 bits)."""
    out = []
    for _ in range(layers):
        pair = []
        for _ in range(2):
            if dtype == np.uint16:
                pair.append(rng.integers(0, 1 << 16, (1, heads, tokens, dim), dtype=np.uint16))
            else:
                pair.append(rng.standard_normal((1, heads, tokens, dim)).astype(dtype))
        out.append(pair)
    return out


def register(engine, layers=2, block_tokens=4, dtype="float32", **kw):
    return engine.register_model("test-model", ["KVCache"] * layers,
                                 block_tokens=block_tokens, dtype=dtype, **kw)
