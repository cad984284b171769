// RemovalJournal: the SSD tier's record of extents that stopped being live
// (docs/ssd.md "Metadata repair"). A metadata rebuild from the segment files
// (ssd_salvage.cc) must not bring back a block that was removed or
// superseded while its old extent still sits in a segment; the journal,
// `<path>/segments/removals.pkvj`, names every such extent. It is appended
// (page cache, one pwrite of 48 bytes) BEFORE the metadata commit that makes
// the extent garbage, so after a kill -9 it lists at least every extent the
// database had stopped referencing; and it is synced before metadata that
// depends on it reaches the device (a sync-mode commit that deletes, a
// memtable flush, Close), so after a power loss too. A replacing store of
// the same bytes journals an extent-only removal of the extent it replaces
// (a removal of its bytes would exclude the new extent as well). Every
// repairing Open then journals what its metadata decides and the journal
// does not yet say (ssd_reconcile.cc).
//
// File: records of 48 bytes, little-endian, each ending in the XXH3-64 of its
// bytes 0..39:
//   header  (first): "pkvrmj01" (8) | barrier segment id (8)
//                    | next segment id (8) | zero (16)
// The next segment id is the lowest id a new segment may take as far as the
// journal knows (0 in files written before it): a rewrite keeps the highest
// of it, the ids its records named (those of unlinked segments too, which
// it drops) plus one, and the tier's next id. It outlives the metadata's
// copy ('f' "nextsegment", ssd_layout.h), which a rebuild from the segments
// replaces: segment ids are never given twice (footers name their segment,
// and a stale extent of an unlinked segment left in a new file's tail must
// not name the file it sits in).
//   removal        : block key (16, BlockKey::EncodeTo) | payload XXH3-64 (8)
//                    | segment id (8) | extent offset (8)
//   commit         : block key (16) | payload XXH3-64 (8) | segment id (8)
//                    | extent offset with bit 63 set (8)
// A commit record names an extent a metadata commit made live (every extent
// of a store batch or a compaction move, since 2026-12-06; before, only each
// batch's last); it is appended AFTER the commit, before the blocks' locks
// are released, so a later removal of the block is journaled after it. It
// is how Open tells metadata that is older than the segments (a lost log:
// the database rolled back) from crash garbage: an extent a commit record
// names must be known to the metadata (at that location, or as the same key
// and bytes committed later elsewhere) or be dead since (Excludes); if not,
// the metadata lost it. And it is how a rebuild tells a key stored again
// with bytes it had before it was removed from a copy of the removed
// version (Excludes).
//   confirm        : a removal's four fields, offset with bit 62 set
// A removal a flush-mode tier journaled has bit 60 of its offset set (since
// 2026-12-07; header bytes 24..31 hold 1 in a journal whose removals carry
// it): its commit, had it run, a kill -9 can take with the memtable, which
// WithoutUncommittedRemovals weighs (JournalRecord::flush_mode).
// A confirm record follows the commit of a removal that succeeded (synced
// before the ack when a memtable flush began since the removal: the flush
// may have put the delete in a table without it). Only a
// confirmed removal still held by the metadata shows that the metadata lost
// it (a removal whose commit failed or never ran leaves the block live, and
// must not take it away at the next open); a rebuild, which has no metadata
// to trust, excludes confirmed and unconfirmed removals alike.
// The header magic is "pkvrmj02" since commit records exist; "pkvrmj01"
// files (removals only) are read as before. A reader that knows only 01
// finds no header in a 02 file, takes it as unusable, and restores nothing
// rather than mistake a commit record for a removal.
// A rebuild excludes every extent of the key whose payload checksum equals a
// removed one (not only the extent named): a copy of a removed version made
// by segment compaction must not come back either; except an extent a
// commit record names after the last such removal (the key stored again).
// Extents of segments with ids <= barrier were written before the journal
// existed (a directory from before it): their removals are unknown, so a
// rebuild restores none of them. The journal is rewritten at Open keeping
// only the records of segments that still exist (compaction journals the
// copy it made of a block removed meanwhile) and, of the commit records,
// each segment's last, those of bytes a kept removal names before them and
// those WithoutUncommittedRemovals weighs an unconfirmed removal by (even
// of a segment unlinked since);
// and again while open when it has grown past kCompactRecords records since,
// then keeping every commit record of those segments (commits the metadata
// may not hold yet: flush mode's memtable).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/tier.h"
#include "prefixkv/file_system.h"
#include "prefixkv/status.h"

