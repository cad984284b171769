// SsdTier under concurrent Put, Get, Remove, write-back, eviction and segment
// reclamation (also run under ThreadSanitizer): no wrong payload is ever served and the
// counters equal the recomputed sums afterwards.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "prefixkv/advanced/ssd_tier.h"
#include "tests/storage/ssd/ssd_test_util.h"
#include "tests/support/rocksdb_tsan_suppressions.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

SharedBytes PayloadOf(const BlockKey& k) {
  return testing::ConformancePayload(k, 0, 200 + (k.lo * 131) % 3000);
}

TEST(SsdTierConcurrency, MixedOperationsNeverServeAWrongPayloadAndKeepCountersExact) {
  testing::TempDir dir;
  SsdTierOptions o = testing::TestSsdOptions((dir.path() / "ssd").string());
  o.capacity_bytes = 64 << 10;  // constant eviction pressure
  o.queue_depth = 4;            // frequent backpressure
  o.segment_bytes = 16 << 10;   // a few blocks per segment: constant reclamation
  auto tier = testing::OpenSsd(o);
  const uint64_t ops = testing::Iterations(600, 20000);
  const uint64_t seed = testing::TestSeed("SsdTierConcurrency.MixedOperations");
  std::atomic<uint64_t> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      for (uint64_t i = 0; i < ops; ++i) {
        const BlockMeta m = testing::ChainBlock(rng() % 8, rng() % 6, 1, t % 2);
        if (rng() % 64 == 0) {
          (void)tier->Compact();  // a reclaim pass racing the background one
          continue;
        }
        switch (rng() % 4) {
          case 0:
            (void)tier->Put(m, PayloadOf(m.key), rng() % 2 == 0);
            break;
          case 1:
            tier->OnEvict(m, PayloadOf(m.key), true);
            break;
          case 2:
            (void)tier->Remove(m.key);
            break;
          default: {
            StatusOr<SharedBytes> got = tier->Get(m.key);
            if (got.ok()) {
              ++hits;
              if (got->view() != PayloadOf(m.key).view()) ++wrong;
            }
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_OK(tier->Flush());
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_LE(tier->Totals().bytes, o.capacity_bytes);
  const SsdSpaceUsage space = tier->SpaceUsage();
  EXPECT_LE(space.live_bytes, space.file_bytes);
  testing::ExpectCountersMatchContents(*tier, {0, 1});
}

}  // namespace
}  // namespace prefixkv
