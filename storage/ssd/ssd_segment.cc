// SegmentStore (ssd_segment.h): the payload files, append-only, each payload
// one 4096-aligned extent with a self-describing footer, written with O_DIRECT
// (falling back to buffered I/O where the file system refuses it). Payloads
// stay out of RocksDB so that its compactions never rewrite them, and the
// footers let a damaged metadata database be rebuilt from the segments alone.
// Appenders own one active segment each, so concurrent writers never share a
// file offset; a segment with appends not yet committed is pending and never
// reclaimed.
#include "ssd_segment.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "prefixkv/advanced/hash.h"

namespace prefixkv::ssd {
namespace {

void PutLE64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLE64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

constexpr size_t kHashChunk = 256 * 1024;  // stays in L2 between copy and hash

// Copies `payload` to `out` and returns its XXH3-64 (PayloadChecksum).
uint64_t CopyAndHash(uint8_t* out, const SharedBytes& payload) {
  HashStream state(HashStream::Width::k64);
  for (size_t done = 0; done < payload.size(); done += kHashChunk) {
    const size_t k = std::min(kHashChunk, payload.size() - done);
    std::memcpy(out + done, payload.data() + done, k);
    state.Update(out + done, k);
  }
  return state.Digest64();
}

}  // namespace

namespace {

// A footer's own hash: of its first 56 bytes, then of the id of the segment
// it was written in (u64 LE), so that a whole extent found in another file
// (one a power cut left from a segment unlinked since, a file renamed) is
// no extent there.
uint64_t FooterHash(const uint8_t* footer, uint64_t segment) {
  uint8_t bytes[64];
  std::memcpy(bytes, footer, 56);
  PutLE64(bytes + 56, segment);
  return Hash64(bytes, sizeof(bytes));
}

}  // namespace

void EncodeFooter(const ExtentFooter& f, uint64_t segment, uint8_t* out) {
  std::memcpy(out, kFooterMagic, 8);
  f.namespace_id.EncodeTo(out + 8);
  f.key.EncodeTo(out + 24);
  PutLE64(out + 40, f.length);
  PutLE64(out + 48, f.checksum);
  PutLE64(out + 56, FooterHash(out, segment));
}

bool DecodeFooter(const uint8_t* in, uint64_t segment, ExtentFooter* f) {
  if (std::memcmp(in, kFooterMagic, 8) == 0) {
    if (GetLE64(in + 56) != FooterHash(in, segment)) return false;
  } else if (std::memcmp(in, kLegacyFooterMagic, 8) == 0) {
    // Written before footers named their segment: hashed alone.
    if (GetLE64(in + 56) != Hash64(in, 56)) return false;
  } else {
    return false;
  }
  f->namespace_id = BlockKey::DecodeFrom(in + 8);
  f->key = BlockKey::DecodeFrom(in + 24);
  f->length = GetLE64(in + 40);
  f->checksum = GetLE64(in + 48);
  return true;
}

std::string SegmentFileName(uint64_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.seg", static_cast<unsigned long long>(id));
  return name;
}

bool ParseSegmentFileName(const std::string& name, uint64_t* id) {
  if (name.size() != 20 || name.substr(16) != ".seg") return false;
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *id = v;
  return true;
}

// An open segment file; closed when the last user (reader, appender, the
// store's map) lets go, so an unlinked file stays readable by a read in flight.
struct SegmentStore::File {
  uint64_t id = 0;
  std::unique_ptr<FileHandle> handle;
};

// The active segment of one writer, and its aligned staging buffer.
struct SegmentStore::Appender {
  std::shared_ptr<File> file;
  uint64_t size = 0;  // bytes appended to `file`
  uint8_t* buf = nullptr;
  size_t cap = 0;
  ~Appender() { std::free(buf); }
  bool Reserve(size_t bytes) {
    if (bytes <= cap) return true;
    std::free(buf);
    buf = static_cast<uint8_t*>(std::aligned_alloc(kExtentAlign, bytes));
    cap = buf == nullptr ? 0 : bytes;
    return buf != nullptr;
  }
};

SegmentStore::SegmentStore(Options options) : options_(std::move(options)) {}

SegmentStore::~SegmentStore() = default;

std::string SegmentStore::PathOf(uint64_t id) const {
  return options_.dir + "/" + SegmentFileName(id);
}

Status SegmentStore::Open(std::map<uint64_t, uint64_t>* found) {
  FileSystem* fs = options_.fs;
  if (options_.read_only) {
    direct_ = false;  // the O_DIRECT probe creates a file
    return ListSegments(found);
  }
  PKV_RETURN_IF_ERROR(fs->CreateDir(options_.dir));
  if (options_.sync_directory) {  // the directory's own name, once
    const size_t slash = options_.dir.find_last_of('/');
    if (slash != std::string::npos && slash > 0) {
      (void)fs->SyncDir(options_.dir.substr(0, slash));
    }
  }
  // Probe O_DIRECT: tmpfs and some others refuse it (the file system then
  // opens the file without it).
  direct_ = false;
  if (options_.direct_io) {
    const std::string probe = options_.dir + "/.direct-probe";
    StatusOr<std::unique_ptr<FileHandle>> f =
        fs->OpenFile(probe, {.mode = OpenMode::kCreateOrOpen, .direct_io = true});
    direct_ = f.ok() && (*f)->direct_io();
    (void)fs->DeleteFile(probe);
  }
  return ListSegments(found);
}

Status SegmentStore::ReadOnly() const {
  return Status::NotSupported("segments of " + options_.dir + " are opened read-only");
}

Status SegmentStore::ListSegments(std::map<uint64_t, uint64_t>* found) {
  FileSystem* fs = options_.fs;
  StatusOr<std::vector<std::string>> listed = fs->ListDir(options_.dir);
  if (!listed.ok() && options_.read_only && listed.status().IsNotFound()) {
    return Status::OK();  // not created: no segment
  }
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> names, std::move(listed));
  for (const std::string& name : names) {
    uint64_t id = 0;
    if (!ParseSegmentFileName(name, &id)) continue;
    StatusOr<uint64_t> size = fs->FileSize(options_.dir + "/" + name);
    if (size.ok()) {
      (*found)[id] = *size;
    } else if (size.status().IsNotFound() || size.status().IsInvalidArgument()) {
      // Listed, so not proof of a lost file: its blocks must fail their
      // reads, not be dropped as missing (a directory or a dangling link in
      // its place can be put right, the blocks then read again).
      MutexLock lock(&mu_);
      unreadable_[id] = size.status().ToString();
    } else {
      return size.status();
    }
  }
  return Status::OK();
}

