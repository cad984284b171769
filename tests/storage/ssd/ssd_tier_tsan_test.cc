// SsdTier under concurrent Put, Get, Remove, write-back, eviction and segment
// reclamation (also run under ThreadSanitizer): no wrong payload is ever served and the
// counters equal the recomputed sums afterwards. And the write-back queue's
// two writers store a chain parents first, in whatever order it was handed over.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "prefixkv/advanced/ssd_tier.h"
#include "ssd_writer.h"
#include "tests/storage/ssd/ssd_test_util.h"
#include "tests/support/gate.h"
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
  // A Get reads under no stripe (docs/ssd.md "Reads"): one racing a
  // relocation, removal or rewrite reads again, never drops a sound block.
  EXPECT_EQ(tier->Totals().corruptions, 0u);
  EXPECT_LE(tier->Totals().bytes, o.capacity_bytes);
  const SsdSpaceUsage space = tier->SpaceUsage();
  EXPECT_LE(space.live_bytes, space.file_bytes);
  testing::ExpectCountersMatchContents(*tier, {0, 1});
}

// Read-ahead racing rewrites: readers ask for reads ahead of their Gets
// while a writer keeps storing new versions of the same blocks. A Get never
// serves a version older than the one whose Put returned before it began
// (a read made ahead of a rewrite is not served), and every served payload
// is one version's bytes exactly.
TEST(SsdTierConcurrency, AReadMadeAheadNeverServesAVersionOlderThanTheLastStore) {
  testing::TempDir dir;
  SsdTierOptions o = testing::TestSsdOptions((dir.path() / "ssd").string());
  o.segment_bytes = 64 << 10;  // reclamation moves extents meanwhile
  auto tier = testing::OpenSsd(o);
  constexpr int kKeys = 8;
  auto meta = [](int k) { return testing::ChainBlock(k, 0); };
  auto payload = [](const BlockKey& key, uint32_t v) {
    return testing::ConformancePayload(key, v, 1000 + (v % 5) * 1500);
  };
  std::array<std::atomic<uint32_t>, kKeys> latest{};
  for (int k = 0; k < kKeys; ++k)
    ASSERT_OK(tier->Put(meta(k), payload(meta(k).key, 0), false));
  const uint32_t versions = static_cast<uint32_t>(testing::Iterations(60, 1500));
  std::atomic<bool> writing{true};
  std::atomic<uint64_t> wrong{0}, gets{0};
  std::thread writer([&] {
    for (uint32_t v = 1; v <= versions; ++v) {
      for (int k = 0; k < kKeys; ++k) {
        if (tier->Put(meta(k), payload(meta(k).key, v), false).ok()) latest[k].store(v);
      }
    }
    writing.store(false);
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (writing.load()) {
        for (int k = 0; k < kKeys; ++k) (void)tier->ReadAhead(meta(k).key);
        for (int k = 0; k < kKeys; ++k) {
          const uint32_t low = latest[k].load();
          StatusOr<SharedBytes> got = tier->Get(meta(k).key);
          const uint32_t high = latest[k].load() + 1;  // a Put may be mid-way
          ++gets;
          bool matched = false;
          for (uint32_t v = low; got.ok() && v <= high && !matched; ++v)
            matched = got->view() == payload(meta(k).key, v).view();
          if (!matched) ++wrong;
        }
        for (int k = 0; k < kKeys; ++k) tier->CancelReadAhead(meta(k).key);
      }
    });
  }
  writer.join();
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0u) << "of " << gets.load() << " gets";
  // Quiet now (but for the reclaimer, which may still move an extent: then
  // the read made ahead is stale and the Get reads again): every read made
  // ahead is taken, and the Gets serve the last versions.
  const SsdReadAheadStats before = tier->ReadAheadStats();
  uint64_t bytes = 0;
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_EQ(tier->ReadAhead(meta(k).key), ReadAheadResult::kStarted);
    bytes += payload(meta(k).key, latest[k].load()).size();
  }
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return tier->ReadAheadStats().bytes_read - before.bytes_read == bytes; }));
  for (int k = 0; k < kKeys; ++k) {
    StatusOr<SharedBytes> got = tier->Get(meta(k).key);
    ASSERT_OK(got);
    EXPECT_TRUE(got->view() == payload(meta(k).key, latest[k].load()).view()) << k;
  }
  const SsdReadAheadStats after = tier->ReadAheadStats();
  EXPECT_EQ(after.served - before.served + after.stale - before.stale,
            static_cast<uint64_t>(kKeys));
  EXPECT_EQ(tier->ReadAheadStats().pending_bytes, 0u);
  testing::ExpectCountersMatchContents(*tier, {0});
}

