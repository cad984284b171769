// The runtime documentation of the Engine and its value classes (py_engine.cc;
// py_records.cc keeps the codec's next to its bindings): what
// help(prefixkv.Engine.store) and friends print. The one source of the text;
// python/prefixkv/_prefixkv.pyi repeats it for editors, and
// python/tests/test_docstrings.py fails when the two differ or a public
// callable has none.
#pragma once

namespace prefixkv::python::doc {

inline constexpr const char* kNamespace = "A registered model (Engine.register_model).";
inline constexpr const char* kNamespaceModel = "The model name it was registered with.";
inline constexpr const char* kNamespaceIndex = "The engine's index of the model.";
inline constexpr const char* kNamespaceRoot = "The chain root: 32 hex digits.";
inline constexpr const char* kNamespaceBlockTokens = "Tokens per block.";
inline constexpr const char* kNamespaceDType =
    "float16, float32 or bfloat16 (stored and restored as uint16 bits).";
inline constexpr const char* kNamespaceLayerTypes = "The cache type name of each layer.";

inline constexpr const char* kMatch =
    "The longest cached prefix of a prompt (Engine.match).";
inline constexpr const char* kMatchNs = "The namespace matched in.";
inline constexpr const char* kMatchTokens = "How many tokens the cached prefix covers.";
inline constexpr const char* kMatchKeys =
    "The matched blocks' keys (32 hex digits), in order.";
inline constexpr const char* kMatchTiers =
    R"doc(Where each matched block is: "hot" or "ssd".)doc";
inline constexpr const char* kMatchTokenIds = "The prompt's token ids.";

inline constexpr const char* kLayer =
    R"doc(One layer's cache: type name, meta strings, tensors (numpy arrays).

Sliceable layers (KVCache) hold tensors whose token axis is ndim - 2, e.g.
[1, kv_heads, tokens, head_dim]. Rotating layers (RotatingKVCache) hold the
window and meta (keep, max_size, offset, idx) with offset == len(tokens).)doc";
inline constexpr const char* kLayerInit =
    "A layer: its cache type name, its tensors (numpy arrays or CPU torch\n"
    "tensors), its meta strings, and whether it is a placeholder (no state).";
inline constexpr const char* kLayerCacheType = "The cache type name, e.g. KVCache.";
inline constexpr const char* kLayerMeta = "The cache type's meta state, as strings.";
inline constexpr const char* kLayerTensors = "The tensors, e.g. [keys, values].";
inline constexpr const char* kLayerPlaceholder =
    "True: a stand-in that carries no state.";

inline constexpr const char* kRestoredBlock =
    R"doc(One restored block as the tier holds it. layers' arrays are read-only
views of payload (the hot tier's own buffer when level == "hot"); the block
stays pinned in the hot tier while any of them lives.)doc";
inline constexpr const char* kBlockKey = "The block's key: 32 hex digits.";
inline constexpr const char* kBlockLevel =
    R"doc("hot" (pinned, the tier's bytes, unless a concurrent store evicted or
rewrote it after the restore read it) or "ssd".)doc";
inline constexpr const char* kBlockPinned =
    "True while the block is pinned in the hot tier.";
inline constexpr const char* kBlockTokenCount = "Tokens the block covers.";
inline constexpr const char* kBlockPartial = "True: a marked partial tail.";
inline constexpr const char* kBlockPayloadAddress =
    "Address of the encoded record's buffer.";
inline constexpr const char* kBlockPayloadSize = "Size of the encoded record in bytes.";
inline constexpr const char* kBlockLayers = "Per layer: a Layer viewing the payload.";

inline constexpr const char* kRestored =
    R"doc(Per-layer caches ready to continue at position restored_tokens.

layers[l].tensors are read-only numpy arrays. A layer restored from one
block, and every rotating/arrays layer (the tip's state), views the hot
tier's bytes (no copy, pinned while the array lives); a sliceable layer
spanning several blocks is one concatenated copy the array owns. blocks
gives the zero-copy per-block views.)doc";
inline constexpr const char* kRestoredLayers = "Per layer: a Layer of read-only arrays.";
inline constexpr const char* kRestoredBlocks =
    "The zero-copy per-block views (RestoredBlock).";
inline constexpr const char* kRestoredTokens =
    "Tokens restored: continue at this position.";
