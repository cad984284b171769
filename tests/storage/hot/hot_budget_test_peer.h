// Reaches into a SharedHotBudget (through hot_internal::Access) to break one
// fact at a time, so that tests can prove Audit() notices. Each change runs
// under the budget's mutex, as every change of its state does.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "hot_budget_state.h"
#include "prefixkv/advanced/shared_hot_budget.h"

namespace prefixkv {

class HotBudgetTestPeer {
 public:
  // Calls `change` on `owner`'s counters.
  static void ChangeCounters(SharedHotBudget& budget, OwnerId owner,
                             const std::function<void(TierCounters&)>& change) {
    hot_internal::BudgetState& state = hot_internal::Access::StateOf(budget);
    MutexLock lock(&state.mu_);
    change(state.Owner(owner).counters);
  }

  // Calls `change` on `owner`'s resident entry of `key` (which must exist).
  static void ChangeEntry(SharedHotBudget& budget, OwnerId owner, const BlockKey& key,
                          const std::function<void(hot_internal::HotEntry&)>& change) {
    hot_internal::BudgetState& state = hot_internal::Access::StateOf(budget);
    MutexLock lock(&state.mu_);
    hot_internal::HotEntry& e = state.entries_.at(key);
    ASSERT_EQ(e.facts.owner, owner);
    change(e);
  }
};

}  // namespace prefixkv
