// Runs the real `prefixkv demo --nodes 2 --json` binary: the conversation
// alternates between two node processes sharing a Redis Cluster, once on a
// cluster the demo starts itself and once on one this test started (--remote),
// and checks what the demo claims: replies equal stateless greedy decode, the
// nodes alternate, every node-B turn restores node A's blocks from the remote
// tier and later turns compute less than their prompt. Also its usage errors.
// Skipped without redis-server and redis-cli.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "prefixkv/clock.h"
#include "tests/server/serve_process.h"
#include "tests/support/test_util.h"
#include "tests/tools/cli_json.h"
#include "tests/tools/data_dir_builder.h"
#include "tools/redis/local_redis_cluster.h"

namespace prefixkv {
namespace {

using testing::CliRun;
using testing::Count;
using testing::Objects;
using testing::RunCli;
using testing::Value;

constexpr int kTurns = 4;

// The JSON object of a run's output (stderr, merged, comes before it).
std::string Json(const CliRun& run) {
  const size_t b = run.output.find("\n{");
  return b == std::string::npos ? run.output : run.output.substr(b + 1);
}

// Keys in every master of `cluster`.
uint64_t ClusterKeys(const LocalRedisCluster& cluster) {
  uint64_t keys = 0;
  for (int port : cluster.ports()) {
    const std::string out = testing::ShellOutput("redis-cli -h 127.0.0.1 -p " +
                                                 std::to_string(port) + " DBSIZE");
    keys += out.empty() ? 0 : std::stoull(out);
  }
  return keys;
}

// Everything the demo claims in `json`, for a run of kTurns turns.
void ExpectTwoNodeConversation(const std::string& json) {
  EXPECT_EQ(Value(json, "parity", json.rfind("\"parity\":")), "true") << json;
  EXPECT_EQ(Value(json, "verdict"), "\"PASS\"") << json;
  const std::vector<std::string> turns = Objects(Value(json, "turns"));
  ASSERT_EQ(turns.size(), static_cast<size_t>(kTurns)) << json;
  for (size_t i = 0; i < turns.size(); ++i) {
    const std::string& t = turns[i];
    EXPECT_EQ(Value(t, "node"), i % 2 == 0 ? "\"A\"" : "\"B\"") << t;
    EXPECT_EQ(Value(t, "parity"), "true") << "turn " << i + 1 << ": " << t;
    const uint64_t restored = Count(t, "restored_hot_tokens") +
                              Count(t, "restored_ssd_tokens") +
                              Count(t, "restored_remote_tokens");
    EXPECT_EQ(restored + Count(t, "computed_tokens"), Count(t, "prompt_tokens")) << t;
    if (i == 0) {
      EXPECT_EQ(Count(t, "computed_tokens"), Count(t, "prompt_tokens")) << t;
      continue;
    }
    EXPECT_LT(Count(t, "computed_tokens"), Count(t, "prompt_tokens"))
        << "turn " << i + 1 << ": " << t;
    // The previous turn ran on the other node: its blocks come from the cluster.
    EXPECT_GT(Count(t, "restored_remote_tokens"), 0u) << "turn " << i + 1 << ": " << t;
  }
  const std::string counters = Value(json, "remote_counters");
  EXPECT_GT(Count(counters, "hits"), 0u) << counters;
  EXPECT_GT(Count(counters, "writes"), 0u) << counters;
  EXPECT_EQ(Count(counters, "errors"), 0u) << counters;
  EXPECT_EQ(Count(counters, "corruptions"), 0u) << counters;
}

class DemoNodesIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(PREFIXKV_CLI))
        << "build the prefixkv binary first";
    if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
  }
  testing::TempDir dir_;
};

TEST_F(DemoNodesIntegration, ANodeBTurnRestoresNodeAsTurnFromTheClusterItStarted) {
  const CliRun run = RunCli("demo --nodes 2 --turns " + std::to_string(kTurns) +
                            " --json --data-dir " + dir_.str());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::string json = Json(run);
  EXPECT_EQ(Value(json, "cluster_started"), "true") << json;
  EXPECT_NE(run.output.find("started a local Redis Cluster (3 masters) at redis://"),
            std::string::npos)
      << run.output;
  ExpectTwoNodeConversation(json);
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path() / "demo" / "node-a"));
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path() / "demo" / "node-b"));
}

