// MemTier: the conformance suite plus what is specific to it (exact charge,
// plain LRU order, capacity errors).
#include "tests/support/mem_tier.h"

#include <gtest/gtest.h>

#include "tests/storage/tier_conformance.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::ConformanceMeta;
using testing::ConformancePayload;
using testing::RecordingListener;

struct MemTierFactory {
  static std::unique_ptr<BlockTier> Make(const testing::TempDir&,
                                         uint64_t capacity_bytes) {
    return std::make_unique<MemTier>(MemTierOptions{.capacity_bytes = capacity_bytes});
  }
};

}  // namespace
namespace testing {
INSTANTIATE_TYPED_TEST_SUITE_P(Mem, TierConformance, ::testing::Types<MemTierFactory>);
}  // namespace testing
namespace {

Status PutBlock(MemTier& tier, uint64_t id, size_t bytes, bool dirty = true) {
  const BlockMeta meta = ConformanceMeta(id);
  return tier.Put(meta, ConformancePayload(meta.key, 0, bytes), dirty);
}

TEST(MemTier, ChargesPayloadPlusTheDocumentedOverhead) {
  MemTier tier;
  ASSERT_OK(PutBlock(tier, 1, 1000));
  ASSERT_OK(PutBlock(tier, 2, 0));
  EXPECT_EQ(tier.Totals().bytes, 1000 + 2 * kMemEntryOverheadBytes);
}

TEST(MemTier, ReplacingWithSmallerPayloadShrinksCountersByTheDifference) {
  MemTier tier;
  ASSERT_OK(PutBlock(tier, 1, 5000));
  ASSERT_OK(PutBlock(tier, 1, 1200));
  EXPECT_EQ(tier.Totals().bytes, MemTier::Charge(1200));
  EXPECT_EQ(tier.OwnerCounters(0).bytes, MemTier::Charge(1200));
  EXPECT_EQ(tier.Totals().inserts, 2u);
}

TEST(MemTier, EvictsLeastRecentlyUsedBlockFirst) {
  MemTier tier({.capacity_bytes = 3 * MemTier::Charge(100)});
  RecordingListener listener;
  tier.SetEvictionListener(&listener);
  for (uint64_t id : {1, 2, 3}) ASSERT_OK(PutBlock(tier, id, 100));
  ASSERT_OK(tier.Get(ConformanceMeta(1).key));  // 2 is now the oldest
  ASSERT_OK(PutBlock(tier, 4, 100));
  ASSERT_OK(PutBlock(tier, 5, 100));
  auto calls = listener.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].meta.key, ConformanceMeta(2).key);
  EXPECT_EQ(calls[1].meta.key, ConformanceMeta(3).key);
  EXPECT_TRUE(tier.Contains(ConformanceMeta(1).key));
}

TEST(MemTier, BlockLargerThanCapacityIsNoSpaceAndChangesNothing) {
  MemTier tier({.capacity_bytes = 4096});
  ASSERT_OK(PutBlock(tier, 1, 1000));
  const TierCounters before = tier.Totals();
  EXPECT_TRUE(PutBlock(tier, 2, 4096).IsNoSpace());
  EXPECT_EQ(tier.Totals(), before);
  EXPECT_TRUE(tier.Contains(ConformanceMeta(1).key));
}

TEST(MemTier, CleanVictimsReachTheListenerButAreNotSpills) {
  MemTier tier({.capacity_bytes = MemTier::Charge(100)});
  RecordingListener listener;
  tier.SetEvictionListener(&listener);
  ASSERT_OK(PutBlock(tier, 1, 100, /*dirty=*/false));
  ASSERT_OK(PutBlock(tier, 2, 100, /*dirty=*/true));
  ASSERT_EQ(listener.calls().size(), 1u);
  EXPECT_FALSE(listener.calls()[0].dirty);
  EXPECT_EQ(tier.Totals().evictions, 1u);
  EXPECT_EQ(tier.Totals().spills, 0u);
}

TEST(MemTier, GetReturnsTheStoredBufferWithoutCopying) {
  MemTier tier;
  const BlockMeta meta = ConformanceMeta(1);
  const SharedBytes payload = ConformancePayload(meta.key, 0, 100);
  ASSERT_OK(tier.Put(meta, payload, false));
  EXPECT_EQ(tier.Get(meta.key)->data(), payload.data());
}

}  // namespace
}  // namespace prefixkv
