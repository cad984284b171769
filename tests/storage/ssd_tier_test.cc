// SsdTier behaviour beyond the BlockTier contract: restart recovery, leaf-first
// LRU eviction, write-back queue, checksum verification, purge, I/O errors.
#include "prefixkv/ssd_tier.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <condition_variable>
#include <thread>

#include "storage/ssd_layout.h"
#include "tests/storage/ssd_test_util.h"

namespace prefixkv {
namespace testing {
// The shared helpers come with the typed suite; ssd_tier_conformance_test runs it.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TierConformance);
}  // namespace testing
namespace {

using testing::ChainBlock;
using testing::ConformancePayload;
using testing::OpenSsd;
using testing::TempDir;
using testing::TestSsdOptions;

SharedBytes PayloadOf(const BlockMeta& m, size_t size = 2000) {
  return ConformancePayload(m.key, 0, size);
}

class SsdTierTest : public ::testing::Test {
 protected:
  SsdTierOptions Options() { return TestSsdOptions((dir_.path() / "ssd").string()); }
  TempDir dir_;
};

TEST_F(SsdTierTest, BlocksAndCountersSurviveCloseAndReopen) {
  const uint64_t n = testing::Iterations(40, 2000);
  {
    auto tier = OpenSsd(Options());
    for (uint64_t i = 0; i < n; ++i) {
      const BlockMeta m = ChainBlock(0, i, 1, static_cast<OwnerId>(i % 3));
      ASSERT_TRUE(tier->Put(m, PayloadOf(m, 100 + i * 7), true).ok());
    }
    ASSERT_TRUE(tier->Get(ChainBlock(0, 0).key).ok());
    ASSERT_TRUE(tier->Close().ok());
  }
  auto tier = OpenSsd(Options());
  EXPECT_TRUE(tier->open_report().previous_shutdown_clean);
  EXPECT_EQ(tier->open_report().blocks, n);
  EXPECT_TRUE(tier->open_report().counter_repairs.empty());
  EXPECT_EQ(tier->Totals().inserts, n);
  EXPECT_EQ(tier->Totals().hits, 1u);
  for (uint64_t i = 0; i < n; ++i) {
    const BlockMeta m = ChainBlock(0, i, 1, static_cast<OwnerId>(i % 3));
    StatusOr<SharedBytes> got = tier->Get(m.key);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_EQ(got->view(), PayloadOf(m, 100 + i * 7).view());
    EXPECT_EQ(tier->Peek(m.key)->owner, m.owner);
  }
  testing::ExpectCountersMatchContents(*tier, {0, 1, 2});
}

TEST_F(SsdTierTest, PersistedCountersThatDisagreeWithContentsAreReportedAndRepaired) {
  {
    auto tier = OpenSsd(Options());
    for (uint64_t i = 0; i < 5; ++i) {
      ASSERT_TRUE(tier->Put(ChainBlock(0, i), PayloadOf(ChainBlock(0, i)), true).ok());
    }
  }
  {  // Overwrite owner 0's counter record behind the tier's back.
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Options().path, &raw).ok());
    TierCounters wrong;
    wrong.entries = 99;
    wrong.bytes = 7;
    ASSERT_TRUE(raw->Put({}, ssd::CounterKey(0), ssd::EncodeCounters(wrong)).ok());
    delete raw;
  }
  auto tier = OpenSsd(Options());
  EXPECT_EQ(tier->open_report().counter_repairs.size(), 2u);  // entries and bytes
  EXPECT_EQ(tier->Totals().entries, 5u);
  EXPECT_EQ(tier->Totals().bytes, 5u * 2000);
  testing::ExpectCountersMatchContents(*tier, {0});
}