Status SegmentStore::Adopt(uint64_t id, uint64_t bytes) {
  auto file = std::make_shared<File>();
  file->id = id;
  PKV_ASSIGN_OR_RETURN(
      file->handle,
      options_.fs->OpenFile(PathOf(id), {.mode = OpenMode::kRead, .direct_io = direct_}));
  MutexLock lock(&mu_);
  segments_[id] = Entry{std::move(file), SegmentState{id, bytes, true, 0}};
  total_bytes_ += bytes;
  if (id >= next_id_) next_id_ = id + 1;
  return Status::OK();
}

Status SegmentStore::Delete(uint64_t id) {
  if (options_.read_only) return ReadOnly();
  {
    MutexLock lock(&mu_);
    if (auto it = segments_.find(id); it != segments_.end()) {
      total_bytes_ -= it->second.state.bytes;
      if (!it->second.state.sealed) active_ -= 1;
      segments_.erase(it);  // readers in flight keep the descriptor
    }
  }
  Status s = options_.fs->DeleteFile(PathOf(id));
  return s.IsNotFound() ? Status::OK() : s;
}

void SegmentStore::SetNextId(uint64_t id) {
  MutexLock lock(&mu_);
  if (id > next_id_) next_id_ = id;
}

uint64_t SegmentStore::NextId() const {
  MutexLock lock(&mu_);
  return next_id_;
}

bool SegmentStore::Unreadable(uint64_t id) const {
  MutexLock lock(&mu_);
  return unreadable_.count(id) > 0;
}

bool SegmentStore::Has(uint64_t id) const {
  MutexLock lock(&mu_);
  return segments_.count(id) > 0;
}

Status SegmentStore::NewAppender(Appender* a) {
  if (options_.read_only) return ReadOnly();  // the store's only new file
  uint64_t id;
  {
    MutexLock lock(&mu_);
    id = next_id_++;
  }
  auto file = std::make_shared<File>();
  file->id = id;
  PKV_ASSIGN_OR_RETURN(file->handle,
                       options_.fs->OpenFile(PathOf(id), {.mode = OpenMode::kCreateNew,
                                                          .direct_io = direct_}));
  // The new name must survive power loss before metadata may point into it.
  if (options_.sync_directory) {
    if (Status s = options_.fs->SyncDir(options_.dir); !s.ok()) {
      file.reset();
      (void)options_.fs->DeleteFile(PathOf(id));  // never registered: no leak
      return s;
    }
  }
  MutexLock lock(&mu_);
  segments_[id] = Entry{file, SegmentState{id, 0, false, 0}};
  active_ += 1;
  a->file = std::move(file);
  a->size = 0;
  return Status::OK();
}

