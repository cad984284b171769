// Eviction policies: name parsing, and leaf-lru's chain order (a block with
// a resident child is evicted after that child) through a real budget.
#include "prefixkv/advanced/eviction_policy.h"

#include <gtest/gtest.h>

#include "tests/storage/hot/hot_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using hot_test::EvictedIds;
using hot_test::ExpectAuditClean;
using hot_test::Meta;
using hot_test::Payload;
using hot_test::TwoOwners;

TEST(LeafLru, EvictsAChainFromItsTipBackwards) {
  TwoOwners t(4, EvictionPolicyKind::kLeafLru);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2, 1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(3, 2), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(10), Payload(), true));
  // Chain 1 <- 2 <- 3 is older than b's block but only its tip may go first.
  ASSERT_OK(t.b->Put(Meta(11), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(12), Payload(), true));
  ASSERT_OK(t.b->Put(Meta(13), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{3, 2, 1}));
  ExpectAuditClean(*t.budget);
}

TEST(LeafLru, NeverEvictsTheResidentParentOfTheBlockBeingInserted) {
  TwoOwners t(2, EvictionPolicyKind::kLeafLru);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.a->Get(Meta(2).key));
  // 1 is the least recently used leaf, but it is the new block's parent.
  ASSERT_OK(t.a->Put(Meta(3, 1), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{2}));
  // A chain that fills the budget keeps its prefix: the next tip does not fit.
  EXPECT_TRUE(t.a->Put(Meta(4, 3), Payload(), true).IsNoSpace());
  ExpectAuditClean(*t.budget);
}

TEST(LeafLru, AParentWhoseChildArrivedLaterWaitsForThatChild) {
  TwoOwners t(3, EvictionPolicyKind::kLeafLru);
  ASSERT_OK(
      t.a->Put(Meta(2, 1), Payload(), true));  // child first (restored out of order)
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(5), Payload(), true));
  ASSERT_OK(t.a->Get(Meta(2).key));
  ASSERT_OK(t.a->Put(Meta(6), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(7), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{5, 2}));
  ExpectAuditClean(*t.budget);
}

TEST(LeafLru, ReplacingABlockUnderANewParentMovesItsChildLink) {
  TwoOwners t(3, EvictionPolicyKind::kLeafLru);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(3), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2, 1), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(2, 3), Payload(), true));  // 1 is a leaf now, 3 is not
  for (uint64_t id : {4, 5, 6}) ASSERT_OK(t.a->Put(Meta(id), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{1, 2, 3}));
  ExpectAuditClean(*t.budget);
}

TEST(EvictionPolicy, ParsesTheCliNamesAndRejectsOthers) {
  EXPECT_EQ(ParseEvictionPolicy("lru").value(), EvictionPolicyKind::kLru);
  EXPECT_EQ(ParseEvictionPolicy("leaf-lru").value(), EvictionPolicyKind::kLeafLru);
  EXPECT_TRUE(ParseEvictionPolicy("LRU").status().IsInvalidArgument());
  EXPECT_TRUE(ParseEvictionPolicy("").status().IsInvalidArgument());
  for (auto kind : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLeafLru}) {
    EXPECT_EQ(ParseEvictionPolicy(EvictionPolicyName(kind)).value(), kind);
    EXPECT_EQ(MakeEvictionPolicy(kind)->name(), EvictionPolicyName(kind));
  }
}

}  // namespace
}  // namespace prefixkv
