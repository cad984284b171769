// EventLog: the engine's KV event log (docs/events.md). It numbers every
// event, keeps the recent ones for readers (Engine::Events, XREAD) within a
// byte and age retention, and keeps the key set per tier the events add up
// to (Engine::EventSnapshot).
//
// Append runs inside the tiers' locks, so it does as little as it can: under
// a leaf mutex of its own (append_mu_) it numbers the event and copies it
// into a RAM queue (two vectors swapped, so no allocation once warm), and
// returns. Everything else happens later, in order, under the log's mutex
// (mu_), by whoever "processes" the queue: the log's writer thread, or a
// reader that needs the state now (Read, Range, Snapshot, Stats, SsdKeys,
// Watch, Flush). Processing an event: start a segment when the current one
// is full, encode its CRC-framed record (event_log_file.h), retain it for
// readers, apply it to the key sets, trim by retention. Then the writer
// does the file work outside mu_: writes the records (one write per batch),
// creates segments, deletes the ones retention dropped, reserves sequence
// numbers ahead (when half of the reservation is used) and checkpoints the
// SSD key set every `checkpoint_events`. The queue is bounded
// (kEventQueueLimitBytes of records not yet taken by the writer): when the
// writer falls that far behind (a stalled disk), Append waits for it
// (counted: KvEventLogStats::append_waits), never drops an event. Readers
// (Read, Range, Snapshot) and Flush write the queue themselves first, so a
// reader is never handed an event a kill -9 could take back, and
// Flush(sync) makes them survive power loss too.
//
// Sequence numbers are reserved ahead in a small file, and no record is
// written before the reservation covering its number is durable, so a
// number a reader saw is never handed out again after a crash: the log
// resumes above the reservation, and the skipped numbers are a gap readers
// cannot cross (Read: OutOfRange, resnapshot). The SSD key set is
// checkpointed at open, periodically and at Close, and rebuilt at open from
// the last checkpoint plus the events after it (Engine's reconciliation
// compares it with the SSD tier).
//
// In RAM (no directory): the same retention and queue, nothing survives. A
// new log (RAM, or no files yet) starts numbering above the clock's
// milliseconds times 65536, so a reader of an earlier run or of a deleted
// log is told to resnapshot rather than handed another log's numbers.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "event_log_file.h"
#include "key_table.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/clock.h"
#include "prefixkv/file_system.h"
#include "prefixkv/kv_events.h"
#include "prefixkv/status.h"

namespace prefixkv::internal {

struct EventLogOptions {
  // Directory of the segment files; empty: RAM only.
  std::string dir;
  FileSystem* fs = FileSystem::Default();
  Clock* clock = Clock::System();
  // Retention: the oldest segment is dropped while the log is over
  // retention_bytes or its newest event is older than retention_ms (the
  // segment being written is never dropped).
  uint64_t retention_bytes = uint64_t{64} << 20;
  uint64_t retention_ms = uint64_t{24} * 3600 * 1000;
  // Bytes per segment; 0: retention_bytes / 8, at least 4 KiB.
  uint64_t segment_bytes = 0;
  // The first number of a new log (no files yet, or RAM); 0: the clock's
  // Unix milliseconds times 65536, so that a consumer of a log that was
  // deleted, or of an earlier RAM run, is never handed another log's numbers
  // (it is told to resnapshot). Tests set 1.
  uint64_t first_seq = 0;
  // Sequence numbers reserved durably at a time (the writer reserves the
  // next range when half of the current one is handed out).
  uint64_t reserve_ahead = uint64_t{1} << 16;
  // Events between two checkpoints of the SSD key set (by the writer
  // thread); 0: a segment's worth (segment_bytes / kEventRecordBytes), so a
  // checkpoint is never older than retention and the reconciliation after
  // a kill -9 replays at most that many events.
  uint64_t checkpoint_events = 0;
  // Receives one line per notable event (a torn tail cut, a write error).
  std::function<void(std::string_view)> log;
};

// Events queued before Append wakes the writer thread (64 KiB of records).
inline constexpr uint64_t kEventWakeEvents = (64 << 10) / kEventRecordBytes;
// Records appended and not yet taken by the writer at most: Append waits
// for the writer beyond it (about 47,000 events; besides the batch being
// written).
inline constexpr size_t kEventQueueLimitBytes = 4 << 20;
// The least segment size (EventLogOptions::segment_bytes).
inline constexpr uint64_t kMinEventSegmentBytes = 4096;

using KvKeySet = std::unordered_map<BlockKey, KvSnapshotBlock, BlockKeyHash>;

class EventLog {
 public:
  // Opens (creating the directory) or starts a RAM log. IOError when the
  // directory cannot be used.
  static StatusOr<std::unique_ptr<EventLog>> Open(const EventLogOptions& options);
  ~EventLog();

