// PrefixCache: store, match and restore paged KV caches by token prefix
// (docs/prefix_cache.md).
//
// A model registers its layout and gets a Namespace. Store() cuts the per-layer
// caches of a token sequence into full blocks of `block_tokens` tokens, names
// each block by the chain hash of its whole prefix and writes the blocks that
// are not cached yet through a TierStack (hot RAM over SSD). Match() finds the
// longest cached prefix of a prompt; Restore() turns it back into per-layer
// caches ready to continue decoding.
//
// Layer families (namespace_spec.h) decide what a block holds:
//   sliceable (KVCache, quantized)  every block holds its own token slice of
//       every tensor, cut along the token axis (ndim - 2: [1, H, T, D] or
//       [H, T, D]);
//   rotating, arrays, composite     tip-only: the whole state lives in the
//       store's last block (its tip); every other block holds the standard
//       placeholder (MakePlaceholder: no tensors, `placeholder` set).
//
// Supersede-on-extend (namespaces with tip-only layers): each store records its
// tip and the earlier tip it extends (the tip lineage). When a store extends a
// chain whose previous tip P is a recorded real tip, the tip recorded before P
// (the grandparent) has its tip-only layers rewritten to placeholders through
// the tiers' Remove + Put paths, so at most the two newest tips of a growing
// conversation stay heavy and every byte counter stays exact. P stays whole:
// it is the walk-back fallback. The lineage is persisted as a small record
// under a reserved key of the namespace in the lowest tier (docs/prefix_cache.md).
//
// Thread-safe: every method may be called concurrently. Stores of one
// namespace are serialised (lineage updates must not interleave); matches and
// restores never wait for them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/tier_stack.h"
#include "prefixkv/block.h"
#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "prefixkv/memory_resource.h"
#include "prefixkv/namespace_spec.h"
#include "prefixkv/prefix_types.h"
#include "prefixkv/status.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

namespace cache {
class NamespaceState;  // src/cache/namespace_state.h
}  // namespace cache

struct NamespaceOptions {
  // Owner charged for the blocks (BlockMeta::owner) and whose reads the
  // namespace's lookups are (TierRead::owner).
  OwnerId owner = 0;
  // Store the tokens after the last full block as one marked partial block
  // (BlockRecord::partial), which then is the store's tip and carries the
  // rotating/arrays state; Match then also looks for such a tail (up to
  // block_tokens - 1 extra key lookups after the last matched full block).
  // Default off: full blocks only, and tip-only state is kept only when a
  // store ends on a block boundary. Recommended for models with sliding-window
  // or recurrent layers, whose turns rarely end on a boundary.
  bool store_partial_tail = false;
  // The chain root of the namespace's keys; zero: the spec fingerprint's.
  // (The Engine passes another one for a namespace written before its layer
  // shapes were keyed, docs/format.md §5 "Shapes recorded later".)
  BlockKey root;
  // The namespace's blocks may be read from and written to the remote tier
  // (false: a namespace kept from before its layer shapes were keyed; the
  // Engine also tells the stack, TierStack::KeepLocal).
  bool remote = true;
  // Every block read back must hold spec.layer_shapes (CheckLayerShapes), or
  // it is refused as a block of another layout. For a namespace kept from
  // before its layer shapes were keyed: its root may be shared with blocks of
  // a model of other shapes (the same name and layout), which the Engine's
  // adoption check, a sample of the blocks, cannot rule out.
  bool check_layer_shapes = false;
};

struct PrefixCacheOptions {
  // How blocks are encoded (store_tokens is forced on: restore checks them).
  EncodeOptions encode;
  // Bounds applied when decoding blocks read back from SSD.
  DecodeLimits decode_limits;
};

class PrefixCache {
 public:
  // Every namespace's blocks live in `tiers`, the engine's one stack; each
  // block names its owner. REQUIRES: `tiers` is not null and outlives the
  // cache.
  explicit PrefixCache(TierStack* tiers, PrefixCacheOptions options = {});
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Registers a model; the same fingerprint with the same options returns
  // the same Namespace. Loads the namespace's persisted tip lineage.
  // InvalidArgument for a bad spec (see NamespaceSpec::Fingerprint) or a
  // fingerprint already registered with other options.
  StatusOr<Namespace> RegisterModel(const NamespaceSpec& spec,
                                    const NamespaceOptions& options = {});

