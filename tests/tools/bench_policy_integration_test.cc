// `prefixkv bench policy` end to end: the built CLI replays the Mooncake
// trace under two policies at two capacities and prints the figures side by
// side (JSON), and draws the curves as a well-formed SVG with one line per
// policy.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

TEST(BenchPolicy, PrintsEveryPolicyAtEveryCapacityAndDrawsTheCurves) {
  testing::TempDir dir;
  const std::string svg = dir.str() + "/curves.svg";
  const testing::CliRun run = testing::RunCli(
      "bench policy --json --repeats 1 --capacities 1M,3M --policies lru,chain+hint,min "
      "--trace " +
      std::string(PREFIXKV_SOURCE_DIR) +
      "/tests/data/mooncake_synthetic_trace.jsonl --svg " + svg);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("\"capacities_tokens\":[1000000,3000000]"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"lru\":{"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\"min\":{"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\"chain+hint\":{"), std::string::npos) << run.output;
  EXPECT_EQ(Count(run.output, "\"token_hit_ratio\""), 6u) << run.output;
  // chain with reuse hints at 3M tokens (docs/eviction.md, "Reuse hints").
  EXPECT_NE(run.output.find("\"token_hit_ratio\":0.352"), std::string::npos)
      << run.output;
  // LRU at 3M tokens is the figure docs/benchmarks.md quotes.
  EXPECT_NE(run.output.find("\"token_hit_ratio\":0.315"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"unlimited_token_hit_ratio\":0.651"), std::string::npos);
  // One trace: chain+hint beats lru at both capacities there.
  EXPECT_NE(run.output.find("\"chain+hint\":{\"worst_ratio\":"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"wins_on_every_trace\":true"), std::string::npos)
      << run.output;

  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  EXPECT_EQ(s.rfind("<svg ", 0), 0u) << s.substr(0, 200);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  EXPECT_EQ(Count(s, "<polyline"), 3u);  // one curve per policy
  EXPECT_EQ(Count(s, "<circle"), 6u);    // one point per policy and capacity
  EXPECT_NE(s.find(">lru</text>"), std::string::npos);
  EXPECT_NE(s.find(">min</text>"), std::string::npos);
}

std::string Trace(const std::string& name) {
  return std::string(PREFIXKV_SOURCE_DIR) + "/tests/data/" + name;
}

// A win on one trace is not a default: the hints that gain on the Mooncake
// trace lose on the chat-shaped one (tools/gen_chat_trace.py), and the bench
// says so, naming the trace and capacity of the worst ratio.
TEST(BenchPolicy, APolicyMustWinOnEveryTraceGiven) {
  testing::TempDir dir;
  const std::string svg = dir.str() + "/curves.svg";
  const testing::CliRun run = testing::RunCli(
      "bench policy --json --repeats 1 --capacities 3M --policies lru,chain+hint "
      "--trace " +
      Trace("mooncake_synthetic_trace.jsonl") + " --trace " +
      Trace("chat_synthetic_trace.jsonl") + " --svg " + svg);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(Count(run.output, "\"unlimited_token_hit_ratio\""), 2u) << run.output;
  EXPECT_EQ(Count(run.output, "\"token_hit_ratio\""), 4u) << run.output;
  EXPECT_NE(run.output.find("\"wins_on_every_trace\":false"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"worst_trace\":\"" + Trace("chat_synthetic_trace.jsonl")),
            std::string::npos)
      << run.output;
  EXPECT_TRUE(std::ifstream(svg).good());
  EXPECT_TRUE(std::ifstream(dir.str() + "/curves-2.svg").good());

  const testing::CliRun text = testing::RunCli(
      "bench policy --repeats 1 --capacities 3M --policies lru,chain+hint --trace " +
      Trace("mooncake_synthetic_trace.jsonl") + " --trace " +
      Trace("chat_synthetic_trace.jsonl"));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("does not win on every trace: not a default"),
            std::string::npos)
      << text.output;
}

TEST(BenchPolicy, RejectsAnUnknownPolicyAndABadCapacity) {
  EXPECT_EQ(testing::RunCli("bench policy --policies mru --capacities 1M").exit_code, 2);
  EXPECT_EQ(testing::RunCli("bench policy --policies min+hint --capacities 1M").exit_code,
            2);
  EXPECT_EQ(testing::RunCli("bench policy --policies +hint --capacities 1M").exit_code,
            2);
  EXPECT_EQ(testing::RunCli("bench policy --capacities 3X").exit_code, 2);
}

// A capacity past 2^64 tokens ("999999999999G") wrapped into another one,
// replayed and printed (exit 0); one below a block, and bench route's
// --hot-capacity-tokens below a block, failed as 'both tiers are off' (route:
// exit 1). Each is now a usage error naming the capacity.
TEST(BenchPolicy, ACapacityPastTwoToTheSixtyFourOrBelowOneBlockIsAUsageError) {
  const std::string trace = " --trace " + Trace("mooncake_synthetic_trace.jsonl");
  for (const std::string command :
       {"bench policy --repeats 1 --policies lru --capacities 999999999999G",
        "bench policy --repeats 1 --policies lru --capacities 100",
        "bench route --nodes 2 --hot-capacity-tokens 100"}) {
    const testing::CliRun run = testing::RunCli(command + trace);
    EXPECT_EQ(run.exit_code, 2) << command << "\n" << run.output;
    EXPECT_EQ(run.output.find("both tiers are off"), std::string::npos) << command << "\n"
                                                                        << run.output;
  }
  EXPECT_NE(testing::RunCli("bench policy --capacities 100" + trace)
                .output.find("capacity 100 is below one block"),
            std::string::npos);
}

// `prefixkv bench route` (docs/router.md): every router at every node count,
// the one big node, and a bar per router and node count in the SVG.
TEST(BenchRoute, ComparesTheRoutersWithOneBigNodeAndDrawsTheBars) {
  testing::TempDir dir;
  const std::string svg = dir.str() + "/route.svg";
  const testing::CliRun run = testing::RunCli(
      "bench route --json --nodes 2,4 --trace " + std::string(PREFIXKV_SOURCE_DIR) +
      "/tests/data/mooncake_synthetic_trace.jsonl --svg " + svg);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(Count(run.output, "\"prefix\":{"), 2u) << run.output;
  EXPECT_EQ(Count(run.output, "\"round-robin\":{"), 2u) << run.output;
  EXPECT_EQ(Count(run.output, "\"random\":{"), 2u) << run.output;
  // One node of 4 x 3M tokens (docs/benchmarks.md), and the verdict at 4.
  EXPECT_NE(run.output.find("\"nodes\":4,\"one_node\":0.607"), std::string::npos)
      << run.output;
  EXPECT_EQ(Count(run.output, "\"meets_goals\":"), 1u) << run.output;
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  EXPECT_EQ(s.rfind("<svg ", 0), 0u) << s.substr(0, 200);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  // The background, four legend swatches, four bars per node count.
  EXPECT_EQ(Count(s, "<rect"), 1u + 4 + 8);
  EXPECT_NE(s.find(">N=4</text>"), std::string::npos);
  EXPECT_EQ(testing::RunCli("bench route --nodes 0").exit_code, 2);
  EXPECT_EQ(testing::RunCli("bench route --load-bound 0.5x").exit_code, 2);
}

}  // namespace
}  // namespace prefixkv
