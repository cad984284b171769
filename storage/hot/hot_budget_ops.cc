// BudgetState: lookups, pins, removal, and the ordered-set maintenance every
// operation shares. Hits are the hot path: one hash lookup and one
// repositioning in the global order (plus the owner's order when it has a
// quota), under one mutex, with no allocation.
#include <string>
#include <utility>
#include <vector>

#include "hot_budget_state.h"

namespace prefixkv::hot_internal {

HotEntry* BudgetState::Find(OwnerId owner, const BlockKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  return owner == kEveryOwner || it->second.meta.owner == owner ? &it->second : nullptr;
}

void BudgetState::CountMiss(OwnerId owner) {
  if (owner == kEveryOwner) owner = CurrentReadOwner();
  if (owner < owners_.size()) {
    ++Owner(owner).counters.misses;
  } else {
    ++unattributed_misses_;
  }
  ++total_.misses;
}

void BudgetState::TransferOwner(HotEntry& e, OwnerId to) {
  OwnerState& from = Owner(e.facts.owner);
  OwnerState& into = Owner(to);
  const uint64_t charge = e.facts.charge_bytes;
  --from.counters.entries;
  from.counters.bytes -= charge;
  ++into.counters.entries;
  into.counters.bytes += charge;
  if (e.facts.pins > 0) {
    from.counters.pinned_bytes -= charge;
    into.counters.pinned_bytes += charge;
  }
  e.facts.owner = to;
  e.meta.owner = to;
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

void BudgetState::AddChildRef(const BlockMeta& child, int delta) {
  if (child.parent.IsZero() || child.parent == child.key) return;
  uint32_t count;
  if (delta > 0) {
    count = ++child_counts_[child.parent];
  } else {
    auto it = child_counts_.find(child.parent);
    count = --it->second;
    if (count == 0) child_counts_.erase(it);
  }
  auto parent = entries_.find(child.parent);
  if (parent == entries_.end()) return;
  HotEntry& p = parent->second;
  Unlink(p);
  p.facts.resident_children = count;
  Relink(p);
}

StatusOr<SharedBytes> BudgetState::Get(OwnerId owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  HotEntry* e = Find(owner, key);
  if (e == nullptr && !spilling_.empty()) {
    WaitForSpill(lock, owner, key);  // then it is in the lower tier
    e = Find(owner, key);            // or was put again meanwhile
  }
  if (e == nullptr) {
    CountMiss(owner);
    return Status::NotFound("hot tier: " + key.ToHex() + " not resident");
  }
  ++e->facts.chain_hits;        // before Touch: the rank includes it
  e->facts.unlikely_reuse = 0;  // read after all
  Touch(*e);
  ++Owner(e->facts.owner).counters.hits;
  ++total_.hits;
  return e->payload;
}

std::optional<PinnedBlock> BudgetState::Pin(OwnerId owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  HotEntry* e = Find(owner, key);
  if (e == nullptr && !spilling_.empty()) {
    WaitForSpill(lock, owner, key);
    e = Find(owner, key);
  }
  if (e == nullptr) {
    CountMiss(owner);
    return std::nullopt;
  }
  OwnerState& o = Owner(e->facts.owner);
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
  auto find = [&]() REQUIRES(mu_) -> const HotEntry* {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    return owner == kEveryOwner || it->second.meta.owner == owner ? &it->second : nullptr;
  };
  const HotEntry* e = find();
  if (e == nullptr && !spilling_.empty()) {
    WaitForSpill(lock, owner, key);
    e = find();
  }
  return e;
}

StatusOr<BlockMeta> BudgetState::Peek(OwnerId owner, const BlockKey& key) const {
  MutexLock lock(&mu_);
  const HotEntry* e = FindSettled(lock, owner, key);
  if (e == nullptr) return Status::NotFound("hot tier: " + key.ToHex());
  return e->meta;
}

bool BudgetState::HasResidentChildren(OwnerId owner, const BlockKey& key) const {
  (void)owner;  // one key space: a child names its parent whoever owns it
  MutexLock lock(&mu_);
  return child_counts_.contains(key);
}

bool BudgetState::Contains(OwnerId owner, const BlockKey& key) const {
  MutexLock lock(&mu_);
  return FindSettled(lock, owner, key) != nullptr;
}

Status BudgetState::Remove(OwnerId owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  // A block being spilled is removed from the lower tier by the caller, which
  // must find it there: FindSettled waits until the listener has taken it.
  HotEntry* found = const_cast<HotEntry*>(FindSettled(lock, owner, key));
  if (found == nullptr) return Status::NotFound("hot tier: " + key.ToHex());
  HotEntry& e = *found;
  OwnerState& o = Owner(e.facts.owner);
  if (e.facts.pins > 0) return Status::Busy("hot tier: " + key.ToHex() + " is pinned");
  const KvRemoveReason reason = CurrentKvReason();
  EmitEvent(KvEventKind::kRemoved, e,
            reason == KvRemoveReason::kNone ? KvRemoveReason::kRemoved : reason);
  Unlink(e);
  AddChildRef(e.meta, -1);
  for (TierCounters* c : {&o.counters, &total_}) {
    --c->entries;
    c->bytes -= e.facts.charge_bytes;
    ++c->removes;
  }
  entries_.erase(key);
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
  for (const auto& [key, e] : entries_) {
    if (owner == kEveryOwner || e.meta.owner == owner) fn(e.meta, e.facts.charge_bytes);
  }
}

void BudgetState::WaitForHandOvers() const {
  MutexLock lock(&mu_);
  // Only those in flight now: a victim taken later was in entries_ until
  // then, where a walk before this call found it.
  std::vector<BlockKey> in_flight;
  in_flight.reserve(spilling_.size());
  for (const auto& [key, deliveries] : spilling_) in_flight.push_back(key);
  for (const BlockKey& key : in_flight) WaitForSpill(lock, kEveryOwner, key);
}

}  // namespace prefixkv::hot_internal
