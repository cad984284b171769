# Type stubs of the extension module prefixkv._prefixkv (python/src/).
from types import TracebackType
from typing import Any, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

Tokens = Union[Sequence[int], npt.NDArray[np.integer[Any]]]

class Namespace:
    """A registered model (Engine.register_model)."""
    @property
    def model(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def root(self) -> str:
        """The chain root: 32 hex digits."""
    @property
    def block_tokens(self) -> int: ...
    @property
    def dtype(self) -> str:
        """float16, float32 or bfloat16 (stored and restored as uint16 bits)."""
    @property
    def layer_types(self) -> list[str]: ...

class Match:
    """The longest cached prefix of a prompt (Engine.match)."""
    @property
    def ns(self) -> Namespace: ...
    @property
    def matched_tokens(self) -> int: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def tiers(self) -> list[str]:
        """Where each matched block is: "hot" or "ssd"."""
    @property
    def tokens(self) -> list[int]: ...

class Layer:
    """One layer's cache: type name, meta strings, tensors (numpy arrays).

    Sliceable layers (KVCache) hold tensors whose token axis is ndim - 2, e.g.
    [1, kv_heads, tokens, head_dim]. Rotating layers (RotatingKVCache) hold the
    window and meta (keep, max_size, offset, idx) with offset == len(tokens).
    """
    cache_type: str
    meta: list[str]
    tensors: list[npt.NDArray[Any]]
    placeholder: bool
    def __init__(self, cache_type: str, tensors: Sequence[npt.NDArray[Any]],
                 meta: Sequence[str] = ..., placeholder: bool = ...) -> None: ...

class RestoredBlock:
    """One restored block as the tier holds it. layers' arrays are read-only
    views of payload (the hot tier's own buffer when level == "hot"); the block
    stays pinned in the hot tier while any of them lives."""
    @property
    def key(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def pinned(self) -> bool: ...
    @property
    def token_count(self) -> int: ...
    @property
    def partial(self) -> bool: ...
    @property
    def payload_address(self) -> int: ...
    @property
    def payload_size(self) -> int: ...
    @property
    def layers(self) -> list[Layer]: ...

class Restored:
    """Per-layer caches ready to continue at position restored_tokens.

    layers[l].tensors are read-only numpy arrays. A layer restored from one
    block, and every rotating/arrays layer (the tip's state), views the hot
    tier's bytes (no copy, pinned while the array lives); a sliceable layer
    spanning several blocks is one concatenated copy the array owns. blocks
    gives the zero-copy per-block views.
    """
    @property
    def layers(self) -> list[Layer]: ...
    @property
    def blocks(self) -> list[RestoredBlock]: ...
    @property
    def restored_tokens(self) -> int: ...
    @property
    def restored_blocks(self) -> int: ...
    @property
    def blocks_from_hot(self) -> int: ...
    @property
    def blocks_from_ssd(self) -> int: ...
    @property
    def tokens_from_hot(self) -> int: ...
    @property
    def tokens_from_ssd(self) -> int: ...
    @property
    def tokens_from_remote(self) -> int: ...
    @property
    def reason(self) -> str:
        """Empty when every matched token was restored; otherwise why not."""
    @property
    def window_tokens(self) -> list[int]: ...

class StoreResult:
    @property
    def blocks(self) -> int: ...
    @property
    def blocks_written(self) -> int: ...
    @property
    def blocks_deduplicated(self) -> int: ...
    @property
    def tip(self) -> str: ...
    @property
    def tip_state_stored(self) -> bool: ...
    @property
    def blocks_hinted_unlikely(self) -> int: ...
    @property
    def note(self) -> str: ...

class Engine:
    """prefixkv::Engine. Thread-safe; every call releases the GIL."""
    @staticmethod
    def open(*, data_dir: Optional[str] = None, hot_bytes: int = 1 << 30,
             ssd_bytes: int = 64 << 30, durability: str = "wal",
             write_through: bool = False, create_if_missing: bool = True,
             hot_policy: str = "lru", quiet: bool = False, remote: str = "",
             remote_write: str = "on_spill") -> Engine:
        """Opens the tiers. data_dir None: RAM only, nothing survives close().
        remote: a Redis Cluster shared by every node, "redis://host:port[,...]"
        (docs/remote.md); remote_write: "on_spill" or "always"."""
    def register_model(self, model: str, layer_types: Sequence[str], *,
                       block_tokens: int = 256, dtype: str = "float16", salt: str = "",
                       store_partial_tail: bool = False,
                       hot_quota_bytes: Optional[int] = None) -> Namespace: ...
    def match(self, ns: Namespace, tokens: Tokens) -> Match: ...
    def restore(self, match: Match) -> Restored: ...
    def store(self, ns: Namespace, tokens: Tokens,
              layers: Sequence[Union[Layer, Sequence[npt.NDArray[Any]]]],
              reuse: str = "normal") -> StoreResult:
        """One entry per layer covering every token: a Layer, or a list of
        C-contiguous arrays of the namespace dtype (the layer's registered type,
        no meta). The arrays are copied (without the GIL). reuse="unlikely"
        (ReuseHint::kUnlikely, e.g. after a long answer): the blocks this store
        writes leave the hot tier first until one is read again."""
    def flush(self) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def stats(self) -> dict[str, Any]:
        """EngineStats: hot_capacity_bytes, hot, owners, dirty_blocks, has_ssd,
        ssd_capacity_bytes, ssd, ssd_queued_blocks, ssd_write_back_failed_blocks,
        ssd_write_back_failures (counters are dicts),
        has_remote, remote (cluster, available, hits, misses, corruptions,
        errors, bytes_read, bytes_written, writes, dropped, over_quota,
        rewrites_skipped, queued_blocks, queued_bytes). Each
        owner: name, hot, hot_quota_bytes, ssd, restore_latency (models only:
        bucket_bounds_micros, counts, sum_micros, count; else None)."""
    def audit(self) -> dict[str, Any]:
        """{"ok": bool, "findings": [(what, detail)], "orphans": [hex key]}."""
    def hot_block_address(self, ns: Namespace, key: str) -> Optional[int]:
        """Diagnostic: the address of the hot tier's buffer of block `key`
        (None when not resident). Counts a hot hit."""
    def __enter__(self) -> Engine: ...
    def __exit__(self, exc_type: Optional[type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> bool: ...
