// The prefix router (src/router, router.h) against synthetic event streams:
// the index follows stored / removed / moved / cleared events and a node's
// restart, the choice takes the longest RAM prefix then SSD, the load bound
// sends requests away from a busy node, and the least-loaded node takes what
// no node holds.
#include <gtest/gtest.h>

#include <vector>

#include "prefixkv/block_key.h"
#include "prefixkv/router.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr TierLevel kHot = TierLevel::kHot;
constexpr TierLevel kSsd = TierLevel::kSsd;

// The chain keys of blocks 0..n-1 of one conversation (one token per block).
std::vector<BlockKey> Chain(int32_t conversation, size_t n) {
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < n; ++i) tokens.push_back(conversation * 1000 + int32_t(i));
  return ChainKeys(NamespaceRootFromFingerprint("router-test"), tokens, 1);
}

KvEvent Event(KvEventKind kind, TierLevel tier, const BlockKey& key, uint64_t seq = 0) {
  KvEvent e;
  e.kind = kind;
  e.tier = tier;
  e.key = key;
  e.seq = seq;
  return e;
}
KvEvent Stored(TierLevel tier, const BlockKey& key, uint64_t seq = 0) {
  return Event(KvEventKind::kStored, tier, key, seq);
}

std::unique_ptr<PrefixRouter> Router(size_t nodes, double load_bound = 1.25) {
  RouterOptions o;
  o.nodes = nodes;
  o.load_bound = load_bound;
  auto r = PrefixRouter::Open(o);
  EXPECT_OK(r);
  return std::move(r).value();
}

// Node `node` stores the first `n` blocks of `chain` in `tier`.
void StoreChain(PrefixRouter& r, size_t node, const std::vector<BlockKey>& chain,
                size_t n, TierLevel tier) {
  for (size_t i = 0; i < n; ++i) r.Apply(node, Stored(tier, chain[i]));
}

TEST(PrefixRouter, IndexFollowsStoredRemovedAndMovedEvents) {
  auto r = Router(2);
  const auto c = Chain(1, 3);
  r->Apply(0, Stored(kHot, c[0]));
  r->Apply(1, Stored(kSsd, c[0]));
  EXPECT_TRUE(r->Holds(0, c[0], kHot));
  EXPECT_FALSE(r->Holds(0, c[0], kSsd));
  EXPECT_TRUE(r->Holds(1, c[0], kSsd));
  EXPECT_EQ(r->Stats().blocks, 1u);  // one entry however many nodes hold it

  KvEvent moved = Event(KvEventKind::kMoved, kSsd, c[0]);
  moved.from = kHot;
  r->Apply(0, moved);
  EXPECT_FALSE(r->Holds(0, c[0], kHot));
  EXPECT_TRUE(r->Holds(0, c[0], kSsd));

  r->Apply(0, Event(KvEventKind::kRemoved, kSsd, c[0]));
  EXPECT_FALSE(r->Holds(0, c[0], kSsd));
  EXPECT_TRUE(r->Holds(1, c[0], kSsd));
  r->Apply(1, Event(KvEventKind::kRemoved, kSsd, c[0]));
  EXPECT_EQ(r->Stats().blocks, 0u);  // no node holds it: the entry is gone
  EXPECT_EQ(r->Stats().events, 5u);
}

TEST(PrefixRouter, ClearedEmptiesOneTierOfOneNode) {
  auto r = Router(2);
  const auto c = Chain(1, 2);
  r->Apply(0, Stored(kHot, c[0]));
  r->Apply(0, Stored(kSsd, c[1]));
  r->Apply(1, Stored(kHot, c[0]));
  r->Apply(0, Event(KvEventKind::kCleared, kHot, BlockKey{}));
  EXPECT_FALSE(r->Holds(0, c[0], kHot));
  EXPECT_TRUE(r->Holds(0, c[1], kSsd));  // SSD survives the node's restart
  EXPECT_TRUE(r->Holds(1, c[0], kHot));  // the other node is untouched
}

