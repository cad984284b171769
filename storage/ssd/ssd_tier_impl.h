// ssd::TierImpl: the SSD tier's state behind SsdTier, shared by ssd_tier.cc
// (read/write paths), ssd_eviction.cc (capacity), ssd_reclaim.cc (segment
// space), ssd_recovery.cc and ssd_rebuild.cc (Open/Close) and ssd_audit.cc.
// Private to storage/ssd: the public header only forward-declares it, and
// ssd::Access (below) is the module's one way from an SsdTier to it.
//
// Locking (the annotations are checked by clang's -Wthread-safety): a write
// appends its payloads to a segment WITHOUT any block lock (the append goes
// to the writer's own active segment), then holds pause_ shared and the
// stripes of its keys across the metadata commit and the index update, so
// writes of one key are serialized at the commit (the last commit wins; a
// superseded extent is garbage) while different keys proceed in parallel.
// Reads, removes, evictions and segment compaction hold the block's stripe
// (BlockLock); a reads' access-order batch (ssd_access_order.cc) holds the
// stripes of its blocks (BatchLock) across reading their index entries and
// its commit, taken after the reading thread let go of its BlockLock. Audit
// holds pause_ exclusively. mu_ guards the in-memory index
// (including live bytes per segment), the not-yet-persisted event counters
// and the eviction listener; it is never held across I/O or while taking
// another lock. Lock order: gc_run_mu_, pause_, stripes (ascending), then
// one of mu_ or gc_mu_ (never both). The segment store, the write-back queue
// and the file system have their own locks, never taken with mu_ or gc_mu_
// held; the queue calls Store() without holding its lock.
#pragma once

#include <rocksdb/db.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <unordered_set>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "ssd_index.h"
#include "ssd_journal.h"
#include "ssd_layout.h"
#include "ssd_owner_names.h"
#include "ssd_read_ahead.h"
#include "ssd_salvage.h"
#include "ssd_segment.h"
#include "ssd_writer.h"

namespace prefixkv::ssd {

// SsdTier befriends this (and nothing else): the module's open paths wrap a
// TierImpl in an SsdTier, and module code (the test peer included) reaches a
// tier's TierImpl back.
struct Access {
  static std::unique_ptr<SsdTier> Wrap(std::unique_ptr<TierImpl> impl);
  static TierImpl& ImplOf(SsdTier& tier);
};

// Thread-safe, like SsdTier.
class TierImpl {
 public:
  explicit TierImpl(const SsdTierOptions& options);
  // An index with no entries, ordering its leaves by options_.policy.
  SsdIndex EmptyIndex() const;
  ~TierImpl();

  // Checks the options Open relies on (path, clock, file system, sizes).
  static Status ValidateOptions(const SsdTierOptions& options);
  // ssd_space.cc. The options in effect: segment_bytes at most capacity / 16
  // (at least 64 KiB), so that a small tier's garbage is in sealed segments
  // the reclaimer can unlink, not in one huge active segment; and
  // write_buffer_bytes at most capacity / 64 (at least 256 KiB): the
  // metadata is ~110 bytes per block of at least 4 KiB on disk, and RocksDB
  // preallocates 1.1 memtables of log up front (issue 24: 70 MB on a 64 MB
  // disk). 64 GiB and up keep the 64 MiB default.
  static SsdTierOptions WithSpaceBounds(SsdTierOptions o);
  // RocksDB's other space needs bounded by those options in effect (`o`,
  // from WithSpaceBounds): the log's total size and preallocation, the
  // MANIFEST's preallocation and size (docs/ssd.md "Small disks").
  static void BoundDbSpace(const SsdTierOptions& o, rocksdb::Options* db);
  // Test seam (SsdTierTestPeer only, before Open): called before every
  // metadata commit; a non-OK result is handled exactly like the database
  // returning that error.
  void SetCommitHookForTest(std::function<Status()> hook) {
    commit_hook_ = std::move(hook);
  }
  // Test seam (SsdTierTestPeer only, before Open): called after every
  // metadata commit that succeeded, before its removals are confirmed.
  void SetCommittedHookForTest(std::function<void()> hook) {
    committed_hook_ = std::move(hook);
  }
  // Test seam (SsdTierTestPeer only): the metadata database, for writes
  // behind the index's back. Null before Open and after Close.
  rocksdb::DB* DbForTest() { return db_.get(); }

  // ssd_recovery.cc. Open runs before the tier is shared; Close after.
  Status Open() EXCLUDES(mu_, gc_mu_);
  Status Close() EXCLUDES(mu_, gc_mu_);
  void NoteBlocksLostAtStop() { blocks_lost_at_stop_ = true; }
  void BeginStop() { stopping_writes_ = true; }

