"""A conversation: each turn restores what the earlier turns stored and
stores only its new blocks."""
import pathlib
import types

import numpy as np

import prefixkv
from conftest import kv_layers, register


def test_each_turn_reuses_the_conversation_so_far(engine, rng):
    ns = register(engine, layers=2, block_tokens=4)
    history = []
    full = kv_layers(rng, 2, 0)  # grows with the conversation
    for turn in range(5):
        prompt = history + list(range(1000 * turn, 1000 * turn + 6))
        r = engine.restore(engine.match(ns, prompt))
        assert r.restored_tokens == len(history) // 4 * 4
        for l in range(2):
            for t in range(2):
                np.testing.assert_array_equal(r.layers[l].tensors[t] if r.layers else
                                              full[l][t][:, :, :0],
                                              full[l][t][:, :, :r.restored_tokens])
        new = kv_layers(rng, 2, len(prompt) - r.restored_tokens)
        full = [[np.concatenate([full[l][t][:, :, :r.restored_tokens], new[l][t]], axis=2)
                 for t in range(2)] for l in range(2)]
        stored = engine.store(ns, prompt, full)
        assert stored.blocks == len(prompt) // 4
        assert stored.blocks_deduplicated == r.restored_tokens // 4
        assert stored.blocks_written == stored.blocks - stored.blocks_deduplicated
        history = prompt
    assert engine.audit()["ok"]


def connector_snippet():
    """The Python block of docs/integrations.md, "A connector over the Python
    API"."""
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" /
           "integrations.md").read_text()
    section = doc.split("## A connector over the Python API", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


class PagedLayer:
    """A serving engine's paged cache of one layer, as the snippet's
    `cache.write(0, n, keys, values)` fills it."""

    def __init__(self):
        self.written = None

    def write(self, start, count, keys, values):
        self.written = (start, count, np.array(keys), np.array(values))


def test_the_integrations_connector_snippet_runs_as_written(data_dir, rng):
    """docs/integrations.md's connector, run as written (only Engine.open's
    sizes and directory swapped for the test's): the second turn's load_kv
    copies the first turn's stored KV into every layer's pages."""
    real_open = prefixkv.Engine.open
    shim = types.SimpleNamespace(Engine=types.SimpleNamespace(
        open=lambda **_: real_open(data_dir=data_dir, hot_bytes=64 << 20, quiet=True)))
    scope = {"prefixkv": shim}  # the snippet's globals: its functions use engine, ns
    exec(compile(connector_snippet().replace("import prefixkv\n", ""),
                 "integrations.md", "exec"), scope)
    engine = scope["engine"]
    try:
        turn1 = list(range(40))
        kv = kv_layers(rng, 32, len(turn1), dtype=np.float16)
        scope["save_kv"](turn1, kv)
        matched, m = scope["get_num_matched_tokens"](turn1 + [7, 8, 9])
        assert matched == 32
        pages = [PagedLayer() for _ in range(32)]
        assert scope["load_kv"](m, pages) == 32
        for page, (keys, values) in zip(pages, kv):
            start, count, got_keys, got_values = page.written
            assert (start, count) == (0, 32)
            np.testing.assert_array_equal(got_keys, keys[:, :, :32])
            np.testing.assert_array_equal(got_values, values[:, :, :32])
    finally:
        engine.close()
