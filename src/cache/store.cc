// PrefixCache::Store and StoreRecords: one path for both. Each plans a
// StoreChain (store_chain.h); WriteChain then deduplicates, writes, gives a
// cached placeholder tip the real state, and updates the supersede-on-extend
// lineage (docs/prefix_cache.md).
#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>

#include "block_builder.h"
#include "block_io.h"
#include "block_validation.h"
#include "namespace_state.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "store_chain.h"

namespace prefixkv {
namespace {

using cache::PlannedBlock;
using cache::StoreChain;

// The encoded record of the chain's block `i`; `real_tip`: it is the tip and
// carries the real tip-only state.
using BlockPayload = std::function<StatusOr<SharedBytes>(size_t i, bool real_tip)>;

// True when the cached block `key` carries real tip-only state.
bool IsRealTip(const cache::NamespaceState& ns, const BlockKey& key,
               const DecodeLimits& limits) {
  StatusOr<cache::LoadedBlock> block =
      cache::LoadBlock(ns, key, cache::BlockRead::kBookkeeping, limits);
  return block.ok() && cache::HasRealTipState(ns.families, block->record);
}

// A cached block of other shapes than the spec's (another model's in a
// namespace adopted from before its layer shapes were keyed; stored by an
// older binary or fetched from a node of one elsewhere) is never restored
// (block_validation.cc): a store of its tokens replaces it. Kept as a
// duplicate, it made every store of those tokens one never restored. So in a
// spec with layer shapes a store compares every cached block it would
// deduplicate against: a restore drops a block of other shapes wherever it
// sits in the chain (the first against the spec, a later one unlike the
// first), with every block after it, and one deduplicated in the middle of a
// chain (a right first block stored here, later ones fetched from a node of
// an older binary) made the store's blocks after it acknowledged and never
// restored. A block found right is not read again while its bytes stay the
// same (cache::CachedBlockHoldsOtherShapes): reading the chain's first block
// on every store made a deduplicated store of 4 cached 1 MiB blocks on SSD
// take about 700 us instead of 2 (prefixkv-bench scale --parts dedup).
bool ComparesCachedShapes(const cache::NamespaceState& ns) {
  return !ns.spec.layer_shapes.empty();
}

// After the store itself wrote `key` (of the spec's shapes): remembered when
// its change stamp moved by this write alone since `before`.
void RememberWritten(cache::NamespaceState& ns, const BlockKey& key, uint64_t before)
    REQUIRES(ns.store_mu) {
  if (ns.tiers->LocalChangeStamp(key) == before + 1)
    ns.shapes_checked.Remember(key, before + 1);
}

// Rewrites the grandparent tip with placeholders for its tip-only layers.
Status StripTip(const cache::NamespaceState& ns, const BlockKey& key,
                const PrefixCacheOptions& options) {
  StatusOr<cache::LoadedBlock> block =
      cache::LoadBlock(ns, key, cache::BlockRead::kBookkeeping, options.decode_limits);
  if (block.status().IsNotFound()) return Status::OK();  // evicted: nothing to strip
  if (!block.ok()) return block.status();
  if (!cache::StripTipState(ns.families, &block->record)) return Status::OK();
  Status s = cache::RewriteBlock(ns, block->record, options.encode);
  // NotFound: evicted since it was read. Busy: stripped below, a reader's
  // pinned copy (the same tokens' KV) served until it is evicted.
  return s.IsNotFound() || s.IsBusy() ? Status::OK() : s;
}

Status PersistLineage(cache::NamespaceState& ns) REQUIRES(ns.store_mu) {
  // Tips evicted from every tier can never be a previous tip again.
  ns.lineage.RetainIf([&](const BlockKey& k) { return ns.tiers->Contains(k); });
  PKV_ASSIGN_OR_RETURN(SharedBytes payload, EncodeBlock(ns.lineage.ToRecord(ns.root)));
  BlockMeta meta = ns.MetaFor(TipLineage::RecordKey(ns.root), ns.root);
  return ns.tiers->PutLowest(meta, std::move(payload));
}

// Whether the partial tip `key` of `count` tokens after `parent` (which ends
// at token `at` of the chain) holds the chain's own tokens there. They are
// the store's tokens, or, before them, the head of the cached ancestor
// that follows `parent` on the chain.
bool PartialTipOnChain(const cache::NamespaceState& ns, const StoreChain& chain,
                       const BlockKey& key, const BlockKey& parent, size_t at,
                       uint32_t count, const DecodeLimits& limits) {
  const size_t tokens_start = chain.blocks.front().start;
  if (at >= tokens_start) {
    if (at + count > tokens_start + chain.tokens.size()) return false;
    return ChainKey(parent, chain.tokens.subspan(at - tokens_start, count)) == key;
  }
  const PlannedBlock& next = chain.ancestors[at / ns.spec.block_tokens];
  StatusOr<cache::LoadedBlock> block =
      cache::LoadBlock(ns, next.key, cache::BlockRead::kBookkeeping, limits);
  if (!block.ok() || block->record.tokens.size() < count) return false;
  return ChainKey(parent, std::span<const int32_t>(block->record.tokens).first(count)) ==
         key;
}

// The previous tip of a store: the recorded tip on this store's chain that
// ends last before the store's own tip. A full tip is on the chain when its
// key is; a partial tail tip when its parent is and its tokens are the
// chain's tokens at that position. Interior blocks a store branches off are
// never recorded, so never found.
BlockKey FindPreviousTip(const cache::NamespaceState& ns, const StoreChain& chain,
                         const DecodeLimits& limits) REQUIRES(ns.store_mu) {
  const PlannedBlock& tip = chain.blocks.back();
  const size_t tip_end = tip.start + tip.count;
  std::unordered_map<BlockKey, size_t, BlockKeyHash> end_of{{ns.root, 0}};
  for (const PlannedBlock& b : chain.ancestors) end_of[b.key] = b.start + b.count;
  for (const PlannedBlock& b : chain.blocks) end_of[b.key] = b.start + b.count;
  BlockKey previous;
  size_t best_end = 0;
  ns.lineage.ForEachTip([&](const BlockKey& key, const TipPlace& place) {
    size_t end = 0;
    if (!place.partial) {
      auto it = end_of.find(key);
      if (it == end_of.end()) return;
      end = it->second;
    } else {
      auto it = end_of.find(place.parent);
      if (it == end_of.end()) return;
      end = it->second + place.token_count;
      if (end >= tip_end || end <= best_end) return;
      if (!PartialTipOnChain(ns, chain, key, place.parent, it->second, place.token_count,
                             limits)) {
        return;
      }
    }
    if (end < tip_end && end > best_end) {
      best_end = end;
      previous = key;
    }
  });
  return previous;
}

// Supersede-on-extend for a store whose real tip is the chain's last block
// (docs/prefix_cache.md, "Supersede-on-extend lineage").
Status UpdateLineage(cache::NamespaceState& ns, const StoreChain& chain,
                     const PrefixCacheOptions& options, StoreResult* result)
    REQUIRES(ns.store_mu) {
  const PlannedBlock& tip = chain.blocks.back();
  if (ns.lineage.IsTip(tip.key)) return Status::OK();  // the same tip stored again
  const BlockKey previous = FindPreviousTip(ns, chain, options.decode_limits);
  if (!previous.IsZero()) {
    const BlockKey grandparent = ns.lineage.PreviousOf(previous);
    if (!grandparent.IsZero() && ns.lineage.IsTip(grandparent)) {
      PKV_RETURN_IF_ERROR(StripTip(ns, grandparent, options));
      ns.lineage.Forget(grandparent);
      result->stripped_tip = grandparent;
    }
  }
  const bool partial = tip.count < ns.spec.block_tokens;
  ns.lineage.Record(tip.key, previous, TipPlace{tip.parent, tip.count, partial});
  return PersistLineage(ns);
}

// Writes the chain's blocks that are not cached yet (a cached placeholder
// copy of a real tip is rewritten in place, and counts as written for the
// reuse hint), then the lineage.
Status WriteChain(cache::NamespaceState& ns, const StoreChain& chain,
                  const BlockPayload& payload_of, const PrefixCacheOptions& options,
                  const StoreOptions& store_options, StoreResult* result)
    REQUIRES(ns.store_mu) {
  const bool unlikely = store_options.reuse == ReuseHint::kUnlikely;
  for (size_t i = 0; i < chain.blocks.size(); ++i) {
    const PlannedBlock& block = chain.blocks[i];
    const bool real_tip = chain.tip_state && i + 1 == chain.blocks.size();
    const bool cached = ns.tiers->Contains(block.key);
    const bool foreign =
        cached && ComparesCachedShapes(ns) &&
        cache::CachedBlockHoldsOtherShapes(ns, block.key, options.decode_limits);
    if (cached && !foreign &&
        (!real_tip || IsRealTip(ns, block.key, options.decode_limits))) {
      ++result->blocks_deduplicated;
      continue;
    }
    PKV_ASSIGN_OR_RETURN(SharedBytes payload, payload_of(i, real_tip));
    const BlockMeta meta = ns.MetaFor(block.key, block.parent);
    const uint64_t stamp = ns.tiers->LocalChangeStamp(block.key);
    Status rewritten = Status::NotFound("not cached");
    if (cached) {
      // The new tip exists as an interior block of a longer chain (or the
      // block is another model's): rewrite it in place (unless every tier
      // evicted it meanwhile).
      rewritten = ns.tiers->Rewrite(meta, payload);
      if (rewritten.ok()) RememberWritten(ns, block.key, stamp);
      // Busy: the new state is below; a reader's pinned copy of the block is
      // served until it is evicted (a restore walks back from it meanwhile).
      if (rewritten.IsBusy()) rewritten = Status::OK();
      if (!rewritten.ok() && !rewritten.IsNotFound()) return rewritten;
      if (foreign) {
        result->blocks_written += rewritten.ok() ? 1 : 0;
      } else {
        result->tip_rewritten = rewritten.ok();
      }
    }
    if (!rewritten.ok()) {
      PKV_RETURN_IF_ERROR(ns.tiers->Put(meta, std::move(payload)));
      RememberWritten(ns, block.key, stamp);
      ++result->blocks_written;
    }
    // A recorded tip that had vanished (or was another model's) comes back
    // as a placeholder.
    if (!real_tip && (foreign || !rewritten.ok())) ns.lineage.Forget(block.key);
    if (unlikely && ns.tiers->HintUnlikelyReuse(block.key))
      ++result->blocks_hinted_unlikely;
  }
  result->tip_state_stored = chain.tip_state;
  if (!chain.tip_state) return Status::OK();
  return UpdateLineage(ns, chain, options, result);
}

// The blocks of a store: every full block, then the partial tail if opted in.
std::vector<PlannedBlock> PlanBlocks(const cache::NamespaceState& ns,
                                     std::span<const int32_t> tokens) {
  const uint32_t block = ns.spec.block_tokens;
  std::vector<PlannedBlock> plan;
  plan.reserve(tokens.size() / block + 1);
  BlockKey parent = ns.root;
  for (size_t start = 0; start < tokens.size(); start += block) {
    const size_t count = std::min<size_t>(block, tokens.size() - start);
    if (count < block && !ns.partial_tail) break;
    const BlockKey key = ChainKey(parent, tokens.subspan(start, count));
    plan.push_back({key, parent, start, static_cast<uint32_t>(count)});
    parent = key;
  }
  return plan;
}

}  // namespace

StatusOr<StoreResult> PrefixCache::Store(Namespace handle,
                                         std::span<const int32_t> tokens,
                                         const std::vector<LayerState>& layers,
                                         const StoreOptions& store_options) {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  bool other_shapes = false;
  if (Status s = cache::CheckStoreLayers(*ns, tokens.size(), layers, &other_shapes);
      !s.ok()) {
    if (other_shapes) ns->shape_refused_stores.fetch_add(1);
    return s;
  }
  StoreResult result;
  StoreChain chain;
  chain.blocks = PlanBlocks(*ns, tokens);
  chain.tokens = tokens;
  result.blocks = chain.blocks.size();
  if (chain.blocks.empty()) return result;
  result.tip = chain.blocks.back().key;
  const bool ends_at_tip =
      chain.blocks.back().start + chain.blocks.back().count == tokens.size();
  chain.tip_state = ns->has_tip_only && ends_at_tip;
  if (ns->has_tip_only && !ends_at_tip) {
    result.note = "tokens do not end on a block boundary: tip-only state not stored";
  }
  auto build = [&](size_t i, bool real_tip) -> StatusOr<SharedBytes> {
    const cache::BlockDraft draft =
        cache::BuildBlock(*ns, tokens, layers, chain.blocks[i], real_tip);
    return EncodeBlockRows(draft.record, draft.rows, options_.encode);
  };
  MutexLock lock(&ns->store_mu);
  PKV_RETURN_IF_ERROR(WriteChain(*ns, chain, build, options_, store_options, &result));
  return result;
}

StatusOr<StoreResult> PrefixCache::StoreRecords(Namespace handle,
                                                const std::vector<SharedBytes>& records,
                                                const StoreOptions& store_options) {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(handle));
  std::vector<BlockRecord> decoded;
  std::vector<int32_t> tokens;
  StoreChain chain;
  PKV_RETURN_IF_ERROR(cache::PlanRecords(*ns, records, options_.decode_limits, &decoded,
                                         &tokens, &chain));
  StoreResult result;
  result.blocks = chain.blocks.size();
  result.tip = chain.blocks.back().key;
  if (ns->has_tip_only && !chain.tip_state) {
    result.note =
        "the tip's rotating/arrays layers are placeholders: no tip state stored";
  }
  // Stored as encoded: PlanRecords verified every byte.
  auto as_sent = [&](size_t i, bool) -> StatusOr<SharedBytes> { return records[i]; };
  MutexLock lock(&ns->store_mu);
  PKV_RETURN_IF_ERROR(WriteChain(*ns, chain, as_sent, options_, store_options, &result));
  return result;
}

}  // namespace prefixkv
