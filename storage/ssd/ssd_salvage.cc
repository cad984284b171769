// ssd::TierImpl::RebuildFromSegments: a damaged metadata database (log,
// table, MANIFEST or CURRENT) is rebuilt from the segment files' own records
// (docs/ssd.md "Metadata repair").
//
// Every segment is walked backward from its end: the 64-byte footer before
// an extent boundary gives the extent's length, so the walk jumps from extent
// to extent (a footer-like pattern inside a payload is never looked at); past
// a damaged footer it resyncs on the previous valid one. An extent counts
// when its footer and its payload checksum are intact. Then a block is
// restored only when it is provably the key's current value:
//   - its segment is newer than the removal journal's barrier (older segments
//     were written before removals were journaled), and the journal is intact;
//   - no journaled removal names this key with these payload bytes;
//   - every other intact, unremoved extent of the key holds the same bytes
//     (two versions and no order between them: neither is provable).
// A restored block is owner 0, clean, in access order of its position in the
// segments; its parent is what SsdTierOptions::rebuilt_parent reads from its
// payload (the Engine: the block record's header), else none (a chain root).
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string_view>
#include <vector>

#include "ssd_journal.h"
#include "ssd_layout.h"
#include "ssd_segment.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace {

struct Candidate {
  BlockKey namespace_id;
  BlockKey parent;  // from the payload (SsdTierOptions::rebuilt_parent), or none
  uint64_t length = 0, checksum = 0, segment = 0, offset = 0;
};

using ParentOf =
    std::function<BlockKey(const BlockKey&, const BlockKey&, std::string_view)>;

// Appends the intact extents of one segment file to `out`; counts damaged ones.
Status WalkSegment(FileSystem* fs, const std::string& path, uint64_t id,
                   const ParentOf& parent_of,
                   std::vector<std::pair<BlockKey, Candidate>>* out, uint64_t* damaged) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs->OpenFile(path, {.mode = OpenMode::kRead}));
  PKV_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  std::vector<uint8_t> buf(size);
  PKV_ASSIGN_OR_RETURN(size_t got, f->Read(0, buf.size(), buf.data()));
  buf.resize(got);
  uint64_t end = got / ssd::kExtentAlign * ssd::kExtentAlign;
  while (end >= ssd::kExtentAlign) {
    ssd::ExtentFooter footer;
    if (!ssd::DecodeFooter(buf.data() + end - ssd::kFooterBytes, &footer) ||
        ssd::ExtentBytes(footer.length) > end) {
      end -= ssd::kExtentAlign;  // resync on the previous boundary
      continue;
    }
    const uint64_t start = end - ssd::ExtentBytes(footer.length);
    if (ssd::PayloadChecksum(buf.data() + start, footer.length) == footer.checksum) {
      BlockKey parent;
      if (parent_of && !footer.namespace_id.IsZero()) {
        parent =
            parent_of(footer.key, footer.namespace_id,
                      std::string_view(reinterpret_cast<const char*>(buf.data() + start),
                                       footer.length));
      }
      out->push_back({footer.key, Candidate{footer.namespace_id, parent, footer.length,
                                            footer.checksum, id, start}});
    } else {
      *damaged += 1;
    }
    end = start;
  }
  return Status::OK();
}

}  // namespace

