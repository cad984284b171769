// The SSD tier on a FaultInjectionFileSystem: read errors, short writes,
// ENOSPC, failed fsyncs and simulated power loss never serve wrong bytes or
// lose an acknowledged block; and the write-back retry waits in clock time.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "prefixkv/advanced/ssd_tier.h"
#include "tests/storage/ssd/ssd_test_util.h"
#include "tests/support/fault_injection_file_system.h"

namespace prefixkv {
namespace {

using testing::ChainBlock;

SharedBytes PayloadOf(const BlockMeta& m) {
  return testing::ConformancePayload(m.key, 0, 1000 + m.key.lo * 37 % 9000);
}

class SsdFaultTest : public ::testing::Test {
 protected:
  SsdTierOptions Options(SsdDurability durability = SsdDurability::kWal) {
    SsdTierOptions o = testing::TestSsdOptions((dir_.path() / "ssd").string());
    o.durability = durability;
    o.file_system = &fs_;
    return o;
  }
  // The power fails under `tier`: unsynced bytes and names are dropped, the
  // tier is closed with every I/O failing, then the power comes back and
  // `tier` is the directory reopened in `durability` (null if that failed).
  PowerLossReport CutPowerAndReopen(std::unique_ptr<SsdTier>& tier,
                                    SsdDurability durability) {
    StatusOr<PowerLossReport> report = fs_.SimulatePowerLoss();
    EXPECT_OK(report);
    EXPECT_FALSE(tier->Close().ok()) << "closing without power cannot succeed";
    tier.reset();
    fs_.PowerOn();
    tier = testing::OpenSsd(Options(durability));
    return report.ok() ? *report : PowerLossReport{};
  }
  // Blocks of `blocks` that are present; each one present must be served
  // with its own payload.
  uint64_t Present(SsdTier& tier, const std::vector<BlockMeta>& blocks) {
    uint64_t present = 0;
    for (const BlockMeta& m : blocks) {
      StatusOr<SharedBytes> got = tier.Get(m.key);
      if (!got.ok()) continue;
      ++present;
      EXPECT_TRUE(got->view() == PayloadOf(m).view())
          << "wrong payload served for block " << m.key.hi << ":" << m.key.lo;
    }
    return present;
  }

