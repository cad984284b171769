// The private state of Session and SessionManager (shared by the
// src/session/*.cc files).
//
// Invariants (under State::mu): total_bytes == sum of live entries' charged bytes;
// with a MemoryCharge, what it holds == total_bytes plus the PendingCharges in
// flight (charged outside State::mu, not yet recorded); the LRU list holds
// exactly the live session ids, most recent first, so with a monotonic clock
// it is also sorted by last access and the TTL sweep stops at the first
// unexpired entry from the back.
//
// Locks (checked by clang's -Wthread-safety, order included), taken in this
// order and never the other way round:
//   1. a session's Session::State::mu (one at a time: no code holds two);
//   2. the manager's State::charge_mu, held from a charge to
//      SessionManagerOptions::memory until the table records it;
//   3. the manager's State::mu (the table).
// What runs under them: a step's model computation under its session's
// shared lock (ReadLayers); MemoryCharge::Uncharge (the shared hot budget's
// lock, briefly) under State::mu; MemoryCharge::Charge under charge_mu, and
// also under the session's exclusive lock when a live session grows. A
// charge takes the budget's lock and hands evicted blocks to their tier
// stacks after releasing it (stack dirty-set mutex, then the SSD tier's
// write-back queue, which may block), so those locks come after these, and
// none of them ever waits for a session or manager lock. Engine calls
// (Match, Restore, Store: prefix cache, tier stacks, SSD tier) run with none
// of these held.
#pragma once

#include <cassert>
#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/session.h"

namespace prefixkv {

// SessionManagerOptions::ttl_ms in nanoseconds (the clock's unit). A TTL past
// 2^64 ns (about 584 years) is past the clock's reach: it saturates, where
// the product wrapped into a TTL of a few milliseconds that evicted every
// idle session at once.
inline uint64_t TtlNanos(uint64_t ttl_ms) {
  constexpr uint64_t kNanosPerMilli = 1'000'000;
  return ttl_ms > UINT64_MAX / kNanosPerMilli ? UINT64_MAX : ttl_ms * kNanosPerMilli;
}

// One session's KV state. Steps read it under the shared lock; the manager
// changes it (Append, Truncate, the stored length) under the exclusive lock.
struct Session::State {
  State(std::map<int, LayerKvCache> layers, int64_t seq_len)
      : layers(std::move(layers)), seq_len(seq_len) {}

  // Taken before the manager's locks (see the top of this file).
  mutable SharedMutex mu;
  std::map<int, LayerKvCache> layers GUARDED_BY(mu);
  int64_t seq_len GUARDED_BY(mu);
  std::vector<int32_t> tokens GUARDED_BY(mu);  // seq_len ids if known
  bool tokens_known GUARDED_BY(mu) = true;
  int64_t stored_len GUARDED_BY(mu) = 0;  // seq_len at the last store
  // Counts every change of the layers (Append, Truncate): a store marks what
  // it read stored only when nothing changed since, since a truncate and an
  // append can restore the length with other tokens.
  uint64_t changes GUARDED_BY(mu) = 0;
};

// Thread-safe through its two mutexes: `mu` guards the table (every member
// marked GUARDED_BY); `charge_mu` serializes charges to
// SessionManagerOptions::memory and guards nothing.
class SessionManager::State {
 public:
  explicit State(const SessionManagerOptions& config)
      : store_removed(config.prefix_cache.engine != nullptr),
        memory(config.memory.get()) {}

  struct Entry {
    std::shared_ptr<Session> session;
    uint64_t bytes = 0;  // charged: the session's payload bytes
    uint64_t last_access_nanos = 0;
    std::list<std::string>::iterator lru;
    OpenedFrom opened_from;  // what its open counted besides `opened`
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

  // Held from a charge to SessionManagerOptions::memory until the table records it
  // (or it is refunded), taken after a session's lock and before `mu`: this
  // manager's charges run one at a time, so every byte the shared budget
  // holds for it, but the current charger's, belongs to a recorded session
  // that eviction can free.
  Mutex charge_mu ACQUIRED_AFTER(Session::State::mu);
  Mutex mu ACQUIRED_AFTER(charge_mu);
  std::unordered_map<std::string, Entry> live GUARDED_BY(mu);  // one epoch per id
  std::list<std::string> lru GUARDED_BY(mu);                   // front: most recent
  std::unordered_map<std::string, Tombstone> tombstones GUARDED_BY(mu);
  std::deque<std::pair<std::string, uint64_t>> tombstone_order GUARDED_BY(mu);
  uint64_t next_tombstone_seq GUARDED_BY(mu) = 0;
  uint64_t total_bytes GUARDED_BY(mu) = 0;
  SessionStats stats GUARDED_BY(mu);
  // Set when the manager is bound to a prefix cache: released and evicted
  // sessions are kept in `removed` until the public call that removed them
  // stores them (after dropping every lock: a store encodes and writes blocks).
  const bool store_removed;
  std::vector<std::shared_ptr<Session>> removed GUARDED_BY(mu);
  // SessionManagerOptions::memory, or null: what the live entries' bytes are
  // charged to (Remove refunds them).
  MemoryCharge* const memory;

