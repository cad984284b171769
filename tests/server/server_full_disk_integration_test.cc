// A full disk under `prefixkv serve --write-through` (docs/ssd.md "Full
// disk"): on a 24 MiB tmpfs the test mounts itself, SETs run until the disk
// is full. Every write then answers a NoSpace error, the process stays up,
// DELs work, reads return every acknowledged value, failed writes leave no
// files or descriptors behind, writes resume once removals freed more than
// the space reserve, the server restarts on the still-full disk, and nothing
// acknowledged is lost. (Before: DEL of 300 keys aborted the
// process in RocksDB, `sync_without_flush_called_`, and so did the restart.)
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
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
  std::string v(4000, '\0');
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>('a' + (i * 7 + j) % 26);
  return v;
}

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Every key in [from, to) holds its value.
int CountIntact(RespClient& c, int from, int to) {
  int intact = 0;
  for (int i = from; i < to; ++i) {
    Reply r = c.Call({"GET", Key(i)});
    if (r.type == '$' && !r.null && r.str == Value(i)) ++intact;
  }
  return intact;
}

TEST(ServerFullDisk, WritesAnswerNoSpaceTheServerStaysUpAndRestartsLosingNothing) {
  testing::TempDir dir;
  const std::string mnt = dir.str() + "/small";
  testing::TmpfsMount disk(mnt, "24M");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const std::string data = mnt + "/data";
  // 20M: segments of 1.25M (capacity / 16), so removals empty whole ones.
  const std::vector<std::string> flags = {"--write-through", "--ssd-capacity-bytes",
                                          "20M"};
  int acked = 0;
  {
    ServeProcess serve(data, flags);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    RespClient c(serve.port());
    Reply r;
    for (; acked < 20000; ++acked) {
      r = c.Call({"SET", Key(acked), Value(acked)});
      if (r.type != '+') break;
    }
    ASSERT_EQ(r.type, '-') << "the disk never filled";
    EXPECT_NE(r.str.find("NoSpace"), std::string::npos) << r.str;
    ASSERT_GT(acked, 1000);  // 24 MiB less the 8 MiB reserve and its margin
    std::printf("full after %d values of 4000 bytes\n", acked);
    // Further writes: a clear error each, no I/O left behind.
    for (int i = 0; i < 200; ++i) {
      r = c.Call({"SET", Key(acked + 1 + i), Value(acked + 1 + i)});
      ASSERT_EQ(r.type, '-') << "SET " << i << " after the disk filled";
      EXPECT_NE(r.str.find("NoSpace"), std::string::npos) << r.str;
    }
    // Removals work on the full disk (the space reserve).
    for (int i = 0; i < 300; ++i) {
      r = c.Call({"DEL", Key(i)});
      ASSERT_EQ(r.type, ':') << "DEL " << i << ": " << r.str;
      EXPECT_EQ(r.integer, 1) << "DEL " << i;
    }
    ASSERT_TRUE(Alive(serve.pid()));
    EXPECT_EQ(CountIntact(c, 300, acked), acked - 300) << "reads on the full disk";
    // Failed writes leave neither files nor descriptors (before: one empty
    // segment file and one fd per failure).
    const int fds = testing::CountEntries("/proc/" + std::to_string(serve.pid()) + "/fd");
    const int segments = testing::CountEntries(data + "/segments");
    std::printf("open fds %d, segment files %d\n", fds, segments);
    EXPECT_LT(fds, 64);
    EXPECT_LT(segments, 16);
    // Removals of half the values free whole segments: once the reserve can
    // be written back with room to spare (tried every second), writes resume.
    const int freed_to = acked / 2;
    ASSERT_GT(freed_to, 300);
    for (int i = 300; i < freed_to; ++i) {
      r = c.Call({"DEL", Key(i)});
      ASSERT_EQ(r.type, ':') << "DEL " << i << ": " << r.str;
    }
    bool resumed = false;
    for (int i = 0; i < 300 && !resumed; ++i) {  // up to 30 s, as testing::WaitUntil
      r = c.Call({"SET", Key(0), Value(0)});
      resumed = r.type == '+';
      if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(resumed) << "writes never resumed after DELs freed space: " << r.str;
    // Fill the disk again, then stop: the restart below opens a full disk.
    int more = 0;
    for (; more < 20000; ++more) {
      r = c.Call({"SET", Key(acked + 1000 + more), Value(acked + 1000 + more)});
      if (r.type != '+') break;
    }
    ASSERT_EQ(r.type, '-');
    const int extra = more;
    EXPECT_EQ(serve.StopWith(SIGTERM), 0) << "the server did not exit cleanly";
    // Restart on the still-full disk: it opens, and serves every value it
    // acknowledged.
    ServeProcess again(data, flags);
    ASSERT_NE(again.port(), 0) << "prefixkv serve did not restart on the full disk";
    RespClient c2(again.port());
    EXPECT_EQ(CountIntact(c2, freed_to, acked), acked - freed_to);
    EXPECT_EQ(CountIntact(c2, acked + 1000, acked + 1000 + extra), extra);
    EXPECT_EQ(CountIntact(c2, 0, 1), resumed ? 1 : 0);
    for (int i = 1; i < freed_to; i += 37) {
      EXPECT_TRUE(c2.Call({"GET", Key(i)}).null) << "a deleted key came back";
    }
    r = c2.Call({"SET", Key(acked + 900), Value(acked + 900)});
    EXPECT_TRUE(r.type == '+' || r.str.find("NoSpace") != std::string::npos) << r.str;
    EXPECT_TRUE(Alive(again.pid()));
    EXPECT_EQ(again.StopWith(SIGTERM), 0);
  }
}

}  // namespace
}  // namespace prefixkv

