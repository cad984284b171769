// `prefixkv replay` as a user runs it: the trace and capacities, no other
// flag (a default --nodes used to be refused), the policies in its JSON,
// reuse hints, and bad policy names and values as usage errors. And
// `prefixkv route`, the router as a process, until SIGTERM, and in front of
// two real `prefixkv serve` nodes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "prefixkv/router.h"
#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/server/server_fixture.h"
#include "tests/support/loopback.h"
#include "tests/tools/data_dir_builder.h"
#include "tools/redis/local_redis_cluster.h"
#include "tools/route/event_feed.h"
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

// A trace of two requests of the same two 512-token blocks.
void WriteTwoRequestsOfTwoBlocks(const std::string& trace) {
  std::ofstream(trace) << R"({"input_length": 1024, "hash_ids": [1, 2]})"
                       << "\n"
                       << R"({"input_length": 1024, "hash_ids": [1, 2]})"
                       << "\n";
}

// advise --svg titles the plot with the trace's file name: one with '&' or
// '<' was written into the SVG as it is, an XML error in any viewer.
TEST(AdviseCli, TheSvgTitleEscapesTheTracesName) {
  testing::TempDir dir;
  const std::string trace = dir.str() + "/a&b<c.jsonl";
  WriteTwoRequestsOfTwoBlocks(trace);
  const std::string svg = dir.str() + "/curves.svg";
  const testing::CliRun run =
      testing::RunCli("advise '" + trace + "' --hot-capacity-tokens 1024 --svg " + svg);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(">token hit ratio: a&amp;b&lt;c.jsonl</text>"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("a&b"), std::string::npos) << text;
}

