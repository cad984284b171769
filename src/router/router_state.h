// The router's state: the block index built from the nodes' events and the
// nodes' in-flight loads, under one lock (router.h).
//
// The index maps a block key to two bit masks, the nodes holding it in RAM
// and the nodes holding it on SSD: one entry per distinct block however many
// nodes hold it, and an entry exists only while some node does. So the index
// never holds more blocks than the nodes do together, and at most
// RouterOptions::max_blocks.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/block.h"
#include "prefixkv/kv_events.h"
#include "prefixkv/router.h"

namespace prefixkv::internal {

// Thread-compatible: PrefixRouter holds mu while it calls any method.
class RouterIndex {
 public:
  RouterIndex(size_t nodes, size_t max_blocks);

  void Apply(size_t node, const KvEvent& event, RouterStats* stats);
  void Forget(size_t node);
  // For every node, the leading blocks of `keys` it holds in RAM (`ram`) and
  // in RAM or on SSD (`local`).
  void Match(std::span<const BlockKey> keys, std::vector<size_t>* ram,
             std::vector<size_t>* local) const;
  bool Holds(size_t node, const BlockKey& key, TierLevel tier) const;
  size_t blocks() const { return map_.size(); }

 private:
  struct Masks {
    uint64_t hot = 0;  // bit i: node i holds the block in RAM
    uint64_t ssd = 0;  // bit i: node i holds it on SSD
  };
  // BlockKeyHash's mix, noexcept so that nodes do not cache the hash (a
  // 40-byte node: key, masks, next pointer).
  struct KeyHash {
    size_t operator()(const BlockKey& k) const noexcept {
      return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull));
    }
  };
  static uint64_t* TierMask(Masks& m, TierLevel tier);
  void Set(size_t node, const BlockKey& key, TierLevel tier, RouterStats* stats);
  void Clear(size_t node, const BlockKey& key, TierLevel tier);
  void ClearAll(uint64_t hot_clear, uint64_t ssd_clear);

  const size_t nodes_;
  const size_t max_blocks_;
  std::unordered_map<BlockKey, Masks, KeyHash> map_;
};

class RouterState {
 public:
  RouterState(const RouterOptions& options)
      : index(options.nodes, options.max_blocks),
        in_flight(options.nodes, 0),
        available(options.nodes, true) {}

  Mutex mu;
  RouterIndex index GUARDED_BY(mu);
  std::vector<uint64_t> in_flight GUARDED_BY(mu);
  std::vector<bool> available GUARDED_BY(mu);  // SetNodeAvailable
  RouterStats stats GUARDED_BY(mu);
  size_t next_tie GUARDED_BY(mu) = 0;  // rotates ties between idle nodes
  std::vector<size_t> ram GUARDED_BY(mu), local GUARDED_BY(mu);  // scratch
};

}  // namespace prefixkv::internal
