// BudgetState::Put: making room and storing a block.
//
// Room is made in two phases, both in policy order: first the inserting
// owner's own blocks while it would exceed its quota, then anyone's blocks
// while the budget would be exceeded. Victims are taken tentatively (unlinked
// and marked in flight, their parents' child counts released so that under
// leaf-lru a parent becomes a candidate once its last resident child goes),
// then committed together or rolled back (in reverse; each step is the exact
// inverse of taking that victim), which restores every order position and
// child count.
#include <algorithm>
#include <string>
#include <utility>

#include "hot_budget_state.h"

namespace prefixkv::hot_internal {

uint64_t BudgetState::TakeVictim(HotEntry& victim, std::vector<HotEntry*>* victims) {
  Unlink(victim);
  victim.in_flight = true;
  AddChildRef(victim.meta, -1);
  victims->push_back(&victim);
  return victim.facts.charge_bytes;
}

void BudgetState::CommitVictims(const std::vector<HotEntry*>& victims,
                                std::vector<Delivery>* out) {
  for (HotEntry* v : victims) {
    EmitEvent(KvEventKind::kRemoved, *v,
              KvRemoveReason::kEvicted);  // before the payload moves
    OwnerState& owner = Owner(v->facts.owner);
    const bool shared = owner.listener == nullptr;
    EvictionListener* listener = shared ? shared_listener_ : owner.listener;
    const bool handed_over = listener != nullptr;
    for (TierCounters* c : {&owner.counters, &total_}) {
      --c->entries;
      c->bytes -= v->facts.charge_bytes;
      ++c->evictions;
      if (handed_over && v->dirty) ++c->spills;
    }
    if (handed_over) {
      ++(shared ? shared_deliveries_in_flight_ : owner.deliveries_in_flight);
      if (v->dirty) ++spilling_[v->meta.key];
      out->push_back({listener, shared, v->meta, std::move(v->payload), v->dirty});
    }
    const BlockKey key = v->meta.key;
    entries_.erase(key);
  }
}

void BudgetState::RollbackVictims(const std::vector<HotEntry*>& victims) {
  for (auto it = victims.rbegin(); it != victims.rend(); ++it) {
    HotEntry& v = **it;
    v.in_flight = false;
    AddChildRef(v.meta, +1);
    Relink(v);
  }
}

uint64_t BudgetState::PlanRoom(OwnerState& owner, uint64_t owner_after,
                               uint64_t total_after, std::vector<HotEntry*>* victims) {
  // Both phases run to the end even when the first cannot make room, so that
  // a failed Charge can tell its caller the whole shortfall.
  while (owner.quota_bytes && owner_after > *owner.quota_bytes) {
    HotEntry* victim = FirstUnpinned(owner.order);
    if (victim == nullptr) break;
    const uint64_t freed = TakeVictim(*victim, victims);
    owner_after -= freed;
    total_after -= freed;
  }
  const uint64_t quota_excess = owner.quota_bytes && owner_after > *owner.quota_bytes
                                    ? owner_after - *owner.quota_bytes
                                    : 0;
  while (total_after > capacity_bytes_) {
    HotEntry* victim = FirstUnpinned(order_);
    if (victim == nullptr) break;
    total_after -= TakeVictim(*victim, victims);
  }
  const uint64_t capacity_excess =
      total_after > capacity_bytes_ ? total_after - capacity_bytes_ : 0;
  return std::max(quota_excess, capacity_excess);
}

void BudgetState::Replace(OwnerState& owner, HotEntry& e, const BlockMeta& meta,
                          SharedBytes payload, bool dirty) {
  if (e.meta.parent != meta.parent) {
    AddChildRef(e.meta, -1);
    AddChildRef(meta, +1);
  }
  const uint64_t old_charge = e.facts.charge_bytes;
  const uint64_t charge = HotEntryCharge(payload.size());
  // Exact in both directions: a smaller payload shrinks owner and budget
  // counters by precisely the difference (the rotating-tip strip relies on it).
  for (TierCounters* c : {&owner.counters, &total_}) {
    c->bytes = c->bytes - old_charge + charge;
    if (e.facts.pins > 0) c->pinned_bytes = c->pinned_bytes - old_charge + charge;
  }
  e.meta = meta;
  e.payload = std::move(payload);
  e.dirty = dirty;
  e.facts.charge_bytes = charge;
  e.in_flight = false;
  Touch(e);
}

void BudgetState::InsertNew(OwnerState& owner, const BlockMeta& meta, SharedBytes payload,
                            bool dirty) {
  HotEntry& e = entries_.try_emplace(meta.key).first->second;
  e.meta = meta;
  e.payload = std::move(payload);
  e.dirty = dirty;
  e.facts.owner = meta.owner;
  e.facts.charge_bytes = HotEntryCharge(e.payload.size());
  auto children = child_counts_.find(meta.key);
  e.facts.resident_children = children == child_counts_.end() ? 0 : children->second;
  e.facts.last_access_seq = ++access_seq_;
  // A chain's reuse count passes down to the blocks appended under it.
  auto parent = entries_.find(meta.parent);
  if (parent != entries_.end() && &parent->second != &e)
    e.facts.chain_hits = parent->second.facts.chain_hits;
  Relink(e);
  for (TierCounters* c : {&owner.counters, &total_}) {
    ++c->entries;
    c->bytes += e.facts.charge_bytes;
  }
}

Status BudgetState::Put(OwnerId owner_id, const BlockMeta& meta_in, SharedBytes payload,
                        bool dirty) {
  BlockMeta meta = meta_in;
  if (owner_id == kEveryOwner) owner_id = meta.owner;  // a budget-wide view
  meta.owner = owner_id;
  const uint64_t charge = HotEntryCharge(payload.size());
  std::vector<Delivery> deliveries;
  {
    MutexLock lock(&mu_);
    if (owner_id >= owners_.size()) {
      return Status::InvalidArgument("hot tier: block owner " + std::to_string(owner_id) +
                                     " is not registered");
    }
    OwnerState& owner = Owner(owner_id);
    if (charge > capacity_bytes_ || (owner.quota_bytes && charge > *owner.quota_bytes)) {
      return Status::NoSpace("hot tier: block of " + std::to_string(charge) +
                             " charged bytes exceeds the budget or the owner's quota");
    }
    // The key's block, whoever owns it: one key space (a Put by another owner
    // replaces it and takes over its charge).
    HotEntry* existing = Find(kEveryOwner, meta.key);
    const uint64_t old_charge = existing != nullptr ? existing->facts.charge_bytes : 0;
    const uint64_t owner_old_charge =
        existing != nullptr && existing->facts.owner == owner_id ? old_charge : 0;
    // The block itself is never a victim. A new block counts as its parent's
    // resident child from here on, so leaf-lru never evicts that parent for it.
    if (existing != nullptr) {
      Unlink(*existing);
      existing->in_flight = true;
    } else {
      AddChildRef(meta, +1);
    }
    std::vector<HotEntry*> victims;
    if (PlanRoom(owner, owner.counters.bytes - owner_old_charge + charge,
                 total_.bytes - old_charge + charge, &victims) != 0) {
      RollbackVictims(victims);
      if (existing != nullptr) {
        existing->in_flight = false;
        Relink(*existing);
      } else {
        AddChildRef(meta, -1);
      }
      return Status::NoSpace("hot tier: not enough unpinned blocks to evict for " +
                             std::to_string(charge) + " charged bytes");
    }
    CommitVictims(victims, &deliveries);
    HotEntry* stored = existing;
    if (existing != nullptr) {
      if (existing->facts.owner != owner_id) TransferOwner(*existing, owner_id);
      Replace(owner, *existing, meta, std::move(payload), dirty);
    } else {
      InsertNew(owner, meta, std::move(payload), dirty);
      stored = Find(kEveryOwner, meta.key);
    }
    EmitEvent(KvEventKind::kStored, *stored,
              existing != nullptr ? CurrentKvReason() : KvRemoveReason::kNone);
    ++owner.counters.inserts;
    ++total_.inserts;
  }
  Deliver(deliveries);
  return Status::OK();
}

}  // namespace prefixkv::hot_internal
