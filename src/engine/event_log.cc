// EventLog (event_log.h): numbering, appending, retention, readers and the
// key sets. Opening a persistent log: the segments are scanned in order and
// cut at the first torn or damaged record (later segments are dropped: they
// cannot follow a hole), the next number is put above the SEQ reservation,
// and the SSD key set is rebuilt from the checkpoint and the events after it.
#include "event_log.h"

#include <algorithm>

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

}  // namespace

EventLog::EventLog(const EventLogOptions& options) : options_(options) {}

EventLog::~EventLog() {
  MutexLock lock(&mu_);
  WritePending();
}

void EventLog::WritePending() {
  if (pending_.empty()) return;
  if (writer_ != nullptr) {
    Status s = writer_->Append(pending_.data(), pending_.size());
    if (!s.ok() && counts_.write_errors++ == 0) Log("append failed: " + s.ToString());
  }
  pending_.clear();
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

uint64_t EventLog::FirstSeq() const {
  if (options_.first_seq > 0) return options_.first_seq;
  return std::max<uint64_t>(1, options_.clock->UnixMillis() << 16);
}

Status EventLog::Load() {
  MutexLock lock(&mu_);
  counts_.enabled = true;
  counts_.persistent = !options_.dir.empty();
  counts_.retention_bytes = options_.retention_bytes;
  counts_.retention_ms = options_.retention_ms;
  if (options_.dir.empty()) {
    next_seq_ = FirstSeq();
    reserved_ = UINT64_MAX;
    segments_.push_back({});
    ssd_keys_proven_ = true;
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
  PKV_RETURN_IF_ERROR(Reserve(next_seq_ + options_.reserve_ahead));
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
  ssd_keys_proven_ = base.seq <= last && Continues(base.seq);
  if (ssd_keys_proven_) {
    for (const KvSnapshotBlock& b : base.blocks) ssd_.Put(b);
    for (const KvEvent& e : events_) {
      if (e.seq > base.seq) Apply(e);
    }
  }
  return StartSegment();
}

Status EventLog::LoadSegments() {
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> names,
                       options_.fs->ListDir(options_.dir));
  std::vector<uint64_t> seqs;
  for (const std::string& name : names) {
    if (EventSegmentSeq(name) > 0) seqs.push_back(EventSegmentSeq(name));
  }
  std::sort(seqs.begin(), seqs.end());
  bool cut = false;  // a segment was damaged: every later one is dropped
  for (uint64_t seq : seqs) {
    const std::string path = EventSegmentPath(options_.dir, seq);
    StatusOr<EventSegmentScan> scan = cut ? StatusOr<EventSegmentScan>(EventSegmentScan{})
                                          : ReadEventSegment(options_.fs, path);
    const uint64_t prev = segments_.empty() ? 0 : segments_.back().last_seq;
    if (!scan.ok() || !scan->header_ok ||
        (!segments_.empty() && scan->prev_seq != prev)) {
      if (!cut)
        Log("dropping segment " + path + " (no valid header after seq " +
            std::to_string(prev) + ")");
      cut = true;
      PKV_RETURN_IF_ERROR(options_.fs->DeleteFile(path));
      continue;
    }
    if (scan->valid_bytes < scan->file_bytes) {
      Log("cut a torn tail of " + std::to_string(scan->file_bytes - scan->valid_bytes) +
          " bytes from " + path);
      PKV_RETURN_IF_ERROR(
          EventSegmentWriter::Reopen(options_.fs, path, scan->valid_bytes).status());
      cut = true;
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
    events_.insert(events_.end(), scan->events.begin(), scan->events.end());
  }
  return Status::OK();
}

Status EventLog::Reserve(uint64_t through) {
  PKV_RETURN_IF_ERROR(WriteSeqReservation(options_.fs, options_.dir, through));
  reserved_ = through;
  return Status::OK();
}

Status EventLog::StartSegment() {
  const uint64_t prev = segments_.empty() ? trimmed_seq_ : segments_.back().last_seq;
  if (options_.dir.empty() || closed_) {
    segments_.push_back({.prev_seq = prev, .last_seq = prev});
    return Status::OK();
  }
  WritePending();  // the buffered records are the old segment's
  if (writer_ != nullptr) (void)writer_->Sync();  // a Flush(sync) syncs only the newest
  const std::string path = EventSegmentPath(options_.dir, next_seq_);
  StatusOr<std::unique_ptr<EventSegmentWriter>> w =
      EventSegmentWriter::Create(options_.fs, path, prev);
  if (!w.ok()) {
    writer_.reset();
    segments_.push_back({.prev_seq = prev, .last_seq = prev});
    return w.status();
  }
  writer_ = std::move(*w);
  segments_.push_back({.prev_seq = prev,
                       .last_seq = prev,
                       .bytes = kEventSegmentHeaderBytes,
                       .path = path});
  bytes_ += kEventSegmentHeaderBytes;
  return Status::OK();
}

void EventLog::Append(KvEvent& e) {
  std::vector<std::function<void()>> wake;
  {
    MutexLock lock(&mu_);
    if (next_seq_ >= reserved_) {
      Status s = Reserve(next_seq_ + options_.reserve_ahead);
      if (!s.ok()) Log("reserving sequence numbers failed: " + s.ToString());
    }
    e.seq = next_seq_++;
    if (segments_.back().bytes >= segment_bytes()) {
      Status s = StartSegment();
      if (!s.ok()) Log("starting a segment failed (events kept in RAM): " + s.ToString());
    }
    if (writer_ != nullptr) {
      const size_t at = pending_.size();
      pending_.resize(at + kEventRecordBytes);
      EncodeEventRecord(e, pending_.data() + at);
      if (pending_.size() >= kEventWriteBufferBytes) WritePending();
    }
    Record(e, kEventRecordBytes);
    Trim(e.unix_ms);
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      if (it->second.from_seq > e.seq) {
        ++it;
        continue;
      }
      wake.push_back(std::move(it->second.wake));
      it = watchers_.erase(it);
    }
  }
  for (auto& w : wake) w();
}

void EventLog::Record(const KvEvent& e, uint64_t bytes) {
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
  const int64_t oldest = now_unix_ms - static_cast<int64_t>(options_.retention_ms);
  while (segments_.size() > 1 &&
         (bytes_ > options_.retention_bytes || segments_.front().last_unix_ms < oldest)) {
    Segment& s = segments_.front();
    events_.erase(events_.begin(), events_.begin() + static_cast<ptrdiff_t>(s.count));
    trimmed_seq_ = s.last_seq;
    bytes_ -= s.bytes;
    counts_.trimmed += s.count;
    if (!s.path.empty()) {
      Status d = options_.fs->DeleteFile(s.path);
      if (!d.ok()) Log("dropping " + s.path + " failed: " + d.ToString());
    }
    segments_.pop_front();
  }
}

bool EventLog::Continues(uint64_t last_seen) const {
  if (last_seen == trimmed_seq_) return true;
  auto it = std::lower_bound(events_.begin(), events_.end(), last_seen,
                             [](const KvEvent& e, uint64_t s) { return e.seq < s; });
  return it != events_.end() && it->seq == last_seen;
}

StatusOr<KvEventPage> EventLog::Read(uint64_t from_seq, size_t max_events) {
  const uint64_t from = std::max<uint64_t>(from_seq, 1);
  MutexLock lock(&mu_);
  WritePending();
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
  for (; it != events_.end() && page.events.size() < max_events; ++it) {
    page.events.push_back(*it);
  }
  if (!page.events.empty()) page.next_seq = page.events.back().seq + 1;
  return page;
}

std::vector<KvEvent> EventLog::Range(uint64_t first_seq, uint64_t last_seq,
                                     size_t max_events, bool reverse) {
  std::vector<KvEvent> out;
  MutexLock lock(&mu_);
  WritePending();
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
    const bool ready =
        !Continues(from - 1) || (!events_.empty() && events_.back().seq >= from);
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
  MutexLock lock(&mu_);
  watchers_.erase(id);
}

KvEventSnapshot EventLog::Snapshot() const {
  MutexLock lock(&mu_);
  KvEventSnapshot s;
  s.seq = segments_.back().last_seq;
  hot_.ForEach([&s](const KvSnapshotBlock& b) { s.hot.push_back(b); });
  ssd_.ForEach([&s](const KvSnapshotBlock& b) { s.ssd.push_back(b); });
  return s;
}

KvEventLogStats EventLog::Stats() const {
  MutexLock lock(&mu_);
  KvEventLogStats s = counts_;
  s.head_seq = segments_.back().last_seq;
  s.first_seq = events_.empty() ? 0 : events_.front().seq;
  s.events = events_.size();
  s.bytes = bytes_;
  s.keys_hot = hot_.size();
  s.keys_ssd = ssd_.size();
  return s;
}

KvKeySet EventLog::SsdKeys() const {
  MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
  WritePending();
  return sync && writer_ != nullptr ? writer_->Sync() : Status::OK();
}

Status EventLog::CheckpointLocked() {
  if (options_.dir.empty() || closed_) return Status::OK();
  SsdKeysCheckpoint c;
  c.seq = segments_.back().last_seq;
  c.blocks.reserve(ssd_.size());
  ssd_.ForEach([&c](const KvSnapshotBlock& b) { c.blocks.push_back(b); });
  // The events up to the checkpoint are on disk before it names them.
  WritePending();
  if (writer_ != nullptr) PKV_RETURN_IF_ERROR(writer_->Sync());
  return WriteSsdKeysCheckpoint(options_.fs, options_.dir, c);
}

Status EventLog::Checkpoint() {
  MutexLock lock(&mu_);
  return CheckpointLocked();
}

Status EventLog::Close() {
  MutexLock lock(&mu_);
  Status s = CheckpointLocked();
  writer_.reset();
  closed_ = true;
  return s;
}

}  // namespace prefixkv::internal
