// `prefixkv replay` as a user runs it: the trace and capacities, no other
// flag (a default --nodes used to be refused), the policies in its JSON,
// reuse hints, and bad policy names and values as usage errors. And
// `prefixkv route`, the router as a process, until SIGTERM.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/support/loopback.h"
#include "tests/tools/data_dir_builder.h"
#include "tools/route/resp_client.h"

extern char** environ;

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

// `prefixkv advise`: six hot points, and with --check the replay at each,
// within 0.02 (docs/eviction.md, "The capacity advisor").
TEST(AdviseCli, EstimatesEveryHotSizeAndChecksItAgainstAReplay) {
  const testing::CliRun run =
      testing::RunCli("advise " + kTrace + " --hot-capacity-tokens 3000000 --check");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* line : {"hot    0.25", "hot    1.00", "hot    8.00"})
    EXPECT_NE(run.output.find(line), std::string::npos) << line << "\n" << run.output;
  EXPECT_EQ(run.output.find("ssd "), std::string::npos) << run.output;
  const size_t at = run.output.find("largest difference ");
  ASSERT_NE(at, std::string::npos) << run.output;
  EXPECT_LT(std::stod(run.output.substr(at + 19)), 0.02) << run.output;
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

// `--nodes N --router`: the routed replay's report, and its flags' usage
// errors.
TEST(ReplayCli, RouterReportsTheNodesNextToOneBigNode) {
  const testing::CliRun run =
      testing::RunCli("replay " + kTrace +
                      " --nodes 4 --router round-robin --hot-capacity-tokens 3000000 "
                      "--ssd-capacity-tokens 0"
                      " --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The figures of issue 27 (docs/events.md, "Router").
  for (const char* field : {"\"router\":\"round-robin\"", "\"token_hit_ratio\":0.257952",
                            "\"one_node_token_hit_ratio\":0.607443", "\"per_node\":[{"})
    EXPECT_NE(run.output.find(field), std::string::npos) << field << "\n" << run.output;
  for (const char* bad : {" --nodes 2 --router nearest", " --nodes 2 --load-bound 1.5",
                          " --nodes 2 --router prefix --load-bound 0.5",
                          " --nodes 2 --router prefix --ssd-block-weight x",
                          " --nodes 2 --router prefix --in-flight-per-node 0",
                          " --nodes 2 --router prefix --remote redis://127.0.0.1:1"}) {
    const testing::CliRun r = testing::RunCli("replay " + kTrace + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
  }
}

// SSD admission (docs/eviction.md "SSD admission"): the flags' usage errors,
// and a budget's run reports what it wrote and skipped.
TEST(ReplayCli, SsdAdmissionFlagsAndTheirReport) {
  const testing::CliRun bad =
      testing::RunCli("replay " + kTrace + " --ssd-admission some");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--ssd-admission must be all, budget or ghost"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(testing::RunCli("replay " + kTrace + " --ssd-admission budget").exit_code, 2);
  EXPECT_EQ(testing::RunCli("replay " + kTrace + " --ssd-write-budget 1G").exit_code, 2);
  testing::TempDir dir;
  const testing::CliRun run =
      testing::RunCli("replay " + kTrace +
                      " --hot-capacity-tokens 1000000 --ssd-capacity-tokens 50000000" +
                      " --policy leaf-lru --bytes-per-token 1 --ssd-admission budget "
                      "--ssd-write-budget 10M" +
                      " --data-dir " + dir.str() + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("\"ssd_admission\":\"budget\""), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"ssd_write_budget_bytes_per_day\":10485760"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("\"ssd_skipped_blocks\":0,"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("\"ssd_bytes_written_per_hit\":"), std::string::npos)
      << run.output;
  // Reject first (ghost): skips without a budget, and takes none.
  EXPECT_EQ(
      testing::RunCli("replay " + kTrace + " --ssd-admission ghost --ssd-write-budget 1G")
          .exit_code,
      2);
  const testing::CliRun ghost =
      testing::RunCli("replay " + kTrace +
                      " --hot-capacity-tokens 1000000 --ssd-capacity-tokens 50000000" +
                      " --policy leaf-lru --bytes-per-token 1 --ssd-admission ghost" +
                      " --data-dir " + dir.str() + "/ghost --json");
  ASSERT_EQ(ghost.exit_code, 0) << ghost.output;
  EXPECT_NE(ghost.output.find("\"ssd_admission\":\"ghost\""), std::string::npos)
      << ghost.output;
  EXPECT_EQ(ghost.output.find("\"ssd_skipped_blocks\":0,"), std::string::npos)
      << ghost.output;
}

// The SSD tier's counters in the report include every block evicted to it:
// they were read while blocks still waited for write-back, a different
// number each run (1,397, 1,425, 1,412 SSD entries for 1,493 hot evictions).
TEST(ReplayCli, TheSsdCountersAreReadAfterTheWriteBackQueueDrains) {
  testing::TempDir dir;
  const std::string trace = dir.str() + "/head.jsonl";
  {
    std::ifstream in(kTrace);
    std::ofstream out(trace);
    std::string line;
    for (int i = 0; i < 300 && std::getline(in, line); ++i) out << line << "\n";
  }
  std::string first;
  for (int run = 0; run < 3; ++run) {
    const testing::CliRun r = testing::RunCli(
        "replay " + trace + " --data-dir " + dir.str() + "/data" + std::to_string(run) +
        " --hot-capacity-tokens 300000 --ssd-capacity-tokens 50000000 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("\"tiers\"");
    ASSERT_NE(at, std::string::npos) << r.output;
    const std::string tiers = r.output.substr(at, r.output.find(']', at) - at);
    if (run == 0) {
      first = tiers;
      EXPECT_EQ(tiers.find("\"entries\":0,"), std::string::npos) << tiers;
    } else {
      EXPECT_EQ(tiers, first) << "run " << run;
    }
  }
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

// `prefixkv route` starts, says where it listens, answers ROUTE from a node
// it cannot reach yet (no prefix: the least-loaded node) and stops cleanly
// on SIGTERM.
TEST(RouteCli, ServesRouteUntilSigterm) {
  const std::string node = "127.0.0.1:" + std::to_string(testing::ClosedLoopbackPort());
  std::vector<std::string> argv = {PREFIXKV_CLI, "route",   "--nodes",
                                   node,         "--model", "m:4:float16:KVCache",
                                   "--port",     "0"};
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string line;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  close(fds[0]);
  const size_t colon = line.rfind(':');
  ASSERT_EQ(line.rfind("routing on 127.0.0.1:", 0), 0u) << line;
  const int port = std::atoi(line.c_str() + colon + 1);
  EXPECT_NE(line.find(" over 1 nodes"), std::string::npos) << line;
  {
    auto client = route::RespClient::Connect("127.0.0.1", port, 2000);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto reply = (*client)->Command({"ROUTE", "m", "1", "2", "3", "4"});
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->Text(), node + " 0 0 0");
    auto stats = (*client)->Command({"ROUTE.STATS"});
    ASSERT_TRUE(stats.ok());
    EXPECT_NE(stats->str.find("connected=0"), std::string::npos) << stats->str;
  }
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace prefixkv
