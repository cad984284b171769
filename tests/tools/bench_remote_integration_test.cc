// `prefixkv bench remote` end to end: the built CLI starts its own local Redis
// Cluster, times a remote restore against redis-benchmark GET on it, replays
// the first 2000 requests of the Mooncake trace over one and two nodes, stops
// the cluster and prints every figure as one JSON object.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"
#include "tools/redis/local_redis_cluster.h"

namespace prefixkv {
namespace {

// The JSON line of the output (progress lines on stderr are mixed in).
std::string JsonLine(const std::string& output) {
  const size_t at = output.find("{\"suite\":\"remote\"");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

// The number after "key": in `json`; NaN when the key is missing.
double Number(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

bool Installed(const char* tool) {
  return std::system(("command -v " + std::string(tool) + " >/dev/null").c_str()) == 0;
}

TEST(BenchRemote, QuickRunPrintsEveryFigureAsFinitePositiveNumbers) {
  if (!LocalRedisCluster::Available() || !Installed("redis-benchmark"))
    GTEST_SKIP() << "redis-server, redis-cli or redis-benchmark is not installed";
  const testing::CliRun run = testing::RunCli(
      "bench remote --json --repeats 2 --quick --trace " +
      std::string(PREFIXKV_SOURCE_DIR) + "/tests/data/mooncake_synthetic_trace.jsonl");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string json = JsonLine(run.output);
  ASSERT_FALSE(json.empty()) << run.output;
  for (const char* key :
       {"remote_restore_ratio_vs_redis_get", "remote_restore_ratio_vs_redis_get_min",
        "remote_restore_ratio_vs_redis_get_max", "remote_restore_mb_per_s",
        "redis_get_mb_per_s", "one_node_hit_ratio", "two_node_hit_ratio",
        "two_node_no_remote_hit_ratio",
        // CPU per chain (the second round measures the limit's: the first
        // also SETs), and the ratio that CPU allows on this machine.
        "restore_cpu_ms_per_chain", "restore_redis_cpu_ms_per_chain",
        "limit_cpu_ms_per_chain", "limit_redis_cpu_ms_per_chain", "cpu_bound_ratio",
        "cores"}) {
    const double v = Number(json, key);
    EXPECT_TRUE(std::isfinite(v) && v > 0) << key << " = " << v << " in " << json;
  }
  EXPECT_TRUE(std::isfinite(Number(json, "two_node_minus_one_node"))) << json;
  EXPECT_NE(json.find("\"byte_identical\":true"), std::string::npos) << json;
  EXPECT_EQ(Number(json, "trace_requests"), 2000) << json;
  EXPECT_EQ(Number(json, "blocks"), 32) << json;
  // A realistic block: 100 to 300 KiB of keys and values.
  EXPECT_GE(Number(json, "block_bytes"), 100 << 10) << json;
  EXPECT_LE(Number(json, "block_bytes"), 300 << 10) << json;
  // Node B restored at a full hot tier, and did not write back what it
  // evicted (it came from the cluster; a rare collision in the table of
  // known keys may write one back).
  const double evictions = Number(json, "node_b_hot_evictions");
  EXPECT_GT(evictions, 0) << json;
  EXPECT_GT(Number(json, "node_b_rewrites_skipped"), 0.9 * evictions) << json;
  EXPECT_LE(
      Number(json, "node_b_rewrites_skipped") + Number(json, "node_b_remote_writes"),
      evictions)
      << json;
  // Sharing through the remote tier serves blocks the other node computed.
  EXPECT_GT(Number(json, "two_node_remote_block_hits"), 0) << json;
  EXPECT_GT(Number(json, "two_node_hit_ratio"),
            Number(json, "two_node_no_remote_hit_ratio"))
      << json;
}

TEST(BenchRemote, RejectsBadRepeatsAndAnUnusableCluster) {
  EXPECT_EQ(testing::RunCli("bench remote --repeats 0").exit_code, 2);
  const testing::CliRun bad = testing::RunCli("bench remote --remote redis://");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
}

}  // namespace
}  // namespace prefixkv
