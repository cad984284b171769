// SharedHotBudget: one byte budget and one eviction order across owners,
// quotas, NoSpace that changes nothing, exact counters (the seeds'
// shared-budget and byte-counter consistency), listeners outside the lock,
// and an Audit() that reports every disagreement.
#include "prefixkv/advanced/shared_hot_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

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
using testing::RecordingListener;

TEST(SharedHotBudget, CreateRejectsZeroCapacityAndRegisterRejectsBadOwners) {
  EXPECT_TRUE(
      SharedHotBudget::Create({.capacity_bytes = 0}).status().IsInvalidArgument());
  auto budget = SharedHotBudget::Create({}).value();
  EXPECT_EQ(budget->RegisterOwner("llama").value(), 0u);
  EXPECT_EQ(budget->RegisterOwner("draft", 4096).value(), 1u);
  EXPECT_TRUE(budget->RegisterOwner("llama").status().IsInvalidArgument());
  EXPECT_TRUE(budget->RegisterOwner("").status().IsInvalidArgument());
  EXPECT_TRUE(budget->RegisterOwner("zero", 0).status().IsInvalidArgument());
  EXPECT_TRUE(HotTier::Open(budget, 2).status().IsInvalidArgument());
  EXPECT_EQ(budget->OwnerName(1).value(), "draft");
  EXPECT_EQ(budget->OwnerQuota(1).value(), std::optional<uint64_t>(4096));
}

TEST(SharedHotBudget, InsertByOneOwnerEvictsAnotherOwnersBlockThroughItsListener) {
  TwoOwners t(3);
  ASSERT_OK(t.b->Put(Meta(1), Payload(), /*dirty=*/true));
  ASSERT_OK(t.a->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(3), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(4), Payload(), true));  // the budget is full: b's block goes
  EXPECT_FALSE(t.b->Contains(Meta(1).key));
  ASSERT_EQ(t.evicted_b.calls().size(), 1u);
  EXPECT_EQ(t.evicted_b.calls()[0].meta.key, Meta(1).key);
  EXPECT_TRUE(t.evicted_b.calls()[0].dirty);
  EXPECT_TRUE(t.evicted_a.calls().empty());
  EXPECT_EQ(t.b->Totals().evictions, 1u);
  EXPECT_EQ(t.b->Totals().spills, 1u);
  EXPECT_EQ(t.a->Totals().evictions, 0u);
  ExpectAuditClean(*t.budget);
}

