// Eviction policies: name parsing, leaf-lru's chain order (a block with a
// resident child is evicted after that child), and the chain policy's
// protection of reused chains, through a real budget. The expected victims are
// worked out by hand in the comments (seq = the budget's access counter).
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

// Chain 1 <- 2 is reused (both hit), chain 10 <- 11 is newer but seen once.
// Window = 4 blocks. Leaves: 2 (seq 4, rank 4 + 4 = 8) and 11 (seq 6, rank 6).
// Put 20 evicts 11; then 10 is a leaf (rank 5) and goes before 20 (rank 7)
// and 2 (rank 8). leaf-lru evicts the older chain instead: 2, then 1.
std::vector<uint64_t> VictimsOfOneReusedAndOneNewChain(EvictionPolicyKind policy) {
  TwoOwners t(4, policy);
  EXPECT_OK(t.a->Put(Meta(1), Payload(), true));       // seq 1
  EXPECT_OK(t.a->Put(Meta(2, 1), Payload(), true));    // seq 2
  EXPECT_OK(t.a->Get(Meta(1).key));                    // seq 3, chain_hits 1
  EXPECT_OK(t.a->Get(Meta(2).key));                    // seq 4, chain_hits 1
  EXPECT_OK(t.a->Put(Meta(10), Payload(), true));      // seq 5
  EXPECT_OK(t.a->Put(Meta(11, 10), Payload(), true));  // seq 6
  EXPECT_OK(t.a->Put(Meta(20), Payload(), true));      // seq 7
  EXPECT_OK(t.a->Put(Meta(21), Payload(), true));      // seq 8
  ExpectAuditClean(*t.budget);
  return EvictedIds(t.evicted_a);
}

TEST(ChainPolicy, KeepsAReusedChainOverANewerChainSeenOnce) {
  EXPECT_EQ(VictimsOfOneReusedAndOneNewChain(EvictionPolicyKind::kChain),
            (std::vector<uint64_t>{11, 10}));
  EXPECT_EQ(VictimsOfOneReusedAndOneNewChain(EvictionPolicyKind::kLeafLru),
            (std::vector<uint64_t>{2, 1}));
}

// Window = 3. 1 is hit (chain_hits 1); 2, appended under it, starts at 1 too:
// rank 3 + 3 = 6. 10 (rank 4) goes first, then 11 (rank 5); without the
// inheritance 2 (rank 3) would have been the first victim.
TEST(ChainPolicy, ABlockAppendedUnderAReusedChainInheritsItsReuse) {
  TwoOwners t(3, EvictionPolicyKind::kChain);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));     // seq 1
  ASSERT_OK(t.a->Get(Meta(1).key));                  // seq 2
  ASSERT_OK(t.a->Put(Meta(2, 1), Payload(), true));  // seq 3
  ASSERT_OK(t.a->Put(Meta(10), Payload(), true));    // seq 4
  ASSERT_OK(t.a->Put(Meta(11), Payload(), true));    // seq 5
  ASSERT_OK(t.a->Put(Meta(12), Payload(), true));    // seq 6
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{10, 11}));
  ExpectAuditClean(*t.budget);
}

// The protection is one window, not forever. Window = 2: 1 is hit at seq 2
// (rank 4); 10 (rank 3) goes first; then 1 (rank 4, seq 2) and 11 (rank 4,
// seq 4) tie on rank and the older access goes.
TEST(ChainPolicy, AReusedChainUntouchedForAWindowIsEvictedLikeAnyOther) {
  TwoOwners t(2, EvictionPolicyKind::kChain);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));   // seq 1
  ASSERT_OK(t.a->Get(Meta(1).key));                // seq 2
  ASSERT_OK(t.a->Put(Meta(10), Payload(), true));  // seq 3
  ASSERT_OK(t.a->Put(Meta(11), Payload(), true));  // seq 4
  ASSERT_OK(t.a->Put(Meta(12), Payload(), true));  // seq 5
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{10, 1}));
  ExpectAuditClean(*t.budget);
}

