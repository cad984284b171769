// TierStack: hot over SSD as one store (write-back, promotion, rewrite in
// place, removal from both), on two MemTiers so capacities are exact.
#include "prefixkv/advanced/tier_stack.h"

#include <gtest/gtest.h>

#include "prefixkv/advanced/mem_tier.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr size_t kPayload = 1000;
constexpr uint64_t kCharge = MemTier::Charge(kPayload);

BlockMeta Meta(uint64_t i) {
  return BlockMeta{BlockKey{7, i}, BlockKey{7, i - 1}, {}, 0};
}
SharedBytes Payload(char c, size_t size = kPayload) {
  return SharedBytes::Copy(std::string(size, c));
}

class TierStackTest : public ::testing::Test {
 protected:
  MemTier hot_{{.capacity_bytes = 3 * kCharge}};
  MemTier ssd_;
  TierStack stack_{&hot_, &ssd_};
};

TEST_F(TierStackTest, PutIsWriteBackUntilTheHotTierEvicts) {
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_OK(stack_.Put(Meta(i), Payload('a')));
  EXPECT_EQ(ssd_.Totals().entries, 0u);
  EXPECT_EQ(stack_.dirty_blocks(), 3u);
  ASSERT_OK(stack_.Put(Meta(4), Payload('a')));
  // Block 1 (least recently used) was evicted and written below.
  EXPECT_FALSE(hot_.Contains(Meta(1).key));
  EXPECT_TRUE(ssd_.Contains(Meta(1).key));
  EXPECT_EQ(stack_.Locate(Meta(1).key), TierLevel::kSsd);
  EXPECT_EQ(stack_.dirty_blocks(), 3u);
}

TEST_F(TierStackTest, GetServesHotFirstThenPromotesAnSsdHit) {
  ASSERT_OK(ssd_.Put(Meta(1), Payload('s'), false));
  StatusOr<TierHit> hit = stack_.Get(Meta(1).key);
  ASSERT_OK(hit);
  EXPECT_EQ(hit->level, TierLevel::kSsd);
  EXPECT_TRUE(hot_.Contains(Meta(1).key));
  hit = stack_.Get(Meta(1).key);
  EXPECT_EQ(hit->level, TierLevel::kHot);
  // A promoted copy is clean: evicting it writes nothing.
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
  EXPECT_TRUE(stack_.Get(Meta(9).key).status().IsNotFound());
}

TEST_F(TierStackTest, GetWithoutPromotionLeavesTheHotTierAlone) {
  ASSERT_OK(ssd_.Put(Meta(1), Payload('s'), false));
  ASSERT_OK(stack_.Get(Meta(1).key, /*allow_promotion=*/false));
  EXPECT_FALSE(hot_.Contains(Meta(1).key));
}

TEST_F(TierStackTest, FlushWritesDirtyBlocksBelowOnce) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a')));
  ASSERT_OK(stack_.Put(Meta(2), Payload('b')));
  ASSERT_OK(stack_.Flush());
  EXPECT_EQ(ssd_.Totals().entries, 2u);
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
  EXPECT_EQ(ssd_.Get(Meta(2).key)->view(), Payload('b').view());
  // Evicting the now-clean copies writes nothing more.
  for (uint64_t i = 3; i <= 5; ++i) ASSERT_OK(stack_.Put(Meta(i), Payload('c')));
  EXPECT_EQ(ssd_.Totals().inserts, 2u);
}

TEST_F(TierStackTest, RewriteReplacesTheBlockInEveryTierHoldingIt) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a')));
  ASSERT_OK(stack_.Flush());
  ASSERT_OK(ssd_.Put(Meta(2), Payload('a'), false));  // SSD only
  ASSERT_OK(stack_.Rewrite(Meta(1), Payload('z', 10)));
  ASSERT_OK(stack_.Rewrite(Meta(2), Payload('z', 10)));
  EXPECT_EQ(hot_.Get(Meta(1).key)->view(), Payload('z', 10).view());
  EXPECT_EQ(ssd_.Get(Meta(1).key)->view(), Payload('z', 10).view());
  EXPECT_EQ(ssd_.Get(Meta(2).key)->view(), Payload('z', 10).view());
  EXPECT_FALSE(hot_.Contains(Meta(2).key));
  EXPECT_EQ(hot_.Totals().bytes, MemTier::Charge(10));
  EXPECT_EQ(ssd_.Totals().bytes, 2 * MemTier::Charge(10));
  EXPECT_TRUE(stack_.Rewrite(Meta(3), Payload('z')).IsNotFound());
}

TEST_F(TierStackTest, RemoveTakesTheBlockOutOfBothTiers) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a')));
  ASSERT_OK(stack_.Flush());
  ASSERT_OK(stack_.Remove(Meta(1).key));
  EXPECT_FALSE(stack_.Contains(Meta(1).key));
  EXPECT_TRUE(stack_.Remove(Meta(1).key).IsNotFound());
}

TEST_F(TierStackTest, BlockTooBigForTheHotTierGoesToSsd) {
  ASSERT_OK(stack_.Put(Meta(1), Payload('a', 4 * kCharge)));
  EXPECT_EQ(stack_.Locate(Meta(1).key), TierLevel::kSsd);
  EXPECT_EQ(stack_.dirty_blocks(), 0u);
}

TEST(TierStack, WithoutAHotTierPutsGoStraightToSsd) {
  MemTier ssd;
  TierStack stack(nullptr, &ssd);
  ASSERT_OK(stack.Put(Meta(1), Payload('a')));
  EXPECT_EQ(stack.Get(Meta(1).key)->level, TierLevel::kSsd);
  EXPECT_EQ(stack.lowest(), &ssd);
}

TEST(TierStack, WriteThroughStoresBothCopiesAtOnce) {
  MemTier hot, ssd;
  TierStack stack(&hot, &ssd, nullptr, {.write_through = true});
  ASSERT_OK(stack.Put(Meta(1), Payload('a')));
  EXPECT_TRUE(hot.Contains(Meta(1).key));
  EXPECT_TRUE(ssd.Contains(Meta(1).key));
  EXPECT_EQ(stack.dirty_blocks(), 0u);
}

}  // namespace
}  // namespace prefixkv
