// The SSD tier's truth is its segment records plus the removal journal; the
// RocksDB metadata is an index that can always be rebuilt from them
// (docs/ssd.md "Metadata older than the segments"). This file holds the
// checks Open makes so that no open ever trusts metadata that is missing or
// older than the segments, and never deletes what it could rebuild:
//
//   - CheckMetadataPresent: a directory whose database files are gone beside
//     segment files that hold blocks, or whose rebuild was interrupted, is
//     damaged, not new (RocksDB would happily create an empty database, and
//     every segment would then be deleted as unreferenced);
//   - CheckSegmentsPresent: intact metadata whose segment files are gone as a
//     whole (a drive not mounted, a wrong path) is not opened for writing:
//     every block would be dropped at its first read, and the open's new
//     journal and segments would be hidden when the drive comes back;
//   - CheckAgainstJournal: an intact database that still holds extents the
//     journal says were removed, or lacks extents the journal says were
//     committed, lost its log (or was restored from an old copy): it is
//     rolled forward in place, in one atomic batch;
//   - RegenerateJournal: a missing or damaged journal beside intact metadata
//     is rebuilt from what that metadata proves dead.
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ssd_journal.h"
#include "ssd_layout.h"
#include "ssd_rocks_fs.h"
#include "ssd_salvage.h"
#include "ssd_segment.h"
#include "ssd_tag_range.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace {

using ssd::Location;
using ssd::LocationSet;

std::set<uint64_t> SegmentIds(FileSystem* fs, const std::string& seg_dir) {
  std::set<uint64_t> ids;
  StatusOr<std::vector<std::string>> names = fs->ListDir(seg_dir);
  if (!names.ok()) return ids;
  for (const std::string& name : *names) {
    uint64_t id = 0;
    if (ssd::ParseSegmentFileName(name, &id)) ids.insert(id);
  }
  return ids;
}

// The stored ids the owner name records give (ssd_owner_names.h; read
// before LoadOwnerNames does).
StatusOr<std::set<OwnerId>> NamedOwnerIds(rocksdb::DB* db) {
  std::set<OwnerId> ids;
  ssd::TagRange range(db, ssd::kOwnerNameTag);
  for (; range.Valid(); range.Next()) {
    std::string name;
    OwnerId stored = 0;
    if (ssd::DecodeOwnerName(range.key(), range.value(), &name, &stored))
      ids.insert(stored);
  }
  PKV_RETURN_IF_ERROR(range.status("read owner names"));
  return ids;
}

// Whether `missing` of the `referenced` segment files the metadata names
// being gone is the segments vanishing as a whole rather than files lost one
// by one (which stays a counted missing segment, its blocks corrupt misses):
// at least 9 in 10 of them gone and no removal journal beside (segments/
// holds next to nothing of the tier: an empty mount point). With the
// journal there, metadata naming segments a compaction has since unlinked
// is an older copy, which CheckAgainstJournal rolls forward
// (SsdRepair.RandomStoresRemovalsCompactionsAndPowerCutsAreRebuiltExactly).
bool SegmentsVanished(uint64_t referenced, uint64_t missing, bool journal_there) {
  return missing > 0 && !journal_there && missing * 10 >= referenced * 9;
}

// `found` without the extents past `frontier`, the last place the journal or
// the metadata names in their segment (counted in `unprovable`): a store's
// last append whose
// advance record (JournalNewExtents, written before its commit) a kill -9
// took, so its commit never ran (ssd_reconcile.cc names them dead, after
// this). Taken for a version, such an extent disagreed with the key's
// committed one, and a roll-forward restored neither: a SET killed right
// after its payload write lost the key's acknowledged value
// (SsdFaultTest.AFlushModeKillAfterAPayloadKeepsTheAcknowledgedVersion).
std::vector<ssd::FoundExtent> NamedExtentsOnly(
    const std::vector<ssd::FoundExtent>& found,
    const std::unordered_map<uint64_t, uint64_t>& frontier, uint64_t* unprovable) {
  std::vector<ssd::FoundExtent> out;
  for (const ssd::FoundExtent& c : found) {
    const auto f = frontier.find(c.segment);
    if (f != frontier.end() && c.offset > f->second) {
      *unprovable += 1;
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

Status ssd::TierImpl::CheckSegmentsPresent() {
  if (options_.read_only || options_.accept_missing_segments) return Status::OK();
  std::set<uint64_t> referenced;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, live] : index_.live_segments()) referenced.insert(id);
  }
  return RefuseVanishedSegments(referenced);
}

