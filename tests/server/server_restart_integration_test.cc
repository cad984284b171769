// Restart: every value and block acknowledged before a SIGTERM to `prefixkv
// serve` is returned after a restart on the same data directory, whether it
// was still dirty in the hot tier, already written back, or stored straight on
// SSD; with --write-through, every value acknowledged before a kill -9 is too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/server/server_fixture.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::RespClient;
using testing::ServeProcess;

// Values from 1 byte to 300 KiB: with a 256 KiB hot tier some are evicted
// (written back), some stay dirty in RAM until shutdown, and the largest do not
// fit in RAM at all.
std::vector<std::string> RandomValues(std::mt19937_64& rng, int n) {
  std::vector<std::string> values;
  for (int i = 0; i < n; ++i) {
    size_t size = 1 + rng() % (i % 10 == 0 ? 300 << 10 : 8 << 10);
    std::string v(size, '\0');
    for (char& c : v) c = static_cast<char>(rng());
    values.push_back(std::move(v));
  }
  return values;
}

// GET of every "key<i>" returns values[i], except `deleted`, which is nil.
void ExpectValues(RespClient& c, const std::vector<std::string>& values, size_t deleted) {
  for (size_t i = 0; i < values.size(); ++i) {
    testing::Reply r = c.Call({"GET", "key" + std::to_string(i)});
    if (i == deleted) {
      EXPECT_TRUE(r.null) << "a deleted key came back";
    } else {
      EXPECT_EQ(r.str, values[i]) << "key" << i << " (" << values[i].size() << " bytes)";
    }
  }
}

// Restarts serve on `data`: every "key<i>" holds values[i]; then a clean stop.
void ExpectEveryValueAfterARestart(const std::string& data,
                                   const std::vector<std::string>& values) {
  ServeProcess serve(data);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart";
  RespClient c(serve.port());
  ExpectValues(c, values, /*deleted=*/values.size());
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

// A file holding the admin password "adm" (PKV.AUDIT is an admin command).
std::string AdminPassFile(const testing::TempDir& dir) {
  const std::string path = dir.str() + "/admin-pass";
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("adm\n", f);
  std::fclose(f);
  return path;
}

void ExpectCleanAudit(RespClient& c) {
  ASSERT_EQ(c.Call({"AUTH", "admin", "adm"}).str, "OK");
  testing::Reply audit = c.Call({"PKV.AUDIT"});
  EXPECT_EQ(audit.type, '*') << audit.str;
  EXPECT_TRUE(audit.elems.empty());
}

TEST(ServerRestart, ReturnsEveryAcknowledgedValueAfterSigterm) {
  std::mt19937_64 rng(testing::TestSeed("ServerRestart"));
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  const std::vector<std::string> flags = {"--hot-capacity-bytes", "256K",
                                          "--admin-pass-file", AdminPassFile(dir)};
  std::vector<std::string> values = RandomValues(rng, 120);
  const NamespaceSpec spec = testing::HybridSpec();
  const std::vector<int32_t> tokens = testing::Tokens(2);
  const std::vector<std::string> chain = testing::EncodedStore(spec, tokens);
  std::string root;
  {
    ServeProcess serve(data, flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(c.Call({"SET", "key" + std::to_string(i), values[i]}).str, "OK");
    }
    ASSERT_EQ(c.Call({"SET", "key0", "overwritten"}).str, "OK");
    values[0] = "overwritten";
    ASSERT_EQ(c.Call({"DEL", "key1"}).integer, 1);
    root = c.Call(testing::RegisterArgs(spec)).str;
    ASSERT_EQ(c.Call(testing::PutArgs(chain)).type, '*');
    EXPECT_EQ(serve.StopWith(SIGTERM), 0);
  }
  ServeProcess serve(data, flags);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart";
  RespClient c(serve.port());
  ExpectValues(c, values, /*deleted=*/1);
  // Registrations last as long as the server: a client registers again (the
  // same root) and finds its blocks on SSD.
  testing::Reply match = c.Call({"PKV.MATCH", root, "4", testing::TokenBlob(tokens)});
  EXPECT_EQ(match.str, "ERR unknown namespace " + root + ": PKV.REGISTER it first");
  ASSERT_EQ(c.Call(testing::RegisterArgs(spec)).str, root);
  match = c.Call({"PKV.MATCH", root, "4", testing::TokenBlob(tokens)});
  ASSERT_EQ(match.elems.size(), 2u) << match.str;
  EXPECT_EQ(match.elems[0].integer, 2);
  EXPECT_EQ(
      c.Call({"PKV.GET", root, PeekBlockIdentity(chain[1]).value().key.ToHex()}).str,
      chain[1]);
  ExpectCleanAudit(c);
  EXPECT_EQ(serve.StopWith(SIGINT), 0);
}

// `prefixkv serve 2>&1 | tee serve.log`, and Ctrl-C ends tee as well: the
// server's log now goes to a pipe nobody reads. Its shutdown line ("SIGINT,
// shutting down") came before the write-back and died of SIGPIPE, so every
// value still only in RAM was lost. The log's reader is a FIFO the test opens
// before the server and closes once it listens.
TEST(ServerRestart, AShutdownWhoseLogReaderIsGoneStillWritesEveryValueBack) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  const std::string log = dir.str() + "/log";
  ASSERT_EQ(mkfifo(log.c_str(), 0600), 0);
  const int log_reader = open(log.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(log_reader, 0);
  std::vector<std::string> values;
  for (int i = 0; i < 20; ++i) values.push_back("value" + std::to_string(i));
  {
    ServeProcess serve(data, {}, log);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    close(log_reader);
    RespClient c(serve.port());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(c.Call({"SET", "key" + std::to_string(i), values[i]}).str, "OK");
    }
    EXPECT_EQ(serve.StopWith(SIGINT), 0) << "the shutdown did not end cleanly";
  }
  ExpectEveryValueAfterARestart(data, values);
}