namespace prefixkv {
namespace {

// Issue 24, point 7: RocksDB reserved about 70 MB of log up front whatever the
// capacity, so on a small disk `serve` exited 1 (with 75 MB free every SET
// answered NoSpace). On a 64 MiB ext4 image (ext4 keeps a failed
// preallocation, as the disks users have do; tmpfs gives it back) the server
// now works in both modes, restarts losing nothing, and filling the disk
// gives a clear NoSpace that DELs clear again.
TEST(ServerSmallDisk, A64MiBDiskWorksInBothModesAndFillsToAClearNoSpace) {
  testing::TempDir dir;
  const std::string mnt = dir.str() + "/small";
  testing::LoopExt4Mount disk(dir.str() + "/disk.img", mnt, 64);
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  constexpr int kKeys = 1500;  // 4,000-byte values: 6 MB (12 MB of extents)
  const std::vector<std::vector<std::string>> modes = {
      {"--write-through", "--ssd-capacity-bytes", "24M"},
      {"--hot-capacity-bytes", "1M", "--ssd-capacity-bytes", "24M"}};
  for (size_t m = 0; m < modes.size(); ++m) {
    const std::string data = mnt + "/data" + std::to_string(m);
    {
      ServeProcess serve(data, modes[m]);
      ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start on a 64 MiB disk";
      RespClient c(serve.port());
      for (int i = 0; i < kKeys; ++i) {
        ASSERT_EQ(c.Call({"SET", Key(i), Value(i)}).str, "OK")
            << "mode " << m << " key " << i;
      }
      EXPECT_EQ(serve.StopWith(SIGTERM), 0);
    }
    ServeProcess serve(data, modes[m]);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not restart";
    RespClient c(serve.port());
    EXPECT_EQ(CountIntact(c, 0, kKeys), kKeys) << "mode " << m;
    EXPECT_EQ(serve.StopWith(SIGTERM), 0);
    std::filesystem::remove_all(data);  // room for the next part
  }
  // A capacity above the 51 MB the disk has free: the disk fills first.
  // (Segments of 3.5 MiB, capacity / 16, so DELs empty whole ones.)
  const std::string data = mnt + "/full";
  ServeProcess serve(data, {"--write-through", "--ssd-capacity-bytes", "56M"});
  ASSERT_NE(serve.port(), 0);
  RespClient c(serve.port());
  int acked = 0;
  Reply r;
  for (; acked < 20000; ++acked) {
    r = c.Call({"SET", Key(acked), Value(acked)});
    if (r.str != "OK") break;
  }
  ASSERT_TRUE(r.IsError()) << "the disk never filled";
  EXPECT_NE(r.str.find("NoSpace"), std::string::npos) << r.str;
  std::printf("64 MiB disk full after %d values of 4,000 bytes: %s\n", acked,
              r.str.c_str());
  EXPECT_TRUE(Alive(serve.pid()));
  for (int i = 0; i < acked / 2; ++i) EXPECT_EQ(c.Call({"DEL", Key(i)}).integer, 1);
  bool resumed = false;
  for (int t = 0; t < 300 && !resumed; ++t) {  // up to 30 s, as testing::WaitUntil
    resumed = c.Call({"SET", "again", Value(0)}).str == "OK";
    if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(resumed) << "DELs freed no room for a SET";
  EXPECT_EQ(CountIntact(c, acked / 2, acked), acked - acked / 2)
      << "an acknowledged value was lost";
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

}  // namespace
}  // namespace prefixkv
