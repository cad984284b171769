// BudgetState: lookups, pins, removal, and the ordered-set maintenance every
// operation shares. Hits are the hot path: one hash lookup and one
// repositioning in the global order (plus the owner's order when it has a
// quota), under one mutex, with no allocation.
#include <string>
#include <utility>

#include "hot_budget_state.h"

namespace prefixkv::hot_internal {

HotEntry* BudgetState::Find(OwnerId owner, const BlockKey& key) {
  auto& entries = Owner(owner).entries;
  auto it = entries.find(key);
  return it == entries.end() ? nullptr : &it->second;
}

void BudgetState::Unlink(HotEntry& e) {
  if (!e.global_hook.is_linked()) return;
  order_.erase(order_.iterator_to(e));
  if (e.owner_hook.is_linked()) {
    OwnerOrder& owner_order = Owner(e.facts.owner).order;
    owner_order.erase(owner_order.iterator_to(e));
  }
}

void BudgetState::Relink(HotEntry& e) {
  if (!Linkable(e)) return;
  e.rank = policy_->Rank(e.facts);
  // A touched entry is usually the newest, so try the end first.
  order_.insert(order_.end(), e);
  OwnerState& owner = Owner(e.facts.owner);
  if (owner.quota_bytes) owner.order.insert(owner.order.end(), e);
}

void BudgetState::Touch(HotEntry& e) {
  Unlink(e);
  e.facts.last_access_seq = ++access_seq_;
  Relink(e);
}

void BudgetState::AddChildRef(OwnerState& owner, const BlockMeta& child, int delta) {
  if (child.parent.IsZero() || child.parent == child.key) return;
  uint32_t count;
  if (delta > 0) {
    count = ++owner.child_counts[child.parent];
  } else {
    auto it = owner.child_counts.find(child.parent);
    count = --it->second;
    if (count == 0) owner.child_counts.erase(it);
  }
  auto parent = owner.entries.find(child.parent);
  if (parent == owner.entries.end()) return;
  HotEntry& p = parent->second;
  Unlink(p);
  p.facts.resident_children = count;
  Relink(p);
}

StatusOr<SharedBytes> BudgetState::Get(OwnerId owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  HotEntry* e = Find(owner, key);
  if (e == nullptr && !Owner(owner).spilling.empty()) {
    WaitForSpill(lock, owner, key);  // then it is in the lower tier
    e = Find(owner, key);            // or was put again meanwhile
  }
  OwnerState& o = Owner(owner);
  if (e == nullptr) {
    ++o.counters.misses;
    ++total_.misses;
    return Status::NotFound("hot tier: " + key.ToHex() + " not resident");
  }
  ++e->facts.chain_hits;        // before Touch: the rank includes it
  e->facts.unlikely_reuse = 0;  // read after all
  Touch(*e);
  ++o.counters.hits;
  ++total_.hits;
  return e->payload;
}

std::optional<PinnedBlock> BudgetState::Pin(OwnerId owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  HotEntry* e = Find(owner, key);
  if (e == nullptr && !Owner(owner).spilling.empty()) {
    WaitForSpill(lock, owner, key);
    e = Find(owner, key);
  }
  OwnerState& o = Owner(owner);
  if (e == nullptr) {
    ++o.counters.misses;
    ++total_.misses;
    return std::nullopt;
  }
  ++e->facts.chain_hits;
  e->facts.unlikely_reuse = 0;
  Touch(*e);  // a pinned entry keeps its place; victim selection skips it
  if (e->facts.pins++ == 0) {
    o.counters.pinned_bytes += e->facts.charge_bytes;
    total_.pinned_bytes += e->facts.charge_bytes;
  }
  ++o.counters.hits;
  ++total_.hits;
  return PinnedBlock(this, e, e->meta, e->payload);
}

void BudgetState::Unpin(HotEntry* e) {
  MutexLock lock(&mu_);
  if (--e->facts.pins == 0) {
    OwnerState& o = Owner(e->facts.owner);
    o.counters.pinned_bytes -= e->facts.charge_bytes;
    total_.pinned_bytes -= e->facts.charge_bytes;
  }
}

const HotEntry* BudgetState::FindSettled(MutexLock& lock, OwnerId owner,
                                         const BlockKey& key) const {
  const auto& entries = Owner(owner).entries;
  auto it = entries.find(key);
  if (it == entries.end() && !Owner(owner).spilling.empty()) {
    WaitForSpill(lock, owner, key);
    it = entries.find(key);
  }
  return it == entries.end() ? nullptr : &it->second;
}

StatusOr<BlockMeta> BudgetState::Peek(OwnerId owner, const BlockKey& key) const {
  MutexLock lock(&mu_);
  const HotEntry* e = FindSettled(lock, owner, key);
  if (e == nullptr) return Status::NotFound("hot tier: " + key.ToHex());
  return e->meta;
}

bool BudgetState::HasResidentChildren(OwnerId owner, const BlockKey& key) const {
  MutexLock lock(&mu_);
  return Owner(owner).child_counts.contains(key);
}

bool BudgetState::Contains(OwnerId owner, const BlockKey& key) const {
  MutexLock lock(&mu_);
  if (Owner(owner).entries.contains(key)) return true;
  if (Owner(owner).spilling.empty()) return false;
  WaitForSpill(lock, owner, key);
  return Owner(owner).entries.contains(key);
}

Status BudgetState::Remove(OwnerId owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  OwnerState& o = Owner(owner);
  auto it = o.entries.find(key);
  // A block being spilled is removed from the lower tier by the caller, which
  // must find it there: wait until the listener has taken it.
  if (it == o.entries.end() && !o.spilling.empty()) {
    WaitForSpill(lock, owner, key);
    it = o.entries.find(key);
  }
  if (it == o.entries.end()) return Status::NotFound("hot tier: " + key.ToHex());
  HotEntry& e = it->second;
  if (e.facts.pins > 0) return Status::Busy("hot tier: " + key.ToHex() + " is pinned");
  const KvRemoveReason reason = CurrentKvReason();
  EmitEvent(KvEventKind::kRemoved, e,
            reason == KvRemoveReason::kNone ? KvRemoveReason::kRemoved : reason);
  Unlink(e);
  AddChildRef(o, e.meta, -1);
  for (TierCounters* c : {&o.counters, &total_}) {
    --c->entries;
    c->bytes -= e.facts.charge_bytes;
    ++c->removes;
  }
  o.entries.erase(it);
  return Status::OK();
}

StatusOr<SharedBytes> BudgetState::PeekPayload(OwnerId owner, const BlockKey& key) const {
  MutexLock lock(&mu_);
  const HotEntry* e = FindSettled(lock, owner, key);
  if (e == nullptr) return Status::NotFound("hot tier: " + key.ToHex());
  return e->payload;
}

bool BudgetState::MarkClean(OwnerId owner, const BlockKey& key,
                            const SharedBytes& payload) {
  MutexLock lock(&mu_);
  HotEntry* e = Find(owner, key);
  if (e == nullptr || e->payload.data() != payload.data() ||
      e->payload.size() != payload.size()) {
    return false;  // gone, or replaced by a newer payload that is still dirty
  }
  e->dirty = false;
  return true;
}

bool BudgetState::HintUnlikelyReuse(OwnerId owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  HotEntry* e = Find(owner, key);
  if (e == nullptr) return false;  // absent, or being spilled: nothing to order
  if (e->facts.unlikely_reuse) return true;
  // Its last access stays: hinted blocks leave oldest first.
  Unlink(*e);
  e->facts.unlikely_reuse = 1;
  Relink(*e);
  return true;
}

void BudgetState::ForEach(
    OwnerId owner,
    const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const {
  MutexLock lock(&mu_);
  for (const auto& [key, e] : Owner(owner).entries) fn(e.meta, e.facts.charge_bytes);
}

}  // namespace prefixkv::hot_internal
