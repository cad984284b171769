// Engines sharing a real 3-master Redis Cluster (Debian's redis-server,
// started here on free loopback ports and stopped at the end): what one
// engine stores another restores byte for byte; a value damaged inside Redis
// is a counted miss; a master killed mid-run costs misses, never a failed
// request or a wrong byte; a cluster that is absent at start leaves the
// engine usable. (`prefixkv demo --nodes 2` runs the two engines as separate
// processes: tests/tools/demo_nodes_integration_test.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/remote_tier.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/loopback.h"
#include "tools/redis/local_redis_cluster.h"

namespace prefixkv {
namespace {

using testing::kBlockTokens;
using testing::KvLayers;
using testing::KvSpec;
using testing::Tokens;

std::unique_ptr<LocalRedisCluster> StartCluster() {
  StatusOr<std::unique_ptr<LocalRedisCluster>> c = LocalRedisCluster::Start({});
  EXPECT_OK(c);
  return c.ok() ? std::move(c).value() : nullptr;
}

// Runs redis-cli in cluster mode (it follows MOVED) against `port`; its output.
std::string RedisCli(int port, const std::string& args) {
  const std::string cmd =
      "redis-cli -c -h 127.0.0.1 -p " + std::to_string(port) + " " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "popen failed";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  ::pclose(p);
  return out;
}

class RemoteClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (LocalRedisCluster::Available()) cluster_ = StartCluster().release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
    ASSERT_NE(cluster_, nullptr);
  }

  // A node on `uri` whose keys start with this test's own prefix.
  EngineOptions Node(const std::string& name, const std::string& uri) {
    EngineOptions o;
    o.data_dir = (dir_.path() / name).string();
    o.hot_capacity_bytes = 64 << 20;
    o.remote = uri;
    o.remote_write = RemoteWriteMode::kAlways;
    o.remote_timeout_ms = 200;  // sanitizer builds on a busy 2-core machine
    o.log = log_.Sink();
    return o;
  }
  std::unique_ptr<Engine> Open(const EngineOptions& o) {
    EngineHooks hooks;
    hooks.configure_remote = [prefix = prefix_](RemoteTierOptions& r) {
      r.key_prefix = prefix;
    };
    StatusOr<std::unique_ptr<Engine>> e = OpenEngine(o, std::move(hooks));
    EXPECT_OK(e);
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static LocalRedisCluster* cluster_;
  testing::TempDir dir_;
  testing::LogLines log_;
  std::mt19937_64 rng_{testing::TestSeed("RemoteClusterTest")};
  const std::string prefix_ =
      "prefixkv:test:" +
      std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":";
};

LocalRedisCluster* RemoteClusterTest::cluster_ = nullptr;

TEST_F(RemoteClusterTest, WhatNodeAStoresNodeBRestoresByteForByte) {
  auto a = Open(Node("a", cluster_->uri()));
  auto b = Open(Node("b", cluster_->uri()));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace na, a->RegisterModel(KvSpec()));
  ASSERT_OK_AND_ASSIGN(Namespace nb, b->RegisterModel(KvSpec()));
  uint64_t blocks = 0;
  for (int32_t c = 0; c < 8; ++c) {
    const std::vector<int32_t> tokens = Tokens((40 + c) * kBlockTokens, 10000 * c);
    const std::vector<LayerState> layers = KvLayers(2, tokens.size(), rng_);
    ASSERT_OK(a->Store(na, tokens, layers).status());
    ASSERT_OK(a->Flush());
    ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, tokens));
    ASSERT_EQ(m.tokens.size(), tokens.size()) << "conversation " << c;
    EXPECT_EQ(m.tiers, std::vector<TierLevel>(40 + c, TierLevel::kRemote));
    ASSERT_OK_AND_ASSIGN(RestoreResult r, b->Restore(m));
    EXPECT_EQ(r.blocks_from_remote, 40u + c);
    EXPECT_EQ(r.layers, layers) << "conversation " << c;
    blocks += 40 + c;
  }
  const EngineStats s = b->Stats();
  EXPECT_EQ(s.remote.hits, blocks);
  EXPECT_EQ(s.remote.corruptions, 0u);
  EXPECT_TRUE(s.remote.available);
  EXPECT_EQ(a->Stats().remote.writes, blocks);
}

