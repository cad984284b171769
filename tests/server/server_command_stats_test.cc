// Per-command counters and latency (ServerStats::commands): INFO
// commandstats in Redis's format, counted as Redis counts (a rejected
// command is not a call, an error reply makes a failed call, unknown names
// are not counted), and each call's time by the server's clock.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "command_stats.h"
#include "commands.h"
#include "tests/server/server_fixture.h"
#include "tests/support/stepping_clock.h"

namespace prefixkv {
namespace {

// "cmdstat_<name>:<fields>" lines of an INFO text, by command name.
std::map<std::string, std::string> CommandLines(const std::string& info) {
  std::map<std::string, std::string> out;
  std::istringstream in(info);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("cmdstat_", 0) != 0) continue;
    const size_t colon = line.find(':');
    out[line.substr(8, colon - 8)] = line.substr(colon + 1);
  }
  return out;
}

class ServerCommandStatsTest : public testing::ServerFixture {
 protected:
  void SetUp() override {
    options_.clock = &clock_;
    StartServer();
  }
  // Every reading of the server's clock moves it this far; nothing but the
  // dispatcher reads it while a command runs, so a command takes one step.
  testing::SteppingClock clock_;
};

TEST_F(ServerCommandStatsTest, CountsCallsFailuresAndRejectionsAsRedisDoes) {
  auto c = Connect();
  clock_.step_nanos = 30'000;                       // 30 us: the (25, 50] us bucket
  EXPECT_TRUE(c->Call({"GET", "k"}).null);          // ran
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "OK");  // ran
  EXPECT_EQ(c->Call({"GET", "k"}).str, "v");        // ran
  EXPECT_TRUE(c->Call({"GET"}).IsError());          // rejected: arity
  EXPECT_TRUE(c->Call({"PKV.GET", "zz", "zz"}).IsError());  // ran, failed
  EXPECT_TRUE(c->Call({"PKV.AUDIT"}).IsError());            // rejected: admin off
  EXPECT_TRUE(c->Call({"NOSUCH"}).IsError());               // not counted
  clock_.step_nanos = 0;

  const std::map<std::string, std::string> lines =
      CommandLines(c->Call({"INFO", "commandstats"}).str);
  EXPECT_EQ(lines.size(), 4u);  // the commands that ran or were refused; not INFO yet
  EXPECT_EQ(lines.at("get"),
            "calls=2,usec=60,usec_per_call=30.00,rejected_calls=1,failed_calls=0");
  EXPECT_EQ(lines.at("set"),
            "calls=1,usec=30,usec_per_call=30.00,rejected_calls=0,failed_calls=0");
  EXPECT_EQ(lines.at("pkv.get"),
            "calls=1,usec=30,usec_per_call=30.00,rejected_calls=0,failed_calls=1");
  EXPECT_EQ(lines.at("pkv.audit"),
            "calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0");
  // INFO counts once it has run.
  EXPECT_EQ(CommandLines(c->Call({"INFO", "commandstats"}).str).at("info"),
            "calls=1,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0");
  // total_commands_processed as Redis 7.0.15 counts it: the calls that ran
  // (four, and the two INFOs before this one), not the refused or unknown.
  EXPECT_EQ(server_->stats().total_commands_processed, 6u);
  // A command MULTI only queued is not processed; the EXEC and what it ran
  // are, an aborted EXEC too (MULTI + EXEC + GET, then MULTI + EXEC).
  EXPECT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "k"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"EXEC"}).elems.size(), 1u);
  EXPECT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_TRUE(c->Call({"NOSUCH"}).IsError());
  EXPECT_EQ(c->Call({"GET", "k"}).str, "QUEUED");
  EXPECT_TRUE(c->Call({"EXEC"}).IsError());
  EXPECT_EQ(server_->stats().total_commands_processed, 11u);
}

