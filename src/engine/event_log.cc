// EventLog (event_log.h): numbering, appending, retention, readers, the key
// sets, and the writer thread that does the file work. Opening a persistent
// log: the segments are scanned in order and cut at the first torn or
// damaged record (later segments are dropped: they cannot follow a hole),
// the next number is put above the SEQ reservation, and the SSD key set is
// rebuilt from the checkpoint and the events after it.
//
// Locks: io_mu_ (the files: held across a batch's writes) before mu_ (the
// processed state: never held across a file operation) before append_mu_
// (the queue of appended events: a leaf). Append takes only append_mu_
// (and mu_ to process the queue itself when no writer thread runs).
#include "event_log.h"

#include <algorithm>
#include <limits>

namespace prefixkv::internal {
namespace {

// After a damaged SEQ file the log resumes this far above its last event:
// more numbers than a run can have handed out past its reservation.
constexpr uint64_t kSeqJumpAfterDamage = uint64_t{1} << 40;

KvSnapshotBlock BlockOf(const KvEvent& e) {
  return {.namespace_id = e.namespace_id,
          .key = e.key,
          .parent = e.parent,
          .owner = e.owner,
          .bytes = e.bytes};
}

// The oldest last event time a segment may have to be kept: a retention
// beyond the clock's reach (serve --event-retention-ms 18446744073709551615,
// "keep by bytes only") keeps every age. Cast to int64 such a retention was
// negative, so `oldest` lay in the future and each append dropped every
// segment but the one being written.
int64_t OldestKeptUnixMs(int64_t now_unix_ms, uint64_t retention_ms) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (retention_ms > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      now_unix_ms < kMin + static_cast<int64_t>(retention_ms))
    return kMin;
  return now_unix_ms - static_cast<int64_t>(retention_ms);
}

}  // namespace

EventLog::EventLog(const EventLogOptions& options) : options_(options) {
  MutexLock lock(&mu_);
  MutexLock a(&append_mu_);
  queue_.reserve(2 * kEventWakeEvents);
  processing_.reserve(2 * kEventWakeEvents);
}

EventLog::~EventLog() {
  StopWriter();
  MutexLock io(&io_mu_);
  {
    // A log whose Load failed before its first segment (events/ is a file,
    // a fresh SEQ could not be written) has no head to drain to: Drain read
    // segments_.back() of none and crashed the failing open.
    MutexLock lock(&mu_);
    if (segments_.empty()) return;
  }
  (void)Drain(false);
}

void EventLog::StopWriter() {
  {
    MutexLock lock(&append_mu_);
    stop_ = true;
    writer_running_ = false;  // Append processes the queue itself from now on
    writer_cv_.NotifyAll();
    space_cv_.NotifyAll();
  }
  if (writer_thread_.joinable()) writer_thread_.join();
}

void EventLog::WakeWriter() {
  if (wake_) return;
  wake_ = true;
  writer_cv_.NotifyOne();
}

void EventLog::WriterLoop() {
  for (;;) {
    bool checkpoint = false;
    {
      MutexLock lock(&append_mu_);
      // A due checkpoint is work even when another thread's Drain took the
      // records (and cleared wake_) before this thread woke.
      const auto due = [this]() REQUIRES(append_mu_) {
        return !options_.dir.empty() &&
               appended_ - checkpointed_at_ >= checkpoint_events();
      };
      writer_cv_.Wait(lock,
                      [&]() REQUIRES(append_mu_) { return wake_ || stop_ || due(); });
      if (stop_) return;
      checkpoint = due();
    }
    MutexLock io(&io_mu_);
    if (checkpoint) {
      Status s = CheckpointDrained(/*close=*/false);
      if (!s.ok()) Log("checkpoint failed: " + s.ToString());
    } else {
      (void)Drain(false);  // write errors are counted and logged
    }
  }
}

StatusOr<std::unique_ptr<EventLog>> EventLog::Open(const EventLogOptions& options) {
  std::unique_ptr<EventLog> log(new EventLog(options));
  PKV_RETURN_IF_ERROR(log->Load());
  return log;
}

void EventLog::Log(const std::string& line) const {
  if (options_.log) options_.log("event log: " + line);
}

uint64_t EventLog::segment_bytes() const {
  const uint64_t s =
      options_.segment_bytes > 0 ? options_.segment_bytes : options_.retention_bytes / 8;
  return std::max(s, kMinEventSegmentBytes);
}

