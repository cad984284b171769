// The SSD tier when writes fail for lack of space or a read-only segments
// directory (docs/ssd.md "Full disk" and "Write-back failures"), through the
// FileSystem seam: failed segment writes leave no files; a full disk releases
// the space reserve and refuses payload writes without I/O while removals and
// reads go on, until space is back; a failed metadata log write is a Status
// (never an abort) until the tier is reopened; RocksDB's info log is never a file on the
// data disk; a failing write-back is reported (WriteBackStatus, one log line) until it
// succeeds again.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "prefixkv/advanced/ssd_tier.h"
#include "ssd_tier_impl.h"
#include "ssd_writer.h"
#include "tests/storage/ssd/ssd_test_util.h"
#include "tests/support/fault_injection_file_system.h"

namespace prefixkv {
namespace {

using testing::ChainBlock;

SharedBytes PayloadOf(const BlockMeta& m) {
  return testing::ConformancePayload(m.key, 0, 1000 + m.key.lo * 37 % 9000);
}

FaultSpec NoSpaceOn(const std::string& path_contains, uint64_t count = UINT64_MAX) {
  return {.op = FaultOp::kWrite,
          .path_contains = path_contains,
          .count = count,
          .error = Status::NoSpace("injected ENOSPC")};
}

class SsdSpaceTest : public ::testing::Test {
 protected:
  SsdTierOptions Options() {
    SsdTierOptions o = testing::TestSsdOptions(path());
    o.file_system = &fs_;
    o.clock = &clock_;
    o.reserve_bytes = 1 << 20;
    o.log = log_.Sink();
    return o;
  }
  std::string path() const { return (dir_.path() / "ssd").string(); }
  std::string reserve() const { return path() + "/space-reserve"; }
  int SegmentFiles() const { return testing::SegmentFiles(path()).size(); }

