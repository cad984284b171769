// SsdTier segment reclamation: evicted, removed and superseded payloads leave
// garbage extents in sealed segments. The index knows the live extent bytes of
// every segment; a background thread (woken after each such write) unlinks
// sealed segments with nothing live and compacts sealed segments whose live
// fraction fell below reclaim_live_fraction: their live payloads are read back
// and verified, appended to an active segment (synced), their metadata
// repointed under each block's stripe, and the old file unlinked only once the
// metadata change is durable in the mode's sense. Disk use therefore stays
// below about live / fraction + the active segments (docs/ssd.md "Space");
// a writer that finds the files above that bound runs (or waits for) a pass
// itself before it goes on, so a fast writer cannot outrun the reclaimer.
//
// A segment with appends whose metadata is not committed yet ("pending") is
// never touched: its references may not be in the index yet.
#include <rocksdb/convenience.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ssd_layout.h"
#include "ssd_tier_impl.h"

namespace prefixkv {

void ssd::TierImpl::StartReclaimer() {
  gc_thread_ = std::thread([this] {
    MutexLock lock(&gc_mu_);
    while (true) {
      gc_cv_.Wait(lock, [&]() REQUIRES(gc_mu_) { return gc_stop_ || gc_wake_; });
      if (gc_stop_) return;
      gc_wake_ = false;
      lock.Unlock();
      Status s = ReclaimPass();  // a failure is retried at the next wake
      lock.Lock();
      if (!s.ok() && !gc_stop_) {
        // Paced like the write-back retries (clock time), so an I/O error
        // cannot spin.
        const uint64_t ms = options_.retry_interval_ms;
        options_.clock->WaitFor(gc_cv_.native(), lock.native(),
                                ms > UINT64_MAX / 1000000 ? UINT64_MAX : ms * 1000000,
                                [&]() REQUIRES(gc_mu_) { return gc_stop_; });
      }
    }
  });
}

void ssd::TierImpl::StopReclaimer() {
  {
    MutexLock lock(&gc_mu_);
    gc_stop_ = true;
    gc_cv_.NotifyAll();
  }
  if (gc_thread_.joinable()) gc_thread_.join();
}

void ssd::TierImpl::WakeReclaimer() {
  MutexLock lock(&gc_mu_);
  if (gc_wake_) return;
  gc_wake_ = true;
  gc_cv_.NotifyOne();
}

Status ssd::TierImpl::MakeMetadataDurable() {
  // A failed log writer must not be flushed or synced again (ssd_tier_impl.h).
  if (log_broken_) return Status::IOError("ssd tier: the metadata log failed");
  // The segments that relocated payloads went to are synced, but in flush and
  // wal mode their names are not: without this, power loss could take the
  // new copy's file while the old one is already unlinked.
  if (options_.durability != SsdDurability::kSync) {
    PKV_RETURN_IF_ERROR(store_->SyncDirectory());
  }
  // The journal before the metadata that depends on it (ssd_journal.h): a
  // synced log puts the deletes of every commit so far on the device, and
  // a removal whose record a power cut then took was undone by a later
  // rebuild
  // (SsdFaultTest.AWalModeRemovalMadeDurableByAReclaimPassStaysRemovedInARebuild).
  switch (options_.durability) {
    case SsdDurability::kFlush: {
      // No log: only a memtable flush makes the repointed records survive.
      // (A commit after the journal's sync is in the flushed memtable only
      // if it came before the flush began, when the flush listener syncs
      // the journal again.)
      PKV_RETURN_IF_ERROR(SyncJournal());
      rocksdb::FlushOptions fo;
      fo.wait = true;
      return FromRocks(db_->Flush(fo), "flush before reclaiming a segment");
    }
    case SsdDurability::kWal:
      // The log survives kill -9 already; synced so that power loss cannot
      // resurrect records pointing into an unlinked file either. No journal
      // record is appended between the two syncs: FlushWAL syncs every
      // commit in the log, and a removal journaled after the journal's sync
      // and committed before the log's had its delete on the device without
      // its journal record (a rebuild after a power cut brought the block
      // back:
      // SsdFaultTest.ARemovalCommittedWhileAReclaimPassSyncsTheLogStaysRemovedInARebuild).
      // Stores and removals wait for the log's sync at their journal append;
      // reads go on.
      return SyncJournalThen([this] {
        return FromRocks(db_->FlushWAL(/*sync=*/true), "sync log before reclaiming");
      });
    case SsdDurability::kSync:
      return Status::OK();  // every commit was synced
  }
  return Status::OK();
}

// A payload being moved by Relocate: the block's index entry when it was read
// back, and the verified bytes.
struct ssd::TierImpl::RelocatedBlock {
  BlockKey key;
  ssd::IndexEntry e;
  SharedBytes payload;
};

Status ssd::TierImpl::Relocate(uint64_t segment) {
  std::vector<BlockKey> keys;
  {
    MutexLock lock(&mu_);
    keys = index_.KeysIn(segment);
  }
  for (size_t at = 0; at < keys.size();) {
    std::vector<RelocatedBlock> moving;
    PKV_RETURN_IF_ERROR(ReadBackForRelocation(segment, keys, &at, &moving));
    if (moving.empty()) continue;
    std::vector<ssd::ExtentLocation> to;
    PKV_RETURN_IF_ERROR(CopyRelocated(moving, &to));
    bool seal_copies = false;
    Status s = RepointRelocated(segment, moving, to, &seal_copies);
    store_->EndPending(to.front().segment, seal_copies);
    PKV_RETURN_IF_ERROR(s);
  }
  return Status::OK();
}

Status ssd::TierImpl::ReadBackForRelocation(uint64_t segment,
                                            const std::vector<BlockKey>& keys, size_t* at,
                                            std::vector<RelocatedBlock>* moving) {
  // Up to a write-back batch's worth.
  uint64_t bytes = 0;
  for (; *at < keys.size() && moving->size() < ssd::WriteBackQueue::kMaxBatchBlocks &&
         bytes < ssd::WriteBackQueue::kMaxBatchBytes;
       ++*at) {
    const BlockKey& key = keys[*at];
    BlockLock block_lock(this, key);
    ssd::IndexEntry e;
    {
      MutexLock lock(&mu_);
      const ssd::IndexEntry* found = index_.Find(key);
      if (found == nullptr || found->segment != segment) continue;  // moved on
      e = *found;
    }
    StatusOr<SharedBytes> read = ReadVerified(key, e, /*lookup=*/false);  // drops a damaged one
    if (read.status().IsNotFound()) continue;
    PKV_RETURN_IF_ERROR(read.status());
    bytes += e.bytes;
    moving->push_back({key, e, *std::move(read)});
  }
  return Status::OK();
}

Status ssd::TierImpl::CopyRelocated(const std::vector<RelocatedBlock>& moving,
                                    std::vector<ssd::ExtentLocation>* to) {
  std::vector<ssd::ExtentSpec> extents;
  for (const RelocatedBlock& m : moving) {
    extents.push_back({m.e.namespace_id, m.key, &m.payload, m.e.checksum});
  }
  PKV_RETURN_IF_ERROR(CheckDiskSpace());  // a copy needs room first
  // Synced: the old copy is unlinked after this, in every mode.
  Status w = store_->Append(extents, /*sync=*/true, to);
  if (!w.ok()) {
    NoteNoSpace(w);
    return w;
  }
  std::vector<ssd::JournalRecord> written;
  for (size_t i = 0; i < moving.size(); ++i) {
    written.push_back(
        {moving[i].key, moving[i].e.checksum, (*to)[i].segment, (*to)[i].offset});
  }
  JournalNewExtents(std::move(written));  // crash garbage unless repointed
  return w;
}

Status ssd::TierImpl::RepointRelocated(uint64_t segment,
                                       const std::vector<RelocatedBlock>& moving,
                                       const std::vector<ssd::ExtentLocation>& to,
                                       bool* seal_copies) {
  std::vector<BlockKey> moving_keys;
  for (const RelocatedBlock& m : moving) moving_keys.push_back(m.key);
  BatchLock batch_lock(this, moving_keys);
  rocksdb::WriteBatch batch;
  std::vector<bool> still;
  {
    MutexLock lock(&mu_);
    still = AddRepoints(segment, moving, to, &batch);
  }
  for (size_t i = 0; i < moving.size(); ++i) {
    // A copy of a block replaced or removed meanwhile is garbage from
    // birth: journaled (outside mu_), so a metadata rebuild does not take
    // it for a live block. This extent only: a removal journaled its
    // bytes already, and a replacement with the same bytes keeps them live
    // (journaling the bytes excluded that live version from a rebuild).
    if (!still[i]) {
      JournalRemoval(moving[i].key, moving[i].e.checksum, to[i].segment, to[i].offset,
                     /*awaits_commit=*/true, /*extent_only=*/true);
    }
  }
  // Each moved block's old place is dead once the repoint commits: the
  // segment is unlinked when the whole relocation is done, but one cut short
  // (a later batch failing, a kill, a power cut) leaves it, and a copy no
  // record names came back by a rebuild once the block's removal was dropped
  // with its new segment. Journaled before the commit (synced with it in
  // sync mode): appended after it, unsynced, a power cut took the record and
  // left the durable repoint (found 2026-12-06). Never confirmed: metadata
  // that missed the repoint (a power cut in wal or flush mode) rightly holds
  // the block at its old place, intact until the segment is unlinked after
  // the repoint is durable; a confirm there made the next open take it for
  // rolled back and drop the block
  // (SsdFaultTest.APowerCutAfterARepointCommitNeverLosesTheMovedBlock).
  std::vector<ssd::JournalRecord> old_places, new_places;
  for (size_t i = 0; i < moving.size(); ++i) {
    if (!still[i]) continue;
    JournalRemoval(moving[i].key, moving[i].e.checksum, moving[i].e.segment,
                   moving[i].e.offset, /*awaits_commit=*/true, /*extent_only=*/true,
                   /*confirm=*/false);
    old_places.push_back(
        {moving[i].key, moving[i].e.checksum, moving[i].e.segment, moving[i].e.offset});
    new_places.push_back(
        {moving[i].key, moving[i].e.checksum, to[i].segment, to[i].offset});
  }
  Status s;
  if (batch.Count() > 0) {
    s = Commit(&batch, {}, moving.front().e.owner);
  } else {
    // No commit follows (every block was replaced or removed meanwhile):
    // the copies' records are synced now, before this segment's appender
    // goes to another writer (EndPending), whose store, committed above the
    // copies, stops the open's walk from the segment's end. Unsynced, a
    // power cut took them and left the copies named only by their blocks'
    // removals, which a journal rewrite drops with the source segment: a
    // rebuild brought a removed block back
    // (SsdFaultTest.ACompactionCopyOfABlockRemovedMeanwhileIsNamedBeforeItsSegmentMovesOn).
    ConfirmRemovals(/*committed=*/false);  // nothing to confirm: no commit
    // If the sync fails, no other writer appends above the copies: the
    // segment is sealed, and the open's walk from its end reaches them
    // (SsdFaultTest.ACompactionCopyOfABlockRemovedMeanwhileIsNamedBeforeItsSegmentMovesOn,
    // second case).
    if (!SyncJournal().ok()) *seal_copies = true;
  }
  if (!s.ok()) {
    // Copies no metadata points at: garbage from birth too, named so that
    // no rebuild takes one once the block's own removal is gone with its
    // segment (they were left unnamed, and a removed block came back). The
    // old places hold the blocks still: live again by a commit record
    // after their removal. Synced (a failure path): these records are all
    // that name the copies once later batches append after them.
    for (const ssd::JournalRecord& r : new_places) {
      JournalRemoval(r.key, r.checksum, r.segment, r.offset,
                     /*awaits_commit=*/false, /*extent_only=*/true);
    }
    JournalCommits(std::move(old_places));
    (void)SyncJournal();
  }
  if (s.ok() && batch.Count() > 0) {
    // Each moved block's new place, under the blocks' locks (JournalCommits).
    JournalCommits(std::move(new_places));
  }
  if (s.ok()) {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < moving.size(); ++i) {
      if (still[i]) index_.Relocate(moving[i].key, to[i].segment, to[i].offset);
    }
  }
  return s;
}

