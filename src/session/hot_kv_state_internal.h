// The manager's private state (shared by the two hot_kv_state_*.cc files).
//
// Invariants (under State::mu): total_bytes == sum of live entries' charged bytes;
// with a MemoryCharge, what it holds == total_bytes plus the PendingCharges in
// flight (charged outside State::mu, not yet recorded); the LRU list holds
// exactly the live session ids, most recent first, so with a monotonic clock
// it is also sorted by last access and the TTL sweep stops at the first
// unexpired entry from the back. Session KV is only touched under the
// session's own lock, taken before State::mu (never after).
#pragma once

#include <cassert>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prefixkv/hot_kv_state.h"

namespace prefixkv {

// Not thread-safe by itself: every member is guarded by `mu`.
class HotKvStateManager::State {
 public:
  struct Entry {
    std::shared_ptr<HotKvSession> session;
    uint64_t bytes = 0;  // charged: the session's payload bytes
    uint64_t last_access_nanos = 0;
    std::list<std::string>::iterator lru;
  };
  struct Tombstone {
    uint64_t epoch = 0;
    CacheMissReason reason = CacheMissReason::kUnknownSession;
    uint64_t seq = 0;  // matches tombstone_order when this is the newest one
  };
  // Either a live entry or the miss that explains why there is none.
  struct Lookup {
    Entry* entry = nullptr;
    CacheMiss miss;
  };

  std::mutex mu;
  // Held from a charge to HotKvStateConfig::memory until the table records it
  // (or it is refunded), taken before `mu`: this manager's charges run one at
  // a time, so every byte the shared budget holds for it, but the current
  // charger's, belongs to a recorded session that eviction can free.
  std::mutex charge_mu;
  std::unordered_map<std::string, Entry> live;  // one epoch per id
  std::list<std::string> lru;                   // front: most recent
  std::unordered_map<std::string, Tombstone> tombstones;
  std::deque<std::pair<std::string, uint64_t>> tombstone_order;
  uint64_t next_tombstone_seq = 0;
  uint64_t total_bytes = 0;
  HotKvStats stats;
  // Set when the manager is bound to a prefix cache: released and evicted
  // sessions are kept here until the public call that removed them stores them
  // (after dropping every lock: a store encodes and writes blocks).
  bool store_removed = false;
  std::vector<std::shared_ptr<HotKvSession>> removed;
  // HotKvStateConfig::memory, or null: what the live entries' bytes are
  // charged to (Remove refunds them).
  MemoryCharge* memory = nullptr;

  // Returns `bytes` to `memory`. Cannot fail: only charged bytes come back.
  void Refund(uint64_t bytes) {
    if (memory == nullptr || bytes == 0) return;
    Status refunded = memory->Uncharge(bytes);
    assert(refunded.ok());
    (void)refunded;
  }

  // Removes a live entry; records why (for later misses) unless reason is null.
  void Remove(const std::string& id, const CacheMissReason* reason,
              size_t max_tombstones) {
    auto it = live.find(id);
    if (it == live.end()) return;
    uint64_t epoch = it->second.session->route_epoch();
    if (store_removed && reason != nullptr) removed.push_back(it->second.session);
    total_bytes -= it->second.bytes;
    Refund(it->second.bytes);
    lru.erase(it->second.lru);
    live.erase(it);
    if (reason == nullptr || max_tombstones == 0) return;
    uint64_t seq = next_tombstone_seq++;
    tombstones[id] = {epoch, *reason, seq};
    tombstone_order.emplace_back(id, seq);
    while (tombstone_order.size() > max_tombstones) {
      auto [old_id, old_seq] = tombstone_order.front();
      tombstone_order.pop_front();
      auto t = tombstones.find(old_id);
      if (t != tombstones.end() && t->second.seq == old_seq) tombstones.erase(t);
    }
  }

  void Evict(const std::string& id, CacheMissReason reason, size_t max_tombstones) {
    (reason == CacheMissReason::kEvictedTtl ? stats.evicted_ttl : stats.evicted_lru)++;
    Remove(id, &reason, max_tombstones);
  }

  // Re-charges a live session to `new_bytes`, evicting other sessions to stay in
  // budget. A miss (or a stale-epoch error) when the session stopped being live
  // since it was resolved; NoSpace when it alone would exceed the budget.
  // REQUIRES: mu not held (it is taken here).
  StatusOr<std::optional<CacheMiss>> Recharge(
      const HotKvStateConfig& config, const std::shared_ptr<HotKvSession>& session,
      uint64_t new_bytes);