  // ssd_tier.cc. Every block operation takes its own locks: called holding
  // none of the tier's.
  Status Put(const BlockMeta& meta, const SharedBytes& payload, bool dirty)
      EXCLUDES(gc_run_mu_, pause_, mu_);
  // Stores blocks as one atomic write (no queue interplay, no capacity
  // enforcement). REQUIRES: distinct keys, at least one block.
  Status Store(const std::vector<WriteBackItem>& items, bool dirty) EXCLUDES(pause_, mu_);
  // `touch`: count the hit (or miss) and refresh the access order (in the
  // index at once; in the metadata with the next access-order batch).
  StatusOr<SharedBytes> Get(const BlockKey& key, bool touch = true) EXCLUDES(pause_, mu_);
  StatusOr<BlockMeta> Peek(const BlockKey& key) const EXCLUDES(mu_);
  // SsdTier::PeekIntact.
  StatusOr<SharedBytes> PeekIntact(const BlockKey& key) EXCLUDES(pause_, mu_);
  Status Remove(const BlockKey& key) EXCLUDES(pause_, mu_);
  // Remove's work while the queue holds the key's version (`queued`: that
  // version, as an entry for the removal's event; none when none is queued).
  Status RemoveHeld(const BlockKey& key, const std::optional<IndexEntry>& queued)
      EXCLUDES(pause_, mu_);
  // The queued version of `key` as an index entry (no extent), if any.
  std::optional<IndexEntry> QueuedEntry(const BlockKey& key) const;
  // Reports the removal of `key` (its entry `e`) to options_.events; the
  // reason follows `events` (a corruption, an eviction) or the caller's
  // KvReasonScope. Called where the index entry goes, under mu_.
  void EmitRemoved(const BlockKey& key, const IndexEntry& e, const TierCounters& events)
      REQUIRES(mu_);
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload)
      EXCLUDES(gc_run_mu_, pause_, mu_);
  StatusOr<uint64_t> PurgeNamespace(const BlockKey& ns) EXCLUDES(pause_, mu_);
  std::vector<SsdNamespaceUsage> Namespaces() const EXCLUDES(mu_);
  // ssd_namespace_records.cc: manifests and the removal history.
  Status PutManifest(const BlockKey& ns, std::string_view manifest);
  StatusOr<std::vector<std::pair<BlockKey, std::string>>> Manifests() const;
  StatusOr<bool> HasFlag(std::string_view name) const;
  Status SetFlag(std::string_view name);
  StatusOr<std::vector<SsdRemoval>> Removals() const EXCLUDES(unwritten_removals_mu_);
  uint32_t removal_history_entries() const { return options_.removal_history_entries; }
  // Adds the removal record of `key` (why: from `events`) to its removal's
  // batch. No-op for the zero namespace or with the history off.
  void AddRemovalRecord(rocksdb::WriteBatch* batch, const BlockKey& key,
                        const BlockKey& ns, const TierCounters& events)
      EXCLUDES(removal_mu_);
  TierCounters Totals() const EXCLUDES(mu_);
  TierCounters OwnerCounters(OwnerId owner) const EXCLUDES(mu_, names_mu_);
  // Totals() and OwnerCounters(o) of every o below `owners`, read at one
  // moment (SsdTier::Totals).
  TierCounters Totals(OwnerId owners, std::vector<TierCounters>* counters) const
      EXCLUDES(mu_, names_mu_);
  void ForEach(const std::function<void(const BlockMeta&, uint64_t)>& fn) const
      EXCLUDES(mu_);
  void ForEachIncludingQueued(
      const std::function<void(const BlockMeta&, uint64_t)>& fn) const EXCLUDES(mu_);

  // ssd_owner_names.cc (docs/ssd.md "Owner names"). SsdTier's methods take
  // and give this run's owner ids; everything below them (the index, the
  // records, the write-back queue) holds stored ids.
  // SsdTier::BindOwner.
  Status BindOwner(OwnerId owner, const std::string& name,
                   std::optional<BlockKey> namespace_id) EXCLUDES(mu_, names_mu_);
  OwnerId StoredOwner(OwnerId owner) const EXCLUDES(names_mu_);
  OwnerId RunOwner(OwnerId stored) const EXCLUDES(names_mu_);
  // The stored id of this thread's reader (ReadOwnerScope), whose a miss is.
  OwnerId StoredReader() const EXCLUDES(names_mu_);
  BlockMeta Stored(BlockMeta meta) const EXCLUDES(names_mu_);
  BlockMeta Run(BlockMeta meta) const EXCLUDES(names_mu_);
  // Reports `event` (of stored ids) to options_.events with this run's owner.
  void EmitEvent(KvEvent event) const EXCLUDES(names_mu_);

  // ssd_eviction.cc
  // Evicts least recently used leaves until the payload bytes fit capacity.
  void EnforceCapacity() EXCLUDES(pause_, mu_);
  void SetEvictionListener(EvictionListener* l) EXCLUDES(mu_);

  // ssd_audit.cc
  Status Audit(std::vector<AuditFinding>* findings) EXCLUDES(pause_, mu_);
  std::vector<BlockKey> FindOrphans() const EXCLUDES(mu_);
  bool HasStoredChildren(const BlockKey& key) const EXCLUDES(mu_);

  // ssd_reclaim.cc
  Status Compact() EXCLUDES(gc_run_mu_, pause_, mu_);
  SsdSpaceUsage SpaceUsage() const EXCLUDES(mu_);

