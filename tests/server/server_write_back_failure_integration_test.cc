// `prefixkv serve` in the default write-back mode whose segments/ directory
// (a small tmpfs the test mounts over it) stops taking writes: a filler file
// fills it. Once writing blocks back fails, SETs answer an error instead of
// OK, INFO counts the failures, and when the filler is gone the queued blocks
// land, SETs are accepted again, and every value acknowledged with OK
// survives a restart. (Before: every SET answered OK, and the blocks the tier
// could not write were lost at shutdown. A read-only segments/ behaves the
// same way, but a root test cannot make one under a running server: the
// remount is refused while the server holds files there open for writing.)
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/server/tmpfs_mount.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::Reply;
using testing::RespClient;
using testing::ServeProcess;

std::string Key(int i) { return "key" + std::to_string(i); }
std::string Value(int i) {
  std::string v(8000, '\0');
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>('A' + (i * 11 + j) % 26);
  return v;
}

uint64_t InfoField(RespClient& c, const std::string& field) {
  const std::string info = c.Call({"INFO"}).str;
  const size_t at = info.find(field + ":");
  if (at == std::string::npos) return 0;
  return std::strtoull(info.c_str() + at + field.size() + 1, nullptr, 10);
}

TEST(ServerWriteBackFailure, SetsAnswerAnErrorOnceWriteBackFailsAndNothingAckedIsLost) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  testing::TmpfsMount segments(data + "/segments", "16M");
  if (!segments.mounted()) GTEST_SKIP() << segments.why_not();
  const std::string filler = data + "/segments/filler";
  const std::vector<std::string> flags = {"--hot-capacity-bytes", "256K"};
  std::vector<int> acked;
  {
    ServeProcess serve(data, flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    {
      // Fill segments/ (what a read-only directory does to writes, too).
      std::FILE* f = std::fopen(filler.c_str(), "w");
      ASSERT_NE(f, nullptr);
      const std::string chunk(1 << 16, 'f');
      while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size()) {
      }
      std::fclose(f);
    }
    // 256 KiB of RAM holds ~30 values: write-back starts (and fails) soon.
    int i = 0;
    Reply r;
    for (; i < 2000; ++i) {
      r = c.Call({"SET", Key(i), Value(i)});
      if (r.type != '+') break;
      acked.push_back(i);
      if (i % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(r.type, '-') << "2000 SETs answered OK with no writable segments/";
    std::printf("first refused SET after %zu acknowledged: %s\n", acked.size(),
                r.str.c_str());
    // While write-back keeps failing, no SET is acknowledged.
    for (int j = 1; j <= 20; ++j) {
      r = c.Call({"SET", Key(i + j), Value(i + j)});
      EXPECT_EQ(r.type, '-') << "SET acknowledged while write-back is failing";
    }
    EXPECT_GT(InfoField(c, "ssd_io_errors"), 0u);
    // Room again: the queued blocks are retried (every second) and land;
    // then SETs are accepted again.
    ASSERT_EQ(std::remove(filler.c_str()), 0);
    bool accepted = false;
    const int next = i + 100;
    for (int t = 0; t < 100 && !accepted; ++t) {
      r = c.Call({"SET", Key(next), Value(next)});
      accepted = r.type == '+';
      if (!accepted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(accepted) << "SETs still refused after segments/ became writable: "
                          << r.str;
    acked.push_back(next);
    EXPECT_EQ(serve.StopWith(SIGTERM), 0);
  }
  ServeProcess again(data, flags);
  ASSERT_NE(again.port(), 0);
  RespClient c(again.port());
  int lost = 0;
  for (int k : acked) {
    Reply r = c.Call({"GET", Key(k)});
    if (r.type != '$' || r.null || r.str != Value(k)) ++lost;
  }
  EXPECT_EQ(lost, 0) << "of " << acked.size() << " acknowledged values";
}

}  // namespace
}  // namespace prefixkv