// On the hybrid model (window, recurrent and full-attention layers): each
// node restores the other's tip, recurrent state included, with token parity.
TEST_F(DemoNodesIntegration, WithRemoteItUsesTheGivenClusterAndStartsNone) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalRedisCluster> cluster,
                       LocalRedisCluster::Start(LocalRedisClusterOptions{}));
  ASSERT_EQ(ClusterKeys(*cluster), 0u);
  const CliRun run =
      RunCli("demo --nodes 2 --model hybrid --turns " + std::to_string(kTurns) +
             " --json --remote " + cluster->uri() + " --data-dir " + dir_.str());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::string json = Json(run);
  EXPECT_EQ(Value(json, "model"), "\"hybrid\"") << json;
  EXPECT_EQ(Value(json, "layer_kinds"), "\"WRWGWRWG\"") << json;
  EXPECT_EQ(Value(json, "cluster_started"), "false") << json;
  EXPECT_EQ(run.output.find("started a local Redis Cluster"), std::string::npos);
  // The value is cut at its first ',': the first seed.
  EXPECT_EQ(Value(json, "remote"),
            "\"redis://127.0.0.1:" + std::to_string(cluster->ports()[0]))
      << json;
  ExpectTwoNodeConversation(json);
  EXPECT_GT(ClusterKeys(*cluster), 0u) << "the blocks went to the test's cluster";
  cluster->Stop();
}

// The port of the first seed of the cluster the demo said it started.
int StartedClusterPort(const std::string& output) {
  const std::string said =
      "started a local Redis Cluster (3 masters) at redis://127.0.0.1:";
  const size_t at = output.find(said);
  return at == std::string::npos ? 0 : std::stoi(output.substr(at + said.size()));
}

// A node process that dies, or hangs past --turn-timeout-s, fails the demo
// with a message naming it, and the cluster the demo started is stopped.
TEST_F(DemoNodesIntegration, ACrashedOrHungNodeProcessIsAClearErrorAndTheClusterStops) {
  // The demo's fault hook (demo_nodes.cc), inherited by the CLI.
  ASSERT_EQ(setenv("PREFIXKV_DEMO_FAULT", "crash:2", 1), 0);
  const CliRun crashed = RunCli("demo --nodes 2 --turns 3 --data-dir " + dir_.str());
  EXPECT_EQ(crashed.exit_code, 1) << crashed.output;
  EXPECT_NE(
      crashed.output.find(
          "prefixkv demo: IOError: node B's process for turn 2 was killed by signal 9"),
      std::string::npos)
      << crashed.output;

  const uint64_t start_ms = Clock::System()->NowNanos() / 1000000;
  ASSERT_EQ(setenv("PREFIXKV_DEMO_FAULT", "hang:3", 1), 0);
  const CliRun hung =
      RunCli("demo --nodes 2 --turns 3 --turn-timeout-s 1 --data-dir " + dir_.str());
  unsetenv("PREFIXKV_DEMO_FAULT");
  const uint64_t took_ms = Clock::System()->NowNanos() / 1000000 - start_ms;
  EXPECT_EQ(hung.exit_code, 1) << hung.output;
  EXPECT_NE(hung.output.find("node A's process for turn 3 did not finish in time and was "
                             "killed"),
            std::string::npos)
      << hung.output;
  EXPECT_LT(took_ms, 30000u) << "the 1 s turn bound held";

  for (const CliRun* run : {&crashed, &hung}) {
    const int port = StartedClusterPort(run->output);
    ASSERT_NE(port, 0) << run->output;
    EXPECT_EQ(testing::ShellOutput("redis-cli -h 127.0.0.1 -p " + std::to_string(port) +
                                   " PING 2>/dev/null"),
              "")
        << "the demo's cluster still answers on port " << port;
  }
}

TEST(DemoNodesUsage, BadNodesOrRemoteIsAUsageError) {
  const testing::TempDir dir_;
  const CliRun three = RunCli("demo --nodes 3 --data-dir " + dir_.str());
  EXPECT_EQ(three.exit_code, 2) << three.output;
  EXPECT_NE(three.output.find("--nodes must be 1 or 2"), std::string::npos)
      << three.output;

  const CliRun bad = RunCli(
      "demo --nodes 2 --remote redis://127.0.0.1:notaport --data-dir " + dir_.str());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("prefixkv: --remote: "), std::string::npos) << bad.output;

  const CliRun one =
      RunCli("demo --remote redis://127.0.0.1:7000 --data-dir " + dir_.str());
  EXPECT_EQ(one.exit_code, 2) << one.output;
  EXPECT_NE(one.output.find("--remote needs --nodes 2"), std::string::npos) << one.output;

  const CliRun single = RunCli("demo --nodes 2 --turns 1 --data-dir " + dir_.str());
  EXPECT_EQ(single.exit_code, 2) << single.output;
  EXPECT_NE(single.output.find("--nodes 2 needs --turns 2..64"), std::string::npos)
      << single.output;
}

}  // namespace
}  // namespace prefixkv
