// NamespaceState: what the prefix cache knows about one registered model.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "prefixkv/advanced/tip_lineage.h"
#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv {
namespace cache {

// Cached blocks a store found of the spec's layer shapes (CheckStoredShapes),
// each with the TierStack::LocalChangeStamp read before its bytes were: while
// that stamp is unchanged no other bytes came in under the key (a remote
// copy promoted, a Rewrite, a Remove and a new Put all change it), so a store
// deduplicating against the block need not read it again. Bounded: forgets
// everything when full. Not thread-safe (NamespaceState::store_mu guards it).
class ShapeCheckMemo {
 public:
  static constexpr size_t kMaxBlocks = 16384;

  bool Holds(const BlockKey& key, uint64_t stamp) const {
    const auto it = stamps_.find(key);
    return it != stamps_.end() && it->second == stamp;
  }
  void Remember(const BlockKey& key, uint64_t stamp) {
    if (stamps_.size() >= kMaxBlocks && !stamps_.contains(key)) stamps_.clear();
    stamps_[key] = stamp;
  }

 private:
  std::unordered_map<BlockKey, uint64_t, BlockKeyHash> stamps_;
};

}  // namespace cache

// Immutable after registration except `lineage` and `shapes_checked`, which
// `store_mu` guards, and the shape refusal counters (atomic).
class cache::NamespaceState {
 public:
  NamespaceSpec spec;
  std::string fingerprint;
  BlockKey root;
  std::vector<CacheFamily> families;  // per layer, from spec.layer_types
  bool has_tip_only = false;          // any rotating/arrays/composite layer
  TierStack* tiers = nullptr;
  OwnerId owner = 0;
  bool remote = true;               // NamespaceOptions::remote
  bool partial_tail = false;        // NamespaceOptions::store_partial_tail
  bool check_layer_shapes = false;  // NamespaceOptions::check_layer_shapes

  // PrefixTokenCounters::shape_refused_stores and _tokens, counted where a
  // store or a restore refuses other shapes (PrefixCache::ShapeRefusals).
  std::atomic<uint64_t> shape_refused_stores{0};
  std::atomic<uint64_t> shape_refused_tokens{0};

  Mutex store_mu;  // serialises Store() and lineage access
  TipLineage lineage GUARDED_BY(store_mu);
  ShapeCheckMemo shapes_checked GUARDED_BY(store_mu);

  BlockMeta MetaFor(const BlockKey& key, const BlockKey& parent) const {
    return BlockMeta{key, parent, root, owner};
  }
  // A lookup of this namespace's blocks (its owner's read).
  TierRead Read() const { return TierRead{.owner = owner, .remote = remote}; }
  bool UsesRemote() const { return remote && tiers->has_remote(); }
};

}  // namespace prefixkv
