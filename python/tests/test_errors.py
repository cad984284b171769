"""Bad input and misuse raise prefixkv.Error subclasses that carry the
Status code and a message saying what was wrong."""
import numpy as np
import pytest

import prefixkv
from conftest import kv_layers, register


def test_a_wrong_dtype_names_the_layer_and_both_dtypes(engine, rng):
    ns = register(engine, dtype="float16")
    layers = kv_layers(rng, 2, 4, dtype=np.float32)
    with pytest.raises(prefixkv.InvalidArgument) as e:
        engine.store(ns, [0, 1, 2, 3], layers)
    assert e.value.code == "InvalidArgument"
    assert "layer 0 tensor 0" in e.value.message and "float32" in e.value.message
    assert "float16" in e.value.message
    assert isinstance(e.value, ValueError) and isinstance(e.value, prefixkv.Error)


def test_a_wrong_shape_is_refused_by_the_engine(engine, rng):
    ns = register(engine)
    layers = kv_layers(rng, 2, 3)  # 3 token rows for 4 tokens
    with pytest.raises(prefixkv.InvalidArgument) as e:
        engine.store(ns, [0, 1, 2, 3], layers)
    assert e.value.message, "the engine's message says why"
    flat = [[np.zeros(16, np.float32), np.zeros(16, np.float32)]] * 2
    with pytest.raises(prefixkv.InvalidArgument, match="dimension"):
        engine.store(ns, [0, 1, 2, 3], flat)
    assert engine.match(ns, [0, 1, 2, 3]).matched_tokens == 0, "nothing was written"


def test_non_contiguous_arrays_and_wrong_layer_counts_are_refused(engine, rng):
    ns = register(engine)
    layers = kv_layers(rng, 2, 8)
    strided = [[t[:, :, ::2] for t in layer] for layer in layers]
    with pytest.raises(prefixkv.InvalidArgument, match="C-contiguous"):
        engine.store(ns, list(range(4)), strided)
    with pytest.raises(prefixkv.InvalidArgument, match="1 layers given"):
        engine.store(ns, list(range(8)), layers[:1])
    with pytest.raises(prefixkv.InvalidArgument, match="not a numpy array"):
        engine.store(ns, list(range(8)), [[[1.0], [2.0]], layers[1]])
    with pytest.raises(prefixkv.InvalidArgument, match="int32"):
        engine.match(ns, [1 << 40])


@pytest.mark.parametrize("case,tokens", [
    ("floats", [0.9, 1.2, 2.0, 3.7, 4.0, 5.0, 6.0, 7.0]),
    ("float array", np.arange(8, dtype=np.float32) + 0.5),
    ("strings", [str(t) for t in range(8)]),
    ("booleans", [False, True, True, True, True, True, True, True]),
    ("uint64 past int64", np.full(8, 2**64 - 1, np.uint64)),
    ("int64 past int32", np.full(8, 2**32 + 3, np.int64)),
])
def test_token_ids_that_are_not_integers_are_refused_not_converted(engine, rng, case, tokens):
    # A float id truncated (0.9 -> 0), a string parsed, a boolean counted or
    # a uint64 wrapped (2**64 - 1 -> -1) names another prompt's blocks: the
    # match would serve them as a hit and the store would file its KV under
    # them. Token ids are integers; anything else is refused. So does the
    # blob PKV.MATCH takes (resp.token_blob): it cast them to int32 as well.
    ns = register(engine)
    ids = {"uint64 past int64": [-1] * 8, "int64 past int32": [3] * 8}.get(case, list(range(8)))
    if case == "booleans":
        ids = [0] + [1] * 7
    engine.store(ns, ids, kv_layers(rng, 2, 8))
    for call in (lambda: engine.match(ns, tokens),
                 lambda: engine.store(ns, tokens, kv_layers(rng, 2, 8)),
                 lambda: engine.explain_miss(tokens, ns),
                 lambda: prefixkv.resp.token_blob(tokens)):
        with pytest.raises(prefixkv.InvalidArgument, match="tokens"):
            call()
    assert engine.match(ns, ids).matched_tokens == 8
    assert engine.match(ns, []).matched_tokens == 0, "an empty prompt is still a prompt"


def test_a_closed_engine_refuses_every_call(data_dir, rng):
    e = prefixkv.Engine.open(data_dir=data_dir, quiet=True)
    ns = register(e)
    e.close()
    for call in (lambda: e.match(ns, [1, 2, 3, 4]), lambda: e.flush(), lambda: e.audit(),
                 lambda: e.store(ns, [1, 2, 3, 4], kv_layers(rng, 2, 4)),
                 lambda: register(e)):
        with pytest.raises(prefixkv.InvalidArgument, match="engine is closed"):
            call()


def test_an_unknown_namespace_is_refused(data_dir, tmp_path):
    with prefixkv.Engine.open(hot_bytes=1 << 20) as other:
        register(other, layers=1)
        foreign = other.register_model("other", ["KVCache"], block_tokens=4)
    with prefixkv.Engine.open(data_dir=data_dir, quiet=True) as e:
        register(e)
        with pytest.raises(prefixkv.InvalidArgument, match="unknown namespace"):
            e.match(foreign, [1, 2, 3, 4])


def test_bad_options_and_specs(tmp_path):
    with pytest.raises(prefixkv.NotFound):
        prefixkv.Engine.open(data_dir=str(tmp_path / "absent"), create_if_missing=False)
    with pytest.raises(prefixkv.InvalidArgument):
        prefixkv.Engine.open(hot_bytes=0)
    with pytest.raises(prefixkv.InvalidArgument):
        prefixkv.Engine.open(hot_bytes=1 << 20, durability="sometimes")
    with prefixkv.Engine.open(hot_bytes=1 << 20) as e:
        with pytest.raises(prefixkv.InvalidArgument):
            e.register_model("m", ["NoSuchCache"], block_tokens=4)
        with pytest.raises(prefixkv.InvalidArgument):
            e.register_model("m", ["KVCache"], dtype="float99")


@pytest.mark.parametrize("field,value,takes", [
    ("tp_rank", -1, "an integer"), ("layer_shapes", "2x8,2x8", "a list of strings"),
    ("tokenizer_hash", 7, "a string"), ("pp_size", 2**32, "an integer"),
])
def test_a_spec_field_of_the_wrong_type_is_a_type_error_naming_it(engine, field, value, takes):
    # It was pybind11's RuntimeError "Unable to cast Python instance to C++
    # type", naming neither the field nor what it takes.
    for call in (lambda: engine.register_model("m", ["KVCache"] * 2, **{field: value}),
                 lambda: engine.explain_miss([1, 2, 3, 4], **{field: value})):
        with pytest.raises(TypeError, match=f"spec field '{field}' takes {takes}"):
            call()


def test_an_empty_data_dir_is_refused_not_opened_in_ram():
    # data_dir="" (an unset variable) opened a RAM-only engine, as None does:
    # every store acknowledged, all of it gone at close().
    with pytest.raises(prefixkv.InvalidArgument, match="data_dir is empty"):
        prefixkv.Engine.open(data_dir="")
