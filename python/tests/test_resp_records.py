"""Records from Python (issue 26): the block codec (BlockRecord, encode_block,
decode_block, chain_key, namespace_root) and prefixkv.resp, driving a real
`prefixkv serve` with redis-py through examples/python/resp_multi_turn.py."""
import importlib.util
import pathlib

import numpy as np
import pytest

import prefixkv
from conftest import kv_layers, register
from servers import prefixkv_serve

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "resp_multi_turn.py"


def load_example():
    spec = importlib.util.spec_from_file_location("resp_multi_turn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_keys_are_the_engines(engine):
    ns = register(engine, layers=2, block_tokens=4)
    assert prefixkv.namespace_root("test-model", ["KVCache"] * 2, block_tokens=4,
                                   dtype="float32") == ns.root
    engine.store(ns, list(range(8)), kv_layers(np.random.default_rng(0), 2, 8))
    keys = engine.match(ns, list(range(8))).keys
    assert prefixkv.chain_key(ns.root, [0, 1, 2, 3]) == keys[0]
    assert prefixkv.chain_key(keys[0], [4, 5, 6, 7]) == keys[1]


def test_a_record_round_trips_through_the_codec(rng):
    root = prefixkv.namespace_root("m", ["KVCache", "RotatingKVCache"], block_tokens=4,
                                   dtype="bfloat16")
    tokens = [5, 6, 7, 8]
    kv = [rng.integers(0, 1 << 16, (1, 2, 4, 8), dtype=np.uint16) for _ in range(2)]
    record = prefixkv.BlockRecord(
        prefixkv.chain_key(root, tokens), root, root, 4,
        [prefixkv.Layer("KVCache", kv), prefixkv.Layer("RotatingKVCache", [], placeholder=True)],
        tokens=tokens)
    for compress in (False, True):
        decoded = prefixkv.decode_block(prefixkv.encode_block(record, compress=compress))
        assert (decoded.key, decoded.parent, decoded.namespace_id) == (record.key, root, root)
        assert decoded.tokens == tokens and decoded.token_count == 4 and not decoded.partial
        assert [l.cache_type for l in decoded.layers] == ["KVCache", "RotatingKVCache"]
        assert decoded.layers[1].placeholder and not decoded.layers[0].placeholder
        for got, want in zip(decoded.layers[0].tensors, kv):
            assert got.dtype == np.uint16  # bfloat16 bits, bit-exact
            np.testing.assert_array_equal(got, want)


def test_encode_store_gives_the_records_the_engine_stores(engine, rng):
    ns = register(engine, layers=2, block_tokens=4)
    layers = kv_layers(rng, 2, 10)
    engine.store(ns, list(range(10)), layers)
    model = prefixkv.resp.Model("test-model", ["KVCache"] * 2, block_tokens=4,
                                dtype="float32")
    records = model.encode_store(list(range(10)), layers)
    keys = engine.match(ns, list(range(10))).keys
    assert records == [engine.get_block(ns, k) for k in keys] and len(records) == 2
    second = prefixkv.decode_block(records[1])
    np.testing.assert_array_equal(second.layers[1].tensors[0], layers[1][0][:, :, 4:8])


def test_a_damaged_record_is_corruption(engine, rng):
    model = prefixkv.resp.Model("m", ["KVCache"], block_tokens=4, dtype="float32")
    record = bytearray(model.encode_store([1, 2, 3, 4], kv_layers(rng, 1, 4))[0])
    record[-1] ^= 0x40
    with pytest.raises(prefixkv.Corruption):
        prefixkv.decode_block(bytes(record))
    with pytest.raises(prefixkv.Corruption):
        prefixkv.decode_block(b"PKVB")


def test_bad_records_are_refused_with_the_reason(rng):
    root = prefixkv.namespace_root("m", ["KVCache"], block_tokens=4)
    layer = prefixkv.Layer("KVCache", [np.zeros((1, 4), np.float16)])
    with pytest.raises(prefixkv.InvalidArgument, match="key: "):
        prefixkv.encode_block(prefixkv.BlockRecord("xyz", root, root, 4, [layer]))
    with pytest.raises(prefixkv.InvalidArgument, match="layer 0: a prefixkv.Layer"):
        prefixkv.encode_block(prefixkv.BlockRecord(root, root, root, 4, [[]]))
    bad = prefixkv.Layer("KVCache", ["not an array"])
    with pytest.raises(prefixkv.InvalidArgument, match="layer 0 tensor 0: not a numpy"):
        prefixkv.encode_block(prefixkv.BlockRecord(root, root, root, 4, [bad]))
    odd = prefixkv.Layer("KVCache", [np.zeros((1, 4), np.complex64)])
    with pytest.raises(prefixkv.InvalidArgument, match="no block format type"):
        prefixkv.encode_block(prefixkv.BlockRecord(root, root, root, 4, [odd]))
    with pytest.raises(prefixkv.InvalidArgument):
        prefixkv.namespace_root("m", ["NoSuchCache"])


def test_a_multi_turn_conversation_over_resp(tmp_path, rng):
    example = load_example()
    turns = [list(range(10)), list(range(10)) + list(range(100, 107)),
             list(range(10)) + list(range(100, 107)) + list(range(200, 213))]
    kv = example.conversation_kv(rng, len(turns[-1]))
    with prefixkv_serve(tmp_path / "pkv", "--hot-capacity-bytes", "16M") as (_, r):
        blocks = example.converse(r, turns, kv)
        again = example.converse(r, turns, kv)  # everything cached: nothing to put
        assert [b.key for b in again] == [b.key for b in blocks]
        assert r.execute_command("PKV.GET", blocks[0].namespace_id, "0" * 32) is None
    assert len(blocks) == 7 and blocks[0].parent == blocks[0].namespace_id
    for i, block in enumerate(blocks):
        assert block.tokens == turns[-1][4 * i:4 * i + 4]
        for got, want in zip(block.layers, kv):
            for g, w in zip(got.tensors, want):
                np.testing.assert_array_equal(g, w[:, :, 4 * i:4 * i + 4])


def test_the_protocol_docs_show_the_example_as_it_runs():
    source = EXAMPLE.read_text()
    begin, end = "# --- docs/protocol.md: begin ---\n", "# --- docs/protocol.md: end ---"
    shown = source[source.index(begin) + len(begin):source.index(end)]
    assert shown in (ROOT / "docs" / "protocol.md").read_text()