  // ssd_tier.cc: read-ahead (SsdTier::ReadAhead).
  ReadAheadResult StartReadAhead(const BlockKey& key) EXCLUDES(mu_);
  void CancelReadAhead(const BlockKey& key) { read_ahead_.Drop(key); }
  SsdReadAheadStats ReadAheadStats() const { return read_ahead_.Stats(); }

  Status Flush() { return queue_->Flush(); }
  // OK, or the error of the write-back queue's last attempt while blocks it
  // could not write are still queued.
  Status WriteBackStatus() const { return queue_ ? queue_->Health() : Status::OK(); }
  uint64_t queued_blocks() const { return queue_ ? queue_->size() : 0; }
  SsdWriteBackState WriteBackState() const {
    if (!queue_) return {};
    return {queue_->size(), queue_->failed_blocks(), queue_->failed_attempts()};
  }
  const SsdOpenReport& report() const { return report_; }

 private:
  using Deltas = std::map<OwnerId, TierCounters>;

  // OwnerCounters with both locks held.
  TierCounters OwnerCountersLocked(OwnerId owner) const REQUIRES(mu_, names_mu_);

  // ssd_recovery.cc, ssd_rebuild.cc
  rocksdb::Options DbOptions(bool direct_io) const;
  Status OpenDb();
  // A read-only open's shared lock on LOCK (read_lock_fd_); Busy, naming
  // the holder, when a server holds it.
  Status LockShared();
  void ReleaseReadLock();
  Status OpenOrMoveAside();
  Status MoveAside(const Status& why);
  Status Rebuild();
  // ssd_salvage.cc: rebuilds a damaged database from the segment records;
  // opens the removal journal (after OpenSegments) and appends to it.
  Status RebuildFromSegments(const Status& why);
  // ssd_rollforward.cc (docs/ssd.md "Metadata older than the segments"):
  // Corruption when the database is missing beside segments that hold
  // blocks, or a rebuild of it was interrupted (both: rebuilt, not created).
  Status CheckMetadataPresent();
  // After the index is built from an intact database, before anything is
  // written: Unavailable when at least 9 in 10 of the segment files it
  // references are missing and segments/ holds no removal journal (unless
  // read_only or accept_missing_segments).
  Status CheckSegmentsPresent() EXCLUDES(mu_);
  // The same check before Open writes anything, the space reserve and
  // RocksDB's own writing open included, through a read-only open of the
  // database (made only when segments/ holds no journal beside it). After
  // them, a refusal that said "nothing changed" had had the log replayed
  // into a table, a new MANIFEST, OPTIONS file and log written and the
  // reserve written again
  // (AuditTest.SegmentsThatVanishedAsAWholeAreNotRemovedByAuditOrRepair).
  Status CheckSegmentsPresentBeforeWriting();
  // Unavailable, naming the count, when the segments `referenced` vanished
  // as a whole (ssd_rollforward.cc SegmentsVanished).
  Status RefuseVanishedSegments(const std::set<uint64_t>& referenced);
  // After the index is built from an intact database: the removal journal's
  // records against it. Metadata that lacks committed extents or still holds
  // journaled removals is older than the segments: rolled forward in place
  // (repair_damaged_metadata), else Corruption. Records journal_problem.
  Status CheckAgainstJournal() EXCLUDES(mu_);
  // Whether the index knows the commit `journal.records[i]` made: the same
  // bytes at its place, or committed later at another place.
  bool KnowsCommit(const JournalContents& journal, size_t i) const REQUIRES(mu_);
  // `confirmed_at`: the places of the journal's confirmed removals.
  Status RollForward(const JournalContents& journal, const LocationSet& confirmed_at,
                     const std::set<uint64_t>& lost_segments, const std::string& why)
      EXCLUDES(mu_);
  // A missing or damaged journal beside intact metadata: the removals the
  // metadata proves (every intact extent it does not reference), for
  // RemovalJournal::Open. Walks the segments.
  StatusOr<std::vector<JournalRecord>> RegenerateJournal() EXCLUDES(mu_);
  Status OpenJournal();
  // ssd_reconcile.cc: after OpenJournal, at a repairing open, journals what
  // the metadata decides and the journal does not yet say (crash garbage at
  // segment ends dead, live blocks it would exclude committed), so a later
  // rebuild restores exactly what this metadata holds.
  Status ReconcileJournal() EXCLUDES(mu_);
  // Journals an extent that stops being live. `awaits_commit`: the metadata
  // commit that removes it follows on this thread, and Commit confirms the
  // removal when it succeeds (false: garbage no metadata ever referenced).
  // `extent_only`: this extent is dead, not the key's bytes (a copy garbage
  // from birth; JournalRecord::extent_only). `confirm` false: synced before
  // that commit like the others (SyncJournalBeforeCommit) but never
  // confirmed, for a place metadata that missed the commit may still hold
  // rightly (a compaction's source: its bytes stay there and stay valid).
  void JournalRemoval(const BlockKey& key, uint64_t checksum, uint64_t segment,
                      uint64_t offset, bool awaits_commit = true,
                      bool extent_only = false, bool confirm = true);
  // Called by Commit: appends a confirm record for each removal this thread
  // journaled since its last commit, if `committed`; forgets them either way.
  void ConfirmRemovals(bool committed);
  // Makes the journal durable before a commit that is itself durable at
  // once (sync mode) and deletes what this thread journaled as removed: a
  // delete on the device with its removal record still in the page cache
  // would, after a power loss, make the next Open take the metadata for
  // rolled back and bring the removed block back (CheckAgainstJournal).
  Status SyncJournalBeforeCommit();
  // Makes every journal record so far durable (before a memtable flush puts
  // the deletes of the records' commits on the device, and at Close); OK
  // without a journal.
  Status SyncJournal() const;
  // SyncJournal, then `then` before any journal record is appended again
  // (`then` runs holding the journal's lock). Without a journal: `then`.
  Status SyncJournalThen(const std::function<Status()>& then) const;
  // After a metadata commit that made extents live: a commit record for each
  // (ssd_journal.h), in one append. Called before the blocks' locks are
  // released, so a removal of one of them is journaled after its commit.
  void JournalCommits(std::vector<JournalRecord> committed);
  // Before the metadata commit that will reference extents just written: an
  // extent-only removal of each, which that commit's records override
  // (JournalContents::Excludes). If the commit never comes (a kill between
  // payload and commit), the extent is named crash garbage, which a rebuild
  // took for a version (losing the live one, or restoring a removed key
  // with bytes never acknowledged). Not synced: a power cut can take it,
  // and the next repairing open names such garbage (ReconcileJournal).
  void JournalNewExtents(std::vector<JournalRecord> written);
  // Flush mode: whether the journal failed (an append or a rewrite; the
  // file is deleted). The memtable's commits then have no cover against a
  // kill -9 (their commit records and confirmed removals, which the next
  // open rolls forward, went with the file), so CoverALostJournal puts
  // them in a table once and Commit writes every later one to the log.
  bool FlushModeJournalLost() const;
  // When FlushModeJournalLost and not done yet: flushes the memtable
  // (waiting), so what was committed so far survives a kill -9. Called
  // before a commit and after a failed append of records that follow one.
  Status CoverALostJournal();
  Status CheckFormat();
  // The index from the metadata records; damaged records go to `drops`
  // only when a rebuild could not prove every block (else Corruption).
  Status RebuildIndex(rocksdb::WriteBatch* drops) EXCLUDES(mu_);
  // Whether a rebuild from the segments can prove every block: a usable
  // journal and no segment at or below its barrier.
  bool SegmentsProveEveryBlock() const;
  Status RepairCounters() EXCLUDES(mu_);
  // After the index is built: the owner name records (ssd_owner_names.h).
  Status LoadOwnerNames() EXCLUDES(mu_, names_mu_);
  Status OpenSegments() EXCLUDES(mu_);
  // The persisted lowest id a new segment may take (0: none), and raising
  // it to `id` before a segment below it is unlinked (ssd_layout.h
  // kNextSegmentKey).
  StatusOr<uint64_t> SegmentIdsKeptFrom() const;
  Status KeepSegmentIdsFrom(uint64_t id, bool sync) EXCLUDES(keep_ids_mu_);
  // KeepSegmentIdsFrom (synced) for a segment whose first append failed,
  // in the removal journal first (SegmentStore::Options::keep_ids_from).
  Status KeepADiscardedSegmentsId(uint64_t id) EXCLUDES(keep_ids_mu_);
  // Raises the next segment id to the journal's (OpenJournal), in the
  // metadata too unless the open only reports.
  Status KeepJournalsSegmentIds();

