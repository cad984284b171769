// HotTier: one owner's BlockTier view of a SharedHotBudget, and PinnedBlock.
// Everything forwards to the budget's BudgetState under its owner id.
#include "prefixkv/advanced/hot_tier.h"

#include <string>
#include <utility>

#include "hot_budget_state.h"

namespace prefixkv {

PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept
    : state_(other.state_),
      entry_(std::exchange(other.entry_, nullptr)),
      meta_(other.meta_),
      payload_(std::move(other.payload_)) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = other.state_;
    entry_ = std::exchange(other.entry_, nullptr);
    meta_ = other.meta_;
    payload_ = std::move(other.payload_);
  }
  return *this;
}

void PinnedBlock::Release() {
  if (entry_ == nullptr) return;
  state_->Unpin(std::exchange(entry_, nullptr));
}

StatusOr<std::unique_ptr<HotTier>> HotTier::Open(std::shared_ptr<SharedHotBudget> budget,
                                                 OwnerId owner,
                                                 std::shared_ptr<MemoryResource> memory) {
  if (budget == nullptr) return Status::InvalidArgument("hot tier: null budget");
  if (owner >= budget->owner_count()) {
    return Status::InvalidArgument("hot tier: owner " + std::to_string(owner) +
                                   " is not registered");
  }
  return std::unique_ptr<HotTier>(
      new HotTier(std::move(budget), owner, std::move(memory)));
}

StatusOr<std::unique_ptr<HotTier>> HotTier::OpenShared(
    std::shared_ptr<SharedHotBudget> budget, std::shared_ptr<MemoryResource> memory) {
  if (budget == nullptr) return Status::InvalidArgument("hot tier: null budget");
  return std::unique_ptr<HotTier>(
      new HotTier(std::move(budget), kEveryOwner, std::move(memory)));
}

StatusOr<std::unique_ptr<HotTier>> HotTier::Create(
    const SharedHotBudgetOptions& options) {
  PKV_ASSIGN_OR_RETURN(std::shared_ptr<SharedHotBudget> budget,
                       SharedHotBudget::Create(options));
  PKV_ASSIGN_OR_RETURN(OwnerId owner, budget->RegisterOwner("default"));
  return Open(std::move(budget), owner);
}

Status HotTier::Put(const BlockMeta& meta, SharedBytes payload, bool dirty) {
  // Blocks and values encoded by this process are allocated in the resource
  // already; clean blocks from below (SSD reads, remote fetches) are copied
  // in once, here. A dirty payload from elsewhere (a record a client sent)
  // stays where it is: the stack tracks a dirty block by its buffer until
  // it is written back, so it must stay the very buffer it put.
  if (memory_ != nullptr && !dirty && !payload.empty() &&
      !memory_->Contains(payload.data(), payload.size())) {
    SharedBytes copy = SharedBytes::CopyIn(memory_, payload.data(), payload.size());
    if (copy.data() == nullptr) {
      return Status::NoSpace("hot tier: the memory resource has no room for " +
                             std::to_string(payload.size()) + " bytes");
    }
    payload = std::move(copy);
  }
  return state().Put(owner_, meta, std::move(payload), dirty);
}

StatusOr<SharedBytes> HotTier::Get(const BlockKey& key) {
  return state().Get(owner_, key);
}

std::optional<PinnedBlock> HotTier::Pin(const BlockKey& key) {
  return state().Pin(owner_, key);
}

StatusOr<BlockMeta> HotTier::Peek(const BlockKey& key) const {
  return state().Peek(owner_, key);
}

bool HotTier::HasStoredChildren(const BlockKey& key) const {
  return state().HasResidentChildren(owner_, key);
}

bool HotTier::NeverHolds(const BlockMeta& meta, uint64_t bytes) const {
  // BudgetState::Put's first check, for the owner its Put charges.
  const uint64_t charge = HotEntryCharge(bytes);
  if (charge > state().capacity_bytes()) return true;
  StatusOr<std::optional<uint64_t>> quota =
      state().OwnerQuota(owner_ == kEveryOwner ? meta.owner : owner_);
  return quota.ok() && quota->has_value() && charge > **quota;
}

bool HotTier::Contains(const BlockKey& key) const {
  return state().Contains(owner_, key);
}

Status HotTier::Remove(const BlockKey& key) { return state().Remove(owner_, key); }

bool HotTier::HintUnlikelyReuse(const BlockKey& key) {
  return state().HintUnlikelyReuse(owner_, key);
}

StatusOr<SharedBytes> HotTier::PeekPayload(const BlockKey& key) {
  return state().PeekPayload(owner_, key);
}

bool HotTier::MarkStoredBelow(const BlockMeta& meta, const SharedBytes& payload) {
  return state().MarkClean(owner_, meta.key, payload);
}

TierCounters HotTier::Totals() const {
  return owner_ == kEveryOwner ? state().Totals() : state().OwnerCounters(owner_);
}

TierCounters HotTier::OwnerCounters(OwnerId owner) const {
  return owner == owner_ || owner_ == kEveryOwner ? state().OwnerCounters(owner)
                                                  : TierCounters{};
}

Status HotTier::Audit(std::vector<AuditFinding>* findings) {
  state().Audit(findings);
  return Status::OK();
}

void HotTier::ForEach(
    const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const {
  state().ForEach(owner_, fn);
}

void HotTier::WaitForHandOvers() const { state().WaitForHandOvers(); }

void HotTier::SetEvictionListener(EvictionListener* listener) {
  state().SetListener(owner_, listener);
}

}  // namespace prefixkv