namespace prefixkv::ssd {

inline constexpr char kJournalName[] = "removals.pkvj";
inline constexpr size_t kJournalRecordBytes = 48;

struct JournalRecord {
  BlockKey key;
  uint64_t checksum = 0, segment = 0, offset = 0;
  bool commit = false;   // a commit record (above)
  bool confirm = false;  // a confirm record; neither: a removal
  // A removal of this extent only, not of the key's bytes: a copy that was
  // garbage when written (a compaction copy of a block replaced or removed
  // meanwhile, a store whose metadata commit failed), while the key may
  // hold the same bytes live elsewhere.
  bool extent_only = false;
  // A removal a flush-mode tier journaled (bit 60 of the offset): a kill -9
  // can take its commit with the memtable, and only the journal says whether
  // it ran (WithoutUncommittedRemovals). A wal or sync tier's commits
  // survive a kill. Set by the appending journal's mode, not by the caller.
  bool flush_mode = false;
};

// Bits 63, 62, 61 and 60 of a record's offset field mark a commit, a
// confirm, an extent-only removal and a flush-mode tier's removal (offsets
// are far below 2^60). A reader from before bit 61 (2026-12-06) takes an
// extent-only removal for a removal of the key's bytes at a place that never
// matches: it excludes more, never brings back what is dead. One from before
// bit 60 (2026-12-07) takes a flush-mode removal for a removal of the key's
// bytes at such a place: it excludes them by the bytes, and finds no commit
// record at that place (CommitEvidence), so it never leaves the removal out,
// whatever its opener's mode: it loses the acknowledged value a flush-mode
// kill of a newer binary left, as a wal open did before the marks.
inline constexpr uint64_t kCommitFlag = uint64_t{1} << 63;
inline constexpr uint64_t kConfirmFlag = uint64_t{1} << 62;
inline constexpr uint64_t kExtentOnlyFlag = uint64_t{1} << 61;
inline constexpr uint64_t kFlushModeFlag = uint64_t{1} << 60;
inline constexpr uint64_t kOffsetMask = kFlushModeFlag - 1;

inline bool IsRemovalRecord(const JournalRecord& r) { return !r.commit && !r.confirm; }

inline bool IsCommitRecord(const JournalRecord& r) { return r.commit; }

// What a rebuild may take from a journal file.
struct JournalContents {
  bool usable = false;  // false: missing or damaged, no removal is provable
  std::string problem;  // why not usable
  // Not OK: the journal could not be read (an I/O error, EMFILE at its
  // open), which says nothing of what it holds, not even that it is missing
  // or damaged: no caller may rewrite, regenerate or judge it meanwhile.
  Status read_error;
  uint64_t barrier = 0;
  // The lowest id a new segment may take: above the header's next segment
  // id, the barrier and every segment a record names.
  uint64_t next_segment = 0;
  // Whether the header says its removals carry JournalRecord::flush_mode; a
  // journal from before does not say, and its flush-mode removals are not
  // told from the others.
  bool marks_flush_mode = false;
  std::vector<JournalRecord> records;  // removals, commits and confirms, in order

