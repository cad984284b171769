// ssd::TierImpl::Rebuild: the in-memory index and counters from the records.
//
// Entries and bytes are recomputed from the metadata records and compared
// with the persisted counter records; a disagreement is reported (open report
// and log) and repaired by merging the difference. Event counters (hits, ...)
// cannot be recomputed and are taken as persisted. Payloads are not read here
// (that would read every segment); each is verified when it is first read.
// OpenSegments then recomputes each segment's live bytes (the index does) and
// deletes segment files no record references.
#include <rocksdb/iterator.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "ssd_journal.h"
#include "ssd_layout.h"
#include "ssd_salvage.h"
#include "ssd_segment.h"
#include "ssd_tier_impl.h"

namespace prefixkv {

Status ssd::TierImpl::CheckFormat() {
  std::string value;
  rocksdb::Status rs =
      db_->Get(rocksdb::ReadOptions(), std::string(ssd::kFormatKey), &value);
  if (rs.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) {
      // Records without our marker are damage of our metadata (rebuilt from
      // the segments), unless this never was a tier's directory: every tier
      // makes segments/ at its first open. Then it is another program's
      // RocksDB database (a --data-dir pointing at the wrong place), whose
      // files a "rebuild" moved into metadata.broken-* before taking the
      // directory over: `prefixkv serve` or `repair` broke that program.
      if (!options_.file_system->ListDir(options_.path + "/segments").ok()) {
        return Status::InvalidArgument(
            options_.path +
            " holds a RocksDB database that is no prefixkv data directory (records "
            "without a format marker, no segments/): refused, its records left in place");
      }
      return Status::Corruption("records without a format marker");
    }
    PKV_RETURN_IF_ERROR(FromRocks(it->status(), "scan"));
    if (ssd::SegmentsHoldData(options_.file_system, options_.path + "/segments")) {
      // Its files were lost (or a rebuild died before writing it): the
      // segments hold the blocks, so this is damage, not a new tier.
      return Status::Corruption(
          "the metadata database is empty beside segment files that hold blocks");
    }
    report_.created = true;
    if (options_.read_only) return Status::OK();  // an empty database, as found
    rocksdb::WriteOptions w;
    w.sync = true;
    return FromRocks(
        db_->Put(w, std::string(ssd::kFormatKey), std::string(ssd::kFormatValue)),
        "write format marker");
  }
  PKV_RETURN_IF_ERROR(FromRocks(rs, "read format marker"));
  if (value != ssd::kFormatValue) {
    // Older layouts (prefixkv-ssd/1 kept payloads in RocksDB blob files) are
    // not converted: the directory is moved aside like a damaged one.
    return Status::Corruption("format " + value + " is not " +
                              std::string(ssd::kFormatValue) +
                              " (an older or foreign layout)");
  }
  rs = db_->Get(rocksdb::ReadOptions(), std::string(ssd::kCleanKey), &value);
  report_.previous_shutdown_clean = rs.ok() && value == "1";
  return Status::OK();
}

bool ssd::TierImpl::SegmentsProveEveryBlock() const {
  FileSystem* fs = options_.file_system;
  const std::string seg_dir = options_.path + "/segments";
  const ssd::JournalContents journal = ssd::LoadJournal(fs, seg_dir);
  if (!journal.usable) return false;
  StatusOr<std::vector<std::string>> names = fs->ListDir(seg_dir);
  if (!names.ok()) return false;
  for (const std::string& name : *names) {
    uint64_t id = 0;
    if (ssd::ParseSegmentFileName(name, &id) && id <= journal.barrier) return false;
  }
  return true;
}

