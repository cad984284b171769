// EventLog (src/engine/event_log.cc): numbering across reopens and crashes,
// torn tails, retention by bytes and by age, the resnapshot status, the key
// sets and their checkpoint, watchers.
#include "event_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "event_log_file.h"
#include "tests/support/test_util.h"

namespace prefixkv::internal {
namespace {

using ::prefixkv::testing::TempDir;

KvEvent Stored(uint64_t k, TierLevel tier = TierLevel::kSsd) {
  return KvEvent{.kind = KvEventKind::kStored,
                 .tier = tier,
                 .owner = 1,
                 .namespace_id = BlockKey{.hi = 7, .lo = 7},
                 .key = BlockKey{.hi = 1, .lo = k},
                 .parent = BlockKey{.hi = 1, .lo = k - 1},
                 .bytes = 4096};
}

KvEvent Removed(uint64_t k, TierLevel tier = TierLevel::kSsd) {
  KvEvent e = Stored(k, tier);
  e.kind = KvEventKind::kRemoved;
  e.reason = KvRemoveReason::kEvicted;
  return e;
}

class EventLogTest : public ::testing::Test {
 protected:
  EventLogOptions Options() {
    EventLogOptions o;
    o.dir = dir_.str() + "/events";
    o.clock = &clock_;
    return o;
  }
  std::unique_ptr<EventLog> OpenLog(EventLogOptions o) {
    StatusOr<std::unique_ptr<EventLog>> log = EventLog::Open(o);
    EXPECT_OK(log);
    return log.ok() ? std::move(*log) : nullptr;
  }
  uint64_t Append(EventLog& log, KvEvent e) {
    e.unix_ms = static_cast<int64_t>(clock_.UnixMillis());
    log.Append(e);
    return e.seq;
  }
  std::filesystem::path LastSegment() {
    std::filesystem::path last;
    for (const auto& f : std::filesystem::directory_iterator(dir_.path() / "events")) {
      if (f.path().extension() == ".log" && f.path() > last) last = f.path();
    }
    return last;
  }

