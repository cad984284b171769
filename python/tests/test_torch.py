"""torch without a copy (issue 26): restored arrays as torch tensors sharing
their memory (prefixkv.as_torch), torch tensors stored directly, and
bfloat16 in and out bit-exactly. Skipped without Debian's python3-torch."""
import numpy as np
import pytest

import prefixkv
from conftest import register

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def address(array):
    return array.__array_interface__["data"][0]


def bf16_kv(gen, tokens):
    """[keys, values] as torch.bfloat16 from random bits (NaNs and all)."""
    return [torch.randint(-(1 << 15), 1 << 15, (1, 2, tokens, 8), generator=gen,
                          dtype=torch.int16).view(torch.bfloat16) for _ in range(2)]


def bits(tensor):
    return tensor.view(torch.int16)


def test_restored_arrays_are_torch_tensors_without_a_copy(engine, rng):
    ns = register(engine, layers=1)
    engine.store(ns, list(range(8)), [[rng.standard_normal((1, 2, 8, 8)).astype(np.float32)
                                       for _ in range(2)]])
    r = engine.restore(engine.match(ns, list(range(8))))
    arrays = [a for block in r.blocks for a in block.layers[0].tensors]
    arrays += r.layers[0].tensors  # the concatenation of both blocks: its own buffer
    for array in arrays:
        tensor = prefixkv.as_torch(array)
        assert tensor.data_ptr() == address(array) and tensor.dtype == torch.float32
        assert np.shares_memory(tensor.numpy(), array)
        assert torch.equal(tensor, torch.tensor(array))
    block = r.blocks[1]
    tensor = prefixkv.as_torch(block.layers[0].tensors[1])
    assert block.payload_address <= tensor.data_ptr() < \
        block.payload_address + block.payload_size, "the hot tier's own buffer"


def test_a_stored_torch_tensor_is_read_in_place(engine):
    """store reads a CPU torch tensor's memory (as_numpy views it): a write
    through torch is what the numpy view sees, and what gets stored."""
    keys = torch.zeros((1, 2, 4, 8), dtype=torch.float16)
    view = prefixkv.as_numpy(keys)
    keys[0, 1, 2, 3] = 7.0
    assert view[0, 1, 2, 3] == 7.0 and view.ctypes.data == keys.data_ptr()
    ns = register(engine, layers=1, dtype="float16")
    engine.store(ns, [1, 2, 3, 4], [[keys, keys + 1]])
    r = engine.restore(engine.match(ns, [1, 2, 3, 4]))
    assert torch.equal(prefixkv.as_torch(r.layers[0].tensors[0]), keys)
    assert torch.equal(prefixkv.as_torch(r.layers[0].tensors[1]), keys + 1)


def test_bfloat16_round_trips_bit_exactly(engine):
    gen = torch.Generator().manual_seed(7)
    ns = register(engine, layers=2, dtype="bfloat16")
    layers = [bf16_kv(gen, 12) for _ in range(2)]
    engine.store(ns, list(range(12)), layers)
    r = engine.restore(engine.match(ns, list(range(12))))
    for got, want in zip(r.layers, layers):
        for array, tensor in zip(got.tensors, want):
            assert array.dtype == np.uint16  # the documented bits path
            out = prefixkv.as_torch(array)
            assert out.dtype == torch.bfloat16 and out.data_ptr() == address(array)
            assert torch.equal(bits(out), bits(tensor))
    # The uint16 bits path in: the same bits stored from numpy restore the same.
    as_bits = [[prefixkv.as_numpy(t).copy() for t in layer] for layer in layers]
    assert as_bits[0][0].dtype == np.uint16
    ns2 = register(engine, layers=2, dtype="bfloat16", salt="bits")
    engine.store(ns2, list(range(12)), as_bits)
    r2 = engine.restore(engine.match(ns2, list(range(12))))
    np.testing.assert_array_equal(r2.layers[1].tensors[0], as_bits[1][0])


def test_a_bfloat16_record_encodes_from_torch():
    gen = torch.Generator().manual_seed(3)
    keys, values = bf16_kv(gen, 4)
    root = prefixkv.namespace_root("m", ["KVCache"], block_tokens=4, dtype="bfloat16")
    record = prefixkv.BlockRecord(prefixkv.chain_key(root, [1, 2, 3, 4]), root, root, 4,
                                  [prefixkv.Layer("KVCache", [keys, values])])
    decoded = prefixkv.decode_block(prefixkv.encode_block(record))
    assert torch.equal(bits(prefixkv.as_torch(decoded.layers[0].tensors[1])), bits(values))