  testing::TempDir dir_;
  FaultInjectionFileSystem fs_;
};

TEST_F(SsdFaultTest, AReadErrorIsACountedMissAndNeverWrongBytes) {
  auto tier = testing::OpenSsd(Options());
  ASSERT_NE(tier, nullptr);
  const BlockMeta m = ChainBlock(0, 0);
  ASSERT_OK(tier->Put(m, PayloadOf(m), true));
  fs_.AddFault({.op = FaultOp::kRead, .path_contains = ".seg", .count = 1});
  StatusOr<SharedBytes> got = tier->Get(m.key);
  EXPECT_TRUE(got.status().IsIOError()) << got.status().ToString();
  EXPECT_EQ(tier->Totals().io_errors, 1u);
  EXPECT_EQ(tier->Totals().misses, 1u);
  EXPECT_EQ(tier->Totals().hits, 0u);
  // The block is not damaged, so it stays and is served once reads work.
  ASSERT_OK_AND_ASSIGN(SharedBytes again, tier->Get(m.key));
  EXPECT_EQ(again.view(), PayloadOf(m).view());
  testing::ExpectCountersMatchContents(*tier, {0});
}

TEST_F(SsdFaultTest, AShortSegmentWriteIsReturnedCountedRetriedAndLosesNothing) {
  testing::LogLines log;
  FakeClock clock;  // the writer's pause after a failure ends only on Flush()
  SsdTierOptions o = Options();
  o.log = log.Sink();
  o.clock = &clock;
  o.writer_threads = 1;
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  fs_.AddFault(
      {.op = FaultOp::kWrite, .path_contains = ".seg", .count = 3, .short_write = true});
  const BlockMeta a = ChainBlock(0, 0), b = ChainBlock(1, 0);
  EXPECT_TRUE(tier->Put(a, PayloadOf(a), true).IsIOError());  // half an extent landed
  EXPECT_FALSE(tier->Contains(a.key));
  EXPECT_EQ(tier->Totals().io_errors, 1u);
  // The background writer meets the second short write and pauses; the
  // failure is reported and the block stays queued and readable.
  tier->OnEvict(b, PayloadOf(b), true);
  ASSERT_TRUE(testing::WaitUntil([&] { return tier->Totals().io_errors == 2; }));
  EXPECT_TRUE(tier->WriteBackStatus().IsIOError());
  EXPECT_EQ(tier->Get(b.key)->view(), PayloadOf(b).view()) << "still queued";
  // Flush retries at once and returns the third short write.
  EXPECT_TRUE(tier->Flush().IsIOError());
  EXPECT_EQ(tier->Totals().io_errors, 3u);
  EXPECT_EQ(tier->Get(b.key)->view(), PayloadOf(b).view()) << "still queued";
  EXPECT_EQ(log.Count("segment I/O failed"), 1) << "logged once, counted always";
  ASSERT_OK(tier->Flush());  // retried: the fault is spent
  EXPECT_OK(tier->WriteBackStatus());
  ASSERT_OK(tier->Put(a, PayloadOf(a), true));
  ASSERT_OK(tier->Close());
  tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(Present(*tier, {a, b}), 2u);
  testing::ExpectAuditClean(*tier);
}

TEST_F(SsdFaultTest, AFailedSegmentFsyncInSyncModeFailsThePut) {
  auto tier = testing::OpenSsd(Options(SsdDurability::kSync));
  ASSERT_NE(tier, nullptr);
  fs_.AddFault({.op = FaultOp::kSync, .path_contains = ".seg", .count = 1});
  const BlockMeta a = ChainBlock(0, 0), b = ChainBlock(1, 0);
  EXPECT_TRUE(tier->Put(a, PayloadOf(a), true).IsIOError());
  EXPECT_FALSE(tier->Contains(a.key));
  EXPECT_EQ(tier->Totals().io_errors, 1u);
  ASSERT_OK(tier->Put(b, PayloadOf(b), true));  // a new segment, synced
  CutPowerAndReopen(tier, SsdDurability::kSync);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(Present(*tier, {b}), 1u);
  EXPECT_FALSE(tier->Contains(a.key));
}

TEST_F(SsdFaultTest, AFailedLogFsyncInSyncModeFailsThePut) {
  auto tier = testing::OpenSsd(Options(SsdDurability::kSync));
  ASSERT_NE(tier, nullptr);
  const BlockMeta a = ChainBlock(0, 0), b = ChainBlock(1, 0);
  ASSERT_OK(tier->Put(a, PayloadOf(a), true));
  fs_.AddFault({.op = FaultOp::kSync, .path_contains = ".log", .count = 1});
  EXPECT_FALSE(tier->Put(b, PayloadOf(b), true).ok());  // RocksDB's log sync failed
  EXPECT_FALSE(tier->Contains(b.key));
  EXPECT_GE(tier->Totals().io_errors, 1u);
  // RocksDB 7.8 treats a failed log sync as a fatal background error: writes
  // keep failing (Resume() does not clear it) until the tier is reopened.
  CutPowerAndReopen(tier, SsdDurability::kSync);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(Present(*tier, {a}), 1u);
  EXPECT_FALSE(tier->Contains(b.key));
  EXPECT_OK(tier->Put(b, PayloadOf(b), true));
}

TEST_F(SsdFaultTest, PowerLossInSyncModeLosesNothingAcknowledged) {
  auto tier = testing::OpenSsd(Options(SsdDurability::kSync));
  ASSERT_NE(tier, nullptr);
  std::vector<BlockMeta> kept, removed;
  for (uint64_t c = 0; c < 6; ++c) {
    for (uint64_t i = 0; i < 5; ++i) {
      const BlockMeta m = ChainBlock(c, i);
      if (c % 2 == 0) {
        ASSERT_OK(tier->Put(m, PayloadOf(m), true));
      } else {
        tier->OnEvict(m, PayloadOf(m), true);  // write-back, acked by Flush
      }
      (i == 4 && c < 2 ? removed : kept).push_back(m);
    }
  }
  ASSERT_OK(tier->Flush());
  for (const BlockMeta& m : removed) ASSERT_OK(tier->Remove(m.key));
  for (const BlockMeta& m : kept)
    ASSERT_OK(tier->Get(m.key).status());  // unsynced touches
  const PowerLossReport report = CutPowerAndReopen(tier, SsdDurability::kSync);
  EXPECT_GT(report.bytes_dropped, 0u) << "access-order updates are never synced";
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->open_report().moved_aside_to.empty());
  EXPECT_EQ(Present(*tier, kept), kept.size());
  EXPECT_EQ(Present(*tier, removed), 0u);
  testing::ExpectCountersMatchContents(*tier, {0});
  testing::ExpectAuditClean(*tier);
}

// The control: wal mode never syncs, so the same power loss does drop
// acknowledged blocks, and the simulation is not a no-op. No wrong bytes.
TEST_F(SsdFaultTest, PowerLossInWalModeMayLoseAcknowledgedBlocksButNoByteIsWrong) {
  auto tier = testing::OpenSsd(Options(SsdDurability::kWal));
  ASSERT_NE(tier, nullptr);
  std::vector<BlockMeta> acked;
  for (uint64_t i = 0; i < 20; ++i) {
    const BlockMeta m = ChainBlock(0, i);
    ASSERT_OK(tier->Put(m, PayloadOf(m), true));
    acked.push_back(m);
  }
  const PowerLossReport report = CutPowerAndReopen(tier, SsdDurability::kWal);
  EXPECT_GT(report.files_rolled_back, 0u);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->open_report().moved_aside_to.empty());
  EXPECT_LT(Present(*tier, acked), acked.size());
  testing::ExpectCountersMatchContents(*tier, {0});
}

TEST_F(SsdFaultTest, AFailedWriteBackIsRetriedWhenTheClockAdvancesNotBefore) {
  FakeClock clock;
  SsdTierOptions o = Options();
  o.clock = &clock;
  o.writer_threads = 1;
  o.retry_interval_ms = 3'600'000;  // an hour: only fake time can get there
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  fs_.AddFault({.op = FaultOp::kWrite,
                .path_contains = ".seg",
                .count = 1,
                .error = Status::NoSpace("injected ENOSPC")});
  const BlockMeta m = ChainBlock(0, 0);
  tier->OnEvict(m, PayloadOf(m), true);
  ASSERT_TRUE(testing::WaitUntil([&] { return fs_.faults_injected() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  clock.AdvanceMillis(1'800'000);  // half the interval
  const BlockMeta other = ChainBlock(1, 0);
  tier->OnEvict(other, PayloadOf(other), true);  // new work does not cut the wait
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(tier->Totals().entries, 0u) << "retried before the interval passed";
  EXPECT_EQ(tier->queued_blocks(), 2u);
  clock.AdvanceMillis(3'600'000);
  EXPECT_TRUE(testing::WaitUntil([&] { return tier->Totals().entries == 2; }))
      << "not retried after the fake clock passed the interval";
  EXPECT_EQ(tier->Get(m.key)->view(), PayloadOf(m).view());
}

}  // namespace
}  // namespace prefixkv
