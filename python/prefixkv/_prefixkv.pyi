# Type stubs of the extension module prefixkv._prefixkv (python/src/).
from types import TracebackType
from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

Tokens = Union[Sequence[int], npt.NDArray[np.integer[Any]]]

class Namespace:
    """A registered model (Engine.register_model)."""
    @property
    def model(self) -> str:
        """The model name it was registered with."""
    @property
    def index(self) -> int:
        """The engine's index of the model."""
    @property
    def root(self) -> str:
        """The chain root: 32 hex digits."""
    @property
    def block_tokens(self) -> int:
        """Tokens per block."""
    @property
    def dtype(self) -> str:
        """float16, float32 or bfloat16 (stored and restored as uint16 bits)."""
    @property
    def layer_types(self) -> list[str]:
        """The cache type name of each layer."""

class Match:
    """The longest cached prefix of a prompt (Engine.match)."""
    @property
    def ns(self) -> Namespace:
        """The namespace matched in."""
    @property
    def matched_tokens(self) -> int:
        """How many tokens the cached prefix covers."""
    @property
    def keys(self) -> list[str]:
        """The matched blocks' keys (32 hex digits), in order."""
    @property
    def tiers(self) -> list[str]:
        """Where each matched block is: "hot" or "ssd"."""
    @property
    def tokens(self) -> list[int]:
        """The prompt's token ids."""

class Layer:
    """One layer's cache: type name, meta strings, tensors (numpy arrays).

    Sliceable layers (KVCache) hold tensors whose token axis is ndim - 2, e.g.
    [1, kv_heads, tokens, head_dim]. Rotating layers (RotatingKVCache) hold the
    window and meta (keep, max_size, offset, idx) with offset == len(tokens)."""
    cache_type: str
    meta: list[str]
    tensors: list[npt.NDArray[Any]]
    placeholder: bool
    def __init__(self, cache_type: str, tensors: Sequence[npt.NDArray[Any]],
                 meta: Sequence[str] = ..., placeholder: bool = ...) -> None:
        """A layer: its cache type name, its tensors (numpy arrays or CPU torch
        tensors), its meta strings, and whether it is a placeholder (no state)."""

class RestoredBlock:
    """One restored block as the tier holds it. layers' arrays are read-only
    views of payload (the hot tier's own buffer when level == "hot"); the block
    stays pinned in the hot tier while any of them lives."""
    @property
    def key(self) -> str:
        """The block's key: 32 hex digits."""
    @property
    def level(self) -> str:
        """"hot" (pinned, the tier's bytes, unless a concurrent store evicted or
        rewrote it after the restore read it) or "ssd"."""
    @property
    def pinned(self) -> bool:
        """True while the block is pinned in the hot tier."""
    @property
    def token_count(self) -> int:
        """Tokens the block covers."""
    @property
    def partial(self) -> bool:
        """True: a marked partial tail."""
    @property
    def payload_address(self) -> int:
        """Address of the encoded record's buffer."""
    @property
    def payload_size(self) -> int:
        """Size of the encoded record in bytes."""
    @property
    def layers(self) -> list[Layer]:
        """Per layer: a Layer viewing the payload."""

class RestoreCounters:
    """What a restore read: Restored and RestoredInto have these counters."""
    @property
    def restored_tokens(self) -> int:
        """Tokens restored: continue at this position."""
    @property
    def restored_blocks(self) -> int:
        """Blocks restored."""
    @property
    def blocks_from_hot(self) -> int:
        """Blocks read from the hot tier."""
    @property
    def blocks_from_ssd(self) -> int:
        """Blocks read from the SSD tier."""
    @property
    def tokens_from_hot(self) -> int:
        """Tokens read from the hot tier."""
    @property
    def tokens_from_ssd(self) -> int:
        """Tokens read from the SSD tier."""
    @property
    def tokens_from_remote(self) -> int:
        """Tokens read from the remote tier."""
    @property
    def reason(self) -> str:
        """Empty when every matched token was restored; otherwise why not."""
    @property
    def window_tokens(self) -> list[int]:
        """The token ids in a rotating layer's window."""

class Restored(RestoreCounters):
    """Per-layer caches ready to continue at position restored_tokens.

    layers[l].tensors are read-only numpy arrays. A layer restored from one
    block, and every rotating/arrays layer (the tip's state), views the hot
    tier's bytes (no copy, pinned while the array lives); a sliceable layer
    spanning several blocks is one concatenated copy the array owns. blocks
    gives the zero-copy per-block views."""
    @property
    def layers(self) -> list[Layer]:
        """Per layer: a Layer of read-only arrays."""
    @property
    def blocks(self) -> list[RestoredBlock]:
        """The zero-copy per-block views (RestoredBlock)."""