Status SegmentStore::Seal(Appender* a) {
  std::shared_ptr<File> file = std::move(a->file);
  a->file.reset();
  a->size = 0;
  // A sealed segment is on the device (the direct writes may sit in the
  // device's cache until this flush); reclaiming it relies on that.
  Status s = file->handle->DataSync();
  MutexLock lock(&mu_);
  if (auto it = segments_.find(file->id);
      it != segments_.end() && !it->second.state.sealed) {
    it->second.state.sealed = true;
    it->second.state.unsynced = !s.ok();
    active_ -= 1;
  }
  return s;
}

Status SegmentStore::Discard(Appender* a) {
  std::shared_ptr<File> file = std::move(a->file);
  a->file.reset();
  a->size = 0;
  {
    MutexLock lock(&mu_);
    if (auto it = segments_.find(file->id); it != segments_.end()) {
      total_bytes_ -= it->second.state.bytes;
      if (!it->second.state.sealed) active_ -= 1;
      segments_.erase(it);
    }
  }
  const uint64_t id = file->id;
  file.reset();  // no reader can hold it: nothing pointed into it
  // Its extents may be on the device: a later segment of this id could find
  // them in a stale tail (a power cut) with footers naming it, and a rebuild
  // from the segments restored bytes whose write failed
  // (SsdFaultTest.AFailedFirstAppendsSegmentIdIsNeverGivenAgain).
  if (options_.keep_ids_from) PKV_RETURN_IF_ERROR(options_.keep_ids_from(id + 1));
  Status s = options_.fs->DeleteFile(PathOf(id));
  return s.IsNotFound() ? Status::OK() : s;
}

Status SegmentStore::Append(const std::vector<ExtentSpec>& extents, bool sync,
                            std::vector<ExtentLocation>* out) {
  uint64_t total = 0;
  for (const ExtentSpec& e : extents) total += ExtentBytes(e.payload->size());
  std::unique_ptr<Appender> a;
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      a = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (a == nullptr) a = std::make_unique<Appender>();
  Status s;
  if (a->file != nullptr && a->size > 0 && a->size + total > options_.segment_bytes) {
    s = Seal(a.get());
  }
  if (s.ok() && a->file == nullptr) s = NewAppender(a.get());
  if (s.ok() && !a->Reserve(total))
    s = Status::NoSpace("cannot allocate a staging buffer");
  if (!s.ok()) {
    MutexLock lock(&mu_);
    idle_.push_back(std::move(a));
    return s;
  }
  const uint64_t base = a->size;
  const uint64_t id = a->file->id;
  {
    MutexLock lock(&mu_);
    SegmentState& st = segments_.at(id).state;
    st.bytes += total;  // reserved even if the write fails: never rewritten
    total_bytes_ += total;
    bytes_written_ += total;
    st.pending += 1;
  }
  a->size += total;
  // One staging copy per extent: O_DIRECT needs an aligned source, and the
  // padding and footer go in the same write. A new payload is hashed while
  // it is copied (each chunk while it is in cache): one pass over its bytes.
  out->clear();
  uint64_t at = 0;
  for (const ExtentSpec& e : extents) {
    const uint64_t n = e.payload->size();
    const uint64_t ext = ExtentBytes(n);
    uint64_t sum = 0;
    if (e.checksum.has_value()) {
      if (n > 0) std::memcpy(a->buf + at, e.payload->data(), n);
      sum = *e.checksum;
    } else {
      sum = CopyAndHash(a->buf + at, *e.payload);
    }
    std::memset(a->buf + at + n, 0, ext - n - kFooterBytes);
    EncodeFooter({e.namespace_id, e.key, n, sum}, id, a->buf + at + ext - kFooterBytes);
    out->push_back({id, base + at, sum});
    at += ext;
  }
  // In pieces of at most kMaxWriteBytes: one O_DIRECT write of a whole batch
  // (up to 16 MiB) holds the device queue for its whole length, and every
  // read meanwhile (a restore) waits behind it (docs/ssd.md "Reads during
  // write-back").
  for (uint64_t done = 0; s.ok() && done < total; done += kMaxWriteBytes) {
    s = a->file->handle->Write(base + done, a->buf + done,
                               std::min<uint64_t>(kMaxWriteBytes, total - done));
  }
  if (s.ok() && sync) s = a->file->handle->DataSync();
  if (!s.ok()) {
    if (base == 0) {
      // Nothing in the file was ever referenced: unlink it now, so failed
      // writes (a full disk retried for hours) leave no files or descriptors.
      (void)Discard(a.get());
    } else {
      // The file's tail is unknown now: cut it back to what was there
      // before this append, then stop appending to it. Left in place, part
      // of the append (a short write) or all of it (a failed sync) stayed
      // named by nothing until the next open's walk: a rebuild before then
      // took a footer a client planted in its payload for another block
      // (SsdFaultTest.AFooterPlantedAtAShortWritesEndIsNeverRestored), or
      // bytes never acknowledged for a version. (If the cut fails too, the
      // bytes counted are garbage, reclaimed with the segment.)
      if (a->file->handle->Truncate(base).ok()) {
        MutexLock lock(&mu_);
        if (auto it = segments_.find(id); it != segments_.end()) {
          it->second.state.bytes -= total;
          total_bytes_ -= total;
        }
      }
      (void)Seal(a.get());
      EndPending(id);
    }
    MutexLock lock(&mu_);
    idle_.push_back(std::move(a));
    return s;
  }
  // Not for another writer before this append's commit is over (EndPending):
  // in each segment every append but the last has its commit done, so what
  // a crash left uncommitted is always at a segment's end, where the open's
  // walk looks (ReconcileJournal). Shared at once, a store cut before its
  // commit could lie below another writer's committed one, named by nothing.
  MutexLock lock(&mu_);
  awaiting_commit_.emplace(id, std::move(a));
  return s;
}