// The engine's one TierStack reads and writes every owner's blocks through
// one budget-wide view: the owner is a field of the block.
TEST(SharedHotBudget, ABudgetWideViewChargesEachBlocksOwnerAndFindsEveryOwnersBlock) {
  auto budget = SharedHotBudget::Create({.capacity_bytes = 3 * kCharge}).value();
  const OwnerId a = budget->RegisterOwner("a").value();
  const OwnerId b = budget->RegisterOwner("b").value();
  auto all = HotTier::OpenShared(budget).value();
  auto view_b = HotTier::Open(budget, b).value();
  RecordingListener shared_listener, own_listener;
  all->SetEvictionListener(&shared_listener);
  view_b->SetEvictionListener(&own_listener);  // b's own listener wins for b

  BlockMeta m1 = Meta(1);
  m1.owner = a;
  BlockMeta m2 = Meta(2);
  m2.owner = b;
  ASSERT_OK(all->Put(m1, Payload(), /*dirty=*/true));
  ASSERT_OK(all->Put(m2, Payload(), true));
  EXPECT_EQ(budget->OwnerCounters(a).bytes, kCharge);
  EXPECT_EQ(budget->OwnerCounters(b).bytes, kCharge);
  EXPECT_EQ(all->Peek(m2.key).value().owner, b);
  EXPECT_TRUE(all->Get(m1.key).ok());
  EXPECT_EQ(budget->OwnerCounters(a).hits, 1u);  // the block's owner's hit
  EXPECT_FALSE(view_b->Contains(m1.key));        // an owner's view sees its own
  BlockMeta unknown = Meta(9);
  unknown.owner = 7;
  EXPECT_TRUE(all->Put(unknown, Payload(), true).IsInvalidArgument());

  // A miss counts against the reader the scope names, else nobody's.
  {
    ReadOwnerScope reader(b);
    EXPECT_TRUE(all->Get(Meta(5).key).status().IsNotFound());
  }
  EXPECT_TRUE(all->Get(Meta(6).key).status().IsNotFound());
  EXPECT_EQ(budget->OwnerCounters(b).misses, 1u);
  EXPECT_EQ(budget->OwnerCounters(a).misses, 0u);
  EXPECT_EQ(budget->Totals().misses, 2u);
  ExpectAuditClean(*budget);

  // One key space: a Put of a's key by b replaces the block and moves its
  // charge to b, exactly.
  BlockMeta m1_by_b = Meta(1);
  m1_by_b.owner = b;
  ASSERT_OK(all->Put(m1_by_b, Payload(kPayload / 2), true));
  EXPECT_EQ(budget->OwnerCounters(a).bytes, 0u);
  EXPECT_EQ(budget->OwnerCounters(a).entries, 0u);
  EXPECT_EQ(budget->OwnerCounters(b).bytes, kCharge + HotEntryCharge(kPayload / 2));
  EXPECT_EQ(budget->OwnerCounters(b).entries, 2u);
  EXPECT_EQ(all->Totals().entries, 2u);
  ExpectAuditClean(*budget);

  // Victims go to their owner's listener, or to the budget-wide one.
  BlockMeta m3 = Meta(3);
  m3.owner = a;
  BlockMeta m4 = Meta(4);
  m4.owner = a;
  ASSERT_OK(all->Put(m3, Payload(), true));
  ASSERT_OK(all->Put(m4, Payload(), true));  // evicts b's oldest (m2)
  ASSERT_OK(all->Get(m4.key).status());
  ASSERT_OK(all->Put(Meta(3), Payload(), true));  // m3 again, charged to a
  BlockMeta m5 = Meta(5);
  m5.owner = a;
  ASSERT_OK(all->Put(m5, Payload(), true));  // evicts b's m1
  EXPECT_EQ(EvictedIds(own_listener), (std::vector<uint64_t>{2, 1}));
  EXPECT_TRUE(shared_listener.calls().empty());
  BlockMeta m6 = Meta(6);
  m6.owner = a;
  ASSERT_OK(all->Put(m6, Payload(), true));  // evicts a's oldest: m4
  EXPECT_EQ(EvictedIds(shared_listener), (std::vector<uint64_t>{4}));
  EXPECT_EQ(shared_listener.calls()[0].meta.owner, a);
  ExpectAuditClean(*budget);
  all->SetEvictionListener(nullptr);
  view_b->SetEvictionListener(nullptr);
}

TEST(SharedHotBudget, PinnedEntriesAreNeverEvicted) {
  TwoOwners t(3);
  ASSERT_OK(t.b->Put(Meta(1), Payload(), true));
  std::optional<PinnedBlock> pin = t.b->Pin(Meta(1).key);
  for (uint64_t id = 2; id < 20; ++id) ASSERT_OK(t.a->Put(Meta(id), Payload(), true));
  EXPECT_TRUE(t.b->Contains(Meta(1).key));
  EXPECT_TRUE(t.evicted_b.calls().empty());
  EXPECT_EQ(t.evicted_a.calls().size(), 16u)
      << "a's blocks take turns in the two free slots";
  pin.reset();
  ASSERT_OK(t.a->Put(Meta(20), Payload(), true));
  EXPECT_FALSE(t.b->Contains(Meta(1).key)) << "once released it is the oldest again";
}

TEST(SharedHotBudget, InsertFailsWithNoSpaceWhenOnlyPinnedRemainAndChangesNothing) {
  TwoOwners t(2);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(2), Payload(), true));
  std::optional<PinnedBlock> pa = t.a->Pin(Meta(1).key);
  std::optional<PinnedBlock> pb = t.b->Pin(Meta(2).key);
  const TierCounters before_a = t.a->Totals(), before_total = t.budget->Totals();
  EXPECT_TRUE(t.a->Put(Meta(3), Payload(), true).IsNoSpace());
  EXPECT_TRUE(t.a->Put(Meta(1), Payload(kPayload + 1), true).IsNoSpace())
      << "growing in place";
  EXPECT_EQ(t.a->Totals(), before_a);
  EXPECT_EQ(t.budget->Totals(), before_total);
  EXPECT_FALSE(t.a->Contains(Meta(3).key));
  EXPECT_EQ(t.a->Get(Meta(1).key)->size(), kPayload);
  EXPECT_TRUE(t.evicted_a.calls().empty() && t.evicted_b.calls().empty());
  ExpectAuditClean(*t.budget);
}

