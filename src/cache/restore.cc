// PrefixCache::Restore: load, validate, walk back, assemble.
//
// Loading stops at the first block that is gone or fails validation (a miss,
// never garbage). Walk-back then drops trailing blocks whose tip-only layers
// are placeholders: a rotating window or recurrent state is only valid at the
// position it was captured, and only tips carry it, so the restore ends at the
// newest real tip. A namespace with tip-only layers and no real tip in the
// match restores nothing: the sliceable slices alone cannot rebuild a window
// or a recurrent state, so any positive length would decode wrongly.
#include <algorithm>
#include <string>

#include "block_builder.h"
#include "block_io.h"
#include "block_validation.h"
#include "namespace_state.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "restore_blocks.h"

namespace prefixkv {
namespace {

using cache::LoadedBlock;

// The reads a restore asks the tiers to make ahead of it (TierStack::
// ReadAhead): before the Get of block i, the blocks after it that Match found
// on SSD, as far as the SSD tier's read-ahead bound lets; whatever no Get
// took is forgotten when the restore stops (a block that failed validation
// ends it early). A restore of hot blocks asks nothing.
class ChainReadAhead {
 public:
  explicit ChainReadAhead(TierStack* tiers, const MatchResult& match)
      : tiers_(tiers), keys_(match.keys), levels_(match.tiers) {}
  ~ChainReadAhead() {
    for (const BlockKey& key : started_) tiers_->CancelReadAhead(key);
  }
  ChainReadAhead(const ChainReadAhead&) = delete;
  ChainReadAhead& operator=(const ChainReadAhead&) = delete;

  // Called before the Get of keys[i]: block i itself is read by that Get
  // (a read handed to another thread first would only add latency).
  void Before(size_t i) {
    next_ = std::max(next_, i + 1);
    for (; next_ < keys_.size(); ++next_) {
      // Where Match found it (a hint: the stack checks again).
      if (next_ < levels_.size() && levels_[next_] != TierLevel::kSsd) continue;
      const ReadAheadResult r = tiers_->ReadAhead(keys_[next_]);
      if (r == ReadAheadResult::kFull) return;  // again after this Get
      if (r == ReadAheadResult::kStarted) started_.push_back(keys_[next_]);
    }
  }

