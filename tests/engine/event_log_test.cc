// EventLog (src/engine/event_log.cc): numbering across reopens and crashes,
// torn tails, retention by bytes and by age, the resnapshot status, the key
// sets and their checkpoint, watchers. Then the engine's events
// (src/engine/engine_events.cc): the hot tier's kCleared at open, the SSD
// reconciliation, and a kill -9 loop in write-through mode whose consumer's
// SSD key set must equal the SSD tier's after every restart.
#include "event_log.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "event_log_file.h"
#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/shared_hot_budget.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/fault_injection_file_system.h"
#include "tests/support/gated_file_system.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

// Truncates, flips a bit of, or deletes one file of `dir` (picked by `rng`),
// and says which in `damages`. False when `dir` holds no file.
bool DamageOneFile(const std::filesystem::path& dir, std::mt19937_64& rng, int run,
                   std::string* damages) {
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(dir))
    if (f.is_regular_file()) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) return false;
  const std::filesystem::path f = files[rng() % files.size()];
  const uint64_t size = std::filesystem::file_size(f);
  const uint64_t damage = rng() % 3;
  *damages += " run " + std::to_string(run) + ": " + f.filename().string() + " of " +
              std::to_string(size) + " bytes " +
              (damage == 0   ? "truncated"
               : damage == 1 ? "flipped"
                             : "deleted") +
              ";";
  if (damage == 0) {
    std::filesystem::resize_file(f, size == 0 ? 0 : rng() % size);
  } else if (damage == 1) {
    if (size == 0) return true;
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t at = rng() % size;
    io.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ (1 << (rng() % 8)));
    io.seekp(static_cast<std::streamoff>(at));
    io.write(&c, 1);
  } else {
    std::filesystem::remove(f);
  }
  return true;
}

}  // namespace
}  // namespace prefixkv

namespace prefixkv::internal {
namespace {

using ::prefixkv::testing::GatedFileSystem;
using ::prefixkv::testing::TempDir;

}  // namespace

namespace {

// Every event of the log from seq `first`, checked consecutive.
void ExpectConsecutive(EventLog& log, uint64_t first, uint64_t count) {
  ASSERT_OK_AND_ASSIGN(KvEventPage page, log.Read(first, count + 1));
  ASSERT_EQ(page.events.size(), count);
  for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(page.events[i].seq, first + i);
}

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
    o.first_seq = 1;
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
    std::string rec(kEventRecordBytes, '\0');
    KvEvent e = Stored(9);
    e.seq = 5;
    EncodeEventRecord(e, rec.data());
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

// A write of the log's files that fails leaves events that were numbered
// (and handed to live readers from RAM) but are not in the files, with
// written events after them. After a reopen no reader crosses that gap: a
// reader at or before it reads up to it and is then told to resnapshot, one
// inside it is told at once, one after it continues. Twice: the events
// after the gap in the same segment file (a jump of numbers in it), and in
// the next segment (whose header names a seq the files do not hold).
TEST_F(EventLogTest, AFailedWriteIsAGapNoReaderCrossesAfterAReopen) {
  for (const bool next_segment : {false, true}) {
    SCOPED_TRACE(next_segment ? "gap at a segment's end" : "gap inside a segment");
    TempDir dir;
    FaultInjectionFileSystem fs;
    EventLogOptions o = Options();
    o.dir = dir.str() + "/events";
    o.fs = &fs;
    // 4 KiB segments hold 46 records: 37..46 end the first one.
    if (next_segment) o.segment_bytes = 4096;
    const uint64_t written = next_segment ? 36 : 10;  // 1..written reach the file
    const uint64_t lost = written + 10;               // written+1..lost do not
    {
      auto log = OpenLog(o);
      for (uint64_t k = 1; k <= written; ++k) Append(*log, Stored(k));
      ASSERT_OK(log->Flush(false));
      fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".log", .count = 1});
      for (uint64_t k = written + 1; k <= lost; ++k) Append(*log, Stored(k));
      EXPECT_FALSE(log->Flush(false).ok());
      for (uint64_t k = lost + 1; k <= lost + 10; ++k) Append(*log, Stored(k));
      ASSERT_OK(log->Flush(false));
      EXPECT_EQ(log->Stats().write_errors, 1u);
      ExpectConsecutive(*log, 1, lost + 10);  // live readers: from RAM, no gap
      ASSERT_OK(log->Close());
    }
    auto log = OpenLog(o);
    // Before the gap: the events up to it, then OutOfRange.
    ASSERT_OK_AND_ASSIGN(KvEventPage page, log->Read(written - 4, 100));
    ASSERT_EQ(page.events.size(), 5u);
    EXPECT_EQ(page.events.back().seq, written);
    EXPECT_TRUE(log->Read(written + 1, 100).status().IsOutOfRange());
    // Inside it, and at its end (those events were never written).
    EXPECT_TRUE(log->Read(written + 5, 100).status().IsOutOfRange());
    EXPECT_TRUE(log->Read(lost + 1, 100).status().IsOutOfRange());
    // After it: the events written after the gap.
    ASSERT_OK_AND_ASSIGN(page, log->Read(lost + 2, 100));
    ASSERT_EQ(page.events.size(), 9u);
    EXPECT_EQ(page.events.front().seq, lost + 2);
    // The gap outlives the next reopen, and the next events after it.
    Append(*log, Stored(100));
    log.reset();
    log = OpenLog(o);
    EXPECT_TRUE(log->Read(written + 1, 100).status().IsOutOfRange());
    ASSERT_OK_AND_ASSIGN(page, log->Read(lost + 2, 100));
    EXPECT_EQ(page.events.size(), 10u);
  }
}

