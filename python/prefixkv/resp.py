"""PKV.* commands for a RESP client (docs/protocol.md, "Prefix-cache blocks").

A :class:`Model` names one registered model and builds the arguments of each
command as a list to pass to any Redis client's ``execute_command``. The
records ``PKV.PUT`` takes are cut and encoded by the engine itself
(:meth:`Model.encode_store`), so they are exactly what ``Engine.store`` would
store; :func:`prefixkv.decode_block` reads what ``PKV.GET`` returns.
"""
import numpy as np

from ._prefixkv import Engine, namespace_root
from .errors import Internal, InvalidArgument
from .tensors import as_numpy

# The RAM-only engine encode_store cuts records with holds its blocks and
# their headers: the arrays' bytes twice over, plus this.
_ENCODER_SLACK_BYTES = 16 << 20


def token_blob(tokens):
    """Token ids as the int32 little-endian bytes PKV.MATCH takes: integers,
    each fitting int32, as ``Engine.match`` takes them; InvalidArgument for
    anything else. Not cast: a cast id (0.9 -> 0, "7" -> 7, 2**32 + 3 -> 3)
    is another prompt's, whose blocks the match would find."""
    ids = np.asarray(tokens)
    if ids.ndim != 1:
        raise InvalidArgument("tokens: a 1-D sequence of integers is needed",
                              "InvalidArgument")
    if ids.size == 0:
        return b""
    if ids.dtype.kind not in "iu":
        raise InvalidArgument(f"tokens: integer token ids are needed, not numpy dtype "
                              f"{ids.dtype} (floats, strings and booleans are not "
                              "converted)", "InvalidArgument")
    if ids.min() < -(1 << 31) or ids.max() >= 1 << 31:
        raise InvalidArgument("tokens: an id does not fit in int32", "InvalidArgument")
    return ids.astype("<i4").tobytes()


class Model:
    """One model's namespace as a RESP client sees it: the arguments of
    PKV.REGISTER, PKV.PUT, PKV.MATCH and PKV.GET, and its records.

    The spec is the one ``Engine.register_model`` takes; ``root`` is its
    namespace root, which PKV.REGISTER replies with (the same everywhere)."""

    def __init__(self, model, layer_types, *, block_tokens=256, dtype="float16",
                 salt="", store_partial_tail=False):
        self.model = model
        self.layer_types = list(layer_types)
        self.block_tokens = block_tokens
        self.dtype = dtype
        self.salt = salt
        self.store_partial_tail = store_partial_tail
        self.root = namespace_root(model, self.layer_types, block_tokens=block_tokens,
                                   dtype=dtype, salt=salt)

    def register_args(self):
        """``PKV.REGISTER model block_tokens dtype layer_types [SALT s] [PARTIAL_TAIL]``."""
        args = ["PKV.REGISTER", self.model, self.block_tokens, self.dtype,
                ",".join(self.layer_types)]
        if self.salt:
            args += ["SALT", self.salt]
        if self.store_partial_tail:
            args.append("PARTIAL_TAIL")
        return args

    def encode_store(self, tokens, layers):
        """The encoded records (bytes, in chain order) an ``Engine.store(ns,
        tokens, layers)`` of this model leaves: one per full block (and a marked
        partial tail with ``store_partial_tail``), the tip carrying the real
        rotating/arrays state, the others placeholders. ``layers`` as
        ``Engine.store`` takes them, covering every token.

        Empty when ``tokens`` fill no block. Cut by a private RAM-only engine, so the records are what the C++
        prefix cache stores. Send the ones the server lacks: the blocks after
        the ``n`` PKV.MATCH reports cached (``records[n:]``)."""
        nbytes = sum(as_numpy(t).nbytes for layer in layers
                     for t in (layer.tensors if hasattr(layer, "tensors") else layer))
        with Engine.open(hot_bytes=2 * nbytes + _ENCODER_SLACK_BYTES, quiet=True) as e:
            ns = e.register_model(self.model, self.layer_types,
                                  block_tokens=self.block_tokens, dtype=self.dtype,
                                  salt=self.salt,
                                  store_partial_tail=self.store_partial_tail)
            e.store(ns, tokens, layers)
            records = [e.get_block(ns, key) for key in e.match(ns, tokens).keys]
        if any(r is None for r in records):
            raise Internal("encode_store: a block left the encoder's hot tier", "Internal")
        return records

    @staticmethod
    def put_args(records, *, unlikely=False):
        """``PKV.PUT [UNLIKELY] record...``: one store of chained records."""
        return ["PKV.PUT"] + (["UNLIKELY"] if unlikely else []) + list(records)

    def match_args(self, tokens):
        """``PKV.MATCH root block_tokens tokens``; replies ``[n, [key...]]``."""
        return ["PKV.MATCH", self.root, self.block_tokens, token_blob(tokens)]

    def get_args(self, key):
        """``PKV.GET root key``; replies the record's bytes, or nil."""
        return ["PKV.GET", self.root, key]


__all__ = ["Model", "token_blob"]