  testing::TempDir dir_;
  FaultInjectionFileSystem fs_;
  FakeClock clock_;
  testing::LogLines log_;
};

// An open that fails because another tier holds the directory (here in
// this process; `prefixkv audit` beside a running server) used to leave that
// tier without its space reserve: the reserve is released before the
// database opens. It is written back when the open fails.
TEST_F(SsdSpaceTest, AnOpenRefusedByTheLockLeavesTheOwnersReserveInPlace) {
  auto owner = SsdTier::Open(Options());
  ASSERT_OK(owner);
  ASSERT_EQ(std::filesystem::file_size(reserve()), 1u << 20);
  StatusOr<std::unique_ptr<SsdTier>> second = SsdTier::Open(Options());
  ASSERT_FALSE(second.ok());
  ASSERT_TRUE(std::filesystem::exists(reserve()));
  EXPECT_EQ(std::filesystem::file_size(reserve()), 1u << 20);
  ASSERT_OK((*owner)->Close());
}

TEST_F(SsdSpaceTest, FailedSegmentWritesLeaveNoFilesBehind) {
  SsdTierOptions o = Options();
  o.reserve_bytes = 0;  // every Put really tries to write
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  fs_.AddFault(NoSpaceOn(".seg", 30));
  for (uint64_t i = 0; i < 30; ++i) {
    const BlockMeta m = ChainBlock(i, 0);
    EXPECT_TRUE(tier->Put(m, PayloadOf(m), true).IsNoSpace());
  }
  EXPECT_EQ(fs_.faults_injected(), 30u);
  EXPECT_EQ(SegmentFiles(), 0) << "a failed first write left its segment file";
  EXPECT_EQ(tier->SpaceUsage().file_bytes, 0u);
  const BlockMeta m = ChainBlock(99, 0);
  ASSERT_OK(tier->Put(m, PayloadOf(m), true));
  EXPECT_EQ(SegmentFiles(), 1);
  testing::ExpectAuditClean(*tier);
}

TEST_F(SsdSpaceTest, AFullDiskReleasesTheReserveAndRefusesWritesUntilSpaceIsBack) {
  auto tier = testing::OpenSsd(Options());
  ASSERT_NE(tier, nullptr);
  ASSERT_OK_AND_ASSIGN(uint64_t reserve_size, fs_.FileSize(reserve()));
  EXPECT_EQ(reserve_size, 1u << 20);
  std::vector<BlockMeta> stored;
  for (uint64_t i = 0; i < 4; ++i) {
    stored.push_back(ChainBlock(i, 0));
    ASSERT_OK(tier->Put(stored.back(), PayloadOf(stored.back()), true));
  }
  fs_.AddFault(NoSpaceOn(".seg"));
  const BlockMeta refused = ChainBlock(10, 0);
  EXPECT_TRUE(tier->Put(refused, PayloadOf(refused), true).IsNoSpace());
  EXPECT_TRUE(fs_.FileSize(reserve()).status().IsNotFound()) << "reserve not released";
  EXPECT_EQ(log_.Count("disk full"), 1);
  // Refused before any I/O, with a clear error; removals and reads go on.
  const uint64_t injected = fs_.faults_injected();
  for (int i = 0; i < 5; ++i) {
    Status s = tier->Put(refused, PayloadOf(refused), true);
    EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
    EXPECT_NE(s.message().find("disk full"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(fs_.faults_injected(), injected) << "a refused write still touched the disk";
  ASSERT_OK(tier->Remove(stored[0].key));
  for (size_t i = 1; i < stored.size(); ++i) {
    EXPECT_EQ(tier->Get(stored[i].key)->view(), PayloadOf(stored[i]).view());
  }
  // Space is back, but the tier looks only every retry interval.
  fs_.ClearFaults();
  EXPECT_TRUE(tier->Put(refused, PayloadOf(refused), true).IsNoSpace());
  clock_.AdvanceMillis(Options().retry_interval_ms);
  ASSERT_OK(tier->Put(refused, PayloadOf(refused), true));
  EXPECT_EQ(log_.Count("disk space is back"), 1);
  ASSERT_OK_AND_ASSIGN(reserve_size, fs_.FileSize(reserve()));
  EXPECT_EQ(reserve_size, 1u << 20);
  testing::ExpectAuditClean(*tier);
  ASSERT_OK(tier->Close());
}

// A shutdown after the disk was full and space came back within the retry
// interval: the write-back's last attempt at Close was refused as on a full
// disk, before any I/O (the reserve is taken back once an interval has
// passed), so a block acknowledged to RAM and queued for write-back was lost
// though there was room for it. Close now tries to take the reserve back at
// once, so its last attempt writes the block.
TEST_F(SsdSpaceTest, AShutdownAfterSpaceCameBackWritesTheQueuedBlocks) {
  std::unique_ptr<SsdTier> tier = testing::OpenSsd(Options());
  ASSERT_NE(tier, nullptr);
  fs_.AddFault(NoSpaceOn(".seg"));
  const BlockMeta refused = ChainBlock(10, 0), queued = ChainBlock(11, 0);
  ASSERT_TRUE(tier->Put(refused, PayloadOf(refused), true).IsNoSpace());
  fs_.ClearFaults();  // removals (or an operator) freed space
  tier->OnEvict(queued, PayloadOf(queued), /*dirty=*/true);  // RAM's victim
  EXPECT_OK(tier->Close());
  tier = testing::OpenSsd(Options());
  ASSERT_NE(tier, nullptr);
  StatusOr<SharedBytes> got = tier->Get(queued.key);
  ASSERT_OK(got) << "the queued block was lost at the shutdown";
  EXPECT_EQ(got->view(), PayloadOf(queued).view());
  ASSERT_OK(tier->Close());
}

// A failed append to RocksDB's log (another program filled the disk): in
// RocksDB 7.8 the log writer keeps the error and any later append to it (a
// write after DB::Resume()) aborts the process. The tier returns Statuses
// instead, never writes that database again, and the reopened tier has
// every block acknowledged before.
TEST_F(SsdSpaceTest, AFailedMetadataLogWriteIsAStatusUntilTheTierIsReopened) {
  auto tier = testing::OpenSsd(Options());
  ASSERT_NE(tier, nullptr);
  const BlockMeta a = ChainBlock(0, 0), b = ChainBlock(1, 0), c = ChainBlock(2, 0);
  ASSERT_OK(tier->Put(a, PayloadOf(a), true));
  ASSERT_OK(tier->Put(b, PayloadOf(b), true));
  fs_.AddFault(NoSpaceOn(".log", 1));
  EXPECT_FALSE(tier->Put(c, PayloadOf(c), true).ok());
  EXPECT_FALSE(tier->Contains(c.key));
  EXPECT_EQ(log_.Count("metadata log write failed"), 1);
  fs_.ClearFaults();
  // Retry intervals pass (before: Resume(), then an abort at the next write).
  for (int i = 0; i < 3; ++i) {
    clock_.AdvanceMillis(Options().retry_interval_ms);
    Status s = tier->Put(c, PayloadOf(c), true);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("reopened"), std::string::npos) << s.ToString();
    EXPECT_FALSE(tier->Remove(a.key).ok());
  }
  EXPECT_EQ(tier->Get(b.key)->view(), PayloadOf(b).view()) << "reads go on";
  EXPECT_FALSE(tier->Close().ok());
  tier = testing::OpenSsd(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Get(a.key)->view(), PayloadOf(a).view());
  EXPECT_EQ(tier->Get(b.key)->view(), PayloadOf(b).view());
  EXPECT_FALSE(tier->Contains(c.key));
  ASSERT_OK(tier->Put(c, PayloadOf(c), true));
  ASSERT_OK(tier->Remove(a.key));
  testing::ExpectAuditClean(*tier);
}

// Flush mode writes its commits to the log once the removal journal is lost
// (SsdFaultTest.AFlushModeKillAfterAJournalFailureKeepsEveryAcknowledgedChange);
// a failed write of that log is then the same status until a reopen, never
// a Resume() and an append to the failed log writer (which aborts).
TEST_F(SsdSpaceTest, AFailedLogWriteAfterTheJournalWasLostInFlushModeIsAStatus) {
  SsdTierOptions o = Options();
  o.durability = SsdDurability::kFlush;
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  const BlockMeta a = ChainBlock(0, 0), b = ChainBlock(1, 0), c = ChainBlock(2, 0);
  fs_.AddFault(NoSpaceOn("removals.pkvj", 1));
  ASSERT_OK(tier->Put(a, PayloadOf(a), true));  // the journal is lost here
  fs_.AddFault(NoSpaceOn(".log", 1));
  EXPECT_FALSE(tier->Put(b, PayloadOf(b), true).ok());
  EXPECT_EQ(log_.Count("metadata log write failed"), 1);
  fs_.ClearFaults();
  for (int i = 0; i < 3; ++i) {
    clock_.AdvanceMillis(o.retry_interval_ms);
    Status s = tier->Put(c, PayloadOf(c), true);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("reopened"), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(tier->Close().ok());
  tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Get(a.key)->view(), PayloadOf(a).view());
  EXPECT_FALSE(tier->Contains(b.key));
}

TEST_F(SsdSpaceTest, RocksDbsInfoLogGoesToTheTierLogNotToAFileOnTheDataDisk) {
  // RocksDB's LOG file on a full disk: a failed append, then an abort at the
  // next log line (assertions on in Debian's librocksdb).
  for (FileSystem* fs : {static_cast<FileSystem*>(&fs_), FileSystem::Default()}) {
    SsdTierOptions o = Options();
    o.file_system = fs;
    o.path = path() + (fs == &fs_ ? "-routed" : "-default");
    auto tier = testing::OpenSsd(o);
    ASSERT_NE(tier, nullptr);
    ASSERT_OK(tier->Close());
    for (const auto& entry : std::filesystem::directory_iterator(o.path)) {
      EXPECT_NE(entry.path().filename().string().rfind("LOG", 0), 0u)
          << "RocksDB wrote " << entry.path();
    }
  }
}

TEST_F(SsdSpaceTest, AFailingWriteBackIsReportedUntilItSucceedsAgain) {
  SsdTierOptions o = Options();
  o.writer_threads = 1;
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  const BlockMeta stored = ChainBlock(0, 0);
  ASSERT_OK(tier->Put(stored, PayloadOf(stored), true));
  EXPECT_OK(tier->WriteBackStatus());
  // segments/ read-only: every segment write fails (EACCES is an IOError).
  fs_.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  const BlockMeta m = ChainBlock(1, 0);
  tier->OnEvict(m, PayloadOf(m), true);
  ASSERT_TRUE(testing::WaitUntil([&] { return !tier->WriteBackStatus().ok(); }));
  EXPECT_TRUE(tier->WriteBackStatus().IsIOError()) << tier->WriteBackStatus().ToString();
  // A metadata write that succeeds (a read's access-order update) says
  // nothing about the segments: no "succeeds again" between the failures.
  EXPECT_EQ(tier->Get(stored.key)->view(), PayloadOf(stored).view());
  EXPECT_FALSE(tier->Flush().ok());
  EXPECT_EQ(log_.Count("segment I/O failed"), 1);
  EXPECT_EQ(log_.Count("succeeds again"), 0);
  EXPECT_GE(tier->Totals().io_errors, 2u);
  fs_.ClearFaults();
  ASSERT_OK(tier->Flush());
  EXPECT_OK(tier->WriteBackStatus());
  EXPECT_EQ(log_.Count("segment I/O succeeds again"), 1);
  EXPECT_EQ(tier->Get(m.key)->view(), PayloadOf(m).view());
}

// Issue 24, point 6: two writers, one whose segment still takes writes (a
// file opened before segments/ went read-only) and one that needs a new
// file and fails. The first one's success used to clear the failure
// ("the last attempt failed"), so write-back looked healthy while a block
// it could not write was still waiting, and Puts were acknowledged again.
TEST(WriteBackQueueHealth, AnotherBatchsSuccessDoesNotClearAFailureStillWaiting) {
  const BlockMeta good = ChainBlock(0, 0), bad = ChainBlock(1, 0);
  std::mutex mu;
  std::condition_variable cv;
  bool good_entered = false, good_may_finish = false;
  std::atomic<bool> bad_fails{true};
  FakeClock clock;
  ssd::WriteBackQueue queue(8, 2, 3'600'000, &clock,
                            [&](const std::vector<ssd::WriteBackItem>& batch) {
                              for (const ssd::WriteBackItem& item : batch) {
                                if (item.meta.key == bad.key && bad_fails)
                                  return Status::IOError("EROFS");
                              }
                              if (batch.front().meta.key == good.key) {
                                std::unique_lock<std::mutex> lock(mu);
                                good_entered = true;
                                cv.notify_all();
                                cv.wait(lock, [&] { return good_may_finish; });
                              }
                              return Status::OK();
                            });
  ASSERT_TRUE(queue.Enqueue(good, PayloadOf(good)));
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return good_entered; });  // one writer holds `good`
  }
  ASSERT_TRUE(queue.Enqueue(bad, PayloadOf(bad)));  // the other one fails it
  ASSERT_TRUE(testing::WaitUntil([&] { return !queue.Health().ok(); }));
  {
    std::lock_guard<std::mutex> lock(mu);
    good_may_finish = true;
    cv.notify_all();
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return queue.size() == 1; }));  // `good` written
  EXPECT_TRUE(queue.Health().IsIOError()) << "`bad` is still waiting";
  EXPECT_EQ(queue.failed_blocks(), 1u);
  EXPECT_EQ(queue.failed_attempts(), 1u);
  // Writable again: the retry (an hour of clock time later) clears it.
  bad_fails = false;
  clock.AdvanceMillis(3'600'000);
  ASSERT_TRUE(testing::WaitUntil([&] { return queue.Health().ok(); }));
  EXPECT_EQ(queue.size(), 0u);
  EXPECT_EQ(queue.failed_blocks(), 0u);
}