// advise --check with a hot tier under four blocks: its 0.25x point holds no
// block and was replayed over two tiers that were both off, so the whole
// check failed ('both tiers are off', exit 1) where advise alone printed the
// table; such a point now replays as what it is, a cache that hits nothing.
TEST(AdviseCli, CheckReplaysAHotPointBelowOneBlockAsNoHits) {
  testing::TempDir dir;
  const std::string trace = dir.str() + "/t.jsonl";
  WriteTwoRequestsOfTwoBlocks(trace);
  const testing::CliRun run = testing::RunCli("advise " + trace +
                                              " --hot-capacity-tokens 1024 --check"
                                              " --data-dir " +
                                              dir.str() + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Each point's JSON from its capacity on: 0.25x hits nothing, 1x (two
  // blocks) holds both, so the second request hits them.
  const auto point = [&](const std::string& capacity) {
    const size_t at = run.output.find("\"capacity_tokens\":" + capacity + ",");
    return at == std::string::npos ? ""
                                   : run.output.substr(at, run.output.find('}', at) - at);
  };
  EXPECT_NE(point("256").find(R"("replayed_hit_ratio":0)"), std::string::npos)
      << run.output;
  EXPECT_NE(point("1024").find(R"("replayed_hit_ratio":0.5)"), std::string::npos)
      << run.output;
}

// replay --policy min (one hot tier, Belady's optimum) returned before --nodes
// and the router flags were read, so --nodes 2, --nodes abc or --router
// prefix replayed one node and printed its figures with exit 0.
TEST(ReplayCli, PolicyMinRefusesNodesAndARouterInsteadOfIgnoringThem) {
  testing::TempDir dir;
  const std::string trace = dir.str() + "/t.jsonl";
  WriteTwoRequestsOfTwoBlocks(trace);
  const std::string min = "replay " + trace + " --policy min --ssd-capacity-tokens 0";
  ASSERT_EQ(testing::RunCli(min).exit_code, 0);
  for (const char* extra :
       {" --nodes 2", " --nodes abc", " --nodes 2 --router prefix", " --load-bound 2"}) {
    const testing::CliRun run = testing::RunCli(min + extra);
    EXPECT_EQ(run.exit_code, 2) << extra << "\n" << run.output;
  }
}

// Tiers that hold no block (0, or a size in tokens below one block, both)
// failed after reading the trace as 'both tiers are off', exit 1: a bad
// value is a usage error (exit 2) naming the flags.
TEST(ReplayCli, TiersThatHoldNoBlockAreAUsageError) {
  testing::TempDir dir;
  const std::string trace = dir.str() + "/t.jsonl";
  WriteTwoRequestsOfTwoBlocks(trace);
  for (const char* sizes : {" --hot-capacity-tokens 0 --ssd-capacity-tokens 0",
                            " --hot-capacity-tokens 100 --ssd-capacity-tokens 0",
                            " --hot-capacity-tokens 511 --ssd-capacity-tokens 100"}) {
    const testing::CliRun run = testing::RunCli("replay " + trace + sizes);
    EXPECT_EQ(run.exit_code, 2) << sizes << "\n" << run.output;
    EXPECT_NE(run.output.find("both tiers hold no block"), std::string::npos)
        << sizes << "\n"
        << run.output;
  }
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

// --remote-max-bytes (and its --help) in a replay: two nodes, request i on
// node i % 2, share a prompt through a local Redis Cluster. The flag was
// accepted, listed in --help and dropped: the replay's engines wrote without
// a quota, so node 1 hit the 4 blocks node 0 wrote whatever the limit. And
// --help gave --remote-ttl serve's default (86400) where a replay uses 3600.
TEST(ReplayCli, RemoteMaxBytesBoundsWhatTheReplayWritesToTheCluster) {
  if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
  const testing::CliRun help = testing::RunCli("replay --help");
  EXPECT_NE(help.output.find("no expiry) (default: 3600)"), std::string::npos)
      << help.output;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalRedisCluster> cluster,
                       LocalRedisCluster::Start(LocalRedisClusterOptions{}));
  testing::TempDir dir;
  const std::string trace = dir.str() + "/shared.jsonl";
  std::ofstream(trace) << R"({"input_length": 2048, "hash_ids": [1, 2, 3, 4]})"
                       << "\n"
                       << R"({"input_length": 2048, "hash_ids": [1, 2, 3, 4]})"
                       << "\n";
  const std::string run = "replay " + trace +
                          " --nodes 2 --ssd-capacity-tokens 0 --bytes-per-token 1"
                          " --remote-write always --remote-timeout-ms 5000 --json"
                          " --remote " +
                          cluster->uri();
  const testing::CliRun open = testing::RunCli(run);
  ASSERT_EQ(open.exit_code, 0) << open.output;
  EXPECT_NE(open.output.find(R"("remote":{"block_hits":4,)"), std::string::npos)
      << open.output;
  // 2048 bytes in the first write batch, over a 1-byte quota: nothing written.
  const testing::CliRun capped = testing::RunCli(run + " --remote-max-bytes 1");
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  EXPECT_NE(capped.output.find(R"("remote":{"block_hits":0,)"), std::string::npos)
      << capped.output;
}

// A directory given as the trace is a path that cannot be read (exit 2, was
// 1 with "reading DIR failed"); an empty trace is an error (exit 1), not a
// report of zeros with exit 0.
TEST(ReplayCli, ADirectoryOrAnEmptyTraceIsAnErrorNotAReport) {
  testing::TempDir dir;
  const std::string empty = dir.str() + "/empty.jsonl";
  std::ofstream(empty) << "";
  for (const std::string command : {"replay", "advise --hot-capacity-tokens 1000"}) {
    const testing::CliRun d = testing::RunCli(command + " " + dir.str());
    EXPECT_EQ(d.exit_code, 2) << command << "\n" << d.output;
    EXPECT_NE(d.output.find("is a directory"), std::string::npos) << d.output;
    const testing::CliRun e = testing::RunCli(command + " " + empty);
    EXPECT_EQ(e.exit_code, 1) << command << "\n" << e.output;
    EXPECT_NE(e.output.find("holds no request"), std::string::npos) << e.output;
  }
}

// Runs `prefixkv ARGS...` with stdout on /dev/null and stderr on a
// pseudo-terminal; what it wrote there, and its exit code.
testing::CliRun RunCliWithStderrOnATerminal(std::vector<std::string> args) {
  testing::CliRun run;
  int terminal = -1, child_side = -1;
  if (::openpty(&terminal, &child_side, nullptr, nullptr, nullptr) != 0) return run;
  std::vector<std::string> argv = {PREFIXKV_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, child_side, STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, terminal);
  pid_t pid = -1;
  const bool spawned =
      posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ) == 0;
  posix_spawn_file_actions_destroy(&actions);
  ::close(child_side);
  char buf[4096];
  // Until the child's side closes (EIO once it exited).
  for (ssize_t n; spawned && (n = ::read(terminal, buf, sizeof buf)) > 0;)
    run.output.append(buf, static_cast<size_t>(n));
  ::close(terminal);
  int status = 0;
  if (spawned && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
    run.exit_code = WEXITSTATUS(status);
  return run;
}

// docs/prefix_cache.md: "A progress bar is drawn on stderr when it is a
// terminal". A routed replay (--router) replays the trace twice, the N nodes
// and then one node with N times the capacity, and drew none: a long trace
// ran silent. Now one bar over both passes (600 requests: 1200 replayed).
TEST(ReplayCli, ARoutedReplayDrawsItsProgressOnATerminal) {
  testing::TempDir dir;
  const std::string trace = dir.str() + "/t.jsonl";
  {
    std::ofstream out(trace);
    for (int i = 0; i < 600; ++i)
      out << R"({"input_length": 1024, "hash_ids": [)" << i % 7 << ", " << i << "]}\n";
  }
  for (const char* router : {"round-robin", "prefix"}) {
    const testing::CliRun run = RunCliWithStderrOnATerminal(
        {"replay", trace, "--nodes", "2", "--router", router, "--ssd-capacity-tokens",
         "0", "--hot-capacity-tokens", "100000"});
    EXPECT_EQ(run.exit_code, 0) << router << "\n" << run.output;
    EXPECT_NE(run.output.find("] 1200/1200 requests"), std::string::npos)
        << router << "\n"
        << run.output;
  }
  // The unrouted replay's bar, as before.
  const testing::CliRun plain = RunCliWithStderrOnATerminal(
      {"replay", trace, "--nodes", "2", "--ssd-capacity-tokens", "0"});
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("] 600/600 requests"), std::string::npos) << plain.output;
}