TEST(PrefixRouter, ASequenceGapOrRestartForgetsTheNode) {
  auto r = Router(2);
  const auto c = Chain(1, 3);
  r->Apply(0, Stored(kSsd, c[0], 1));
  r->Apply(0, Stored(kSsd, c[1], 2));
  r->Apply(1, Stored(kSsd, c[0], 7));
  // Events 3 and 4 were lost: what node 0 holds is unknown but for event 5.
  r->Apply(0, Stored(kSsd, c[2], 5));
  EXPECT_FALSE(r->Holds(0, c[0], kSsd));
  EXPECT_TRUE(r->Holds(0, c[2], kSsd));
  EXPECT_TRUE(r->Holds(1, c[0], kSsd));
  EXPECT_EQ(r->Stats().node_resets, 1u);
  // A node whose log starts over (a restart without it) is forgotten too.
  r->Apply(0, Stored(kHot, c[0], 1));
  EXPECT_FALSE(r->Holds(0, c[2], kSsd));
  EXPECT_TRUE(r->Holds(0, c[0], kHot));
  EXPECT_EQ(r->Stats().node_resets, 2u);
  // Consecutive numbers keep everything.
  r->Apply(0, Stored(kHot, c[1], 2));
  EXPECT_TRUE(r->Holds(0, c[0], kHot));
  r->ForgetNode(1);
  EXPECT_FALSE(r->Holds(1, c[0], kSsd));
}

TEST(PrefixRouter, IgnoresTheRemoteTierAndUnknownNodes) {
  auto r = Router(2);
  const auto c = Chain(1, 1);
  r->Apply(0, Stored(TierLevel::kRemote, c[0]));
  r->Apply(2, Stored(kHot, c[0]));
  EXPECT_EQ(r->Stats().blocks, 0u);
  EXPECT_EQ(r->Stats().ignored_events, 2u);
}

TEST(PrefixRouter, RoutesToTheLongestRamPrefixThenSsd) {
  auto r = Router(3, /*load_bound=*/0);
  const auto c = Chain(1, 6);
  StoreChain(*r, 0, c, 2, kHot);  // 2 in RAM
  StoreChain(*r, 1, c, 3, kHot);  // 3 in RAM
  StoreChain(*r, 2, c, 1, kHot);  // 1 in RAM, then 5 on SSD
  StoreChain(*r, 2, c, 6, kSsd);
  RouteChoice choice = r->Route(c, 1);
  EXPECT_EQ(choice.node, 1u);
  EXPECT_EQ(choice.ram_blocks, 3u);
  EXPECT_TRUE(choice.by_prefix);
  // A RAM tie goes to the longer RAM-or-SSD prefix.
  StoreChain(*r, 2, c, 3, kHot);
  choice = r->Route(c, 1);
  EXPECT_EQ(choice.node, 2u);
  EXPECT_EQ(choice.local_blocks, 6u);
  // A prefix stops at the first block missing: node 0 holding block 4 but
  // not block 2 has a 2-block prefix.
  r->Apply(0, Stored(kHot, c[4]));
  EXPECT_EQ(r->Route(c, 1).node, 2u);
}

TEST(PrefixRouter, SsdBlockWeightLetsALongSsdPrefixWin) {
  RouterOptions o;
  o.nodes = 2;
  o.load_bound = 0;
  o.ssd_block_weight = 0.5;
  ASSERT_OK_AND_ASSIGN(auto r, PrefixRouter::Open(o));
  const auto c = Chain(1, 10);
  StoreChain(*r, 0, c, 1, kHot);
  StoreChain(*r, 1, c, 10, kSsd);
  EXPECT_EQ(r->Route(c, 1).node, 1u);  // 0.5 * 10 > 1
  EXPECT_EQ(Router(2, 0)->Route(c, 1).by_prefix, false);
}