// A write-back queue's write function that logs each batch's start and end
// on one tick counter, behind a gate that holds the writers until Open().
class BatchLog {
 public:
  struct Span {
    uint64_t start = 0, end = 0, batch = 0;
  };

  Status Write(const std::vector<ssd::WriteBackItem>& items) {
    gate_.Pass();
    const uint64_t start = ++tick_;
    // In flight a moment, so the other writer takes its next batch meanwhile.
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard<std::mutex> lock(mu_);
    const Span span{start, ++tick_, ++batches_};
    for (const ssd::WriteBackItem& item : items) written_[item.meta.key] = span;
    return Status::OK();
  }
  void WaitForWaiters(int n) { gate_.WaitForArrivals(n); }
  void Open() { gate_.Open(); }
  std::map<BlockKey, Span> written() {
    std::lock_guard<std::mutex> lock(mu_);
    return written_;
  }

 private:
  testing::Gate gate_;
  std::atomic<uint64_t> tick_{0};
  std::mutex mu_;
  uint64_t batches_ = 0;
  std::map<BlockKey, Span> written_;
};

// A chain handed to the write-back queue in random order (the hot tier may
// evict a child before its parent) is stored parents first: each block's
// parent is in the same (atomic) batch, or in a batch that ended before the
// block's began. Only the kill -9 loop noticed a child stored first before.
TEST(SsdWriteBackOrder, AChainHandedOverInRandomOrderIsStoredParentsFirst) {
  const uint64_t rounds = testing::Iterations(20, 500);
  std::mt19937_64 rng(testing::TestSeed("SsdWriteBackOrder.RandomChain"));
  for (uint64_t round = 0; round < rounds; ++round) {
    std::vector<BlockMeta> chain;
    for (uint64_t i = 0; i < 64; ++i) chain.push_back(testing::ChainBlock(0, i));
    std::vector<BlockMeta> handed = chain;
    std::shuffle(handed.begin(), handed.end(), rng);
    BatchLog log;
    {
      ssd::WriteBackQueue queue(/*depth=*/128, /*threads=*/2, /*retry_interval_ms=*/1000,
                                Clock::System(),
                                [&](const auto& b) { return log.Write(b); });
      // An unrelated block holds each writer at the gate, so the whole chain is
      // queued before either takes a block of it.
      for (int w = 1; w <= 2; ++w) {
        const BlockMeta plug = testing::ChainBlock(w, 0);
        EXPECT_TRUE(queue.Enqueue(plug, PayloadOf(plug.key)));
        log.WaitForWaiters(w);
      }
      for (const BlockMeta& m : handed) EXPECT_TRUE(queue.Enqueue(m, PayloadOf(m.key)));
      log.Open();
      EXPECT_OK(queue.Flush());
    }
    const std::map<BlockKey, BatchLog::Span> written = log.written();
    ASSERT_EQ(written.size(), chain.size() + 2);
    for (size_t i = 1; i < chain.size(); ++i) {
      const BatchLog::Span& parent = written.at(chain[i - 1].key);
      const BatchLog::Span& child = written.at(chain[i].key);
      EXPECT_TRUE(parent.batch == child.batch || parent.end < child.start)
          << "round " << round << ": block " << i << " in batch " << child.batch
          << " (ticks " << child.start << "-" << child.end << "), its parent in batch "
          << parent.batch << " (ticks " << parent.start << "-" << parent.end << ")";
    }
  }
}

}  // namespace
}  // namespace prefixkv