// As in Redis (7.0.15 checked by hand): EXEC answers an array whatever its
// commands answer, so an error inside it fails that command, not the EXEC;
// an EXECABORT is the EXEC's own error.
TEST_F(ServerCommandStatsTest, AnExecIsNotFailedByTheErrorsOfItsCommands) {
  auto c = Connect();
  EXPECT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "a", "b"}).str, "QUEUED");
  EXPECT_EQ(c->Call({"PING", "x", "y"}).str, "QUEUED");  // fails when it runs
  EXPECT_EQ(c->Call({"GET", "a"}).str, "QUEUED");
  testing::Reply exec = c->Call({"EXEC"});
  ASSERT_EQ(exec.type, '*');
  ASSERT_EQ(exec.elems.size(), 3u);
  EXPECT_TRUE(exec.elems[1].IsError());
  EXPECT_EQ(exec.elems[2].str, "b");

  std::map<std::string, std::string> lines =
      CommandLines(c->Call({"INFO", "commandstats"}).str);
  EXPECT_NE(lines.at("exec").find("calls=1,"), std::string::npos) << lines.at("exec");
  EXPECT_NE(lines.at("exec").find("failed_calls=0"), std::string::npos)
      << lines.at("exec");
  EXPECT_NE(lines.at("ping").find("calls=1,"), std::string::npos) << lines.at("ping");
  EXPECT_NE(lines.at("ping").find("failed_calls=1"), std::string::npos)
      << lines.at("ping");
  EXPECT_NE(lines.at("set").find("failed_calls=0"), std::string::npos);

  EXPECT_EQ(c->Call({"MULTI"}).str, "OK");
  EXPECT_TRUE(c->Call({"GET"}).IsError());  // refused: the EXEC aborts
  EXPECT_EQ(c->Call({"EXEC"}).str.rfind("EXECABORT", 0), 0u);
  lines = CommandLines(c->Call({"INFO", "commandstats"}).str);
  EXPECT_NE(lines.at("exec").find("calls=2,"), std::string::npos) << lines.at("exec");
  EXPECT_NE(lines.at("exec").find("failed_calls=1"), std::string::npos)
      << lines.at("exec");
}

TEST_F(ServerCommandStatsTest, OnlyAllEverythingAndItsNameShowTheSection) {
  auto c = Connect();
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");
  for (const char* section : {"", "default", "stats", "tiers"}) {
    std::vector<std::string> cmd = {"INFO"};
    if (*section != '\0') cmd.push_back(section);
    EXPECT_EQ(c->Call(cmd).str.find("# Commandstats"), std::string::npos) << section;
  }
  for (const char* section : {"all", "everything", "commandstats", "CommandStats"}) {
    const std::string info = c->Call({"INFO", section}).str;
    EXPECT_NE(info.find("# Commandstats\r\ncmdstat_"), std::string::npos) << section;
    EXPECT_NE(info.find("cmdstat_ping:calls=1,"), std::string::npos) << section;
  }
}

TEST_F(ServerCommandStatsTest, EachCallsTimeLandsInItsBucket) {
  auto c = Connect();
  for (uint64_t micros : {5, 30, 30, 2000, 3'000'000}) {
    clock_.step_nanos = micros * 1000;
    EXPECT_EQ(c->Call({"ECHO", "x"}).str, "x");
  }
  clock_.step_nanos = 0;
  const std::string info = c->Call({"INFO", "commandstats"}).str;
  EXPECT_EQ(CommandLines(info).at("echo"),
            "calls=5,usec=3002065,usec_per_call=600413.00,rejected_calls=0,"
            "failed_calls=0");
  const ServerStats stats = server_->stats();
  ASSERT_EQ(stats.commands.size(), server::Dispatcher::Table().size());
  const CommandStats* echo = nullptr;
  for (const CommandStats& cs : stats.commands) {
    if (cs.name == "echo") echo = &cs;
  }
  ASSERT_NE(echo, nullptr);
  LatencyHistogram want;
  want.counts[0] = 1;      // 5 us: <= 10 us
  want.counts[2] = 2;      // 30 us: (25, 50] us
  want.counts[7] = 1;      // 2 ms: (1, 2.5] ms
  want.counts.back() = 1;  // 3 s: above the last bound (1 s)
  EXPECT_EQ(echo->latency.counts, want.counts);
  EXPECT_EQ(echo->latency.sum_micros, 3'002'065u);
  EXPECT_EQ(echo->calls, 5u);
}

