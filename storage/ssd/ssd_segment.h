// SegmentStore: the SSD tier's payload files (docs/ssd.md "Segment files").
//
// Payload bytes never pass through RocksDB: they are appended to segment files
// `<path>/segments/<id as 16 hex digits>.seg`, each payload in its own extent
// that starts at a 4096-aligned offset:
//
//   payload bytes | zero padding | 64-byte footer    (extent length = a multiple
//                                                      of 4096, footer last)
//
// The footer (EncodeFooter) names the block and repeats the payload length and
// XXH3-64, and its own hash covers the segment's id, so a segment describes itself (an
// extent ends at every 4096 boundary preceded by a valid footer). The metadata record in
// RocksDB holds the segment id and offset; it is committed only after the extent was
// written.
//
// Each Append call writes one or more extents as ONE aligned pwrite into an
// active segment that belongs to the calling thread until its metadata
// commit is over (EndPending), so concurrent writers append to different
// files (queue depth = writers), and a segment's appends are committed in
// order. A segment is sealed (fdatasync'ed, never written again) when the
// next append would take it past segment_bytes; after a restart every
// existing segment is sealed and new writes go to new segments. Files are opened with
// O_DIRECT where the file system allows it (else buffered I/O; durability then comes from
// fdatasync where the mode asks for it). Every file and directory operation goes through
// Options::fs (the tier's FileSystem).
//
// A segment with appends whose metadata is not yet committed is "pending" and
// must not be reclaimed: Append marks it, EndPending (after the commit) clears
// it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/tier.h"
#include "prefixkv/bytes.h"
#include "prefixkv/file_system.h"
#include "prefixkv/memory_resource.h"
#include "prefixkv/status.h"

namespace prefixkv::ssd {

inline constexpr uint64_t kExtentAlign = 4096;
inline constexpr size_t kFooterBytes = 64;
// The largest single write to a segment file: a write-back batch is written
// in pieces of this size (a multiple of kExtentAlign), so a read waits behind
// at most one piece per writer thread instead of a whole batch. Measured with
// `prefixkv bench scale --parts concurrency` (docs/benchmarks.md).
inline constexpr uint64_t kMaxWriteBytes = uint64_t{1} << 20;
// "pkvext03": footer magic. Its footer's hash covers the segment id too
// (since 2026-12-06); "pkvext02" footers (written before, the 2 being the
// layout generation, prefixkv-ssd/2) hash their 56 bytes alone and are
// still read.
inline constexpr char kFooterMagic[8] = {'p', 'k', 'v', 'e', 'x', 't', '0', '3'};
inline constexpr char kLegacyFooterMagic[8] = {'p', 'k', 'v', 'e', 'x', 't', '0', '2'};

// Bytes an extent of a payload of this length occupies (payload, padding,
// footer), a multiple of kExtentAlign.
inline uint64_t ExtentBytes(uint64_t payload_bytes) {
  return (payload_bytes + kFooterBytes + kExtentAlign - 1) / kExtentAlign * kExtentAlign;
}

struct ExtentLocation {
  uint64_t segment = 0;
  uint64_t offset = 0;    // a multiple of kExtentAlign
  uint64_t checksum = 0;  // the payload's XXH3-64, as its footer holds it
};

struct ExtentSpec {
  BlockKey namespace_id;
  BlockKey key;
  const SharedBytes* payload = nullptr;
  // XXH3-64 of the payload when known (a relocated extent); unset: Append
  // computes it while it copies the payload into its aligned buffer, so a
  // new payload is read from memory once, not once to hash and once to copy.
  std::optional<uint64_t> checksum;
};

// Footer: magic (8) | namespace (16) | block key (16) | payload length (u64 LE)
//         | payload XXH3-64 (u64 LE) | XXH3-64 of the preceding 56 bytes
//         followed by the segment id (u64 LE), 64 bytes (u64 LE).
// Keys in BlockKey::EncodeTo order (lo LE, hi LE).
struct ExtentFooter {
  BlockKey namespace_id;
  BlockKey key;
  uint64_t length = 0;
  uint64_t checksum = 0;
};
// `segment`: the id of the segment file the footer is (to be) in.
void EncodeFooter(const ExtentFooter& f, uint64_t segment, uint8_t* out);  // kFooterBytes
// False: not a footer of this segment.
bool DecodeFooter(const uint8_t* in, uint64_t segment, ExtentFooter* f);

std::string SegmentFileName(uint64_t id);  // "000000000000002a.seg"
bool ParseSegmentFileName(const std::string& name, uint64_t* id);

// What the store knows about one segment file.
struct SegmentState {
  uint64_t id = 0;
  uint64_t bytes = 0;   // extent bytes appended (the file's size)
  bool sealed = false;  // never appended to again
  // Sealed after its fdatasync failed: its bytes may not be on the device,
  // so SyncActive (Close) syncs it again and reports a failure.
  bool unsynced = false;
  uint32_t pending = 0;  // appends whose metadata is not yet committed
};

class SegmentStore {
 public:
  struct Options {
    std::string dir;                         // <path>/segments
    FileSystem* fs = FileSystem::Default();  // never null; outlives the store
    bool direct_io = true;
    uint64_t segment_bytes = 128ull << 20;
    bool sync_directory = false;  // fsync the directory after creating a file
    // Open creates, probes and syncs nothing (a read-only tier: reads are
    // buffered, and a missing directory holds no segment).
    bool read_only = false;
    // Read buffers come from here when it has room (null: the heap).
    std::shared_ptr<MemoryResource> read_memory;
    // Makes sure no segment id below `id` is given again after a restart
    // or a rebuild of the metadata from the segments, called before a segment whose first
    // append failed is unlinked: the failed write may have put whole extents on the
    // device, whose footers name its id. When it fails the file stays (unregistered) for
    // the next open's walk, which keeps the id first. Empty: unlinked at once.
    std::function<Status(uint64_t id)> keep_ids_from;
  };
  explicit SegmentStore(Options options);
  ~SegmentStore();
  SegmentStore(const SegmentStore&) = delete;
  SegmentStore& operator=(const SegmentStore&) = delete;