std::vector<bool> ssd::TierImpl::AddRepoints(uint64_t segment,
                                             const std::vector<RelocatedBlock>& moving,
                                             const std::vector<ssd::ExtentLocation>& to,
                                             rocksdb::WriteBatch* batch) {
  std::vector<bool> still(moving.size(), false);
  for (size_t i = 0; i < moving.size(); ++i) {
    const ssd::IndexEntry* cur = index_.Find(moving[i].key);
    // Repointed only if nothing replaced or removed it meanwhile (a read's
    // new access order is taken from the index here, so it is kept).
    if (cur == nullptr || cur->segment != segment || cur->offset != moving[i].e.offset ||
        cur->checksum != moving[i].e.checksum)
      continue;
    still[i] = true;
    ssd::StoredMeta m{
        cur->owner,    cur->parent,     cur->bytes,
        cur->checksum, cur->access_seq, cur->dirty,
        to[i].segment, to[i].offset,    ssd::PersistedChainHits(cur->chain_hits)};
    batch->Put(ssd::BlockRecordKey(ssd::kMetaTag, cur->namespace_id, moving[i].key),
               ssd::EncodeMeta(m));
  }
  return still;
}

void ssd::TierImpl::ThrottleWrites() {
  uint64_t file_bytes = 0, active = 0;
  store_->Usage(&file_bytes, &active);
  // The disk bound (docs/ssd.md "Space"): the files back within the capacity
  // less half a segment before this writer goes on, so that the next write
  // and a compaction's copies (less than a segment) stay within capacity
  // plus one segment.
  const uint64_t disk_target = options_.capacity_bytes - options_.segment_bytes / 2;
  if (DiskBounded() && file_bytes > disk_target) {
    MutexLock run(&gc_run_mu_);
    (void)ReclaimLocked(disk_target);
    return;
  }
  if (options_.reclaim_live_fraction <= 0) return;  // only empty segments go
  uint64_t live = 0;
  {
    MutexLock lock(&mu_);
    live = index_.live_total();
  }
  // The documented bound: live / fraction for the sealed segments, plus the
  // active segments and one being compacted.
  const double bound = static_cast<double>(live) / options_.reclaim_live_fraction +
                       static_cast<double>((active + 1) * options_.segment_bytes);
  if (static_cast<double>(file_bytes) <= bound) return;
  // The reclaimer is behind: this writer runs a pass itself (after the one
  // in progress, if any) before it writes more.
  // (A pass in progress may have looked before this write's garbage existed,
  // so after waiting for it the writer still runs its own.)
  MutexLock run(&gc_run_mu_);
  (void)ReclaimLocked();
}