// The SEQ file cannot be replaced (a full or failing disk): the numbers
// above the last durable reservation are handed to live readers from RAM
// all the same. A reopen must still number above every one of them, and a
// reader that saw one must be told to resnapshot, never continue from
// another event of the same number.
TEST_F(EventLogTest, NumbersHandedOutWhileTheReservationFailsAreNeverReused) {
  FaultInjectionFileSystem fs;
  EventLogOptions o = Options();
  o.fs = &fs;
  o.reserve_ahead = 16;
  uint64_t seen = 0;
  {
    auto log = OpenLog(o);
    for (uint64_t k = 1; k <= 5; ++k) Append(*log, Stored(k));
    ASSERT_OK(log->Flush(false));
    fs.AddFault({.op = FaultOp::kWrite, .path_contains = "SEQ"});
    for (uint64_t k = 6; k <= 60; ++k) Append(*log, Stored(k));
    (void)log->Flush(false);
    ASSERT_OK_AND_ASSIGN(KvEventPage page, log->Read(1, 1000));
    ASSERT_FALSE(page.events.empty());
    seen = page.events.back().seq;  // a live reader's last event
    // Nor does a snapshot name a number above the reservation.
    EXPECT_EQ(log->Snapshot().status().code(), StatusCode::kUnavailable);
    (void)log->Close();
  }
  fs.ClearFaults();
  auto log = OpenLog(o);
  for (uint64_t k = 100; k < 160; ++k) {
    EXPECT_GT(Append(*log, Stored(k)), seen)
        << "a number a reader saw is handed out again";
  }
  ASSERT_OK(log->Flush(false));
  // The reader continues with the new run's events, or is told to resnapshot.
  StatusOr<KvEventPage> page = log->Read(seen + 1, 100);
  if (page.ok()) {
    ASSERT_FALSE(page->events.empty());
    EXPECT_GE(page->events.front().key.lo, 100u);
  } else {
    EXPECT_TRUE(page.status().IsOutOfRange());
  }
  EXPECT_OK(log->Snapshot().status());
}

// An open that fails before its first segment exists (events/ is a file; a
// fresh log's SEQ cannot be written: a full or read-only disk) dropped the
// half-built log, whose destructor drained into the last of no segments:
// SIGSEGV, so `prefixkv serve` (or a Python Engine.open) crashed instead of
// naming the error.
TEST_F(EventLogTest, AnOpenThatFailsBeforeItsFirstSegmentReturnsTheError) {
  EventLogOptions o = Options();
  std::ofstream(o.dir) << "not a directory";
  EXPECT_FALSE(EventLog::Open(o).ok());
  std::filesystem::remove(o.dir);
  FaultInjectionFileSystem fs;
  o.fs = &fs;
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = "SEQ"});
  EXPECT_FALSE(EventLog::Open(o).ok());
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

