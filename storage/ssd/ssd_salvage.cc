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
// A restored block is clean, under an owner id of its namespace's (one per
// namespace, adopted by the namespace's owner when it binds its name), in
// access order of its position in the segments; its parent is what
// SsdTierOptions::rebuilt_parent reads from its payload (the Engine: the block record's
// header), else none (a chain root).
#include "ssd_salvage.h"

#include <rocksdb/write_batch.h>

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ssd_journal.h"
#include "ssd_layout.h"
#include "ssd_segment.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace {

// Appends the intact extents of one segment file to `out`; counts damaged ones.
Status WalkSegment(FileSystem* fs, const std::string& path, uint64_t id,
                   const ssd::ParentOf& parent_of, ssd::SegmentScan* out) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> f,
                       fs->OpenFile(path, {.mode = OpenMode::kRead}));
  PKV_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  std::vector<uint8_t> buf(size);
  PKV_ASSIGN_OR_RETURN(size_t got, f->Read(0, buf.size(), buf.data()));
  buf.resize(got);
  uint64_t end = got / ssd::kExtentAlign * ssd::kExtentAlign;
  bool resync_pending = false;
  while (end >= ssd::kExtentAlign) {
    ssd::ExtentFooter footer;
    // (A length beyond the bytes left is checked first: ExtentBytes of a
    // length near 2^64 wraps to a small extent, and the payload checksum
    // would then read far past the buffer. Payloads are clients' bytes, and
    // the walk resyncs inside them after a damaged footer.)
    if (!ssd::DecodeFooter(buf.data() + end - ssd::kFooterBytes, id, &footer) ||
        footer.length > end || ssd::ExtentBytes(footer.length) > end) {
      end -= ssd::kExtentAlign;  // resync on the previous boundary
      resync_pending = true;
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
      out->extents.push_back(ssd::FoundExtent{footer.key, footer.namespace_id, parent,
                                              footer.length, footer.checksum, id, start,
                                              resync_pending});
      resync_pending = false;
    } else {
      out->damaged += 1;
    }
    end = start;
  }
  return Status::OK();
}

// Moves the segment files that hold no restored block but an intact extent
// the journal does not prove dead into `kept`/segments/; returns how many.
StatusOr<uint64_t> SetAsideUnprovable(FileSystem* fs, const std::string& seg_dir,
                                      const std::string& kept,
                                      const ssd::SegmentScan& scan,
                                      const std::vector<ssd::FoundExtent>& restored,
                                      const ssd::JournalContents& journal) {
  std::set<uint64_t> used, undead;
  for (const ssd::FoundExtent& c : restored) used.insert(c.segment);
  for (const ssd::FoundExtent& c : scan.extents) {
    if (!journal.usable || !journal.Excludes(c.key, c.checksum, c.segment, c.offset)) {
      undead.insert(c.segment);
    }
  }
  uint64_t moved = 0;
  for (uint64_t id : undead) {
    if (used.contains(id)) continue;
    if (moved == 0) PKV_RETURN_IF_ERROR(fs->CreateDir(kept + "/segments"));
    const std::string name = ssd::SegmentFileName(id);
    PKV_RETURN_IF_ERROR(fs->RenameFile(seg_dir + "/" + name, kept + "/segments/" + name));
    moved += 1;
  }
  if (moved > 0) {
    PKV_RETURN_IF_ERROR(fs->SyncDir(seg_dir));
    PKV_RETURN_IF_ERROR(fs->SyncDir(kept + "/segments"));
  }
  return moved;
}

// RebuildFromSegments, step 0: the marker that makes an open after a kill
// rebuild again (CheckMetadataPresent).
Status MarkRebuildStarted(FileSystem* fs, const std::string& dir,
                          const std::string& marker) {
  {
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> m,
                         fs->OpenFile(marker, {.mode = OpenMode::kCreateOrTruncate}));
    PKV_RETURN_IF_ERROR(m->Sync());
  }
  return fs->SyncDir(dir);
}

// Step 1: the damaged database's files move to `kept`; the segment files, the
// space reserve, the lock, the marker and earlier kept directories stay.
Status SetAsideDamagedMetadata(FileSystem* fs, const std::string& dir,
                               const std::string& kept) {
  PKV_RETURN_IF_ERROR(fs->CreateDir(kept));
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> names, fs->ListDir(dir));
  for (const std::string& name : names) {
    const std::string from = dir + "/" + name;
    if (name == "segments" || name == "space-reserve" || name == "LOCK" ||
        name == ssd::kRebuildMarker || name.starts_with("metadata.broken-") ||
        !fs->FileSize(from).ok()) {
      continue;  // not the database's, or a directory
    }
    PKV_RETURN_IF_ERROR(fs->RenameFile(from, kept + "/" + name));
  }
  return fs->SyncDir(dir);
}

