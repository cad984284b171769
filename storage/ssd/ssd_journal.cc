// RemovalJournal (see ssd_journal.h).
#include "ssd_journal.h"

#include <cstring>
#include <map>
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

void EncodeHeader(uint64_t barrier, uint8_t* r) {
  std::memset(r, 0, kJournalRecordBytes);
  std::memcpy(r, kJournalMagic, 8);
  StoreLE64(r + 8, barrier);
  Seal(r);
}

void EncodeRecord(const JournalRecord& m, uint8_t* r) {
  m.key.EncodeTo(r);
  StoreLE64(r + 16, m.checksum);
  StoreLE64(r + 24, m.segment);
  StoreLE64(r + 32,
            m.offset | (m.commit ? kCommitFlag : 0) | (m.confirm ? kConfirmFlag : 0));
  Seal(r);
}

std::string PathIn(const std::string& dir) { return dir + "/" + kJournalName; }

}  // namespace

JournalContents LoadJournal(FileSystem* fs, const std::string& dir) {
  JournalContents out;
  StatusOr<std::unique_ptr<FileHandle>> f =
      fs->OpenFile(PathIn(dir), {.mode = OpenMode::kRead});
  if (!f.ok()) {
    out.problem = "no removal journal (" + f.status().ToString() + ")";
    return out;
  }
  StatusOr<uint64_t> size = (*f)->Size();
  if (!size.ok()) {
    out.problem = "removal journal: " + size.status().ToString();
    return out;
  }
  std::vector<uint8_t> buf(*size);
  StatusOr<size_t> got = (*f)->Read(0, buf.size(), buf.data());
  if (!got.ok() || *got != buf.size()) {
    out.problem = "removal journal: short read";
    return out;
  }
  const size_t n = buf.size() / kJournalRecordBytes;  // a partial tail is ignored
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* r = buf.data() + i * kJournalRecordBytes;
    if (LoadLE64(r + kBody) != Hash64(r, kBody)) {
      out.problem = "removal journal record " + std::to_string(i) + " is damaged";
      out.removed.clear();
      out.records.clear();
      return out;
    }
    if (i == 0) {
      if (std::memcmp(r, kJournalMagic, 8) != 0 &&
          std::memcmp(r, kJournalMagicV1, 8) != 0) {
        out.problem = "removal journal has no header";
        return out;
      }
      out.barrier = LoadLE64(r + 8);
      continue;
    }
    const uint64_t offset = LoadLE64(r + 32);
    const JournalRecord rec{BlockKey::DecodeFrom(r),
                            LoadLE64(r + 16),
                            LoadLE64(r + 24),
                            offset & kOffsetMask,
                            (offset & kCommitFlag) != 0,
                            (offset & kConfirmFlag) != 0};
    if (IsRemovalRecord(rec)) out.removed.insert({rec.key, rec.checksum});
    out.records.push_back(rec);
  }
  if (n == 0) {
    out.problem = "removal journal is empty";
    return out;
  }
  out.usable = true;
  return out;
}

StatusOr<std::unique_ptr<RemovalJournal>> RemovalJournal::Open(
    FileSystem* fs, const std::string& dir, uint64_t barrier_if_new,
    std::function<bool(uint64_t)> keep, const std::vector<JournalRecord>* regenerated) {
  std::unique_ptr<RemovalJournal> j(new RemovalJournal(fs, dir, std::move(keep)));
  MutexLock lock(&j->mu_);
  PKV_RETURN_IF_ERROR(j->Rewrite(barrier_if_new, regenerated));
  return j;
}

Status RemovalJournal::Rewrite(uint64_t barrier_if_new,
                               const std::vector<JournalRecord>* regenerated) {
  JournalContents old = LoadJournal(fs_, dir_);
  // A missing or damaged journal proves nothing about the segments that
  // exist now: they all fall under the new barrier, unless the caller
  // regenerated their removals from intact metadata.
  uint64_t barrier = old.usable ? old.barrier : barrier_if_new;
  if (!old.usable && regenerated != nullptr) {
    barrier = 0;
    old.records = *regenerated;
  }
  // Of the commit records, the last per segment is enough to tell a rolled
  // back database (ssd_journal.h): a lost suffix of commits always includes
  // the last commit of every segment it touched.
  std::map<uint64_t, size_t> last_commit;  // segment -> index in old.records
  for (size_t i = 0; i < old.records.size(); ++i) {
    if (IsCommitRecord(old.records[i])) last_commit[old.records[i].segment] = i;
  }
  std::vector<uint8_t> buf(kJournalRecordBytes);
  EncodeHeader(barrier, buf.data());
  for (size_t i = 0; i < old.records.size(); ++i) {
    const JournalRecord& m = old.records[i];
    if (!keep_(m.segment)) continue;
    if (IsCommitRecord(m) && last_commit[m.segment] != i) continue;
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
  return Status::OK();
}

Status RemovalJournal::Append(const BlockKey& key, uint64_t checksum, uint64_t segment,
                              uint64_t offset) {
  MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  if (appended_ >= kCompactRecords) {
    // The file is ours, so it is usable and keeps its barrier.
    if (Status s = Rewrite(/*barrier_if_new=*/0); !s.ok()) {
      broken_ = s;
      file_.reset();
      (void)fs_->DeleteFile(PathIn(dir_));
      return s;
    }
  }
  uint8_t r[kJournalRecordBytes];
  EncodeRecord({key, checksum, segment, offset & kOffsetMask, (offset & kCommitFlag) != 0,
                (offset & kConfirmFlag) != 0},
               r);
  Status s = file_ ? file_->Write(size_, r, sizeof r) : Status::IOError("no journal");
  if (s.ok()) {
    size_ += sizeof r;
    appended_ += 1;
    return s;
  }
  // A removal the journal does not hold: no removal may be trusted any more.
  broken_ = s;
  file_.reset();
  (void)fs_->DeleteFile(PathIn(dir_));
  return s;
}

Status RemovalJournal::Sync() {
  MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  return file_ ? file_->DataSync() : Status::IOError("no journal");
}

}  // namespace prefixkv::ssd
