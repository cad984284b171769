// NamespaceState: what the prefix cache knows about one registered model.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "prefixkv/advanced/tip_lineage.h"
#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv {

// Immutable after registration except `lineage`, which `store_mu` guards, and
// the shape refusal counters (atomic).
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

  BlockMeta MetaFor(const BlockKey& key, const BlockKey& parent) const {
    return BlockMeta{key, parent, root, owner};
  }
  // A lookup of this namespace's blocks (its owner's read).
  TierRead Read() const { return TierRead{.owner = owner, .remote = remote}; }
  bool UsesRemote() const { return remote && tiers->has_remote(); }
};

}  // namespace prefixkv