TEST(SharedHotBudget, FailedInsertRestoresTentativeVictimsInTheirOrder) {
  TwoOwners t(3);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(3), Payload(), true));
  std::optional<PinnedBlock> pin = t.a->Pin(Meta(3).key);
  // Needs all three slots: 1 and 2 are taken tentatively, then 3 is pinned.
  EXPECT_TRUE(
      t.a->Put(Meta(4), Payload(3 * kCharge - kHotEntryOverheadBytes), true).IsNoSpace());
  ASSERT_OK(t.a->Put(Meta(5), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{1}))
      << "1 is still the oldest";
  ASSERT_OK(t.a->Put(Meta(6), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{2}));
  ExpectAuditClean(*t.budget);
}

TEST(SharedHotBudget, ReplacingWithSmallerPayloadShrinksCountersExactly) {
  // The rotating-tip strip rewrites a superseded tip with a placeholder in
  // place: the owner's and the budget's bytes must shrink by the difference.
  TwoOwners t(100);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2, 1), Payload(50000), true));
  ASSERT_OK(t.b->Put(Meta(3), Payload(), true));
  const uint64_t a_before = t.a->Totals().bytes, total_before = t.budget->Totals().bytes;
  ASSERT_OK(t.a->Put(Meta(2, 1), Payload(64), true));
  EXPECT_EQ(t.a->Totals().bytes, a_before - (50000 - 64));
  EXPECT_EQ(t.budget->Totals().bytes, total_before - (50000 - 64));
  uint64_t recomputed = 0;
  t.a->ForEach([&](const BlockMeta&, uint64_t bytes) { recomputed += bytes; });
  EXPECT_EQ(t.a->Totals().bytes, recomputed);
  EXPECT_EQ(t.a->Totals().entries, 2u);
  ExpectAuditClean(*t.budget);
}

TEST(SharedHotBudget, BudgetTotalEqualsTheSumOfItsOwners) {
  TwoOwners t(5);
  for (uint64_t id = 1; id < 12; ++id) {
    HotTier& tier = id % 3 == 0 ? *t.b : *t.a;
    ASSERT_OK(tier.Put(Meta(id), Payload(kPayload - id * 10), id % 2 == 0));
    (void)tier.Get(Meta(id - 1).key);
    const TierCounters a = t.a->Totals(), b = t.b->Totals(), total = t.budget->Totals();
    EXPECT_EQ(total.bytes, a.bytes + b.bytes);
    EXPECT_EQ(total.entries, a.entries + b.entries);
    EXPECT_EQ(total.evictions, a.evictions + b.evictions);
    EXPECT_EQ(total.hits + total.misses, a.hits + a.misses + b.hits + b.misses);
  }
  ExpectAuditClean(*t.budget);
}

TEST(SharedHotBudget, QuotaCapsOneOwnersShare) {
  TwoOwners t(10, EvictionPolicyKind::kLru, /*quota_b=*/2 * kCharge);
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_OK(t.b->Put(Meta(id), Payload(), true));
  EXPECT_EQ(t.b->Totals().bytes, 2 * kCharge);
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{1, 2, 3}));
  ASSERT_OK(t.a->Put(Meta(6), Payload(), true));
  EXPECT_TRUE(t.evicted_a.calls().empty()) << "b's quota must not cost a anything";
  EXPECT_TRUE(t.b->Put(Meta(7), Payload(2 * kCharge), true).IsNoSpace());
}

TEST(SharedHotBudget, LoweringAQuotaEvictsTheOwnersOldestUnpinnedBlocks) {
  TwoOwners t(10);
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_OK(t.b->Put(Meta(id), Payload(), true));
  std::optional<PinnedBlock> pin = t.b->Pin(Meta(1).key);
  ASSERT_OK(t.budget->SetOwnerQuota(1, 2 * kCharge));
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(t.b->Totals().bytes, 2 * kCharge);
  EXPECT_TRUE(t.budget->SetOwnerQuota(7, 1).IsInvalidArgument());
  ExpectAuditClean(*t.budget);
}

