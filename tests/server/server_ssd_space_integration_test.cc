// Disk use of `prefixkv serve --ssd-capacity-bytes 4M` (docs/ssd.md "Space"):
// SETs of new keys and overwrites of old ones, values of 500 bytes to 20 KiB,
// far more than the capacity in total; the segment files, measured on disk
// after every SET, never exceed the capacity plus one segment (capacity / 16
// here). (Before: 68 MB of segment files for a 4 MB capacity: garbage stayed
// in 128 MiB segments that were never sealed.)
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <random>

#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::Reply;
using testing::RespClient;
using testing::ServeProcess;

uint64_t SegmentFileBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".seg") continue;
    const uint64_t size = std::filesystem::file_size(e.path(), ec);
    if (!ec) total += size;
  }
  return total;
}

TEST(ServerSsdSpace, SegmentFilesStayWithinCapacityPlusOneSegment) {
  const uint64_t seed = testing::TestSeed("ServerSsdSpace");
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  constexpr uint64_t kCapacity = 4 << 20;
  constexpr uint64_t kSegment = kCapacity / 16;  // docs/ssd.md: segment_bytes
  ServeProcess serve(data, {"--write-through", "--ssd-capacity-bytes", "4M",
                            "--hot-capacity-bytes", "1M"});
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  RespClient c(serve.port());
  const int sets = static_cast<int>(testing::Iterations(3000, 30000));
  uint64_t written = 0, peak = 0;
  for (int i = 0; i < sets; ++i) {
    // Two thirds new keys, one third overwrites of earlier ones.
    const int key = (i % 3 == 2) ? static_cast<int>(rng() % (i + 1)) : i;
    std::string value(500 + rng() % (20 << 10), static_cast<char>('a' + i % 26));
    written += value.size();
    Reply r = c.Call({"SET", "key" + std::to_string(key), value});
    ASSERT_EQ(r.type, '+') << "SET " << i << ": " << r.str;
    peak = std::max(peak, SegmentFileBytes(data + "/segments"));
  }
  std::printf(
      "seed %llu: %d SETs, %llu bytes written, peak segment files %llu "
      "(capacity %llu + segment %llu)\n",
      static_cast<unsigned long long>(seed), sets,
      static_cast<unsigned long long>(written), static_cast<unsigned long long>(peak),
      static_cast<unsigned long long>(kCapacity),
      static_cast<unsigned long long>(kSegment));
  ASSERT_GT(written, 6 * kCapacity);
  EXPECT_LE(peak, kCapacity + kSegment);
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

}  // namespace
}  // namespace prefixkv
