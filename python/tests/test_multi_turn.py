"""A conversation: each turn restores what the earlier turns stored and
stores only its new blocks."""
import numpy as np

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