  TempDir dir_;
  FakeClock clock_{uint64_t{1'700'000'000'000} * 1'000'000};
};

TEST_F(EventLogTest, NumbersFromOneAndReadsInOrder) {
  auto log = OpenLog(Options());
  for (uint64_t k = 1; k <= 5; ++k) EXPECT_EQ(Append(*log, Stored(k)), k);
  ASSERT_OK_AND_ASSIGN(KvEventPage page, log->Read(0, 100));
  ASSERT_EQ(page.events.size(), 5u);
  EXPECT_EQ(page.events[2].key.lo, 3u);
  EXPECT_EQ(page.next_seq, 6u);
  ASSERT_OK_AND_ASSIGN(page, log->Read(4, 1));
  ASSERT_EQ(page.events.size(), 1u);
  EXPECT_EQ(page.events[0].seq, 4u);
  EXPECT_EQ(page.next_seq, 5u);
  ASSERT_OK_AND_ASSIGN(page, log->Read(6, 100));  // caught up: nothing, no error
  EXPECT_TRUE(page.events.empty());
  EXPECT_EQ(page.next_seq, 6u);
}

TEST_F(EventLogTest, SeqIsMonotonicAcrossReopenAndResumesAfterTheLastEvent) {
  {
    auto log = OpenLog(Options());
    for (uint64_t k = 1; k <= 3; ++k) Append(*log, Stored(k));
    ASSERT_OK(log->Close());
  }
  auto log = OpenLog(Options());
  const uint64_t next = Append(*log, Stored(4));
  EXPECT_GT(next, 3u);
  // A consumer that applied seq 3 continues with the new run's first event.
  ASSERT_OK_AND_ASSIGN(KvEventPage page, log->Read(4, 100));
  ASSERT_EQ(page.events.size(), 1u);
  EXPECT_EQ(page.events[0].seq, next);
  // The old events are still there, in order.
  ASSERT_OK_AND_ASSIGN(page, log->Read(1, 100));
  ASSERT_EQ(page.events.size(), 4u);
  EXPECT_EQ(page.events[3].seq, next);
  // A number of the skipped range was never an event: resnapshot.
  EXPECT_TRUE(log->Read(next, 100).status().IsOutOfRange());
}

TEST_F(EventLogTest, CrashNeverReusesANumberHandedOut) {
  EventLogOptions o = Options();
  o.reserve_ahead = 10;
  uint64_t last = 0;
  {
    auto log = OpenLog(o);
    for (uint64_t k = 1; k <= 25; ++k) last = Append(*log, Stored(k));
    // Destroyed without Close: a kill -9 (every event was written).
  }
  // The last two records are lost as by a torn write: numbers 24 and 25 were
  // handed out but are not in the log.
  std::filesystem::resize_file(
      LastSegment(), std::filesystem::file_size(LastSegment()) - kEventRecordBytes - 10);
  auto log = OpenLog(o);
  const uint64_t next = Append(*log, Stored(26));
  EXPECT_GT(next, last);
  ASSERT_OK_AND_ASSIGN(KvEventPage page, log->Read(1, 100));
  ASSERT_EQ(page.events.size(), 24u);  // 1..23, then the new one
  EXPECT_EQ(page.events[22].seq, 23u);
  EXPECT_EQ(page.events[23].seq, next);
  // A consumer that saw 24 or 25 must resnapshot; one at 23 continues.
  EXPECT_TRUE(log->Read(25, 100).status().IsOutOfRange());
  EXPECT_TRUE(log->Read(26, 100).status().IsOutOfRange());
  EXPECT_OK(log->Read(24, 100));
}

TEST_F(EventLogTest, TornTailIsCutAtOpenNeverMisread) {
  {
    auto log = OpenLog(Options());
    for (uint64_t k = 1; k <= 4; ++k) Append(*log, Stored(k));
  }
  const auto path = LastSegment();
  const uint64_t intact = std::filesystem::file_size(path);
  {
    // Half a record, then a whole record with a flipped byte after it.
    std::string rec;
    KvEvent e = Stored(9);
    e.seq = 5;
    EncodeEventRecord(e, &rec);
    std::ofstream f(path, std::ios::app | std::ios::binary);
    std::string bad = rec;
    bad[20] ^= 1;
    f << bad << rec.substr(0, 40);
  }
  auto log = OpenLog(Options());
  EXPECT_EQ(std::filesystem::file_size(path), intact);
  ASSERT_OK_AND_ASSIGN(KvEventPage page, log->Read(1, 100));
  ASSERT_EQ(page.events.size(), 4u);
  EXPECT_EQ(page.events.back().key.lo, 4u);
}

TEST_F(EventLogTest, RetentionByBytesDropsOldSegmentsAndReadersOfThemResnapshot) {
  EventLogOptions o = Options();
  o.retention_bytes = 16 << 10;
  o.segment_bytes = 4 << 10;
  auto log = OpenLog(o);
  for (uint64_t k = 1; k <= 2000; ++k) Append(*log, Stored(k));
  KvEventLogStats s = log->Stats();
  EXPECT_LE(s.bytes, o.retention_bytes);
  EXPECT_GT(s.bytes, o.retention_bytes - 2 * o.segment_bytes);
  EXPECT_GT(s.first_seq, 1u);
  EXPECT_EQ(s.head_seq, 2000u);
  EXPECT_EQ(s.trimmed + s.events, 2000u);
  EXPECT_TRUE(log->Read(1, 10).status().IsOutOfRange());
  EXPECT_TRUE(log->Read(s.first_seq - 1, 10).status().IsOutOfRange());
  // The consumer that applied the last dropped event continues.
  ASSERT_OK_AND_ASSIGN(KvEventPage page, log->Read(s.first_seq, 10));
  EXPECT_EQ(page.events.front().seq, s.first_seq);
  // So does it after a reopen (the first segment names its predecessor).
  ASSERT_OK(log->Close());
  log = OpenLog(o);
  EXPECT_OK(log->Read(s.first_seq, 10));
  EXPECT_TRUE(log->Read(s.first_seq - 1, 10).status().IsOutOfRange());
}

TEST_F(EventLogTest, RetentionByAgeFollowsTheClock) {
  EventLogOptions o = Options();
  o.retention_ms = 60'000;
  o.segment_bytes = 4 << 10;
  auto log = OpenLog(o);
  for (uint64_t k = 1; k <= 200; ++k) Append(*log, Stored(k));
  EXPECT_EQ(log->Stats().first_seq, 1u);
  clock_.AdvanceMillis(60'001);
  Append(*log, Stored(201));  // retention runs at each append
  KvEventLogStats s = log->Stats();
  EXPECT_GT(s.first_seq, 1u);
  EXPECT_LT(s.events, 60u);  // only the segment being written survives
  EXPECT_EQ(s.head_seq, 201u);
}

TEST_F(EventLogTest, ReaderAheadOfTheHeadMustResnapshot) {
  auto log = OpenLog(Options());
  Append(*log, Stored(1));
  EXPECT_OK(log->Read(2, 10));
  Status s = log->Read(3, 10).status();
  EXPECT_TRUE(s.IsOutOfRange()) << s.ToString();
  EXPECT_NE(s.message().find("resnapshot"), std::string::npos);
}

TEST_F(EventLogTest, SnapshotIsTheKeySetTheEventsAddUpTo) {
  auto log = OpenLog(Options());
  Append(*log, Stored(1, TierLevel::kHot));
  Append(*log, Stored(2, TierLevel::kHot));
  Append(*log, Stored(3));
  KvEvent moved = Stored(2);
  moved.kind = KvEventKind::kMoved;
  moved.from = TierLevel::kHot;
  Append(*log, moved);
  Append(*log, Removed(3));
  const uint64_t head = Append(*log, Stored(4));
  KvEventSnapshot snap = log->Snapshot();
  EXPECT_EQ(snap.seq, head);
  ASSERT_EQ(snap.hot.size(), 1u);
  EXPECT_EQ(snap.hot[0].key.lo, 1u);
  EXPECT_EQ(snap.ssd.size(), 2u);  // 2 (moved) and 4
  KvEvent cleared{.kind = KvEventKind::kCleared, .tier = TierLevel::kHot};
  Append(*log, cleared);
  EXPECT_TRUE(log->Snapshot().hot.empty());
}

TEST_F(EventLogTest, SsdKeysAreRebuiltFromCheckpointAndTail) {
  {
    auto log = OpenLog(Options());
    for (uint64_t k = 1; k <= 10; ++k) Append(*log, Stored(k));
    ASSERT_OK(log->Checkpoint());
    Append(*log, Removed(3));
    Append(*log, Stored(11));
    // No Close: the events after the checkpoint are replayed.
  }
  auto log = OpenLog(Options());
  EXPECT_TRUE(log->ssd_keys_proven());
  KvKeySet keys = log->SsdKeys();
  EXPECT_EQ(keys.size(), 10u);
  EXPECT_EQ(keys.count(BlockKey{.hi = 1, .lo = 3}), 0u);
  EXPECT_EQ(keys.count(BlockKey{.hi = 1, .lo = 11}), 1u);
}

TEST_F(EventLogTest, SsdKeysAreUnprovenWhenEventsAfterTheCheckpointWereTrimmed) {
  EventLogOptions o = Options();
  o.retention_bytes = 16 << 10;
  o.segment_bytes = 4 << 10;
  {
    auto log = OpenLog(o);
    ASSERT_OK(log->Checkpoint());
    for (uint64_t k = 1; k <= 1000; ++k) Append(*log, Stored(k));
  }
  auto log = OpenLog(o);
  EXPECT_FALSE(log->ssd_keys_proven());
}

TEST_F(EventLogTest, WatchWakesOnceAtTheFirstEventAtOrAfterItsSeq) {
  auto log = OpenLog(Options());
  Append(*log, Stored(1));
  Append(*log, Stored(2));
  int woken = 0;
  const uint64_t id = log->Watch(3, [&] { ++woken; });
  EXPECT_NE(id, 0u);
  EXPECT_EQ(woken, 0);
  Append(*log, Stored(3));
  Append(*log, Stored(4));
  EXPECT_EQ(woken, 1);
  // Already there, or out of range: at once.
  EXPECT_EQ(log->Watch(2, [&] { ++woken; }), 0u);
  EXPECT_EQ(log->Watch(99, [&] { ++woken; }), 0u);
  EXPECT_EQ(woken, 3);
  const uint64_t gone = log->Watch(5, [&] { ++woken; });
  log->Unwatch(gone);
  Append(*log, Stored(5));
  EXPECT_EQ(woken, 3);
}

TEST_F(EventLogTest, RamLogNumbersAboveEveryEarlierRunOfTheClock) {
  EventLogOptions o = Options();
  o.dir.clear();
  uint64_t first_run_last = 0;
  {
    auto log = OpenLog(o);
    for (uint64_t k = 1; k <= 100; ++k) first_run_last = Append(*log, Stored(k));
  }
  clock_.AdvanceMillis(1);
  auto log = OpenLog(o);
  const uint64_t first = Append(*log, Stored(1));
  EXPECT_GT(first, first_run_last);
  EXPECT_TRUE(log->Read(first_run_last + 1, 10).status().IsOutOfRange());
  EXPECT_OK(log->Read(0, 10));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "events"));
}

TEST_F(EventLogTest, DamagedSeqFileResumesFarAboveTheLog) {
  {
    auto log = OpenLog(Options());
    for (uint64_t k = 1; k <= 3; ++k) Append(*log, Stored(k));
  }
  std::ofstream(dir_.path() / "events" / "SEQ", std::ios::trunc) << "garbage";
  auto log = OpenLog(Options());
  EXPECT_GT(Append(*log, Stored(4)), uint64_t{1} << 32);
}

}  // namespace
}  // namespace prefixkv::internal
