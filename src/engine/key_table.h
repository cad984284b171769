// KeyTable: the event log's key set of one tier (event_log.h), an
// open-addressing hash table of KvSnapshotBlock by key: linear probing,
// deletion by backward shift (no tombstones), at most 3/4 full. The log
// applies every event to it under its mutex, inside the tiers' locks, so an
// insert must not allocate per key the way std::unordered_map does (that
// cost 12% of a 16 KiB block's store: docs/benchmarks.md, "events").
// Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "prefixkv/kv_events.h"

namespace prefixkv::internal {

class KeyTable {
 public:
  // Inserts `b`, or replaces the entry with its key.
  void Put(const KvSnapshotBlock& b) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
    size_t i = Home(b.key);
    while (used_[i] && !(slots_[i].key == b.key)) i = (i + 1) & mask_;
    if (!used_[i]) ++size_;
    used_[i] = 1;
    slots_[i] = b;
  }
  // Removes the entry of `key`; false when there is none.
  bool Erase(const BlockKey& key) {
    if (size_ == 0) return false;
    size_t i = Home(key);
    while (used_[i] && !(slots_[i].key == key)) i = (i + 1) & mask_;
    if (!used_[i]) return false;
    // Backward shift: pull later entries of the run into the hole when the
    // hole lies between their home and where they are.
    size_t j = i;
    while (true) {
      j = (j + 1) & mask_;
      if (!used_[j]) break;
      const size_t home = Home(slots_[j].key);
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    used_[i] = 0;
    --size_;
    return true;
  }
  bool Contains(const BlockKey& key) const {
    if (size_ == 0) return false;
    size_t i = Home(key);
    while (used_[i]) {
      if (slots_[i].key == key) return true;
      i = (i + 1) & mask_;
    }
    return false;
  }
  void Clear() {
    slots_.clear();
    used_.clear();
    size_ = 0;
    mask_ = 0;
  }
  size_t size() const { return size_; }
  template <typename F>
  void ForEach(F&& f) const {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (used_[i]) f(slots_[i]);
    }
  }

 private:
  size_t Home(const BlockKey& k) const {
    // Block keys are XXH3 outputs: their bits are already uniform.
    return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)) & mask_;
  }
  void Grow() {
    std::vector<KvSnapshotBlock> old = std::move(slots_);
    std::vector<uint8_t> old_used = std::move(used_);
    const size_t n = old.empty() ? 64 : old.size() * 2;
    slots_.assign(n, KvSnapshotBlock{});
    used_.assign(n, 0);
    mask_ = n - 1;
    size_ = 0;
    for (size_t i = 0; i < old.size(); ++i) {
      if (old_used[i]) Put(old[i]);
    }
  }

  std::vector<KvSnapshotBlock> slots_;
  std::vector<uint8_t> used_;
  size_t size_ = 0;
  size_t mask_ = 0;
};

}  // namespace prefixkv::internal