// Window = 2. 5 is pinned at seq 2 (rank 4) and stays the lowest-ranked
// block; victims step over it: 6 (hit at seq 4, rank 6), then 7 (rank 5).
TEST(ChainPolicy, NeverEvictsAPinnedBlock) {
  TwoOwners t(2, EvictionPolicyKind::kChain);
  ASSERT_OK(t.a->Put(Meta(5), Payload(), true));           // seq 1
  std::optional<PinnedBlock> pin = t.a->Pin(Meta(5).key);  // seq 2
  ASSERT_TRUE(pin.has_value());
  ASSERT_OK(t.a->Put(Meta(6), Payload(), true));  // seq 3
  ASSERT_OK(t.a->Get(Meta(6).key));               // seq 4
  ASSERT_OK(t.a->Put(Meta(7), Payload(), true));  // seq 5
  ASSERT_OK(t.a->Put(Meta(8), Payload(), true));  // seq 6
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{6, 7}));
  EXPECT_TRUE(t.a->Contains(Meta(5).key));
  ExpectAuditClean(*t.budget);
}

TEST(ChainPolicy, AnOwnerOverItsQuotaEvictsOnlyItsOwnBlocks) {
  TwoOwners t(10, EvictionPolicyKind::kChain, /*quota_b=*/2 * hot_test::kCharge);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));  // a's block is the oldest
  for (uint64_t id : {20, 21, 22}) ASSERT_OK(t.b->Put(Meta(id), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_b), (std::vector<uint64_t>{20}));
  EXPECT_TRUE(t.evicted_a.calls().empty());
  ExpectAuditClean(*t.budget);
}

// Reuse hints (EvictionCandidate::unlikely_reuse). Budget of 3: 1, 2, 3 are
// put in that order and 3, the newest, is hinted. Two more puts evict 3
// first (hinted), then 1 (the least recent without the hint): under every
// policy, as no block here has a child.
std::vector<uint64_t> VictimsWithTheNewestHinted(EvictionPolicyKind policy) {
  TwoOwners t(3, policy);
  EXPECT_OK(t.a->Put(Meta(1), Payload(), true));
  EXPECT_OK(t.a->Put(Meta(2), Payload(), true));
  EXPECT_OK(t.a->Put(Meta(3), Payload(), true));
  EXPECT_TRUE(t.a->HintUnlikelyReuse(Meta(3).key));
  EXPECT_TRUE(t.a->HintUnlikelyReuse(Meta(3).key));    // again: no change
  EXPECT_FALSE(t.a->HintUnlikelyReuse(Meta(99).key));  // not resident
  EXPECT_OK(t.a->Put(Meta(4), Payload(), true));
  EXPECT_OK(t.a->Put(Meta(5), Payload(), true));
  ExpectAuditClean(*t.budget);
  return EvictedIds(t.evicted_a);
}

TEST(ReuseHint, AHintedBlockLeavesFirstUnderEveryPolicy) {
  for (auto policy : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLeafLru,
                      EvictionPolicyKind::kChain}) {
    SCOPED_TRACE(EvictionPolicyName(policy));
    EXPECT_EQ(VictimsWithTheNewestHinted(policy), (std::vector<uint64_t>{3, 1}));
  }
}

// Hinted blocks among themselves leave least recently used first; a hit
// clears the hint (3 was hinted, then read: it ranks by that read).
TEST(ReuseHint, HintedBlocksLeaveOldestFirstAndAHitClearsTheHint) {
  TwoOwners t(4, EvictionPolicyKind::kLru);
  for (uint64_t id : {1, 2, 3, 4}) ASSERT_OK(t.a->Put(Meta(id), Payload(), true));
  for (uint64_t id : {4, 2, 3}) ASSERT_TRUE(t.a->HintUnlikelyReuse(Meta(id).key));
  ASSERT_OK(t.a->Get(Meta(3).key));  // the newest access now, no hint
  for (uint64_t id : {5, 6, 7, 8}) ASSERT_OK(t.a->Put(Meta(id), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{2, 4, 1, 3}));
  ExpectAuditClean(*t.budget);
}