// `prefixkv route ARGS... --port 0` as a child process; port() is 0 when it
// did not say where it listens. A non-empty `stderr_path` receives its log.
// The destructor kills it if it still runs.
class RouteProcess {
 public:
  explicit RouteProcess(std::vector<std::string> args,
                        const std::string& stderr_path = "") {
    std::vector<std::string> argv = {PREFIXKV_CLI, "route"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--port", "0"});
    const testing::SpawnedChild child =
        testing::SpawnWithStdoutPipe(std::move(argv), stderr_path);
    pid_ = child.pid;
    if (child.stdout_fd < 0) return;
    const int fd = child.stdout_fd;
    char c;
    while (pid_ > 0 && read(fd, &c, 1) == 1 && c != '\n') line_ += c;
    close(fd);
    if (line_.rfind("routing on 127.0.0.1:", 0) == 0)
      port_ = std::atoi(line_.c_str() + line_.rfind(':') + 1);
  }
  ~RouteProcess() {
    if (pid_ > 0) Stop(SIGKILL);
  }
  RouteProcess(const RouteProcess&) = delete;
  RouteProcess& operator=(const RouteProcess&) = delete;

  int port() const { return port_; }
  const std::string& line() const { return line_; }
  // Sends `sig` and goes on: kill()'s result.
  int Signal(int sig) { return kill(pid_, sig); }
  // Sends `sig`, waits; the wait status.
  int Stop(int sig) {
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  std::string line_;  // the first line it printed
  int port_ = 0;
};

// `prefixkv route` starts, says where it listens, answers ROUTE with an
// error while it cannot reach any node's event stream (rather than a node
// that is likely down) and stops cleanly on SIGTERM.
TEST(RouteCli, ServesRouteUntilSigterm) {
  const testing::RefusingLoopbackPort absent;  // refused for the whole test
  const std::string node = "127.0.0.1:" + std::to_string(absent.port());
  RouteProcess route({"--nodes", node, "--model", "m:4:float16:KVCache"});
  ASSERT_NE(route.port(), 0) << route.line();
  EXPECT_NE(route.line().find(" over 1 nodes"), std::string::npos) << route.line();
  {
    auto client = route::RespClient::Connect("127.0.0.1", route.port(), 2000);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto reply = (*client)->Command({"ROUTE", "m", "1", "2", "3", "4"});
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->type, route::RespValue::Type::kError) << reply->Text();
    EXPECT_EQ(reply->str, "ERR no node to route to: no node's event feed is connected");
    auto stats = (*client)->Command({"ROUTE.STATS"});
    ASSERT_TRUE(stats.ok());
    EXPECT_NE(stats->str.find("connected=0"), std::string::npos) << stats->str;
    EXPECT_NE(stats->str.find("no_node_available:1\r\n"), std::string::npos)
        << stats->str;
  }
  const int status = route.Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// `prefixkv route` over one node whose port refuses every connection (no
// feed ever connects): enough for the tests of the process itself.
std::vector<std::string> RouteOverARefusingNode(
    const testing::RefusingLoopbackPort& absent) {
  return {"--nodes", "127.0.0.1:" + std::to_string(absent.port()), "--model",
          "m:4:float16:KVCache"};
}

// Whether the router at `port` answers PING.
bool AnswersPing(int port) {
  auto client = route::RespClient::Connect("127.0.0.1", port, 2000);
  if (!client.ok()) return false;
  StatusOr<route::RespValue> reply = (*client)->Command({"PING"});
  return reply.ok() && reply->str == "PONG";
}

// A closed terminal or ssh session (SIGHUP) took the default action and
// ended `prefixkv route` at once (exit by signal 1): every client's ROUTE
// failed from then on. As `prefixkv serve` (and Redis), it ignores a hangup
// and runs on until SIGINT or SIGTERM.
TEST(RouteCli, AHangupDoesNotEndTheRouter) {
  const testing::RefusingLoopbackPort absent;
  RouteProcess route(RouteOverARefusingNode(absent));
  ASSERT_NE(route.port(), 0) << route.line();
  ASSERT_EQ(route.Signal(SIGHUP), 0);
  EXPECT_TRUE(AnswersPing(route.port())) << "SIGHUP ended the router";
  const int status = route.Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// `prefixkv route 2>&1 | tee route.log`, and the same Ctrl-C ends tee: the
// router's "stopping" line went to a pipe nobody reads and SIGPIPE killed it
// there (exit by signal 13, the feeds and connections never stopped). As
// `prefixkv serve`, it ignores SIGPIPE: the write fails and the stop goes on.
// The log's reader is a FIFO the test opens before the router and closes
// once it listens.
TEST(RouteCli, AStopWhoseLogReaderIsGoneStillEndsCleanly) {
  testing::TempDir dir;
  const std::string log = dir.str() + "/log";
  ASSERT_EQ(mkfifo(log.c_str(), 0600), 0);
  const int log_reader = open(log.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(log_reader, 0);
  const testing::RefusingLoopbackPort absent;
  RouteProcess route(RouteOverARefusingNode(absent), log);
  ASSERT_NE(route.port(), 0) << route.line();
  close(log_reader);
  const int status = route.Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "status " << status << (WIFSIGNALED(status) ? ": killed by a signal" : "");
}

// ROUTE of one prompt for one model through a `prefixkv route` process, then
// ROUTE.DONE: the load stays zero, only the prefixes decide.
class PromptRouter {
 public:
  PromptRouter(int port, std::string model, std::vector<int32_t> tokens)
      : model_(std::move(model)), tokens_(std::move(tokens)) {
    auto c = route::RespClient::Connect("127.0.0.1", port, 2000);
    if (c.ok()) client_ = std::move(*c);
  }
  bool connected() const { return client_ != nullptr; }

  // The answer as text: "host:port node ram local", or the error.
  std::string Routed() {
    std::vector<std::string> args = {"ROUTE", model_};
    for (int32_t t : tokens_) args.push_back(std::to_string(t));
    StatusOr<route::RespValue> r = client_->Command(args);
    if (!r.ok() || r->elements.size() != 4)
      return r.ok() ? r->Text() : r.status().ToString();
    (void)client_->Command(
        {"ROUTE.DONE", r->elements[1].Text(), std::to_string(tokens_.size())});
    return r->Text();
  }
  // Ties rotate between the nodes: an answer counts when four in a row agree.
  bool Steady(const std::string& want) {
    for (int i = 0; i < 4; ++i) {
      if (Routed() != want) return false;
    }
    return true;
  }
  // Up to 20 s for the router to learn what the nodes' streams say.
  bool WaitFor(const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!Steady(want) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Steady(want);
  }

 private:
  const std::string model_;
  const std::vector<int32_t> tokens_;
  std::unique_ptr<route::RespClient> client_;
};

// `spec` as `prefixkv route --model` takes it (its layers KVCache,KVCache).
std::string RouteModelFlag(const NamespaceSpec& spec) {
  return spec.model + ":" + std::to_string(spec.block_tokens) + ":" +
         std::string(DTypeName(spec.dtype)) + ":KVCache,KVCache";
}

// `prefixkv route` in front of two real `prefixkv serve` nodes, fed by their
// event streams: a prefix stored on node a (PKV.PUT) is routed to a with all
// its blocks in RAM; once node b holds it too and a evicted it from RAM (to
// its SSD tier), the router moves on to b, which holds it in RAM.
TEST(RouteCli, RoutesToTheServeNodeThatHoldsThePrefixInRam) {
  testing::TempDir dir;
  const std::vector<std::string> flags = {"--hot-capacity-bytes", "256K"};
  testing::ServeProcess a(dir.str() + "/a", flags), b(dir.str() + "/b", flags);
  ASSERT_NE(a.port(), 0);
  ASSERT_NE(b.port(), 0);
  const std::string addr_a = "127.0.0.1:" + std::to_string(a.port());
  const std::string addr_b = "127.0.0.1:" + std::to_string(b.port());
  const NamespaceSpec spec = testing::KvOnlySpec();
  RouteProcess route({"--nodes", addr_a + "," + addr_b, "--model", RouteModelFlag(spec)});
  ASSERT_NE(route.port(), 0) << route.line();
  const std::vector<int32_t> tokens = testing::Tokens(4);
  PromptRouter router(route.port(), spec.model, tokens);
  ASSERT_TRUE(router.connected());
  const std::vector<std::string> prefix = testing::EncodedStore(spec, tokens);
  testing::RespClient na(a.port()), nb(b.port());
  for (testing::RespClient* n : {&na, &nb}) {
    ASSERT_FALSE(n->Call(testing::RegisterArgs(spec)).IsError());
  }
  ASSERT_EQ(na.Call(testing::PutArgs(prefix)).type, '*');
  EXPECT_TRUE(router.WaitFor(addr_a + " 0 4 4")) << router.Routed();
  // b holds it too (a tie), then other prompts fill a's RAM: the prefix
  // moves to a's SSD tier.
  ASSERT_EQ(nb.Call(testing::PutArgs(prefix)).type, '*');
  for (int i = 1; i <= 200 && !router.Steady(addr_b + " 1 4 4"); ++i) {
    std::vector<int32_t> other = testing::Tokens(8);
    for (int32_t& t : other) t += 1000 * i;
    ASSERT_EQ(na.Call(testing::PutArgs(testing::EncodedStore(spec, other))).type, '*');
  }
  EXPECT_TRUE(router.WaitFor(addr_b + " 1 4 4")) << router.Routed();
  EXPECT_EQ(route.Stop(SIGTERM), 0);
}

// A model registered with PKV.REGISTER's later options (REVISION, TOKENIZER,
// ...) has another root than its name, block size, dtype and layers alone:
// `--model` took only NAME:BLOCK_TOKENS:DTYPE:LAYER_TYPES[:SALT], so the
// router hashed such a model's prompts under another root than the nodes' and
// routed every request of it by load alone (0 blocks held anywhere). It now
// takes those options after the spec, as PKV.REGISTER does.
TEST(RouteCli, RoutesAModelRegisteredWithPkvRegistersLaterOptions) {
  testing::TempDir dir;
  testing::ServeProcess node(dir.str() + "/n");
  ASSERT_NE(node.port(), 0);
  NamespaceSpec spec = testing::KvOnlySpec();
  spec.revision = "r1";
  spec.tokenizer_hash = "tok9";
  spec.tp_rank = 1;
  spec.tp_size = 2;
  const std::string addr = "127.0.0.1:" + std::to_string(node.port());
  RouteProcess route({"--nodes", addr, "--model",
                      RouteModelFlag(spec) + " REVISION r1 tokenizer tok9 TP 1/2"});
  ASSERT_NE(route.port(), 0) << route.line();
  const std::vector<int32_t> tokens = testing::Tokens(4);
  PromptRouter router(route.port(), spec.model, tokens);
  ASSERT_TRUE(router.connected());
  testing::RespClient n(node.port());
  ASSERT_FALSE(n.Call(testing::RegisterArgs(spec)).IsError());
  ASSERT_EQ(n.Call(testing::PutArgs(testing::EncodedStore(spec, tokens))).type, '*');
  EXPECT_TRUE(router.WaitFor(addr + " 0 4 4")) << router.Routed();
  EXPECT_EQ(route.Stop(SIGTERM), 0);
}

// A node whose log no longer holds its start (retention) answers XREAD from 0
// with RESNAPSHOT: the router's feed then bootstraps from the node's
// PKV.SNAPSHOT, in pages of its COUNT (300 blocks, pages of about 64), so the
// router knows every block the node held before (not only the changes from
// then on), and tails the stream after the first page's ID.
TEST(RouteCli, AFeedBehindRetentionBootstrapsFromPkvSnapshot) {
  testing::TempDir dir;
  testing::ServeProcess node(dir.str() + "/n", {"--event-retention-bytes", "8K"});
  ASSERT_NE(node.port(), 0);
  testing::RespClient c(node.port());
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(c.Call({"SET", "k" + std::to_string(i), "v"}).str, "OK");
  }
  ASSERT_TRUE(c.Call({"XREAD", "STREAMS", "prefixkv:events", "0"}).IsError());
  StatusOr<std::unique_ptr<PrefixRouter>> router = PrefixRouter::Open({.nodes = 1});
  ASSERT_TRUE(router.ok()) << router.status().ToString();
  route::EventFeed feed({.port = node.port(), .node = 0, .count = 64}, router->get());
  const auto blocks_become = [&](uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((*router)->Stats().blocks != n &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return (*router)->Stats().blocks;
  };
  EXPECT_EQ(blocks_become(300), 300u);
  EXPECT_EQ(feed.resnapshots(), 1u);
  EXPECT_GE(feed.snapshot_pages(), 3u);
  ASSERT_EQ(c.Call({"SET", "k300", "v"}).str, "OK");
  EXPECT_EQ(blocks_become(301), 301u);
  EXPECT_EQ(feed.resnapshots(), 1u);
}

}  // namespace
}  // namespace prefixkv