Status ssd::TierImpl::RebuildIndex(rocksdb::WriteBatch* drops) {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.readahead_size = 2 << 20;
  // Bounded to the metadata range: nothing else needs reading.
  const std::string end(1, static_cast<char>(ssd::kMetaTag + 1));
  const rocksdb::Slice upper(end);
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  // Built unlocked while the records are read; installed under mu_ at the end.
  ssd::SsdIndex index = EmptyIndex();
  const std::string begin(1, ssd::kMetaTag);
  // A record failing its own checksum (RocksDB's passed: it was wrong when
  // written) is damaged metadata, not a removal: dropping it left its block's
  // intact extent unreferenced, and OpenSegments then deleted the segment
  // that held it (docs/ssd.md "The invariant"). Open rebuilds from the
  // segments instead, or with repair off reports it and changes nothing.
  // Unless the segments cannot prove every block (an unusable journal, or
  // segments from before it): a rebuild would then restore none, and only
  // the damaged records are dropped, as before.
  std::string damage;
  uint64_t damaged = 0;
  report_.incompatible_records = 0;  // (a roll-forward reads the records again)
  incompatible_keys_.clear();
  for (it->Seek(begin); it->Valid() && it->key().starts_with(begin); it->Next()) {
    BlockKey ns, key;
    ssd::StoredMeta m;
    Status s = Status::OK();
    if (!ssd::ParseBlockRecordKey(it->key().ToStringView(), &ns, &key)) {
      s = Status::Corruption("a block metadata record has a malformed key");
    } else {
      s = ssd::DecodeMeta(it->value().ToStringView(), &m);
      if (s.code() == StatusCode::kNotSupported) {
        report_.incompatible_records += 1;  // kept (purgeable), never served
        incompatible_keys_.insert(key);
        continue;
      }
      if (!s.ok()) {
        s = Status::Corruption("the metadata record of block " + key.ToHex() +
                               " is damaged: " + s.ToString());
      }
    }
    if (!s.ok()) {
      if (damaged++ == 0) damage = s.message();
      drops->Delete(it->key());
      continue;
    }
    index.Insert(
        key,
        ssd::IndexEntry{ns, m.parent, m.owner, m.payload_bytes, m.payload_xxh3,
                        m.access_seq, m.dirty, m.segment, m.offset, m.chain_hits},
        /*inherit=*/false);
  }
  PKV_RETURN_IF_ERROR(FromRocks(it->status(), "scan block metadata"));
  if (damaged > 0) {
    if (!options_.repair_damaged_metadata || SegmentsProveEveryBlock()) {
      return Status::Corruption(damage);
    }
    report_.corrupt_records_removed = damaged;
    Log(std::to_string(damaged) + " damaged metadata records dropped (" + damage +
        "): the segments cannot prove every block (no usable removal journal, or " +
        "segments from before it), so a rebuild would restore none");
  }
  MutexLock lock(&mu_);
  index_ = std::move(index);
  if (damaged > 0) unpersisted_[0].corruptions += damaged;
  return Status::OK();
}

Status ssd::TierImpl::RepairCounters() {
  Deltas persisted;
  rocksdb::ReadOptions ro;
  const std::string end(1, static_cast<char>(ssd::kCounterTag + 1));
  const rocksdb::Slice upper(end);
  ro.iterate_upper_bound = &upper;  // never step onto other records
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  const std::string begin(1, ssd::kCounterTag);
  for (it->Seek(begin); it->Valid() && it->key().starts_with(begin); it->Next()) {
    OwnerId owner;
    TierCounters c;
    if (!ssd::ParseCounterKey(it->key().ToStringView(), &owner) ||
        !ssd::DecodeCounters(it->value().ToStringView(), &c)) {
      return Status::Corruption("malformed counter record");
    }
    persisted[owner] = c;
  }
  PKV_RETURN_IF_ERROR(FromRocks(it->status(), "scan counters"));
  MutexLock lock(&mu_);
  std::set<OwnerId> owners;
  for (const auto& [o, c] : persisted) owners.insert(o);
  for (const auto& [o, c] : index_.owners()) owners.insert(o);
  // An owner whose only news is a corruption the scan found (owner 0 with no
  // block and no counter record yet) must still see it counted.
  for (const auto& [o, c] : unpersisted_) owners.insert(o);
  for (OwnerId o : owners) {
    const TierCounters recomputed = index_.OwnerCounters(o);
    TierCounters live = persisted[o];
    TierCounters fix;
    for (auto field : {&TierCounters::entries, &TierCounters::bytes}) {
      if (live.*field == recomputed.*field) continue;
      report_.counter_repairs.push_back(
          {"owner " + std::to_string(o) +
               (field == &TierCounters::entries ? " entries" : " bytes"),
           "persisted " + std::to_string(live.*field) + ", recomputed " +
               std::to_string(recomputed.*field)});
      fix.*field = recomputed.*field - live.*field;  // wraps for decreases
      live.*field = recomputed.*field;
    }
    ssd::AddCounters(&live, unpersisted_[o]);  // corruptions found by the scan
    ssd::AddCounters(&unpersisted_[o], fix);
    index_.Owner(o) = live;
  }
  lock.Unlock();
  for (const AuditFinding& f : report_.counter_repairs) {
    Log("counter repaired at open: " + f.what + ": " + f.detail);
  }
  return Status::OK();
}