TEST(PrefixRouter, FallsBackToTheLeastLoadedNodeWhenNoneHoldsThePrefix) {
  auto r = Router(3);
  const auto held = Chain(1, 2);
  StoreChain(*r, 0, held, 2, kHot);
  r->Route(held, 5);  // node 0: 5
  const auto other = Chain(2, 2);
  RouteChoice a = r->Route(other, 3);
  EXPECT_FALSE(a.by_prefix);
  EXPECT_NE(a.node, 0u);
  RouteChoice b = r->Route(other, 3);
  EXPECT_FALSE(b.by_prefix);
  EXPECT_NE(b.node, 0u);
  EXPECT_NE(b.node, a.node);  // the least loaded of the three
  r->Finish(a.node, 3);
  EXPECT_EQ(r->in_flight(a.node), 0u);
  EXPECT_EQ(r->Route(other, 1).node, a.node);
}

TEST(PrefixRouter, TheLoadBoundSendsRequestsAwayFromABusyNode) {
  auto r = Router(4);  // default bound 1.25 x mean
  const auto c = Chain(1, 4);
  StoreChain(*r, 0, c, 4, kHot);
  StoreChain(*r, 1, c, 2, kHot);
  // Idle nodes: the longest prefix wins.
  EXPECT_EQ(r->Route(c, 10).node, 0u);
  // Node 0 at 10, the others at 0: 10 + 10 > 1.25 * 20 / 4; node 1 holds the
  // next longest prefix and is idle.
  RouteChoice second = r->Route(c, 10);
  EXPECT_EQ(second.node, 1u);
  EXPECT_TRUE(second.by_prefix);
  // Both holders are over their bound: the least-loaded node, by load only.
  RouteChoice third = r->Route(c, 10);
  EXPECT_FALSE(third.by_prefix);
  EXPECT_GE(third.node, 2u);
  // Without a bound, node 0 takes everything.
  auto unbounded = Router(4, 0);
  StoreChain(*unbounded, 0, c, 4, kHot);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(unbounded->Route(c, 10).node, 0u);
}

TEST(PrefixRouter, MaxBlocksBoundsTheIndex) {
  RouterOptions o;
  o.nodes = 2;
  o.max_blocks = 2;
  ASSERT_OK_AND_ASSIGN(auto r, PrefixRouter::Open(o));
  const auto c = Chain(1, 3);
  StoreChain(*r, 0, c, 3, kHot);
  r->Apply(1, Stored(kHot, c[0]));  // an existing entry takes another node
  EXPECT_EQ(r->Stats().blocks, 2u);
  EXPECT_EQ(r->Stats().dropped_blocks, 1u);
  EXPECT_TRUE(r->Holds(1, c[0], kHot));
  EXPECT_FALSE(r->Holds(0, c[2], kHot));
}

TEST(PrefixRouter, OpenRejectsBadOptions) {
  auto bad = [](auto mutate) {
    RouterOptions o;
    mutate(o);
    return PrefixRouter::Open(o).status().IsInvalidArgument();
  };
  EXPECT_TRUE(bad([](RouterOptions& o) { o.nodes = 0; }));
  EXPECT_TRUE(bad([](RouterOptions& o) { o.nodes = kMaxRouterNodes + 1; }));
  EXPECT_TRUE(bad([](RouterOptions& o) { o.load_bound = 0.5; }));
  EXPECT_TRUE(bad([](RouterOptions& o) { o.load_bound = -1; }));
  EXPECT_TRUE(bad([](RouterOptions& o) { o.ssd_block_weight = 2; }));
  EXPECT_TRUE(bad([](RouterOptions& o) { o.max_blocks = 0; }));
  RouterOptions max;
  max.nodes = kMaxRouterNodes;
  ASSERT_OK_AND_ASSIGN(auto r, PrefixRouter::Open(max));
  const auto c = Chain(1, 1);
  r->Apply(63, Stored(kHot, c[0]));
  EXPECT_EQ(r->Route(c, 1).node, 63u);
}

}  // namespace
}  // namespace prefixkv