def test_tensors_that_cannot_be_viewed_are_refused(engine):
    ns = register(engine, layers=1, dtype="float16")
    strided = torch.zeros((1, 2, 8, 8), dtype=torch.float16)[:, :, ::2]
    with pytest.raises(prefixkv.InvalidArgument, match="layer 0 tensor 0: not C-contiguous"):
        engine.store(ns, [1, 2, 3, 4], [[strided, strided]])
    with pytest.raises(prefixkv.InvalidArgument, match="tensor 1: dtype float32"):
        engine.store(ns, [1, 2, 3, 4], [[torch.zeros((1, 2, 4, 8), dtype=torch.float16),
                                         torch.zeros((1, 2, 4, 8))]])
    with pytest.raises(prefixkv.InvalidArgument, match="bfloat16 bits are uint16"):
        prefixkv.as_torch(np.zeros(4, np.float32), bfloat16=True)


NO_NUMPY_VIEW = {
    "sparse": lambda: torch.ones((1, 2, 4, 8)).to_sparse(),
    "quantized": lambda: torch.quantize_per_tensor(torch.ones((1, 2, 4, 8)), 0.1, 0,
                                                   torch.qint8),
    "negated": lambda: torch.conj(torch.ones((1, 2, 4, 8), dtype=torch.complex64)).imag,
}


@pytest.mark.parametrize("kind", sorted(NO_NUMPY_VIEW))
def test_tensors_torch_gives_no_numpy_view_of_are_invalid_arguments(engine, kind):
    """A sparse, quantized or lazily negated (conj().imag) tensor, to store
    or to restore into: torch refuses their numpy view with its own TypeError
    or RuntimeError, which came out as it was, where python.md promises a
    prefixkv.Error (InvalidArgument naming the layer and tensor); nothing
    written."""
    ns = register(engine, layers=1)
    keys = torch.ones((1, 2, 4, 8))
    with pytest.raises(prefixkv.InvalidArgument, match="layer 0 tensor 1: torch gives no"):
        engine.store(ns, [1, 2, 3, 4], [[keys, NO_NUMPY_VIEW[kind]()]])
    engine.store(ns, [1, 2, 3, 4], [[keys, keys]])
    dests = [[torch.zeros((1, 2, 4, 8)), NO_NUMPY_VIEW[kind]()]]
    with pytest.raises(prefixkv.InvalidArgument, match="layer 0 tensor 1: torch gives no"):
        engine.restore_into(engine.match(ns, [1, 2, 3, 4]), dests)
    assert not dests[0][0].any(), "nothing written"


def test_resp_records_encode_from_bfloat16_tensors(engine):
    gen = torch.Generator().manual_seed(5)
    layers = [bf16_kv(gen, 8)]
    model = prefixkv.resp.Model("m", ["KVCache"], block_tokens=4, dtype="bfloat16")
    records = model.encode_store(list(range(8)), layers)
    tail = prefixkv.decode_block(records[1]).layers[0].tensors[0]
    assert torch.equal(bits(prefixkv.as_torch(tail)), bits(layers[0][0][:, :, 4:8]))


def test_restore_into_writes_torch_tensors_in_place(engine):
    """restore_into a CPU torch tensor (pinned host memory where this torch
    can pin it: what a device copy reads at bus speed), bfloat16 included."""
    gen = torch.Generator().manual_seed(11)
    ns = register(engine, layers=2, dtype="bfloat16")
    layers = [bf16_kv(gen, 12) for _ in range(2)]
    engine.store(ns, list(range(12)), layers)
    pin = torch.cuda.is_available()
    dests = [[torch.zeros((1, 2, 16, 8), dtype=torch.bfloat16, pin_memory=pin)
              for _ in range(2)] for _ in range(2)]
    before = [t.data_ptr() for layer in dests for t in layer]
    got = engine.restore_into(engine.match(ns, list(range(12))), dests)
    assert got.restored_tokens == 12
    assert [t.data_ptr() for layer in dests for t in layer] == before
    for dest, want in zip(dests, layers):
        for tensor, stored in zip(dest, want):
            assert torch.equal(bits(tensor[:, :, :12]), bits(stored))
            assert torch.equal(bits(tensor[:, :, 12:]), torch.zeros((1, 2, 4, 8),
                                                                    dtype=torch.int16))
    view = got.layers[0].tensors[0]
    assert view.dtype == np.uint16 and address(view) == dests[0][0].data_ptr()


