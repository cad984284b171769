// `prefixkv replay` as a user runs it: the trace and capacities, no other
// flag (a default --nodes used to be refused), the policies in its JSON,
// reuse hints, and bad policy names and values as usage errors.
#include <gtest/gtest.h>

#include <string>

#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

const std::string kTrace =
    std::string(PREFIXKV_SOURCE_DIR) + "/tests/data/mooncake_synthetic_trace.jsonl";

TEST(ReplayCli, RunsWithOnlyATraceAndCapacities) {
  const testing::CliRun run =
      testing::RunCli("replay " + kTrace +
                      " --hot-capacity-tokens 3000000 --ssd-capacity-tokens 0 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // lru at 3M hot tokens (docs/eviction.md), the SSD tier's default order.
  EXPECT_NE(run.output.find("\"token_hit_ratio\":0.315"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"policy\":\"lru\""), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\"ssd_policy\":\"leaf-lru\""), std::string::npos)
      << run.output;
}

TEST(ReplayCli, HintUnlikelyAfterPutsLongAnswersBlocksAsUnlikelyToBeReused) {
  const testing::CliRun run = testing::RunCli(
      "replay " + kTrace +
      " --hot-capacity-tokens 3000000 --ssd-capacity-tokens 0 --policy chain"
      " --hint-unlikely-after 100 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // chain with hints at 3M hot tokens (docs/eviction.md, "Reuse hints").
  EXPECT_NE(run.output.find("\"token_hit_ratio\":0.352"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"hint_unlikely_after\":100"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"hinted_blocks\":"), std::string::npos) << run.output;
  const testing::CliRun min =
      testing::RunCli("replay " + kTrace +
                      " --ssd-capacity-tokens 0 --policy min --hint-unlikely-after 100");
  EXPECT_EQ(min.exit_code, 2) << min.output;
  EXPECT_NE(min.output.find("--policy min takes no --hint-unlikely-after"),
            std::string::npos)
      << min.output;
  EXPECT_EQ(testing::RunCli("replay " + kTrace + " --hint-unlikely-after many").exit_code,
            2);
}

TEST(ReplayCli, BadPolicyNamesAreUsageErrors) {
  const testing::CliRun ssd = testing::RunCli("replay " + kTrace + " --ssd-policy fifo");
  EXPECT_EQ(ssd.exit_code, 2) << ssd.output;
  EXPECT_NE(ssd.output.find("--ssd-policy: unknown policy 'fifo'"), std::string::npos)
      << ssd.output;
  const testing::CliRun hot = testing::RunCli("replay " + kTrace + " --policy fifo");
  EXPECT_EQ(hot.exit_code, 2) << hot.output;
  EXPECT_EQ(testing::RunCli("replay " + kTrace + " --nodes 0").exit_code, 2);
}

// Each block's synthetic payload is allocated: --bytes-per-token 100M aborted
// on std::bad_alloc (leaving its scratch directory behind), and 2^55
// overflowed to empty payloads. Both, and 0, are usage errors now.
TEST(ReplayCli, BytesPerTokenBeyondA64MBlockIsAUsageError) {
  for (const char* bpt : {"100M", "36028797018963968", "0", "131073"}) {
    const testing::CliRun run =
        testing::RunCli("replay " + kTrace +
                        " --hot-capacity-tokens 100000 "
                        "--ssd-capacity-tokens 0 --bytes-per-token " +
                        bpt);
    EXPECT_EQ(run.exit_code, 2) << bpt << "\n" << run.output;
    EXPECT_NE(run.output.find("--bytes-per-token must be at least 1"), std::string::npos)
        << bpt << "\n"
        << run.output;
  }
}

}  // namespace
}  // namespace prefixkv
