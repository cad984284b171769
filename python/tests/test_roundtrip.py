"""Store then restore returns the same bytes, for every supported dtype."""
import ctypes

import numpy as np
import pytest

import prefixkv
from conftest import kv_layers, register


@pytest.mark.parametrize("dtype,np_dtype", [("float32", np.float32), ("float16", np.float16),
                                            ("bfloat16", np.uint16)])
def test_a_stored_prompt_restores_byte_for_byte(engine, rng, dtype, np_dtype):
    ns = register(engine, dtype=dtype)
    tokens = list(range(100, 120))  # 5 blocks of 4
    layers = kv_layers(rng, 2, len(tokens), dtype=np_dtype)
    stored = engine.store(ns, tokens, layers)
    assert (stored.blocks, stored.blocks_written) == (5, 5)
    m = engine.match(ns, tokens)
    assert m.matched_tokens == 20 and m.tiers == ["hot"] * 5
    r = engine.restore(m)
    assert (r.restored_tokens, r.restored_blocks, r.blocks_from_hot) == (20, 5, 5)
    assert r.reason == ""
    assert len(r.layers) == 2
    for got, want in zip(r.layers, layers):
        assert got.cache_type == "KVCache"
        assert [t.dtype for t in got.tensors] == [np.dtype(np_dtype)] * 2
        for g, w in zip(got.tensors, want):
            np.testing.assert_array_equal(g, w)


def test_a_longer_prompt_restores_its_cached_full_blocks(engine, rng):
    ns = register(engine)
    layers = kv_layers(rng, 2, 10)
    engine.store(ns, np.arange(10, dtype=np.int64), layers)  # 2 full blocks, tail left
    r = engine.restore(engine.match(ns, list(range(10)) + [77, 78, 79]))
    assert r.restored_tokens == 8
    np.testing.assert_array_equal(r.layers[1].tensors[0], layers[1][0][:, :, :8])
    miss = engine.restore(engine.match(ns, [5, 6, 7, 8]))
    assert miss.restored_tokens == 0 and miss.layers == []


def test_layer_objects_carry_type_and_meta(engine, rng):
    ns = register(engine)
    keys, values = kv_layers(rng, 1, 8)[0]
    layer = prefixkv.Layer("KVCache", [keys, values], meta=["8"])
    engine.store(ns, list(range(8)), [layer, [keys, values]])
    r = engine.restore(engine.match(ns, list(range(8))))
    assert r.layers[0].meta == ["8"], "the newest block's meta, rewritten to its end"
    np.testing.assert_array_equal(r.layers[0].tensors[1], values)


def test_stats_and_audit_report_the_tiers(engine, rng):
    ns = register(engine)
    engine.store(ns, list(range(8)), kv_layers(rng, 2, 8))
    s = engine.stats()
    assert s["hot"]["entries"] == 2 and s["dirty_blocks"] == 2 and s["has_ssd"]
    assert s["owners"][0]["name"] == "test-model"
    engine.restore(engine.match(ns, list(range(8))))
    latency = engine.stats()["owners"][0]["restore_latency"]
    assert latency["count"] == 1 == sum(latency["counts"]), "restore() is a timed Restore"
    assert len(latency["counts"]) == len(latency["bucket_bounds_micros"]) + 1
    # Token counters: 8 tokens asked and found by match(), 8 restored from RAM.
    tokens = engine.stats()["owners"][0]["prefix_tokens"]
    assert tokens == {"prefix_query_tokens": 8, "prefix_hit_tokens": 8,
                      "restored_tokens_hot": 8, "restored_tokens_ssd": 0,
                      "restored_tokens_remote": 0, "shape_refused_stores": 0,
                      "shape_refused_tokens": 0}
    assert s["hot"]["bytes"] <= s["hot_capacity_bytes"]
    # The memory resource's regions, next to the bytes the budget charges
    # (the arena may map a region ahead meanwhile; nothing is unmapped here).
    before = sum(n for _, n in engine.memory_regions())
    s = engine.stats()
    after = engine.memory_regions()
    assert before <= s["memory_mapped_bytes"] <= sum(n for _, n in after)
    assert 1 <= s["memory_regions"] <= len(after)
    assert s["memory_mapped_bytes"] >= s["hot"]["bytes"]
    engine.flush()
    assert engine.stats()["dirty_blocks"] == 0
    audit = engine.audit()
    assert audit == {"ok": True, "findings": [], "orphans": []}