TEST_F(SsdTierTest, EvictsLeastRecentlyUsedLeavesBeforeTheirAncestors) {
  SsdTierOptions o = Options();
  o.capacity_bytes = 5 * 1000;
  auto tier = OpenSsd(o);
  testing::RecordingListener evicted;
  tier->SetEvictionListener(&evicted);
  // Chain A: a0 <- a1 <- a2 (a0 oldest); chain B: b0 <- b1.
  for (uint64_t i = 0; i < 3; ++i)
    ASSERT_TRUE(
        tier->Put(ChainBlock(0, i), PayloadOf(ChainBlock(0, i), 1000), false).ok());
  for (uint64_t i = 0; i < 2; ++i)
    ASSERT_TRUE(
        tier->Put(ChainBlock(1, i), PayloadOf(ChainBlock(1, i), 1000), true).ok());
  ASSERT_TRUE(tier->Get(ChainBlock(0, 2).key).ok());  // a2 is now the newest
  // Leaves are a2 (newest) and b1: b1 goes first, then b0 (a leaf now), then
  // a2, never a0 or a1 while a descendant is stored.
  for (uint64_t i = 0; i < 3; ++i)
    ASSERT_TRUE(
        tier->Put(ChainBlock(2, i), PayloadOf(ChainBlock(2, i), 1000), false).ok());
  const auto calls = evicted.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].meta.key, ChainBlock(1, 1).key);
  EXPECT_TRUE(calls[0].dirty);
  EXPECT_EQ(calls[1].meta.key, ChainBlock(1, 0).key);
  EXPECT_EQ(calls[2].meta.key, ChainBlock(0, 2).key);
  EXPECT_FALSE(calls[2].dirty);
  EXPECT_EQ(calls[2].payload, std::string(PayloadOf(ChainBlock(0, 2), 1000).view()));
  EXPECT_TRUE(tier->FindOrphans().empty());
  EXPECT_EQ(tier->Totals().evictions, 3u);
  EXPECT_EQ(tier->Totals().spills, 2u);  // only the dirty ones
  testing::ExpectCountersMatchContents(*tier, {0});
}

TEST_F(SsdTierTest, AccessOrderIsPersistedAcrossRestarts) {
  SsdTierOptions o = Options();
  o.capacity_bytes = 3 * 1000;
  {
    auto tier = OpenSsd(o);
    for (uint64_t c = 0; c < 3; ++c)
      ASSERT_TRUE(
          tier->Put(ChainBlock(c, 0), PayloadOf(ChainBlock(c, 0), 1000), false).ok());
    ASSERT_TRUE(tier->Get(ChainBlock(0, 0).key).ok());  // chain 1 is now the oldest
  }
  auto tier = OpenSsd(o);
  ASSERT_TRUE(tier->Put(ChainBlock(3, 0), PayloadOf(ChainBlock(3, 0), 1000), false).ok());
  EXPECT_FALSE(tier->Contains(ChainBlock(1, 0).key));
  EXPECT_TRUE(tier->Contains(ChainBlock(0, 0).key));
  EXPECT_TRUE(tier->Contains(ChainBlock(2, 0).key));
}

TEST_F(SsdTierTest, APayloadLargerThanTheCapacityIsRejectedWithNoSpace) {
  SsdTierOptions o = Options();
  o.capacity_bytes = 1000;
  auto tier = OpenSsd(o);
  EXPECT_TRUE(
      tier->Put(ChainBlock(0, 0), PayloadOf(ChainBlock(0, 0), 1001), true).IsNoSpace());
  EXPECT_EQ(tier->Totals().entries, 0u);
}