// A retention of 2^64 - 1 ms (serve --event-retention-ms 18446744073709551615:
// keep by bytes only) was cast to a negative int64, so every append dropped
// all segments but the one being written, as if each event were too old.
TEST_F(EventLogTest, ARetentionBeyondTheClocksReachKeepsEveryAge) {
  for (const uint64_t retention_ms : {UINT64_MAX, uint64_t{1} << 63}) {
    EventLogOptions o = Options();
    o.dir += "-" + std::to_string(retention_ms);  // a new log for each
    o.retention_ms = retention_ms;
    o.segment_bytes = 4 << 10;
    auto log = OpenLog(o);
    for (uint64_t k = 1; k <= 200; ++k) Append(*log, Stored(k));
    clock_.AdvanceMillis(60'001);
    Append(*log, Stored(201));
    const KvEventLogStats s = log->Stats();
    EXPECT_EQ(s.first_seq, 1u) << "retention_ms " << retention_ms;
    EXPECT_EQ(s.events, 201u) << "retention_ms " << retention_ms;
    ASSERT_OK(log->Close());
  }
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
  KvEventSnapshot snap = log->Snapshot().value();
  EXPECT_EQ(snap.seq, head);
  ASSERT_EQ(snap.hot.size(), 1u);
  EXPECT_EQ(snap.hot[0].key.lo, 1u);
  EXPECT_EQ(snap.ssd.size(), 2u);  // 2 (moved) and 4
  KvEvent cleared{.kind = KvEventKind::kCleared, .tier = TierLevel::kHot};
  Append(*log, cleared);
  EXPECT_TRUE(log->Snapshot().value().hot.empty());
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
  o.checkpoint_events = UINT64_MAX;  // only the one at open
  {
    auto log = OpenLog(o);
    ASSERT_OK(log->Checkpoint());
    for (uint64_t k = 1; k <= 1000; ++k) Append(*log, Stored(k));
  }
  auto log = OpenLog(o);
  EXPECT_FALSE(log->ssd_keys_proven());
}

// Append does no file work: while every write and sync of the log's files
// stalls (a disk that stopped), appends go on — across several write
// batches, reservations and a segment switch — and nothing is lost once the
// disk comes back.
TEST_F(EventLogTest, AppendsCompleteWhileTheLogsFileWritesStall) {
  GatedFileSystem fs;
  EventLogOptions o = Options();
  o.fs = &fs;
  o.reserve_ahead = 256;  // a dozen reservations fall into the stall
  o.segment_bytes = 128 << 10;
  auto log = OpenLog(o);
  fs.Arm("/events/");
  constexpr uint64_t kEvents = 3000;  // 267 KB of records: four batches
  std::atomic<uint64_t> appended{0};
  std::thread appender([&] {
    for (uint64_t k = 1; k <= kEvents; ++k) {
      Append(*log, Stored(k));
      appended.store(k);
    }
  });
  fs.gate().WaitForArrivals(1);  // a write of the log is stalled
  const bool all = testing::WaitUntil([&] { return appended.load() == kEvents; });
  const uint64_t before_open = appended.load();
  fs.gate().Open();
  appender.join();
  EXPECT_TRUE(all) << "Append waited for a stalled file write after " << before_open
                   << " events";
  EXPECT_EQ(log->Stats().append_waits, 0u);
  ASSERT_OK(log->Flush(true));
  ExpectConsecutive(*log, 1, kEvents);
  log.reset();  // a kill -9 after the flush: every event is in the files
  log = OpenLog(o);
  ExpectConsecutive(*log, 1, kEvents);
}

// The queue is bounded: behind a stalled disk, Append waits (counted) once
// kEventQueueLimitBytes are queued, and goes on without a loss when the
// disk comes back.
TEST_F(EventLogTest, AppendWaitsOnlyWhenTheQueueIsFull) {
  GatedFileSystem fs;
  EventLogOptions o = Options();
  o.fs = &fs;
  o.retention_bytes = uint64_t{256} << 20;
  auto log = OpenLog(o);
  fs.Arm("/events/");
  const uint64_t events = 3 * kEventQueueLimitBytes / kEventRecordBytes;
  std::atomic<uint64_t> appended{0};
  std::thread appender([&] {
    for (uint64_t k = 1; k <= events; ++k) {
      Append(*log, Stored(k));
      appended.store(k);
    }
  });
  fs.gate().WaitForArrivals(1);
  // The appender goes on to the bound, then stops: the writer holds one
  // batch, the queue is full. (No call into the log here: it must not be
  // the one that waits.) First the bound (a loaded machine may pause the
  // appender for longer than the stillness below), then stillness.
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return appended.load() >= kEventQueueLimitBytes / kEventRecordBytes; }));
  uint64_t seen = 0;
  auto still = std::chrono::steady_clock::now();
  EXPECT_TRUE(testing::WaitUntil([&] {
    if (appended.load() != seen) {
      seen = appended.load();
      still = std::chrono::steady_clock::now();
    }
    return std::chrono::steady_clock::now() - still > std::chrono::milliseconds(200);
  }));
  const uint64_t stopped_at = appended.load();
  fs.gate().Open();
  appender.join();
  EXPECT_GE(stopped_at, kEventQueueLimitBytes / kEventRecordBytes);
  EXPECT_LE(stopped_at, 2 * kEventQueueLimitBytes / kEventRecordBytes + 1);
  EXPECT_GE(log->Stats().append_waits, 1u);
  ExpectConsecutive(*log, 1, events);
}

