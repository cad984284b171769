// LatencyRecorder: which bucket a call lands in (bounds inclusive, to the
// nanosecond) and a sum that keeps sub-microsecond calls.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "prefixkv/tier_types.h"

namespace prefixkv {
namespace {

size_t BucketOf(uint64_t nanos) {
  LatencyRecorder r;
  r.RecordNanos(nanos);
  const LatencyHistogram h = r.Snapshot();
  for (size_t i = 0; i < h.counts.size(); ++i) {
    if (h.counts[i] == 1) return i;
  }
  return h.counts.size();
}

TEST(LatencyRecorder, ACallLandsInTheFirstBucketWhoseBoundItDoesNotExceed) {
  EXPECT_EQ(BucketOf(0), 0u);
  EXPECT_EQ(BucketOf(10'000), 0u);  // exactly 10 us: the 10 us bucket
  EXPECT_EQ(BucketOf(10'001), 1u);  // 1 ns more: the 25 us bucket
  EXPECT_EQ(BucketOf(25'000), 1u);
  EXPECT_EQ(BucketOf(999'999'999), 13u);  // under 1 s
  EXPECT_EQ(BucketOf(1'000'000'000), 13u);
  EXPECT_EQ(BucketOf(1'000'000'001), 14u);  // the last bucket: slower than 1 s
  EXPECT_EQ(BucketOf(UINT64_MAX / 2), 14u);
}

// A thousand calls of 400 ns are 400 us, not 0 (each rounded down to whole
// microseconds they would vanish: fast commands showed usec_per_call 0.00).
TEST(LatencyRecorder, SubMicrosecondCallsAddUpInTheSum) {
  LatencyRecorder r;
  for (int i = 0; i < 1000; ++i) r.RecordNanos(400);
  r.RecordNanos(1'999);  // 401,999 ns in all: 401 us, rounded down once
  const LatencyHistogram h = r.Snapshot();
  EXPECT_EQ(h.sum_micros, 401u);
  EXPECT_EQ(h.count(), 1001u);
  EXPECT_EQ(h.counts[0], 1001u);
}

TEST(LatencyRecorder, ConcurrentCallsAreAllCounted) {
  LatencyRecorder r;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&r, t] {
      for (int i = 0; i < 10'000; ++i)
        r.RecordNanos(1'000 * static_cast<uint64_t>(t + 1));
    });
  }
  for (auto& th : threads) th.join();
  const LatencyHistogram h = r.Snapshot();
  EXPECT_EQ(h.count(), 40'000u);
  EXPECT_EQ(h.sum_micros, 10'000u * (1 + 2 + 3 + 4));
}

}  // namespace
}  // namespace prefixkv