// Step 3: one provable version per key, or none, in segment order; what is
// not taken is journaled as removed before the new database says so, so a
// rerun after a kill, or a later rebuild, decides the same.
StatusOr<std::vector<ssd::FoundExtent>> TakeProvable(FileSystem* fs,
                                                     const std::string& seg_dir,
                                                     SsdDurability durability,
                                                     const ssd::SegmentScan& scan,
                                                     const ssd::JournalContents& journal,
                                                     uint64_t* unprovable) {
  std::vector<ssd::FoundExtent> restored;
  for (auto& [key, c] : ssd::ProvableVersions(scan.extents, journal, unprovable)) {
    restored.push_back(c);
  }
  std::sort(restored.begin(), restored.end(), [](const auto& a, const auto& b) {
    return std::pair(a.segment, a.offset) < std::pair(b.segment, b.offset);
  });
  if (journal.usable) {
    std::set<std::pair<BlockKey, uint64_t>> taken;
    ssd::LocationSet taken_at;
    for (const ssd::FoundExtent& c : restored) {
      taken.insert({c.key, c.checksum});
      taken_at.insert({c.segment, c.offset});
    }
    PKV_RETURN_IF_ERROR(
        ssd::AppendToJournal(fs, seg_dir, durability,
                             ssd::NotTaken(scan, journal, taken, taken_at)));
  }
  return restored;
}

// Step 4's batch: the format key, one clean record per restored block in
// access order of its position, and the counters. The extents do not say
// whose a block is, and the owner names went with the old database: each
// namespace's blocks get an id of their own (0, 1, ... in order of first
// appearance), which the namespace's owner adopts when it binds its name
// (ssd_owner_names.h). Every block under id 0 made that id nobody's in a
// directory of several namespaces, so every model's (and the values')
// blocks, bytes and events counted for no owner until evicted.
rocksdb::WriteBatch RebuiltMetadata(const std::vector<ssd::FoundExtent>& restored,
                                    uint64_t* linked) {
  rocksdb::WriteBatch batch;
  batch.Put(std::string(ssd::kFormatKey), std::string(ssd::kFormatValue));
  std::unordered_map<BlockKey, OwnerId, BlockKeyHash> owner_of_ns;
  std::map<OwnerId, TierCounters> counters;
  uint64_t seq = 0;
  for (const ssd::FoundExtent& c : restored) {
    const OwnerId owner =
        owner_of_ns.try_emplace(c.namespace_id, static_cast<OwnerId>(owner_of_ns.size()))
            .first->second;
    ssd::StoredMeta m{owner, c.parent, c.length,  c.checksum,
                      ++seq, false,    c.segment, c.offset};
    *linked += c.parent.IsZero() ? 0 : 1;
    batch.Put(ssd::BlockRecordKey(ssd::kMetaTag, c.namespace_id, c.key),
              ssd::EncodeMeta(m));
    counters[owner].entries += 1;
    counters[owner].bytes += c.length;
  }
  for (const auto& [owner, c] : counters) {
    batch.Put(ssd::CounterKey(owner), ssd::EncodeCounters(c));
  }
  return batch;
}

}  // namespace

StatusOr<ssd::SegmentScan> ssd::WalkSegments(FileSystem* fs, const std::string& seg_dir,
                                             const ParentOf& parent_of,
                                             const std::function<bool(uint64_t)>& only) {
  SegmentScan scan;
  StatusOr<std::vector<std::string>> names = fs->ListDir(seg_dir);
  if (!names.ok()) return scan;  // no segments directory: nothing to find
  for (const std::string& name : *names) {
    uint64_t id = 0;
    if (!ParseSegmentFileName(name, &id) || (only && !only(id))) continue;
    scan.files += 1;
    scan.walked.insert(id);
    PKV_RETURN_IF_ERROR(WalkSegment(fs, seg_dir + "/" + name, id, parent_of, &scan));
  }
  return scan;
}

