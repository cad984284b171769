// Engine::OpenMemoryCharge: MemoryCharge handles over the engine's
// SharedHotBudget, each an owner that holds external charges only
// (docs/hot_tier.md, "External charges").
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include "engine_impl.h"

namespace prefixkv {
namespace {

// One handle of a charge owner. `charged_` is this handle's share: raised
// before a budget charge (lowered again if it fails) and lowered before an
// uncharge, so two handles of one owner cannot return each other's bytes.
// Thread-safe.
class BudgetMemoryCharge final : public MemoryCharge {
 public:
  BudgetMemoryCharge(std::shared_ptr<SharedHotBudget> budget, OwnerId owner,
                     std::string name)
      : budget_(std::move(budget)), owner_(owner), name_(std::move(name)) {}

  ~BudgetMemoryCharge() override {
    // Cannot fail: the owner holds at least this handle's share.
    if (charged_.load() > 0) (void)budget_->Uncharge(owner_, charged_.load());
  }

  Status Charge(uint64_t bytes, uint64_t* shortfall_bytes) override {
    charged_.fetch_add(bytes);
    Status charged = budget_->Charge(owner_, bytes, shortfall_bytes);
    if (!charged.ok()) charged_.fetch_sub(bytes);
    return charged;
  }

  Status Uncharge(uint64_t bytes) override {
    uint64_t held = charged_.load();
    do {
      if (bytes > held) {
        return Status::InvalidArgument("memory charge " + name_ + ": uncharging " +
                                       std::to_string(bytes) + " bytes of " +
                                       std::to_string(held) + " charged");
      }
    } while (!charged_.compare_exchange_weak(held, held - bytes));
    Status uncharged = budget_->Uncharge(owner_, bytes);
    if (!uncharged.ok()) charged_.fetch_add(bytes);  // only on a bug: keep counting
    return uncharged;
  }

  uint64_t charged_bytes() const override { return charged_.load(); }

  uint64_t limit_bytes() const override {
    const uint64_t capacity = budget_->capacity_bytes();
    const std::optional<uint64_t> quota = budget_->OwnerQuota(owner_).value();
    return quota ? std::min(*quota, capacity) : capacity;
  }

  const std::string& name() const override { return name_; }

 private:
  const std::shared_ptr<SharedHotBudget> budget_;
  const OwnerId owner_;
  const std::string name_;
  std::atomic<uint64_t> charged_{0};
};

}  // namespace

StatusOr<std::shared_ptr<MemoryCharge>> Engine::OpenMemoryCharge(
    const std::string& name, std::optional<uint64_t> quota_bytes) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  if (impl_->budget_ == nullptr) {
    return Status::InvalidArgument("engine has no hot tier to charge memory to");
  }
  if (name == kValuesOwnerName) {
    return Status::InvalidArgument("memory charge " + name +
                                   ": the key-value space's owner name");
  }
  SharedHotBudget& budget = *impl_->budget_;
  MutexLock lock(&impl_->mu_);
  auto known = std::find_if(impl_->charges_.begin(), impl_->charges_.end(),
                            [&](const auto& charge) { return charge.first == name; });
  OwnerId owner = 0;
  if (known != impl_->charges_.end()) {
    owner = known->second;
    if (budget.OwnerQuota(owner).value() != quota_bytes) {
      return Status::InvalidArgument("memory charge " + name +
                                     " is already open with another quota");
    }
  } else {
    // InvalidArgument for an empty name, a model's name or a zero quota.
    PKV_ASSIGN_OR_RETURN(owner, budget.RegisterOwner(name, quota_bytes));
    impl_->charges_.emplace_back(name, owner);
    impl_->NameOnSsd(owner, "charge:" + name, std::nullopt);  // holds no blocks
  }
  return std::shared_ptr<MemoryCharge>(
      std::make_shared<BudgetMemoryCharge>(impl_->budget_, owner, name));
}

}  // namespace prefixkv
