// MemTier: the simple in-memory BlockTier.
//
// A map from key to payload with an optional byte capacity and plain LRU
// eviction. It is the reference tier: tests and replay use it where a real hot
// or SSD tier would add noise, and the typed tier conformance suite
// (tests/storage/tier_conformance.h) runs against it first. It has no pinning,
// no shared budget and no eviction policy choice; see hot_tier.h for those.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <string_view>
#include <unordered_map>

#include "prefixkv/advanced/mutex.h"
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

// Thread-safe: every method may be called concurrently (one internal mutex,
// a leaf: nothing else is locked under it). The eviction listener is called
// after the mutex is released; ForEach's callback runs under it.
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
  // No hit counted, no touch (BlockTier).
  StatusOr<SharedBytes> PeekPayload(const BlockKey& key) override;
  bool MarkStoredBelow(const BlockMeta& meta, const SharedBytes& payload) override;
  bool Contains(const BlockKey& key) const override;
  // Too large for the capacity (MemTier never pins, so nothing else refuses).
  bool NeverHolds(const BlockMeta& /*meta*/, uint64_t bytes) const override {
    return options_.capacity_bytes != 0 && Charge(bytes) > options_.capacity_bytes;
  }
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
  // the totals.
  void Account(const Entry& e, int sign) REQUIRES(mu_);
  // Evicts least recently used entries until `incoming` more bytes fit,
  // appending what the listener must receive to `victims`. REQUIRES:
  // incoming <= capacity (so it always succeeds: MemTier never pins).
  void EvictFor(uint64_t incoming, std::vector<Victim>* victims) REQUIRES(mu_);
  TierCounters& Owner(OwnerId owner) REQUIRES(mu_) { return owners_[owner]; }
  // Waits while `key` is being spilled, releasing mu_ meanwhile.
  void WaitForSpill(MutexLock& lock, const BlockKey& key) const REQUIRES(mu_);
  // The entry of `key` once no spill of it is in flight; null when absent.
  const Entry* FindSettled(MutexLock& lock, const BlockKey& key) const REQUIRES(mu_);

  const MemTierOptions options_;
  mutable Mutex mu_;
  std::unordered_map<BlockKey, Entry, BlockKeyHash> entries_ GUARDED_BY(mu_);
  std::list<BlockKey> lru_ GUARDED_BY(mu_);  // front = most recent
  std::map<OwnerId, TierCounters> owners_ GUARDED_BY(mu_);
  TierCounters total_ GUARDED_BY(mu_);
  EvictionListener* listener_ GUARDED_BY(mu_) = nullptr;
  // Dirty victims handed to the listener whose OnEvict has not returned: in
  // neither tier for that moment, so lookups and removals of such a key wait
  // (as HotTier does, docs/hot_tier.md "No spill gap").
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> spilling_ GUARDED_BY(mu_);
  mutable CondVar spill_done_;  // signalled when spilling_ shrinks (after mu_)
};

}  // namespace prefixkv