inline constexpr const char* kRestoredBlockCount = "Blocks restored.";
inline constexpr const char* kBlocksFromHot = "Blocks read from the hot tier.";
inline constexpr const char* kBlocksFromSsd = "Blocks read from the SSD tier.";
inline constexpr const char* kTokensFromHot = "Tokens read from the hot tier.";
inline constexpr const char* kTokensFromSsd = "Tokens read from the SSD tier.";
inline constexpr const char* kTokensFromRemote = "Tokens read from the remote tier.";
inline constexpr const char* kReason =
    "Empty when every matched token was restored; otherwise why not.";
inline constexpr const char* kWindowTokens =
    "The token ids in a rotating layer's window.";

inline constexpr const char* kStoreResult = "What a store did (Engine.store).";
inline constexpr const char* kStoreBlocks = "Blocks in the store.";
inline constexpr const char* kStoreWritten = "Blocks written now.";
inline constexpr const char* kStoreDeduplicated =
    "Blocks already cached (not rewritten).";
inline constexpr const char* kStoreTip = "The tip's key: 32 hex digits.";
inline constexpr const char* kStoreTipState =
    "True: the tip carries real rotating/arrays state.";
inline constexpr const char* kStoreHinted =
    R"doc(Written blocks the hot tier took as reuse="unlikely".)doc";
inline constexpr const char* kStoreNote =
    "Why a store did less than asked (empty otherwise).";

inline constexpr const char* kEngine =
    "prefixkv::Engine. Thread-safe; every call releases the GIL.";
inline constexpr const char* kOpen =
    R"doc(Opens the tiers. data_dir None: RAM only, nothing survives close() ("" is
InvalidArgument).
remote: a Redis Cluster shared by every node, "redis://host:port[,...]"
(docs/remote.md); remote_write: "on_spill" or "always". event_log: keep the
numbered KV event log (events(), docs/events.md). A data_dir is NotSupported
in a process forked from one that opened an engine with one (docs/python.md).)doc";
inline constexpr const char* kRegisterModel =
    R"doc(Registers a model (Engine::RegisterModel): its cache type per layer, tokens
per block, dtype (float16, float32, bfloat16), tenant salt. store_partial_tail:
the last block of a store may be a marked partial block. hot_quota_bytes: the
model's cap in the hot tier. More spec fields as keywords (each keyed only when
set): revision, tokenizer_hash, layer_shapes (one "HxD[wW][rCxCH:SHxSD]" string
per layer, e.g. "8x128w4096"), quantization, tp_rank, tp_size, pp_rank, pp_size.)doc";
inline constexpr const char* kExplainMiss =
    R"doc(Why `tokens` do not fully hit (Engine::ExplainMiss): the spec of `ns`
(a Namespace; or none) with each keyword (model, layer_types, block_tokens,
dtype, salt and the register_model spec keywords) replacing its field; the
spec need not be registered. A dict: kind (none, never-stored, not-stored,
evicted, removed, corrupt-dropped, stripped, other-namespace, in-remote),
reason, first_missed_block (-1: none), first_missed_key, cached_blocks,
restorable_tokens, other_namespace, remote_blocks,
restorable_with_remote_tokens and differences (field, stored, asked,
text, e.g. "tokenizer hash differs: stored abc, asked def").)doc";
inline constexpr const char* kMatchCall =
    "The longest cached prefix of `tokens` (a sequence or 1-D array of ints,\n"
    "each fitting int32).";
inline constexpr const char* kRestoreCall =
    "Restores a match (Engine::RestorePinned): the hot blocks stay pinned\n"
    "while the Restored object or any of its arrays lives.";
inline constexpr const char* kRestoreIntoCall =
    R"doc(Restores a match straight into your memory (Engine::RestoreInto):
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
in order; an exception it raises is raised after the restore.)doc";
inline constexpr const char* kRestorePlan =
    R"doc(What Engine.plan_restore planned: the restore's counters, and per layer
the host ranges holding its bytes. The hot blocks stay pinned until
release() or until the plan is garbage collected.)doc";
inline constexpr const char* kRestorePlanLayers =
    R"doc(Per layer: a dict with "bytes" (the size of the layer's contiguous
layout), "tensors" (dtype name, shape, offset, nbytes of each tensor in the
layout) and "ranges" (src_address, bytes, count, src_stride, dst_offset,
dst_stride: count chunks of bytes, chunk i read at src_address + i * src_stride
and written at dst_offset + i * dst_stride of the layout).)doc";
inline constexpr const char* kRestorePlanHeld = R"doc(True until release().)doc";
inline constexpr const char* kRestorePlanCopyLayer =
    R"doc(Applies layer `layer`'s ranges with memcpy into `dest`, a writable