  // Stores the caches of `tokens`: `layers` holds one LayerState per layer
  // covering all tokens (sliceable tensors with tokens.size() rows on the
  // token axis; rotating meta with offset == tokens.size()). Full blocks, plus
  // the partial tail when the namespace opted in; tip-only state is stored
  // only when the last stored block ends at tokens.size() (otherwise the
  // blocks hold placeholders and `note` says so).
  // InvalidArgument when the layers do not fit the namespace layout.
  // `options.reuse` hints the blocks this store writes (ReuseHint).
  StatusOr<StoreResult> Store(Namespace ns, std::span<const int32_t> tokens,
                              const std::vector<LayerState>& layers,
                              const StoreOptions& options = {});

  // Stores blocks encoded elsewhere (a client of the RESP server's PKV.PUT)
  // as one store: `records` are encoded block records (codec.h) of namespace
  // `ns` forming one chain. Each must decode and verify, belong to `ns`,
  // carry its token ids with its key the chain hash of its parent and them,
  // hold block_tokens tokens (the last may be a marked partial tail when the
  // namespace stores them) and fit the namespace layout as Restore checks it
  // (layer families, dtype, shapes of the first record, rotating offsets).
  // The first record's parent is the root or a cached block whose chain
  // reaches the root; each next one's parent is the previous record. Only the
  // last record (the tip) may carry real rotating/arrays/composite state, all
  // of it or none. Then exactly as Store: cached blocks are deduplicated, a
  // cached placeholder tip gets the real state in place, and a real tip
  // records its lineage and strips the grandparent tip. The records are
  // stored as they were encoded. InvalidArgument (naming the record) when a
  // check fails, and nothing is written.
  StatusOr<StoreResult> StoreRecords(Namespace ns,
                                     const std::vector<SharedBytes>& records,
                                     const StoreOptions& options = {});

  // The encoded record of block `key` when it is cached in namespace `ns`
  // (hot, then SSD: checksum-verified by the SSD tier; an SSD hit is
  // promoted). NotFound for any other key (a block of another namespace, a
  // key-value entry, the namespace's own lineage record) and, in a spec with
  // layer shapes, for a block of other shapes than the spec's, never served:
  // it and `after` are refused as a restore refuses them (counted in
  // shape_refused_tokens; removed, but in an adopted namespace).
  StatusOr<SharedBytes> GetBlock(Namespace ns, const BlockKey& key,
                                 const BlocksAfter& after = {});

  // The spec `ns` was registered with.
  StatusOr<NamespaceSpec> Spec(Namespace ns) const;

  // The longest prefix of `tokens` whose blocks are all cached (stops at the
  // first miss). Counts no local hits. With a remote tier under the stack,
  // the blocks after the local prefix are asked from it through the stack
  // (TierStack::FetchRemote): every remaining full block and the partial
  // tails after the last one in one batch (one round trip per cluster master)
  // for up to kRemoteBatch blocks, then one batch per kRemoteBatch more. Each
  // block found that is the block asked for (its record's identity and
  // checksum) is stored locally (TierStack::Promote), so Restore reads it
  // from RAM; its MatchResult::tiers entry is TierLevel::kRemote.
  StatusOr<MatchResult> Match(Namespace ns, std::span<const int32_t> tokens) const;