  // Numbers `e` (e.seq) and queues it; wakes the watchers it satisfies
  // (their callbacks run on this thread, after the log's locks are
  // released). No encoding, no file work, no key-set update here: the
  // writer thread (or the next reader) processes the queue. Waits only when
  // kEventQueueLimitBytes of records are not yet taken by the writer.
  void Append(KvEvent& e) EXCLUDES(io_mu_, mu_, append_mu_);
  // Writes the queued records (they then survive a kill -9); with `sync`
  // also fdatasyncs them (they survive power loss). OK in RAM. IOError when
  // a write failed since the last Flush, whichever thread made it (the
  // writer thread may have taken the records first): events appended before
  // the call are then missing from the files (a gap, Read's OutOfRange).
  Status Flush(bool sync) EXCLUDES(io_mu_, mu_);

  // Up to `max_events` events with seq >= from_seq (0 reads as 1).
  // OutOfRange when the events between the reader's last one (from_seq - 1)
  // and the next are not all in the log: older than retention, numbers lost
  // in a crash, or beyond the head. The reader must resnapshot.
  // Writes the buffered records first: a reader is never handed an event a
  // kill -9 could take back.
  StatusOr<KvEventPage> Read(uint64_t from_seq, size_t max_events) EXCLUDES(io_mu_, mu_);
  // Up to `max_events` retained events with first_seq <= seq <= last_seq,
  // ascending (descending with `reverse`, from last_seq down). No gap check:
  // a range read (XRANGE) shows what is kept.
  std::vector<KvEvent> Range(uint64_t first_seq, uint64_t last_seq, size_t max_events,
                             bool reverse) EXCLUDES(io_mu_, mu_);
  // Calls `wake` once when an event with seq >= from_seq is appended, at
  // once (on this thread) when one is already there or from_seq must
  // resnapshot. Returns an id for Unwatch (0 when it already ran).
  uint64_t Watch(uint64_t from_seq, std::function<void()> wake) EXCLUDES(mu_, append_mu_);
  // Forgets a watch (no-op when it ran).
  void Unwatch(uint64_t id) EXCLUDES(append_mu_);

  // Writes the queued records first (the snapshot's seq is one a reader
  // may continue after). With a `count` below the key count, one page of it
  // (Engine::EventSnapshotPage): the blocks with key.hi in [cursor,
  // next_cursor), next_cursor sized for about `count` blocks.
  // Unavailable when its seq is above the numbers the SEQ file reserves (a
  // failed reservation): a reopen could hand that number out again.
  StatusOr<KvEventSnapshot> Snapshot(uint64_t cursor = 0, size_t count = SIZE_MAX)
      EXCLUDES(io_mu_, mu_);
  KvEventLogStats Stats() EXCLUDES(mu_, append_mu_);
  // The SSD key set as the events say; whether the log could rebuild it at
  // open (false: no checkpoint, or the events after it were trimmed).
  KvKeySet SsdKeys() EXCLUDES(mu_, append_mu_);
  bool ssd_keys_proven() const { return ssd_keys_proven_; }
  void CountReconciled(uint64_t n) EXCLUDES(mu_);
  // Writes the SSD key set checkpoint at the head (persistent logs).
  Status Checkpoint() EXCLUDES(io_mu_, mu_);
  // Stops the writer thread, writes every queued record, checkpoints and
  // closes the files; Append after it keeps events in RAM.
  Status Close() EXCLUDES(io_mu_, mu_);