class RestoredInto(RestoreCounters):
    """What Engine.restore_into wrote: the restore's counters, and per
    layer a Layer whose tensors are writable views of your destinations cut to
    the restored shape."""
    @property
    def layers(self) -> list[Layer]:
        """Per layer: a Layer (type, meta) viewing the written part of each destination."""

class RestorePlan(RestoreCounters):
    """What Engine.plan_restore planned: the restore's counters, and per layer
    the host ranges holding its bytes. The hot blocks stay pinned until
    release() or until the plan is garbage collected."""
    @property
    def layers(self) -> list[dict[str, Any]]:
        """Per layer: a dict with "bytes" (the size of the layer's contiguous
        layout), "tensors" (dtype name, shape, offset, nbytes of each tensor in the
        layout) and "ranges" (src_address, bytes, count, src_stride, dst_offset,
        dst_stride: count chunks of bytes, chunk i read at src_address + i * src_stride
        and written at dst_offset + i * dst_stride of the layout)."""
    @property
    def held(self) -> bool:
        """True until release()."""
    def copy_layer(self, layer: int, dest: Any) -> None:
        """Applies layer `layer`'s ranges with memcpy into `dest`, a writable
        C-contiguous buffer (or CPU torch tensor) of at least its bytes (what a copy
        engine does). InvalidArgument for a read-only one."""
    def release(self) -> None:
        """Unpins the blocks and frees the staging; the ranges dangle after. A
        copy_layer running on another thread keeps them until it ends."""

class StoreResult:
    """What a store did (Engine.store)."""
    @property
    def blocks(self) -> int:
        """Blocks in the store."""
    @property
    def blocks_written(self) -> int:
        """Blocks written now."""
    @property
    def blocks_deduplicated(self) -> int:
        """Blocks already cached (not rewritten)."""
    @property
    def tip(self) -> str:
        """The tip's key: 32 hex digits."""
    @property
    def tip_state_stored(self) -> bool:
        """True: the tip carries real rotating/arrays state."""
    @property
    def blocks_hinted_unlikely(self) -> int:
        """Written blocks the hot tier took as reuse="unlikely"."""
    @property
    def note(self) -> str:
        """Why a store did less than asked (empty otherwise)."""

class EventIterator:
    """Iterates KV events (Engine.events); next_seq is where to resume."""
    def __iter__(self) -> EventIterator:
        """The iterator itself."""
    def __next__(self) -> dict[str, Any]:
        """The next event; StopIteration once caught up and nothing came within
        wait_ms."""
    @property
    def next_seq(self) -> int:
        """The seq to resume from: after the last event handed out."""