// Every command of the table has its entry, in COMMAND's order, called or not.
// As Redis (7.0.15) counts a blocked command: an XREAD BLOCK is a call once
// it is answered (by an event, or nil when its time is up), not while it
// waits. It used to be counted as it started to wait.
TEST_F(ServerCommandStatsTest, AnXreadThatWaitsIsCountedWhenAnswered) {
  auto reader = Connect();
  auto c = Connect();
  const std::string id = std::to_string(reader->Call({"CLIENT", "ID"}).integer);
  ASSERT_TRUE(reader->SendRaw(testing::EncodeCommand(
      {"XREAD", "BLOCK", "0", "STREAMS", "prefixkv:events", "$"})));
  ASSERT_TRUE(testing::WaitUntil([&] {
    return c->Call({"CLIENT", "LIST", "ID", id}).str.find(" cmd=xread ") !=
           std::string::npos;
  }));
  EXPECT_FALSE(CommandLines(c->Call({"INFO", "commandstats"}).str).contains("xread"));
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "OK");  // answers it
  EXPECT_EQ(reader->Read().elems.size(), 1u);
  EXPECT_NE(
      CommandLines(c->Call({"INFO", "commandstats"}).str).at("xread").find("calls=1,"),
      std::string::npos);
  EXPECT_TRUE(
      reader->Call({"XREAD", "BLOCK", "20", "STREAMS", "prefixkv:events", "$"}).null);
  EXPECT_EQ(CommandLines(c->Call({"INFO", "commandstats"}).str).at("xread"),
            "calls=2,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0");
}

TEST_F(ServerCommandStatsTest, StatsListEveryCommandInTableOrder) {
  const ServerStats stats = server_->stats();
  const auto& table = server::Dispatcher::Table();
  ASSERT_EQ(stats.commands.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(stats.commands[i].name, table[i].name);
    EXPECT_EQ(stats.commands[i].calls + stats.commands[i].rejected_calls, 0u);
  }
}

// A scrape (INFO commandstats, /metrics) copies a command's counters while
// connections record into them: a copy never shows more failed calls than
// calls, nor more timed calls (the histogram's count) than calls. They were
// loaded in the order they are added, so a copy taken while a call was
// counted had its failure without its call (failed_calls 1 more than calls
// of a command that only fails).
TEST(CommandStatsRecorder, ACopyNeverShowsMoreFailuresOrTimedCallsThanCalls) {
  server::CommandStatsRecorder recorder;
  std::atomic<bool> done{false};
  std::atomic<int> ran{0};
  std::thread connection([&] {
    while (!done.load(std::memory_order_relaxed)) {
      recorder.Ran(0, 1000, /*failed=*/true);
      ran.fetch_add(1, std::memory_order_relaxed);
    }
  });
  std::optional<CommandStats> torn;
  // About 25 million calls a second in release: copies tore within one
  // second in 5 of 6 runs.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (ran.load(std::memory_order_relaxed) < 30000000 && !torn.has_value() &&
         std::chrono::steady_clock::now() < end) {
    const CommandStats c = recorder.Snapshot()[0];
    if (c.failed_calls > c.calls || c.latency.count() > c.calls) torn = c;
  }
  done = true;
  connection.join();
  EXPECT_FALSE(torn.has_value())
      << "a copy of " << torn->calls << " calls, " << torn->failed_calls << " failed, "
      << torn->latency.count() << " timed";
}

}  // namespace
}  // namespace prefixkv