uint64_t EventLog::checkpoint_events() const {
  if (options_.checkpoint_events > 0) return options_.checkpoint_events;
  return std::max<uint64_t>(1, segment_bytes() / kEventRecordBytes);
}

uint64_t EventLog::FirstSeq() const {
  if (options_.first_seq > 0) return options_.first_seq;
  return std::max<uint64_t>(1, options_.clock->UnixMillis() << 16);
}

Status EventLog::Load() {
  MutexLock io(&io_mu_);
  MutexLock lock(&mu_);
  MutexLock a(&append_mu_);
  counts_.enabled = true;
  counts_.persistent = !options_.dir.empty();
  counts_.retention_bytes = options_.retention_bytes;
  counts_.retention_ms = options_.retention_ms;
  if (options_.dir.empty()) {
    next_seq_ = FirstSeq();
    reserved_ = UINT64_MAX;
    segments_.push_back({});
    ssd_keys_proven_ = true;
    writer_running_ = true;
    writer_thread_ = std::thread([this] { WriterLoop(); });
    return Status::OK();
  }
  PKV_RETURN_IF_ERROR(options_.fs->CreateDir(options_.dir));
  PKV_RETURN_IF_ERROR(LoadSegments());
  const uint64_t last = segments_.empty() ? 0 : segments_.back().last_seq;
  StatusOr<uint64_t> reserved = ReadSeqReservation(options_.fs, options_.dir);
  if (reserved.ok()) {
    next_seq_ = std::max(last + 1, *reserved);
  } else if (reserved.status().IsNotFound() && segments_.empty()) {
    next_seq_ = FirstSeq();
  } else {
    Log(reserved.status().ToString() + ": numbering resumes far above seq " +
        std::to_string(last));
    next_seq_ = last + kSeqJumpAfterDamage;
  }
  PKV_RETURN_IF_ERROR(Reserve(next_seq_, next_seq_));
  reserved_ = durable_reserved_;
  written_seq_ = next_seq_ - 1;
  // The SSD key set: the checkpoint (or nothing at seq 0) plus every event
  // after it, when the log still holds all of them.
  SsdKeysCheckpoint base;
  StatusOr<SsdKeysCheckpoint> c = ReadSsdKeysCheckpoint(options_.fs, options_.dir);
  if (c.ok()) {
    base = std::move(*c);
  } else if (!c.status().IsNotFound()) {
    Log(c.status().ToString());
    base.seq = UINT64_MAX;  // proves nothing
  }
  // (No break after it either: the set would miss the unwritten events.)
  ssd_keys_proven_ = base.seq <= last && Continues(base.seq) &&
                     (breaks_.empty() || breaks_.back() <= base.seq);
  if (ssd_keys_proven_) {
    for (const KvSnapshotBlock& b : base.blocks) ssd_.Put(b);
    for (const KvEvent& e : events_) {
      if (e.seq > base.seq) Apply(e);
    }
  }
  const uint64_t prev = segments_.empty() ? trimmed_seq_ : segments_.back().last_seq;
  const std::string path = EventSegmentPath(options_.dir, next_seq_);
  PKV_RETURN_IF_ERROR(CreateSegmentFile(path, prev));
  segments_.push_back({.prev_seq = prev,
                       .last_seq = prev,
                       .bytes = kEventSegmentHeaderBytes,
                       .path = path});
  bytes_ += kEventSegmentHeaderBytes;
  files_ = true;
  writer_running_ = true;
  writer_thread_ = std::thread([this] { WriterLoop(); });
  return Status::OK();
}

