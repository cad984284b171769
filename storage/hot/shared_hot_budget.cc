// SharedHotBudget: construction, owners and quotas, counters. The public
// class forwards to BudgetState (hot_budget_state.h), which also serves the
// HotTier views.
#include "prefixkv/advanced/shared_hot_budget.h"

#include <cassert>
#include <string>
#include <utility>

#include "counter_audit.h"
#include "hot_budget_state.h"

namespace prefixkv {
namespace hot_internal {

BudgetState& Access::StateOf(SharedHotBudget& budget) { return *budget.state_; }

void BudgetState::Deliver(const std::vector<Delivery>& deliveries) {
  if (deliveries.empty()) return;
  for (const Delivery& d : deliveries) d.listener->OnEvict(d.meta, d.payload, d.dirty);
  {
    MutexLock lock(&mu_);
    for (const Delivery& d : deliveries) {
      --(d.shared ? shared_deliveries_in_flight_
                  : Owner(d.meta.owner).deliveries_in_flight);
      if (!d.dirty) continue;
      auto it = spilling_.find(d.meta.key);
      if (--it->second == 0) spilling_.erase(it);
    }
  }
  deliveries_done_.NotifyAll();
}

BudgetState::BudgetState(const SharedHotBudgetOptions& options)
    : capacity_bytes_(options.capacity_bytes),
      policy_(MakeEvictionPolicy(options.policy, options.capacity_bytes)),
      events_(options.events),
      clean_blocks_are_below_(options.clean_blocks_are_below) {}

void BudgetState::EmitEvent(KvEventKind kind, const HotEntry& e, KvRemoveReason reason) {
  if (events_ == nullptr) return;
  KvEvent event = MakeKvEvent(kind, TierLevel::kHot, e.meta, e.payload.size(), reason);
  event.copy_remains =
      kind == KvEventKind::kRemoved && !e.dirty && clean_blocks_are_below_;
  events_->Emit(event);
}

void BudgetState::DetachEvents() {
  MutexLock lock(&mu_);  // events are reported under it: none is in flight
  events_ = nullptr;
}

BudgetState::~BudgetState() {
  assert(total_.pinned_bytes == 0 && "a PinnedBlock outlived its SharedHotBudget");
  // Unlink everything before the entries (and their hooks) are destroyed.
  order_.clear();
  for (auto& owner : owners_) owner->order.clear();
  entries_.clear();
}

StatusOr<OwnerId> BudgetState::RegisterOwner(const std::string& name,
                                             std::optional<uint64_t> quota_bytes) {
  if (name.empty()) return Status::InvalidArgument("hot budget: empty owner name");
  if (quota_bytes && *quota_bytes == 0) {
    return Status::InvalidArgument("hot budget: zero quota for owner " + name);
  }
  MutexLock lock(&mu_);
  for (const auto& owner : owners_) {
    if (owner->name == name) {
      return Status::InvalidArgument("hot budget: owner " + name + " already registered");
    }
  }
  auto owner = std::make_unique<OwnerState>();
  owner->name = name;
  owner->quota_bytes = quota_bytes;
  owners_.push_back(std::move(owner));
  return static_cast<OwnerId>(owners_.size() - 1);
}

Status BudgetState::SetOwnerQuota(OwnerId id, std::optional<uint64_t> quota_bytes) {
  if (quota_bytes && *quota_bytes == 0)
    return Status::InvalidArgument("hot budget: zero quota");
  std::vector<Delivery> deliveries;
  {
    MutexLock lock(&mu_);
    if (id >= owners_.size()) {
      return Status::InvalidArgument("hot budget: unknown owner " + std::to_string(id));
    }
    OwnerState& owner = Owner(id);
    const bool had_quota = owner.quota_bytes.has_value();
    owner.quota_bytes = quota_bytes;
    if (!quota_bytes) {
      owner.order.clear();
    } else if (!had_quota) {
      for (auto& [key, e] : entries_) {
        if (e.facts.owner == id && e.global_hook.is_linked()) owner.order.insert(e);
      }
    }
    // Shrink to the new quota as far as unpinned blocks allow.
    std::vector<HotEntry*> victims;
    uint64_t bytes = owner.counters.bytes;
    while (quota_bytes && bytes > *quota_bytes) {
      HotEntry* victim = FirstUnpinned(owner.order);
      if (victim == nullptr) break;
      bytes -= TakeVictim(*victim, &victims);
    }
    CommitVictims(victims, &deliveries);
  }
  Deliver(deliveries);
  return Status::OK();
}

StatusOr<std::optional<uint64_t>> BudgetState::OwnerQuota(OwnerId id) const {
  MutexLock lock(&mu_);
  if (id >= owners_.size()) return Status::NotFound("hot budget: unknown owner");
  return Owner(id).quota_bytes;
}

StatusOr<std::string> BudgetState::OwnerName(OwnerId id) const {
  MutexLock lock(&mu_);
  if (id >= owners_.size()) return Status::NotFound("hot budget: unknown owner");
  return Owner(id).name;
}

size_t BudgetState::owner_count() const {
  MutexLock lock(&mu_);
  return owners_.size();
}

TierCounters BudgetState::Totals() const {
  MutexLock lock(&mu_);
  return total_;
}

TierCounters BudgetState::Totals(std::vector<TierCounters>* owners) const {
  MutexLock lock(&mu_);
  owners->clear();
  for (OwnerId id = 0; id < owners_.size(); ++id) owners->push_back(Owner(id).counters);
  return total_;
}

TierCounters BudgetState::OwnerCounters(OwnerId id) const {
  MutexLock lock(&mu_);
  return id < owners_.size() ? Owner(id).counters : TierCounters{};
}

bool BudgetState::HoldsNow(OwnerId id, const BlockKey& key) const {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && (id == kEveryOwner || it->second.facts.owner == id);
}

void BudgetState::SetListener(OwnerId id, EvictionListener* listener) {
  MutexLock lock(&mu_);
  if (id == kEveryOwner) {
    shared_listener_ = listener;
    deliveries_done_.Wait(
        lock, [&]() REQUIRES(mu_) { return shared_deliveries_in_flight_ == 0; });
    return;
  }
  OwnerState& owner = Owner(id);
  owner.listener = listener;
  // New victims already go to `listener`; wait out calls to the old one so
  // its owner may destroy it as soon as this returns.
  deliveries_done_.Wait(
      lock, [&]() REQUIRES(mu_) { return Owner(id).deliveries_in_flight == 0; });
}

}  // namespace hot_internal

SharedHotBudget::SharedHotBudget(const SharedHotBudgetOptions& options)
    : state_(std::make_unique<hot_internal::BudgetState>(options)) {}

SharedHotBudget::~SharedHotBudget() = default;

StatusOr<std::shared_ptr<SharedHotBudget>> SharedHotBudget::Create(
    const SharedHotBudgetOptions& options) {
  if (options.capacity_bytes == 0) {
    return Status::InvalidArgument("hot budget: capacity_bytes must be > 0");
  }
  return std::shared_ptr<SharedHotBudget>(new SharedHotBudget(options));
}

void SharedHotBudget::DetachEvents() { state_->DetachEvents(); }

StatusOr<OwnerId> SharedHotBudget::RegisterOwner(const std::string& name,
                                                 std::optional<uint64_t> quota_bytes) {
  return state_->RegisterOwner(name, quota_bytes);
}

Status SharedHotBudget::SetOwnerQuota(OwnerId owner,
                                      std::optional<uint64_t> quota_bytes) {
  return state_->SetOwnerQuota(owner, quota_bytes);
}

StatusOr<std::optional<uint64_t>> SharedHotBudget::OwnerQuota(OwnerId owner) const {
  return state_->OwnerQuota(owner);
}

StatusOr<std::string> SharedHotBudget::OwnerName(OwnerId owner) const {
  return state_->OwnerName(owner);
}

size_t SharedHotBudget::owner_count() const { return state_->owner_count(); }
uint64_t SharedHotBudget::capacity_bytes() const { return state_->capacity_bytes(); }
std::string_view SharedHotBudget::policy_name() const { return state_->policy_name(); }
TierCounters SharedHotBudget::Totals() const { return state_->Totals(); }
TierCounters SharedHotBudget::Totals(std::vector<TierCounters>* owners) const {
  return state_->Totals(owners);
}

bool SharedHotBudget::HoldsNow(OwnerId owner, const BlockKey& key) const {
  return state_->HoldsNow(owner, key);
}

Status SharedHotBudget::Charge(OwnerId owner, uint64_t bytes, uint64_t* shortfall_bytes) {
  return state_->Charge(owner, bytes, shortfall_bytes);
}

Status SharedHotBudget::Uncharge(OwnerId owner, uint64_t bytes) {
  return state_->Uncharge(owner, bytes);
}

TierCounters SharedHotBudget::OwnerCounters(OwnerId owner) const {
  return state_->OwnerCounters(owner);
}

Status SharedHotBudget::Audit(std::vector<AuditFinding>* findings) const {
  state_->Audit(findings);
  return Status::OK();
}

}  // namespace prefixkv