 private:
  struct Segment {
    uint64_t prev_seq = 0;  // the event before its first one (0: none)
    uint64_t last_seq = 0;
    uint64_t count = 0;
    uint64_t bytes = 0;
    int64_t last_unix_ms = 0;
    std::string path;  // empty in RAM
  };
  // A file operation queued by Append for the writer, in order.
  struct FileOp {
    enum Kind { kWrite, kCreate, kDelete } kind = kWrite;
    std::string bytes;       // kWrite: records of consecutive seqs
    uint64_t first_seq = 0;  // kWrite: the first record's seq
    uint64_t prev_seq = 0;   // kCreate: the segment header's
    std::string path;        // kCreate, kDelete
  };
  // What the writer took from the queue at once.
  struct Batch {
    std::vector<FileOp> ops;  // the last one is the tail of records
    uint64_t head = 0;        // the last seq handed out when taken
  };

  explicit EventLog(const EventLogOptions& options);
  Status Load() EXCLUDES(io_mu_, mu_);
  Status LoadSegments() REQUIRES(mu_);
  // Takes the events appended so far (in order) and processes them: records
  // queued for the writer, retained, applied to the key sets, trimmed.
  void Process() REQUIRES(mu_) EXCLUDES(append_mu_);
  void Apply(const KvEvent& e) REQUIRES(mu_);
  void Record(const KvEvent& e, uint64_t bytes) REQUIRES(mu_);
  // Makes the SEQ reservation durable above `last_seq` (the last record
  // about to be written) and, once half of it is handed out, above `head`.
  Status Reserve(uint64_t last_seq, uint64_t head) REQUIRES(io_mu_);
  // Starts the segment whose first event is `first_seq`: in RAM, or queued
  // for the writer.
  void StartSegment(uint64_t first_seq) REQUIRES(mu_);
  void Enqueue(FileOp op) REQUIRES(mu_);
  // Drops old segments; `now_unix_ms`: the newest event's time (the clock
  // is not read again per event).
  void Trim(int64_t now_unix_ms) REQUIRES(mu_);
  // Whether a reader whose last event was `last_seen` may go on: the log
  // holds that event (or it is the one before the first retained), and the
  // event after it follows it (is not a break).
  bool Continues(uint64_t last_seen) const REQUIRES(mu_);
  bool IsBreak(uint64_t seq) const REQUIRES(mu_);
  // Processes the queue, takes its records and file operations (running
  // `at_head` under mu_ at that point) and does their file work; with
  // `sync` fdatasyncs the segment. The writer thread and every caller that
  // needs the records written go through it.
  Status Drain(bool sync, const std::function<void()>& at_head = {}) REQUIRES(io_mu_)
      EXCLUDES(mu_, append_mu_);
  // The file work of one batch; the count of writes that failed.
  uint64_t WriteBatch(Batch& batch) REQUIRES(io_mu_) EXCLUDES(mu_);
  Status CreateSegmentFile(const std::string& path, uint64_t prev_seq) REQUIRES(io_mu_);
  // Drains, syncs and writes the SSD key set checkpoint at the batch head;
  // `close`: the log queues no more records.
  Status CheckpointDrained(bool close) REQUIRES(io_mu_) EXCLUDES(mu_, append_mu_);
  void WakeWriter() REQUIRES(append_mu_);
  void WriterLoop() EXCLUDES(io_mu_, mu_, append_mu_);
  void StopWriter() EXCLUDES(io_mu_, mu_, append_mu_);
  void Log(const std::string& line) const;
  uint64_t segment_bytes() const;
  uint64_t checkpoint_events() const;
  uint64_t FirstSeq() const;