  // Creates the directory, probes O_DIRECT, and lists the segment files found
  // (id -> size). Other files are ignored. A segment's name listed but not
  // a regular file one can stat (a directory or a dangling link in its
  // place) is no proof its file is gone: it is left out of `found` and
  // remembered as unreadable, and a read of it fails with IOError.
  Status Open(std::map<uint64_t, uint64_t>* found);
  // Whether Open found `id`'s name listed but unreadable (see Open).
  bool Unreadable(uint64_t id) const EXCLUDES(mu_);
  bool direct_io() const { return direct_; }
  // Registers a file found by Open as sealed and opens it for reading.
  Status Adopt(uint64_t id, uint64_t bytes) EXCLUDES(mu_);
  // Unlinks a segment file (registered or not). REQUIRES: not pending.
  Status Delete(uint64_t id) EXCLUDES(mu_);
  // New segments get ids from here on.
  void SetNextId(uint64_t id) EXCLUDES(mu_);
  // The id the next new segment gets.
  uint64_t NextId() const EXCLUDES(mu_);

  // Writes the extents, in order, as one aligned write to one segment and marks
  // it pending; `out` gets each extent's location and payload checksum; `sync` adds an
  // fdatasync. On success the caller must call EndPending(out->front().segment) once its
  // metadata commit is over (whether it succeeded or not); until then no other
  // append goes to that segment, so only a segment's last append can lack its
  // commit after a crash. On failure nothing is pending,
  // and a segment this append created is unlinked again (no empty file, no fd).
  Status Append(const std::vector<ExtentSpec>& extents, bool sync,
                std::vector<ExtentLocation>* out) EXCLUDES(mu_);
  // `seal`: the segment takes no more appends (its last one stays its last:
  // records naming it dead could not be made durable).
  void EndPending(uint64_t segment, bool seal = false) EXCLUDES(mu_);

  // Reads the payload of `length` bytes at `loc` (its 4096-aligned span, not
  // the footer) into a fresh aligned buffer; the result views its first
  // `length` bytes. NotFound: no
  // such segment file; Corruption: the file ends inside the extent; IOError:
  // the read failed.
  StatusOr<SharedBytes> Read(const ExtentLocation& loc, uint64_t length) const
      EXCLUDES(mu_);

  // fdatasync of every active segment and of every sealed one whose sync
  // failed, then SyncDirectory() (Close()).
  Status SyncActive() EXCLUDES(mu_);
  // fsync of the segments directory: every segment's name survives power
  // loss (modes other than sync do not sync each new name when created).
  Status SyncDirectory();
  std::vector<SegmentState> Snapshot() const EXCLUDES(mu_);
  // Total segment bytes and the number of active segments, cheaply.
  void Usage(uint64_t* bytes, uint64_t* active) const EXCLUDES(mu_);
  // Extent bytes Append wrote (or tried to) since the store was made.
  uint64_t bytes_written() const EXCLUDES(mu_);
  bool Has(uint64_t id) const EXCLUDES(mu_);

 private:
  struct File;
  struct Appender;
  Status NewAppender(Appender* a) EXCLUDES(mu_);
  Status Seal(Appender* a) EXCLUDES(mu_);
  // Unregisters the appender's segment, whose first append failed (nothing
  // in it is referenced), and unlinks it once its id is kept
  // (Options::keep_ids_from).
  Status Discard(Appender* a) EXCLUDES(mu_);
  std::string PathOf(uint64_t id) const;
  // The segment files in the directory (id -> size), for Open; a name
  // listed with no regular file behind it goes to unreadable_ (see Open).
  Status ListSegments(std::map<uint64_t, uint64_t>* found) EXCLUDES(mu_);
  // What a write answers in a read-only store.
  Status ReadOnly() const;

  const Options options_;
  bool direct_ = false;  // set by Open, before the store is shared

  // Never held across file I/O (a read in flight keeps its File alive), nor
  // while taking another lock.
  mutable Mutex mu_;
  struct Entry {
    std::shared_ptr<File> file;
    SegmentState state;
  };
  std::map<uint64_t, Entry> segments_ GUARDED_BY(mu_);
  // Listed by Open but not a regular file: id -> why (see Open).
  std::map<uint64_t, std::string> unreadable_ GUARDED_BY(mu_);
  // Appenders not in use (each owns an active segment or none yet).
  std::vector<std::unique_ptr<Appender>> idle_ GUARDED_BY(mu_);
  // Appenders whose last append awaits its EndPending, by segment id: taken
  // by no other writer until then (see Append).
  std::map<uint64_t, std::unique_ptr<Appender>> awaiting_commit_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  uint64_t total_bytes_ GUARDED_BY(mu_) = 0;  // of all segments
  uint64_t bytes_written_ GUARDED_BY(mu_) = 0;
  uint64_t active_ GUARDED_BY(mu_) = 0;  // not sealed
};

}  // namespace prefixkv::ssd