Status ssd::TierImpl::OpenSegments() {
  store_ = std::make_unique<ssd::SegmentStore>(ssd::SegmentStore::Options{
      .dir = options_.path + "/segments",
      .fs = options_.file_system,
      .direct_io = options_.use_direct_io,
      .segment_bytes = options_.segment_bytes,
      .sync_directory = options_.durability == SsdDurability::kSync,
      .read_only = options_.read_only,
      .read_memory = options_.read_memory,
      .keep_ids_from = [this](uint64_t id) { return KeepADiscardedSegmentsId(id); }});
  std::map<uint64_t, uint64_t> found;
  PKV_RETURN_IF_ERROR(store_->Open(&found));
  direct_io_ = store_->direct_io();
  std::unordered_map<uint64_t, uint64_t> live_segments;  // id -> live bytes
  {
    MutexLock lock(&mu_);
    live_segments = index_.live_segments();
  }
  uint64_t max_id = 0;
  for (const auto& [id, bytes] : found) {
    max_id = std::max(max_id, id);
    if (auto it = live_segments.find(id); it == live_segments.end() || it->second == 0) {
      // Records of an unknown (newer) layout name segments this code cannot
      // see: while any exist, an unreferenced segment is left alone (not
      // adopted either, so the reclaimer does not unlink it). A read-only
      // open leaves it to the next writing open, which decides the same.
      if (report_.incompatible_records > 0 || options_.read_only) {
        report_.unreferenced_segments_kept += 1;
        journal_kept_segments_.insert(id);
        continue;
      }
      // Written before a crash, never (or no longer) referenced: garbage.
      // Its id is never given again (ssd_layout.h kNextSegmentKey).
      PKV_RETURN_IF_ERROR(KeepSegmentIdsFrom(id + 1, /*sync=*/true));
      PKV_RETURN_IF_ERROR(store_->Delete(id));
      report_.unreferenced_segments_deleted += 1;
      continue;
    }
    PKV_RETURN_IF_ERROR(store_->Adopt(id, bytes));  // sealed: never appended to again
    report_.segments += 1;
  }
  for (const auto& [id, live] : live_segments) {
    max_id = std::max(max_id, id);
    if (found.count(id) == 0 && store_->Unreadable(id)) {
      Log("segment " + ssd::SegmentFileName(id) + " is not a readable file: its " +
          std::to_string(live) +
          " bytes of blocks fail their reads until it is put right");
    } else if (found.count(id) == 0) {
      report_.missing_segments += 1;
      journal_kept_segments_.insert(id);
      Log("segment " + ssd::SegmentFileName(id) + " is missing: its " +
          std::to_string(live) + " bytes of blocks will read as corrupt");
    }
  }
  store_->SetNextId(max_id + 1);
  if (options_.read_only) return Status::OK();  // it writes no segment
  PKV_ASSIGN_OR_RETURN(const uint64_t kept_from, SegmentIdsKeptFrom());
  store_->SetNextId(kept_from);
  return Status::OK();
}