// `--data-dir "$DIR"` with DIR unset: serve ran with no SSD tier at all (an
// engine without a data_dir is RAM only), acknowledged every SET and, at
// SIGTERM, "stopped cleanly" with every value lost. It is a usage error now.
// Serve with `data_dir` is refused as a usage error (exit 2) naming `named`.
void ExpectServeRefusesItsDataDir(const std::string& data_dir, const std::string& named) {
  testing::TempDir dir;
  const std::string log = dir.str() + "/log";
  ServeProcess serve(data_dir, {}, log);
  EXPECT_EQ(serve.port(), 0) << "serve listened without a directory to keep values in";
  EXPECT_EQ(serve.StopWith(SIGKILL), 2) << data_dir;
  std::stringstream said;
  said << std::ifstream(log).rdbuf();
  EXPECT_NE(said.str().find(named), std::string::npos) << said.str();
}

TEST(ServerRestart, AnEmptyDataDirIsRefusedNotServedFromRamAlone) {
  ExpectServeRefusesItsDataDir("", "--data-dir");
}

// A regular file as --data-dir (or a path through one) failed the engine's
// open as an I/O error, exit 1, where audit, repair and inspect refuse the same
// path as a usage error, exit 2.
TEST(ServerRestart, ADataDirThatIsAFileIsAUsageErrorAsInAudit) {
  testing::TempDir dir;
  const std::string file = dir.str() + "/a-file";
  std::ofstream(file) << "not a directory";
  ExpectServeRefusesItsDataDir(file, "--data-dir " + file + " is not a directory");
  ExpectServeRefusesItsDataDir(file + "/data", "--data-dir " + file + "/data: a part");
}

// A closed terminal or ssh session sends SIGHUP: its default action killed
// the server with no shutdown, and every value still only in RAM was lost.
// As Redis does, serve ignores it and goes on until SIGTERM.
TEST(ServerRestart, AHangupNeitherEndsTheServerNorLosesAValue) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  const std::vector<std::string> values = {"before the hangup", "after it"};
  {
    ServeProcess serve(data);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    ASSERT_EQ(c.Call({"SET", "key0", values[0]}).str, "OK");
    ASSERT_EQ(kill(serve.pid(), SIGHUP), 0);
    ASSERT_EQ(c.Call({"SET", "key1", values[1]}).str, "OK") << "SIGHUP ended the server";
    EXPECT_EQ(serve.StopWith(SIGTERM), 0);
  }
  ExpectEveryValueAfterARestart(data, values);
}

TEST(ServerRestart, WriteThroughKeepsEveryAcknowledgedValueAcrossKillNine) {
  std::mt19937_64 rng(testing::TestSeed("ServerRestartKill"));
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  // Without --write-through the values still only in RAM are lost (checked:
  // this test then fails).
  const std::vector<std::string> flags = {"--hot-capacity-bytes", "256K",
                                          "--write-through", "--admin-pass-file",
                                          AdminPassFile(dir)};
  std::vector<std::string> values = RandomValues(rng, 60);
  {
    ServeProcess serve(data, flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(c.Call({"SET", "key" + std::to_string(i), values[i]}).str, "OK");
    }
    ASSERT_EQ(c.Call({"DEL", "key1"}).integer, 1);
    EXPECT_NE(serve.StopWith(SIGKILL), 0);  // no shutdown path runs
  }
  ServeProcess serve(data, flags);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart";
  RespClient c(serve.port());
  ExpectValues(c, values, /*deleted=*/1);
  ExpectCleanAudit(c);
  EXPECT_EQ(serve.StopWith(SIGINT), 0);
}

}  // namespace
}  // namespace prefixkv
