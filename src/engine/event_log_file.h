// The event log's files (docs/events.md, "Files"), in data_dir/events/:
//
//   <20-digit first seq>.log  a segment: a 24-byte header (magic, the seq of
//                             the event before its first, their check), then
//                             records [u32 length][u32 check][payload]
//   SEQ                       the reservation: no seq at or above it was
//                             handed out ([u64 ceiling][u64 check])
//   ssd-keys                  the SSD key set checkpoint at a seq
//
// Checks are the low 32 (records) or 64 bits of XXH3-64. Every integer is
// little-endian. A record that is short, fails its check or does not decode
// ends the segment: ReadSegment reports where, and the opener cuts it there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "prefixkv/file_system.h"
#include "prefixkv/kv_events.h"
#include "prefixkv/status.h"

namespace prefixkv::internal {

// Bytes of one encoded event record, header included.
inline constexpr uint64_t kEventRecordBytes = 8 + 81;
inline constexpr uint64_t kEventSegmentHeaderBytes = 24;

// Writes the record of `e` to out[0, kEventRecordBytes).
void EncodeEventRecord(const KvEvent& e, char* out);

// What a segment file holds up to its first bad record.
struct EventSegmentScan {
  bool header_ok = false;
  uint64_t prev_seq = 0;
  std::vector<KvEvent> events;
  uint64_t valid_bytes = 0;  // header and intact records
  uint64_t file_bytes = 0;
};
StatusOr<EventSegmentScan> ReadEventSegment(FileSystem* fs, const std::string& path);

// One segment being appended to. Thread-compatible (the log's mutex).
class EventSegmentWriter {
 public:
  // Creates `path` with its header (prev_seq), or reopens an existing one to
  // append at `size` (cutting what is beyond).
  static StatusOr<std::unique_ptr<EventSegmentWriter>> Create(FileSystem* fs,
                                                              const std::string& path,
                                                              uint64_t prev_seq);
  static StatusOr<std::unique_ptr<EventSegmentWriter>> Reopen(FileSystem* fs,
                                                              const std::string& path,
                                                              uint64_t size);
  // One write per call.
  Status Append(const char* bytes, size_t n);
  Status Sync();
  uint64_t size() const { return size_; }

 private:
  EventSegmentWriter(std::unique_ptr<FileHandle> file, uint64_t size)
      : file_(std::move(file)), size_(size) {}
  std::unique_ptr<FileHandle> file_;
  uint64_t size_;
};

// "<dir>/<20-digit seq>.log"; the seq a segment name holds (0: not one).
std::string EventSegmentPath(const std::string& dir, uint64_t first_seq);
uint64_t EventSegmentSeq(const std::string& name);

// The SEQ file: NotFound when absent, Corruption when unreadable.
StatusOr<uint64_t> ReadSeqReservation(FileSystem* fs, const std::string& dir);
// Replaces it durably (a temporary file, synced, renamed, directory synced).
Status WriteSeqReservation(FileSystem* fs, const std::string& dir, uint64_t ceiling);

// The checkpoint: NotFound when absent, Corruption when unreadable.
struct SsdKeysCheckpoint {
  uint64_t seq = 0;
  std::vector<KvSnapshotBlock> blocks;
};
StatusOr<SsdKeysCheckpoint> ReadSsdKeysCheckpoint(FileSystem* fs, const std::string& dir);
Status WriteSsdKeysCheckpoint(FileSystem* fs, const std::string& dir,
                              const SsdKeysCheckpoint& checkpoint);

}  // namespace prefixkv::internal