// Holds writer threads (every thread but the test's) inside the write hook.
class WriterGate {
 public:
  std::function<Status()> Hook() {
    return [this]() {
      if (std::this_thread::get_id() == test_thread_) return Status::OK();
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      return Status::OK();
    };
  }
  void WaitForWaiters(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::thread::id test_thread_ = std::this_thread::get_id();
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST_F(SsdTierTest, FullWriteBackQueueMakesTheEvictingCallerWriteInline) {
  WriterGate gate;
  SsdTierOptions o = Options();
  o.writer_threads = 1;
  o.queue_depth = 2;
  o.inject_write_error = gate.Hook();
  auto tier = OpenSsd(o);
  tier->OnEvict(ChainBlock(0, 0), PayloadOf(ChainBlock(0, 0)), true);
  gate.WaitForWaiters(1);  // the writer holds block 0
  tier->OnEvict(ChainBlock(1, 0), PayloadOf(ChainBlock(1, 0)), true);
  tier->OnEvict(ChainBlock(2, 0), PayloadOf(ChainBlock(2, 0)), true);
  EXPECT_EQ(tier->Totals().inserts, 0u);  // queued: nothing stored yet...
  for (uint64_t c = 0; c < 3; ++c) {      // ...but every queued block is served
    StatusOr<SharedBytes> got = tier->Get(ChainBlock(c, 0).key);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->view(), PayloadOf(ChainBlock(c, 0)).view());
  }
  tier->OnEvict(ChainBlock(3, 0), PayloadOf(ChainBlock(3, 0)), true);  // full: inline
  EXPECT_EQ(tier->Totals().inserts, 1u);
  EXPECT_EQ(tier->queued_blocks(), 3u);
  gate.Open();
  ASSERT_TRUE(tier->Close().ok());
  auto reopened = OpenSsd(Options());
  for (uint64_t c = 0; c < 4; ++c)
    EXPECT_TRUE(reopened->Get(ChainBlock(c, 0).key).ok()) << c;
}

TEST_F(SsdTierTest, CloseStoresEveryQueuedBlock) {
  const uint64_t n = testing::Iterations(200, 5000);
  {
    SsdTierOptions o = Options();
    o.queue_depth = 16;
    auto tier = OpenSsd(o);
    for (uint64_t i = 0; i < n; ++i)
      tier->OnEvict(ChainBlock(0, i), PayloadOf(ChainBlock(0, i)), true);
    ASSERT_TRUE(tier->Close().ok());
  }
  auto tier = OpenSsd(Options());
  EXPECT_EQ(tier->Totals().entries, n);
  EXPECT_TRUE(tier->FindOrphans().empty());
}

TEST_F(SsdTierTest, AFailedWriteBackKeepsTheBlockQueuedAndServedUntilItSucceeds) {
  std::atomic<bool> fail{true};
  testing::LogLines log;
  SsdTierOptions o = Options();
  o.log = log.Sink();
  o.inject_write_error = [&]() {
    return fail ? Status::IOError("injected EIO") : Status::OK();
  };
  auto tier = OpenSsd(o);
  tier->OnEvict(ChainBlock(0, 0), PayloadOf(ChainBlock(0, 0)), true);
  EXPECT_TRUE(tier->Flush().IsIOError());
  EXPECT_TRUE(tier->Get(ChainBlock(0, 0).key).ok());
  EXPECT_TRUE(tier->Flush().IsIOError());  // retried, failed again
  EXPECT_GE(tier->Totals().io_errors, 2u);
  EXPECT_EQ(log.Count("I/O error"), 1);  // logged once
  fail = false;
  ASSERT_TRUE(tier->Flush().ok());
  EXPECT_EQ(tier->Totals().entries, 1u);
  EXPECT_EQ(log.Count("succeeds again"), 1);
  testing::ExpectCountersMatchContents(*tier, {0});
}

TEST_F(SsdTierTest, NoSpaceFromTheMediumIsReturnedCountedAndChangesNothing) {
  std::atomic<bool> full{false};
  SsdTierOptions o = Options();
  o.inject_write_error = [&]() {
    return full ? Status::NoSpace("injected ENOSPC") : Status::OK();
  };
  auto tier = OpenSsd(o);
  ASSERT_TRUE(tier->Put(ChainBlock(0, 0), PayloadOf(ChainBlock(0, 0)), true).ok());
  full = true;
  EXPECT_TRUE(tier->Put(ChainBlock(0, 1), PayloadOf(ChainBlock(0, 1)), true).IsNoSpace());
  EXPECT_TRUE(tier->Remove(ChainBlock(0, 0).key).IsNoSpace());
  EXPECT_EQ(tier->Totals().io_errors, 2u);
  EXPECT_EQ(tier->Totals().entries, 1u);
  EXPECT_FALSE(tier->Contains(ChainBlock(0, 1).key));
  full = false;
  testing::ExpectCountersMatchContents(*tier, {0});
  ASSERT_TRUE(tier->Close().ok());
  auto reopened = OpenSsd(Options());
  EXPECT_EQ(reopened->Totals().io_errors, 2u);  // persisted with the next write
}

TEST_F(SsdTierTest, APayloadThatFailsItsChecksumIsAMissCountedAndRemoved) {
  const BlockMeta m = ChainBlock(0, 0);
  {
    auto tier = OpenSsd(Options());
    ASSERT_TRUE(tier->Put(m, PayloadOf(m), true).ok());
  }
  {  // Same length, different bytes: only the tier's own XXH3 can tell.
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Options().path, &raw).ok());
    std::string other(PayloadOf(m).view());
    other[1000] ^= 0x40;
    ASSERT_TRUE(
        raw->Put({}, ssd::BlockRecordKey(ssd::kPayloadTag, m.namespace_id, m.key), other)
            .ok());
    delete raw;
  }
  auto tier = OpenSsd(Options());
  StatusOr<SharedBytes> got = tier->Get(m.key);
  ASSERT_TRUE(got.status().IsNotFound());
  EXPECT_NE(got.status().message().find("corrupt"), std::string::npos);
  EXPECT_EQ(tier->Totals().corruptions, 1u);
  EXPECT_EQ(tier->Totals().misses, 1u);
  EXPECT_FALSE(tier->Contains(m.key));
  testing::ExpectCountersMatchContents(*tier, {0});
}

