// ssd::TierImpl::ReconcileJournal: at every repairing Open, once the metadata
// is as good as it gets (rebuilt, rolled forward, or intact) and the removal
// journal has been rewritten, the journal is made to decide what that
// metadata holds, so that a later rebuild from the segments (a second fault:
// the metadata lost after this open) restores exactly these blocks (docs/ssd.md
// "The journal agrees with the metadata at every open"). Two kinds of record,
// appended in one write and synced before the tier takes writes:
//
//   - an extent-only removal for each extent at the end of a segment that
//     the metadata does not reference and no record names: crash garbage of
//     a store whose payload reached the device but whose commit never came,
//     and whose advance record (JournalNewExtents, not synced) a power cut
//     took. A rebuild took it for a version: with the key live it found two
//     versions and restored neither; with the key removed later it restored
//     bytes no Put had acknowledged;
//   - a commit record for each live block the journal excludes: a removal
//     journaled for a commit that never came (a replacing store killed
//     before its commit), or a commit record a power cut took (commit
//     records are appended after the commit, not synced). The metadata
//     proves the block live; a rebuild excluded it and lost it.
//
// Every record only ever names what the metadata already decides (an
// unreferenced extent dead, a referenced one live), so no open serves
// anything different because of it. The walk reads one footer per segment
// in the common case: a segment's appender goes to no other writer until
// its append's commit is over (SegmentStore::Append), and a restart seals
// every segment, so what a crash left uncommitted can only be a segment's
// last append. (Until that rule, found in review of this walk, a store cut
// before its commit could lie below another writer's committed one.)
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ssd_journal.h"
#include "ssd_segment.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace {

// Walks segment `id` (`bytes` long) backward from its end, footer to footer,
// down to `frontier` (the last place the metadata or the journal names in it),
// and appends an extent-only removal for each extent it passes. Past a
// damaged footer it steps back one
// alignment unit; a footer that would jump below `frontier` (one inside a
// payload) ends the walk.
Status NameTailGarbage(FileSystem* fs, const std::string& path, uint64_t id,
                       uint64_t bytes, uint64_t frontier,
                       std::vector<ssd::JournalRecord>* out) {
  uint64_t end = bytes / ssd::kExtentAlign * ssd::kExtentAlign;
  if (end <= frontier) return Status::OK();
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs->OpenFile(path, {.mode = OpenMode::kRead}));
  std::vector<uint8_t> page(ssd::kExtentAlign);
  while (end > frontier) {
    PKV_ASSIGN_OR_RETURN(size_t got,
                         f->Read(end - ssd::kExtentAlign, page.size(), page.data()));
    if (got != page.size()) return Status::Corruption("short read of " + path);
    ssd::ExtentFooter footer;
    if (!ssd::DecodeFooter(page.data() + page.size() - ssd::kFooterBytes, id, &footer) ||
        footer.length > end || ssd::ExtentBytes(footer.length) > end) {
      end -= ssd::kExtentAlign;  // a torn or damaged extent: resync below it
      continue;
    }
    const uint64_t start = end - ssd::ExtentBytes(footer.length);
    if (start <= frontier) break;  // the named extent (or a footer inside a payload)
    // Even one the journal excludes now: only by a removal of its key's
    // bytes, which a later rewrite drops with that removal's segment.
    ssd::JournalRecord r{footer.key, footer.checksum, id, start};
    r.extent_only = true;  // the key may hold these bytes live elsewhere
    out->push_back(r);
    end = start;
  }
  return Status::OK();
}

}  // namespace

Status ssd::TierImpl::ReconcileJournal() {
  // audit and inspect change nothing; without a journal nothing is provable.
  if (journal_ == nullptr || !options_.repair_damaged_metadata) return Status::OK();
  FileSystem* fs = options_.file_system;
  const std::string seg_dir = options_.path + "/segments";
  const ssd::JournalContents journal = ssd::LoadJournal(fs, seg_dir);
  PKV_RETURN_IF_ERROR(journal.read_error);
  if (!journal.usable) return Status::OK();
  std::vector<ssd::JournalRecord> recommits, garbage;
  // Per segment, the highest place anything names: the walk stops there.
  std::unordered_map<uint64_t, uint64_t> frontier;
  auto name = [&](uint64_t segment, uint64_t offset) {
    auto [it, added] = frontier.try_emplace(segment, offset);
    if (!added) it->second = std::max(it->second, offset);
  };
  for (const ssd::JournalRecord& r : journal.records) name(r.segment, r.offset);
  {
    MutexLock lock(&mu_);
    for (const auto& [key, e] : index_.entries()) name(e.segment, e.offset);
    // A live block the journal excludes is named by a removal of its key
    // (at its place, or of its bytes): looking up the removals' keys finds
    // every one.
    std::set<BlockKey> seen;
    for (const ssd::JournalRecord& r : journal.records) {
      if (!ssd::IsRemovalRecord(r) || !seen.insert(r.key).second) continue;
      const ssd::IndexEntry* e = index_.Find(r.key);
      if (e == nullptr || !journal.Excludes(r.key, e->checksum, e->segment, e->offset)) {
        continue;
      }
      ssd::JournalRecord c{r.key, e->checksum, e->segment, e->offset};
      c.commit = true;
      recommits.push_back(c);
    }
  }
  for (const ssd::SegmentState& st : store_->Snapshot()) {
    const auto f = frontier.find(st.id);
    if (f == frontier.end()) continue;  // adopted segments hold a live block
    const Status s = NameTailGarbage(fs, seg_dir + "/" + ssd::SegmentFileName(st.id),
                                     st.id, st.bytes, f->second, &garbage);
    if (!s.ok()) {
      // Its tail stays unnamed (as before this walk existed); the open goes on.
      Log("segment " + ssd::SegmentFileName(st.id) +
          ": its end could not be checked for crash garbage: " + s.ToString());
    }
  }
  if (recommits.empty() && garbage.empty()) return Status::OK();
  std::vector<ssd::JournalRecord> records = garbage;
  records.insert(records.end(), recommits.begin(), recommits.end());
  Status s = journal_->AppendRecords(records);
  if (s.ok()) s = journal_->Sync();
  if (!s.ok()) {
    // A failed append deleted the journal: the next repairing open
    // regenerates it from the metadata, which names all of this.
    Log("removal journal of " + options_.path +
        ": records bringing it in line with the metadata could not be written: " +
        s.ToString());
    return Status::OK();
  }
  report_.journal_garbage_named = garbage.size();
  report_.journal_live_recommitted = recommits.size();
  Log("removal journal of " + options_.path +
      " brought in line with the metadata: " + std::to_string(garbage.size()) +
      " extents at segment ends that nothing referenced (a store cut before its "
      "commit) journaled dead, " +
      std::to_string(recommits.size()) +
      " live blocks the journal excluded (a removal whose commit never came, a "
      "commit record lost) journaled committed");
  return Status::OK();
}

}  // namespace prefixkv