void SegmentStore::EndPending(uint64_t segment, bool seal) {
  std::unique_ptr<Appender> a;
  {
    MutexLock lock(&mu_);
    if (auto it = segments_.find(segment); it != segments_.end()) {
      it->second.state.pending -= 1;
    }
    if (auto it = awaiting_commit_.find(segment); it != awaiting_commit_.end()) {
      a = std::move(it->second);
      awaiting_commit_.erase(it);
    }
    if (a == nullptr) return;
    if (!seal) {
      idle_.push_back(std::move(a));
      return;
    }
  }
  (void)Seal(a.get());  // no append goes above this one
  MutexLock lock(&mu_);
  idle_.push_back(std::move(a));
}

StatusOr<SharedBytes> SegmentStore::Read(const ExtentLocation& loc,
                                         uint64_t length) const {
  std::shared_ptr<File> file;
  {
    MutexLock lock(&mu_);
    auto it = segments_.find(loc.segment);
    if (it != segments_.end()) file = it->second.file;
    // Not a missing segment: an error of the medium, the block stays.
    if (auto u = unreadable_.find(loc.segment);
        file == nullptr && u != unreadable_.end()) {
      return Status::IOError("segment " + SegmentFileName(loc.segment) +
                             " is unreadable: " + u->second);
    }
  }
  if (file == nullptr) {
    return Status::NotFound("segment " + SegmentFileName(loc.segment) + " missing");
  }
  // The payload's aligned span only: the footer is for salvage, and a payload
  // of a multiple of 4096 bytes is read without the footer's extra page.
  const uint64_t n = std::max<uint64_t>(
      kExtentAlign, (length + kExtentAlign - 1) / kExtentAlign * kExtentAlign);
  uint8_t* buf = nullptr;
  SharedBytes out;
  if (options_.read_memory != nullptr) {
    out = SharedBytes::AllocateIn(options_.read_memory, length, n, kExtentAlign, &buf);
  }
  if (buf == nullptr) out = SharedBytes::AllocateAligned(length, n, kExtentAlign, &buf);
  PKV_ASSIGN_OR_RETURN(size_t done, file->handle->Read(loc.offset, n, buf));
  // The span lies inside the extent: a shorter read means the file was cut.
  if (done < n) {
    return Status::Corruption("segment " + SegmentFileName(loc.segment) +
                              " ends inside the extent at " + std::to_string(loc.offset));
  }
  return out;
}

Status SegmentStore::SyncActive() {
  std::vector<std::shared_ptr<File>> active;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, e] : segments_) {
      // And a sealed one whose sync failed: else Close would report OK for
      // blocks that may never have reached the device.
      if (!e.state.sealed || e.state.unsynced) active.push_back(e.file);
    }
  }
  for (const auto& f : active) {
    PKV_RETURN_IF_ERROR(f->handle->DataSync());
    MutexLock lock(&mu_);
    if (auto it = segments_.find(f->id); it != segments_.end()) {
      it->second.state.unsynced = false;
    }
  }
  return SyncDirectory();
}

Status SegmentStore::SyncDirectory() { return options_.fs->SyncDir(options_.dir); }

void SegmentStore::Usage(uint64_t* bytes, uint64_t* active) const {
  MutexLock lock(&mu_);
  *bytes = total_bytes_;
  *active = active_;
}

uint64_t SegmentStore::bytes_written() const {
  MutexLock lock(&mu_);
  return bytes_written_;
}

std::vector<SegmentState> SegmentStore::Snapshot() const {
  std::vector<SegmentState> out;
  MutexLock lock(&mu_);
  for (const auto& [id, e] : segments_) out.push_back(e.state);
  return out;
}

}  // namespace prefixkv::ssd
