// SharedHotBudget's external charges: bytes an owner holds outside its blocks
// (a session manager's live KV) share the capacity with every block, evict
// blocks in policy order to make room, are never evicted themselves, count
// against quotas, fail with NoSpace (and a shortfall) changing nothing, and
// are recomputed by Audit().
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "prefixkv/advanced/shared_hot_budget.h"
#include "tests/storage/hot/hot_budget_test_peer.h"
#include "tests/storage/hot/hot_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {

namespace {

using hot_test::EvictedIds;
using hot_test::ExpectAuditClean;
using hot_test::kCharge;
using hot_test::kPayload;
using hot_test::Meta;
using hot_test::Payload;
using hot_test::TwoOwners;

constexpr OwnerId kA = 0, kB = 1;

TEST(HotBudgetCharge, ChargeEvictsTheOldestBlockOfAnyOwnerThroughItsListener) {
  TwoOwners t(4);
  ASSERT_OK(t.b->Put(Meta(1), Payload(), /*dirty=*/true));
  ASSERT_OK(t.a->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(3), Payload(), true));
  ASSERT_OK(t.budget->Charge(kA, 2 * kCharge));  // one slot short: b's block goes
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(t.evicted_a.calls().empty());
  const TierCounters a = t.budget->OwnerCounters(kA), b = t.budget->OwnerCounters(kB);
  EXPECT_EQ(a.entries, 2u);
  EXPECT_EQ(a.bytes, 4 * kCharge) << "two blocks and the charge";
  EXPECT_EQ(a.external_bytes, 2 * kCharge);
  EXPECT_EQ(a.inserts, 2u) << "a charge is not an insert";
  EXPECT_EQ(b.evictions, 1u);
  EXPECT_EQ(b.spills, 1u);
  EXPECT_EQ(t.budget->Totals().bytes, t.budget->capacity_bytes());
  EXPECT_EQ(t.budget->Totals().external_bytes, 2 * kCharge);
  ExpectAuditClean(*t.budget);
}

TEST(HotBudgetCharge, ChargesAreNeverEvictedInsertsEvictOnlyBlocks) {
  TwoOwners t(3);
  ASSERT_OK(t.budget->Charge(kA, 2 * kCharge));
  ASSERT_OK(t.b->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(2), Payload(), true));  // evicts block 1, not the charge
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(t.b->Put(Meta(3), Payload(kPayload + 1), true).IsNoSpace())
      << "only the charge could make room for a bigger block";
  EXPECT_EQ(t.budget->OwnerCounters(kA).bytes, 2 * kCharge);
  EXPECT_TRUE(t.b->Contains(Meta(2).key));
  ExpectAuditClean(*t.budget);
}

TEST(HotBudgetCharge, ChargeThatCannotFitReportsItsShortfallAndChangesNothing) {
  TwoOwners t(4);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  std::optional<PinnedBlock> pin = t.a->Pin(Meta(1).key);
  ASSERT_OK(t.b->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(3), Payload(), true));
  const TierCounters before = t.budget->Totals();
  uint64_t shortfall = 0;
  // Even with 2 and 3 evicted, the pinned block leaves 3 slots: 100 bytes short.
  EXPECT_TRUE(t.budget->Charge(kB, 3 * kCharge + 100, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, 100u);
  EXPECT_EQ(t.budget->Totals(), before);
  EXPECT_TRUE(t.b->Contains(Meta(2).key) && t.b->Contains(Meta(3).key));
  EXPECT_TRUE(t.evicted_a.calls().empty() && t.evicted_b.calls().empty());
  ExpectAuditClean(*t.budget);

  pin.reset();
  ASSERT_OK(t.budget->Charge(kB, 3 * kCharge + 100, &shortfall));
  EXPECT_EQ(shortfall, 0u);
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{1}));
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{2, 3}));
  ExpectAuditClean(*t.budget);
}