// The writer checkpoints the SSD key set every checkpoint_events: after a
// kill -9 the key set is rebuilt from a recent checkpoint, even when
// retention has long dropped the events after the one taken at open.
TEST_F(EventLogTest, SsdKeysAreCheckpointedPeriodicallyAndProvenAfterACrash) {
  EventLogOptions o = Options();
  o.retention_bytes = 16 << 10;
  o.segment_bytes = 4096;  // checkpoint_events: 46
  const uint64_t every = 4096 / kEventRecordBytes;
  uint64_t last = 0;
  {
    auto log = OpenLog(o);
    ASSERT_OK(log->Checkpoint());  // as the engine's open does
    for (uint64_t k = 1; k <= 500; ++k) last = Append(*log, Stored(k));
    for (uint64_t k = 1; k <= 100; ++k) last = Append(*log, Removed(k));
    ASSERT_OK(log->Flush(false));
    EXPECT_TRUE(testing::WaitUntil([&] {
      StatusOr<SsdKeysCheckpoint> c = ReadSsdKeysCheckpoint(o.fs, o.dir);
      return c.ok() && c->seq + every >= last;
    })) << "no checkpoint within "
        << every << " events of the head";
    // Destroyed without Close: a kill -9.
  }
  auto log = OpenLog(o);
  EXPECT_TRUE(log->ssd_keys_proven());
  EXPECT_EQ(log->SsdKeys().size(), 400u);
}

TEST(KeyTable, AgreesWithAnUnorderedMapUnderRandomPutsAndErases) {
  const uint64_t seed = ::prefixkv::testing::TestSeed("KeyTable");
  std::mt19937_64 rng(seed);
  KeyTable table;
  KvKeySet model;
  for (int step = 0; step < 200000; ++step) {
    // Few distinct keys, some sharing their low bits: long probe runs.
    const BlockKey key{.hi = rng() % 4, .lo = (rng() % 3000) << (rng() % 2 ? 0 : 20)};
    if (rng() % 3 == 0) {
      EXPECT_EQ(table.Erase(key), model.erase(key) == 1) << "seed " << seed;
    } else {
      const KvSnapshotBlock b{.key = key, .bytes = rng()};
      table.Put(b);
      model[key] = b;
    }
    if (step % 50000 == 0) {
      table.Clear();
      model.clear();
    }
  }
  ASSERT_EQ(table.size(), model.size()) << "seed " << seed;
  size_t seen = 0;
  table.ForEach([&](const KvSnapshotBlock& b) {
    ++seen;
    auto it = model.find(b.key);
    ASSERT_NE(it, model.end());
    EXPECT_EQ(it->second, b);
  });
  EXPECT_EQ(seen, model.size());
  for (const auto& [key, b] : model) EXPECT_TRUE(table.Contains(key));
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
  o.first_seq = 0;  // the engine's: above the clock
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

// Random runs of appends, each ended by a Close or a crash (the log
// destroyed without it), and between runs a random damage to one of the
// log's files (truncated, a byte flipped, deleted). Every reopen succeeds,
// never hands out a number handed out before, and a reader from any event
// it had reads only the events that were appended after it, each exactly
// once and in order, until it is told to resnapshot.
TEST_F(EventLogTest, DamagedFilesAtOpenNeverRepeatASeqNorSkipAnEventSilently) {
  const uint64_t seed = ::prefixkv::testing::TestSeed("EventLogTest.DamagedFiles");
  std::mt19937_64 rng(seed);
  EventLogOptions o = Options();
  o.retention_bytes = 1 << 20;
  o.segment_bytes = 4096;
  o.reserve_ahead = 16;
  o.log = [](std::string_view) {};       // the damage is expected
  std::map<uint64_t, uint64_t> history;  // every seq handed out -> its key
  uint64_t k = 0;
  std::string damages;
  uint64_t max_seq = 0;
  for (int run = 0; run < 30; ++run) {
    SCOPED_TRACE("run " + std::to_string(run) + " seed " + std::to_string(seed) +
                 " damage:" + damages);
    {
      auto log = OpenLog(o);
      ASSERT_NE(log, nullptr);
      // The events after the log's end at open (a cut tail, a dropped last
      // segment) are gone as after a kill -9: the engine's reconciliation
      // re-emits what they changed. A reader that had one resnapshots.
      const uint64_t head = log->Stats().head_seq;
      for (auto it = history.upper_bound(head); it != history.end();) {
        EXPECT_TRUE(log->Read(it->first + 1, 10).status().IsOutOfRange())
            << "a reader of the lost seq " << it->first << " continues";
        it = history.erase(it);
      }
      // A reader from each retained event's successor: exact or resnapshot.
      for (auto it = history.begin(); it != history.end(); ++it) {
        uint64_t from = it->first + 1;
        auto next = std::next(it);
        for (int guard = 0; guard < 1000; ++guard) {
          StatusOr<KvEventPage> page = log->Read(from, 1 + rng() % 64);
          if (!page.ok()) {
            ASSERT_TRUE(page.status().IsOutOfRange()) << page.status().ToString();
            break;
          }
          if (page->events.empty()) break;
          for (const KvEvent& e : page->events) {
            ASSERT_NE(next, history.end()) << "an event never appended: " << e.seq;
            ASSERT_EQ(e.seq, next->first)
                << "a reader from " << it->first + 1 << " skipped or repeated an event";
            ASSERT_EQ(e.key.lo, next->second) << "seq " << e.seq << " misread";
            ++next;
          }
          from = page->next_seq;
        }
      }
      const uint64_t n = 1 + rng() % 120;
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t seq = Append(*log, Stored(++k));
        ASSERT_GT(seq, max_seq) << "seq " << seq << " handed out again";
        max_seq = seq;
        history[seq] = k;
      }
      if (rng() % 2 == 0) {
        ASSERT_OK(log->Close());
      } else {
        ASSERT_OK(log->Flush(false));  // then destroyed without Close: a crash
      }
    }
    DamageOneFile(dir_.path() / "events", rng, run, &damages);
  }
}

}  // namespace
}  // namespace prefixkv::internal