std::map<BlockKey, ssd::FoundExtent> ssd::ProvableVersions(
    const std::vector<FoundExtent>& found, const JournalContents& journal,
    uint64_t* unprovable) {
  std::map<BlockKey, std::vector<const FoundExtent*>> by_key;
  // Whether the walk of the current segment is out of step: past a resync
  // (inside a damaged extent's payload, or a short or torn write at the
  // segment's end) until an extent a commit record names, whose place is a
  // real extent boundary (a planted footer cannot end at one: extents never
  // overlap), so every extent below it was found footer to footer again.
  // (Until 2026-12-06 every extent below a resync needed its own commit
  // record, and a journal rewrite keeps only a few per segment: a short
  // write at a segment's end lost its acknowledged blocks in a rebuild,
  // SsdFaultTest.AShortWriteAtASegmentsEndLosesNoBlockBelowItInARebuild.)
  // `found` holds each segment's extents in walk order (WalkSegments).
  uint64_t walk_segment = 0;
  bool out_of_step = false;
  for (const FoundExtent& c : found) {
    if (c.segment != walk_segment) {
      walk_segment = c.segment;
      out_of_step = false;
    }
    if (c.resync_above) out_of_step = true;
    const bool named = journal.usable && out_of_step &&
                       journal.Commits(c.key, c.checksum, c.segment, c.offset);
    const bool suspect = out_of_step && !named;
    if (named) out_of_step = false;  // in step again below it
    if (!journal.usable || c.segment <= journal.barrier ||
        journal.Excludes(c.key, c.checksum, c.segment, c.offset) || suspect) {
      *unprovable += 1;
      continue;
    }
    by_key[c.key].push_back(&c);
  }
  std::map<BlockKey, FoundExtent> out;
  for (const auto& [key, cs] : by_key) {
    const FoundExtent& first = *cs.front();
    const bool agree = std::all_of(cs.begin(), cs.end(), [&](const FoundExtent* c) {
      return c->namespace_id == first.namespace_id && c->length == first.length &&
             c->checksum == first.checksum;
    });
    if (!agree) {
      *unprovable += cs.size();
      continue;
    }
    // The same bytes in several places (a compaction copy): the newest file.
    out[key] = **std::max_element(cs.begin(), cs.end(), [](const auto* a, const auto* b) {
      return std::pair(a->segment, a->offset) < std::pair(b->segment, b->offset);
    });
  }
  return out;
}

namespace {

// The places of `scan`'s walked segments that a commit record names, that
// hold no intact extent any more (the segment's end cut before them, or their
// bytes damaged) and that neither `kept_at` holds nor the journal excludes
// yet: each as an extent-only removal. Such a commit can never be rolled
// forward, and its record alone made CheckAgainstJournal take the metadata
// for older than the segments at every open after the repair. Extent-only:
// a place where nothing is found names no bytes another extent could share,
// and a removal of the key's bytes would exclude a live copy elsewhere.
std::vector<ssd::JournalRecord> VanishedCommits(const ssd::SegmentScan& scan,
                                                const ssd::JournalContents& journal,
                                                const ssd::LocationSet& kept_at) {
  ssd::LocationSet found;
  for (const ssd::FoundExtent& c : scan.extents) found.insert({c.segment, c.offset});
  std::vector<ssd::JournalRecord> out;
  for (const ssd::JournalRecord& c : journal.records) {
    if (!ssd::IsCommitRecord(c) || !scan.walked.contains(c.segment) ||
        found.contains({c.segment, c.offset}) ||
        kept_at.contains({c.segment, c.offset}) ||
        journal.Excludes(c.key, c.checksum, c.segment, c.offset)) {
      continue;
    }
    found.insert({c.segment, c.offset});  // one record per place
    ssd::JournalRecord r{c.key, c.checksum, c.segment, c.offset};
    r.extent_only = true;
    out.push_back(r);
  }
  return out;
}

}  // namespace

std::vector<ssd::JournalRecord> ssd::NotTaken(
    const SegmentScan& scan, const JournalContents& journal,
    const std::set<std::pair<BlockKey, uint64_t>>& kept, const LocationSet& kept_at) {
  std::vector<JournalRecord> out = VanishedCommits(scan, journal, kept_at);
  for (const FoundExtent& c : scan.extents) {
    if (journal.Excludes(c.key, c.checksum, c.segment, c.offset) ||
        kept_at.contains({c.segment, c.offset})) {
      continue;
    }
    JournalRecord r{c.key, c.checksum, c.segment, c.offset};
    r.extent_only = kept.contains({c.key, c.checksum});  // its bytes live elsewhere
    out.push_back(r);
  }
  return out;
}

