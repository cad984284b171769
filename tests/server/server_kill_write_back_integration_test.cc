// Issue 14, point 3: in the default write-back mode a kill -9 may lose values
// that were only in RAM, but it must never bring back a value the client
// overwrote. The exact sequence of the report: 2,000 keys, SIGTERM (all on
// SSD), restart, overwrite them all, kill -9, restart: every key reads as the
// new value or as absent, never the old one. Before the fix: 2,000/2,000 old
// values with the default hot tier, 255/2,000 with an 8 MiB one.
#include <gtest/gtest.h>

#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::RespClient;
using testing::ServeProcess;

std::string Value(int generation, int i, size_t size) {
  std::string v = "gen" + std::to_string(generation) + "-key" + std::to_string(i) + "-";
  v.resize(size, static_cast<char>('a' + generation));
  return v;
}

void OverwriteThenKill(const std::vector<std::string>& flags, size_t value_bytes) {
  constexpr int kKeys = 2000;
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  {
    ServeProcess serve(data, flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_EQ(c.Call({"SET", "k" + std::to_string(i), Value(1, i, value_bytes)}).str,
                "OK");
    }
    ASSERT_EQ(serve.StopWith(SIGTERM), 0);
  }
  {
    ServeProcess serve(data, flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart";
    RespClient c(serve.port());
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_EQ(c.Call({"SET", "k" + std::to_string(i), Value(2, i, value_bytes)}).str,
                "OK");
    }
    EXPECT_NE(serve.StopWith(SIGKILL), 0);  // no shutdown path runs
  }
  ServeProcess serve(data, flags);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart after kill -9";
  RespClient c(serve.port());
  int stale = 0, fresh = 0, absent = 0, wrong = 0;
  for (int i = 0; i < kKeys; ++i) {
    testing::Reply r = c.Call({"GET", "k" + std::to_string(i)});
    if (r.null) {
      ++absent;
    } else if (r.str == Value(2, i, value_bytes)) {
      ++fresh;
    } else if (r.str == Value(1, i, value_bytes)) {
      ++stale;
    } else {
      ++wrong;
    }
  }
  std::printf("after kill -9: %d new, %d absent, %d old (stale), %d wrong\n", fresh,
              absent, stale, wrong);
  EXPECT_EQ(stale, 0) << "overwritten values came back after kill -9";
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(serve.StopWith(SIGINT), 0);
}

TEST(ServerKillWriteBack, AnOverwrittenValueNeverComesBackAfterKillNine) {
  OverwriteThenKill({}, 100);
}

TEST(ServerKillWriteBack, AnOverwrittenValueNeverComesBackWithASmallHotTier) {
  // 2,000 x 8 KiB over an 8 MiB hot tier: part of the new values is written
  // back (and must be served), the rest was only in RAM (and may be absent).
  OverwriteThenKill({"--hot-capacity-bytes", "8M"}, 8 << 10);
}

}  // namespace
}  // namespace prefixkv
