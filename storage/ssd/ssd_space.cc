// SsdTier on a full disk: the space reserve (SsdTierOptions::reserve_bytes,
// docs/ssd.md "Full disk").
//
// A file of reserve_bytes zeros, `<path>/space-reserve`, holds disk space back
// for the metadata database. The first write that fails with NoSpace (a
// segment append or a database write) deletes it and puts the tier in the
// full state: payload writes then answer NoSpace before touching the disk,
// while removals, evictions, the database's flushes and its recovery
// (DB::Resume) have the freed room. Every retry_interval_ms a payload write
// tries to write the reserve back; once that succeeds (removals freed
// segments, or an operator freed space), writes go on. At open, a reserve
// left by the previous run is deleted before the database opens (its room
// to recover in on a full disk) and written again afterwards.
#include <rocksdb/options.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "ssd_tier_impl.h"

namespace prefixkv {

SsdTierOptions ssd::TierImpl::WithSpaceBounds(SsdTierOptions o) {
  static constexpr uint64_t kMinSegment = 64 << 10;
  const uint64_t sixteenth =
      (o.capacity_bytes / 16 + kExtentAlign - 1) / kExtentAlign * kExtentAlign;
  o.segment_bytes = std::min(o.segment_bytes, std::max(kMinSegment, sixteenth));
  static constexpr uint64_t kMinWriteBuffer = 256 << 10;
  o.write_buffer_bytes =
      std::min(o.write_buffer_bytes, std::max(kMinWriteBuffer, o.capacity_bytes / 64));
  if (o.read_only) o.repair_damaged_metadata = false;  // a repair writes
  return o;
}

void ssd::TierImpl::BoundDbSpace(const SsdTierOptions& o, rocksdb::Options* db) {
  // The log is preallocated (fallocate) in blocks of min(1.1 memtables,
  // max_total_wal_size); where the file system keeps a failed allocation
  // (ext4), a 64 MiB memtable's 70 MB took a small disk whole. The logs of
  // the (up to 4) memtables not yet flushed are what it must hold.
  db->write_buffer_size = o.write_buffer_bytes;
  db->max_total_wal_size = 4 * o.write_buffer_bytes;
  // The MANIFEST: 4 MiB preallocated by default, rolled over at 1 GiB.
  static constexpr uint64_t kMinManifest = 1 << 20;
  db->manifest_preallocation_size =
      std::min<uint64_t>(db->manifest_preallocation_size, o.write_buffer_bytes);
  db->max_manifest_file_size = std::min<uint64_t>(
      db->max_manifest_file_size, std::max(kMinManifest, o.capacity_bytes / 64));
}

Status ssd::TierImpl::ReleaseReserveForOpen(bool* released) {
  MutexLock lock(&reserve_mu_);
  Status s = options_.file_system->DeleteFile(ReservePath());
  if (released != nullptr) *released = s.ok();
  return s.IsNotFound() ? Status::OK() : s;
}

Status ssd::TierImpl::WriteReserveFile() {
  MutexLock lock(&reserve_mu_);
  FileSystem* fs = options_.file_system;
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> file,
                       fs->OpenFile(ReservePath(), {.mode = OpenMode::kCreateOrOpen}));
  PKV_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  static constexpr uint64_t kChunk = 1 << 20;
  const std::vector<char> zeros(kChunk, 0);
  while (size < options_.reserve_bytes) {
    const uint64_t n = std::min(kChunk, options_.reserve_bytes - size);
    Status s = file->Write(size, zeros.data(), n);
    if (!s.ok()) {
      // A partial reserve would only hide how full the disk is.
      file.reset();
      (void)fs->DeleteFile(ReservePath());
      return s;
    }
    size += n;
  }
  return Status::OK();
}

void ssd::TierImpl::FillReserve() {
  if (options_.reserve_bytes == 0) return;
  last_space_check_nanos_ = options_.clock->NowNanos();
  Status s = WriteReserveFile();
  if (s.IsNoSpace()) {
    disk_full_ = true;
    Log("disk full at open (" + s.ToString() +
        "): payload writes answer NoSpace until space is freed");
  } else if (!s.ok()) {
    Log("no space reserve (" + s.ToString() + ")");
  }
}

std::optional<uint64_t> ssd::TierImpl::FreeDiskBytes() const {
  // The data directory's file system (the FileSystem seam maps paths to
  // real ones: POSIX, or a test wrapper over it).
  struct statvfs st;
  if (::statvfs(options_.path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

Status ssd::TierImpl::CheckDiskSpace() {
  if (options_.reserve_bytes == 0) return Status::OK();
  if (!disk_full_) {
    // Stop while half a reserve is still free besides the reserve itself, so
    // the tier's own payload writes never leave the database without room
    // (a failed log append cannot be resumed from: ssd_tier_impl.h).
    const std::optional<uint64_t> free = FreeDiskBytes();
    if (!free || *free >= options_.reserve_bytes / 2) return Status::OK();
    NoteNoSpace(Status::NoSpace("free space below half the reserve (" +
                                std::to_string(*free) + " bytes)"));
  }
  const uint64_t now = options_.clock->NowNanos();
  const uint64_t interval = options_.retry_interval_ms * 1000000;
  uint64_t last = last_space_check_nanos_;
  const std::optional<uint64_t> free = FreeDiskBytes();
  const bool room = !free || *free >= options_.reserve_bytes + options_.reserve_bytes / 2;
  // One writer per interval tries to take the reserve back; at Close every
  // last attempt does: a block refused then is lost, with room for it
  // (SsdSpaceTest.AShutdownAfterSpaceCameBackWritesTheQueuedBlocks).
  const bool stopping = stopping_writes_.load();
  if (room &&
      (stopping || (now - last >= interval &&
                    last_space_check_nanos_.compare_exchange_strong(last, now)))) {
    Status s = WriteReserveFile();
    if (s.ok()) {
      disk_full_ = false;
      Log("disk space is back: the reserve is written again, payload writes resume");
      return Status::OK();
    }
  }
  return Status::NoSpace("ssd tier: disk full; payload writes are refused until space " +
                         std::string("is freed (removals, or files deleted)"));
}

void ssd::TierImpl::NoteNoSpace(const Status& s) {
  if (!s.IsNoSpace() || options_.reserve_bytes == 0) return;
  last_space_check_nanos_ = options_.clock->NowNanos();
  if (disk_full_.exchange(true)) return;
  Status released = ReleaseReserveForOpen();
  Log("disk full (" + s.ToString() + "): released the " +
      std::to_string(options_.reserve_bytes) +
      "-byte reserve for the metadata; payload writes answer NoSpace until space "
      "is freed" +
      (released.ok() ? std::string()
                     : " (deleting the reserve: " + released.ToString() + ")"));
}

}  // namespace prefixkv