  // ssd_audit.cc: Audit's steps, called with pause_ held exclusively.
  struct AuditScan;
  // Every metadata record against the index; fills `scan` (counters
  // recomputed from the records, the payloads to verify).
  Status ScanRecords(AuditScan* scan, std::vector<AuditFinding>* findings)
      REQUIRES(pause_) EXCLUDES(mu_);
  // Reads back every scanned payload; a damaged one (dropped and counted by
  // ReadVerified) is a finding and leaves the recomputed counters.
  void VerifyPayloads(AuditScan* scan, std::vector<AuditFinding>* findings)
      REQUIRES(pause_) EXCLUDES(mu_, gc_mu_);
  // "owner <name> (stored id N)" for a named stored id, else "owner N".
  std::string OwnerLabel(OwnerId stored) const EXCLUDES(names_mu_);
  // The live and persisted entries and bytes per owner against `recomputed`.
  void CompareCounters(const std::map<OwnerId, TierCounters>& recomputed,
                       const std::map<OwnerId, TierCounters>& persisted,
                       std::vector<AuditFinding>* findings) REQUIRES(mu_);
  // Index entries whose key has no record (`on_disk`).
  void ReportUnrecordedEntries(const std::set<BlockKey>& on_disk,
                               std::vector<AuditFinding>* findings) REQUIRES(mu_);