  // Whether the journal proves the intact extent of `key` with payload
  // `checksum` at (`segment`, `offset`) dead: a removal names that place
  // after any commit record of this key and these bytes there does (a store journals its
  // new extents as removed before its commit: crash garbage if the commit never comes),
  // or a removal names the key with these bytes (a compaction copy of a removed version
  // has them too) and no commit record names this key and these bytes at this place after
  // the last such removal (a commit there of another extent is another segment's: a file
  // swapped or renamed). (A commit after the removal is the key stored again with the
  // same bytes: `DEL k`, then `SET k` to its old value. Until 2026-12-06 any removal of
  // the bytes excluded every extent of them, and a rebuild or roll-forward lost such a
  // block.)
  bool Excludes(const BlockKey& key, uint64_t checksum, uint64_t segment,
                uint64_t offset) const;

  // Whether the last commit record naming the place (`segment`, `offset`)
  // names this key and these bytes there.
  bool Commits(const BlockKey& key, uint64_t checksum, uint64_t segment,
               uint64_t offset) const;

  // The journal as a roll-forward reads it: without a flush-mode tier's
  // removals of a committed version whose own commit never ran. Such a
  // removal (of a version a commit record names before it, with no confirm
  // of it and no commit record of its key after it: a replacing store
  // appends its new versions' commit records, a compaction its move's, before
  // confirming) was journaled by a store, replacement or removal that a kill
  // -9 cut before its commit, never acknowledged; the version
  // it names is still the key's, as RollForward already decides for a
  // version the metadata holds. Left in, it excluded that version from the
  // roll-forward of the commits the kill took with the memtable: a SET
  // killed before its commit lost the key's acknowledged value as well
  // (SsdFaultTest.AFlushModeKillBeforeAReplacingCommitKeepsTheAcknowledgedVersion).
  // Only a flush-mode tier's (JournalRecord::flush_mode; of a journal that
  // does not mark them, every removal when `unmarked_flush_mode`): a wal or
  // sync tier's kill loses no commit, and a power cut can take a committed
  // removal's confirm (appended unsynced). Until 2026-12-07 the opener's mode
  // decided for every removal: a wal open (repair, audit, the Python binding)
  // of a directory a flush-mode kill left lost the acknowledged value, and a
  // flush-mode open after a sync-mode power cut served removed blocks again
  // (SsdFaultTest.AFlushModeReplacingKillKeepsTheAcknowledgedVersionWhoeverOpensIt,
  // PowerLossInSyncModeBringsNoRemovalBackInAFlushModeOpen). A rebuild, with
  // no metadata to weigh them against, keeps them all.
  JournalContents WithoutUncommittedRemovals(bool unmarked_flush_mode) const;

  // Indexes of `records` for Excludes, filled by LoadJournal (AddRecord).
  std::map<std::pair<uint64_t, uint64_t>, size_t> removed_at;    // place -> last removal
  std::map<std::pair<BlockKey, uint64_t>, size_t> last_removal;  // (key, checksum)
  std::map<std::pair<uint64_t, uint64_t>, size_t> last_commit_at;  // (segment, offset)

  // Appends `rec` to `records` and the indexes.
  void AddRecord(const JournalRecord& rec);
};
// Reads `dir`/kJournalName. A damaged record anywhere makes it unusable (the
// removal it held is unknown); a partial record at the end (a write cut by
// a crash) is ignored.
JournalContents LoadJournal(FileSystem* fs, const std::string& dir);

class RemovalJournal {
 public:
  static constexpr uint64_t kCompactRecords = 1 << 20;
  // Tests: rewrite while open after `n` records instead (0: kCompactRecords).
  static void SetCompactRecordsForTesting(uint64_t n);
  // Rewrites (or creates, with `barrier_if_new` as the barrier) the journal in
  // `dir`, keeping the removal records for which `keep(segment)` is true
  // and the last commit record of each such segment, and opens it for
  // appending. `regenerated`, when given, replaces a missing or damaged
  // journal: barrier 0 and these records (what intact metadata proves dead).
  // The header's next segment id becomes at least `next_segment`.
  // `durability`: the mode of the tier that appends; a flush-mode one marks
  // its removals (JournalRecord::flush_mode), and the rewrite marks those of
  // a journal from before the marks as its opener's mode decided them.
  static StatusOr<std::unique_ptr<RemovalJournal>> Open(
      FileSystem* fs, const std::string& dir, uint64_t barrier_if_new,
      std::function<bool(uint64_t segment)> keep, SsdDurability durability,
      const std::vector<JournalRecord>* regenerated = nullptr, uint64_t next_segment = 0);