Status EventLog::LoadSegments() {
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> names,
                       options_.fs->ListDir(options_.dir));
  std::vector<uint64_t> seqs;
  for (const std::string& name : names) {
    if (EventSegmentSeq(name) > 0) seqs.push_back(EventSegmentSeq(name));
  }
  std::sort(seqs.begin(), seqs.end());
  bool cut = false;  // a segment went backwards: every later one is dropped
  for (uint64_t seq : seqs) {
    const std::string path = EventSegmentPath(options_.dir, seq);
    StatusOr<EventSegmentScan> scan = cut ? StatusOr<EventSegmentScan>(EventSegmentScan{})
                                          : ReadEventSegment(options_.fs, path);
    const uint64_t prev = segments_.empty() ? 0 : segments_.back().last_seq;
    const bool backwards =
        scan.ok() && !segments_.empty() &&
        (scan->prev_seq < prev || (!scan->events.empty() && scan->events[0].seq <= prev));
    if (!scan.ok() || !scan->header_ok || backwards) {
      // A segment whose header was torn at its creation (the log's last),
      // or one that does not follow the ones before it.
      if (!cut) {
        Log("dropping segment " + path + " (no valid header after seq " +
            std::to_string(prev) + ")");
      }
      cut = cut || backwards;
      break_next_ = break_next_ || backwards;
      PKV_RETURN_IF_ERROR(options_.fs->DeleteFile(path));
      continue;
    }
    if (!segments_.empty() && scan->prev_seq != prev) {
      // Its header names an event the files do not hold: the events up to
      // it were numbered but never written (a failed write).
      Log("segment " + path + " follows seq " + std::to_string(scan->prev_seq) +
          ", the log before it ends at seq " + std::to_string(prev) +
          ": readers cannot cross the gap");
      break_next_ = true;
    }
    if (scan->valid_bytes < scan->file_bytes) {
      Log("cut a torn tail of " + std::to_string(scan->file_bytes - scan->valid_bytes) +
          " bytes from " + path);
      PKV_RETURN_IF_ERROR(
          EventSegmentWriter::Reopen(options_.fs, path, scan->valid_bytes).status());
    }
    Segment s{.prev_seq = scan->prev_seq,
              .last_seq = scan->events.empty() ? scan->prev_seq : scan->events.back().seq,
              .count = scan->events.size(),
              .bytes = scan->valid_bytes,
              .last_unix_ms = scan->events.empty() ? 0 : scan->events.back().unix_ms,
              .path = path};
    if (segments_.empty()) trimmed_seq_ = s.prev_seq;
    bytes_ += s.bytes;
    segments_.push_back(std::move(s));
    for (size_t i = 0; i < scan->events.size(); ++i) {
      // Within a segment the numbers are consecutive (a reopen starts a new
      // one), unless writes failed between two records.
      if (i > 0 && scan->events[i].seq != scan->events[i - 1].seq + 1) {
        Log("seq " + std::to_string(scan->events[i - 1].seq + 1) + " to " +
            std::to_string(scan->events[i].seq - 1) + " are missing from " + path +
            ": readers cannot cross the gap");
        break_next_ = true;
      }
      if (break_next_) breaks_.push_back(scan->events[i].seq);
      break_next_ = false;
      events_.push_back(scan->events[i]);
    }
  }
  return Status::OK();
}

Status EventLog::Reserve(uint64_t last_seq, uint64_t head) {
  if (last_seq < durable_reserved_ &&
      head + options_.reserve_ahead / 2 < durable_reserved_)
    return Status::OK();
  const uint64_t through = head + options_.reserve_ahead;
  PKV_RETURN_IF_ERROR(WriteSeqReservation(options_.fs, options_.dir, through));
  durable_reserved_ = through;
  return Status::OK();
}

Status EventLog::CreateSegmentFile(const std::string& path, uint64_t prev_seq) {
  if (writer_ != nullptr) (void)writer_->Sync();  // a Flush(sync) syncs only the newest
  writer_.reset();
  PKV_ASSIGN_OR_RETURN(writer_, EventSegmentWriter::Create(options_.fs, path, prev_seq));
  return Status::OK();
}

void EventLog::Enqueue(FileOp op) {
  // No wake: the writer takes the operations with the records (it is woken
  // by the count of records not yet taken, and readers drain themselves).
  if (!pending_.empty()) {
    ops_.push_back({.kind = FileOp::kWrite,
                    .bytes = std::move(pending_),
                    .first_seq = pending_first_seq_});
    pending_.clear();
  }
  ops_.push_back(std::move(op));
}

void EventLog::StartSegment(uint64_t first_seq) {
  const uint64_t prev = segments_.empty() ? trimmed_seq_ : segments_.back().last_seq;
  if (!files_) {
    segments_.push_back({.prev_seq = prev, .last_seq = prev});
    return;
  }
  const std::string path = EventSegmentPath(options_.dir, first_seq);
  segments_.push_back({.prev_seq = prev,
                       .last_seq = prev,
                       .bytes = kEventSegmentHeaderBytes,
                       .path = path});
  bytes_ += kEventSegmentHeaderBytes;
  Enqueue({.kind = FileOp::kCreate, .prev_seq = prev, .path = path});
}