def test_stats_carry_the_capacity_advisors_estimates(engine, rng):
    ns = register(engine)
    # 1,024 blocks of 4 tokens: about 128 sampled (the advisor samples at most 1/8).
    tokens = list(range(4096))
    engine.store(ns, tokens, kv_layers(rng, 2, len(tokens), heads=1, dim=2))
    engine.restore(engine.match(ns, tokens))
    a = engine.stats()["advisor"]
    assert a["sampling_rate"] == 0.125 and a["references"] >= 100, "puts, restored reads"
    hot = [p for p in a["points"] if p["tier"] == "hot"]
    assert [p["factor"] for p in hot] == [0.25, 0.5, 1, 2, 4, 8]
    capacity = engine.stats()["hot_capacity_bytes"]
    assert [p["capacity_bytes"] for p in hot] == [int(f * capacity) for f in (0.25, 0.5, 1, 2, 4, 8)]
    assert all(0 <= p["hit_ratio"] <= 1 for p in a["points"])
    assert abs(hot[-1]["hit_ratio"] - 0.5) < 0.1, "each block read once after its store"


def test_the_context_manager_closes_the_engine(data_dir):
    with prefixkv.Engine.open(data_dir=data_dir, quiet=True) as e:
        assert not e.closed
    assert e.closed
    e.close()  # idempotent


def test_a_ram_only_engine_needs_no_directory(rng):
    with prefixkv.Engine.open(hot_bytes=1 << 20) as e:
        ns = register(e)
        layers = kv_layers(rng, 2, 4)
        e.store(ns, [1, 2, 3, 4], layers)
        assert not e.stats()["has_ssd"]
        np.testing.assert_array_equal(e.restore(e.match(ns, [1, 2, 3, 4])).layers[0].tensors[0],
                                      layers[0][0])


def test_a_store_hinted_unlikely_leaves_the_hot_tier_first(data_dir, rng, tmp_path):
    with prefixkv.Engine.open(data_dir=str(tmp_path / "probe"), hot_bytes=64 << 20,
                              quiet=True) as probe:
        probe.store(register(probe), list(range(4)), kv_layers(rng, 2, 4))
        block = probe.stats()["hot"]["bytes"]
    # Room for 4 blocks; a (no hint) is older than b (hinted).
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=4 * block, quiet=True) as e:
        ns = register(e)
        a = e.store(ns, list(range(8)), kv_layers(rng, 2, 8))
        b = e.store(ns, list(range(100, 108)), kv_layers(rng, 2, 8), reuse="unlikely")
        assert (a.blocks_hinted_unlikely, b.blocks_hinted_unlikely) == (0, 2)
        e.store(ns, list(range(200, 208)), kv_layers(rng, 2, 8))  # evicts two blocks
        assert e.match(ns, list(range(8))).tiers == ["hot", "hot"]
        assert e.match(ns, list(range(100, 108))).tiers == ["ssd", "ssd"]
        # A prefixkv.Error, as every failure (it was a bare ValueError), and
        # still a ValueError.
        with pytest.raises(prefixkv.InvalidArgument, match="reuse must be"):
            e.store(ns, list(range(8)), kv_layers(rng, 2, 8), reuse="never")


# --- restore_into: your own memory ------------------------------------------

def blank_dests(layers, tokens, heads=2, dim=8, dtype=np.float32, fill=-7):
    """Per layer [keys, values] arrays of `tokens` positions, filled with `fill`."""
    return [[np.full((1, heads, tokens, dim), fill, dtype) for _ in range(2)]
            for _ in range(layers)]


@pytest.mark.parametrize("dtype,np_dtype", [("float32", np.float32), ("float16", np.float16),
                                            ("bfloat16", np.uint16)])
def test_restore_into_writes_what_restore_returns(engine, rng, dtype, np_dtype):
    ns = register(engine, dtype=dtype)
    tokens = list(range(100, 120))
    layers = kv_layers(rng, 2, len(tokens), dtype=np_dtype)
    engine.store(ns, tokens, layers)
    m = engine.match(ns, tokens + [1, 2])
    want = engine.restore(m)
    dests = blank_dests(2, 20, dtype=np_dtype, fill=0)
    told = []
    got = engine.restore_into(m, dests, on_layer=told.append)
    assert told == [0, 1]
    assert (got.restored_tokens, got.restored_blocks, got.blocks_from_hot) == (20, 5, 5)
    assert got.reason == want.reason and got.window_tokens == want.window_tokens
    for l in range(2):
        assert got.layers[l].cache_type == want.layers[l].cache_type
        assert got.layers[l].meta == want.layers[l].meta
        for t in range(2):
            np.testing.assert_array_equal(dests[l][t], want.layers[l].tensors[t])
            view = got.layers[l].tensors[t]
            assert np.shares_memory(view, dests[l][t]) and view.flags.writeable