Status ssd::AppendToJournal(FileSystem* fs, const std::string& seg_dir,
                            SsdDurability durability,
                            const std::vector<JournalRecord>& records) {
  if (records.empty()) return Status::OK();
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<RemovalJournal> j,
                       RemovalJournal::Open(fs, seg_dir, /*barrier_if_new=*/0,
                                            [](uint64_t) { return true; }, durability));
  for (const JournalRecord& r : records) {
    PKV_RETURN_IF_ERROR(r.extent_only
                            ? j->AppendExtentOnly(r.key, r.checksum, r.segment, r.offset)
                            : j->Append(r.key, r.checksum, r.segment, r.offset));
  }
  return j->Sync();
}

bool ssd::SegmentsHoldData(FileSystem* fs, const std::string& seg_dir) {
  StatusOr<std::vector<std::string>> names = fs->ListDir(seg_dir);
  if (!names.ok()) return false;
  for (const std::string& name : *names) {
    uint64_t id = 0;
    if (!ParseSegmentFileName(name, &id)) continue;
    StatusOr<uint64_t> size = fs->FileSize(seg_dir + "/" + name);
    if (size.ok() && *size >= kExtentAlign) return true;
  }
  return false;
}

bool SsdTier::CanRebuildMetadata(const std::string& path, FileSystem* fs) {
  const std::string seg_dir = path + "/segments";
  return fs->FileSize(seg_dir + "/" + ssd::kJournalName).ok() ||
         ssd::SegmentsHoldData(fs, seg_dir);
}

Status ssd::TierImpl::RebuildFromSegments(const Status& why) {
  db_.reset();
  FileSystem* fs = options_.file_system;
  const std::string seg_dir = options_.path + "/segments";
  // Nothing to rebuild from: no segment file with blocks and no journal
  // (every tier's open writes one) is an empty mount point, a drive not
  // mounted, where the count of missing segments (CheckSegmentsPresent)
  // needs the metadata this cannot read. Rebuilt, the tier started empty
  // and took writes there, lost once the drive came back
  // (SsdFaultTest.UnreadableMetadataBesideAnEmptyMountPointIsRefused).
  if (!options_.accept_missing_segments &&
      !SsdTier::CanRebuildMetadata(options_.path, fs)) {
    return Status::Unavailable(
        "the metadata of " + options_.path + " cannot be read (" + why.ToString() +
        ") and " + seg_dir +
        " holds no segment file and no removal journal to rebuild it from: is the "
        "drive mounted (or --data-dir wrong)? Refused, nothing changed; if the "
        "segments are lost for good, `prefixkv repair --accept-missing-segments` "
        "starts the directory empty (the metadata kept in metadata.broken-*)");
  }
  // 0. Until the new database is complete, an open that finds the marker
  // rebuilds again: a kill at any moment of this function, then another
  // open, gives what one uninterrupted run gives. Before step 4 is done
  // nothing below changes the segments, and the journal only gains removals
  // of extents this rebuild does not take, which a rerun would not take
  // either.
  const std::string marker = options_.path + "/" + ssd::kRebuildMarker;
  PKV_RETURN_IF_ERROR(MarkRebuildStarted(fs, options_.path, marker));
  // 1. The damaged database's files go to a directory of their own.
  const std::string kept =
      options_.path + "/metadata.broken-" + std::to_string(options_.clock->NowNanos());
  PKV_RETURN_IF_ERROR(SetAsideDamagedMetadata(fs, options_.path, kept));
  // 2. What the segments hold, and what the journal says was removed.
  PKV_ASSIGN_OR_RETURN(ssd::SegmentScan scan,
                       ssd::WalkSegments(fs, seg_dir, options_.rebuilt_parent));
  const ssd::JournalContents journal = ssd::LoadJournal(fs, seg_dir);
  // Unread is not missing, which proves nothing and restores nothing: the
  // marker stays, and the next open rebuilds again.
  PKV_RETURN_IF_ERROR(journal.read_error);
  // 3. One provable version per key, or none.
  uint64_t unprovable = 0;
  PKV_ASSIGN_OR_RETURN(std::vector<ssd::FoundExtent> restored,
                       TakeProvable(fs, seg_dir, options_.durability, scan, journal, &unprovable));
  // 4. A new database holding them, written synchronously.
  PKV_RETURN_IF_ERROR(OpenDb());
  uint64_t linked = 0;
  rocksdb::WriteBatch batch = RebuiltMetadata(restored, &linked);
  rocksdb::WriteOptions w;
  w.sync = true;
  PKV_RETURN_IF_ERROR(FromRocks(db_->Write(w, &batch), "write rebuilt metadata"));
  // 5. Segment files no restored block references would be deleted as
  // garbage at OpenSegments. Only those whose every intact extent the journal
  // names as removed are garbage; the others (unprovable versions: a missing
  // journal, the barrier, two versions of a key) join the damaged files, so
  // a post-mortem can still read them. Nothing is deleted that was not
  // proven dead.
  PKV_ASSIGN_OR_RETURN(uint64_t set_aside,
                       SetAsideUnprovable(fs, seg_dir, kept, scan, restored, journal));
  PKV_RETURN_IF_ERROR(fs->DeleteFile(marker));
  PKV_RETURN_IF_ERROR(fs->SyncDir(options_.path));
  report_.metadata_damage = why.ToString();
  report_.damaged_metadata_kept = kept;
  report_.rebuilt_blocks = restored.size();
  report_.rebuild_unprovable = unprovable;
  report_.rebuild_damaged_extents = scan.damaged;
  Log("metadata at " + options_.path + " is damaged (" + why.ToString() +
      "); rebuilt from " + std::to_string(scan.files) +
      " segment files: " + std::to_string(restored.size()) + " blocks restored (" +
      std::to_string(linked) + " linked to their parent), " + std::to_string(unprovable) +
      " intact records not provably current" +
      (journal.usable ? "" : " (" + journal.problem + ")") + ", " +
      std::to_string(scan.damaged) + " damaged records; the damaged files" +
      (set_aside == 0 ? ""
                      : " and " + std::to_string(set_aside) +
                            " segment files holding only unprovable records") +
      " are kept in " + kept);
  return Status::OK();
}