void EventLog::Append(KvEvent& e) {
  std::vector<std::function<void()>> wake;
  bool process = false;
  {
    MutexLock lock(&append_mu_);
    if (writer_running_ && untaken_ >= kEventQueueLimitBytes / kEventRecordBytes) {
      // The writer is that far behind (a stalled disk): wait for it rather
      // than drop an event or grow without bound.
      append_waits_++;
      WakeWriter();
      space_cv_.Wait(lock, [this]() REQUIRES(append_mu_) {
        return untaken_ < kEventQueueLimitBytes / kEventRecordBytes || !writer_running_;
      });
    }
    e.seq = next_seq_++;
    queue_.push_back(e);
    ++untaken_;
    ++appended_;
    if (!writer_running_) {
      process = true;
    } else if (untaken_ >= kEventWakeEvents ||
               e.seq + options_.reserve_ahead / 2 >= reserved_ ||
               appended_ - checkpointed_at_ >= checkpoint_events()) {
      WakeWriter();
    }
    if (!watchers_.empty()) {
      for (auto it = watchers_.begin(); it != watchers_.end();) {
        if (it->second.from_seq > e.seq) {
          ++it;
          continue;
        }
        wake.push_back(std::move(it->second.wake));
        it = watchers_.erase(it);
      }
    }
  }
  if (process) {
    MutexLock lock(&mu_);
    Process();
  }
  for (auto& w : wake) w();
}

void EventLog::Process() {
  {
    MutexLock a(&append_mu_);
    if (queue_.empty()) return;
    queue_.swap(processing_);  // both keep their capacity: no allocation
  }
  for (const KvEvent& e : processing_) {
    if (segments_.back().bytes >= segment_bytes()) StartSegment(e.seq);
    if (files_) {
      if (pending_.empty()) pending_first_seq_ = e.seq;
      const size_t at = pending_.size();
      pending_.resize(at + kEventRecordBytes);
      EncodeEventRecord(e, pending_.data() + at);
    }
    Record(e, kEventRecordBytes);
    Trim(e.unix_ms);
  }
  const uint64_t n = processing_.size();
  processing_.clear();
  if (files_) {
    pending_events_ += n;  // taken by the writer's Drain
    return;
  }
  MutexLock a(&append_mu_);
  untaken_ -= n;
  space_cv_.NotifyAll();
}

Status EventLog::Drain(bool sync, const std::function<void()>& at_head) {
  Batch batch;
  {
    MutexLock lock(&mu_);
    Process();
    batch.ops = std::move(ops_);
    ops_.clear();
    if (!pending_.empty()) {
      batch.ops.push_back({.kind = FileOp::kWrite,
                           .bytes = std::move(pending_),
                           .first_seq = pending_first_seq_});
      pending_ = std::move(spare_);  // the last batch's buffer, its capacity kept
      pending_.clear();
    }
    batch.head = segments_.back().last_seq;
    if (at_head) at_head();
    MutexLock a(&append_mu_);
    wake_ = false;
    untaken_ -= pending_events_;
    pending_events_ = 0;
    space_cv_.NotifyAll();
  }
  const uint64_t errors = WriteBatch(batch);
  Status s = errors > 0
                 ? Status::IOError(std::to_string(errors) + " event log writes failed")
             : sync && writer_ != nullptr ? writer_->Sync()
                                          : Status::OK();
  if (!batch.ops.empty() && batch.ops.back().kind == FileOp::kWrite) {
    spare_ = std::move(batch.ops.back().bytes);
  }
  MutexLock lock(&mu_);
  // Readers get the batch (a failed write's events from RAM), but never a
  // number the SEQ file does not reserve: a reopen after a failed
  // reservation numbers from the file's ceiling again, and would hand the
  // reader's number to another event.
  written_seq_ = std::max(written_seq_, std::min(batch.head, durable_reserved_ - 1));
  counts_.write_errors += errors;
  MutexLock a(&append_mu_);
  reserved_ = durable_reserved_;
  return s;
}