TEST_F(RemoteClusterTest, AByteChangedInsideRedisIsACountedMissNeverWrongBytes) {
  auto a = Open(Node("a", cluster_->uri()));
  auto b = Open(Node("b", cluster_->uri()));
  ASSERT_OK_AND_ASSIGN(Namespace na, a->RegisterModel(KvSpec()));
  ASSERT_OK_AND_ASSIGN(Namespace nb, b->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(10 * kBlockTokens);
  ASSERT_OK(a->Store(na, tokens, KvLayers(2, tokens.size(), rng_)).status());
  ASSERT_OK(a->Flush());
  ASSERT_OK_AND_ASSIGN(MatchResult on_a, a->Match(na, tokens));
  const std::string key = EngineRemoteTier(*a)->StoreKey(on_a.keys[6]);
  // Offset 150: inside the block record, past the envelope's header.
  const std::string out = RedisCli(cluster_->ports()[0], "SETRANGE " + key + " 150 Z");
  ASSERT_NE(out.find_first_of("0123456789"), std::string::npos) << out;
  ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, tokens));
  EXPECT_EQ(m.keys.size(), 6u) << "the damaged block ends the remote prefix";
  ASSERT_OK_AND_ASSIGN(RestoreResult r, b->Restore(m));
  const std::vector<int32_t> six(tokens.begin(), tokens.begin() + 6 * kBlockTokens);
  ASSERT_OK_AND_ASSIGN(RestoreResult want, a->Restore(*a->Match(na, six)));
  EXPECT_EQ(r.layers, want.layers);
  EXPECT_EQ(b->Stats().remote.corruptions, 1u);
  ASSERT_OK(b->Flush());  // the remote tier's writers delete it, behind the read
  EXPECT_EQ(
      RedisCli(cluster_->ports()[0], "EXISTS " + key).find('0') != std::string::npos,
      true)
      << "the damaged value was deleted";
}

TEST_F(RemoteClusterTest, AClusterAbsentAtStartLeavesTheEngineUsable) {
  const testing::RefusingLoopbackPort absent;  // refused for the whole test
  ASSERT_NE(absent.port(), 0);
  auto a = Open(Node("a", "redis://127.0.0.1:" + std::to_string(absent.port())));
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->Stats().remote.available);
  EXPECT_EQ(log_.Count("unavailable at open"), 1);
  ASSERT_OK_AND_ASSIGN(Namespace ns, a->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(6 * kBlockTokens);
  const std::vector<LayerState> layers = KvLayers(2, tokens.size(), rng_);
  ASSERT_OK(a->Store(ns, tokens, layers).status());
  ASSERT_OK_AND_ASSIGN(RestoreResult r, a->Restore(*a->Match(ns, tokens)));
  EXPECT_EQ(r.layers, layers);
  ASSERT_OK(a->Close());
}

// Its own cluster: a master is killed.
TEST(RemoteClusterFaultTest,
     AMasterKilledMidRunCostsMissesNeverAFailedRequestOrWrongBytes) {
  if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
  std::unique_ptr<LocalRedisCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  testing::TempDir dir;
  std::mt19937_64 rng(testing::TestSeed("RemoteClusterFaultTest"));
  auto node = [&](const std::string& name) {
    EngineOptions o = testing::Quiet({});
    o.data_dir = (dir.path() / name).string();
    o.hot_capacity_bytes = 64 << 20;
    o.remote = cluster->uri();
    o.remote_write = RemoteWriteMode::kAlways;
    o.remote_timeout_ms = 100;
    StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
    EXPECT_OK(e);
    return e.ok() ? std::move(e).value() : nullptr;
  };
  auto a = node("a");
  auto b = node("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace na, a->RegisterModel(KvSpec()));
  ASSERT_OK_AND_ASSIGN(Namespace nb, b->RegisterModel(KvSpec()));
  uint64_t full = 0, partial = 0;
  for (int32_t c = 0; c < 24; ++c) {
    if (c == 8) cluster->KillMaster(1);
    const std::vector<int32_t> tokens = Tokens(20 * kBlockTokens, 10000 * c);
    ASSERT_OK(a->Store(na, tokens, KvLayers(2, tokens.size(), rng)).status());
    ASSERT_OK(a->Flush());
    const uint64_t start = Clock::System()->NowNanos();
    ASSERT_OK_AND_ASSIGN(MatchResult m, b->Match(nb, tokens));
    ASSERT_OK_AND_ASSIGN(RestoreResult r, b->Restore(m));
    EXPECT_LT(Clock::System()->NowNanos() - start, 2'000'000'000ull)
        << "bounded by the timeouts, conversation " << c;
    // Whatever B restored is exactly what A holds for that prefix.
    const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + r.restored_tokens);
    if (r.restored_tokens > 0) {
      ASSERT_OK_AND_ASSIGN(RestoreResult want, a->Restore(*a->Match(na, prefix)));
      EXPECT_EQ(r.layers, want.layers) << "conversation " << c;
    }
    (r.restored_tokens == tokens.size() ? full : partial)++;
    if (c < 8) {
      EXPECT_EQ(r.restored_tokens, tokens.size()) << "before the kill";
    }
  }
  // About a third of the slots died with the master: most later chains break.
  EXPECT_EQ(full + partial, 24u);
  EXPECT_GT(partial, 0u);
  EXPECT_GT(b->Stats().remote.errors + a->Stats().remote.errors, 0u);
  ASSERT_OK(a->Close());
  ASSERT_OK(b->Close());
}

}  // namespace
}  // namespace prefixkv