  // Re-charges a live session to `new_bytes` (under config.budget_bytes, or
  // config.memory). A miss (or a stale-epoch error) when the session stopped
  // being live since it was resolved; NoSpace as documented at
  // SessionManagerOptions. src/session/session_memory.cc.
  StatusOr<std::optional<CacheMiss>> Recharge(const SessionManagerOptions& config,
                                              const std::shared_ptr<Session>& session,
                                              uint64_t new_bytes)
      REQUIRES(session->state_->mu) EXCLUDES(charge_mu, mu);
  // Charges `bytes` to config.memory for session `keep`, evicting this
  // manager's least recently used other sessions when the budget cannot make
  // room by evicting cache blocks. `opening_epoch`: the charge is for an Open
  // of `keep` at that epoch, so a live older epoch of `keep` (which the open
  // supersedes anyway) is superseded first, before any other session is
  // evicted; null for the growth of a live session.
  Status ChargeMemory(const SessionManagerOptions& config, const std::string& keep,
                      uint64_t bytes, const uint64_t* opening_epoch = nullptr)
      REQUIRES(charge_mu) EXCLUDES(mu);
  // Stores one session in config.prefix_cache (src/session/session_prefix_store.cc).
  StatusOr<SessionStoreResult> StoreSession(const SessionManagerOptions& config,
                                            const std::shared_ptr<Session>& session)
      EXCLUDES(session->state_->mu, charge_mu, mu);
  // Stores the sessions removed (released, evicted, superseded) since the last
  // call. REQUIRES: no session lock held either.
  void StoreRemoved(const SessionManagerOptions& config) EXCLUDES(charge_mu, mu);

  // Returns `bytes` to `memory`. Cannot fail: only charged bytes come back.
  void Refund(uint64_t bytes) {
    if (memory == nullptr || bytes == 0) return;
    Status refunded = memory->Uncharge(bytes);
    assert(refunded.ok());
    (void)refunded;
  }

  // A miss found by a check outside the table (a caller's expected length):
  // counted as Find counts the misses it returns, so `misses` counts every
  // CacheMiss the manager returns.
  CacheMiss CountMiss(CacheMiss miss) EXCLUDES(mu) {
    MutexLock lock(&mu);
    stats.misses++;
    return miss;
  }

  // Counts an open (sign +1) in stats, with what it restored, or takes a
  // rolled-back one out again (-1).
  void CountOpen(const OpenedFrom& from, int sign) REQUIRES(mu) {
    const auto add = [sign](uint64_t& counter, uint64_t n) {
      counter = sign > 0 ? counter + n : counter - n;
    };
    add(stats.opened, 1);
    if (from.restored_tokens > 0) {
      add(stats.prefix_restores, 1);
      add(stats.prefix_restored_tokens, static_cast<uint64_t>(from.restored_tokens));
    }
    if (from.unrestorable) add(stats.prefix_unrestorable, 1);
  }

  // Removes a live entry; records why (for later misses) unless reason is null.
  void Remove(const std::string& id, const CacheMissReason* reason, size_t max_tombstones)
      REQUIRES(mu) {
    auto it = live.find(id);
    if (it == live.end()) return;
    uint64_t epoch = it->second.session->route_epoch();
    if (store_removed && reason != nullptr) removed.push_back(it->second.session);
    total_bytes -= it->second.bytes;
    Refund(it->second.bytes);
    lru.erase(it->second.lru);
    live.erase(it);
    if (reason != nullptr) Remember(id, epoch, *reason, max_tombstones);
  }

  // Removes a live entry whose open is rolled back (Discard): not stored (it
  // holds only what its open restored) and, to later lookups of its epoch, as
  // if never opened (unknown-session); but its epoch stays known, since the
  // open superseded any older live epoch and replaced its tombstone: without
  // it a late call of an older route would pass the stale-epoch check again.
  void RemoveDiscarded(const std::string& id, size_t max_tombstones) REQUIRES(mu) {
    auto it = live.find(id);
    if (it == live.end()) return;
    const uint64_t epoch = it->second.session->route_epoch();
    CountOpen(it->second.opened_from, -1);  // as if never opened
    Remove(id, nullptr, max_tombstones);
    Remember(id, epoch, CacheMissReason::kUnknownSession, max_tombstones);
  }