Status ssd::TierImpl::OpenJournal() {
  // Read-only, the journal is left as found: opening it rewrites it (its
  // records compacted), and no removal is made to journal. Open has read it
  // already (CheckAgainstJournal).
  if (options_.read_only) return Status::OK();
  uint64_t max_id = 0;
  for (const ssd::SegmentState& st : store_->Snapshot()) max_id = std::max(max_id, st.id);
  ssd::SegmentStore* store = store_.get();
  std::vector<ssd::JournalRecord> regenerated;
  if (!report_.journal_problem.empty()) {
    if (!options_.repair_damaged_metadata) {
      // audit and inspect report it and change nothing: no journal is written
      // (removals they make are not journaled; the journal proves nothing).
      return Status::OK();
    }
    // The metadata is intact (a damaged one was rebuilt, which needs a
    // journal): every intact extent it does not reference is dead.
    PKV_ASSIGN_OR_RETURN(regenerated, RegenerateJournal());
    report_.journal_regenerated = true;
    report_.journal_regenerated_removals = regenerated.size();
    Log("removal journal of " + options_.path + " was unusable (" +
        report_.journal_problem +
        "); regenerated from the intact metadata: " + std::to_string(regenerated.size()) +
        " removals of extents it does not reference");
  }
  PKV_ASSIGN_OR_RETURN(
      journal_,
      ssd::RemovalJournal::Open(
          options_.file_system, options_.path + "/segments", max_id,
          // A segment listed but unreadable (a directory or a dangling
          // link in its place) keeps its records: put back, its removed
          // extents would else read as live in a later rebuild
          // (SsdFaultTest.AJournalRewriteKeepsTheRecordsOfAnUnreadableSegment).
          // So do one kept for a newer layout's records (that layout's
          // removals in it are its only proof) and a referenced one missing
          // (SsdFaultTest.AJournalRewriteKeepsTheRecordsOfASegmentOnlyANewerLayoutReferences,
          // SsdFaultTest.AJournalRewriteKeepsTheRecordsOfAMissingSegment).
          [store, kept = journal_kept_segments_](uint64_t id) {
            return store->Has(id) || store->Unreadable(id) || kept.contains(id);
          },
          options_.durability,
          report_.journal_regenerated ? &regenerated : nullptr, store_->NextId()));
  flush_journal_.store(journal_.get(), std::memory_order_release);
  return KeepJournalsSegmentIds();
}

Status ssd::TierImpl::KeepJournalsSegmentIds() {
  // The journal remembers the ids of segments unlinked before the metadata
  // was rebuilt from the segments (which starts above the highest file) or
  // rolled back: a new segment taking one of them again would let a stale
  // extent of the old file, left in its tail, name the file it sits in, and
  // a later rebuild restored a removed block from it
  // (SsdCorruption.AnUnlinkedSegmentsIdIsNeverGivenAgainAfterARebuild).
  const uint64_t next = journal_->next_segment();
  if (next <= store_->NextId()) return Status::OK();
  store_->SetNextId(next);
  if (!options_.repair_damaged_metadata) return Status::OK();  // audit: no write
  return KeepSegmentIdsFrom(next, /*sync=*/true);
}