Status ssd::TierImpl::CheckSegmentsPresentBeforeWriting() {
  if (options_.read_only || options_.accept_missing_segments) return Status::OK();
  FileSystem* fs = options_.file_system;
  // Only where the rule can apply: a database beside a segments/ without
  // its journal (every open of a tier writes one).
  if (fs->FileSize(options_.path + "/segments/" + ssd::kJournalName).ok() ||
      !fs->FileSize(options_.path + "/CURRENT").ok()) {
    return Status::OK();
  }
  if (env_ == nullptr && fs != FileSystem::Default()) env_ = ssd::NewRoutedRocksEnv(fs);
  rocksdb::DB* raw = nullptr;
  // A database this cannot read is left to the open, which decides as before.
  if (!rocksdb::DB::OpenForReadOnly(DbOptions(/*direct_io=*/false), options_.path, &raw)
           .ok()) {
    return Status::OK();
  }
  const std::unique_ptr<rocksdb::DB> db(raw);
  std::set<uint64_t> referenced;
  {
    ssd::TagRange range(db.get(), ssd::kMetaTag);
    for (; range.Valid(); range.Next()) {
      ssd::StoredMeta m;
      if (ssd::DecodeMeta(range.value(), &m).ok()) referenced.insert(m.segment);
    }
    if (!range.status("read the metadata").ok()) return Status::OK();
  }
  return RefuseVanishedSegments(referenced);
}

Status ssd::TierImpl::RefuseVanishedSegments(const std::set<uint64_t>& referenced) {
  FileSystem* fs = options_.file_system;
  const std::string seg_dir = options_.path + "/segments";
  // Listed names, as OpenSegments counts them: an entry that is no regular
  // file is unreadable, not missing.
  const std::set<uint64_t> existing = SegmentIds(fs, seg_dir);
  uint64_t missing = 0;
  for (uint64_t id : referenced) missing += existing.contains(id) ? 0 : 1;
  const bool journal_there = fs->FileSize(seg_dir + "/" + ssd::kJournalName).ok();
  if (!SegmentsVanished(referenced.size(), missing, journal_there)) return Status::OK();
  return Status::Unavailable(
      std::to_string(missing) + " of " + std::to_string(referenced.size()) +
      " segment files the metadata of " + options_.path +
      " references are missing from " + seg_dir +
      ": is the drive mounted (or --data-dir wrong)? Refused, nothing changed; " +
      "if they are lost for good, `prefixkv repair --accept-missing-segments` removes " +
      "their blocks");
}

Status ssd::TierImpl::CheckMetadataPresent() {
  FileSystem* fs = options_.file_system;
  if (fs->FileSize(options_.path + "/" + ssd::kRebuildMarker).ok()) {
    return Status::Corruption("a metadata rebuild of " + options_.path +
                              " was interrupted (" + ssd::kRebuildMarker + " is there)");
  }
  if (fs->FileSize(options_.path + "/CURRENT").ok()) return Status::OK();
  if (ssd::SegmentsHoldData(fs, options_.path + "/segments")) {
    return Status::Corruption(
        "the metadata database is missing (no CURRENT file) beside segment files that "
        "hold blocks");
  }
  // The database's other files beside segments/ (which a tier's first open
  // makes after its database): a lost CURRENT, not a new tier. With no log
  // left either, RocksDB created a new database and deleted the old tables
  // as obsolete, and beside an empty mount point the tier started empty
  // (SsdFaultTest.UnreadableMetadataBesideAnEmptyMountPointIsRefused).
  StatusOr<std::vector<std::string>> names = fs->ListDir(options_.path);
  if (!names.ok() || !fs->ListDir(options_.path + "/segments").ok()) return Status::OK();
  for (const std::string& name : *names) {
    if (name.starts_with("MANIFEST-") || name.ends_with(".sst") || name.ends_with(".log")) {
      return Status::Corruption("the metadata database's CURRENT file is missing beside " +
                                name);
    }
  }
  return Status::OK();
}

