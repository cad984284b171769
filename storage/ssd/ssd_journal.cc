// RemovalJournal (see ssd_journal.h).
#include "ssd_journal.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "prefixkv/advanced/hash.h"
#include "ssd_layout.h"

namespace prefixkv::ssd {
namespace {

constexpr char kJournalMagic[8] = {'p', 'k', 'v', 'r', 'm', 'j', '0', '2'};
// Removals only, before commit records: still read.
constexpr char kJournalMagicV1[8] = {'p', 'k', 'v', 'r', 'm', 'j', '0', '1'};

constexpr size_t kBody = kJournalRecordBytes - 8;

void Seal(uint8_t* r) { StoreLE64(r + kBody, Hash64(r, kBody)); }

// Header bytes 24..31: the removals carry JournalRecord::flush_mode.
constexpr uint64_t kMarksFlushMode = 1;

void EncodeHeader(uint64_t barrier, uint64_t next_segment, uint8_t* r) {
  std::memset(r, 0, kJournalRecordBytes);
  std::memcpy(r, kJournalMagic, 8);
  StoreLE64(r + 8, barrier);
  StoreLE64(r + 16, next_segment);
  StoreLE64(r + 24, kMarksFlushMode);
  Seal(r);
}

void EncodeRecord(const JournalRecord& m, uint8_t* r) {
  m.key.EncodeTo(r);
  StoreLE64(r + 16, m.checksum);
  StoreLE64(r + 24, m.segment);
  StoreLE64(r + 32, m.offset | (m.commit ? kCommitFlag : 0) |
                        (m.confirm ? kConfirmFlag : 0) |
                        (m.extent_only ? kExtentOnlyFlag : 0) |
                        (m.flush_mode ? kFlushModeFlag : 0));
  Seal(r);
}

std::string PathIn(const std::string& dir) { return dir + "/" + kJournalName; }

std::atomic<uint64_t> compact_records_for_testing{0};

// What tells whether a removal ran its commit (the records' indexes):
// JournalContents::WithoutUncommittedRemovals, and a rewrite keeps it.
class CommitEvidence {
 public:
  explicit CommitEvidence(const std::vector<JournalRecord>& records) : records_(records) {
    for (size_t i = 0; i < records.size(); ++i) {
      const JournalRecord& r = records[i];
      if (IsCommitRecord(r)) {
        first_commit_at_.try_emplace({r.segment, r.offset}, i);
        last_commit_of_[r.key] = i;
      } else if (r.confirm) {
        last_confirm_at_[{r.segment, r.offset}] = i;
      }
    }
  }
  // For removal `i` of a committed version (a commit record names its place
  // before it, with its key and bytes) with no confirm after it: that
  // commit record. None for a confirmed one, an advance record of a store,
  // garbage.
  std::optional<size_t> CommitOfUnconfirmed(size_t i) const {
    const JournalRecord& r = records_[i];
    const Place place(r.segment, r.offset);
    const auto commit = first_commit_at_.find(place);
    if (commit == first_commit_at_.end() || commit->second > i ||
        records_[commit->second].key != r.key ||
        records_[commit->second].checksum != r.checksum) {
      return std::nullopt;
    }
    if (const auto c = last_confirm_at_.find(place);
        c != last_confirm_at_.end() && c->second > i) {
      return std::nullopt;
    }
    return commit->second;
  }
  // The last commit record of `key` (one exists for a CommitOfUnconfirmed).
  size_t LastCommitOf(const BlockKey& key) const { return last_commit_of_.at(key); }