TEST(SharedHotBudget, BlockLargerThanTheBudgetIsNoSpace) {
  TwoOwners t(2);
  EXPECT_TRUE(t.a->Put(Meta(1), Payload(2 * kCharge), true).IsNoSpace());
  EXPECT_EQ(t.budget->Totals().inserts, 0u);
}

TEST(SharedHotBudget, ListenersAreCalledWithoutTheBudgetLock) {
  class ReentrantListener final : public EvictionListener {
   public:
    explicit ReentrantListener(SharedHotBudget* budget) : budget_(budget) {}
    void OnEvict(const BlockMeta&, const SharedBytes&, bool) override {
      // Another thread takes the budget's lock; it could not if we held it.
      auto other =
          std::async(std::launch::async, [this] { return budget_->Totals().entries; });
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
  ASSERT_OK(t.a->Put(Meta(2), Payload(), true));
  EXPECT_TRUE(listener.ok);
}

TEST(SharedHotBudget, ReplacingAListenerWaitsForCallsStillRunningOnTheOldOne) {
  // Blocks inside its first OnEvict until released.
  class BlockingListener final : public EvictionListener {
   public:
    void OnEvict(const BlockMeta&, const SharedBytes&, bool) override {
      entered.set_value();
      released.wait();
      finished = true;
    }
    std::promise<void> entered, release;
    std::shared_future<void> released = release.get_future().share();
    std::atomic<bool> finished{false};
  };
  TwoOwners t(1);
  BlockingListener old_listener;
  t.a->SetEvictionListener(&old_listener);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  std::thread evictor([&] { EXPECT_OK(t.a->Put(Meta(2), Payload(), true)); });
  old_listener.entered.get_future().wait();
  std::atomic<bool> replacing{false}, old_finished_at_return{false};
  std::thread replacer([&] {
    replacing = true;
    t.a->SetEvictionListener(nullptr);  // the owner may now destroy the old listener
    old_finished_at_return = old_listener.finished.load();
  });
  while (!replacing) std::this_thread::yield();
  old_listener.release.set_value();
  replacer.join();
  evictor.join();
  EXPECT_TRUE(old_finished_at_return);
}

TEST(SharedHotBudget, VictimsWithoutAListenerAreCountedAsEvictionsNotSpills) {
  TwoOwners t(1);
  t.a->SetEvictionListener(nullptr);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2), Payload(), true));
  EXPECT_EQ(t.a->Totals().evictions, 1u);
  EXPECT_EQ(t.a->Totals().spills, 0u);
}

std::vector<std::string> AuditFindingNames(const SharedHotBudget& budget) {
  std::vector<AuditFinding> findings;
  EXPECT_OK(budget.Audit(&findings));
  std::vector<std::string> names;
  for (const AuditFinding& f : findings) names.push_back(f.what);
  return names;
}

TEST(SharedHotBudget, AuditReportsEachDisagreementSeparately) {
  TwoOwners t(4);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(2), Payload(), true));
  EXPECT_TRUE(AuditFindingNames(*t.budget).empty());
  // Owner b's bytes drift; a's hits no longer sum to the total; one charge is off.
  HotBudgetTestPeer::ChangeCounters(*t.budget, 1, [](TierCounters& c) { c.bytes += 5; });
  HotBudgetTestPeer::ChangeCounters(*t.budget, 0, [](TierCounters& c) { c.hits += 1; });
  HotBudgetTestPeer::ChangeEntry(
      *t.budget, 0, Meta(1).key,
      [](hot_internal::HotEntry& e) { e.facts.charge_bytes -= 1; });
  const std::vector<std::string> names = AuditFindingNames(*t.budget);
  auto has = [&](const std::string& part) {
    return std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return n.find(part) != std::string::npos;
    });
  };
  EXPECT_TRUE(has("owner 1 bytes"));
  EXPECT_TRUE(has("sum of owners: bytes"));
  EXPECT_TRUE(has("sum of owners: hits"));
  EXPECT_TRUE(has("block " + Meta(1).key.ToHex() + " charge"));
  EXPECT_EQ(names.size(), 5u)
      << "owner 1 bytes, total bytes, total hits, block charge, owner 0 bytes";
}

}  // namespace
}  // namespace prefixkv
