// Issue 14, points 4 and 5 at process level: `prefixkv serve --write-through`,
// 2,000 keys, kill -9, the middle byte of the RocksDB log flipped. Before: the
// server said "recovered", audit said ok and 999 keys were served. Now:
// `prefixkv audit` reports the damage (exit 1) and moves nothing; `prefixkv
// repair` rebuilds the metadata from the segments; the restarted server
// serves every key with its exact value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

namespace fs = std::filesystem;
using testing::RespClient;
using testing::RunCli;
using testing::ServeProcess;

std::string Value(int i) {
  return "value-" + std::to_string(i) + std::string(i % 700, 'v');
}

void XorByteAt(const fs::path& file, uint64_t offset, char mask) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ mask);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::vector<std::string> Listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != "space-reserve") names.push_back(e.path().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(RepairCli, AFlippedLogByteIsReportedByAuditAndRepairedWithoutLoss) {
  constexpr int kKeys = 2000;
  testing::TempDir dir;
  const fs::path data = dir.path() / "data";
  const std::vector<std::string> flags = {"--write-through"};
  {
    ServeProcess serve(data.string(), flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_EQ(c.Call({"SET", "k" + std::to_string(i), Value(i)}).str, "OK");
    }
    EXPECT_NE(serve.StopWith(SIGKILL), 0);
  }
  fs::path log;
  for (const auto& e : fs::directory_iterator(data)) {
    if (e.path().extension() == ".log" &&
        (log.empty() || fs::file_size(e.path()) > fs::file_size(log)))
      log = e.path();
  }
  ASSERT_FALSE(log.empty());
  XorByteAt(log, fs::file_size(log) / 2, 0x20);

  const std::vector<std::string> before = Listing(data);
  testing::CliRun audit = RunCli("audit --data-dir " + data.string());
  EXPECT_EQ(audit.exit_code, 1) << audit.output;
  EXPECT_EQ(Listing(data), before) << "audit moved or rebuilt something:\n"
                                   << audit.output;

  testing::CliRun repair = RunCli("repair --data-dir " + data.string());
  EXPECT_EQ(repair.exit_code, 0) << repair.output;
  EXPECT_NE(repair.output.find("rebuilt: 2000 blocks restored"), std::string::npos)
      << repair.output;
  testing::CliRun again = RunCli("repair --data-dir " + data.string());
  EXPECT_NE(again.output.find("metadata intact"), std::string::npos) << again.output;

  ServeProcess serve(data.string(), flags);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart";
  RespClient c(serve.port());
  int served = 0;
  for (int i = 0; i < kKeys; ++i) {
    testing::Reply r = c.Call({"GET", "k" + std::to_string(i)});
    if (r.null) continue;
    EXPECT_EQ(r.str, Value(i)) << "wrong bytes for k" << i;
    ++served;
  }
  std::printf("served %d/%d after repair\n", served, kKeys);
  EXPECT_EQ(served, kKeys);
  EXPECT_EQ(serve.StopWith(SIGINT), 0);
}

std::string LongestChainLine(const std::string& inspect_output) {
  const size_t at = inspect_output.find("longest chain:");
  return at == std::string::npos
             ? ""
             : inspect_output.substr(at, inspect_output.find('\n', at) - at);
}

// Segment extents keep no parent link, so a rebuild used to restore every
// chain block as a chain root: inspect's longest chain fell from 14 blocks to
// 1, and every later audit reported each block "corrupt" (its record's parent
// against the stored zero), forever. The rebuild now takes each block's
// parent from its record's header (SsdTierOptions::rebuilt_parent, set by the
// Engine): after the repair the chains and the audit are as before the damage.
TEST(RepairCli, ARebuiltDirectoryKeepsItsChainsAndAuditsClean) {
  testing::TempDir dir;
  const fs::path data = dir.path() / "demo";
  testing::CliRun demo = RunCli("demo --turns 3 --data-dir " + dir.path().string());
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  ASSERT_TRUE(fs::exists(data / "CURRENT")) << demo.output;
  const testing::CliRun inspect_before = RunCli("inspect --data-dir " + data.string());
  ASSERT_EQ(inspect_before.exit_code, 0) << inspect_before.output;
  const std::string chain = LongestChainLine(inspect_before.output);
  ASSERT_FALSE(chain.empty()) << inspect_before.output;
  ASSERT_EQ(chain.find("longest chain: 1 blocks"), std::string::npos) << chain;

  // A lost CURRENT beside intact segments is damage: audit reports it (exit
  // 1, not a usage error), repair rebuilds (it used to refuse: "holds no
  // prefixkv database").
  fs::remove(data / "CURRENT");
  testing::CliRun damaged = RunCli("audit --data-dir " + data.string());
  EXPECT_EQ(damaged.exit_code, 1) << damaged.output;
  testing::CliRun repair = RunCli("repair --data-dir " + data.string());
  EXPECT_EQ(repair.exit_code, 0) << repair.output;
  EXPECT_NE(repair.output.find("rebuilt:"), std::string::npos) << repair.output;
  EXPECT_NE(repair.output.find("linked to their parent"), std::string::npos)
      << repair.output;
  EXPECT_EQ(repair.output.find("(0 linked to their parent)"), std::string::npos)
      << repair.output;

  for (int i = 0; i < 2; ++i) {
    testing::CliRun audit = RunCli("audit --data-dir " + data.string());
    EXPECT_EQ(audit.exit_code, 0) << "audit " << i << ":\n" << audit.output;
  }
  const testing::CliRun inspect_after = RunCli("inspect --data-dir " + data.string());
  EXPECT_EQ(LongestChainLine(inspect_after.output), chain) << inspect_after.output;
}

}  // namespace
}  // namespace prefixkv