 private:
  TierStack* const tiers_;
  const std::span<const BlockKey> keys_;
  const std::span<const TierLevel> levels_;  // may be empty: then every key asks
  size_t next_ = 0;
  std::vector<BlockKey> started_;
};

// Loads and validates blocks in chain order until one fails; `reason` says
// why, `other_shapes` whether it failed for holding other shapes than the
// spec's. `on_loaded` (may be empty) hears of each block once it is valid.
std::vector<LoadedBlock> LoadValidBlocks(const cache::NamespaceState& ns,
                                         const MatchResult& match,
                                         const DecodeLimits& limits,
                                         const cache::LoadedBlockSink& on_loaded,
                                         std::string* reason, bool* other_shapes) {
  std::vector<LoadedBlock> blocks;
  blocks.reserve(match.keys.size());
  const size_t b = ns.spec.block_tokens;
  ChainReadAhead ahead(ns.tiers, match);
  for (size_t i = 0; i < match.keys.size(); ++i) {
    ahead.Before(i);
    StatusOr<LoadedBlock> block =
        cache::LoadBlock(ns, match.keys[i], cache::BlockRead::kRestore, limits);
    Status s = block.status();
    if (s.ok()) {
      const BlockKey parent = i == 0 ? ns.root : match.keys[i - 1];
      const size_t start = i * b;
      const size_t count = std::min(b, match.tokens.size() - start);
      s = cache::CheckRemotePlace(ns, *block, parent, count);
      if (s.ok()) {
        s = cache::ValidateBlock(
            ns, block->record, start, parent,
            std::span<const int32_t>(match.tokens).subspan(start, count),
            blocks.empty() ? nullptr : &blocks[0].record, other_shapes);
      }
    }
    if (!s.ok()) {
      *reason = "block " + std::to_string(i) + " (" + match.keys[i].ToHex() +
                "): " + s.ToString();
      break;
    }
    blocks.push_back(std::move(block).value());
    if (on_loaded) on_loaded(i, blocks.back());
  }
  return blocks;
}

// A block of other shapes than the spec's is never served (ValidateBlock),
// but left cached it was deduplicated against by every right store of its
// tokens, so they never restored again: it is removed with the matched blocks
// after it (cache::DropBlocksOfOtherShapes). A remote copy is the cluster's
// (a right store replaces it). A namespace adopted from before its shapes
// were keyed keeps them: its store reads every cached block and replaces one
// of other shapes (store.cc).
void DropMatchedBlocksOfOtherShapes(cache::NamespaceState& ns, const MatchResult& match,
                                    size_t from, const DecodeLimits& limits) {
  if (ns.check_layer_shapes || from >= match.keys.size()) return;
  (void)cache::DropBlocksOfOtherShapes(
      ns, std::span<const BlockKey>(match.keys).subspan(from), limits);
}

// Drops trailing blocks without real tip-only state; returns the reason when
// it dropped any.
std::string WalkBack(const cache::NamespaceState& ns, std::vector<LoadedBlock>* blocks) {
  if (!ns.has_tip_only || blocks->empty()) return "";
  size_t keep = blocks->size();
  while (keep > 0 && !cache::HasRealTipState(ns.families, (*blocks)[keep - 1].record))
    --keep;
  const size_t dropped = blocks->size() - keep;
  blocks->resize(keep);  // releases the dropped blocks' bytes (or hot-tier views)
  if (dropped == 0) return "";
  if (keep == 0) {
    return "no matched block carries real rotating/arrays state: restoring 0 tokens";
  }
  return "walk-back dropped " + std::to_string(dropped) +
         " trailing block(s) whose rotating/arrays layers are placeholders";
}

size_t TokensOf(const std::vector<LoadedBlock>& blocks) {
  size_t n = 0;
  for (const LoadedBlock& block : blocks) n += block.record.token_count;
  return n;
}

// Match follows full blocks, so a partial tail tip stored by an earlier,
// shorter store sits beside the chain (its position is also covered by a full
// block of a longer store) and walk-back cannot reach it: a prompt that
// branches off or re-sends an earlier turn would restore nothing of a model
// with tip-only layers. This finds the longest recorded partial tip on the
// matched path that ends after `kept` tokens, and returns the blocks before it
// plus that tip, loaded and validated; empty when there is none (or it is gone).
std::vector<LoadedBlock> LoadOffChainTip(cache::NamespaceState& ns,
                                         const MatchResult& match,
                                         const std::vector<LoadedBlock>& loaded,
                                         size_t kept, const DecodeLimits& limits) {
  const size_t b = ns.spec.block_tokens;
  const std::span<const int32_t> tokens(match.tokens);
  BlockKey best_tip;
  size_t best_blocks = 0, best_count = 0;
  {
    MutexLock lock(&ns.store_mu);
    ns.lineage.ForEachTip([&](const BlockKey& tip, const TipPlace& place) {
      if (!place.partial) return;
      // The tip hangs off block j-1 (the root for j == 0), after j full blocks.
      size_t j = 0;
      if (place.parent != ns.root) {
        auto it = std::find(match.keys.begin(), match.keys.end(), place.parent);
        if (it == match.keys.end()) return;
        j = static_cast<size_t>(it - match.keys.begin()) + 1;
      }
      // Only full blocks may precede it, and it must end inside what
      // `loaded` validated (the tokens after that are unverified).
      if (j > loaded.size() || (j > 0 && loaded[j - 1].record.token_count != b)) return;
      const size_t end = j * b + place.token_count;
      if (end <= kept || end > tokens.size() || end <= best_blocks * b + best_count)
        return;
      if (ChainKey(place.parent, tokens.subspan(j * b, place.token_count)) != tip) return;
      best_tip = tip;
      best_blocks = j;
      best_count = place.token_count;
    });
  }
  if (best_tip.IsZero()) return {};
  StatusOr<LoadedBlock> tip =
      cache::LoadBlock(ns, best_tip, cache::BlockRead::kRestore, limits);
  if (!tip.ok()) return {};
  const BlockKey parent = best_blocks == 0 ? ns.root : match.keys[best_blocks - 1];
  if (!cache::CheckRemotePlace(ns, *tip, parent, best_count).ok() ||
      !cache::ValidateBlock(ns, tip->record, best_blocks * b, parent,
                            tokens.subspan(best_blocks * b, best_count),
                            loaded.empty() ? &tip->record : &loaded[0].record)
           .ok() ||
      !cache::HasRealTipState(ns.families, tip->record)) {
    return {};
  }
  std::vector<LoadedBlock> out(loaded.begin(),
                               loaded.begin() + static_cast<int64_t>(best_blocks));
  out.push_back(std::move(tip).value());
  return out;
}

// The restored tensor is allocated in `memory` (the engine's memory
// resource: pre-faulted, and registered for DMA when the embedder asked).
StatusOr<Tensor> AssembleSliceable(const std::vector<LoadedBlock>& blocks, size_t l,
                                   size_t t,
                                   const std::shared_ptr<MemoryResource>& memory) {
  std::vector<Tensor> parts(blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b)
    parts[b] = blocks[b].record.layers[l].tensors[t];
  return Tensor::Concat(parts, cache::TokenAxis(parts[0]), memory);
}

StatusOr<std::vector<LayerState>> Assemble(
    const cache::NamespaceState& ns, const std::vector<LoadedBlock>& blocks,
    const std::shared_ptr<MemoryResource>& memory) {
  std::vector<LayerState> layers;
  layers.reserve(ns.families.size());
  const BlockRecord& tip = blocks.back().record;
  for (size_t l = 0; l < ns.families.size(); ++l) {
    LayerState layer = cache::RestoredLayerHead(ns, blocks, l);
    if (!IsSliceable(ns.families[l])) {
      layer.tensors = tip.layers[l].tensors;  // views of the tip's bytes
    } else {
      for (size_t t = 0; t < tip.layers[l].tensors.size(); ++t) {
        PKV_ASSIGN_OR_RETURN(Tensor whole, AssembleSliceable(blocks, l, t, memory));
        layer.tensors.push_back(std::move(whole));
      }
    }
    layers.push_back(std::move(layer));
  }
  return layers;
}

}  // namespace

WindowPadding PrefixCache::DetectWindowPadding(const std::vector<LayerState>& layers) {
  WindowPadding w;
  w.window_tokens.assign(layers.size(), 0);
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].placeholder ||
        !CacheTypeRegistry::IsRotatingFamily(layers[l].cache_type)) {
      continue;
    }
    StatusOr<RotatingMeta> meta = RotatingMeta::Parse(layers[l].meta);
    if (!meta.ok()) continue;
    w.window_tokens[l] = meta->max_size;
    w.max_window_tokens = std::max(w.max_window_tokens, meta->max_size);
  }
  return w;
}

