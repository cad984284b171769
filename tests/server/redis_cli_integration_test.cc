// Compatibility: the real redis-cli and redis-benchmark against the real
// `prefixkv serve`. Skipped (with a message) only when those tools are absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tests/server/serve_process.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::ShellOutput;

bool Installed(const char* tool) {
  return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) ==
         0;
}

class RedisCliIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Installed("redis-cli") || !Installed("redis-benchmark")) {
      GTEST_SKIP() << "redis-cli / redis-benchmark not installed (Debian package "
                      "redis-tools); compatibility not checked";
    }
    serve_ = std::make_unique<testing::ServeProcess>(dir_.str() + "/data");
    ASSERT_NE(serve_->port(), 0) << "prefixkv serve did not start";
    cli_ = "redis-cli -p " + std::to_string(serve_->port()) + " ";
  }
  void TearDown() override {
    if (serve_) {
      EXPECT_EQ(serve_->StopWith(SIGTERM), 0);
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::ServeProcess> serve_;
  std::string cli_;
};

TEST_F(RedisCliIntegration, PingsSetsAndGetsABinaryValue) {
  EXPECT_EQ(ShellOutput(cli_ + "ping"), "PONG\n");
  std::string value;
  for (int i = 0; i < 3000; ++i) value += static_cast<char>((i * 7) % 256);
  const std::string in = dir_.str() + "/value.bin";
  std::ofstream(in, std::ios::binary) << value;
  // -x: the last argument is read from stdin, byte for byte.
  EXPECT_EQ(ShellOutput(cli_ + "-x set bin < " + in), "OK\n");
  EXPECT_EQ(ShellOutput(cli_ + "--raw get bin"), value + "\n");  // --raw adds one newline
  EXPECT_EQ(ShellOutput(cli_ + "exists bin nothing"), "1\n");  // not a tty: plain output
}

TEST_F(RedisCliIntegration, ShowsInfoWithTierCounters) {
  ASSERT_EQ(ShellOutput(cli_ + "set k v"), "OK\n");
  std::string info = ShellOutput(cli_ + "info");
  EXPECT_NE(info.find("# Tier_hot"), std::string::npos) << info;
  EXPECT_NE(info.find("hot_entries:1"), std::string::npos) << info;
  EXPECT_NE(info.find("# Tier_ssd"), std::string::npos) << info;
  EXPECT_NE(info.find("ssd_corruptions:0"), std::string::npos) << info;
  EXPECT_NE(ShellOutput(cli_ + "hello 3 2>&1").find("NOPROTO"), std::string::npos);
}

TEST_F(RedisCliIntegration, CompletesAShortRedisBenchmarkRun) {
  std::string csv =
      ShellOutput("redis-benchmark -p " + std::to_string(serve_->port()) +
                  " -t set,get -n 2000 -c 8 -P 4 -d 1024 -r 100 --csv -q 2>/dev/null");
  std::istringstream lines(csv);
  std::string line;
  int ok = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("\"SET\"", 0) == 0 || line.rfind("\"GET\"", 0) == 0) {
      EXPECT_GT(std::atof(line.c_str() + 7), 0.0) << line;
      ++ok;
    }
  }
  EXPECT_EQ(ok, 2) << csv;
  EXPECT_EQ(ShellOutput(cli_ + "ping"), "PONG\n");  // still serving afterwards
}

}  // namespace
}  // namespace prefixkv