 private:
  using Place = std::pair<uint64_t, uint64_t>;
  const std::vector<JournalRecord>& records_;
  std::map<Place, size_t> first_commit_at_, last_confirm_at_;
  std::map<BlockKey, size_t> last_commit_of_;
};

// The commit records a rewrite keeps so that WithoutUncommittedRemovals
// decides as before it: of each unconfirmed removal of a committed version
// in a segment `keep` keeps, its version's commit record and its key's
// last, if after it, even of a segment unlinked since (a commit record of a
// segment that is gone names no extent). Dropped (as neither a segment's
// last commit nor its last live one), the removal of a version whose
// replacing store a kill -9 cut before its commit was taken for a real one
// at the next flush-mode open after all: a kill during the open that rolled
// it forward, after that open's rewrite
// (SsdFaultTest.AKillDuringTheOpenAfterAFlushModeReplacingKillKeepsTheAcknowledgedVersion).
// Dropped with the replacing version's segment (removed, then reclaimed),
// the removal of the old version by a store killed before its confirm was
// taken for one whose commit never ran, and every flush-mode open brought
// the replaced and removed bytes back
// (SsdFaultTest.AFlushModeKillBeforeAReplacingStoreConfirmsNeverBringsTheOldBytesBack).
std::set<size_t> CommitsOfUnconfirmedRemovals(const std::vector<JournalRecord>& records,
                                              const std::function<bool(uint64_t)>& keep) {
  const CommitEvidence evidence(records);
  std::set<size_t> out;
  for (size_t i = 0; i < records.size(); ++i) {
    if (!IsRemovalRecord(records[i]) || !keep(records[i].segment)) continue;
    const std::optional<size_t> commit = evidence.CommitOfUnconfirmed(i);
    if (!commit) continue;
    out.insert(*commit);
    if (const size_t last = evidence.LastCommitOf(records[i].key); last > i) {
      out.insert(last);
    }
  }
  return out;
}

}  // namespace

JournalContents LoadJournal(FileSystem* fs, const std::string& dir) {
  JournalContents out;
  StatusOr<std::unique_ptr<FileHandle>> f =
      fs->OpenFile(PathIn(dir), {.mode = OpenMode::kRead});
  if (!f.ok()) {
    out.problem = "no removal journal (" + f.status().ToString() + ")";
    if (!f.status().IsNotFound()) out.read_error = f.status();
    return out;
  }
  StatusOr<uint64_t> size = (*f)->Size();
  if (!size.ok()) {
    out.problem = "removal journal: " + size.status().ToString();
    out.read_error = size.status();
    return out;
  }
  std::vector<uint8_t> buf(*size);
  StatusOr<size_t> got = (*f)->Read(0, buf.size(), buf.data());
  if (!got.ok() || *got != buf.size()) {
    out.problem = "removal journal: short read";
    out.read_error = got.ok() ? Status::IOError(out.problem) : got.status();
    return out;
  }
  const size_t n = buf.size() / kJournalRecordBytes;  // a partial tail is ignored
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* r = buf.data() + i * kJournalRecordBytes;
    if (LoadLE64(r + kBody) != Hash64(r, kBody)) {
      out.problem = "removal journal record " + std::to_string(i) + " is damaged";
      out.records.clear();
      out.removed_at.clear();
      out.last_removal.clear();
      out.last_commit_at.clear();
      return out;
    }
    if (i == 0) {
      if (std::memcmp(r, kJournalMagic, 8) != 0 &&
          std::memcmp(r, kJournalMagicV1, 8) != 0) {
        out.problem = "removal journal has no header";
        return out;
      }
      out.barrier = LoadLE64(r + 8);
      out.next_segment = std::max(LoadLE64(r + 16), out.barrier + 1);
      out.marks_flush_mode = (LoadLE64(r + 24) & kMarksFlushMode) != 0;
      continue;
    }
    const uint64_t offset = LoadLE64(r + 32);
    const JournalRecord rec{BlockKey::DecodeFrom(r),
                            LoadLE64(r + 16),
                            LoadLE64(r + 24),
                            offset & kOffsetMask,
                            (offset & kCommitFlag) != 0,
                            (offset & kConfirmFlag) != 0,
                            (offset & kExtentOnlyFlag) != 0,
                            (offset & kFlushModeFlag) != 0};
    out.next_segment = std::max(out.next_segment, rec.segment + 1);
    out.AddRecord(rec);
  }
  if (n == 0) {
    out.problem = "removal journal is empty";
    return out;
  }
  out.usable = true;
  return out;
}