uint64_t EventLog::WriteBatch(Batch& batch) {
  if (batch.ops.empty()) return 0;
  uint64_t last = 0;  // the batch's last record
  for (const FileOp& op : batch.ops) {
    if (op.kind == FileOp::kWrite)
      last = op.first_seq + op.bytes.size() / kEventRecordBytes - 1;
  }
  // No record is written before the reservation above its number is durable.
  Status r = Reserve(last, batch.head);
  if (!r.ok()) Log("reserving sequence numbers failed: " + r.ToString());
  uint64_t errors = 0;
  for (const FileOp& op : batch.ops) {
    Status s;
    if (op.kind == FileOp::kCreate) {
      s = CreateSegmentFile(op.path, op.prev_seq);
      if (!s.ok()) Log("starting a segment failed (events kept in RAM): " + s.ToString());
      continue;
    }
    if (op.kind == FileOp::kDelete) {
      s = options_.fs->DeleteFile(op.path);
      if (!s.ok()) Log("dropping " + op.path + " failed: " + s.ToString());
      continue;
    }
    const uint64_t records = op.bytes.size() / kEventRecordBytes;
    const uint64_t allowed =
        durable_reserved_ > op.first_seq ? durable_reserved_ - op.first_seq : 0;
    const size_t n = std::min(records, allowed) * kEventRecordBytes;
    if (writer_ == nullptr) {
      s = Status::IOError("no segment file");
    } else if (n > 0) {
      s = writer_->Append(op.bytes.data(), n);
    }
    if (s.ok() && n < op.bytes.size())
      s = Status::IOError("sequence numbers not reserved");
    if (s.ok()) continue;
    ++errors;
    if (!logged_write_error_) Log("append failed (events kept in RAM): " + s.ToString());
    logged_write_error_ = true;
  }
  return errors;
}

void EventLog::Record(const KvEvent& e, uint64_t bytes) {
  if (break_next_) breaks_.push_back(e.seq);
  break_next_ = false;
  events_.push_back(e);
  Segment& s = segments_.back();
  s.last_seq = e.seq;
  s.count++;
  s.bytes += bytes;
  s.last_unix_ms = e.unix_ms;
  bytes_ += bytes;
  counts_.appended++;
  Apply(e);
}

void EventLog::Apply(const KvEvent& e) {
  const auto table = [this](TierLevel t) -> KeyTable* {
    return t == TierLevel::kHot ? &hot_ : t == TierLevel::kSsd ? &ssd_ : nullptr;
  };
  KeyTable* to = table(e.tier);
  switch (e.kind) {
    case KvEventKind::kMoved:
      if (KeyTable* from = table(e.from)) from->Erase(e.key);
      [[fallthrough]];
    case KvEventKind::kStored:
      if (to != nullptr) to->Put(BlockOf(e));
      break;
    case KvEventKind::kRemoved:
      if (to != nullptr) to->Erase(e.key);
      break;
    case KvEventKind::kCleared:
      if (to != nullptr) to->Clear();
      break;
  }
}

void EventLog::Trim(int64_t now_unix_ms) {
  const int64_t oldest = OldestKeptUnixMs(now_unix_ms, options_.retention_ms);
  while (segments_.size() > 1 &&
         (bytes_ > options_.retention_bytes || segments_.front().last_unix_ms < oldest)) {
    Segment& s = segments_.front();
    events_.erase(events_.begin(), events_.begin() + static_cast<ptrdiff_t>(s.count));
    trimmed_seq_ = s.last_seq;
    bytes_ -= s.bytes;
    counts_.trimmed += s.count;
    if (!s.path.empty() && files_) Enqueue({.kind = FileOp::kDelete, .path = s.path});
    segments_.pop_front();
  }
  // Breaks before the first retained event are gone with their events (a
  // break at it still stops a reader at trimmed_seq_).
  while (!breaks_.empty() && breaks_.front() <= trimmed_seq_)
    breaks_.erase(breaks_.begin());
}

bool EventLog::IsBreak(uint64_t seq) const {
  return std::binary_search(breaks_.begin(), breaks_.end(), seq);
}