// Flush waits for what was queued before it, not for what evictions keep
// queueing after it: it waited for the whole queue to be empty, which a
// steady stream of evictions never lets happen (an engine Flush, an audit or
// KEYS under write-back load waited as long as the load lasted). Here the
// write of `before` queues `after` (an eviction during the Flush), whose
// write waits until the Flush returned: at most 5 s, so a Flush that waits
// for it ends as a failure, not a hang.
TEST(WriteBackQueueHealth, FlushWaitsForWhatWasQueuedBeforeItNotForWhatCameAfter) {
  const BlockMeta before = ChainBlock(0, 0), after = ChainBlock(1, 0);
  std::mutex mu;
  std::condition_variable cv;
  bool flushed = false, after_waited_out = false;
  std::atomic<bool> before_fails{true};
  FakeClock clock;
  ssd::WriteBackQueue* queue_ptr = nullptr;
  ssd::WriteBackQueue queue(
      8, 1, 3'600'000, &clock, [&](const std::vector<ssd::WriteBackItem>& batch) {
        for (const ssd::WriteBackItem& item : batch) {
          if (item.meta.key == before.key) {
            // Fails once, so the writer waits (an hour of a clock that never
            // moves) until the Flush below wakes it: this write, and the
            // enqueue in it, come after the Flush began.
            if (before_fails.exchange(false)) return Status::IOError("once");
            EXPECT_TRUE(queue_ptr->Enqueue(after, PayloadOf(after)));
          } else if (item.meta.key == after.key) {
            std::unique_lock<std::mutex> lock(mu);
            after_waited_out =
                !cv.wait_for(lock, std::chrono::seconds(5), [&] { return flushed; });
          }
        }
        return Status::OK();
      });
  queue_ptr = &queue;
  ASSERT_TRUE(queue.Enqueue(before, PayloadOf(before)));
  ASSERT_TRUE(testing::WaitUntil([&] { return queue.failed_attempts() == 1; }));
  EXPECT_OK(queue.Flush());  // `before` written (its retry succeeds)
  {
    std::lock_guard<std::mutex> lock(mu);
    flushed = true;
    cv.notify_all();
  }
  EXPECT_OK(queue.Flush());  // and now `after` too
  EXPECT_EQ(queue.size(), 0u);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_FALSE(after_waited_out) << "Flush waited for a block queued after it began";
}