namespace prefixkv::testing {
namespace {

// A consumer as docs/events.md describes it: applies events in order to one
// key set per tier, and takes a snapshot when told to resnapshot.
struct Consumer {
  uint64_t next = 0;
  uint64_t last_seq = 0;
  std::set<BlockKey> hot, ssd;
  int resnapshots = 0;

  std::set<BlockKey>* Set(TierLevel t) {
    return t == TierLevel::kHot ? &hot : t == TierLevel::kSsd ? &ssd : nullptr;
  }
  void Apply(const KvEvent& e) {
    EXPECT_GT(e.seq, last_seq) << "events out of order or repeated";
    last_seq = e.seq;
    std::set<BlockKey>* to = Set(e.tier);
    if (e.kind == KvEventKind::kMoved && Set(e.from) != nullptr)
      Set(e.from)->erase(e.key);
    if (to == nullptr) return;
    if (e.kind == KvEventKind::kStored || e.kind == KvEventKind::kMoved)
      to->insert(e.key);
    if (e.kind == KvEventKind::kRemoved) to->erase(e.key);
    if (e.kind == KvEventKind::kCleared) to->clear();
  }
  void Resnapshot(Engine& engine) {
    StatusOr<KvEventSnapshot> snap = engine.EventSnapshot();
    ASSERT_OK(snap);
    hot.clear();
    ssd.clear();
    for (const KvSnapshotBlock& b : snap->hot) hot.insert(b.key);
    for (const KvSnapshotBlock& b : snap->ssd) ssd.insert(b.key);
    next = snap->seq + 1;
    last_seq = snap->seq;
    ++resnapshots;
  }
  // Reads every event there is.
  void CatchUp(Engine& engine) {
    for (int guard = 0; guard < 100000; ++guard) {
      StatusOr<KvEventPage> page = engine.Events(next, 4096);
      if (page.status().IsOutOfRange()) {
        Resnapshot(engine);
        continue;
      }
      ASSERT_OK(page);
      for (const KvEvent& e : page->events) Apply(e);
      next = page->next_seq;
      if (page->events.empty()) return;
    }
  }
};

std::set<BlockKey> SsdKeys(Engine& engine) {
  std::set<BlockKey> keys;
  EngineSsdTier(engine)->ForEach(
      [&](const BlockMeta& m, uint64_t) { keys.insert(m.key); });
  return keys;
}

class EngineEventsTest : public EngineFixture {
 protected:
  EngineEventsTest() : EngineFixture("EngineEventsTest") {}
  EngineOptions WriteThrough() {
    EngineOptions o = OnDisk(64 << 10);
    o.write_through = true;
    return o;
  }
};

TEST_F(EngineEventsTest, OpenEmitsTheHotTiersClearedFirst) {
  EngineOptions o;
  o.hot_capacity_bytes = 1 << 20;
  auto engine = Open(o);
  ASSERT_OK_AND_ASSIGN(KvEventPage page, engine->Events(0));
  ASSERT_FALSE(page.events.empty());
  EXPECT_EQ(page.events[0].kind, KvEventKind::kCleared);
  EXPECT_EQ(page.events[0].tier, TierLevel::kHot);
  const KvEventLogStats s = engine->EventLogStats();
  EXPECT_TRUE(s.enabled);
  EXPECT_FALSE(s.persistent);
  EXPECT_EQ(s.head_seq, page.events.back().seq);
}

TEST_F(EngineEventsTest, EventLogOffIsNotSupportedAndKeepsNothing) {
  EngineOptions o = OnDisk();
  o.event_log = false;
  auto engine = Open(o);
  EXPECT_EQ(engine->Events(0).status().code(), StatusCode::kNotSupported);
  EXPECT_FALSE(engine->EventLogStats().enabled);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "events"));
}