Status ssd::TierImpl::CheckAgainstJournal() {
  FileSystem* fs = options_.file_system;
  const std::string seg_dir = options_.path + "/segments";
  // In flush mode the journal carries the memtable's commits across a kill
  // -9: a flush-mode tier's removal whose own commit never ran (a store
  // killed before its commit) does not take the version it names
  // (ssd_journal.h), whatever mode this open is in. Not a wal or sync tier's,
  // whose kill loses no commit, and a power cut can take a committed
  // removal's confirm record with the journal's unsynced tail
  // (SsdFaultTest.PowerLossInSyncModeLosesNothingAcknowledged). This open's
  // mode decides only for a journal written before removals said theirs.
  const ssd::JournalContents journal = ssd::LoadJournal(fs, seg_dir)
      .WithoutUncommittedRemovals(options_.durability == SsdDurability::kFlush);
  if (!journal.read_error.ok()) {
    // Neither missing nor damaged (which regenerates it from the metadata,
    // though the metadata may be older than the segments): the open fails
    // once past the metadata's own checks, which must not take this for
    // damage (Open).
    journal_read_error_ = journal.read_error;
    return Status::OK();
  }
  if (!journal.usable) {
    bool holds_blocks = false;
    {
      MutexLock lock(&mu_);
      holds_blocks = index_.size() > 0;
    }
    // A new directory has no journal yet; one that holds blocks must.
    if (holds_blocks || ssd::SegmentsHoldData(fs, seg_dir)) {
      report_.journal_problem = journal.problem;
    }
    return Status::OK();
  }
  LocationSet confirmed_at;  // removals whose commit succeeded
  for (const ssd::JournalRecord& r : journal.records) {
    if (r.confirm) confirmed_at.insert({r.segment, r.offset});
  }
  const std::set<uint64_t> existing = SegmentIds(fs, seg_dir);
  uint64_t stale = 0;
  // A segment holding a committed extent the metadata does not know — not
  // at its place, not as the same key and bytes committed later elsewhere (a
  // compaction move, a store of the same bytes again), and not dead since
  // (JournalContents::Excludes): the metadata lost every commit since some
  // point, and this segment took one of them (ssd_journal.h).
  std::set<uint64_t> lost_segments;
  {
    MutexLock lock(&mu_);
    // Only a confirmed removal: one whose commit failed (or never ran) left
    // the block live, and the metadata is right to hold it.
    for (const auto& [key, e] : index_.entries()) {
      if (confirmed_at.contains({e.segment, e.offset})) stale += 1;
    }
    for (size_t i = 0; i < journal.records.size(); ++i) {
      const ssd::JournalRecord& c = journal.records[i];
      if (!ssd::IsCommitRecord(c) || !existing.contains(c.segment) ||
          lost_segments.contains(c.segment)) {
        continue;
      }
      if (!KnowsCommit(journal, i) &&
          !journal.Excludes(c.key, c.checksum, c.segment, c.offset)) {
        lost_segments.insert(c.segment);
      }
    }
  }
  if (stale == 0 && lost_segments.empty()) return Status::OK();
  const std::string why =
      "the metadata is older than the segments and the removal journal: it holds " +
      std::to_string(stale) + " blocks removed since, and lacks the last commit to " +
      std::to_string(lost_segments.size()) + " segment files (a lost or deleted log?)";
  if (!options_.repair_damaged_metadata) {
    return Status::Corruption(why + "; `prefixkv repair` rolls it forward");
  }
  return RollForward(journal, confirmed_at, lost_segments, why);
}

bool ssd::TierImpl::KnowsCommit(const ssd::JournalContents& journal, size_t i) const {
  const ssd::JournalRecord& c = journal.records[i];
  // A key with a record of a newer layout: that layout's business, never
  // restored over it (RollForward skips it too).
  if (incompatible_keys_.contains(c.key)) return true;
  const ssd::IndexEntry* e = index_.Find(c.key);
  if (e == nullptr || e->checksum != c.checksum) return false;
  const Location held(e->segment, e->offset), committed(c.segment, c.offset);
  if (held == committed) return true;
  // The same bytes elsewhere: known if their own commit came after this one
  // (a compaction moved them on, or they were stored again). Before, they
  // are the version this commit replaced, and the metadata lost the commit.
  if (auto it = journal.last_commit_at.find(held); it != journal.last_commit_at.end()) {
    return it->second > i;
  }
  // No commit record for the held place (a journal rewrite keeps only each
  // segment's last): place order stands in for commit order.
  return held > committed;
}

