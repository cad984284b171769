// Helpers shared by the hot tier's tests: standard blocks, a two-owner
// budget with recording listeners, and audit checks.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "tests/storage/tier_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv::hot_test {

using testing::RecordingListener;

constexpr size_t kPayload = 1000;
constexpr uint64_t kCharge = HotEntryCharge(kPayload);

inline BlockMeta Meta(uint64_t id, uint64_t parent_id = 0) {
  BlockMeta m;
  m.key = BlockKey{0xB10C, id};
  if (parent_id != 0) m.parent = BlockKey{0xB10C, parent_id};
  return m;
}

inline SharedBytes Payload(size_t size = kPayload, char fill = 'p') {
  return SharedBytes::Copy(std::string(size, fill));
}

inline std::vector<uint64_t> EvictedIds(const RecordingListener& listener) {
  std::vector<uint64_t> ids;
  for (const auto& call : listener.calls()) ids.push_back(call.meta.key.lo);
  return ids;
}

inline void ExpectAuditClean(const SharedHotBudget& budget) {
  std::vector<AuditFinding> findings;
  ASSERT_OK(budget.Audit(&findings));
  for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
}

// A budget of `blocks` standard blocks with owners "a" and "b", each with a
// view and a recording listener.
struct TwoOwners {
  explicit TwoOwners(uint64_t blocks,
                     EvictionPolicyKind policy = EvictionPolicyKind::kLru,
                     std::optional<uint64_t> quota_b = std::nullopt) {
    budget =
        SharedHotBudget::Create({.capacity_bytes = blocks * kCharge, .policy = policy})
            .value();
    a = HotTier::Open(budget, budget->RegisterOwner("a").value()).value();
    b = HotTier::Open(budget, budget->RegisterOwner("b", quota_b).value()).value();
    a->SetEvictionListener(&evicted_a);
    b->SetEvictionListener(&evicted_b);
  }
  std::shared_ptr<SharedHotBudget> budget;
  std::unique_ptr<HotTier> a, b;
  RecordingListener evicted_a, evicted_b;
};

}  // namespace prefixkv::hot_test