// A wait of 18446744073710 ms or more is more nanoseconds than a uint64
// holds: multiplied unbounded it wrapped (to 0.45 ms there) and Events
// returned at once with nothing. On the fake clock: a second passes and the
// waiter still waits; the next event wakes it.
TEST_F(EngineEventsTest, AWaitPastTheNanosecondsOfAUint64WaitsForTheNextEvent) {
  EngineOptions o;
  o.hot_capacity_bytes = 1 << 20;
  o.clock = &clock_;
  auto engine = Open(o);
  ASSERT_NE(engine, nullptr);
  const uint64_t next = engine->EventLogStats().head_seq + 1;
  std::atomic<bool> done{false};
  StatusOr<KvEventPage> page = Status::Internal("not read");
  std::thread waiter([&] {
    page = engine->Events(next, 16, /*wait_ms=*/18'446'744'073'710);
    done.store(true);
  });
  // The waiter is in its wait by then (were it not, its deadline would come
  // after the advance: the check weaker, never a false failure); the fake
  // clock's wait looks at the time every millisecond.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  clock_.AdvanceMillis(1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load()) << "the wait ended after a second";
  ASSERT_OK(engine->PutValue("k", SharedBytes::Copy("v")));
  waiter.join();
  ASSERT_OK(page);
  ASSERT_EQ(page->events.size(), 1u);
  EXPECT_EQ(page->events[0].seq, next);
}

TEST_F(EngineEventsTest, BadRetentionIsRefused) {
  EngineOptions o = OnDisk();
  o.event_retention_bytes = 100;
  EXPECT_TRUE(Engine::Open(Quiet(o)).status().IsInvalidArgument());
}

TEST_F(EngineEventsTest, ConsumerHoldsTheSsdKeySetAfterEveryReopen) {
  Consumer c;
  for (int run = 0; run < 3; ++run) {
    auto engine = Open(WriteThrough());
    for (int i = 0; i < 40; ++i) {
      ASSERT_OK(
          engine->PutValue("k" + std::to_string(run * 20 + i), SharedBytes::Copy("v")));
    }
    for (int i = 0; i < 10; ++i) {
      ASSERT_OK(engine->DeleteValue("k" + std::to_string(run * 20 + i)));
    }
    c.CatchUp(*engine);  // live: the tiers' own events
    EXPECT_EQ(c.ssd, SsdKeys(*engine)) << "run " << run;
    ASSERT_OK(engine->Close());
    engine = Open(WriteThrough());
    EXPECT_EQ(engine->EventLogStats().reconciled, 0u)
        << "a clean close needs no correction";
    c.CatchUp(*engine);
    EXPECT_EQ(c.ssd, SsdKeys(*engine)) << "run " << run;
    EXPECT_TRUE(c.hot.empty());
  }
  EXPECT_EQ(c.resnapshots, 0);
}

// The hot tier's blocks are gone at every open, also at one without a hot
// tier (the same data directory reopened SSD-only): a consumer resuming
// across it must hold an empty hot set, as the log's own snapshot does. The
// kCleared was emitted only when the new run had a hot tier, so the consumer
// kept the last run's RAM blocks for good (a router sent their prefixes to a
// node that held none of them).
TEST_F(EngineEventsTest, AnOpenWithoutAHotTierClearsTheHotSetAllTheSame) {
  Consumer c;
  auto engine = Open(OnDisk(1 << 20));
  ASSERT_OK(engine->PutValue("k", SharedBytes::Copy("v")));
  c.CatchUp(*engine);
  ASSERT_FALSE(c.hot.empty());
  ASSERT_OK(engine->Close());
  EngineOptions ssd_only = OnDisk(0);
  engine = Open(ssd_only);
  ASSERT_NE(engine, nullptr);
  c.CatchUp(*engine);
  EXPECT_EQ(c.resnapshots, 0);
  EXPECT_TRUE(c.hot.empty()) << c.hot.size() << " hot blocks of the last run";
  EXPECT_EQ(c.ssd, SsdKeys(*engine));
  ASSERT_OK_AND_ASSIGN(KvEventSnapshot snap, engine->EventSnapshot());
  EXPECT_TRUE(snap.hot.empty());
}

TEST_F(EngineEventsTest, DeletedLogRestartsAboveTheOldNumbersAndIsReconciled) {
  Consumer c;
  {
    auto engine = Open(WriteThrough());
    for (int i = 0; i < 20; ++i) {
      ASSERT_OK(engine->PutValue("k" + std::to_string(i), SharedBytes::Copy("v")));
    }
    c.CatchUp(*engine);
  }
  // The log is gone (an operator removed it): the new one numbers above the
  // old, reconciles the SSD key set into the stream, and the old consumer is
  // told to resnapshot.
  std::filesystem::remove_all(dir_.path() / "events");
  auto engine = Open(WriteThrough());
  EXPECT_TRUE(engine->Events(c.next).status().IsOutOfRange());
  c.CatchUp(*engine);
  EXPECT_EQ(c.resnapshots, 1);
  EXPECT_EQ(c.ssd, SsdKeys(*engine));
  EXPECT_EQ(c.ssd.size(), 20u);
  EXPECT_EQ(engine->EventLogStats().reconciled, 20u);
  Consumer fresh;  // from the start of the new log: the same set
  fresh.CatchUp(*engine);
  EXPECT_EQ(fresh.ssd, c.ssd);
  EXPECT_EQ(fresh.resnapshots, 0);
}