Status ssd::TierImpl::ReclaimPass() {
  MutexLock run(&gc_run_mu_);
  return ReclaimLocked();
}

Status ssd::TierImpl::ReclaimLocked(uint64_t target) {
  // Pending and sealed state first, live bytes second: a segment seen sealed
  // with nothing pending gets no new reference, and every reference it had is
  // already in the index (EndPending follows the index update).
  const std::vector<ssd::SegmentState> segments = store_->Snapshot();
  std::vector<uint64_t> empty, sparse;
  {
    MutexLock lock(&mu_);
    for (const ssd::SegmentState& st : segments) {
      if (!st.sealed || st.pending > 0) continue;
      const uint64_t live = index_.LiveBytes(st.id);
      if (live == 0) {
        empty.push_back(st.id);
      } else if (static_cast<double>(live) <
                 options_.reclaim_live_fraction * static_cast<double>(st.bytes)) {
        sparse.push_back(st.id);
      }
    }
  }
  Status first;
  for (uint64_t id : sparse) {
    Status s = Relocate(id);
    MutexLock lock(&mu_);
    if (s.ok() && index_.LiveBytes(id) == 0) {
      empty.push_back(id);
    } else if (first.ok() && !s.ok()) {
      first = s;
    }
  }
  first = UnlinkEmpty(empty, first);
  if (target > 0 && first.ok()) first = CompactDownTo(target);
  if (!first.ok()) Log("segment reclamation: " + first.ToString());
  return first;
}

