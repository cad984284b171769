// MemTier: map + LRU list under one mutex. Victims are collected under the
// lock and handed to the eviction listener after it is released, so a
// listener that blocks (backpressure from a slower tier) never stalls readers
// of other keys; a key whose dirty victim is being handed over makes its own
// lookups wait until the listener has it (no spill gap).
#include "tests/support/mem_tier.h"

#include <string>
#include <utility>

#include "counter_audit.h"  // storage/hot (tests/CMakeLists.txt)

namespace prefixkv {
namespace {

using audit::Compare;
using audit::CompareAll;

void AddState(TierCounters* c, uint64_t charge, int sign) {
  c->entries += static_cast<uint64_t>(sign);
  c->bytes += static_cast<uint64_t>(sign) * charge;
}

}  // namespace

MemTier::MemTier(MemTierOptions options) : options_(options) {}

void MemTier::Account(const Entry& e, int sign) {
  AddState(&Owner(e.meta.owner), e.charge, sign);
  AddState(&total_, e.charge, sign);
}

void MemTier::EvictFor(uint64_t incoming, std::vector<Victim>* victims) {
  if (options_.capacity_bytes == 0) return;
  auto it = lru_.end();
  while (total_.bytes + incoming > options_.capacity_bytes && it != lru_.begin()) {
    --it;
    auto node = entries_.find(*it);
    Entry& e = node->second;
    Account(e, -1);
    ++Owner(e.meta.owner).evictions;
    ++total_.evictions;
    if (listener_ != nullptr) {
      // Every victim reaches the listener; a spill is a dirty one, which the
      // next tier must store.
      if (e.dirty) {
        ++Owner(e.meta.owner).spills;
        ++total_.spills;
        ++spilling_[e.meta.key];
      }
      victims->push_back({e.meta, std::move(e.payload), e.dirty});
    }
    it = lru_.erase(it);
    entries_.erase(node);
  }
}

Status MemTier::Put(const BlockMeta& meta, SharedBytes payload, bool dirty) {
  const uint64_t charge = Charge(payload.size());
  if (options_.capacity_bytes != 0 && charge > options_.capacity_bytes) {
    return Status::NoSpace("block of " + std::to_string(charge) +
                           " charged bytes exceeds " + "capacity " +
                           std::to_string(options_.capacity_bytes));
  }
  std::vector<Victim> victims;
  EvictionListener* listener;
  {
    MutexLock lock(&mu_);
    auto found = entries_.find(meta.key);
    if (found != entries_.end()) {
      // Replace in place: uncharge the old version first so a smaller payload
      // shrinks the counters by exactly the difference.
      Account(found->second, -1);
      lru_.erase(found->second.lru_pos);
      entries_.erase(found);
    }
    EvictFor(charge, &victims);
    lru_.push_front(meta.key);
    Entry& e = entries_[meta.key];
    e = Entry{meta, std::move(payload), charge, dirty, lru_.begin()};
    Account(e, +1);
    ++Owner(meta.owner).inserts;
    ++total_.inserts;
    listener = listener_;
  }
  if (victims.empty()) return Status::OK();
  for (const Victim& v : victims) listener->OnEvict(v.meta, v.payload, v.dirty);
  {
    MutexLock lock(&mu_);
    for (const Victim& v : victims) {
      if (!v.dirty) continue;
      auto it = spilling_.find(v.meta.key);
      if (--it->second == 0) spilling_.erase(it);
    }
  }
  spill_done_.NotifyAll();
  return Status::OK();
}

void MemTier::WaitForSpill(MutexLock& lock, const BlockKey& key) const {
  spill_done_.Wait(lock, [&]() REQUIRES(mu_) { return !spilling_.contains(key); });
}

StatusOr<SharedBytes> MemTier::Get(const BlockKey& key) {
  MutexLock lock(&mu_);
  auto found = entries_.find(key);
  if (found == entries_.end() && !spilling_.empty()) {
    WaitForSpill(lock, key);
    found = entries_.find(key);
  }
  if (found == entries_.end()) {
    // Misses of unknown keys have no owner; they count in the total and in
    // owner 0 so that the total stays the sum of the owners.
    ++Owner(0).misses;
    ++total_.misses;
    return Status::NotFound("mem tier: " + key.ToHex() + " not resident");
  }
  Entry& e = found->second;
  lru_.splice(lru_.begin(), lru_, e.lru_pos);
  ++Owner(e.meta.owner).hits;
  ++total_.hits;
  return e.payload;
}

const MemTier::Entry* MemTier::FindSettled(MutexLock& lock, const BlockKey& key) const {
  auto found = entries_.find(key);
  if (found == entries_.end() && !spilling_.empty()) {
    WaitForSpill(lock, key);
    found = entries_.find(key);
  }
  return found == entries_.end() ? nullptr : &found->second;
}

StatusOr<BlockMeta> MemTier::Peek(const BlockKey& key) const {
  MutexLock lock(&mu_);
  const Entry* e = FindSettled(lock, key);
  if (e == nullptr) return Status::NotFound("mem tier: " + key.ToHex());
  return e->meta;
}

StatusOr<SharedBytes> MemTier::PeekPayload(const BlockKey& key) {
  MutexLock lock(&mu_);
  const Entry* e = FindSettled(lock, key);
  if (e == nullptr) return Status::NotFound("mem tier: " + key.ToHex());
  return e->payload;
}

bool MemTier::MarkStoredBelow(const BlockMeta& meta, const SharedBytes& payload) {
  MutexLock lock(&mu_);
  auto found = entries_.find(meta.key);
  if (found == entries_.end() || found->second.payload.data() != payload.data() ||
      found->second.payload.size() != payload.size()) {
    return false;
  }
  found->second.dirty = false;
  return true;
}

bool MemTier::Contains(const BlockKey& key) const {
  MutexLock lock(&mu_);
  if (entries_.contains(key) || spilling_.empty()) return entries_.contains(key);
  WaitForSpill(lock, key);
  return entries_.contains(key);
}

Status MemTier::Remove(const BlockKey& key) {
  MutexLock lock(&mu_);
  auto found = entries_.find(key);
  if (found == entries_.end() && !spilling_.empty()) {
    WaitForSpill(lock, key);
    found = entries_.find(key);
  }
  if (found == entries_.end()) return Status::NotFound("mem tier: " + key.ToHex());
  Entry& e = found->second;
  Account(e, -1);
  ++Owner(e.meta.owner).removes;
  ++total_.removes;
  lru_.erase(e.lru_pos);
  entries_.erase(found);
  return Status::OK();
}

TierCounters MemTier::Totals() const {
  MutexLock lock(&mu_);
  return total_;
}

TierCounters MemTier::OwnerCounters(OwnerId owner) const {
  MutexLock lock(&mu_);
  auto found = owners_.find(owner);
  return found == owners_.end() ? TierCounters{} : found->second;
}

Status MemTier::Audit(std::vector<AuditFinding>* findings) {
  MutexLock lock(&mu_);
  // State counters recomputed from the entries themselves.
  std::map<OwnerId, TierCounters> state;
  TierCounters state_total;
  for (const auto& [key, e] : entries_) {
    Compare("block " + key.ToHex() + " charge", e.charge, Charge(e.payload.size()),
            findings);
    AddState(&state[e.meta.owner], e.charge, +1);
    AddState(&state_total, e.charge, +1);
  }
  Compare("lru length", lru_.size(), entries_.size(), findings);
  if (options_.capacity_bytes != 0 && total_.bytes > options_.capacity_bytes) {
    findings->push_back({"total bytes", "counter " + std::to_string(total_.bytes) +
                                            " exceeds capacity " +
                                            std::to_string(options_.capacity_bytes)});
  }
  // Event counters cannot be recomputed from contents; the total must still
  // equal the sum over owners.
  TierCounters sum;
  for (const auto& [owner, c] : owners_) {
    TierCounters expected = c;
    const TierCounters recomputed = state.contains(owner) ? state[owner] : TierCounters{};
    expected.entries = recomputed.entries;
    expected.bytes = recomputed.bytes;
    expected.pinned_bytes = 0;  // MemTier never pins
    CompareAll("owner " + std::to_string(owner), c, expected, findings);
    audit::Sum(&sum, c);
  }
  for (const auto& [owner, c] : state) {
    if (!owners_.contains(owner)) {
      findings->push_back(
          {"owner " + std::to_string(owner), "has entries but no counters"});
    }
  }
  CompareAll("total", total_, sum, findings);
  Compare("total entries (recomputed)", total_.entries, state_total.entries, findings);
  Compare("total bytes (recomputed)", total_.bytes, state_total.bytes, findings);
  return Status::OK();
}

void MemTier::ForEach(
    const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const {
  MutexLock lock(&mu_);
  for (const auto& [key, e] : entries_) fn(e.meta, e.charge);
}

void MemTier::SetEvictionListener(EvictionListener* listener) {
  MutexLock lock(&mu_);
  listener_ = listener;
}

}  // namespace prefixkv
