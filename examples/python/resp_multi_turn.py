#!/usr/bin/env python3
"""A multi-turn conversation stored in and matched from `prefixkv serve` over
RESP with redis-py: PKV.REGISTER, then per turn PKV.MATCH (what is cached),
PKV.PUT (only the new blocks), and at the end PKV.MATCH + PKV.GET of the
whole conversation, compared byte for byte with the records sent.

The records are built with the Python package (prefixkv.resp.Model); the KV
values are random (seeded) stand-ins for a model's caches. docs/protocol.md
shows `converse` below; python/tests/test_resp_records.py runs it against a
server it starts and checks that the two stay the same code.

Run: prefixkv serve --port 6380 &  then
     tools/run python examples/python/resp_multi_turn.py --port 6380
"""
import argparse
import sys

import numpy as np

import prefixkv

LAYERS, HEADS, HEAD_DIM, BLOCK_TOKENS = 2, 2, 8, 4


def conversation_kv(rng, tokens):
    """Per layer [keys, values] of the whole conversation, [1, heads, tokens, dim]."""
    shape = (1, HEADS, tokens, HEAD_DIM)
    return [[rng.standard_normal(shape).astype(np.float16) for _ in range(2)]
            for _ in range(LAYERS)]


# --- docs/protocol.md: begin ---
def converse(r, turns, kv):
    """Stores each turn's prompt (a list of token lists, growing) and returns
    the records of the last one, as PKV.GET gives them back."""
    model = prefixkv.resp.Model("llama-3-8b", ["KVCache"] * LAYERS,
                                block_tokens=BLOCK_TOKENS, dtype="float16")
    assert r.execute_command(*model.register_args()).decode() == model.root
    for tokens in turns:
        cached, _ = r.execute_command(*model.match_args(tokens))
        layers = [[np.ascontiguousarray(t[:, :, :len(tokens)]) for t in layer] for layer in kv]
        records = model.encode_store(tokens, layers)  # one per full block
        if records[cached:]:  # what the server lacks (nothing when run again)
            reply = r.execute_command(*model.put_args(records[cached:]))
            assert dict(zip(reply[::2], reply[1::2]))[b"written"] == len(records) - cached
    cached, keys = r.execute_command(*model.match_args(turns[-1]))
    assert cached == len(records)
    stored = [r.execute_command(*model.get_args(key)) for key in keys]
    assert stored == records  # the same bytes
    return [prefixkv.decode_block(b) for b in stored]
# --- docs/protocol.md: end ---


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=6380)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    import redis  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(args.seed)
    turns = [list(range(10)), list(range(10)) + list(range(100, 107)),
             list(range(10)) + list(range(100, 107)) + list(range(200, 213))]
    kv = conversation_kv(rng, len(turns[-1]))
    blocks = converse(redis.Redis(port=args.port), turns, kv)
    print(f"{len(turns)} turns, {len(blocks)} blocks matched and read back unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