  const EventLogOptions options_;
  bool ssd_keys_proven_ = false;  // set by Load
  // The file side: held across a batch's file work (never by Append).
  Mutex io_mu_ ACQUIRED_BEFORE(mu_);
  std::unique_ptr<EventSegmentWriter> writer_ GUARDED_BY(io_mu_);  // null in RAM
  uint64_t durable_reserved_ GUARDED_BY(io_mu_) = 0;  // the SEQ file's ceiling
  std::string spare_ GUARDED_BY(io_mu_);  // the writer's buffer, swapped with pending_
  bool logged_write_error_ GUARDED_BY(io_mu_) = false;
  std::thread writer_thread_;  // until Close

  // The processed state: retained events, segments, key sets, the records
  // and file operations queued for the writer.
  mutable Mutex mu_ ACQUIRED_BEFORE(append_mu_);
  std::deque<KvEvent> events_ GUARDED_BY(mu_);
  std::deque<Segment> segments_ GUARDED_BY(mu_);
  std::vector<KvEvent> processing_ GUARDED_BY(mu_);  // swapped with queue_
  // The file operations, then the records after them.
  std::vector<FileOp> ops_ GUARDED_BY(mu_);
  std::string pending_ GUARDED_BY(mu_);
  uint64_t pending_first_seq_ GUARDED_BY(mu_) = 0;
  uint64_t pending_events_ GUARDED_BY(mu_) = 0;  // records in ops_ and pending_
  bool files_ GUARDED_BY(mu_) = false;  // persistent and not closed: queue records
  uint64_t written_seq_ GUARDED_BY(mu_) =
      0;  // records through it were written (or failed)
  uint64_t trimmed_seq_ GUARDED_BY(mu_) = 0;  // first segment's prev_seq
  // Retained events that do not follow the event before them: events before
  // them were numbered but never written (a failed write, found at open).
  // Ascending; few. break_next_: the next event recorded is one.
  std::vector<uint64_t> breaks_ GUARDED_BY(mu_);
  bool break_next_ GUARDED_BY(mu_) = false;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  KeyTable hot_ GUARDED_BY(mu_);
  KeyTable ssd_ GUARDED_BY(mu_);
  KvEventLogStats counts_ GUARDED_BY(mu_);
  // counts_.write_errors when Flush last returned: what it has reported.
  uint64_t flush_reported_errors_ GUARDED_BY(mu_) = 0;

  // The append side: a leaf, held by Append only to number and queue.
  Mutex append_mu_;
  CondVar writer_cv_;  // the writer waits for work
  CondVar space_cv_;   // Append waits for room in the queue
  std::vector<KvEvent> queue_ GUARDED_BY(append_mu_);  // appended, not processed
  uint64_t next_seq_ GUARDED_BY(append_mu_) = 1;
  uint64_t appended_ GUARDED_BY(append_mu_) = 0;  // since open
  // Appended and not yet taken by the writer (in queue_, or processed into
  // records the writer has not taken): Append's bound.
  uint64_t untaken_ GUARDED_BY(append_mu_) = 0;
  uint64_t append_waits_ GUARDED_BY(append_mu_) = 0;
  uint64_t reserved_ GUARDED_BY(append_mu_) = 0;         // durable_reserved_ as last seen
  uint64_t checkpointed_at_ GUARDED_BY(append_mu_) = 0;  // appended_ then
  bool wake_ GUARDED_BY(append_mu_) = false;             // the writer has work
  bool stop_ GUARDED_BY(append_mu_) = false;             // the writer exits
  bool writer_running_ GUARDED_BY(append_mu_) = false;   // else Append processes
  uint64_t next_watch_ GUARDED_BY(append_mu_) = 1;
  struct Watcher {
    uint64_t from_seq;
    std::function<void()> wake;
  };
  std::map<uint64_t, Watcher> watchers_ GUARDED_BY(append_mu_);
};

}  // namespace prefixkv::internal