  // ssd_reclaim.cc
  void StartReclaimer() EXCLUDES(gc_mu_);
  void StopReclaimer() EXCLUDES(gc_mu_);
  void WakeReclaimer() EXCLUDES(mu_, gc_mu_);
  // One pass: compacts sparse sealed segments, unlinks empty ones.
  Status ReclaimPass() EXCLUDES(gc_run_mu_, pause_, mu_);
  // `target` > 0: then compacts the sparsest sealed segments, one by one,
  // until the segment files are at most `target` bytes.
  Status ReclaimLocked(uint64_t target = 0) REQUIRES(gc_run_mu_) EXCLUDES(pause_, mu_);
  // After a write and its evictions: if the segment files exceed the space
  // bound, runs a reclaim pass on the calling thread.
  void ThrottleWrites() EXCLUDES(gc_run_mu_, pause_, mu_);
  // Unlinks the `empty` segments once the metadata is durable; returns
  // `first`, or the first error.
  Status UnlinkEmpty(const std::vector<uint64_t>& empty, Status first)
      REQUIRES(gc_run_mu_);
  // Compacts sealed segments, sparsest first, until the files fit `target`.
  Status CompactDownTo(uint64_t target) REQUIRES(gc_run_mu_) EXCLUDES(pause_, mu_);
  // Copies the live payloads of `segment` to an active segment, a batch at a
  // time: ReadBackForRelocation, CopyRelocated, RepointRelocated.
  Status Relocate(uint64_t segment) REQUIRES(gc_run_mu_) EXCLUDES(pause_, mu_);
  struct RelocatedBlock;
  // Reads back (verified, each under its block's lock) the blocks of
  // keys[*at...] still in `segment`, up to a write-back batch's worth;
  // advances *at past them. A damaged one is dropped and skipped.
  Status ReadBackForRelocation(uint64_t segment, const std::vector<BlockKey>& keys,
                               size_t* at, std::vector<RelocatedBlock>* moving)
      REQUIRES(gc_run_mu_) EXCLUDES(pause_, mu_);
  // Appends the payloads to an active segment, synced; `to` gets their new
  // extents. The caller ends the append's pending state (EndPending).
  Status CopyRelocated(const std::vector<RelocatedBlock>& moving,
                       std::vector<ExtentLocation>* to) REQUIRES(gc_run_mu_);
  // Under the blocks' locks, points the records and the index of the blocks
  // nothing replaced or removed meanwhile at their copies `to` (one commit);
  // the other copies are journaled as garbage. `*seal_copies` set: the
  // records naming the copies dead could not be synced, and the caller seals
  // their segment (EndPending) so they stay at its end.
  Status RepointRelocated(uint64_t segment, const std::vector<RelocatedBlock>& moving,
                          const std::vector<ExtentLocation>& to, bool* seal_copies)
      REQUIRES(gc_run_mu_) EXCLUDES(pause_, mu_);
  // Adds to `batch` a repointed record for each block still at its old
  // extent in `segment`; true at those positions.
  std::vector<bool> AddRepoints(uint64_t segment,
                                const std::vector<RelocatedBlock>& moving,
                                const std::vector<ExtentLocation>& to,
                                rocksdb::WriteBatch* batch) REQUIRES(mu_);
  // Makes every committed metadata change survive what the mode promises
  // before a segment it no longer references is unlinked. In wal mode no
  // journal record is appended between the journal's sync and the log's.
  Status MakeMetadataDurable() EXCLUDES(pause_, mu_);

  // ssd_access_order.cc (docs/ssd.md "Reads"): a read's new access order
  // (and chain reuse count) reaches the metadata in batches, not per hit.
  // Marks `key` as read since the last batch; true when the batch is due
  // (kAccessBatch keys pending, or the oldest pending for kAccessIntervalNanos
  // on the tier's clock).
  bool NoteAccess(const BlockKey& key) REQUIRES(mu_);
  // Writes the pending updates as one relaxed (never synced) batch, each
  // re-encoded from the block's index entry under the blocks' stripes: a block
  // removed, evicted or dropped meanwhile is skipped, one replaced meanwhile
  // gets its new record again, never the old one. A failure is counted and
  // logged by Commit; the updates are then lost (the blocks only age).
  Status FlushAccessOrder() EXCLUDES(pause_, mu_);

  // ssd_tier.cc
  // Get's read of an indexed block: under pause_ shared, its read under no
  // stripe (a failed read is judged again under the stripe); `*flush` is set
  // when an access-order batch is due (written after the locks are released).
  StatusOr<SharedBytes> GetIndexed(const BlockKey& key, bool touch, bool* flush)
      EXCLUDES(pause_, mu_);
  // Copies key's index entry into `e`; false (and a miss counted for owner
  // 0 when `touch`) when there is none.
  bool FindIndexed(const BlockKey& key, bool touch, IndexEntry* e) EXCLUDES(mu_);
  Mutex& Stripe(const BlockKey& key);
  // Holds pause_ shared and stripe(key): the lock of one block operation.
  // (The analysis sees pause_; which stripe a key maps to it cannot name,
  // and no member is guarded by a stripe.)
  class SCOPED_CAPABILITY BlockLock {
   public:
    BlockLock(TierImpl* impl, const BlockKey& key) ACQUIRE_SHARED(impl->pause_);
    ~BlockLock() RELEASE();
    BlockLock(const BlockLock&) = delete;
    BlockLock& operator=(const BlockLock&) = delete;