def test_restore_into_fills_the_first_positions_of_a_larger_strided_array(engine, rng):
    ns = register(engine)
    tokens = list(range(12))
    layers = kv_layers(rng, 2, 12)
    engine.store(ns, tokens, layers)
    # Token-major buffers with room for 32 tokens, viewed as [1, heads, 32, dim].
    buffers = [[np.full((1, 32, 2, 8), -7, np.float32) for _ in range(2)] for _ in range(2)]
    dests = [[b.transpose(0, 2, 1, 3) for b in layer] for layer in buffers]
    got = engine.restore_into(engine.match(ns, tokens), dests)
    assert got.restored_tokens == 12
    for l in range(2):
        for t in range(2):
            np.testing.assert_array_equal(dests[l][t][:, :, :12], layers[l][t])
            assert (dests[l][t][:, :, 12:] == -7).all(), "positions past the restore untouched"
            assert got.layers[l].tensors[t].shape == (1, 2, 12, 8)


def restore_into_bytearrays(engine, rng):
    """Stores a 4-token prompt of one layer and restores it into two
    bytearrays through memoryviews cast to float32 [1, 2, 4, 8]. Returns
    (the stored layers, the bytearrays, the memoryviews, the RestoredInto)."""
    ns = register(engine, layers=1)
    layers = kv_layers(rng, 1, 4)
    engine.store(ns, list(range(4)), layers)
    raw = [bytearray(2 * 4 * 8 * 4) for _ in range(2)]
    views = [memoryview(b).cast("B").cast("f", (1, 2, 4, 8)) for b in raw]
    got = engine.restore_into(engine.match(ns, list(range(4))), [views])
    return layers, raw, views, got


def test_restore_into_takes_any_writable_buffer(engine, rng):
    layers, raw, _, _ = restore_into_bytearrays(engine, rng)
    for b, want in zip(raw, layers[0]):
        assert bytes(b) == want.tobytes()


def test_restore_into_views_keep_their_buffers_exported(engine, rng):
    """RestoredInto's views of the part written held the destination object
    only: a memoryview could be released under them and its bytearray then
    resized, so a view read freed memory (another object's bytes). They hold
    the buffer as the restore did, until the last of them is gone."""
    layers, raw, views, got = restore_into_bytearrays(engine, rng)
    for view in views:
        with pytest.raises(BufferError):
            view.release()
    with pytest.raises(BufferError):
        raw[0].extend(bytes(1 << 20))
    for b, written in zip(raw, got.layers[0].tensors):
        assert written.ctypes.data == ctypes.addressof(ctypes.c_char.from_buffer(b))
    np.testing.assert_array_equal(got.layers[0].tensors[1], layers[0][1])
    del got, written
    for view in views:
        view.release()
    raw[0].extend(bytes(1 << 20))


@pytest.mark.parametrize("case,match", [
    ("read-only", "layer 1 tensor 1: not a writable buffer"),
    ("dtype", "layer 1 tensor 1: destination dtype float16"),
    ("too few tokens", r"layer 1 tensor 1: the restored float32\[1,2,8,8\] does not fit the "
                       r"destination's \[1,3,7,8\]"),
    ("dimensions", "layer 1 tensor 1: destination has 3 strides for a tensor of 4"),
    ("not a buffer", "layer 1 tensor 1: not a numpy array or torch tensor"),
    ("tensor count", "layer 1: 1 destinations for 2 restored tensors"),
    ("layer count", "1 layer destinations for a namespace of 2 layers"),
    ("no dests", r"dests: not a sequence of layers \(NoneType\)"),
    ("a layer not a list", r"layer 1: not a sequence of destinations \(int\)"),
])
def test_bad_destinations_are_refused_and_nothing_is_written(engine, rng, case, match):
    ns = register(engine)
    engine.store(ns, list(range(8)), kv_layers(rng, 2, 8))
    dests = blank_dests(2, 8)
    spoiled = [list(layer) for layer in dests]
    if case == "read-only":
        spoiled[1][1] = dests[1][1].copy()
        spoiled[1][1].setflags(write=False)
    elif case == "dtype":
        spoiled[1][1] = np.zeros((1, 2, 8, 8), np.float16)
    elif case == "too few tokens":
        # A view whose bytes would hold 8 tokens of 2 heads, but whose rows
        # end after 7: token 7 is another array's memory.
        parent = np.full((1, 3, 8, 8), -7, np.float32)
        dests.append([parent])
        spoiled[1][1] = parent[:, :, :7]
    elif case == "dimensions":
        spoiled[1][1] = dests[1][1].reshape(2, 8, 8)
    elif case == "not a buffer":
        spoiled[1][1] = [0.0] * 128
    elif case == "tensor count":
        spoiled[1].pop()
    elif case == "no dests":
        spoiled = None
    elif case == "a layer not a list":
        spoiled[1] = 5
    else:
        spoiled.pop()
    with pytest.raises(prefixkv.InvalidArgument, match=match):
        engine.restore_into(engine.match(ns, list(range(8))), spoiled)
    for layer in dests:
        for array in layer:
            assert (array == -7).all(), f"{case}: the caller's memory was written"