  // Loads, validates and assembles a match (see RestoreResult). A block that
  // is gone or invalid ends the restore before it; walk-back then drops the
  // trailing blocks whose tip-only layers are placeholders. Restoring less
  // than matched is a value with a reason, not an error.
  StatusOr<RestoreResult> Restore(const MatchResult& match);
  // Hears of each block a restore used, in chain order: its record, the tier
  // it was read from and the very bytes read (the record's raw tensors view
  // them).
  using RestoredBlockSink = std::function<void(const BlockRecord& record, TierLevel level,
                                               const SharedBytes& payload)>;
  // Restore, telling `on_block` of each block it used (Engine::RestorePinned
  // pins those bytes, not whatever the tiers hold under the key afterwards).
  StatusOr<RestoreResult> Restore(const MatchResult& match,
                                  const RestoredBlockSink& on_block);
  // Restore into the caller's memory: the same blocks, the same bytes, each
  // copied once from the tier into `destinations` (one per namespace layer;
  // TensorDestination in tensor.h), layer by layer, `on_layer` (may be empty) told as
  // each layer completes. Every destination is checked before anything is
  // written: InvalidArgument (and the caller's memory untouched) for a
  // wrong layer or tensor count, dtype, stride, null or too small a buffer.
  // Restoring nothing writes nothing and checks only the layer count.
  StatusOr<RestoreIntoResult> RestoreInto(const MatchResult& match,
                                          std::span<const LayerDestination> destinations,
                                          const LayerRestoredCallback& on_layer = {});

  // Pins one loaded block (its record's tensors view the tier's bytes) for
  // a restore plan: a hold that keeps the very buffer the record views
  // resident in the hot tier, or null when that block is not resident there.
  using PlanPinner =
      std::function<std::shared_ptr<const void>(const BlockRecord& record)>;
  // Restore as a plan of host ranges (RestorePlan, prefix_types.h): the same blocks, the
  // same bytes, every range inside `memory` (parts outside it are staged
  // there: NoSpace when it has no room); each block `pin` gives a hold for
  // stays pinned while the plan is held. Errors as Restore.
  StatusOr<RestorePlan> PlanRestore(const MatchResult& match,
                                    const std::shared_ptr<MemoryResource>& memory,
                                    const PlanPinner& pin);

  // The recorded tips of a namespace and the tip each one extended (zero key:
  // none), oldest first. Always empty for namespaces without tip-only layers.
  StatusOr<std::vector<std::pair<BlockKey, BlockKey>>> RecordedTips(Namespace ns) const;

  // What the spec's layer shapes refused in `ns` since it was registered:
  // the shape_refused_* fields of PrefixTokenCounters (the others 0).
  // Thread-safe. NotFound for an unknown ns.
  StatusOr<PrefixTokenCounters> ShapeRefusals(Namespace ns) const;

  // Writes dirty hot blocks of every stack to SSD (before a clean shutdown).
  // Tries every stack; returns the first error.
  Status Flush();

  // Window sizes from the metadata of a block's layers (rotating meta parsed
  // from any rotating-family layer that is not a placeholder).
  static WindowPadding DetectWindowPadding(const std::vector<LayerState>& layers);

  // What Match checks of a value the remote tier read back (its envelope
  // sound) before it takes it: the record is block `key` of namespace
  // `namespace_id` after `parent`, holding `tokens` tokens, and its own
  // checksum verifies. Corruption saying why otherwise. ExplainMiss counts the
  // remote blocks a Match would take with it.
  static Status CheckRemoteRecord(const SharedBytes& payload, const BlockKey& key,
                                  const BlockKey& parent, const BlockKey& namespace_id,
                                  size_t tokens);
  // The chain keys of the partial tails after `parent`, shortest first: the
  // n-th is ChainKey(parent, tail.first(n)), read off one hash stream (Match
  // looks them up, and ExplainMiss as Match does).
  static std::vector<BlockKey> TailKeys(const BlockKey& parent,
                                        std::span<const int32_t> tail);

 private:
  StatusOr<cache::NamespaceState*> Find(Namespace ns) const;
  // True when `payload` (from the remote tier) is block `key` of `ns` after
  // `parent`, holding `tokens` tokens; it is then stored locally (Promote).
  bool PromoteRemote(cache::NamespaceState& ns, const BlockKey& key,
                     const BlockKey& parent, size_t tokens, SharedBytes payload) const;
  // Full blocks asked from the remote tier per batch in Match (a batch holds
  // every payload it finds at once).
  static constexpr size_t kRemoteBatch = 256;

  TierStack* const tiers_;
  const PrefixCacheOptions options_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<cache::NamespaceState>> namespaces_
      GUARDED_BY(mu_);  // append-only
};

}  // namespace prefixkv