bool JournalContents::Excludes(const BlockKey& key, uint64_t checksum, uint64_t segment,
                               uint64_t offset) const {
  // Only a commit of this key and these bytes makes the extent live again.
  // A place names one extent ever, so a commit there of anything else means
  // the file holds another segment's bytes (a segment file renamed, swapped
  // or restored from a copy): the commit is not this extent's. (Any commit
  // there counted until 2026-12-06: a rebuild after such a swap restored an
  // overwritten block's older bytes, or a removed block.)
  const auto commit = last_commit_at.find({segment, offset});
  const bool committed_here = commit != last_commit_at.end() &&
                              records[commit->second].key == key &&
                              records[commit->second].checksum == checksum;
  if (auto here = removed_at.find({segment, offset});
      here != removed_at.end() && (!committed_here || commit->second < here->second)) {
    return true;
  }
  const auto removal = last_removal.find({key, checksum});
  if (removal == last_removal.end()) return false;
  return !committed_here || commit->second < removal->second;
}

void JournalContents::AddRecord(const JournalRecord& rec) {
  const size_t at = records.size();
  if (IsRemovalRecord(rec)) {
    removed_at[{rec.segment, rec.offset}] = at;
    if (!rec.extent_only) last_removal[{rec.key, rec.checksum}] = at;
  } else if (IsCommitRecord(rec)) {
    last_commit_at[{rec.segment, rec.offset}] = at;
  }
  records.push_back(rec);
}

JournalContents JournalContents::WithoutUncommittedRemovals(
    bool unmarked_flush_mode) const {
  const CommitEvidence evidence(records);
  // Whether removal `i`, a flush-mode tier's, names a committed version and
  // nothing after it shows that its own commit ran: no confirm of it, no
  // commit of its key (a replacing store's or a compaction move's, appended
  // before the confirm).
  auto uncommitted = [&](size_t i) {
    const bool flush_mode =
        records[i].flush_mode || (!marks_flush_mode && unmarked_flush_mode);
    return flush_mode && evidence.CommitOfUnconfirmed(i).has_value() &&
           evidence.LastCommitOf(records[i].key) < i;
  };
  JournalContents out;
  out.usable = usable;
  out.problem = problem;
  out.read_error = read_error;
  out.barrier = barrier;
  out.next_segment = next_segment;
  out.marks_flush_mode = marks_flush_mode;
  for (size_t i = 0; i < records.size(); ++i) {
    if (IsRemovalRecord(records[i]) && uncommitted(i)) continue;
    out.AddRecord(records[i]);
  }
  return out;
}

bool JournalContents::Commits(const BlockKey& key, uint64_t checksum, uint64_t segment,
                              uint64_t offset) const {
  const auto commit = last_commit_at.find({segment, offset});
  if (commit == last_commit_at.end()) return false;
  const JournalRecord& c = records[commit->second];
  return c.key == key && c.checksum == checksum;
}

StatusOr<std::unique_ptr<RemovalJournal>> RemovalJournal::Open(
    FileSystem* fs, const std::string& dir, uint64_t barrier_if_new,
    std::function<bool(uint64_t)> keep, SsdDurability durability,
    const std::vector<JournalRecord>* regenerated, uint64_t next_segment) {
  std::unique_ptr<RemovalJournal> j(new RemovalJournal(
      fs, dir, std::move(keep), durability == SsdDurability::kFlush));
  MutexLock lock(&j->mu_);
  PKV_RETURN_IF_ERROR(j->Rewrite(barrier_if_new, regenerated, next_segment));
  return j;
}