Status ssd::TierImpl::UnlinkEmpty(const std::vector<uint64_t>& empty, Status first) {
  if (empty.empty()) return first;
  // Their ids are never given again (ssd_layout.h kNextSegmentKey), made
  // durable with the metadata before any file goes.
  const uint64_t above = *std::max_element(empty.begin(), empty.end()) + 1;
  if (Status s = KeepSegmentIdsFrom(above, /*sync=*/false); !s.ok()) {
    return first.ok() ? s : first;
  }
  Status durable = MakeMetadataDurable();
  if (!durable.ok()) return first.ok() ? durable : first;
  for (uint64_t id : empty) {
    Status s = store_->Delete(id);
    if (first.ok()) first = s;
  }
  return first;
}

Status ssd::TierImpl::CompactDownTo(uint64_t target) {
  // Sparsest first: the most garbage freed per byte copied. Each segment at
  // most once per call, so the copies (to active segments) cannot chase
  // themselves.
  std::vector<std::pair<double, uint64_t>> order;  // live fraction, id
  {
    const std::vector<ssd::SegmentState> segments = store_->Snapshot();
    MutexLock lock(&mu_);
    for (const ssd::SegmentState& st : segments) {
      if (!st.sealed || st.pending > 0 || st.bytes == 0) continue;
      order.emplace_back(
          static_cast<double>(index_.LiveBytes(st.id)) / static_cast<double>(st.bytes),
          st.id);
    }
  }
  std::sort(order.begin(), order.end());
  for (const auto& [fraction, id] : order) {
    uint64_t file_bytes = 0, active = 0;
    store_->Usage(&file_bytes, &active);
    if (file_bytes <= target || fraction >= 1) return Status::OK();
    PKV_RETURN_IF_ERROR(Relocate(id));
    bool empty = false;
    {
      MutexLock lock(&mu_);
      empty = index_.LiveBytes(id) == 0;
    }
    if (empty) PKV_RETURN_IF_ERROR(UnlinkEmpty({id}, Status::OK()));
  }
  return Status::OK();
}

Status ssd::TierImpl::Compact() {
  PKV_RETURN_IF_ERROR(ReclaimPass());
  rocksdb::CompactRangeOptions o;
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  Status s = FromRocks(db_->CompactRange(o, nullptr, nullptr), "compact");
  NoteWriteResult(s);
  return s;
}

SsdSpaceUsage ssd::TierImpl::SpaceUsage() const {
  SsdSpaceUsage u;
  u.bytes_written = store_->bytes_written();
  for (const ssd::SegmentState& st : store_->Snapshot()) {
    u.segments += 1;
    u.file_bytes += st.bytes;
    if (!st.sealed) u.active_segments += 1;
  }
  MutexLock lock(&mu_);
  for (const auto& [id, live] : index_.live_segments()) u.live_bytes += live;
  return u;
}

}  // namespace prefixkv