namespace cache {

StatusOr<TensorParts> GatherTensorParts(const std::vector<LoadedBlock>& blocks,
                                        bool sliceable, size_t l, size_t t) {
  TensorParts out;
  const Tensor& tip = blocks.back().record.layers[l].tensors[t];
  out.restored = {tip.dtype(), tip.shape()};
  if (!sliceable) {
    out.parts = {&tip};
    return out;
  }
  const Tensor& first = blocks.front().record.layers[l].tensors[t];
  out.axis = TokenAxis(first);
  std::vector<int64_t> across = first.shape();  // every dimension but the token axis
  across[out.axis] = 0;
  out.restored.shape = across;
  for (const LoadedBlock& block : blocks) {
    const Tensor& part = block.record.layers[l].tensors[t];
    std::vector<int64_t> shape = part.shape();
    const bool same_kind = part.dtype() == first.dtype() && shape.size() == first.ndim();
    const int64_t tokens = same_kind ? shape[out.axis] : 0;
    if (same_kind) shape[out.axis] = 0;
    if (!same_kind || shape != across) {
      return Status::Corruption(
          "layer " + std::to_string(l) + " tensor " + std::to_string(t) +
          ": blocks disagree: " + first.DebugString() + " and " + part.DebugString());
    }
    out.parts.push_back(&part);
    out.restored.shape[out.axis] += tokens;
  }
  return out;
}

LayerState RestoredLayerHead(const NamespaceState& ns,
                             const std::vector<LoadedBlock>& blocks, size_t l) {
  const LayerState& tip = blocks.back().record.layers[l];
  LayerState head;
  head.cache_type = ns.families[l] == CacheFamily::kRotating
                        ? std::string(kRestoredRotatingType)
                        : tip.cache_type;
  head.meta = tip.meta;  // sliceable: the newest block's
  head.placeholder = !IsSliceable(ns.families[l]) && tip.placeholder;
  return head;
}

StatusOr<std::vector<LoadedBlock>> LoadRestoreBlocks(NamespaceState& ns,
                                                     const MatchResult& match,
                                                     const DecodeLimits& limits,
                                                     RestoreResult* result,
                                                     const LoadedBlockSink& on_loaded) {
  // Every matched block is full except perhaps a partial last one.
  const size_t b = ns.spec.block_tokens;
  const size_t k = match.keys.size();
  if (k != match.tiers.size() || match.tokens.size() > k * b ||
      (k > 0 && match.tokens.size() <= (k - 1) * b) ||
      (k == 0 && !match.tokens.empty())) {
    return Status::InvalidArgument("inconsistent MatchResult");
  }
  bool other_shapes = false;
  const std::vector<LoadedBlock> loaded =
      LoadValidBlocks(ns, match, limits, on_loaded, &result->reason, &other_shapes);
  if (other_shapes) {
    ns.shape_refused_tokens.fetch_add(match.tokens.size() - TokensOf(loaded));
    DropMatchedBlocksOfOtherShapes(ns, match, loaded.size(), limits);
  }
  std::vector<LoadedBlock> blocks = loaded;  // shares the records' bytes
  std::string walk_back = WalkBack(ns, &blocks);
  if (ns.has_tip_only && !walk_back.empty()) {
    std::vector<LoadedBlock> beside =
        LoadOffChainTip(ns, match, loaded, TokensOf(blocks), limits);
    if (!beside.empty()) {
      blocks = std::move(beside);
      walk_back += "; restored up to the partial tip at token " +
                   std::to_string(TokensOf(blocks)) + " instead";
    }
  }
  if (result->reason.empty()) {
    result->reason = std::move(walk_back);
  } else if (!walk_back.empty()) {
    result->reason += "; " + walk_back;
  }
  if (blocks.empty()) return blocks;
  result->restored_blocks = blocks.size();
  for (const LoadedBlock& block : blocks) {
    result->restored_tokens += block.record.token_count;
    // A block Match fetched from the remote tier counts as remote even when
    // it was read back from the local copy Match stored.
    bool remote = block.level == TierLevel::kRemote;
    for (size_t i = 0; i < k && !remote; ++i) {
      remote = match.keys[i] == block.record.key && match.tiers[i] == TierLevel::kRemote;
    }
    const bool hot = !remote && block.level == TierLevel::kHot;
    if (remote) {
      ++result->blocks_from_remote;
      result->tokens_from_remote += block.record.token_count;
      continue;
    }
    (hot ? result->blocks_from_hot : result->blocks_from_ssd)++;
    (hot ? result->tokens_from_hot : result->tokens_from_ssd) += block.record.token_count;
  }
  result->window = PrefixCache::DetectWindowPadding(blocks.back().record.layers);
  return blocks;
}

}  // namespace cache

StatusOr<RestoreResult> PrefixCache::Restore(const MatchResult& match) {
  return Restore(match, RestoredBlockSink());
}

StatusOr<RestoreResult> PrefixCache::Restore(const MatchResult& match,
                                             const RestoredBlockSink& on_block) {
  PKV_ASSIGN_OR_RETURN(cache::NamespaceState * ns, Find(match.ns));
  RestoreResult result;
  PKV_ASSIGN_OR_RETURN(
      std::vector<LoadedBlock> blocks,
      cache::LoadRestoreBlocks(*ns, match, options_.decode_limits, &result));
  if (blocks.empty()) return result;
  if (on_block) {
    for (const LoadedBlock& block : blocks)
      on_block(block.record, block.level, block.payload);
  }
  PKV_ASSIGN_OR_RETURN(result.layers, Assemble(*ns, blocks, options_.encode.memory));
  return result;
}

}  // namespace prefixkv