  // The lowest id a new segment may take, as the last rewrite wrote it.
  uint64_t next_segment() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return next_segment_;
  }

  // Makes the next segment id at least `id` as a later load reads it, synced:
  // appends an extent-only removal of the place where segment `id` - 1
  // starts (a null key; that segment is about to be unlinked, its bytes
  // dead). For a segment unlinked before any record named it (its first
  // append failed), whose id the metadata's copy alone kept, and a rebuild
  // from the segments replaces that copy. Fails like Append.
  Status KeepSegmentIdsFrom(uint64_t id) EXCLUDES(mu_);
  // Appends one removal. On failure the journal file is deleted (so a rebuild
  // finds no journal and proves no removal) and every later append is a no-op
  // returning the first error.
  Status Append(const BlockKey& key, uint64_t checksum, uint64_t segment, uint64_t offset)
      EXCLUDES(mu_);
  // Appends `records` in one write (a store's commit records); fails like Append.
  Status AppendRecords(const std::vector<JournalRecord>& records) EXCLUDES(mu_);
  // Whether an append (or a rewrite while open) failed: the file is gone and
  // nothing appended is kept any more.
  bool broken() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return !broken_.ok();
  }
  // Makes every record appended so far durable (fdatasync).
  Status Sync() EXCLUDES(mu_);
  // Sync, then runs `then` (if the sync succeeded) before any record is
  // appended again: a metadata sync in `then` puts on the device no commit
  // whose removal records are not (every removal is journaled before its
  // commit). `then` must not append.
  Status SyncThen(const std::function<Status()>& then) EXCLUDES(mu_);
  // Appends one confirm record (see above); fails like Append.
  Status AppendConfirm(const BlockKey& key, uint64_t checksum, uint64_t segment,
                       uint64_t offset) EXCLUDES(mu_) {
    return Append(key, checksum, segment, offset | kConfirmFlag);
  }
  // Appends one extent-only removal (JournalRecord::extent_only); fails like Append.
  Status AppendExtentOnly(const BlockKey& key, uint64_t checksum, uint64_t segment,
                          uint64_t offset) EXCLUDES(mu_) {
    return Append(key, checksum, segment, offset | kExtentOnlyFlag);
  }

 private:
  RemovalJournal(FileSystem* fs, std::string dir, std::function<bool(uint64_t)> keep,
                 bool flush_mode)
      : fs_(fs), dir_(std::move(dir)), keep_(std::move(keep)), flush_mode_(flush_mode) {}
  Status Rewrite(uint64_t barrier_if_new,
                 const std::vector<JournalRecord>* regenerated = nullptr,
                 uint64_t next_segment = 0, bool keep_every_commit = false) REQUIRES(mu_);
  // After a failed append or rewrite: every later append fails with `why`,
  // and the file is deleted, durably (its directory synced).
  void Drop(const Status& why) REQUIRES(mu_);

  FileSystem* const fs_;
  const std::string dir_;
  const std::function<bool(uint64_t)> keep_;
  const bool flush_mode_;  // marks its removals (JournalRecord::flush_mode)
  mutable Mutex mu_;
  std::unique_ptr<FileHandle> file_ GUARDED_BY(mu_);
  uint64_t next_segment_ GUARDED_BY(mu_) = 0;
  uint64_t size_ GUARDED_BY(mu_) = 0;
  uint64_t appended_ GUARDED_BY(mu_) = 0;  // records since the last rewrite
  Status broken_ GUARDED_BY(mu_);
};

}  // namespace prefixkv::ssd
