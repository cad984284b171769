// BudgetState::Charge and Uncharge: external charges, bytes an owner holds
// outside its blocks (a session manager's live KV caches) that count against
// the same capacity and quota as its blocks.
//
// A charge makes room exactly as an insert does (PlanRoom: the owner's own
// blocks while its quota would be exceeded, then anyone's while the budget
// would be), commits or rolls back its tentative victims together, and
// delivers them after the lock is released. Charges themselves are never
// victims: only their owner returns them (Uncharge), which never evicts.
//
// Accounting: OwnerState::charged_bytes is the content Audit() recomputes
// from; counters.external_bytes mirrors it and counters.bytes includes it, in
// the owner's counters and in the total.
#include <cstdint>
#include <string>
#include <vector>

#include "hot_budget_state.h"

namespace prefixkv::hot_internal {
namespace {

Status UnknownOwner(OwnerId owner) {
  return Status::InvalidArgument("hot budget: unknown owner " + std::to_string(owner));
}

}  // namespace

Status BudgetState::Charge(OwnerId owner_id, uint64_t bytes, uint64_t* shortfall_bytes) {
  if (shortfall_bytes != nullptr) *shortfall_bytes = 0;
  std::vector<Delivery> deliveries;
  {
    MutexLock lock(&mu_);
    if (owner_id >= owners_.size()) return UnknownOwner(owner_id);
    if (bytes == 0) return Status::OK();
    OwnerState& owner = Owner(owner_id);
    // Checked first so that the sums below cannot overflow.
    if (bytes > capacity_bytes_ || (owner.quota_bytes && bytes > *owner.quota_bytes)) {
      if (shortfall_bytes != nullptr) *shortfall_bytes = UINT64_MAX;
      return Status::NoSpace("hot budget: a charge of " + std::to_string(bytes) +
                             " bytes exceeds the budget or owner " + owner.name +
                             "'s quota");
    }
    std::vector<HotEntry*> victims;
    const uint64_t missing =
        PlanRoom(owner, owner.counters.bytes + bytes, total_.bytes + bytes, &victims);
    if (missing != 0) {
      RollbackVictims(victims);
      if (shortfall_bytes != nullptr) *shortfall_bytes = missing;
      return Status::NoSpace("hot budget: charging owner " + owner.name + " " +
                             std::to_string(bytes) + " bytes lacks " +
                             std::to_string(missing) +
                             " bytes even after evicting every evictable block");
    }
    CommitVictims(victims, &deliveries);
    owner.charged_bytes += bytes;
    for (TierCounters* c : {&owner.counters, &total_}) {
      c->bytes += bytes;
      c->external_bytes += bytes;
    }
  }
  Deliver(deliveries);
  return Status::OK();
}

Status BudgetState::Uncharge(OwnerId owner_id, uint64_t bytes) {
  MutexLock lock(&mu_);
  if (owner_id >= owners_.size()) return UnknownOwner(owner_id);
  OwnerState& owner = Owner(owner_id);
  if (bytes > owner.charged_bytes) {
    return Status::InvalidArgument("hot budget: uncharging " + std::to_string(bytes) +
                                   " bytes from owner " + owner.name + ", which holds " +
                                   std::to_string(owner.charged_bytes));
  }
  owner.charged_bytes -= bytes;
  for (TierCounters* c : {&owner.counters, &total_}) {
    c->bytes -= bytes;
    c->external_bytes -= bytes;
  }
  return Status::OK();
}

}  // namespace prefixkv::hot_internal