Status ssd::TierImpl::RebuildFromSegments(const Status& why) {
  db_.reset();
  FileSystem* fs = options_.file_system;
  const std::string seg_dir = options_.path + "/segments";
  // 1. The damaged database's files go to a directory of their own; the
  // segment files stay where they are.
  const std::string kept =
      options_.path + "/metadata.broken-" + std::to_string(options_.clock->NowNanos());
  PKV_RETURN_IF_ERROR(fs->CreateDir(kept));
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> names, fs->ListDir(options_.path));
  for (const std::string& name : names) {
    const std::string from = options_.path + "/" + name;
    if (name == "segments" || name == "space-reserve" || name == "LOCK" ||
        name.starts_with("metadata.broken-") || !fs->FileSize(from).ok()) {
      continue;  // not the database's, or a directory
    }
    PKV_RETURN_IF_ERROR(fs->RenameFile(from, kept + "/" + name));
  }
  PKV_RETURN_IF_ERROR(fs->SyncDir(options_.path));
  // 2. What the segments hold, and what the journal says was removed.
  std::vector<std::pair<BlockKey, Candidate>> found;
  uint64_t damaged = 0, files = 0;
  StatusOr<std::vector<std::string>> segs = fs->ListDir(seg_dir);
  if (segs.ok()) {
    for (const std::string& name : *segs) {
      uint64_t id = 0;
      if (!ssd::ParseSegmentFileName(name, &id)) continue;
      files += 1;
      PKV_RETURN_IF_ERROR(WalkSegment(fs, seg_dir + "/" + name, id,
                                      options_.rebuilt_parent, &found, &damaged));
    }
  }
  const ssd::JournalContents journal = ssd::LoadJournal(fs, seg_dir);
  if (!journal.usable && segs.ok()) {
    // Nothing is provable: the segments join the damaged files (a post-mortem
    // can still read them) instead of being deleted as unreferenced.
    PKV_RETURN_IF_ERROR(fs->RenameFile(seg_dir, kept + "/segments"));
    PKV_RETURN_IF_ERROR(fs->SyncDir(options_.path));
  }
  // 3. One provable version per key, or none.
  std::map<BlockKey, std::vector<Candidate>> by_key;
  uint64_t unprovable = 0;
  for (auto& [key, c] : found) {
    if (!journal.usable || c.segment <= journal.barrier ||
        journal.removed.contains({key, c.checksum})) {
      unprovable += 1;
      continue;
    }
    by_key[key].push_back(c);
  }
  std::vector<std::pair<BlockKey, Candidate>> restored;
  for (auto& [key, cs] : by_key) {
    const Candidate& first = cs.front();
    const bool agree = std::all_of(cs.begin(), cs.end(), [&](const Candidate& c) {
      return c.namespace_id == first.namespace_id && c.length == first.length &&
             c.checksum == first.checksum;
    });
    if (!agree) {
      unprovable += cs.size();
      continue;
    }
    // The same bytes in several places (a compaction copy): the newest file.
    restored.push_back(
        {key, *std::max_element(cs.begin(), cs.end(),
                                [](const Candidate& a, const Candidate& b) {
                                  return std::pair(a.segment, a.offset) <
                                         std::pair(b.segment, b.offset);
                                })});
  }
  std::sort(restored.begin(), restored.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second.segment, a.second.offset) <
           std::pair(b.second.segment, b.second.offset);
  });
  // 4. A new database holding them.
  PKV_RETURN_IF_ERROR(OpenDb());
  rocksdb::WriteBatch batch;
  batch.Put(std::string(ssd::kFormatKey), std::string(ssd::kFormatValue));
  TierCounters owner0;
  uint64_t seq = 0, linked = 0;
  for (const auto& [key, c] : restored) {
    ssd::StoredMeta m{0,     c.parent, c.length,  c.checksum,
                      ++seq, false,    c.segment, c.offset};
    linked += c.parent.IsZero() ? 0 : 1;
    batch.Put(ssd::BlockRecordKey(ssd::kMetaTag, c.namespace_id, key),
              ssd::EncodeMeta(m));
    owner0.entries += 1;
    owner0.bytes += c.length;
  }
  if (owner0.entries > 0) batch.Put(ssd::CounterKey(0), ssd::EncodeCounters(owner0));
  rocksdb::WriteOptions w;
  w.sync = true;
  PKV_RETURN_IF_ERROR(FromRocks(db_->Write(w, &batch), "write rebuilt metadata"));
  report_.metadata_damage = why.ToString();
  report_.damaged_metadata_kept = kept;
  report_.rebuilt_blocks = restored.size();
  report_.rebuild_unprovable = unprovable;
  report_.rebuild_damaged_extents = damaged;
  Log("metadata at " + options_.path + " is damaged (" + why.ToString() +
      "); rebuilt from " + std::to_string(files) +
      " segment files: " + std::to_string(restored.size()) + " blocks restored (" +
      std::to_string(linked) + " linked to their parent), " + std::to_string(unprovable) +
      " intact records not provably current" +
      (journal.usable ? "" : " (" + journal.problem + ")") + ", " +
      std::to_string(damaged) + " damaged records; the damaged files are kept in " +
      kept);
  return Status::OK();
}

Status ssd::TierImpl::OpenJournal() {
  uint64_t max_id = 0;
  for (const ssd::SegmentState& st : store_->Snapshot()) max_id = std::max(max_id, st.id);
  ssd::SegmentStore* store = store_.get();
  PKV_ASSIGN_OR_RETURN(
      journal_,
      ssd::RemovalJournal::Open(options_.file_system, options_.path + "/segments", max_id,
                                [store](uint64_t id) { return store->Has(id); }));
  return Status::OK();
}

void ssd::TierImpl::JournalRemoval(const BlockKey& key, uint64_t checksum,
                                   uint64_t segment, uint64_t offset) {
  // A failed append deletes the journal: a rebuild then proves nothing.
  if (journal_ != nullptr) (void)journal_->Append(key, checksum, segment, offset);
}

}  // namespace prefixkv