TEST_F(SsdTierTest, PurgeNamespaceRemovesOnlyThatNamespaceForGood) {
  {
    auto tier = OpenSsd(Options());
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(
          tier->Put(ChainBlock(0, i, 1), PayloadOf(ChainBlock(0, i, 1)), true).ok());
      ASSERT_TRUE(
          tier->Put(ChainBlock(0, i, 2), PayloadOf(ChainBlock(0, i, 2)), true).ok());
    }
    ASSERT_EQ(tier->Namespaces().size(), 2u);
    StatusOr<uint64_t> purged = tier->PurgeNamespace(BlockKey{1, 0});
    ASSERT_TRUE(purged.ok());
    EXPECT_EQ(*purged, 4u);
  }
  auto tier = OpenSsd(Options());
  ASSERT_EQ(tier->Namespaces().size(), 1u);
  EXPECT_EQ(tier->Namespaces()[0].namespace_id, (BlockKey{2, 0}));
  EXPECT_EQ(tier->Namespaces()[0].blocks, 4u);
  EXPECT_FALSE(tier->Contains(ChainBlock(0, 0, 1).key));
  testing::ExpectCountersMatchContents(*tier, {0});
}

}  // namespace
}  // namespace prefixkv

namespace prefixkv {
namespace {

uint64_t BlobFileBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".blob") total += std::filesystem::file_size(e.path());
  }
  return total;
}

TEST(SsdTierSpace, EvictedPayloadsAreReclaimedFromBlobFiles) {
  TempDir dir;
  SsdTierOptions o = TestSsdOptions((dir.path() / "ssd").string());
  o.capacity_bytes = 2 << 20;
  o.write_buffer_bytes = 1 << 20;
  o.durability = SsdDurability::kFlush;
  auto tier = OpenSsd(o);
  const uint64_t blocks = testing::Iterations(1000, 10000);
  for (uint64_t i = 0; i < blocks; ++i) {
    ASSERT_TRUE(
        tier->Put(ChainBlock(i, 0), PayloadOf(ChainBlock(i, 0), 32 << 10), true).ok());
  }
  ASSERT_TRUE(
      tier->Compact().ok());  // background compactions may lag: no timing in the test
  ASSERT_TRUE(tier->Close().ok());
  const uint64_t written = blocks * (32 << 10);
  std::printf("[space] written=%llu capacity=%llu blob_file_bytes=%llu\n",
              static_cast<unsigned long long>(written),
              static_cast<unsigned long long>(o.capacity_bytes),
              static_cast<unsigned long long>(BlobFileBytes(o.path)));
  // Without blob garbage collection every byte ever written would remain.
  EXPECT_LT(BlobFileBytes(o.path), 2 * o.capacity_bytes) << "garbage must be collected";
}

}  // namespace
}  // namespace prefixkv