class Engine:
    """prefixkv::Engine. Thread-safe; every call releases the GIL."""
    @staticmethod
    def open(*, data_dir: Optional[str] = None, hot_bytes: int = 1 << 30,
             ssd_bytes: int = 64 << 30, durability: str = "wal",
             write_through: bool = False, create_if_missing: bool = True,
             hot_policy: str = "lru", quiet: bool = False, remote: str = "",
             remote_write: str = "on_spill", event_log: bool = True) -> Engine:
        """Opens the tiers. data_dir None: RAM only, nothing survives close() ("" is
        InvalidArgument).
        remote: a Redis Cluster shared by every node, "redis://host:port[,...]"
        (docs/remote.md); remote_write: "on_spill" or "always". event_log: keep the
        numbered KV event log (events(), docs/events.md). A data_dir is NotSupported
        in a process forked from one that opened an engine with one (docs/python.md)."""
    def register_model(self, model: str, layer_types: Sequence[str], *,
                       block_tokens: int = 256, dtype: str = "float16", salt: str = "",
                       store_partial_tail: bool = False,
                       hot_quota_bytes: Optional[int] = None,
                       **spec_fields: Any) -> Namespace:
        """Registers a model (Engine::RegisterModel): its cache type per layer, tokens
        per block, dtype (float16, float32, bfloat16), tenant salt. store_partial_tail:
        the last block of a store may be a marked partial block. hot_quota_bytes: the
        model's cap in the hot tier. More spec fields as keywords (each keyed only when
        set): revision, tokenizer_hash, layer_shapes (one "HxD[wW][rCxCH:SHxSD]" string
        per layer, e.g. "8x128w4096"), quantization, tp_rank, tp_size, pp_rank, pp_size."""
    def explain_miss(self, tokens: Tokens, ns: Optional[Namespace] = None,
                     **spec_fields: Any) -> Dict[str, Any]:
        """Why `tokens` do not fully hit (Engine::ExplainMiss): the spec of `ns`
        (a Namespace; or none) with each keyword (model, layer_types, block_tokens,
        dtype, salt and the register_model spec keywords) replacing its field; the
        spec need not be registered. A dict: kind (none, never-stored, not-stored,
        evicted, removed, corrupt-dropped, stripped, other-namespace, in-remote),
        reason, first_missed_block (-1: none), first_missed_key, cached_blocks,
        restorable_tokens, other_namespace, remote_blocks,
        restorable_with_remote_tokens and differences (field, stored, asked,
        text, e.g. "tokenizer hash differs: stored abc, asked def")."""
    def match(self, ns: Namespace, tokens: Tokens) -> Match:
        """The longest cached prefix of `tokens` (a sequence or 1-D array of ints,
        each fitting int32)."""
    def restore(self, match: Match) -> Restored:
        """Restores a match (Engine::RestorePinned): the hot blocks stay pinned
        while the Restored object or any of its arrays lives."""
    def restore_into(self, match: Match, dests: Sequence[Sequence[Any]], *,
                     on_layer: Optional[Callable[[int], None]] = None) -> RestoredInto:
        """Restores a match straight into your memory (Engine::RestoreInto):
        dests has one entry per layer, each a list with one writable destination per
        restored tensor (keys, values): a numpy array, a CPU torch tensor (a pinned
        one too), any writable buffer or a DLPack tensor in host memory, of the
        restored dtype (bfloat16: uint16 or torch.bfloat16), as many dimensions as
        the restored tensor and at least its size along each (a [1, heads,
        max_tokens, dim] array takes any shorter restore in its first positions;
        strided views are written in place). Each block's bytes are copied once,
        from the tier into the destination, without the GIL. Every destination is
        checked first: InvalidArgument, and nothing written, for a read-only, too
        small, wrongly typed or shaped one.
        on_layer(l), when given, is called (with the GIL) as each layer completes,
        in order; an exception it raises is raised after the restore."""
    def plan_restore(self, match: Match) -> RestorePlan:
        """Plans a restore for a copy engine (Engine::PlanRestore): per layer, the
        host ranges holding its bytes and where each goes in a contiguous layout,
        every range inside a region memory_regions() lists; the hot blocks stay
        pinned until the plan is released."""
    def memory_regions(self) -> list[tuple[int, int]]:
        """The regions (address, bytes) of the engine's memory resource, where hot
        blocks and restore plans live: the memory to register for DMA."""
    def store(self, ns: Namespace, tokens: Tokens,
              layers: Sequence[Union[Layer, Sequence[npt.NDArray[Any]]]],
              reuse: str = "normal") -> StoreResult:
        """One entry per layer covering every token: a Layer, or a list of
        C-contiguous arrays of the namespace dtype (the layer's registered type,
        no meta); CPU torch tensors are read in place. The arrays are copied
        (without the GIL). reuse="unlikely" (ReuseHint::kUnlikely, e.g. after a
        long answer): the blocks this store writes leave the hot tier first until
        one is read again."""
    def flush(self) -> None:
        """Writes every dirty block to its tier (Engine::Flush)."""
    def close(self) -> None:
        """Flushes and closes (Engine::Close); waits for calls in flight."""
    @property
    def closed(self) -> bool:
        """True after close()."""
    def stats(self) -> dict[str, Any]:
        """EngineStats: hot_capacity_bytes, hot, owners, dirty_blocks,
        memory_mapped_bytes, memory_regions, has_ssd,
        ssd_capacity_bytes, ssd, ssd_queued_blocks, ssd_write_back_failed_blocks,
        ssd_write_back_failures, ssd_read_ahead_reads, ssd_read_ahead_served,
        ssd_read_ahead_stale, ssd_read_ahead_unused, ssd_read_ahead_bytes
        (counters are dicts),
        has_remote, remote (cluster, available, hits, misses, corruptions,
        errors, bytes_read, bytes_written, writes, dropped, over_quota,
        rewrites_skipped, queued_blocks, queued_bytes). Each
        owner: name, hot, hot_quota_bytes, ssd, restore_latency (models only:
        bucket_bounds_micros, counts, sum_micros, count; else None), prefix_tokens
        (models only: prefix_query_tokens, prefix_hit_tokens, restored_tokens_hot,
        restored_tokens_ssd, restored_tokens_remote, shape_refused_stores,
        shape_refused_tokens; else None). advisor: the
        capacity advisor (sampling_rate, sampled_keys, memory_bytes, references,
        points: [{tier, factor, capacity_bytes, capacity_blocks, hit_ratio}], the
        estimated token hit ratio at 1/4x..8x of each tier; docs/eviction.md)."""
    def audit(self) -> dict[str, Any]:
        """{"ok": bool, "findings": [(what, detail)], "orphans": [hex key]}."""
    def events(self, from_seq: int = 0, *, wait_ms: int = 0) -> EventIterator:
        """The KV events from seq `from_seq` on (the last seq applied plus one; 0:
        from the start of the log), oldest first, as an EventIterator of dicts: seq,
        kind (stored, removed, moved, cleared), reason, tier, from, copy_remains,
        owner, namespace, key, parent (hex), bytes, unix_ms (docs/events.md). Once
        caught up it waits up to wait_ms for the next event, then stops. Raises
        OutOfRange when the log cannot continue after from_seq - 1: take
        event_snapshot() and resume from its seq + 1."""
    def event_snapshot(self) -> dict[str, Any]:
        """{"seq": int, "hot": [block], "ssd": [block]}: every block of the hot and
        SSD tiers as the events say, after event `seq`; each block a dict of
        namespace, key, parent (hex), owner, bytes."""
    def event_log_stats(self) -> dict[str, Any]:
        """The event log (Engine::EventLogStats): enabled, persistent, head_seq,
        first_seq, events, bytes, retention_bytes, retention_ms, appended, trimmed,
        reconciled, write_errors, keys_hot, keys_ssd."""
    def hot_block_address(self, ns: Namespace, key: str) -> Optional[int]:
        """Diagnostic: the address of the hot tier's buffer of block `key`
        (None when not resident). Counts a hot hit."""
    def get_block(self, ns: Namespace, key: str) -> Optional[bytes]:
        """The encoded record of block `key` (bytes, what PKV.GET returns), or None
        when it is not cached in the namespace, or holds other layer shapes than a
        spec with shapes (never served; counted in shape_refused_tokens and removed).
        Checksum-verified when read from SSD."""
    def __enter__(self) -> Engine:
        """Returns the engine: `with Engine.open(...) as e:`."""
    def __exit__(self, exc_type: Optional[type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> bool:
        """Closes the engine."""

class BlockRecord:
    """One cached block as the block codec encodes it (docs/format.md): what
    PKV.PUT takes and PKV.GET returns. Keys are 32 lowercase hex digits. A
    decoded record's arrays are read-only views of its bytes."""
    key: str
    parent: str
    namespace_id: str
    token_count: int
    partial: bool
    tokens: list[int]
    layers: list[Layer]
    def __init__(self, key: str, parent: str, namespace_id: str, token_count: int,
                 layers: Sequence[Layer], tokens: Optional[Tokens] = ...,
                 partial: bool = ...) -> None:
        """A record: its key (the chain hash of parent and tokens), its parent's key
        (the namespace root for a chain's first block), the namespace root, how
        many tokens it covers, one Layer per model layer, the token ids
        (optional) and whether it is a marked partial tail."""

def encode_block(record: BlockRecord, *, compress: bool = ...) -> bytes:
    """EncodeBlock: the record's canonical encoding (bytes), checksummed.
    Each tensor's element type is its array's dtype (uint16 or a
    torch.bfloat16 tensor: bfloat16). compress: zstd per tensor when it
    saves 5%. InvalidArgument for a record that cannot be encoded."""
def decode_block(data: bytes) -> BlockRecord:
    """DecodeBlock: decodes and verifies an encoded record (PKV.GET's reply).
    Corruption for damaged or malformed bytes."""
def chain_key(parent: str, tokens: Tokens) -> str:
    """ChainKey: the key of the block holding `tokens` after block `parent`
    (32 hex digits each; docs/format.md)."""
def namespace_root(model: str, layer_types: Sequence[str], *, block_tokens: int = ...,
                   dtype: str = ..., salt: str = ...) -> str:
    """NamespaceRoot: the root key of a model's namespace, the same in every
    process (what Namespace.root and PKV.REGISTER give)."""