   private:
    SharedMutex* const pause_;
    Mutex* const stripe_;
  };
  // Holds pause_ shared and the stripes of several keys, in ascending order.
  class SCOPED_CAPABILITY BatchLock {
   public:
    BatchLock(TierImpl* impl, const std::vector<BlockKey>& keys)
        ACQUIRE_SHARED(impl->pause_);
    ~BatchLock() RELEASE();
    BatchLock(const BatchLock&) = delete;
    BatchLock& operator=(const BatchLock&) = delete;

   private:
    SharedMutex* const pause_;
    std::vector<Mutex*> stripes_;  // distinct, ascending: taken in this order
  };
  // Writes `batch` with `deltas` and the pending event counters merged in.
  // `relaxed`: never synced (access-order updates). Counts and logs failures.
  // `confirm_later`: the caller confirms the commit's removals itself
  // (FinishRemovals), after journaling the commit records of what it stored.
  Status Commit(rocksdb::WriteBatch* batch, Deltas deltas, OwnerId owner,
                bool relaxed = false, bool confirm_later = false) EXCLUDES(mu_);
  // Confirms the removals this thread journaled for its commit, if it
  // `committed` (ConfirmRemovals), then covers a journal lost meanwhile.
  void FinishRemovals(bool committed);
  // The only call into RocksDB's write path, out of line: RocksDB is not
  // instrumented, so ThreadSanitizer attributes its internal memory traffic
  // (a write group's leader merging the followers' batches) to the caller;
  // this frame lets ssd_tier_tsan_test suppress exactly those reports.
  [[gnu::noinline]] rocksdb::Status DbWrite(const rocksdb::WriteOptions& o,
                                            rocksdb::WriteBatch* batch);
  void AddDeletes(rocksdb::WriteBatch* batch, const BlockKey& key, const IndexEntry& e);
  // Drops one stored block (Remove, Evict, DropCorrupt): journals its extent
  // (AddDeletes), then commits the record's delete with the entry and byte
  // decrements and `events` (its owner's event counts: removes, evictions,
  // ...). Once committed, erases the index entry, counts `events` live and
  // wakes the reclaimer; on a failed commit it returns the error and changes
  // nothing, or with `erase_on_failure` erases and counts all the same and
  // keeps `events` unpersisted for the next successful write.
  // REQUIRES: as DropCorrupt.
  Status DropEntry(const BlockKey& key, const IndexEntry& e, const TierCounters& events,
                   bool erase_on_failure) REQUIRES_SHARED(pause_) EXCLUDES(mu_, gc_mu_);
  // Removes a block whose payload failed verification and counts a
  // corruption, and a miss when the read was a `lookup` (a counted Get; not
  // a compaction's, an eviction's or an audit's read).
  // REQUIRES: stripe(key) held (with pause_ shared: BlockLock), or pause_
  // held exclusively (the analysis checks the pause_ part).
  Status DropCorrupt(const BlockKey& key, const IndexEntry& e, const std::string& why,
                     bool lookup) REQUIRES_SHARED(pause_) EXCLUDES(mu_, gc_mu_);
  // Reads and verifies a payload. NotFound("corrupt: ...") after DropCorrupt.
  // REQUIRES: as DropCorrupt.
  StatusOr<SharedBytes> ReadVerified(const BlockKey& key, const IndexEntry& e,
                                     bool lookup) REQUIRES_SHARED(pause_)
      EXCLUDES(mu_, gc_mu_);
  // ReadVerified's judgement of a read of `e` that failed with `s`: an I/O
  // error is counted (with a miss for a `lookup`) and returned (the block
  // stays); a missing or damaged extent is dropped (DropCorrupt) and
  // NotFound("corrupt: ..."). REQUIRES: as DropCorrupt.
  Status ReadFailed(const BlockKey& key, const IndexEntry& e, const Status& s,
                    bool lookup) REQUIRES_SHARED(pause_) EXCLUDES(mu_, gc_mu_);
  // The extent of `e`, checked against its length and checksum (Corruption
  // naming the mismatch), or the store's error. Counts, drops and logs
  // nothing: ReadVerified does that part, and a read made ahead leaves it to
  // the Get. Needs no lock (ssd_read_ahead.h).
  StatusOr<SharedBytes> ReadExtent(const IndexEntry& e) const;
  void CountEvent(OwnerId owner, uint64_t TierCounters::*field) EXCLUDES(mu_);
  void CountIoError(OwnerId owner) EXCLUDES(mu_);
  // flush mode: starts a memtable flush every write_buffer_bytes of payload.
  void PaceMemtableFlush(const std::vector<WriteBackItem>& items);
  // Store's steps (ssd_tier.cc, above Store). AppendPayloads: the payloads
  // appended to this thread's segment, `stored` and `locations` filled, the
  // parents pending until IndexStored; on failure the error is counted and
  // nothing is left pending.
  Status AppendPayloads(const std::vector<WriteBackItem>& items, bool dirty,
                        std::vector<StoredMeta>* stored,
                        std::vector<ExtentLocation>* locations) EXCLUDES(mu_);
  // Each block's access sequence and reuse count, and the entry it replaces
  // (`old`); true if any replaces one. REQUIRES: the blocks' stripes.
  bool AssignSequences(const std::vector<WriteBackItem>& items,
                       std::vector<StoredMeta>* stored,
                       std::vector<std::optional<IndexEntry>>* old) REQUIRES(mu_);
  // The metadata records, the replaced entries' deletes and journal
  // removals, and the counter deltas of a store.
  void BatchStoredMeta(const std::vector<WriteBackItem>& items,
                       const std::vector<StoredMeta>& stored,
                       const std::vector<std::optional<IndexEntry>>& old,
                       rocksdb::WriteBatch* batch, Deltas* deltas);
  // The committed blocks enter the index (and are reported); every parent's
  // pending mark ends, committed or not.
  void IndexStored(const std::vector<WriteBackItem>& items,
                   const std::vector<StoredMeta>& stored,
                   const std::vector<std::optional<IndexEntry>>& old, bool dirty,
                   bool committed) REQUIRES(mu_);
  // The journal's record of a store: committed, or extents never to revive.
  void JournalStoreOutcome(const std::vector<WriteBackItem>& items,
                           const std::vector<StoredMeta>& stored, bool committed);
  // Logs the first failure of a run and the first success after one, per
  // kind: `payload` (segment files) or metadata (the database).
  void NoteWriteResult(const Status& s, bool payload = false);