TEST(HotBudgetCharge, ChargeLargerThanTheBudgetOrTheQuotaNeverFits) {
  TwoOwners t(2, EvictionPolicyKind::kLru, /*quota_b=*/kCharge);
  uint64_t shortfall = 0;
  EXPECT_TRUE(t.budget->Charge(kA, 2 * kCharge + 1, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, UINT64_MAX);
  EXPECT_TRUE(t.budget->Charge(kB, kCharge + 1, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, UINT64_MAX);
  ASSERT_OK(t.budget->Charge(kB, kCharge));
  ASSERT_OK(t.budget->Charge(kA, 0));
  EXPECT_TRUE(t.budget->Charge(7, 1).IsInvalidArgument());
  EXPECT_EQ(t.budget->Totals().external_bytes, kCharge);
}

TEST(HotBudgetCharge, QuotaCountsChargesAndEvictsTheOwnersOwnBlocksFirst) {
  TwoOwners t(10, EvictionPolicyKind::kLru, /*quota_b=*/3 * kCharge);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));  // the oldest block of all
  ASSERT_OK(t.b->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(3), Payload(), true));
  ASSERT_OK(t.budget->Charge(kB, 2 * kCharge));
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(t.evicted_a.calls().empty()) << "b's quota must not cost a anything";
  ASSERT_OK(t.budget->Charge(kB, kCharge));
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{2, 3}));
  uint64_t shortfall = 0;
  EXPECT_TRUE(t.budget->Charge(kB, 1, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, 1u);
  ExpectAuditClean(*t.budget);
}

TEST(HotBudgetCharge, UnchargeReturnsBytesAndRefusesMoreThanWasCharged) {
  TwoOwners t(4);
  ASSERT_OK(t.budget->Charge(kA, 1000));
  ASSERT_OK(t.budget->Uncharge(kA, 400));
  EXPECT_EQ(t.budget->OwnerCounters(kA).bytes, 600u);
  EXPECT_EQ(t.budget->OwnerCounters(kA).external_bytes, 600u);
  EXPECT_TRUE(t.budget->Uncharge(kA, 601).IsInvalidArgument());
  EXPECT_TRUE(t.budget->Uncharge(kB, 1).IsInvalidArgument()) << "b charged nothing";
  EXPECT_TRUE(t.budget->Uncharge(9, 0).IsInvalidArgument());
  EXPECT_EQ(t.budget->Totals().bytes, 600u);
  ASSERT_OK(t.budget->Uncharge(kA, 600));
  EXPECT_EQ(t.budget->Totals(), TierCounters{});
  ExpectAuditClean(*t.budget);
}

TEST(HotBudgetCharge, LeafLruChargeTrimsAChainFromItsTip) {
  TwoOwners t(4, EvictionPolicyKind::kLeafLru);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2, 1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(3, 2), Payload(), true));
  ASSERT_OK(t.budget->Charge(kB, 3 * kCharge));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{3, 2}));
  EXPECT_TRUE(t.a->Contains(Meta(1).key));
  ExpectAuditClean(*t.budget);
}

TEST(HotBudgetCharge, ChargeVictimsAreDeliveredWithoutTheBudgetLock) {
  class ReentrantListener final : public EvictionListener {
   public:
    explicit ReentrantListener(SharedHotBudget* budget) : budget_(budget) {}
    void OnEvict(const BlockMeta&, const SharedBytes&, bool) override {
      auto other = std::async(std::launch::async,
                              [this] { return budget_->Totals().external_bytes; });
      ok = other.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    }
    bool ok = false;

   private:
    SharedHotBudget* budget_;
  };
  TwoOwners t(1);
  ReentrantListener listener(t.budget.get());
  t.a->SetEvictionListener(&listener);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.budget->Charge(kB, kCharge));
  EXPECT_TRUE(listener.ok);
}

TEST(HotBudgetCharge, AuditRecomputesChargesAndReportsADriftingCounter) {
  TwoOwners t(4);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.budget->Charge(kA, 500));
  ASSERT_OK(t.budget->Charge(kB, 700));
  ExpectAuditClean(*t.budget);
  HotBudgetTestPeer::ChangeCounters(*t.budget, kB,
                                    [](TierCounters& c) { c.external_bytes += 1; });
  std::vector<AuditFinding> findings;
  ASSERT_OK(t.budget->Audit(&findings));
  std::vector<std::string> names;
  for (const AuditFinding& f : findings) names.push_back(f.what);
  EXPECT_EQ(names,
            (std::vector<std::string>{"owner 1 external_bytes",
                                      "budget total vs sum of owners: external_bytes"}));
}

}  // namespace
}  // namespace prefixkv