Status RemovalJournal::Rewrite(uint64_t barrier_if_new,
                               const std::vector<JournalRecord>* regenerated,
                               uint64_t next_segment, bool keep_every_commit) {
  JournalContents old = LoadJournal(fs_, dir_);
  // Unread, it is not missing: rewritten as one, it lost every record and
  // its new barrier put every segment beyond a rebuild's proof
  // (SsdFaultTest.AJournalReadErrorAtAnOpenNeverLosesItsRecords).
  PKV_RETURN_IF_ERROR(old.read_error);
  // The records of unlinked segments are dropped below, their ids kept in
  // the header: no new segment may take one (ssd_journal.h).
  next_segment = std::max({next_segment, next_segment_, old.next_segment});
  // A missing or damaged journal proves nothing about the segments that
  // exist now: they all fall under the new barrier, unless the caller
  // regenerated their removals from intact metadata.
  uint64_t barrier = old.usable ? old.barrier : barrier_if_new;
  if (!old.usable && regenerated != nullptr) {
    barrier = 0;
    old.records = *regenerated;
  }
  // A journal from before the marks: its removals marked as this opener's
  // mode weighed them (every open did so then), as the header now says.
  if (old.usable && !old.marks_flush_mode) {
    for (JournalRecord& m : old.records) {
      m.flush_mode = m.flush_mode || (IsRemovalRecord(m) && flush_mode_);
    }
  }
  // Of the commit records, the last per segment is enough to tell a rolled
  // back database (ssd_journal.h): a lost suffix of commits always includes
  // the last commit of every segment it touched. A commit of bytes a kept
  // removal names earlier stays too: it is what keeps the key stored again
  // from a rebuild's exclusion (JournalContents::Excludes).
  // And each segment's last commit of an extent no removal names: a
  // metadata copy older than it, whose segment's last commit was removed
  // since, still shows as older than the segments.
  std::map<uint64_t, size_t> last_commit;  // segment -> index in old.records
  std::map<uint64_t, size_t> last_live_commit;
  for (size_t i = 0; i < old.records.size(); ++i) {
    const JournalRecord& m = old.records[i];
    if (!IsCommitRecord(m)) continue;
    last_commit[m.segment] = i;
    const auto removal = old.removed_at.find({m.segment, m.offset});
    if (removal == old.removed_at.end() || removal->second < i) {
      last_live_commit[m.segment] = i;
    }
  }
  std::set<std::pair<BlockKey, uint64_t>> kept_removals;
  const std::set<size_t> weighed = CommitsOfUnconfirmedRemovals(old.records, keep_);
  std::vector<uint8_t> buf(kJournalRecordBytes);
  if (regenerated != nullptr) {
    for (const JournalRecord& m : *regenerated) {
      next_segment = std::max(next_segment, m.segment + 1);
    }
  }
  EncodeHeader(barrier, next_segment, buf.data());
  for (size_t i = 0; i < old.records.size(); ++i) {
    const JournalRecord& m = old.records[i];
    if (!keep_(m.segment) && !weighed.contains(i)) continue;
    // A store's advance removal of its own extent, committed since: it
    // named crash garbage that never was (JournalContents::Excludes), and
    // that commit record may be dropped below.
    if (IsRemovalRecord(m) && m.extent_only) {
      const auto commit = old.last_commit_at.find({m.segment, m.offset});
      if (commit != old.last_commit_at.end() && commit->second > i) continue;
    }
    if (IsRemovalRecord(m) && !m.extent_only) kept_removals.insert({m.key, m.checksum});
    if (IsCommitRecord(m) && !keep_every_commit && last_commit[m.segment] != i &&
        !(last_live_commit.contains(m.segment) && last_live_commit[m.segment] == i) &&
        !kept_removals.contains({m.key, m.checksum}) && !weighed.contains(i)) {
      continue;
    }
    const size_t at = buf.size();
    buf.resize(at + kJournalRecordBytes);
    EncodeRecord(m, buf.data() + at);
  }
  const std::string tmp = PathIn(dir_) + ".tmp";
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs_->OpenFile(tmp, {.mode = OpenMode::kCreateOrTruncate}));
  PKV_RETURN_IF_ERROR(f->Write(0, buf.data(), buf.size()));
  PKV_RETURN_IF_ERROR(f->DataSync());
  PKV_RETURN_IF_ERROR(fs_->RenameFile(tmp, PathIn(dir_)));
  PKV_RETURN_IF_ERROR(fs_->SyncDir(dir_));
  file_ = std::move(f);
  size_ = buf.size();
  appended_ = 0;
  next_segment_ = next_segment;
  return Status::OK();
}

