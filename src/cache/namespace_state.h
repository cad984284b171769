// NamespaceState: what the prefix cache knows about one registered model.
#pragma once

#include <string>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "prefixkv/advanced/tip_lineage.h"
#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv {

// Immutable after registration except `lineage`, which `store_mu` guards.
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