bool EventLog::Continues(uint64_t last_seen) const {
  auto next = events_.begin();  // the event after last_seen
  if (last_seen != trimmed_seq_) {
    next = std::lower_bound(events_.begin(), events_.end(), last_seen,
                            [](const KvEvent& e, uint64_t s) { return e.seq < s; });
    if (next == events_.end() || next->seq != last_seen) return false;
    ++next;
  }
  return next == events_.end() ? !break_next_ : !IsBreak(next->seq);
}

StatusOr<KvEventPage> EventLog::Read(uint64_t from_seq, size_t max_events) {
  const uint64_t from = std::max<uint64_t>(from_seq, 1);
  if (!options_.dir.empty()) {
    MutexLock io(&io_mu_);
    (void)Drain(false);  // write errors are counted; the events stay in RAM
  }
  MutexLock lock(&mu_);
  Process();  // a RAM log (a persistent one hands out only written events)
  // Only written events: not those appended since the drain.
  const uint64_t limit = files_ ? written_seq_ : UINT64_MAX;
  if (!Continues(from - 1)) {
    const uint64_t head = segments_.back().last_seq;
    return Status::OutOfRange("the event log cannot continue after seq " +
                              std::to_string(from - 1) + " (it holds seq " +
                              std::to_string(events_.empty() ? 0 : events_.front().seq) +
                              " to " + std::to_string(head) + " and continues from seq " +
                              std::to_string(trimmed_seq_) + "): resnapshot");
  }
  KvEventPage page;
  page.next_seq = from_seq;
  auto it = std::lower_bound(events_.begin(), events_.end(), from,
                             [](const KvEvent& e, uint64_t s) { return e.seq < s; });
  // (A page stops before a break: its reader is then told to resnapshot.)
  for (; it != events_.end() && it->seq <= limit && page.events.size() < max_events &&
         (page.events.empty() || !IsBreak(it->seq));
       ++it) {
    page.events.push_back(*it);
  }
  if (!page.events.empty()) page.next_seq = page.events.back().seq + 1;
  return page;
}

std::vector<KvEvent> EventLog::Range(uint64_t first_seq, uint64_t last_seq,
                                     size_t max_events, bool reverse) {
  std::vector<KvEvent> out;
  if (!options_.dir.empty()) {
    MutexLock io(&io_mu_);
    (void)Drain(false);
  }
  MutexLock lock(&mu_);
  Process();
  if (files_) last_seq = std::min(last_seq, written_seq_);
  const auto by_seq = [](const KvEvent& e, uint64_t s) { return e.seq < s; };
  auto lo = std::lower_bound(events_.begin(), events_.end(), first_seq, by_seq);
  auto hi = last_seq == UINT64_MAX
                ? events_.end()
                : std::lower_bound(lo, events_.end(), last_seq + 1, by_seq);
  if (!reverse) {
    for (; lo < hi && out.size() < max_events; ++lo) out.push_back(*lo);
  } else {
    for (; hi > lo && out.size() < max_events; --hi) out.push_back(*(hi - 1));
  }
  return out;
}

uint64_t EventLog::Watch(uint64_t from_seq, std::function<void()> wake) {
  const uint64_t from = std::max<uint64_t>(from_seq, 1);
  {
    MutexLock lock(&mu_);
    Process();
    MutexLock a(&append_mu_);
    // Events appended since the Process above are in queue_.
    const bool queued = !queue_.empty() && queue_.back().seq >= from;
    const bool inside_queue = !queue_.empty() && queue_.front().seq <= from - 1 &&
                              from - 1 <= queue_.back().seq;
    // An event at or above the SEQ file's ceiling is not handed out (Drain):
    // waking for it would only spin while the reservation fails. (The next
    // append wakes the watcher once the writer reserved above it.)
    const bool readable = from < reserved_;
    const bool ready = (queued && readable) || (!inside_queue && !Continues(from - 1)) ||
                       (!events_.empty() && events_.back().seq >= from && readable);
    if (!ready) {
      const uint64_t id = next_watch_++;
      watchers_.emplace(id, Watcher{from, std::move(wake)});
      return id;
    }
  }
  wake();
  return 0;
}

void EventLog::Unwatch(uint64_t id) {
  MutexLock lock(&append_mu_);
  watchers_.erase(id);
}