namespace {

// Removals this thread journaled for the metadata commit it is about to make
// (JournalRemoval, then Commit on the same thread): confirmed when it
// succeeds (ssd_journal.h). Tagged with their tier: tests run several.
struct PendingRemoval {
  const void* tier;
  ssd::JournalRecord record;
  bool confirm = true;  // false: synced before the commit, never confirmed
  uint64_t flushes_begun = 0;  // the tier's count when it was journaled
};
thread_local std::vector<PendingRemoval> t_pending_removals;

}  // namespace

void ssd::TierImpl::JournalRemoval(const BlockKey& key, uint64_t checksum,
                                   uint64_t segment, uint64_t offset, bool awaits_commit,
                                   bool extent_only, bool confirm) {
  if (journal_ == nullptr) return;
  // A failed append deletes the journal: a rebuild then proves nothing.
  const Status s = extent_only
                       ? journal_->AppendExtentOnly(key, checksum, segment, offset)
                       : journal_->Append(key, checksum, segment, offset);
  if (s.ok() && awaits_commit) {
    ssd::JournalRecord r{key, checksum, segment, offset};
    r.extent_only = extent_only;
    t_pending_removals.push_back(
        {this, r, confirm, flushes_begun_.load(std::memory_order_seq_cst)});
  }
}

void ssd::TierImpl::ConfirmRemovals(bool committed) {
  bool flushed_meanwhile = false;
  for (const PendingRemoval& p : t_pending_removals) {
    if (committed && p.confirm && p.tier == this && journal_ != nullptr) {
      const ssd::JournalRecord& r = p.record;
      (void)journal_->AppendConfirm(r.key, r.checksum, r.segment, r.offset);
      flushed_meanwhile =
          flushed_meanwhile ||
          p.flushes_begun != flushes_begun_.load(std::memory_order_seq_cst);
    }
  }
  t_pending_removals.clear();
  // A memtable flush that began since the removal was journaled may have put
  // its delete in a table after syncing the journal without this confirm; a
  // flush-mode removal left unconfirmed by a power cut is one the
  // roll-forward leaves out (WithoutUncommittedRemovals), and the removed
  // block came back though its delete was durable. Synced before the ack. A
  // flush that begins after the confirm syncs it itself.
  if (flushed_meanwhile && options_.durability == SsdDurability::kFlush) {
    if (Status s = SyncJournal(); !s.ok()) {
      Log("removal journal sync after a metadata flush failed: " + s.ToString());
    }
  }
}

Status ssd::TierImpl::SyncJournalBeforeCommit() {
  if (!write_options_.sync) return Status::OK();
  // Also for an extent-only removal (a same-bytes replacement): lost with
  // the journal's last pages, it left the replaced copy named by nothing
  // but a later removal of the key's bytes, which a journal rewrite drops
  // with its segment, and a rebuild then brought the removed block back
  // (SsdFaultTest.AnExtentOnlyRemovalLostToPowerCannotBringARemovedBlockBack).
  for (const PendingRemoval& p : t_pending_removals) {
    if (p.tier == this) return SyncJournal();
  }
  return Status::OK();
}

Status ssd::TierImpl::SyncJournal() const {
  RemovalJournal* j = flush_journal_.load(std::memory_order_acquire);
  return j == nullptr ? Status::OK() : j->Sync();
}

Status ssd::TierImpl::SyncJournalThen(const std::function<Status()>& then) const {
  RemovalJournal* j = flush_journal_.load(std::memory_order_acquire);
  return j == nullptr ? then() : j->SyncThen(then);
}

void ssd::TierImpl::JournalNewExtents(std::vector<ssd::JournalRecord> written) {
  if (journal_ == nullptr) return;
  for (ssd::JournalRecord& r : written) r.extent_only = true;
  (void)journal_->AppendRecords(written);
}

void ssd::TierImpl::JournalCommits(std::vector<ssd::JournalRecord> committed) {
  if (journal_ == nullptr) return;
  for (ssd::JournalRecord& r : committed) r.commit = true;
  // Lost with the journal, the commit they follow is in the memtable alone.
  if (!journal_->AppendRecords(committed).ok()) (void)CoverALostJournal();
}

}  // namespace prefixkv
