// HotTier: one owner's view of a shared budget. Zero-copy hits, pins, the
// documented charge, plain LRU order, and the BlockTier conformance suite.
#include "prefixkv/advanced/hot_tier.h"

#include <gtest/gtest.h>

#include "tests/storage/hot/hot_test_util.h"
#include "tests/storage/tier_conformance.h"
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

struct HotTierLruFactory {
  static std::unique_ptr<BlockTier> Make(const testing::TempDir&,
                                         uint64_t capacity_bytes) {
    SharedHotBudgetOptions options;
    options.capacity_bytes = capacity_bytes != 0 ? capacity_bytes : uint64_t{1} << 40;
    return std::move(HotTier::Create(options)).value();
  }
};

// A view for the second owner of a leaf-lru budget whose first owner holds
// blocks too: everything the suite checks must hold per view.
struct HotTierSharedLeafLruFactory {
  static std::unique_ptr<BlockTier> Make(const testing::TempDir&,
                                         uint64_t capacity_bytes) {
    SharedHotBudgetOptions options;
    options.policy = EvictionPolicyKind::kLeafLru;
    options.capacity_bytes = capacity_bytes != 0 ? capacity_bytes : uint64_t{1} << 40;
    auto budget = SharedHotBudget::Create(options).value();
    auto other = HotTier::Open(budget, budget->RegisterOwner("other").value()).value();
    BlockMeta meta;
    meta.key = BlockKey{7, 7};
    EXPECT_OK(other->Put(meta, SharedBytes::Copy("x"), false));
    return std::move(HotTier::Open(budget, budget->RegisterOwner("tested").value()))
        .value();
  }
};

using HotTierFactories = ::testing::Types<HotTierLruFactory, HotTierSharedLeafLruFactory>;

}  // namespace
namespace testing {
INSTANTIATE_TYPED_TEST_SUITE_P(Hot, TierConformance, HotTierFactories);
}  // namespace testing
namespace {
TEST(HotTier, GetAndPinHandOutTheBufferThatWasPutWithoutCopying) {
  auto tier = HotTier::Create({}).value();
  const SharedBytes payload = Payload();
  ASSERT_OK(tier->Put(Meta(1), payload, true));
  EXPECT_EQ(tier->Get(Meta(1).key)->data(), payload.data());
  std::optional<PinnedBlock> pin = tier->Pin(Meta(1).key);
  ASSERT_TRUE(pin.has_value());
  EXPECT_EQ(pin->payload().data(), payload.data());
  EXPECT_EQ(payload.use_count(), 3) << "the test, the tier and the pin share one buffer";
}

TEST(HotTier, ChargesPayloadPlusTheDocumentedOverhead) {
  auto tier = HotTier::Create({}).value();
  ASSERT_OK(tier->Put(Meta(1), Payload(1000), false));
  ASSERT_OK(tier->Put(Meta(2), Payload(0), false));
  EXPECT_EQ(tier->Totals().bytes, 1000 + 2 * kHotEntryOverheadBytes);
  tier->ForEach([](const BlockMeta& meta, uint64_t bytes) {
    EXPECT_EQ(bytes, HotEntryCharge(meta.key.lo == 1 ? 1000 : 0));
  });
}

TEST(HotTier, EvictsLeastRecentlyUsedOwnerBlockFirst) {
  TwoOwners t(3);
  for (uint64_t id : {1, 2, 3}) ASSERT_OK(t.a->Put(Meta(id), Payload(), true));
  ASSERT_OK(t.a->Get(Meta(1).key));  // 2 is now least recently used
  ASSERT_OK(t.a->Put(Meta(4), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(5), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{2, 3}));
  EXPECT_TRUE(t.a->Contains(Meta(1).key));
  EXPECT_EQ(t.a->Totals().evictions, 2u);
  EXPECT_EQ(t.a->Totals().spills, 2u);
}

TEST(HotTier, PeekAndContainsDoNotRefreshRecency) {
  TwoOwners t(2);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.a->Peek(Meta(1).key));
  ASSERT_TRUE(t.a->Contains(Meta(1).key));
  ASSERT_OK(t.a->Put(Meta(3), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{1}));
}

TEST(HotTier, PinCountsAHitAndPinnedBytesUntilReleased) {
  TwoOwners t(4);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  std::optional<PinnedBlock> pin = t.a->Pin(Meta(1).key);
  std::optional<PinnedBlock> second = t.a->Pin(Meta(1).key);
  ASSERT_TRUE(pin && second);
  EXPECT_EQ(t.a->Totals().hits, 2u);
  EXPECT_EQ(t.a->Totals().pinned_bytes, kCharge) << "pinned twice, charged once";
  pin->Release();
  EXPECT_EQ(t.a->Totals().pinned_bytes, kCharge);
  second.reset();
  EXPECT_EQ(t.a->Totals().pinned_bytes, 0u);
  EXPECT_FALSE(t.a->Pin(Meta(9).key).has_value());
  EXPECT_EQ(t.a->Totals().misses, 1u);
  ExpectAuditClean(*t.budget);
}

TEST(HotTier, MovedPinIsReleasedOnceByItsLastHolder) {
  TwoOwners t(4);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  PinnedBlock moved = std::move(t.a->Pin(Meta(1).key)).value();
  PinnedBlock target = std::move(moved);
  EXPECT_FALSE(
      moved.held());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(target.held());
  EXPECT_EQ(t.a->Totals().pinned_bytes, kCharge);
  target.Release();
  target.Release();
  EXPECT_EQ(t.a->Totals().pinned_bytes, 0u);
  ExpectAuditClean(*t.budget);
}

TEST(HotTier, RemoveOfAPinnedBlockIsBusyAndKeepsIt) {
  TwoOwners t(4);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  std::optional<PinnedBlock> pin = t.a->Pin(Meta(1).key);
  EXPECT_TRUE(t.a->Remove(Meta(1).key).IsBusy());
  EXPECT_TRUE(t.a->Contains(Meta(1).key));
  pin.reset();
  EXPECT_OK(t.a->Remove(Meta(1).key));
  EXPECT_EQ(t.a->Totals().removes, 1u);
}

TEST(HotTier, PutOnAPinnedKeyReplacesInPlaceWhileTheHolderKeepsTheOldBytes) {
  TwoOwners t(4);
  ASSERT_OK(t.a->Put(Meta(1), Payload(kPayload, 'o'), true));
  std::optional<PinnedBlock> pin = t.a->Pin(Meta(1).key);
  ASSERT_OK(t.a->Put(Meta(1), Payload(100, 'n'), true));
  EXPECT_EQ(pin->payload().view(), std::string(kPayload, 'o'));
  EXPECT_EQ(t.a->Get(Meta(1).key)->view(), std::string(100, 'n'));
  EXPECT_EQ(t.a->Totals().pinned_bytes, HotEntryCharge(100));
  pin.reset();
  EXPECT_EQ(t.a->Totals().pinned_bytes, 0u);
  ExpectAuditClean(*t.budget);
}

}  // namespace
}  // namespace prefixkv
