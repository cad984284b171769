// What the segment files prove on their own (docs/ssd.md "Metadata repair"):
// the intact extents a walk finds, and per key the one version a rebuild or a
// roll-forward may take as current. Shared by ssd_salvage.cc (a damaged or
// missing database rebuilt from scratch) and ssd_rollforward.cc (an intact
// database that is older than the segments, brought forward in place).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "prefixkv/advanced/tier.h"
#include "prefixkv/file_system.h"
#include "prefixkv/status.h"
#include "ssd_journal.h"

namespace prefixkv::ssd {

// A place in the segment files: segment id, extent offset.
using Location = std::pair<uint64_t, uint64_t>;
struct LocationHash {
  size_t operator()(const Location& l) const {
    return std::hash<uint64_t>()(l.first * 0x9E3779B97F4A7C15ULL ^ l.second);
  }
};
// Checked once per indexed block at every open: hashed, not ordered.
using LocationSet = std::unordered_set<Location, LocationHash>;

// One intact extent: footer and payload checksum agree.
struct FoundExtent {
  BlockKey key;
  BlockKey namespace_id;
  BlockKey parent;  // from the payload (SsdTierOptions::rebuilt_parent), or none
  uint64_t length = 0, checksum = 0, segment = 0, offset = 0;
  // The walk resynced between this extent and the one it found before it in
  // its segment (or the segment's end): past a damaged footer it steps back
  // one boundary at a time, inside the damaged extent's payload, client
  // bytes that may hold what reads as a footer. Below a resync an extent is
  // in step again once one is named by a commit record (its place is then a
  // real extent boundary), see ProvableVersions.
  bool resync_above = false;
};

using ParentOf =
    std::function<BlockKey(const BlockKey&, const BlockKey&, std::string_view)>;

// What WalkSegments found.
struct SegmentScan {
  std::vector<FoundExtent> extents;  // intact, in no particular order
  uint64_t files = 0;                // segment files walked
  std::set<uint64_t> walked;         // their ids
  uint64_t damaged = 0;              // extents whose footer or payload is damaged
};

// Walks every segment file in `seg_dir` backward from its end (footer to
// footer; past a damaged footer it resyncs on the previous valid one). A
// missing directory is an empty scan. `only`, when given, picks the
// segment ids to walk.
StatusOr<SegmentScan> WalkSegments(FileSystem* fs, const std::string& seg_dir,
                                   const ParentOf& parent_of,
                                   const std::function<bool(uint64_t)>& only = nullptr);

// Per key, the version the segments and the journal prove current: in a
// segment above the journal's barrier, not named by a journaled removal
// (key and payload checksum), found by a walk in step (no resync since the
// segment's end or the last extent a commit record names; else only if a
// commit record names it), and every other such extent of the key holds the
// same bytes (then the newest location). `found` holds each segment's
// extents together, in walk order (WalkSegments). Keys with two different
// surviving versions get none; `unprovable` counts every extent not taken.
// An unusable journal proves nothing: every extent is unprovable.
std::map<BlockKey, FoundExtent> ProvableVersions(const std::vector<FoundExtent>& found,
                                                 const JournalContents& journal,
                                                 uint64_t* unprovable);

// The intact extents of `scan` that the journal does not name yet and that
// are not at a place in `kept_at`: what a rebuild or roll-forward decided
// not to take. Journaling them keeps every later decision the same (a
// segment compacted away later cannot turn a conflict into a winner). One
// whose (key, payload checksum) is in `kept` (the version kept, at another
// place: a compaction copy the metadata never took, an older copy) gets an
// extent-only removal: left unnamed, it stayed excluded only by a later
// removal of the block, which a journal rewrite drops with that removal's
// segment, and a rebuild then brought the removed block back
// (SsdFaultTest.ACopyLeftByARepointTheMetadataLostNeverBringsBackARemovedBlock).
// Also an extent-only removal of each place of a walked segment that a commit
// record names but where the walk found no intact extent (a torn or cut
// segment tail, a damaged extent) and that is not in `kept_at`: it can never
// be taken, and left named by its commit alone it made every later open take
// the metadata for older than the segments
// (SsdRepair.ATornSegmentTailBesideALostLogIsRolledForwardOnce).
std::vector<JournalRecord> NotTaken(const SegmentScan& scan,
                                    const JournalContents& journal,
                                    const std::set<std::pair<BlockKey, uint64_t>>& kept,
                                    const LocationSet& kept_at);

// Appends `records` to the journal in `seg_dir` (which must be usable) and
// syncs it, as a tier in `durability` mode (RemovalJournal::Open).
Status AppendToJournal(FileSystem* fs, const std::string& seg_dir,
                       SsdDurability durability,
                       const std::vector<JournalRecord>& records);

// True when `seg_dir` holds a segment file with at least one extent's worth
// of bytes: a directory whose metadata is gone beside it is damaged, not new.
bool SegmentsHoldData(FileSystem* fs, const std::string& seg_dir);

}  // namespace prefixkv::ssd