def test_an_exception_in_on_layer_is_raised_after_the_restore(engine, rng):
    ns = register(engine)
    engine.store(ns, list(range(8)), kv_layers(rng, 2, 8))
    dests = blank_dests(2, 8)

    def fail(layer):
        raise RuntimeError(f"stop at {layer}")

    with pytest.raises(RuntimeError, match="stop at 0"):
        engine.restore_into(engine.match(ns, list(range(8))), dests, on_layer=fail)
    assert not (dests[1][1] == -7).all(), "the restore itself ran to the end"


def test_on_layer_may_call_the_engine_but_not_close_it(engine, rng):
    # on_layer runs inside restore_into's call: calls into the same engine
    # work there, close() is refused instead of waiting for the call it is in.
    ns = register(engine)
    engine.store(ns, list(range(8)), kv_layers(rng, 2, 8))
    dests = blank_dests(2, 8)
    seen = []

    def told(layer):
        seen.append((layer, engine.stats()["hot"]["entries"],
                     engine.match(ns, list(range(8))).matched_tokens))
        if layer == 1:
            engine.close()

    with pytest.raises(prefixkv.InvalidArgument, match="on_layer"):
        engine.restore_into(engine.match(ns, list(range(8))), dests, on_layer=told)
    assert seen == [(0, 2, 8), (1, 2, 8)]
    assert not engine.closed
    engine.close()
    assert engine.closed


class DlpackOnly:
    """An object with nothing but DLPack (no buffer protocol), over `array`."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class FakeDeviceTensor:
    """A DLPack export of `array`'s memory that claims to live on a GPU
    (device type 2, CUDA)."""

    def __init__(self, array):
        self.array, self.shape = array, (ctypes.c_int64 * array.ndim)(*array.shape)
        self.managed = DLManagedTensor(DLTensor(
            array.ctypes.data, DLDevice(2, 0), array.ndim, DLDataType(2, 32, 1), self.shape,
            None, 0), None, None)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_restore_into_takes_dlpack_host_tensors_and_refuses_device_ones(engine, rng):
    ns = register(engine, layers=1)
    layers = kv_layers(rng, 1, 8)
    engine.store(ns, list(range(8)), layers)
    m = engine.match(ns, list(range(8)))
    arrays = blank_dests(1, 8)
    got = engine.restore_into(m, [[DlpackOnly(a) for a in arrays[0]]])
    assert got.restored_tokens == 8
    for array, want in zip(arrays[0], layers[0]):
        np.testing.assert_array_equal(array, want)
    device = blank_dests(1, 8)
    with pytest.raises(prefixkv.InvalidArgument,
                       match="layer 0 tensor 1: DLPack device type 2 is not host memory"):
        engine.restore_into(m, [[device[0][0], FakeDeviceTensor(device[0][1])]])
    assert (device[0][0] == -7).all() and (device[0][1] == -7).all(), "nothing written"
    # numpy refuses to export a read-only array: InvalidArgument naming the
    # tensor, as for any read-only destination (it was numpy's bare BufferError).
    frozen = blank_dests(1, 8)
    frozen[0][1].setflags(write=False)
    with pytest.raises(prefixkv.InvalidArgument,
                       match="layer 0 tensor 1: __dlpack__.. failed: .*readonly"):
        engine.restore_into(m, [[frozen[0][0], DlpackOnly(frozen[0][1])]])
    assert (frozen[0][0] == -7).all(), "nothing written"
