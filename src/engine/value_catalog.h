// ValueCatalog: the key-value space's names and expiries in RAM, by key, so
// that SCAN walks names in key order and the expiry sweep finds due keys
// without reading values. The records in the tiers are the truth; the catalog
// is a cache of their headers: it learns a key when a value is written or a
// command probes its expiry, and all the keys the tiers hold when Engine
// fills it (the first SCAN, DBSIZE or sweep after an open reads each record
// once). An entry may outlive its record (a key evicted for capacity):
// readers check the tiers, and the sweep's hand forgets such entries.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/block.h"

namespace prefixkv::internal {

class ValueCatalog {
 public:
  struct Entry {
    BlockKey key;
    std::string name;
    uint64_t expires_at_ms = 0;  // 0: never
  };
  // Up to `count` entries from cursor position `cursor` on, in key order, and
  // the cursor of the next page (0 after the last). A cursor is the high 64
  // bits of the next key, and a page never ends between keys sharing them, so
  // an entry present for a whole walk is returned however entries come and
  // go meanwhile.
  struct Page {
    std::vector<Entry> entries;
    uint64_t next_cursor = 0;
  };

  void Note(const BlockKey& key, std::string_view name, uint64_t expires_at_ms)
      EXCLUDES(mu_);
  // Note, unless the key is known (a writer noted a newer record meanwhile).
  void NoteIfUnknown(const BlockKey& key, std::string_view name, uint64_t expires_at_ms)
      EXCLUDES(mu_);
  void Forget(const BlockKey& key) EXCLUDES(mu_);
  bool Knows(const BlockKey& key) const EXCLUDES(mu_);
  // The expiry noted for `key` (0: never); nullopt when unknown.
  std::optional<uint64_t> ExpiryOf(const BlockKey& key) const EXCLUDES(mu_);
  // The name noted for `key`; nullopt when unknown.
  std::optional<std::string> NameOf(const BlockKey& key) const EXCLUDES(mu_);
  Page From(uint64_t cursor, size_t count) const EXCLUDES(mu_);
  // The next `n` keys after the hand, which then moves past them (wrapping
  // round): the sweep checks them for values evicted meanwhile.
  std::vector<BlockKey> NextAfterHand(size_t n) EXCLUDES(mu_);
  // Up to `max` keys whose expiry is at or before `now_ms`, earliest first.
  std::vector<BlockKey> DueBy(uint64_t now_ms, size_t max) const EXCLUDES(mu_);

  // Whether every key of the tiers was noted once (Engine fills it once).
  bool filled() const { return filled_.load(std::memory_order_acquire); }
  void MarkFilled() { filled_.store(true, std::memory_order_release); }

 private:
  void ForgetLocked(const BlockKey& key) REQUIRES(mu_);
  void InsertLocked(const BlockKey& key, std::string_view name, uint64_t expires_at_ms)
      REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<BlockKey, Entry> by_key_ GUARDED_BY(mu_);
  std::set<std::pair<uint64_t, BlockKey>> by_expiry_ GUARDED_BY(mu_);
  BlockKey hand_ GUARDED_BY(mu_);
  std::atomic<bool> filled_{false};
};

}  // namespace prefixkv::internal
