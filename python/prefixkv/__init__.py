"""prefixkv: a paged prefix-cache storage engine for LLM inference.

Python bindings of the C++ engine (docs/python.md)::

    import numpy as np, prefixkv
    with prefixkv.Engine.open(data_dir="/tmp/pkv", hot_bytes=1 << 30) as engine:
        ns = engine.register_model("my-model", ["KVCache"] * 4, block_tokens=256)
        engine.store(ns, tokens, layers)          # per layer: [keys, values]
        m = engine.match(ns, prompt)              # longest cached prefix
        r = engine.restore(m)                     # r.layers[l].tensors: numpy
        engine.restore_into(m, dests)             # or into your own arrays
        ... prefill prompt[r.restored_tokens:] ...

Errors are :class:`prefixkv.Error` subclasses named after the C++ Status code.
"""
from . import errors, resp
from ._prefixkv import (BlockRecord, Engine, Layer, Match, Namespace, Restored,
                        RestoredBlock, RestoredInto, RestorePlan, StoreResult, chain_key,
                        decode_block, encode_block, namespace_root)
from .errors import (Aborted, Busy, Corruption, Error, Internal, InvalidArgument,
                     NoSpace, NotFound, NotSupported, OutOfRange, Unavailable)
from .tensors import as_numpy, as_torch

__all__ = ["Engine", "Layer", "Match", "Namespace", "Restored", "RestoredBlock", "RestoredInto",
           "RestorePlan", "StoreResult", "Error", "NotFound", "Corruption", "InvalidArgument", "Busy",
           "NoSpace", "NotSupported", "Aborted", "Internal", "Unavailable", "OutOfRange", "errors",
           "BlockRecord", "encode_block", "decode_block", "chain_key", "namespace_root",
           "resp", "as_numpy", "as_torch"]