  // ssd_space.cc: the full-disk reserve (SsdTierOptions::reserve_bytes).
  // Deletes a reserve file left by the previous run (before the database
  // opens: on a full disk that is its room to open in); `*released` says
  // whether there was one (a failed open puts back only that).
  Status ReleaseReserveForOpen(bool* released = nullptr);
  // Writes the reserve file; a failure other than NoSpace is logged and
  // ignored (no reserve then).
  void FillReserve();
  // NoSpace while the disk is full (and the reserve cannot be written back
  // yet, tried every retry interval); OK otherwise. Payload writes call it
  // first.
  Status CheckDiskSpace();
  // After a failed write: NoSpace releases the reserve and makes payload
  // writes refuse until CheckDiskSpace finds room again.
  void NoteNoSpace(const Status& s);
  Status WriteReserveFile();
  std::optional<uint64_t> FreeDiskBytes() const;  // statvfs of the data directory
  // Disk use is bounded by the capacity (capacity >= 16 segments): the live
  // extents are kept below capacity - 2 segments (LiveBudget, by eviction),
  // and writers compact until the segment files fit the capacity.
  bool DiskBounded() const {
    return options_.capacity_bytes >= 16 * options_.segment_bytes;
  }
  uint64_t LiveBudget() const {
    return options_.capacity_bytes - 2 * options_.segment_bytes;
  }
  std::string ReservePath() const { return options_.path + "/space-reserve"; }
  void Log(const std::string& line) const;

  // ssd_eviction.cc
  Status Evict(const BlockKey& key) EXCLUDES(pause_, mu_);
  // Ends one eviction's use of the listener it read (listener_calls_).
  void EndListenerCall() EXCLUDES(mu_);

  static constexpr size_t kStripes = 64;
  // An access-order batch is written at this many pending blocks, or with
  // the first read this long after the oldest pending one (and at Close).
  static constexpr size_t kAccessBatch = 256;
  static constexpr uint64_t kAccessIntervalNanos = 1'000'000'000;

  const SsdTierOptions options_;
  std::function<Status()> commit_hook_;  // tests only; set before Open
  std::function<void()> committed_hook_;  // tests only; set before Open
  // RocksDB's writes through options_.file_system (null with the default
  // file system: RocksDB's own is used). Declared before db_: outlives it.
  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::DB> db_;
  // A read-only open's shared lock on the database's LOCK file (-1: none):
  // RocksDB takes no lock in its read-only mode (ssd_recovery.cc).
  int read_lock_fd_ = -1;
  std::unique_ptr<SegmentStore> store_;      // the payload segment files
  std::unique_ptr<RemovalJournal> journal_;  // extents made garbage (ssd_journal.h)
  // journal_, for the database's flush listener (set once it is open).
  std::atomic<RemovalJournal*> flush_journal_{nullptr};
  // Memtable flushes begun (the listener counts each before it syncs the
  // journal): a removal whose commit saw another count than its confirm may
  // have its delete in a table while its confirm missed that sync
  // (ConfirmRemovals). Mutable: counted by the listener DbOptions makes.
  mutable std::atomic<uint64_t> flushes_begun_{0};
  rocksdb::WriteOptions write_options_;    // per durability
  rocksdb::WriteOptions relaxed_options_;  // never synced
  // Flush mode once the journal is lost: commits go to the log (wal mode's).
  rocksdb::WriteOptions logged_options_;
  std::atomic<bool> lost_journal_covered_{false};  // CoverALostJournal flushed
  bool direct_io_ = false;  // O_DIRECT in effect for segments (the fs may refuse it)
  SsdOpenReport report_;