TEST_F(EngineEventsTest, ConsumerBehindRetentionIsToldToResnapshot) {
  EngineOptions o = WriteThrough();
  o.event_retention_bytes = 16 << 10;
  auto engine = Open(o);
  Consumer c;
  c.CatchUp(*engine);
  for (int i = 0; i < 400; ++i) {
    ASSERT_OK(engine->PutValue("k" + std::to_string(i), SharedBytes::Copy("v")));
  }
  EXPECT_TRUE(engine->Events(c.next).status().IsOutOfRange());
  c.CatchUp(*engine);
  EXPECT_EQ(c.resnapshots, 1);
  EXPECT_EQ(c.ssd, SsdKeys(*engine));
  EXPECT_EQ(c.ssd.size(), 400u);
}

// In write-back mode a put into the hot tier emits its event under the
// tier's lock: it completes while the event log's files stall.
TEST_F(EngineEventsTest, HotPutsCompleteWhileTheEventLogsWritesStall) {
  GatedFileSystem fs;
  EngineOptions o = OnDisk(16 << 20);
  o.file_system = &fs;
  auto engine = Open(o);
  ASSERT_NE(engine, nullptr);
  fs.Arm("/events/");
  constexpr int kPuts = 3000;  // 267 KB of event records
  std::atomic<int> done{0};
  std::thread writer([&] {
    for (int i = 0; i < kPuts; ++i) {
      EXPECT_OK(engine->PutValue("k" + std::to_string(i), SharedBytes::Copy("v")));
      done.store(i + 1);
    }
  });
  fs.gate().WaitForArrivals(1);
  const bool all = testing::WaitUntil([&] { return done.load() == kPuts; });
  const int before_open = done.load();
  fs.gate().Open();
  writer.join();
  EXPECT_TRUE(all) << "a put waited for the event log's file after " << before_open;
  Consumer c;
  c.CatchUp(*engine);
  EXPECT_EQ(c.hot.size(), static_cast<size_t>(kPuts));
}

// The child of the kill loop: puts and deletes raw keys in write-through
// mode until it is killed. Never returns.
[[noreturn]] void RunWriter(const EngineOptions& options, uint64_t seed) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(Quiet(options));
  if (!engine.ok()) _exit(3);
  std::mt19937_64 rng(seed);
  for (;;) {
    const std::string key = "k" + std::to_string(rng() % 200);
    if (rng() % 3 == 0) {
      (void)(*engine)->DeleteValue(key);
    } else {
      (void)(*engine)->PutValue(key,
                                SharedBytes::Copy(std::string(100 + rng() % 900, 'x')));
    }
  }
}

TEST_F(EngineEventsTest, KillLoopConsumerEqualsTheSsdTierAfterEveryRestart) {
  const uint64_t seed = TestSeed("EngineEventsTest.KillLoop");
  std::mt19937_64 rng(seed);
  const uint64_t rounds = Iterations(4, 40);
  Consumer c;
  for (uint64_t round = 0; round < rounds; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) RunWriter(WriteThrough(), seed + round);
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 250));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited with " << status;
    auto engine = Open(WriteThrough());
    ASSERT_NE(engine, nullptr);
    c.CatchUp(*engine);
    EXPECT_EQ(c.ssd, SsdKeys(*engine)) << "round " << round << " seed " << seed;
    ASSERT_OK(engine->Close());
  }
  // Every event the consumer read was kept: it never had to resnapshot.
  EXPECT_EQ(c.resnapshots, 0);
}