Status ssd::TierImpl::RollForward(const ssd::JournalContents& journal,
                                  const ssd::LocationSet& confirmed_at,
                                  const std::set<uint64_t>& lost_segments,
                                  const std::string& why) {
  FileSystem* fs = options_.file_system;
  const std::string seg_dir = options_.path + "/segments";
  // What the lost commits wrote: only the segments they went to hold them.
  PKV_ASSIGN_OR_RETURN(ssd::SegmentScan scan,
                       ssd::WalkSegments(fs, seg_dir, options_.rebuilt_parent,
                                         [&lost_segments](uint64_t id) {
                                           return lost_segments.contains(id);
                                         }));
  std::unordered_map<uint64_t, uint64_t> frontier;  // segment -> last named place
  auto name = [&frontier](uint64_t segment, uint64_t offset) {
    auto [it, added] = frontier.try_emplace(segment, offset);
    if (!added) it->second = std::max(it->second, offset);
  };
  for (const ssd::JournalRecord& r : journal.records) name(r.segment, r.offset);
  {
    MutexLock lock(&mu_);
    for (const auto& [key, e] : index_.entries()) name(e.segment, e.offset);
  }
  uint64_t unprovable = 0;
  std::map<BlockKey, ssd::FoundExtent> provable = ssd::ProvableVersions(
      NamedExtentsOnly(scan.extents, frontier, &unprovable), journal, &unprovable);
  rocksdb::WriteBatch batch;
  Deltas deltas;
  uint64_t removed = 0, restored = 0, seq = 0;
  std::set<std::pair<BlockKey, uint64_t>> kept;  // versions the tier keeps
  LocationSet kept_at;                           // and their places
  const std::set<uint64_t> existing = SegmentIds(fs, seg_dir);
  // Whose a restored block is (extents do not say): its key's owner in the
  // metadata, else the owner of its namespace's blocks there, else 0. Owner
  // 0 was given to all of them: in a directory of named owners (docs/ssd.md
  // "Owner names") that counted a model's blocks for whichever owner had id 0.
  std::unordered_map<BlockKey, OwnerId, BlockKeyHash> owner_of_key, owner_of_ns;
  PKV_ASSIGN_OR_RETURN(std::set<OwnerId> taken, NamedOwnerIds(db_.get()));
  const bool named = !taken.empty();
  {
    MutexLock lock(&mu_);
    seq = index_.max_access_seq();
    for (const auto& [id, c] : index_.owners()) taken.insert(id);
    for (const auto& [key, e] : index_.entries()) {
      owner_of_key[key] = e.owner;
      owner_of_ns.try_emplace(e.namespace_id, e.owner);
      // A version in a segment that is gone (compacted away by the commits
      // the metadata lost) gives way to a provable one: it can no longer be
      // read, and a compaction moves a block without journaling a removal.
      const bool readable = existing.contains(e.segment) || !provable.contains(key);
      const bool confirmed = confirmed_at.contains({e.segment, e.offset});
      if (!confirmed && readable) {
        // Not removed since: the metadata's version stands (a committed
        // overwrite with other bytes journals the version it replaces before
        // it commits; one with the same bytes leaves these bytes).
        if (auto p = provable.find(key);
            p != provable.end() && p->second.checksum != e.checksum) {
          unprovable += 1;
        }
        provable.erase(key);
        kept.insert({key, e.checksum});
        kept_at.insert({e.segment, e.offset});
        continue;
      }
      batch.Delete(ssd::BlockRecordKey(ssd::kMetaTag, e.namespace_id, key));
      deltas[e.owner].entries -= 1;
      deltas[e.owner].bytes -= e.bytes;
      removed += confirmed ? 1 : 0;  // else replaced by its provable version below
    }
  }
  std::vector<ssd::FoundExtent> add;
  for (const auto& [key, c] : provable) {
    if (!incompatible_keys_.contains(key)) add.push_back(c);  // a newer layout's
  }
  std::sort(add.begin(), add.end(), [](const auto& a, const auto& b) {
    return Location(a.segment, a.offset) < Location(b.segment, b.offset);
  });
  for (const ssd::FoundExtent& c : add) {
    OwnerId owner = 0;
    if (auto k = owner_of_key.find(c.key); k != owner_of_key.end()) {
      owner = k->second;
    } else if (auto n = owner_of_ns.find(c.namespace_id); n != owner_of_ns.end()) {
      owner = n->second;
    } else if (named) {
      // A namespace the metadata holds no block of: 0 may be another
      // owner's name (counting these blocks for it). An id nobody has, one
      // per namespace, is adopted by the namespace's owner when it binds
      // (OwnerNames::Choose), or takes over when its name is recorded already
      // (OwnerNames::Bind).
      while (taken.contains(owner) || owner == kEveryOwner) ++owner;
      taken.insert(owner);
      owner_of_ns[c.namespace_id] = owner;
    }
    const ssd::StoredMeta m{owner, c.parent, c.length,  c.checksum,
                            ++seq, false,    c.segment, c.offset};
    batch.Put(ssd::BlockRecordKey(ssd::kMetaTag, c.namespace_id, c.key),
              ssd::EncodeMeta(m));
    deltas[owner].entries += 1;
    deltas[owner].bytes += c.length;
    restored += 1;
  }
  for (const auto& [o, d] : deltas) {
    if (!ssd::IsZero(d)) batch.Merge(ssd::CounterKey(o), ssd::EncodeCounters(d));
  }
  for (const ssd::FoundExtent& c : add) {
    kept.insert({c.key, c.checksum});
    kept_at.insert({c.segment, c.offset});
  }
  // What is not taken is journaled first (ssd_salvage.h NotTaken).
  PKV_RETURN_IF_ERROR(
      ssd::AppendToJournal(fs, seg_dir, options_.durability,
                           ssd::NotTaken(scan, journal, kept, kept_at)));
  // One atomic, synced batch: a kill before it leaves the database as it
  // was (the next open decides the same), after it the work is done.
  rocksdb::WriteOptions w;
  w.sync = true;
  PKV_RETURN_IF_ERROR(FromRocks(db_->Write(w, &batch), "roll the metadata forward"));
  report_.metadata_rollback = why;
  report_.rolled_forward_restored = restored;
  report_.rolled_forward_removed = removed;
  report_.rollforward_unprovable = unprovable;
  Log(why + "; rolled forward from " + std::to_string(scan.files) +
      " segment files: " + std::to_string(restored) + " blocks restored, " +
      std::to_string(removed) + " journaled removals applied, " +
      std::to_string(unprovable) + " intact records not provably current, " +
      std::to_string(scan.damaged) + " damaged records");
  // The index (and counters) again, from the database as it is now.
  return Rebuild();
}

StatusOr<std::vector<ssd::JournalRecord>> ssd::TierImpl::RegenerateJournal() {
  PKV_ASSIGN_OR_RETURN(
      ssd::SegmentScan scan,
      ssd::WalkSegments(options_.file_system, options_.path + "/segments",
                        /*parent_of=*/nullptr));
  std::vector<ssd::JournalRecord> dead;
  MutexLock lock(&mu_);
  for (const ssd::FoundExtent& c : scan.extents) {
    const ssd::IndexEntry* e = index_.Find(c.key);
    if (e != nullptr && e->segment == c.segment && e->offset == c.offset) continue;
    ssd::JournalRecord r{c.key, c.checksum, c.segment, c.offset};
    // A copy of the live bytes elsewhere (a compaction's source, a version
    // stored again with the same bytes): this extent only, as a removal of
    // the bytes would hide the live version from a rebuild. (It was left
    // unnamed: once the live version's removal was dropped with its
    // segment, a rebuild brought the removed block back from it.)
    r.extent_only = e != nullptr && e->checksum == c.checksum;
    dead.push_back(r);
  }
  return dead;
}

}  // namespace prefixkv