Status RemovalJournal::Append(const BlockKey& key, uint64_t checksum, uint64_t segment,
                              uint64_t offset) {
  return AppendRecords({{key, checksum, segment, offset & kOffsetMask,
                        (offset & kCommitFlag) != 0, (offset & kConfirmFlag) != 0,
                        (offset & kExtentOnlyFlag) != 0}});
}

Status RemovalJournal::AppendRecords(const std::vector<JournalRecord>& records) {
  if (records.empty()) return Status::OK();
  MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  const uint64_t compact_at = compact_records_for_testing.load(std::memory_order_relaxed);
  if (appended_ >= (compact_at != 0 ? compact_at : kCompactRecords)) {
    // The file is ours, so it is usable and keeps its barrier. Every commit
    // record stays: the metadata may not hold the commits yet (flush mode's
    // memtable), and a kill -9 then leaves only these records to roll them
    // forward by. (Until 2026-12-07 only each segment's last was kept, as at
    // Open;
    // SsdFaultTest.AJournalRewriteWhileOpenKeepsTheCommitsAFlushModeKillRollsForward.)
    if (Status s = Rewrite(/*barrier_if_new=*/0, nullptr, 0, /*keep_every_commit=*/true);
        !s.ok()) {
      Drop(s);
      return s;
    }
  }
  std::vector<uint8_t> buf(records.size() * kJournalRecordBytes);
  for (size_t i = 0; i < records.size(); ++i) {
    JournalRecord m = records[i];
    m.flush_mode = IsRemovalRecord(m) && flush_mode_;
    EncodeRecord(m, buf.data() + i * kJournalRecordBytes);
  }
  Status s =
      file_ ? file_->Write(size_, buf.data(), buf.size()) : Status::IOError("no journal");
  if (s.ok()) {
    size_ += buf.size();
    appended_ += records.size();
    return s;
  }
  // A removal the journal does not hold: no removal may be trusted any more.
  Drop(s);
  return s;
}

void RemovalJournal::Drop(const Status& why) {
  broken_ = why;
  file_.reset();
  (void)fs_->DeleteFile(PathIn(dir_));
  // The unlink made durable: a power cut before the directory's next sync
  // could put the file back as it was last synced, without the records that
  // failed, and an open then trusted it (a commit record of a block removed
  // since made the metadata look rolled back, and the block came back;
  // SsdFaultTest.AJournalDeletedAfterAFailedAppendStaysDeletedAfterAPowerCut).
  (void)fs_->SyncDir(dir_);
}

void RemovalJournal::SetCompactRecordsForTesting(uint64_t n) {
  compact_records_for_testing.store(n, std::memory_order_relaxed);
}

Status RemovalJournal::KeepSegmentIdsFrom(uint64_t id) {
  if (id == 0) return Status::OK();
  JournalRecord r;
  r.segment = id - 1;
  r.extent_only = true;  // names the place only: no key's bytes are removed
  PKV_RETURN_IF_ERROR(AppendRecords({r}));
  return Sync();
}

Status RemovalJournal::Sync() {
  MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  return file_ ? file_->DataSync() : Status::IOError("no journal");
}

Status RemovalJournal::SyncThen(const std::function<Status()>& then) {
  MutexLock lock(&mu_);  // held across `then`: appends wait for it
  if (!broken_.ok()) return broken_;
  PKV_RETURN_IF_ERROR(file_ ? file_->DataSync() : Status::IOError("no journal"));
  return then();
}

}  // namespace prefixkv::ssd