// Random stores, restores, value puts, deletes and expiries on small tiers
// in write-back mode (dirty hot blocks written below at eviction and at
// Close), a clean Close and reopen every round: a consumer reading the log
// holds every tier's exact key set, live and after each reopen, without a
// resnapshot and without a correction.
TEST_F(EngineEventsTest, ConsumerOfTheLogHoldsEveryTierAcrossWriteBackReopens) {
  const uint64_t seed = TestSeed("EngineEventsTest.WriteBackReopens");
  std::mt19937_64 rng(seed);
  EngineOptions o = OnDiskOnFakeClock();
  o.hot_capacity_bytes = 48 << 10;
  o.ssd_capacity_bytes = 64 << 10;
  Consumer c;
  const auto expect_exact = [&](Engine& e, const std::vector<Namespace>& models,
                                const std::string& where) {
    c.CatchUp(e);
    EXPECT_EQ(c.ssd, SsdKeys(e)) << where << " seed " << seed;
    std::set<BlockKey> hot;
    for (Namespace ns : models) {
      EngineHotTier(e, ns)->ForEach(
          [&](const BlockMeta& m, uint64_t) { hot.insert(m.key); });
    }
    for (const BlockKey& k : hot)
      EXPECT_TRUE(c.hot.contains(k)) << where << " hot " << k.ToHex() << " seed " << seed;
    for (const BlockKey& k : c.hot) {
      EXPECT_TRUE(EngineHotBudget(e)->HoldsNow(kEveryOwner, k))
          << where << " hot " << k.ToHex() << " seed " << seed;
    }
    EXPECT_EQ(c.hot.size(), EngineHotBudget(e)->Totals().entries) << where;
    StatusOr<KvEventSnapshot> snap = e.EventSnapshot();
    ASSERT_OK(snap);
    std::set<BlockKey> snap_hot, snap_ssd;
    for (const KvSnapshotBlock& b : snap->hot) snap_hot.insert(b.key);
    for (const KvSnapshotBlock& b : snap->ssd) snap_ssd.insert(b.key);
    EXPECT_EQ(snap_hot, c.hot) << where;
    EXPECT_EQ(snap_ssd, c.ssd) << where;
  };
  for (int run = 0; run < 6; ++run) {
    auto e = Open(o);
    ASSERT_NE(e, nullptr);
    std::vector<Namespace> models = {e->RegisterModel(KvSpec("a")).value(),
                                     e->RegisterModel(KvSpec("b")).value()};
    EXPECT_EQ(e->EventLogStats().reconciled, 0u) << "run " << run << " seed " << seed;
    expect_exact(*e, models, "open " + std::to_string(run));
    for (int op = 0; op < 60; ++op) {
      const Namespace ns = models[rng() % 2];
      const int what = static_cast<int>(rng() % 100);
      const int32_t prefix = static_cast<int32_t>(rng() % 4) * 1000;
      const size_t blocks = 1 + rng() % 12;
      const std::vector<int32_t> tokens = Tokens(blocks * kBlockTokens, prefix);
      const std::string key = "v" + std::to_string(rng() % 10);
      if (what < 45) {
        (void)e->Store(ns, tokens, KvLayers(2, static_cast<int64_t>(tokens.size()), rng));
      } else if (what < 70) {
        if (StatusOr<MatchResult> m = e->Match(ns, tokens); m.ok()) (void)e->Restore(*m);
      } else if (what < 82) {
        ASSERT_OK(e->PutValue(key, SharedBytes::Copy(std::string(700, 'x'))));
      } else if (what < 90) {
        ASSERT_OK(e->DeleteValue(key).status());
      } else {
        SetValueOptions so;
        so.expires_at_unix_ms = clock_.UnixMillis() + 5;
        ASSERT_OK(
            e->SetValue(key, SharedBytes::Copy(std::string_view("s")), so).status());
        clock_.AdvanceMillis(10);
      }
    }
    ASSERT_OK(e->Flush());
    expect_exact(*e, models, "run " + std::to_string(run));
    ASSERT_OK(e->Close());
  }
  EXPECT_EQ(c.resnapshots, 0) << "seed " << seed;
}

// A consumer reading part of the stream, then the engine closed and one of
// its event log's files damaged (truncated, a byte flipped, deleted): after
// the reopen the consumer, resuming (or resnapshotting when told to), holds
// the SSD tier's exact key set and an empty hot tier.
TEST_F(EngineEventsTest, ConsumerIsExactAfterAnyDamageToTheLogsFiles) {
  const uint64_t seed = TestSeed("EngineEventsTest.DamagedLog");
  std::mt19937_64 rng(seed);
  EngineOptions o = WriteThrough();
  o.ssd_capacity_bytes = 48 << 10;
  o.event_retention_bytes = 64 << 10;  // 8 KiB segments
  Consumer c;
  std::string damages;
  for (int run = 0; run < 12; ++run) {
    SCOPED_TRACE("run " + std::to_string(run) + " seed " + std::to_string(seed) +
                 " damage:" + damages);
    auto e = Open(o);
    ASSERT_NE(e, nullptr);
    c.CatchUp(*e);
    EXPECT_EQ(c.ssd, SsdKeys(*e));
    EXPECT_TRUE(c.hot.empty());
    const int ops = 20 + static_cast<int>(rng() % 100);
    const int read_at = static_cast<int>(rng() % ops);
    for (int op = 0; op < ops; ++op) {
      const std::string key = "k" + std::to_string(rng() % 60);
      if (rng() % 3 == 0) {
        ASSERT_OK(e->DeleteValue(key).status());
      } else {
        ASSERT_OK(
            e->PutValue(key, SharedBytes::Copy(std::string(1 + rng() % 3000, 'v'))));
      }
      if (op == read_at) c.CatchUp(*e);  // a consumer part of the way
    }
    ASSERT_OK(e->Close());
    e.reset();
    ASSERT_TRUE(DamageOneFile(dir_.path() / "events", rng, run, &damages));
  }
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  c.CatchUp(*e);
  EXPECT_EQ(c.ssd, SsdKeys(*e)) << "seed " << seed << damages;
}

}  // namespace
}  // namespace prefixkv::testing
