// SsdIndex: the SSD tier's in-memory view of what is stored, rebuilt from the
// metadata records at Open. It answers lookups without touching the disk, keeps
// the live counters per owner, and orders eviction candidates: only chain
// leaves (blocks with no stored child) are candidates, so an ancestor is never
// evicted before its descendants; least recently used first, or with the
// chain policy (SetChainCapacity) a leaf of a reused chain as if accessed one
// tier's worth of blocks later (docs/eviction.md).
//
// Not thread-safe: ssd::TierImpl guards it with its index mutex (mu_).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prefixkv/advanced/tier.h"

namespace prefixkv::ssd {

struct IndexEntry {
  BlockKey namespace_id;
  BlockKey parent;
  OwnerId owner = 0;
  uint64_t bytes = 0;     // payload bytes (the charge)
  uint64_t checksum = 0;  // XXH3-64 of the payload
  uint64_t access_seq = 0;
  bool dirty = false;    // see StoredMeta::dirty
  uint64_t segment = 0;  // where the payload's extent is (StoredMeta)
  uint64_t offset = 0;
  // Reuse of the block's chain (the chain policy): hits on it, or on the
  // stored parent it inherited them from when inserted. Persisted in the
  // metadata record (StoredMeta::chain_hits, saturated at 65535) with every
  // write and with the reads' access-order batches, so a restart keeps it.
  uint32_t chain_hits = 0;
  // Stored (or pending) children of this block. Kept by SsdIndex (a value
  // passed to Insert is ignored): counting them in the entry instead of in a
  // map of their own saves a map node per stored parent (docs/ssd.md "RAM").
  uint32_t children = 0;
};

// Whether `a` and `b` name the same stored bytes: the same extent with the
// same length and checksum (a read made at `a` is a read of `b`).
inline bool SameExtent(const IndexEntry& a, const IndexEntry& b) {
  return a.segment == b.segment && a.offset == b.offset && a.bytes == b.bytes &&
         a.checksum == b.checksum;
}

// BlockKeyHash, noexcept: an unordered_map then keeps no hash code in each
// node (libstdc++ caches it when the hash may throw), 16 bytes per entry.
struct IndexKeyHash {
  size_t operator()(const BlockKey& k) const noexcept { return BlockKeyHash()(k); }
};

class SsdIndex {
 public:
  const IndexEntry* Find(const BlockKey& key) const;
  // Inserts or replaces; adjusts entries/bytes of the owners involved. The
  // entry's chain_hits becomes the most of its own, the replaced entry's and
  // the stored parent's (`inherit`; a rebuild from persisted records, which
  // hold the counts already, passes false).
  void Insert(const BlockKey& key, const IndexEntry& entry, bool inherit = true);
  // Removes; adjusts entries/bytes. False when absent.
  bool Erase(const BlockKey& key);
  // Records a new access; the block moves to the recent end of the order. A
  // hit (a read) also counts as a reuse of its chain.
  void Touch(const BlockKey& key, uint64_t access_seq, bool hit = false);
  // The chain policy over a tier of `capacity_bytes` (0: leaf-first LRU, the
  // default). REQUIRES: called before any Insert.
  void SetChainCapacity(uint64_t capacity_bytes) { chain_capacity_ = capacity_bytes; }
  // The block's payload moved (segment compaction); nothing else changes.
  void Relocate(const BlockKey& key, uint64_t segment, uint64_t offset);

  // Extent bytes (ExtentBytes of each payload) referenced in a segment.
  uint64_t LiveBytes(uint64_t segment) const;
  uint64_t live_total() const { return live_total_; }
  const std::unordered_map<uint64_t, uint64_t>& live_segments() const { return live_; }
  // Blocks whose payload is in `segment` (a scan of the index).
  std::vector<BlockKey> KeysIn(uint64_t segment) const;

  // The least recently used leaf not already claimed, or nullopt. The
  // returned block is claimed (skipped by later calls) until Erase, Insert or
  // Release.
  std::optional<BlockKey> ClaimVictim();
  void Release(const BlockKey& key);

  // A child whose Put is in flight counts as stored, so its parent cannot be
  // claimed meanwhile. Balanced by Insert (which counts it for real) plus
  // EndPendingChild, or by EndPendingChild alone when the Put failed.
  void BeginPendingChild(const BlockKey& parent);
  void EndPendingChild(const BlockKey& parent);

  bool HasStoredParent(const IndexEntry& e) const;
  // Stored children (and pending ones) of `key`.
  uint32_t ChildCount(const BlockKey& key) const;

  uint64_t size() const { return entries_.size(); }
  uint64_t bytes() const { return total_bytes_; }
  uint64_t max_access_seq() const { return max_seq_; }

  // Live counters (state and events) per owner; events are bumped by callers.
  TierCounters& Owner(OwnerId owner) { return owners_[owner]; }
  TierCounters OwnerCounters(OwnerId owner) const;
  TierCounters Totals() const;
  const std::map<OwnerId, TierCounters>& owners() const { return owners_; }

  using EntryMap = std::unordered_map<BlockKey, IndexEntry, IndexKeyHash>;
  const EntryMap& entries() const { return entries_; }

 private:
  bool IsLeaf(const BlockKey& key) const;
  // Where the entry sorts among the leaves.
  uint64_t Rank(const IndexEntry& e) const;
  void AddChild(const BlockKey& parent);
  void DropChild(const BlockKey& parent);
  void AddLeaf(const BlockKey& key);
  void DropLeaf(const BlockKey& key);
  void DropLive(uint64_t segment, uint64_t payload_bytes);

  EntryMap entries_;
  // Parents that are not stored here (a namespace root, a parent in another
  // tier, a child inserted first) -> their stored or pending children; a
  // stored parent counts its own (IndexEntry::children). Insert moves a count
  // from here into the entry, Erase back.
  std::unordered_map<BlockKey, uint32_t, IndexKeyHash> absent_children_;
  std::set<std::pair<uint64_t, BlockKey>> leaves_;  // (Rank, key), unclaimed leaves
  std::set<BlockKey> claimed_;
  std::map<OwnerId, TierCounters> owners_;
  std::unordered_map<uint64_t, uint64_t> live_;  // segment -> live extent bytes
  uint64_t live_total_ = 0;                      // their sum
  uint64_t total_bytes_ = 0;
  uint64_t max_seq_ = 0;
  uint64_t chain_capacity_ = 0;
};

}  // namespace prefixkv::ssd