  // The table entry of exactly this session object, or null.
  Entry* LiveEntry(const std::shared_ptr<HotKvSession>& session) {
    auto it = live.find(session->session_id());
    return it != live.end() && it->second.session == session ? &it->second : nullptr;
  }

  // Why a session resolved earlier is no longer live: its miss, or the
  // stale-epoch error when a newer epoch replaced it.
  StatusOr<std::optional<CacheMiss>> GoneMiss(
      const std::shared_ptr<HotKvSession>& session) {
    PKV_RETURN_IF_ERROR(CheckEpoch(session->session_id(), session->route_epoch()));
    return std::optional<CacheMiss>(
        Find(session->session_id(), session->route_epoch()).miss);
  }

  void Touch(Entry& e, uint64_t now) {
    e.last_access_nanos = now;
    lru.splice(lru.begin(), lru, e.lru);
  }

  void SweepExpired(uint64_t now, uint64_t ttl_nanos, size_t max_tombstones) {
    if (ttl_nanos == 0) return;
    while (!lru.empty()) {
      const std::string& id = lru.back();
      uint64_t last = live.at(id).last_access_nanos;
      if (now <= last || now - last <= ttl_nanos) return;  // never underflow
      Evict(std::string(id), CacheMissReason::kEvictedTtl, max_tombstones);
    }
  }

  // Evicts least recently used sessions other than `keep` until `fits` holds.
  template <typename Fits>
  void EvictLruUntil(const std::string& keep, size_t max_tombstones, Fits fits) {
    auto it = lru.end();
    while (!fits() && it != lru.begin()) {
      --it;
      if (*it == keep) continue;
      std::string victim = *it;
      it = std::next(it);  // stays valid: only the victim's node is erased
      Evict(victim, CacheMissReason::kEvictedLru, max_tombstones);
    }
  }

  Status CheckEpoch(const std::string& id, uint64_t epoch) const {
    uint64_t current = 0;
    bool known = false;
    if (auto it = live.find(id); it != live.end()) {
      current = it->second.session->route_epoch();
      known = true;
    } else if (auto t = tombstones.find(id); t != tombstones.end()) {
      current = t->second.epoch;
      known = true;
    }
    if (known && epoch < current) {
      return Status::InvalidArgument("stale route epoch: session '" + id + "' epoch " +
                                     std::to_string(epoch) + " is older than current " +
                                     std::to_string(current));
    }
    return Status::OK();
  }

  Lookup Find(const std::string& id, uint64_t epoch) {
    Lookup out;
    out.miss.session_id = id;
    out.miss.route_epoch = epoch;
    if (auto it = live.find(id);
        it != live.end() && it->second.session->route_epoch() == epoch) {
      out.entry = &it->second;
      return out;
    }
    if (auto t = tombstones.find(id); t != tombstones.end() && t->second.epoch == epoch) {
      out.miss.reason = t->second.reason;
    }
    stats.misses++;
    return out;
  }
};

// Bytes charged to HotKvStateConfig::memory for a change not yet recorded in
// the table (the charge ran outside State::mu); refunded when this goes out of
// scope unless Commit() was called once the table holds them.
class PendingCharge {
 public:
  PendingCharge(MemoryCharge* memory, uint64_t bytes) : memory_(memory), bytes_(bytes) {}
  ~PendingCharge() {
    if (bytes_ == 0) return;
    Status refunded = memory_->Uncharge(bytes_);
    assert(refunded.ok());
    (void)refunded;
  }
  PendingCharge(const PendingCharge&) = delete;
  PendingCharge& operator=(const PendingCharge&) = delete;
  void Commit() { bytes_ = 0; }

 private:
  MemoryCharge* const memory_;
  uint64_t bytes_;
};

// Declared first in every public method that can remove sessions: stores them
// once the method has dropped every lock (StoreRemoved).
class HotKvStateManager::StoreRemovedOnExit {
 public:
  explicit StoreRemovedOnExit(HotKvStateManager* manager) : manager_(manager) {}
  ~StoreRemovedOnExit() { manager_->StoreRemoved(); }
  StoreRemovedOnExit(const StoreRemovedOnExit&) = delete;
  StoreRemovedOnExit& operator=(const StoreRemovedOnExit&) = delete;

 private:
  HotKvStateManager* manager_;
};

// Shared error and miss constructors.
Status IncompatibleRecipeError(const KvCacheRecipe& want, const KvCacheRecipe& got);
CacheMiss SeqLenMiss(const std::string& id, uint64_t epoch, int64_t expected,
                     int64_t held);

}  // namespace prefixkv