  // Shared by block operations (BlockLock, BatchLock), exclusive for Audit.
  SharedMutex pause_ ACQUIRED_BEFORE(mu_, gc_mu_);
  // One per key hash; taken after pause_ (several: ascending), before mu_ and
  // gc_mu_. They serialize operations on a block; no member is guarded by one.
  std::array<Mutex, kStripes> stripes_;
  mutable Mutex mu_;
  SsdIndex index_ GUARDED_BY(mu_);
  // Keys whose metadata record is of an unknown (newer) layout: kept, never
  // served, never restored over by a roll-forward. Filled by RebuildIndex
  // during Open.
  std::set<BlockKey> incompatible_keys_;
  // Segments the store does not hold whose removal journal records its
  // rewrite keeps (OpenSegments): files kept in place, not adopted, because
  // records of an unknown layout may reference them, and referenced ones
  // missing (a file put back must not bring its removed blocks back in a
  // rebuild). Filled during Open, read-only after.
  std::set<uint64_t> journal_kept_segments_;
  // A read of the removal journal CheckAgainstJournal could not make (an
  // I/O error): Open fails with it once the metadata's own checks are past,
  // as neither a damaged database nor a missing journal. Set during Open.
  Status journal_read_error_;
  Deltas unpersisted_ GUARDED_BY(mu_);  // event counts not yet in the db
  // This run's owners against the stored ids. A leaf: taken under mu_ (a
  // removal's event), never the other way round.
  mutable Mutex names_mu_ ACQUIRED_AFTER(mu_);
  ssd::OwnerNames names_ GUARDED_BY(names_mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  // Blocks read since the last access-order batch, and when the first was.
  std::unordered_set<BlockKey, BlockKeyHash> access_pending_ GUARDED_BY(mu_);
  uint64_t access_pending_since_nanos_ GUARDED_BY(mu_) = 0;
  EvictionListener* listener_ GUARDED_BY(mu_) = nullptr;
  uint32_t listener_calls_ GUARDED_BY(mu_) = 0;  // evictions using listener_
  CondVar listener_idle_;  // signalled when listener_calls_ drops to 0 (mu_)

  std::atomic<uint64_t> unflushed_payload_bytes_{0};  // flush mode pacing
  std::atomic<bool> failing_{false};  // the last metadata write failed (logged once)
  std::atomic<bool> payload_failing_{false};  // the last payload write failed
  // A write to RocksDB's log failed: its log writer keeps the error, and in
  // RocksDB 7.8 any later append, flush or sync of it (a write after
  // Resume(), FlushWAL) aborts the process (`sync_without_flush_called_`).
  // From then on no metadata write reaches the database until it is
  // reopened (docs/ssd.md "Errors").
  std::atomic<bool> log_broken_{false};
  // ssd_space.cc: the reserve is released and payload writes refuse.
  std::atomic<bool> disk_full_{false};
  std::atomic<uint64_t> last_space_check_nanos_{0};
  // Close's write-back: a full disk's reserve is tried again at once, not
  // after the retry interval (the last attempt has no later one).
  std::atomic<bool> stopping_writes_{false};
  // The removal history's next sequence number, read from the records at the
  // first removal (the largest stored + 1). A leaf lock.
  Mutex removal_mu_;
  std::optional<uint64_t> next_removal_seq_ GUARDED_BY(removal_mu_);
  // A read-only tier's removals (a damaged block dropped by a read), which
  // its records cannot take: Removals lists them too, so `explain-miss`
  // names such a block corrupt-dropped, not never stored. A leaf lock,
  // taken after removal_mu_.
  mutable Mutex unwritten_removals_mu_;
  std::vector<SsdRemoval> unwritten_removals_ GUARDED_BY(unwritten_removals_mu_);
  Mutex reserve_mu_;   // serializes writing and deleting the reserve file (a leaf)
  Mutex keep_ids_mu_;  // serializes KeepSegmentIdsFrom (a leaf)
  std::atomic<uint64_t> last_resume_nanos_{0};
  std::unique_ptr<WriteBackQueue> queue_;
  bool closed_ = false;
  // NoteBlocksLostAtStop: Close leaves the clean-shutdown marker unset.
  std::atomic<bool> blocks_lost_at_stop_{false};
  // Reads made ahead of the Gets that take them (ssd_read_ahead.h). Stopped
  // by Close, before the segment store goes.
  ReadAhead read_ahead_;

  // Segment reclamation (ssd_reclaim.cc): a background thread woken after
  // writes that may have left garbage; gc_run_mu_ serializes passes (the
  // thread's, Compact()'s and a throttled writer's) and is taken first: a
  // pass takes pause_, stripes and mu_. gc_mu_ guards the thread's wake-up
  // flags only.
  Mutex gc_run_mu_ ACQUIRED_BEFORE(pause_);
  Mutex gc_mu_;
  CondVar gc_cv_;  // (gc_mu_)
  bool gc_wake_ GUARDED_BY(gc_mu_) = false;
  bool gc_stop_ GUARDED_BY(gc_mu_) = false;
  std::thread gc_thread_;
};

}  // namespace prefixkv::ssd

namespace prefixkv {

// rocksdb::Status -> Status (NoSpace, Corruption, NotFound, IOError).
Status FromRocks(const rocksdb::Status& s, std::string_view context);

}  // namespace prefixkv