StatusOr<uint64_t> ssd::TierImpl::SegmentIdsKeptFrom() const {
  std::string value;
  rocksdb::Status rs =
      db_->Get(rocksdb::ReadOptions(), std::string(ssd::kNextSegmentKey), &value);
  if (rs.IsNotFound()) return uint64_t{0};
  PKV_RETURN_IF_ERROR(FromRocks(rs, "read the next segment id"));
  if (value.size() != 8) return uint64_t{0};  // damaged: the files' ids stand
  return ssd::LoadLE64(reinterpret_cast<const uint8_t*>(value.data()));
}

Status ssd::TierImpl::KeepSegmentIdsFrom(uint64_t id, bool sync) {
  // Writers whose first append failed call this beside the reclaimer: one
  // at a time, so a lower id never overwrites a higher one read meanwhile.
  MutexLock lock(&keep_ids_mu_);
  // A failed log writer must not be appended to again (ssd_tier_impl.h).
  if (log_broken_) return Status::IOError("ssd tier: the metadata log failed");
  PKV_ASSIGN_OR_RETURN(const uint64_t kept_from, SegmentIdsKeptFrom());
  if (kept_from >= id) return Status::OK();
  std::string value(8, '\0');
  ssd::StoreLE64(reinterpret_cast<uint8_t*>(value.data()), id);
  rocksdb::WriteOptions w;
  w.sync = sync;
  // Through DbWrite, as every write that can run beside other commits (the
  // reclaimer's, here): its frame is the one the TSan suppressions name.
  rocksdb::WriteBatch batch;
  batch.Put(std::string(ssd::kNextSegmentKey), value);
  const rocksdb::Status rs = DbWrite(w, &batch);
  // As in Commit: the log writer keeps a failed write's error.
  if (!rs.ok() && rs.ToString().find(".log") != std::string::npos &&
      !log_broken_.exchange(true)) {
    Log("metadata log write failed (" + rs.ToString() +
        "): no metadata write until the tier is reopened");
  }
  return FromRocks(rs, "keep the next segment id");
}

Status ssd::TierImpl::KeepADiscardedSegmentsId(uint64_t id) {
  // The journal's floor too: no record of it names the segment (it never
  // held a commit), and a rebuild from the segments replaces the metadata's
  // copy and takes the lowest new id from the files and the journal. Kept
  // in the metadata alone, the id was given again after such a rebuild
  // (SsdFaultTest.AFailedFirstAppendsSegmentIdIsNeverGivenAgainAfterARebuild).
  if (journal_ != nullptr) PKV_RETURN_IF_ERROR(journal_->KeepSegmentIdsFrom(id));
  return KeepSegmentIdsFrom(id, /*sync=*/true);
}

Status ssd::TierImpl::Rebuild() {
  PKV_RETURN_IF_ERROR(CheckFormat());
  rocksdb::WriteBatch repairs;  // damaged records dropped, if any
  PKV_RETURN_IF_ERROR(RebuildIndex(&repairs));
  PKV_RETURN_IF_ERROR(RepairCounters());
  // Before the first write: refused, the directory stays as it was.
  PKV_RETURN_IF_ERROR(CheckSegmentsPresent());
  bool unpersisted = false;
  {
    MutexLock lock(&mu_);
    next_seq_ = index_.max_access_seq();
    report_.blocks = index_.size();
    report_.bytes = index_.bytes();
    unpersisted = !unpersisted_.empty();
  }
  // Read-only, the counter fixes stay in memory (the persisted counters,
  // as found, are what Audit compares).
  if ((unpersisted || repairs.Count() > 0) && !options_.read_only) {
    return Commit(&repairs, {}, 0);  // also merges the counter fixes
  }
  return Status::OK();
}

}  // namespace prefixkv