  // Records why (id, epoch) is gone, forgetting the oldest tombstones past
  // max_tombstones.
  void Remember(const std::string& id, uint64_t epoch, CacheMissReason reason,
                size_t max_tombstones) REQUIRES(mu) {
    if (max_tombstones == 0) return;
    uint64_t seq = next_tombstone_seq++;
    tombstones[id] = {epoch, reason, seq};
    tombstone_order.emplace_back(id, seq);
    while (tombstone_order.size() > max_tombstones) {
      auto [old_id, old_seq] = tombstone_order.front();
      tombstone_order.pop_front();
      auto t = tombstones.find(old_id);
      if (t != tombstones.end() && t->second.seq == old_seq) tombstones.erase(t);
    }
  }

  // Removes a live entry that a newer epoch of its session replaces; it is
  // stored like a released one.
  void Supersede(const std::string& id, size_t max_tombstones) REQUIRES(mu) {
    auto it = live.find(id);
    if (it == live.end()) return;
    if (store_removed) removed.push_back(it->second.session);
    Remove(id, nullptr, max_tombstones);
    stats.superseded++;
  }

  void Evict(const std::string& id, CacheMissReason reason, size_t max_tombstones)
      REQUIRES(mu) {
    (reason == CacheMissReason::kEvictedTtl ? stats.evicted_ttl : stats.evicted_lru)++;
    Remove(id, &reason, max_tombstones);
  }

  // Recharge under config.budget_bytes: evicts other sessions to stay in
  // budget; NoSpace when the session alone would exceed it.
  StatusOr<std::optional<CacheMiss>> RechargeWithinBudget(
      const SessionManagerOptions& config, const std::shared_ptr<Session>& session,
      uint64_t new_bytes) REQUIRES(session->state_->mu) EXCLUDES(mu);

  // The table entry of exactly this session object, or null.
  Entry* LiveEntry(const std::shared_ptr<Session>& session) REQUIRES(mu) {
    auto it = live.find(session->session_id());
    return it != live.end() && it->second.session == session ? &it->second : nullptr;
  }

  // Why a session resolved earlier is no longer live: its miss, or the
  // stale-epoch error when a newer epoch replaced it.
  StatusOr<std::optional<CacheMiss>> GoneMiss(const std::shared_ptr<Session>& session)
      REQUIRES(mu) {
    PKV_RETURN_IF_ERROR(CheckEpoch(session->session_id(), session->route_epoch()));
    return std::optional<CacheMiss>(
        Find(session->session_id(), session->route_epoch()).miss);
  }

  void Touch(Entry& e, uint64_t now) REQUIRES(mu) {
    e.last_access_nanos = now;
    lru.splice(lru.begin(), lru, e.lru);
  }

  void SweepExpired(uint64_t now, uint64_t ttl_nanos, size_t max_tombstones)
      REQUIRES(mu) {
    if (ttl_nanos == 0) return;
    while (!lru.empty()) {
      const std::string& id = lru.back();
      uint64_t last = live.at(id).last_access_nanos;
      if (now <= last || now - last <= ttl_nanos) return;  // never underflow
      Evict(std::string(id), CacheMissReason::kEvictedTtl, max_tombstones);
    }
  }

  // Evicts least recently used sessions other than `keep` until at most
  // `max_live` sessions are live and they hold at most `max_total_bytes`
  // (or only `keep` is left).
  void EvictLruUntil(const std::string& keep, size_t max_live, uint64_t max_total_bytes,
                     size_t max_tombstones) REQUIRES(mu) {
    auto it = lru.end();
    while ((live.size() > max_live || total_bytes > max_total_bytes) &&
           it != lru.begin()) {
      --it;
      if (*it == keep) continue;
      std::string victim = *it;
      it = std::next(it);  // stays valid: only the victim's node is erased
      Evict(victim, CacheMissReason::kEvictedLru, max_tombstones);
    }
  }

  Status CheckEpoch(const std::string& id, uint64_t epoch) const REQUIRES(mu) {
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

  Lookup Find(const std::string& id, uint64_t epoch) REQUIRES(mu) {
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

// Bytes charged to SessionManagerOptions::memory for a change not yet recorded in
// the table (the charge ran outside State::mu); refunded when this goes out of
// scope unless Commit() was called once the table holds them. Lives within
// State::charge_mu's scope, so a refund cannot interleave with another charge.
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
class SessionManager::StoreRemovedOnExit {
 public:
  explicit StoreRemovedOnExit(SessionManager* manager) : manager_(manager) {}
  ~StoreRemovedOnExit() { manager_->state_->StoreRemoved(manager_->config_); }
  StoreRemovedOnExit(const StoreRemovedOnExit&) = delete;
  StoreRemovedOnExit& operator=(const StoreRemovedOnExit&) = delete;

 private:
  SessionManager* manager_;
};

// Shared error and miss constructors.
Status IncompatibleRecipeError(const KvCacheRecipe& want, const KvCacheRecipe& got);
CacheMiss SeqLenMiss(const std::string& id, uint64_t epoch, int64_t expected,
                     int64_t held);

}  // namespace prefixkv
