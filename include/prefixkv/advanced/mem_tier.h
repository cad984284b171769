// MemTier: the simple in-memory BlockTier.
//
// A map from key to payload with an optional byte capacity and plain LRU
// eviction. It is the reference tier: tests and replay use it where a real hot
// or SSD tier would add noise, and the typed tier conformance suite
// (tests/storage/tier_conformance.h) runs against it first. It has no pinning,
// no shared budget and no eviction policy choice; see hot_tier.h for those.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "prefixkv/advanced/tier.h"

namespace prefixkv {

// Bytes charged per entry on top of its payload, measured on x86-64 and
// rounded up: the entry in its hash-map node (~160 with allocator header),
// its LRU list node (~48) and the payload's shared control block (~48).
// Defined once here; MemTier::Charge() is the only place it is applied.
inline constexpr uint64_t kMemEntryOverheadBytes = 256;

struct MemTierOptions {
  // Maximum charged bytes resident at once; 0 means unlimited (never evicts).
  uint64_t capacity_bytes = 0;
};

// Thread-safe: every method may be called concurrently (one internal mutex).
// The eviction listener is called after the mutex is released.
class MemTier final : public BlockTier {
 public:
  explicit MemTier(MemTierOptions options = {});
  MemTier(const MemTier&) = delete;
  MemTier& operator=(const MemTier&) = delete;

  // Charged bytes of a block whose payload is `payload_bytes` long.
  static constexpr uint64_t Charge(uint64_t payload_bytes) {
    return payload_bytes + kMemEntryOverheadBytes;
  }

  std::string_view name() const override { return "mem"; }
  // NoSpace when Charge(payload.size()) exceeds the capacity; otherwise evicts
  // least recently used blocks until it fits. Replacing a block uncharges the
  // old version first. Every victim goes to the listener (if any) with its
  // dirty flag; the dirty ones count as spills.
  Status Put(const BlockMeta& meta, SharedBytes payload, bool dirty) override;
  // A hit returns the stored SharedBytes itself (no copy) and makes the block
  // the most recently used.
  StatusOr<SharedBytes> Get(const BlockKey& key) override;
  StatusOr<BlockMeta> Peek(const BlockKey& key) const override;
  bool Contains(const BlockKey& key) const override;
  Status Remove(const BlockKey& key) override;
  TierCounters Totals() const override;
  TierCounters OwnerCounters(OwnerId owner) const override;
  Status Audit(std::vector<AuditFinding>* findings) override;
  void ForEach(
      const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const override;
  void SetEvictionListener(EvictionListener* listener) override;

  uint64_t capacity_bytes() const { return options_.capacity_bytes; }

 private:
  struct Entry {
    BlockMeta meta;
    SharedBytes payload;
    uint64_t charge = 0;
    bool dirty = false;
    std::list<BlockKey>::iterator lru_pos;  // position in lru_
  };
  static_assert(sizeof(Entry) + sizeof(BlockKey) + 2 * sizeof(void*) <=
                    kMemEntryOverheadBytes,
                "Entry grew: revisit kMemEntryOverheadBytes");
  struct Victim {
    BlockMeta meta;
    SharedBytes payload;
    bool dirty;
  };

  // Applies `sign` (+1/-1) times the entry's state counters to its owner and
  // the totals. REQUIRES: mu_ held.
  void Account(const Entry& e, int sign);
  // Evicts least recently used entries until `incoming` more bytes fit,
  // appending what the listener must receive to `victims`. REQUIRES: mu_ held
  // and incoming <= capacity (so it always succeeds: MemTier never pins).
  void EvictFor(uint64_t incoming, std::vector<Victim>* victims);
  TierCounters& Owner(OwnerId owner) { return owners_[owner]; }

  const MemTierOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<BlockKey, Entry, BlockKeyHash> entries_;  // GUARDED_BY(mu_)
  std::list<BlockKey> lru_;                 // front = most recent; GUARDED_BY(mu_)
  std::map<OwnerId, TierCounters> owners_;  // GUARDED_BY(mu_)
  TierCounters total_;                      // GUARDED_BY(mu_)
  EvictionListener* listener_ = nullptr;    // GUARDED_BY(mu_)
  // Dirty victims handed to the listener whose OnEvict has not returned: in
  // neither tier for that moment, so lookups and removals of such a key wait
  // (as HotTier does, docs/hot_tier.md "No spill gap"). GUARDED_BY(mu_)
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> spilling_;
  mutable std::condition_variable spill_done_;
  // Waits while `key` is being spilled. REQUIRES: `lock` holds mu_.
  void WaitForSpill(std::unique_lock<std::mutex>& lock, const BlockKey& key) const;
};

}  // namespace prefixkv