// Leaf-first still holds: hinted inner block 1 waits for its child 2, which
// is not hinted; the hinted leaf 10 goes first. A pin clears a hint too.
TEST(ReuseHint, AHintedBlockWithAResidentChildStaysUnderLeafFirstPolicies) {
  for (auto policy : {EvictionPolicyKind::kLeafLru, EvictionPolicyKind::kChain}) {
    SCOPED_TRACE(EvictionPolicyName(policy));
    TwoOwners t(4, policy);
    ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
    ASSERT_OK(t.a->Put(Meta(2, 1), Payload(), true));
    ASSERT_OK(t.a->Put(Meta(10), Payload(), true));
    ASSERT_OK(t.a->Put(Meta(11), Payload(), true));
    for (uint64_t id : {1, 10, 11}) ASSERT_TRUE(t.a->HintUnlikelyReuse(Meta(id).key));
    std::optional<PinnedBlock> pin = t.a->Pin(Meta(11).key);
    ASSERT_TRUE(pin.has_value());
    pin->Release();
    ASSERT_OK(t.a->Put(Meta(20), Payload(), true));  // evicts 10 (hinted leaf)
    ASSERT_OK(t.a->Put(Meta(21), Payload(), true));  // 2, then 1 would be next:
    // 2 (seq 2) is the least recent leaf without the hint; 11 was pinned since.
    EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{10, 2}));
    ASSERT_OK(t.a->Put(Meta(22), Payload(), true));  // 1 is a hinted leaf now
    EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{10, 2, 1}));
    ExpectAuditClean(*t.budget);
  }
}

// Under the chain policy the hint also outranks a reused chain's window: 1 was
// hit (chain_hits 1, rank 2 + a window of 3), then hinted: it goes first.
TEST(ReuseHint, OutranksTheChainPolicysProtection) {
  TwoOwners t(3, EvictionPolicyKind::kChain);
  ASSERT_OK(t.a->Put(Meta(1), Payload(), true));
  ASSERT_OK(t.a->Get(Meta(1).key));
  ASSERT_OK(t.a->Put(Meta(2), Payload(), true));
  ASSERT_OK(t.a->Put(Meta(3), Payload(), true));
  ASSERT_TRUE(t.a->HintUnlikelyReuse(Meta(1).key));
  ASSERT_OK(t.a->Put(Meta(4), Payload(), true));
  EXPECT_EQ(EvictedIds(t.evicted_a), (std::vector<uint64_t>{1}));
  ExpectAuditClean(*t.budget);
}

TEST(EvictionPolicy, ParsesTheCliNamesAndRejectsOthers) {
  EXPECT_EQ(ParseEvictionPolicy("lru").value(), EvictionPolicyKind::kLru);
  EXPECT_EQ(ParseEvictionPolicy("leaf-lru").value(), EvictionPolicyKind::kLeafLru);
  EXPECT_EQ(ParseEvictionPolicy("chain").value(), EvictionPolicyKind::kChain);
  EXPECT_TRUE(ParseEvictionPolicy("LRU").status().IsInvalidArgument());
  EXPECT_TRUE(ParseEvictionPolicy("").status().IsInvalidArgument());
  for (auto kind : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLeafLru,
                    EvictionPolicyKind::kChain}) {
    EXPECT_EQ(ParseEvictionPolicy(EvictionPolicyName(kind)).value(), kind);
    EXPECT_EQ(MakeEvictionPolicy(kind)->name(), EvictionPolicyName(kind));
  }
}

}  // namespace
}  // namespace prefixkv