StatusOr<KvEventSnapshot> EventLog::Snapshot(uint64_t cursor, size_t count) {
  KvEventSnapshot s;
  const auto take = [this, &s, cursor, count]() REQUIRES(mu_) {
    s.seq = segments_.back().last_seq;
    // The page's end: a span of the key space that holds about `count` of
    // the blocks (0: to the end).
    const uint64_t total = hot_.size() + ssd_.size();
    uint64_t end = 0;
    if (count < total) {
      // (count < total: no overflow.)
      const uint64_t span = std::max<uint64_t>(1, UINT64_MAX / total * count);
      end = span > UINT64_MAX - cursor ? 0 : cursor + span;
    }
    s.next_cursor = end;
    const auto in = [cursor, end](const KvSnapshotBlock& b) {
      return b.key.hi >= cursor && (end == 0 || b.key.hi < end);
    };
    hot_.ForEach([&s, &in](const KvSnapshotBlock& b) {
      if (in(b)) s.hot.push_back(b);
    });
    ssd_.ForEach([&s, &in](const KvSnapshotBlock& b) {
      if (in(b)) s.ssd.push_back(b);
    });
  };
  if (options_.dir.empty()) {
    MutexLock lock(&mu_);
    Process();
    take();
  } else {
    // Taken at the head of a batch that is written before it is returned.
    MutexLock io(&io_mu_);
    (void)Drain(false, [&] {
      mu_.AssertHeld();
      take();
    });
    if (s.seq >= durable_reserved_) {
      // Its seq is not reserved durably (Drain: readers never get such one).
      return Status::Unavailable(
          "the event log cannot reserve sequence numbers (its SEQ file): no snapshot");
    }
  }
  return s;
}

KvEventLogStats EventLog::Stats() {
  MutexLock lock(&mu_);
  Process();
  KvEventLogStats s = counts_;
  {
    MutexLock a(&append_mu_);
    s.append_waits = append_waits_;
  }
  s.head_seq = segments_.back().last_seq;
  s.first_seq = events_.empty() ? 0 : events_.front().seq;
  s.events = events_.size();
  s.bytes = bytes_;
  s.keys_hot = hot_.size();
  s.keys_ssd = ssd_.size();
  return s;
}

KvKeySet EventLog::SsdKeys() {
  MutexLock lock(&mu_);
  Process();
  KvKeySet out;
  out.reserve(ssd_.size());
  ssd_.ForEach([&out](const KvSnapshotBlock& b) { out.emplace(b.key, b); });
  return out;
}

void EventLog::CountReconciled(uint64_t n) {
  MutexLock lock(&mu_);
  counts_.reconciled += n;
}

Status EventLog::Flush(bool sync) {
  if (options_.dir.empty()) return Status::OK();
  MutexLock io(&io_mu_);
  Status s = Drain(sync);
  uint64_t failed = 0;
  {
    MutexLock lock(&mu_);
    failed = counts_.write_errors - flush_reported_errors_;
    flush_reported_errors_ = counts_.write_errors;
  }
  // The writer thread may have taken (and failed to write) records appended
  // before this call: they are missing from the files all the same.
  if (s.ok() && failed > 0) {
    return Status::IOError(std::to_string(failed) +
                           " event log writes failed since the last flush");
  }
  return s;
}

Status EventLog::CheckpointDrained(bool close) {
  SsdKeysCheckpoint c;
  bool files = false;
  // The checkpoint's key set is taken at the head of a batch; the batch is
  // written and synced before the checkpoint names its events.
  Status s = Drain(/*sync=*/true, [&] {
    mu_.AssertHeld();
    files = files_;
    if (close) files_ = false;
    {
      MutexLock a(&append_mu_);
      checkpointed_at_ = counts_.appended;  // the events this checkpoint covers
    }
    if (!files) return;
    c.seq = segments_.back().last_seq;
    c.blocks.reserve(ssd_.size());
    ssd_.ForEach([&c](const KvSnapshotBlock& b) { c.blocks.push_back(b); });
  });
  if (!files) return Status::OK();
  PKV_RETURN_IF_ERROR(s);
  return WriteSsdKeysCheckpoint(options_.fs, options_.dir, c);
}

Status EventLog::Checkpoint() {
  MutexLock io(&io_mu_);
  return CheckpointDrained(/*close=*/false);
}

Status EventLog::Close() {
  StopWriter();
  MutexLock io(&io_mu_);
  Status s = CheckpointDrained(/*close=*/true);
  writer_.reset();
  return s;
}

}  // namespace prefixkv::internal
