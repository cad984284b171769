// Eviction policies of the hot tier: which resident blocks may be evicted now,
// and in what order.
//
// The shared hot budget keeps every evictable block in one order (and one per
// owner) sorted by (Rank, last access). A policy only answers two questions
// about a block's facts, so adding a policy never touches the budget's locking
// or accounting. Pinned blocks are never offered to a policy's MayEvict: the
// budget excludes them first.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "prefixkv/advanced/tier.h"
#include "prefixkv/status.h"

namespace prefixkv {

// What a policy may know about a resident block. Maintained by the budget;
// every change goes through the budget so the order stays sorted.
struct EvictionCandidate {
  uint64_t last_access_seq = 0;    // budget-wide counter at the latest insert, hit or pin
  uint64_t charge_bytes = 0;       // see HotEntryCharge() in hot_tier.h
  OwnerId owner = 0;               // owner charged for the block
  uint32_t pins = 0;               // outstanding PinnedBlock handles
  uint32_t resident_children = 0;  // resident blocks of the same owner whose parent it is
  // Times this block's chain was reused: a hit adds one; a block inserted
  // under a resident parent starts from the parent's count (the new turn of a
  // conversation that was resumed is as hot as the prefix it extends).
  uint32_t chain_hits : 31 = 0;
  // The embedder hinted that the block is unlikely to be read again
  // (ReuseHint::kUnlikely, BlockTier::HintUnlikelyReuse): every built-in
  // policy ranks it before every block without the hint (Rank 0), so hinted
  // blocks leave first, the least recently used first. A hit or pin clears
  // it (the block was wanted after all); a replacement keeps it.
  uint32_t unlikely_reuse : 1 = 0;
};

// Stateless after construction; safe to call from any thread.
class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // The name ParseEvictionPolicy() accepts ("lru", "leaf-lru", "chain").
  virtual std::string_view name() const = 0;

  // Whether an unpinned block may be evicted in its current state.
  virtual bool MayEvict(const EvictionCandidate& c) const = 0;

  // Evictable blocks leave in ascending (Rank, last_access_seq) order.
  // Must depend only on the fields of `c`. The built-in policies return 0
  // for a block with `unlikely_reuse`.
  virtual uint64_t Rank(const EvictionCandidate& c) const = 0;
};

// `capacity_bytes` is the budget the policy orders (the chain policy scales
// its protection window with it; the others ignore it). 0 = unknown.
std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind,
                                                   uint64_t capacity_bytes = 0);

}  // namespace prefixkv