// A Flush called while a write attempt is under way, which then fails:
// the Flush retries it at once, as it does a paused writer's block. It was
// counted as a failure after the Flush began, so the Flush returned that
// error with the block unwritten and the writers paused for the whole
// retry interval again (an engine Flush, PKV.AUDIT or KEYS failed on a
// write error older than the call; SsdFaultTest.AFailedPutKeepsTheQueuedWriteBackOfItsKey
// failed so under load). The Flush is given 50 ms to begin waiting before
// the attempt fails; in whichever order they come, it must return OK.
TEST(WriteBackQueueHealth, AFlushRetriesAnAttemptThatFailsAfterItBegan) {
  const BlockMeta m = ChainBlock(0, 0);
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, may_fail = false;
  std::atomic<int> attempts{0};
  FakeClock clock;  // never advanced: only a Flush can end a pause
  ssd::WriteBackQueue queue(8, 1, 3'600'000, &clock,
                            [&](const std::vector<ssd::WriteBackItem>&) {
                              if (attempts++ > 0) return Status::OK();
                              std::unique_lock<std::mutex> lock(mu);
                              entered = true;
                              cv.notify_all();
                              cv.wait(lock, [&] { return may_fail; });
                              return Status::IOError("injected EIO");
                            });
  ASSERT_TRUE(queue.Enqueue(m, PayloadOf(m)));
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return entered; });  // the first attempt is under way
  }
  Status flushed;
  std::thread flusher([&] { flushed = queue.Flush(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(mu);
    may_fail = true;
    cv.notify_all();
  }
  flusher.join();
  EXPECT_OK(flushed) << "the failure of an attempt begun before the Flush";
  EXPECT_EQ(queue.size(), 0u) << "the failed attempt waits out the retry interval";
  EXPECT_EQ(attempts.load(), 2);
  EXPECT_TRUE(queue.Health().ok());
}

// At close, the one last attempt per block says exactly what is lost.
TEST(WriteBackQueueHealth, StopNamesTheBlocksAndBytesItCouldNotWrite) {
  FakeClock clock;
  ssd::WriteBackQueue queue(8, 1, 3'600'000, &clock,
                            [](const std::vector<ssd::WriteBackItem>& batch) {
                              for (const ssd::WriteBackItem& item : batch) {
                                if (item.meta.key.lo % 2 == 0)
                                  return Status::IOError("EROFS");
                              }
                              return Status::OK();
                            });
  uint64_t lost_bytes = 0;
  for (uint64_t i = 0; i < 4; ++i) {
    const BlockMeta m = ChainBlock(i, i);  // key.lo = i + 1: 2 and 4 fail
    if ((i + 1) % 2 == 0) lost_bytes += PayloadOf(m).size();
    ASSERT_TRUE(queue.Enqueue(m, PayloadOf(m)));
  }
  Status s = queue.Stop();
  EXPECT_TRUE(s.IsIOError());
  // (1 and 3 may have been written before, or at Stop: 2 and 4 never are.)
  EXPECT_NE(s.ToString().find("write-back at close: 2 of "), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.ToString().find("blocks (" + std::to_string(lost_bytes) +
                              " bytes) could not be written and are lost"),
            std::string::npos)
      << s.ToString();
}

// Issue 24, point 7: RocksDB's space needs follow the tier's capacity, so a
// data directory on a 64 MB disk holds them; large tiers keep the defaults.
TEST(SsdSpaceBounds, RocksDbsMemtablesLogAndManifestAreBoundedByTheCapacity) {
  SsdTierOptions small;
  small.capacity_bytes = 32ull << 20;
  small = ssd::TierImpl::WithSpaceBounds(small);
  rocksdb::Options db;
  ssd::TierImpl::BoundDbSpace(small, &db);
  EXPECT_EQ(small.write_buffer_bytes, 512u << 10);  // capacity / 64
  EXPECT_EQ(db.write_buffer_size, 512u << 10);
  EXPECT_LE(db.max_total_wal_size, 2u << 20);  // the log preallocation's cap too
  EXPECT_LE(db.manifest_preallocation_size, 512u << 10);
  EXPECT_LE(db.max_manifest_file_size, 1u << 20);
  SsdTierOptions tiny;
  tiny.capacity_bytes = 1 << 20;
  EXPECT_EQ(ssd::TierImpl::WithSpaceBounds(tiny).write_buffer_bytes, 256u << 10);
  SsdTierOptions large;  // 64 GiB: the defaults
  large = ssd::TierImpl::WithSpaceBounds(large);
  rocksdb::Options large_db;
  const rocksdb::Options defaults;
  ssd::TierImpl::BoundDbSpace(large, &large_db);
  EXPECT_EQ(large.write_buffer_bytes, 64u << 20);
  EXPECT_EQ(large_db.write_buffer_size, 64u << 20);
  EXPECT_EQ(large_db.manifest_preallocation_size, defaults.manifest_preallocation_size);
  EXPECT_EQ(large_db.max_manifest_file_size, defaults.max_manifest_file_size);
}

// What a file system that keeps allocations (ext4, xfs) holds for the log
// after the first write: 1.1 memtables were preallocated, 70 MB with the
// default 64 MiB memtable whatever the capacity (a 64 MB disk was full at
// once). Bytes allocated, not the file's size (fallocate keeps the size).
TEST(SsdSpaceBounds, ASmallTierPreallocatesLittleLog) {
  testing::TempDir dir;
  SsdTierOptions o;
  o.path = dir.str() + "/ssd";
  o.capacity_bytes = 32ull << 20;
  o.reserve_bytes = 1 << 20;
  o.log = [](std::string_view) {};
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  const BlockMeta m = ChainBlock(0, 0);
  ASSERT_OK(tier->Put(m, PayloadOf(m), false));
  uint64_t allocated = 0;
  for (const auto& entry : std::filesystem::directory_iterator(o.path)) {
    struct stat st;
    if (entry.path().extension() == ".log" && ::stat(entry.path().c_str(), &st) == 0) {
      allocated += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  std::printf("log bytes allocated for a 32 MiB tier: %llu\n",
              static_cast<unsigned long long>(allocated));
  EXPECT_LE(allocated, 2u << 20);
}

}  // namespace
}  // namespace prefixkv
