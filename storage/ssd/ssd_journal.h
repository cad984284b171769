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
// the same bytes does not journal the extent it replaces (see the rebuild
// rule below: that would exclude the new extent as well).
//
// File: records of 48 bytes, little-endian, each ending in the XXH3-64 of its
// bytes 0..39:
//   header  (first): "pkvrmj01" (8) | barrier segment id (8) | zero (24)
//   removal        : block key (16, BlockKey::EncodeTo) | payload XXH3-64 (8)
//                    | segment id (8) | extent offset (8)
//   commit         : block key (16) | payload XXH3-64 (8) | segment id (8)
//                    | extent offset with bit 63 set (8)
// A commit record names the last extent of a metadata commit that made
// extents live (a store batch, a compaction move); it is appended AFTER the
// commit. It is how Open tells metadata that is older than the segments (a
// lost log: the database rolled back) from crash garbage: the extent a
// segment's last commit record names must be known to the metadata (at that
// location, or as the same key and bytes moved elsewhere by compaction) or
// be named by a removal record; if not, the metadata lost it.
//   confirm        : a removal's four fields, offset with bit 62 set
// A confirm record follows the commit of a removal that succeeded. Only a
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
// by segment compaction must not come back either.
// Extents of segments with ids <= barrier were written before the journal
// existed (a directory from before it): their removals are unknown, so a
// rebuild restores none of them. The journal is rewritten at Open keeping
// only the records of segments that still exist (compaction journals the
// copy it made of a block removed meanwhile), and again while open when it
// has grown past kCompactRecords records since.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
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
};

// Bits 63 and 62 of a record's offset field mark a commit and a confirm
// record (offsets are far below 2^62).
inline constexpr uint64_t kCommitFlag = uint64_t{1} << 63;
inline constexpr uint64_t kConfirmFlag = uint64_t{1} << 62;
inline constexpr uint64_t kOffsetMask = kConfirmFlag - 1;

inline bool IsRemovalRecord(const JournalRecord& r) { return !r.commit && !r.confirm; }

inline bool IsCommitRecord(const JournalRecord& r) { return r.commit; }

// What a rebuild may take from a journal file.
struct JournalContents {
  bool usable = false;  // false: missing or damaged, no removal is provable
  std::string problem;  // why not usable
  uint64_t barrier = 0;
  std::set<std::pair<BlockKey, uint64_t>> removed;  // (key, payload checksum)
  std::vector<JournalRecord> records;               // removals and commits, in order
};
// Reads `dir`/kJournalName. A damaged record anywhere makes it unusable (the
// removal it held is unknown); a partial record at the end (a write cut by
// a crash) is ignored.
JournalContents LoadJournal(FileSystem* fs, const std::string& dir);

class RemovalJournal {
 public:
  static constexpr uint64_t kCompactRecords = 1 << 20;
  // Rewrites (or creates, with `barrier_if_new` as the barrier) the journal in
  // `dir`, keeping the removal records for which `keep(segment)` is true
  // and the last commit record of each such segment, and opens it for
  // appending. `regenerated`, when given, replaces a missing or damaged
  // journal: barrier 0 and these records (what intact metadata proves dead).
  static StatusOr<std::unique_ptr<RemovalJournal>> Open(
      FileSystem* fs, const std::string& dir, uint64_t barrier_if_new,
      std::function<bool(uint64_t segment)> keep,
      const std::vector<JournalRecord>* regenerated = nullptr);

  // Appends one removal. On failure the journal file is deleted (so a rebuild
  // finds no journal and proves no removal) and every later append is a no-op
  // returning the first error.
  Status Append(const BlockKey& key, uint64_t checksum, uint64_t segment, uint64_t offset)
      EXCLUDES(mu_);
  // Makes every record appended so far durable (fdatasync).
  Status Sync() EXCLUDES(mu_);
  // Appends one confirm record (see above); fails like Append.
  Status AppendConfirm(const BlockKey& key, uint64_t checksum, uint64_t segment,
                       uint64_t offset) EXCLUDES(mu_) {
    return Append(key, checksum, segment, offset | kConfirmFlag);
  }
  // Appends one commit record (see above); fails like Append.
  Status AppendCommit(const BlockKey& key, uint64_t checksum, uint64_t segment,
                      uint64_t offset) EXCLUDES(mu_) {
    return Append(key, checksum, segment, offset | kCommitFlag);
  }

 private:
  RemovalJournal(FileSystem* fs, std::string dir, std::function<bool(uint64_t)> keep)
      : fs_(fs), dir_(std::move(dir)), keep_(std::move(keep)) {}
  Status Rewrite(uint64_t barrier_if_new,
                 const std::vector<JournalRecord>* regenerated = nullptr) REQUIRES(mu_);

  FileSystem* const fs_;
  const std::string dir_;
  const std::function<bool(uint64_t)> keep_;
  Mutex mu_;
  std::unique_ptr<FileHandle> file_ GUARDED_BY(mu_);
  uint64_t size_ GUARDED_BY(mu_) = 0;
  uint64_t appended_ GUARDED_BY(mu_) = 0;  // records since the last rewrite
  Status broken_ GUARDED_BY(mu_);
};

}  // namespace prefixkv::ssd
