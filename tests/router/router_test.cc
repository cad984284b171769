// The prefix router (src/router, router.h) against synthetic event streams:
// the index follows stored / removed / moved / cleared events and a node's
// restart, the choice takes the longest RAM prefix then SSD, the load bound
// sends requests away from a busy node, and the least-loaded node takes what
// no node holds. Then `prefixkv route` (tools/route) over RESP, its node
// feeds tailing real Redis streams that the tests fill with XADD.
#include "prefixkv/router.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"
#include "tools/redis/local_redis_cluster.h"
#include "tools/route/event_feed.h"
#include "tools/route/resp_client.h"
#include "tools/route/route_server.h"

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

// A node's log skips numbers at a restart (a reservation) without losing
// events: the index keeps what it knew. A consumer told to resnapshot calls
// ForgetNode.
TEST(PrefixRouter, SkippedNumbersKeepTheIndexForgetNodeClearsIt) {
  auto r = Router(2);
  const auto c = Chain(1, 3);
  r->Apply(0, Stored(kSsd, c[0], 1));
  r->Apply(0, Stored(kSsd, c[1], 2));
  r->Apply(1, Stored(kSsd, c[0], 7));
  // The node restarted: its RAM is gone, its SSD holds, its numbers jumped.
  r->Apply(0, Event(KvEventKind::kCleared, kHot, BlockKey{}, 65'538));
  r->Apply(0, Stored(kHot, c[2], 65'539));
  EXPECT_TRUE(r->Holds(0, c[0], kSsd));
  EXPECT_TRUE(r->Holds(0, c[2], kHot));
  EXPECT_EQ(r->Stats().node_resets, 0u);
  r->ForgetNode(0);
  EXPECT_FALSE(r->Holds(0, c[0], kSsd));
  EXPECT_FALSE(r->Holds(0, c[2], kHot));
  EXPECT_TRUE(r->Holds(1, c[0], kSsd));  // the other node is untouched
  EXPECT_EQ(r->Stats().node_resets, 1u);
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

// The bound looks at a node's load before the request: with every node
// equally busy, the holder of the prefix takes it (1 + 1 > 1.25 * 5 / 4 would
// refuse every node).
TEST(PrefixRouter, WithEqualLoadsThePrefixHolderStillTakesTheRequest) {
  auto r = Router(4);
  const auto c = Chain(1, 2);
  StoreChain(*r, 2, c, 2, kHot);
  for (int i = 0; i < 4; ++i) r->Route(Chain(10 + i, 1), 1);
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(r->in_flight(i), 1u);
  RouteChoice choice = r->Route(c, 1);
  EXPECT_TRUE(choice.by_prefix);
  EXPECT_EQ(choice.node, 2u);
  // Node 2 at 2, the others at 1: 2 > 1.25 * 6 / 4, the bound holds.
  EXPECT_FALSE(r->Route(c, 1).by_prefix);
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

// docs/router.md: about 64 bytes per distinct block (a 40-byte hash node,
// 48 with malloc's header, and 8 to 16 for its bucket), whatever the number
// of nodes holding it.
TEST(PrefixRouter, TheIndexTakesUnderSeventyTwoBytesPerBlock) {
  auto r = Router(64);
  const auto c = Chain(1, 200'000);
  // Small blocks (the nodes) and mmap'ed ones (the bucket array).
  auto heap = [] { return mallinfo2().uordblks + mallinfo2().hblkhd; };
  const size_t before = heap();
  for (size_t i = 0; i < c.size(); ++i) {
    r->Apply(i % 64, Stored(kHot, c[i]));
    r->Apply((i + 1) % 64, Stored(kSsd, c[i]));
  }
  const size_t after = heap();
  if (after <= before) GTEST_SKIP() << "mallinfo2 does not count this allocator";
  const double per_block = double(after - before) / double(c.size());
  std::printf("router index: %.1f bytes per block\n", per_block);
  EXPECT_GT(per_block, 40);
  EXPECT_LT(per_block, 72);
}

// An unavailable node (prefixkv route: its feed is not connected) is left
// out of the choice, its index kept; with none available, no node.
TEST(PrefixRouter, AnUnavailableNodeIsLeftOutUntilItIsBack) {
  auto r = Router(2);
  const auto c = Chain(1, 2);
  StoreChain(*r, 0, c, 2, kHot);
  r->SetNodeAvailable(0, false);
  RouteChoice choice = r->Route(c, 1);
  EXPECT_EQ(choice.node, 1u);
  EXPECT_FALSE(choice.by_prefix);
  EXPECT_FALSE(choice.no_node);
  EXPECT_TRUE(r->Holds(0, c[1], kHot));
  EXPECT_EQ(r->Stats().skipped_unavailable, 1u);
  r->SetNodeAvailable(1, false);
  choice = r->Route(c, 1);
  EXPECT_TRUE(choice.no_node);
  EXPECT_EQ(r->in_flight(0) + r->in_flight(1), 1u);  // no load added
  EXPECT_EQ(r->Stats().no_node_available, 1u);
  r->SetNodeAvailable(0, true);
  choice = r->Route(c, 1);
  EXPECT_EQ(choice.node, 0u);
  EXPECT_EQ(choice.ram_blocks, 2u);
  EXPECT_TRUE(choice.by_prefix);
  EXPECT_EQ(r->Stats().routed, 3u);
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

// ---- The router as a RESP service, fed by real Redis streams ----

using route::RespClient;
using route::RespValue;

// Waits up to 30 s for `done` (returns as soon as it holds: the bound only
// delays a failure, and a loaded machine may take seconds to feed the streams).
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string Call(RespClient& c, const std::vector<std::string>& args) {
  StatusOr<RespValue> r = c.Command(args);
  return r.ok() ? (r->type == RespValue::Type::kError ? "ERR:" + r->str : r->Text())
                : "io: " + r.status().ToString();
}

// XADD of one event with the given id to a node's stream.
std::string Xadd(RespClient& node, const std::string& id, const std::string& kind,
                 const std::string& tier, const BlockKey& key) {
  return Call(node, {"XADD", "prefixkv:events", id, "kind", kind, "tier", tier, "key",
                     key.ToHex(), "reason", "none"});
}

class RouteServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
    LocalRedisClusterOptions o;
    o.masters = 2;
    o.cluster = false;
    ASSERT_OK_AND_ASSIGN(redis_, LocalRedisCluster::Start(o));
    for (int port : redis_->ports()) {
      ASSERT_OK_AND_ASSIGN(auto c, RespClient::Connect("127.0.0.1", port, 2000));
      nodes_.push_back(std::move(c));
      addrs_.push_back("127.0.0.1:" + std::to_string(port));
    }
    spec_.model = "m";
    spec_.block_tokens = 4;
    spec_.layer_types = {"KVCache"};
    for (int32_t t = 0; t < 12; ++t) tokens_.push_back(t);
    keys_ = ChainKeys(NamespaceRoot(spec_).value(), tokens_, 4);
  }

  void StartRouter() {
    route::RouteServerOptions o;
    o.nodes = addrs_;
    o.models = {spec_};
    o.feed.block_ms = 50;
    o.feed.retry_ms = 20;
    ASSERT_OK_AND_ASSIGN(server_, route::RouteServer::Start(o));
    ASSERT_OK_AND_ASSIGN(client_,
                         RespClient::Connect("127.0.0.1", server_->port(), 2000));
  }

  std::vector<std::string> RouteArgs() {
    std::vector<std::string> args = {"ROUTE", "m"};
    for (int32_t t : tokens_) args.push_back(std::to_string(t));
    return args;
  }
  bool EventsApplied(uint64_t n) {
    return Eventually([&] { return server_->router().Stats().events >= n; });
  }

  std::unique_ptr<LocalRedisCluster> redis_;
  std::vector<std::unique_ptr<RespClient>> nodes_;
  std::vector<std::string> addrs_;
  NamespaceSpec spec_;
  std::vector<int32_t> tokens_;
  std::vector<BlockKey> keys_;
  std::unique_ptr<route::RouteServer> server_;
  std::unique_ptr<RespClient> client_;
};

TEST_F(RouteServerTest, RoutesByWhatEachNodesStreamSays) {
  // Node 1 holds the request's three blocks in RAM before the router starts:
  // the feed reads the stream from its start.
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(Xadd(*nodes_[1], std::to_string(i + 1) + "-0", "stored", "hot", keys_[i]),
              std::to_string(i + 1) + "-0");
  ASSERT_EQ(Xadd(*nodes_[0], "1-0", "stored", "ssd", keys_[0]), "1-0");
  StartRouter();
  ASSERT_TRUE(EventsApplied(4));
  EXPECT_EQ(Call(*client_, RouteArgs()), addrs_[1] + " 1 3 3");
  EXPECT_EQ(Call(*client_, {"ROUTE.DONE", "1", "12"}), "OK");
  // An eviction on node 1 after the router started: its RAM prefix is 1
  // block now, node 0's SSD copy does not beat it.
  ASSERT_EQ(Xadd(*nodes_[1], "4-0", "removed", "hot", keys_[1]), "4-0");
  ASSERT_TRUE(EventsApplied(5));
  EXPECT_EQ(Call(*client_, RouteArgs()), addrs_[1] + " 1 1 1");
  EXPECT_EQ(Call(*client_, {"ROUTE.DONE", "1", "12"}), "OK");
  // Numbers skipped (a node's restart reserves ahead): nothing is lost, the
  // SSD copy of block 1 joins node 1's local prefix.
  ASSERT_EQ(Xadd(*nodes_[1], "70000-0", "stored", "ssd", keys_[1]), "70000-0");
  ASSERT_TRUE(EventsApplied(6));
  EXPECT_EQ(server_->router().Stats().node_resets, 0u);
  EXPECT_EQ(Call(*client_, RouteArgs()), addrs_[1] + " 1 1 3");
  const std::string stats = Call(*client_, {"ROUTE.STATS"});
  EXPECT_NE(stats.find("node1:addr=" + addrs_[1] + ",connected=1,applied=5"),
            std::string::npos)
      << stats;
  // Every counter docs/router.md names (it once said "resets" for node_resets
  // and left three out).
  for (const char* line :
       {"events:6\r\n", "ignored_events:0\r\n", "dropped_blocks:0\r\n",
        "node_resets:0\r\n", "blocks:3\r\n", "routed:3\r\n", "routed_by_prefix:3\r\n",
        "skipped_unavailable:0\r\n", "no_node_available:0\r\n"})
    EXPECT_NE(stats.find(line), std::string::npos) << line << "\n" << stats;
}

TEST_F(RouteServerTest, ANodeThatCannotServeItsStreamIsForgotten) {
  ASSERT_EQ(Xadd(*nodes_[0], "1-0", "stored", "hot", keys_[0]), "1-0");
  StartRouter();
  ASSERT_TRUE(EventsApplied(1));
  EXPECT_EQ(Call(*client_, RouteArgs()), addrs_[0] + " 0 1 1");
  // XREAD now answers an error (as a node that no longer holds the events
  // after the feed's last id does): what the router knew of it is dropped.
  ASSERT_EQ(Call(*nodes_[0], {"DEL", "prefixkv:events"}), "1");
  ASSERT_EQ(Call(*nodes_[0], {"SET", "prefixkv:events", "not a stream"}), "OK");
  ASSERT_TRUE(Eventually([&] { return server_->feeds()[0]->resnapshots() > 0; }));
  EXPECT_FALSE(server_->router().Holds(0, keys_[0], TierLevel::kHot));
  // Its stream back, from a fresh start: the feed reads it from the beginning.
  ASSERT_EQ(Call(*nodes_[0], {"DEL", "prefixkv:events"}), "1");
  ASSERT_EQ(Xadd(*nodes_[0], "1-0", "stored", "hot", keys_[0]), "1-0");
  ASSERT_TRUE(
      Eventually([&] { return server_->router().Holds(0, keys_[0], TierLevel::kHot); }));
  // An entry the feed cannot read (an unknown kind): the node is forgotten.
  ASSERT_EQ(Xadd(*nodes_[0], "2-0", "vanished", "hot", keys_[1]), "2-0");
  ASSERT_TRUE(Eventually([&] { return server_->feeds()[0]->bad_replies() > 0; }));
  // Forgotten by the resnapshot that follows the count (the feed's thread:
  // one ASan run looked in between).
  EXPECT_TRUE(
      Eventually([&] { return !server_->router().Holds(0, keys_[0], TierLevel::kHot); }));
  // ... and skipped: the feed goes on after it (it read the same entry again
  // at every reconnect, the node forgotten each time, its later events never
  // applied).
  ASSERT_EQ(Xadd(*nodes_[0], "3-0", "stored", "hot", keys_[2]), "3-0");
  const bool went_on =
      Eventually([&] { return server_->router().Holds(0, keys_[2], TierLevel::kHot); });
  ASSERT_TRUE(went_on) << server_->feeds()[0]->bad_replies() << " bad replies";
  EXPECT_EQ(server_->feeds()[0]->bad_replies(), 1u);
}

// A node whose feed lost its connection (the node died or left) is left out
// of ROUTE's choice, though the index still says it holds the prefix, and is
// chosen again once its feed is back. Node 0 "leaves" by moving its
// listener to another port (CONFIG SET port) and dropping the feed's
// connection: the feed's reconnects are refused until it moves back.
TEST_F(RouteServerTest, ANodeWhoseFeedIsDisconnectedIsNotChosen) {
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(Xadd(*nodes_[0], std::to_string(i + 1) + "-0", "stored", "hot", keys_[i]),
              std::to_string(i + 1) + "-0");
  StartRouter();
  ASSERT_TRUE(EventsApplied(3));
  const auto connected = [&](size_t node) {
    const std::string stats = Call(*client_, {"ROUTE.STATS"});
    return stats.find("node" + std::to_string(node) + ":addr=" + addrs_[node] +
                      ",connected=1") != std::string::npos;
  };
  ASSERT_TRUE(Eventually([&] { return connected(0) && connected(1); }));
  EXPECT_EQ(Call(*client_, RouteArgs()), addrs_[0] + " 0 3 3");
  EXPECT_EQ(Call(*client_, {"ROUTE.DONE", "0", "12"}), "OK");
  const int away = testing::ClosedLoopbackPort();
  ASSERT_NE(away, 0);
  ASSERT_EQ(Call(*nodes_[0], {"CONFIG", "SET", "port", std::to_string(away)}), "OK");
  ASSERT_EQ(Call(*nodes_[0], {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}), "1");
  ASSERT_TRUE(Eventually([&] { return !connected(0); }));
  EXPECT_TRUE(server_->router().Holds(0, keys_[0], TierLevel::kHot));  // bits stay
  // Node 1 holds nothing of it: the least-loaded node among the connected.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Call(*client_, RouteArgs()), addrs_[1] + " 1 0 0");
    EXPECT_EQ(Call(*client_, {"ROUTE.DONE", "1", "12"}), "OK");
  }
  const std::string stats = Call(*client_, {"ROUTE.STATS"});
  EXPECT_NE(stats.find("skipped_unavailable:3\r\n"), std::string::npos) << stats;
  // Back on its port: the feed reconnects and resumes, node 0 is chosen again.
  ASSERT_EQ(
      Call(*nodes_[0], {"CONFIG", "SET", "port", std::to_string(redis_->ports()[0])}),
      "OK");
  ASSERT_TRUE(Eventually([&] { return connected(0); }));
  EXPECT_EQ(Call(*client_, RouteArgs()), addrs_[0] + " 0 3 3");
}

TEST_F(RouteServerTest, BadRequestsGetClearErrors) {
  StartRouter();
  EXPECT_EQ(Call(*client_, {"PING"}), "PONG");
  EXPECT_EQ(Call(*client_, {"ROUTE", "m"}),
            "ERR:ERR wrong number of arguments: ROUTE model token [token ...]");
  EXPECT_EQ(Call(*client_, {"ROUTE", "other", "1"}), "ERR:ERR unknown model 'other'");
  EXPECT_EQ(Call(*client_, {"ROUTE", "m", "1", "x"}),
            "ERR:ERR token 'x' is not a 32-bit integer");
  EXPECT_EQ(Call(*client_, {"ROUTE", "m", "2147483648"}),
            "ERR:ERR token '2147483648' is not a 32-bit integer");
  EXPECT_EQ(Call(*client_, {"ROUTE.DONE", "2", "1"}),
            "ERR:ERR node '2' is not a node index (0..1)");
  EXPECT_EQ(Call(*client_, {"NOPE"}), "ERR:ERR unknown command 'NOPE'");
  // Fewer tokens than a block: no key, the least-loaded node (of those whose
  // feed is connected).
  ASSERT_TRUE(Eventually([&] {
    return server_->feeds()[0]->connected() && server_->feeds()[1]->connected();
  }));
  EXPECT_NE(Call(*client_, {"ROUTE", "m", "-5"}).find(" 0 0"), std::string::npos);
  route::RouteServerOptions bad;
  EXPECT_TRUE(route::RouteServer::Start(bad).status().IsInvalidArgument());
  bad.nodes = {"127.0.0.1"};
  EXPECT_TRUE(route::RouteServer::Start(bad).status().IsInvalidArgument());
}

// A node that accepts connections but never answers (stopped, hung: the
// kernel completes the handshake from its listen backlog) was marked
// available as soon as each reconnect's TCP connect succeeded, until its
// XREAD timed out: most of the time ROUTE chose it, and every request sent
// there waited. A node is available once it has answered on the connection.
// Here a socket that listens and never accepts, over several reconnects.
TEST(EventFeed, ANodeThatAcceptsButNeverAnswersIsNotAvailable) {
  int port = 0;
  const int silent = testing::BindLoopback(&port, /*backlog=*/16);
  ASSERT_GE(silent, 0);
  std::unique_ptr<PrefixRouter> router = Router(1);
  route::EventFeed feed(
      {.port = port, .node = 0, .block_ms = 20, .timeout_ms = 40, .retry_ms = 5},
      router.get());
  const std::vector<BlockKey> keys = Chain(1, 1);
  bool ever_available = false;
  while (feed.reconnects() < 3) {
    ever_available =
        ever_available || feed.connected() || !router->Route(keys, 0).no_node;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  feed.Stop();
  ::close(silent);
  EXPECT_FALSE(ever_available) << "a node that never answered was chosen";
}

// A node on loopback that speaks just enough RESP for a feed: each command
// (an array of bulk strings) goes to `answer`, which returns the raw reply,
// or "" to drop the connection. One connection at a time, as a feed makes.
class FakeNode {
 public:
  using Answer = std::function<std::string(const std::vector<std::string>&)>;
  explicit FakeNode(Answer answer)
      : listener_(testing::BindLoopback(&port_, /*backlog=*/4)),
        answer_(std::move(answer)) {
    if (listener_ >= 0) thread_ = std::thread([this] { Serve(); });
  }
  ~FakeNode() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
  }
  int port() const { return listener_ >= 0 ? port_ : 0; }

 private:
  // One command from the front of `buf` (removed from it); false while it
  // is incomplete.
  static bool TakeCommand(std::string& buf, std::vector<std::string>* args) {
    size_t pos = 0;
    auto line = [&](char kind, size_t* n) {
      const size_t end = buf.find("\r\n", pos);
      if (end == std::string::npos || buf[pos] != kind) return false;
      *n = std::stoul(buf.substr(pos + 1, end - pos - 1));
      pos = end + 2;
      return true;
    };
    size_t count = 0, len = 0;
    if (!line('*', &count)) return false;
    args->clear();
    for (size_t i = 0; i < count; ++i) {
      if (pos >= buf.size() || !line('$', &len) || buf.size() < pos + len + 2)
        return false;
      args->push_back(buf.substr(pos, len));
      pos += len + 2;
    }
    buf.erase(0, pos);
    return true;
  }

  void Serve() {
    while (!stop_) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      const timeval tick{.tv_sec = 0, .tv_usec = 20000};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof(tick));
      std::string buf;
      std::vector<std::string> args;
      char chunk[4096];
      bool open = true;
      while (open && !stop_) {
        const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
        if (n > 0) buf.append(chunk, size_t(n));
        while (open && TakeCommand(buf, &args)) {
          const std::string reply = answer_(args);
          open = !reply.empty() && ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) ==
                                       ssize_t(reply.size());
        }
      }
      ::close(fd);
    }
  }

  int port_ = 0;
  const int listener_;
  const Answer answer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string Bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

// A PKV.SNAPSHOT page (docs/protocol.md) holding `key` in RAM.
std::string SnapshotPage(const std::string& id, const std::string& next,
                         const BlockKey& key) {
  return "*8\r\n" + Bulk("id") + Bulk(id) + Bulk("cursor") + Bulk(next) + Bulk("hot") +
         "*1\r\n*1\r\n" + Bulk(key.ToHex()) + Bulk("ssd") + "*0\r\n";
}

// How a node whose log's start is gone answers PING and XREAD: RESNAPSHOT at
// the first XREAD (counted in `xreads`), then nothing new; nullopt for any
// other command.
std::optional<std::string> ResnapshotOnceThenIdle(const std::vector<std::string>& args,
                                                  std::atomic<int>& xreads) {
  if (args[0] == "PING") return "+PONG\r\n";
  if (args[0] != "XREAD") return std::nullopt;
  if (xreads++ == 0) return "-RESNAPSHOT the events after 0 are gone\r\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // BLOCK
  return "*-1\r\n";
}

// Runs a feed of `node` until it tails again after a bootstrap (its third
// XREAD, counted in `xreads`): the snapshot pages it applied.
uint64_t SnapshotPagesUntilTailing(const FakeNode& node, PrefixRouter* router,
                                   const std::atomic<int>& xreads) {
  EXPECT_NE(node.port(), 0);
  route::EventFeed feed({.port = node.port(), .node = 0, .block_ms = 5, .retry_ms = 5},
                        router);
  EXPECT_TRUE(Eventually([&] { return xreads > 2; }));  // tailing again
  feed.Stop();
  return feed.snapshot_pages();
}

// A paged bootstrap that fails once as `failure` (a raw reply; "" drops the
// connection) is made again in full before the feed tails: the node answers
// RESNAPSHOT at the first XREAD, then nothing new, its stream's head 9-0
// (XINFO STREAM), and two pages of one block each (cursors "0" and "7").
// The failure is answered to the page of `failing_cursor` and, for the first
// page, to the unpaged PKV.SNAPSHOT if asked next too: a node's trouble of a
// moment lasts both. A node that pages is never asked the unpaged form
// (every block it holds in one reply).
void ExpectABootstrapThatFailsOnceIsStartedOver(const std::string& failure,
                                                const std::string& failing_cursor) {
  const std::vector<BlockKey> keys = Chain(1, 2);
  std::atomic<int> xreads{0}, failures{0}, unpaged{0};
  FakeNode node([&](const std::vector<std::string>& args) -> std::string {
    if (std::optional<std::string> r = ResnapshotOnceThenIdle(args, xreads)) return *r;
    if (args[0] == "XINFO") return "*2\r\n" + Bulk("last-generated-id") + Bulk("9-0");
    if (args[0] != "PKV.SNAPSHOT") return "-ERR unknown command\r\n";
    const std::string cursor = args.size() > 1 ? args[1] : "unpaged";
    unpaged += cursor == "unpaged";
    const bool fails = (failures == 0 && cursor == failing_cursor) ||
                       (failures == 1 && cursor == "unpaged" && failing_cursor == "0");
    if (fails) {
      ++failures;
      return failure;
    }
    if (cursor == "0") return SnapshotPage("5-0", "7", keys[0]);
    if (cursor == "7") return SnapshotPage("5-0", "0", keys[1]);
    return "-ERR syntax error\r\n";
  });
  std::unique_ptr<PrefixRouter> router = Router(1);
  EXPECT_EQ(SnapshotPagesUntilTailing(node, router.get(), xreads),
            failing_cursor == "0" ? 2u : 3u);
  EXPECT_TRUE(router->Holds(0, keys[0], kHot)) << "the first page was never applied";
  EXPECT_TRUE(router->Holds(0, keys[1], kHot)) << "the second page was never applied";
  EXPECT_EQ(unpaged, 0);
}

// A connection that failed in the middle of a paged bootstrap (after the
// first page) left the router with the node forgotten but for that page; the
// next connection's XREAD from the old id, if it succeeded, went on without
// the rest of the node's blocks (never routed to for them again). The next
// connection now bootstraps again first.
TEST(EventFeed, ABootstrapBrokenOffByTheConnectionIsStartedOver) {
  ExpectABootstrapThatFailsOnceIsStartedOver("", "7");
}

constexpr char kSnapshotUnavailable[] =
    "-ERR Unavailable: the event log cannot reserve sequence numbers (its SEQ file): "
    "no snapshot\r\n";

// An error answered to a later page (a node whose event log cannot reserve
// sequence numbers for a moment: Unavailable) was taken for a node without
// PKV.SNAPSHOT: the feed went on from the stream's head (or read the log
// from 0), the node's blocks forgotten for good. The node has proved it
// pages: the bootstrap is made again.
TEST(EventFeed, AnErrorAnsweredToALaterPageIsRetried) {
  ExpectABootstrapThatFailsOnceIsStartedOver(kSnapshotUnavailable, "7");
}

// The same error answered to the first page (and to the unpaged form asked
// next) was taken for a server without PKV.SNAPSHOT too: the feed went on
// from the stream's head (XINFO STREAM), and the router never learnt the
// node's blocks. A server without it says so ("unknown command"); any other
// error makes the next connection bootstrap again.
TEST(EventFeed, AnErrorAnsweredToTheFirstPageIsRetried) {
  ExpectABootstrapThatFailsOnceIsStartedOver(kSnapshotUnavailable, "0");
}

// A prefixkv node from before the pages refuses PKV.SNAPSHOT's cursor
// ("wrong number of arguments"): the feed bootstraps from the unpaged form.
TEST(EventFeed, ANodeWithoutPagesIsBootstrappedFromTheUnpagedForm) {
  const BlockKey key = Chain(1, 1)[0];
  std::atomic<int> xreads{0};
  FakeNode node([&](const std::vector<std::string>& args) -> std::string {
    if (std::optional<std::string> r = ResnapshotOnceThenIdle(args, xreads)) return *r;
    if (args[0] != "PKV.SNAPSHOT") return "-ERR unknown command\r\n";
    if (args.size() > 1)
      return "-ERR wrong number of arguments for 'pkv.snapshot' command\r\n";
    return "*6\r\n" + Bulk("id") + Bulk("5-0") + Bulk("hot") + "*0\r\n" + Bulk("ssd") +
           "*1\r\n*1\r\n" + Bulk(key.ToHex());
  });
  std::unique_ptr<PrefixRouter> router = Router(1);
  EXPECT_EQ(SnapshotPagesUntilTailing(node, router.get(), xreads), 1u);
  EXPECT_TRUE(router->Holds(0, key, kSsd));
}

// Runs a feed of `node` (retry_ms 5 doubling up to 400) for a second while
// `failing`, then clears it and expects `recovered` to come true: the
// resnapshots of that second.
uint64_t ResnapshotsInASecondOfFailures(const FakeNode& node, PrefixRouter* router,
                                        std::atomic<bool>& failing,
                                        const std::function<bool()>& recovered) {
  EXPECT_NE(node.port(), 0);
  route::EventFeed feed(
      {.port = node.port(), .node = 0, .block_ms = 5, .retry_ms = 5, .max_retry_ms = 400},
      router);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t attempts = feed.resnapshots();
  failing = false;
  EXPECT_TRUE(Eventually(recovered));
  feed.Stop();
  return attempts;
}

// A node whose bootstrap keeps failing (its event log cannot reserve numbers
// for a long while) was asked again every retry_ms, and each attempt made
// the router forget the node: a walk of the whole index under the router's
// lock (158 ms at 2M blocks, 3 a second at the default 200 ms: ROUTE waited
// up to 236 ms, the lock held half the time). The waits double up to
// max_retry_ms while the attempts fail, and the feed is back to retry_ms
// once one succeeds. Here 5 ms doubling up to 400 ms: 9 attempts in the
// first second (170 before), then the node answers again.
TEST(EventFeed, FailingBootstrapsAreRetriedLessAndLessOften) {
  const BlockKey key = Chain(1, 1)[0];
  std::atomic<bool> failing{true};
  std::atomic<int> xreads{0};
  FakeNode node([&](const std::vector<std::string>& args) -> std::string {
    if (std::optional<std::string> r = ResnapshotOnceThenIdle(args, xreads)) return *r;
    if (args[0] != "PKV.SNAPSHOT") return "-ERR unknown command\r\n";
    return failing ? std::string(kSnapshotUnavailable) : SnapshotPage("5-0", "0", key);
  });
  std::unique_ptr<PrefixRouter> router = Router(1);
  const uint64_t attempts = ResnapshotsInASecondOfFailures(
      node, router.get(), failing, [&] { return router->Holds(0, key, kHot); });
  EXPECT_LE(attempts, 12u);
}

// A node whose XREAD fails after every good snapshot (an ACL that refuses
// XREAD, its stream key of another type) was resnapshotted at once, for
// ever: each time the router forgot the node (a walk of its index under its
// lock) and applied every page again, as fast as the node answered
// (21,323 resnapshots in this second before). The first error is resnapshotted
// at once, as a trimmed log asks; errors after it wait as failed bootstraps
// do, and a good XREAD ends the wait.
TEST(EventFeed, AnXreadThatFailsAfterEverySnapshotIsRetriedLessAndLessOften) {
  const BlockKey key = Chain(1, 1)[0];
  std::atomic<bool> failing{true};
  std::atomic<int> good_xreads{0};
  FakeNode node([&](const std::vector<std::string>& args) -> std::string {
    if (args[0] == "PING") return "+PONG\r\n";
    if (args[0] == "PKV.SNAPSHOT") return SnapshotPage("5-0", "0", key);
    if (args[0] != "XREAD") return "-ERR unknown command\r\n";
    if (failing)
      return "-NOPERM this user has no permissions to run the 'xread' command\r\n";
    ++good_xreads;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // BLOCK
    return "*-1\r\n";
  });
  std::unique_ptr<PrefixRouter> router = Router(1);
  const uint64_t attempts = ResnapshotsInASecondOfFailures(
      node, router.get(), failing, [&] { return good_xreads > 2; });
  EXPECT_GE(attempts, 2u);
  EXPECT_LE(attempts, 12u);
  EXPECT_TRUE(router->Holds(0, key, kHot));
}

// XREAD's reply of one entry `id` with the fields `fields`.
std::string XreadReply(const std::string& id, const std::vector<std::string>& fields) {
  std::string r = "*1\r\n*2\r\n" + Bulk("prefixkv:events") + "*1\r\n*2\r\n" + Bulk(id) +
                  "*" + std::to_string(fields.size()) + "\r\n";
  for (const std::string& f : fields) r += Bulk(f);
  return r;
}

// An entry the feed cannot read (a node of a newer event format) was read
// again at every reconnect from the same id, the node forgotten each time:
// the feed stalled for good. It is now skipped after a resnapshot, the feed
// going on after the later of the snapshot's id and the entry's (here the
// snapshot is older: from its id the feed would meet the entry again).
TEST(EventFeed, AnEntryItCannotReadIsSkippedAfterAResnapshot) {
  const std::vector<BlockKey> keys = Chain(1, 2);
  std::atomic<int> xreads{0};
  FakeNode node([&](const std::vector<std::string>& args) -> std::string {
    if (args[0] == "PING") return "+PONG\r\n";
    if (args[0] == "PKV.SNAPSHOT") return SnapshotPage("2-0", "0", keys[0]);
    if (args[0] != "XREAD") return "-ERR unknown command\r\n";
    ++xreads;
    if (args.back() == "0")
      return XreadReply("3-0", {"kind", "future", "tier", "hot", "key", keys[1].ToHex()});
    if (args.back() == "3-0")
      return XreadReply("4-0", {"kind", "stored", "tier", "hot", "key", keys[1].ToHex()});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // BLOCK
    return "*-1\r\n";
  });
  ASSERT_NE(node.port(), 0);
  std::unique_ptr<PrefixRouter> router = Router(1);
  route::EventFeed feed({.port = node.port(), .node = 0, .block_ms = 5, .retry_ms = 5},
                        router.get());
  const bool went_on = Eventually([&] { return router->Holds(0, keys[1], kHot); });
  feed.Stop();
  EXPECT_TRUE(went_on) << "stalled: " << feed.bad_replies() << " bad replies";
  EXPECT_TRUE(router->Holds(0, keys[0], kHot));  // from the snapshot
  EXPECT_EQ(feed.bad_replies(), 1u);
  EXPECT_EQ(feed.resnapshots(), 1u);
  EXPECT_EQ(router->Stats().node_resets, 1u);
}

// Stop() waited for a whole paged bootstrap (PKV.SNAPSHOT page after page
// until the cursor came back to 0): with a node of millions of blocks that
// is thousands of round trips, and with a node whose cursor never comes
// back to 0 it never returned (prefixkv route hung at SIGTERM). A stop now
// ends the bootstrap after the page under way. Here pages without end, the
// node dropping the connection 3 s after the stop was asked, so that the
// test ends either way.
TEST(EventFeed, AStopEndsABootstrapAfterThePageUnderWay) {
  const std::vector<BlockKey> keys = Chain(1, 1);
  std::atomic<int64_t> give_up_at{INT64_MAX};  // steady_clock ticks
  const auto now = [] {
    return std::chrono::steady_clock::now().time_since_epoch().count();
  };
  FakeNode node([&](const std::vector<std::string>& args) -> std::string {
    if (args[0] == "PING") return "+PONG\r\n";
    if (args[0] == "XREAD") return "-RESNAPSHOT the events after 0 are gone\r\n";
    if (args[0] != "PKV.SNAPSHOT" || now() > give_up_at) return "";
    return SnapshotPage("5-0", "7", keys[0]);
  });
  ASSERT_NE(node.port(), 0);
  std::unique_ptr<PrefixRouter> router = Router(1);
  route::EventFeed feed({.port = node.port(), .node = 0, .block_ms = 5, .retry_ms = 5},
                        router.get());
  ASSERT_TRUE(Eventually([&] { return feed.snapshot_pages() > 3; }));
  const auto start = std::chrono::steady_clock::now();
  give_up_at = (start + std::chrono::seconds(3)).time_since_epoch().count();
  feed.Stop();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(1))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
}

// RouteServer::Stop (prefixkv route's SIGTERM) stopped its node feeds one
// after the other, each waiting for its feed's call under way (an XREAD
// BLOCK, a connect or a PING of a node that does not answer, a retry's
// sleep): the stop took the sum of those waits, about half a second per
// idle node and more per hung one, past a supervisor's stop timeout with
// tens of nodes. Every feed is now told to stop first, then each is joined.
// Sixteen nodes that never answer (one silent socket), PINGs of 500 ms.
TEST(RouteServerStop, EndsEveryFeedAtOnce) {
  int port = 0;
  const int silent = testing::BindLoopback(&port, /*backlog=*/512);
  ASSERT_GE(silent, 0);
  route::RouteServerOptions o;
  o.nodes.assign(16, "127.0.0.1:" + std::to_string(port));
  o.models = {NamespaceSpec{.model = "m", .block_tokens = 4, .layer_types = {"KVCache"}}};
  o.feed.timeout_ms = 500;
  ASSERT_OK_AND_ASSIGN(auto server, route::RouteServer::Start(o));
  // Every feed in its cycle of connect, PING, timeout, retry.
  ASSERT_TRUE(Eventually([&] {
    for (const auto& f : server->feeds()) {
      if (f->reconnects() == 0) return false;
    }
    return true;
  }));
  const auto start = std::chrono::steady_clock::now();
  server->Stop();
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(silent);
  EXPECT_LT(took, std::chrono::seconds(3))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
}

RespValue StringValue(std::string s) {
  RespValue v;
  v.type = RespValue::Type::kString;
  v.str = std::move(s);
  return v;
}

// A stream entry [id, [field, value, ...]] as XREAD answers it.
RespValue StreamEntry(std::string id, std::vector<std::string> fields) {
  RespValue e, f;
  e.type = f.type = RespValue::Type::kArray;
  for (auto& x : fields) f.elements.push_back(StringValue(x));
  e.elements = {StringValue(std::move(id)), f};
  return e;
}

TEST(EventFeed, ParsesStreamEntriesAndRefusesMalformedOnes) {
  const auto str = StringValue;
  const auto entry = StreamEntry;
  const BlockKey key = Chain(1, 1)[0];
  ASSERT_OK_AND_ASSIGN(
      KvEvent e,
      route::ParseStreamEntry(entry("42-0", {"kind", "moved", "tier", "ssd", "from",
                                             "hot", "key", key.ToHex(), "owner", "3"})));
  EXPECT_EQ(e.seq, 42u);
  EXPECT_EQ(e.kind, KvEventKind::kMoved);
  EXPECT_EQ(e.tier, TierLevel::kSsd);
  EXPECT_EQ(e.from, TierLevel::kHot);
  EXPECT_EQ(e.key, key);
  RespValue info;
  info.type = RespValue::Type::kArray;
  info.elements = {str("length"), str("3"), str("last-generated-id"), str("70000-0")};
  EXPECT_EQ(route::LastGeneratedId(info), "70000-0");
  info.elements[3] = str("none");
  EXPECT_EQ(route::LastGeneratedId(info), "");
  EXPECT_EQ(route::LastGeneratedId(str("x")), "");
  for (const RespValue& bad :
       {entry("x-0", {"kind", "stored", "tier", "hot"}), entry("1-0", {"kind", "stored"}),
        entry("1-0", {"kind", "gone", "tier", "hot"}),
        entry("1-0", {"kind", "stored", "tier", "disk"}),
        entry("1-0", {"kind", "stored", "tier", "hot", "key", "zz"}),
        entry("1-0", {"kind", "stored", "tier"}), str("1-0")}) {
    EXPECT_TRUE(route::ParseStreamEntry(bad).status().IsInvalidArgument()) << bad.Text();
  }
}

// An entry without the field its kind needs (a block's key; a move's `from`)
// was read with the field's default: a stored block with no key set the
// node's bit of the zero key (a block no prompt has) and the block stored
// was never learnt; a move with no `from` left the block in RAM too. Such an
// entry is one the feed cannot read (skipped after a resnapshot); a cleared
// event names no block.
TEST(EventFeed, AnEntryWithoutTheFieldsItsKindNeedsIsRefused) {
  const auto entry = [](std::vector<std::string> fields) {
    return StreamEntry("1-0", std::move(fields));
  };
  const std::string key = Chain(1, 1)[0].ToHex();
  for (const char* kind : {"stored", "removed", "moved"}) {
    EXPECT_TRUE(
        route::ParseStreamEntry(entry({"kind", kind, "tier", "hot", "from", "ssd"}))
            .status()
            .IsInvalidArgument())
        << kind << " without a key";
  }
  EXPECT_TRUE(route::ParseStreamEntry(entry({"kind", "moved", "tier", "ssd", "key", key}))
                  .status()
                  .IsInvalidArgument())
      << "moved without from";
  EXPECT_OK(route::ParseStreamEntry(entry({"kind", "cleared", "tier", "hot"})).status());
  EXPECT_OK(route::ParseStreamEntry(entry({"kind", "stored", "tier", "hot", "key", key}))
                .status());
}

}  // namespace
}  // namespace prefixkv