def test_restore_into_refuses_a_tensor_of_the_wrong_dtype(engine):
    ns = register(engine, layers=1, dtype="float16")
    keys = torch.ones((1, 2, 4, 8), dtype=torch.float16)
    engine.store(ns, [1, 2, 3, 4], [[keys, keys]])
    dests = [[torch.zeros((1, 2, 4, 8), dtype=torch.float16),
              torch.zeros((1, 2, 4, 8), dtype=torch.float32)]]
    with pytest.raises(prefixkv.InvalidArgument, match="layer 0 tensor 1: destination dtype"):
        engine.restore_into(engine.match(ns, [1, 2, 3, 4]), dests)
    assert not dests[0][0].any(), "nothing written"


def test_restore_into_never_writes_into_an_engines_own_blocks(engine, rng):
    """as_torch gives a writable tensor over a restored array, the hot tier's
    own buffer of a block. restore_into another prompt's KV into it rewrote
    the cached block in place: a restore of the first prompt then served the
    second one's KV as a hit (audit ok). Refused now, also when the tensor is
    another engine's block, with nothing written."""
    ns = register(engine)
    first, second = [[[rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
                       for _ in range(2)] for _ in range(2)] for _ in range(2)]
    engine.store(ns, [1, 2, 3, 4], first)
    engine.store(ns, [5, 6, 7, 8], second)
    restored = engine.restore(engine.match(ns, [1, 2, 3, 4]))
    dests = [[prefixkv.as_torch(t) for t in layer.tensors] for layer in restored.layers]
    with pytest.raises(prefixkv.InvalidArgument, match="layer 0 tensor 0: .*engine's own"):
        engine.restore_into(engine.match(ns, [5, 6, 7, 8]), dests)
    with prefixkv.Engine.open(hot_bytes=1 << 20, quiet=True) as other:
        other_ns = register(other)
        other.store(other_ns, [5, 6, 7, 8], second)
        with pytest.raises(prefixkv.InvalidArgument, match="engine's own"):
            other.restore_into(other.match(other_ns, [5, 6, 7, 8]), dests)
    again = engine.restore(engine.match(ns, [1, 2, 3, 4]))
    for l in range(2):
        for t in range(2):
            np.testing.assert_array_equal(again.layers[l].tensors[t], first[l][t])


def test_copy_layer_never_writes_into_an_engines_own_blocks(engine, rng):
    """The same for RestorePlan.copy_layer: a restored array of another
    block, made writable by as_torch(...).numpy(), took the layer's bytes
    over its cached block."""
    ns = register(engine)
    big = engine.register_model("big", ["KVCache"], block_tokens=4, dtype="float32")
    kv = [[rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(2)]
          for _ in range(2)]
    wide = [[rng.standard_normal((1, 8, 4, 8)).astype(np.float32) for _ in range(2)]]
    engine.store(ns, [1, 2, 3, 4], kv)
    engine.store(big, [1, 2, 3, 4], wide)
    plan = engine.plan_restore(engine.match(ns, [1, 2, 3, 4]))
    restored = engine.restore(engine.match(big, [1, 2, 3, 4]))
    out = prefixkv.as_torch(restored.layers[0].tensors[0]).numpy().view(np.uint8).reshape(-1)
    assert out.size >= plan.layers[0]["bytes"]
    with pytest.raises(prefixkv.InvalidArgument, match="engine's own"):
        plan.copy_layer(0, out)
    into_tensor = torch.zeros(plan.layers[0]["bytes"], dtype=torch.uint8)
    plan.copy_layer(0, into_tensor)  # a CPU tensor takes it as a buffer does
    offset, nbytes = plan.layers[0]["tensors"][1][2:]
    assert torch.equal(into_tensor[offset:offset + nbytes].view(torch.float32),
                       torch.from_numpy(kv[0][1]).reshape(-1))
    again = engine.restore(engine.match(big, [1, 2, 3, 4]))
    np.testing.assert_array_equal(again.layers[0].tensors[0], wide[0][0])


def test_the_gpu_restore_plan_example_applies_its_plan_byte_for_byte():
    """examples/python/gpu_restore_plan.py (issue 28's GPU goal, run by hand on
    a machine with a GPU): here on the CPU, 256 tokens of the Llama-3-8B shape
    (32 MiB), every planned range gathered through zero-copy views of the
    engine's memory and compared with the stored arrays. A broken range walk
    (strides, offsets, the layer walk) exits 1."""
    import pathlib
    import subprocess
    import sys
    example = (pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" /
               "gpu_restore_plan.py")
    out = subprocess.run([sys.executable, str(example), "--tokens", "256", "--repeats", "1",
                          "--cpu"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every byte on the CPU equals the stored arrays" in out.stdout, out.stdout
    assert "plan: " in out.stdout and " ranges over 32 layers" in out.stdout