C-contiguous buffer (or CPU torch tensor) of at least its bytes (what a copy
engine does). InvalidArgument for a read-only one.)doc";
inline constexpr const char* kRestorePlanRelease =
    R"doc(Unpins the blocks and frees the staging; the ranges dangle after. A
copy_layer running on another thread keeps them until it ends.)doc";
inline constexpr const char* kPlanRestoreCall =
    R"doc(Plans a restore for a copy engine (Engine::PlanRestore): per layer, the
host ranges holding its bytes and where each goes in a contiguous layout,
every range inside a region memory_regions() lists; the hot blocks stay
pinned until the plan is released.)doc";
inline constexpr const char* kMemoryRegions =
    R"doc(The regions (address, bytes) of the engine's memory resource, where hot
blocks and restore plans live: the memory to register for DMA.)doc";
inline constexpr const char* kRestoreCounters =
    "What a restore read: Restored and RestoredInto have these counters.";
inline constexpr const char* kRestoredInto =
    R"doc(What Engine.restore_into wrote: the restore's counters, and per
layer a Layer whose tensors are writable views of your destinations cut to
the restored shape.)doc";
inline constexpr const char* kRestoredIntoLayers =
    "Per layer: a Layer (type, meta) viewing the written part of each destination.";
inline constexpr const char* kStore =
    R"doc(One entry per layer covering every token: a Layer, or a list of
C-contiguous arrays of the namespace dtype (the layer's registered type,
no meta); CPU torch tensors are read in place. The arrays are copied
(without the GIL). reuse="unlikely" (ReuseHint::kUnlikely, e.g. after a
long answer): the blocks this store writes leave the hot tier first until
one is read again.)doc";
inline constexpr const char* kFlush =
    "Writes every dirty block to its tier (Engine::Flush).";
inline constexpr const char* kClose =
    "Flushes and closes (Engine::Close); waits for calls in flight.";
inline constexpr const char* kClosed = "True after close().";
inline constexpr const char* kStats =
    R"doc(EngineStats: hot_capacity_bytes, hot, owners, dirty_blocks,
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
estimated token hit ratio at 1/4x..8x of each tier; docs/eviction.md).)doc";
inline constexpr const char* kAudit =
    R"doc({"ok": bool, "findings": [(what, detail)], "orphans": [hex key]}.)doc";
inline constexpr const char* kHotBlockAddress =
    R"doc(Diagnostic: the address of the hot tier's buffer of block `key`
(None when not resident). Counts a hot hit.)doc";
inline constexpr const char* kGetBlock =
    R"doc(The encoded record of block `key` (bytes, what PKV.GET returns), or None
when it is not cached in the namespace, or holds other layer shapes than a
spec with shapes (never served; counted in shape_refused_tokens and removed).
Checksum-verified when read from SSD.)doc";
inline constexpr const char* kEnter =
    "Returns the engine: `with Engine.open(...) as e:`.";
inline constexpr const char* kExit = "Closes the engine.";
inline constexpr const char* kEvents =
    R"doc(The KV events from seq `from_seq` on (the last seq applied plus one; 0:
from the start of the log), oldest first, as an EventIterator of dicts: seq,
kind (stored, removed, moved, cleared), reason, tier, from, copy_remains,
owner, namespace, key, parent (hex), bytes, unix_ms (docs/events.md). Once
caught up it waits up to wait_ms for the next event, then stops. Raises
OutOfRange when the log cannot continue after from_seq - 1: take
event_snapshot() and resume from its seq + 1.)doc";
inline constexpr const char* kEventSnapshot =
    R"doc({"seq": int, "hot": [block], "ssd": [block]}: every block of the hot and
SSD tiers as the events say, after event `seq`; each block a dict of
namespace, key, parent (hex), owner, bytes.)doc";
inline constexpr const char* kEventLogStats =
    R"doc(The event log (Engine::EventLogStats): enabled, persistent, head_seq,
first_seq, events, bytes, retention_bytes, retention_ms, appended, trimmed,
reconciled, write_errors, keys_hot, keys_ssd.)doc";
inline constexpr const char* kEventIterator =
    "Iterates KV events (Engine.events); next_seq is where to resume.";
inline constexpr const char* kEventIter = "The iterator itself.";
inline constexpr const char* kEventNext =
    R"doc(The next event; StopIteration once caught up and nothing came within
wait_ms.)doc";
inline constexpr const char* kEventNextSeq =
    "The seq to resume from: after the last event handed out.";

}  // namespace prefixkv::python::doc
