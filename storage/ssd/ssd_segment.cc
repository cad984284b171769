// SegmentStore: append-only payload files with O_DIRECT (see ssd_segment.h).
#include "ssd_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

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

Status ErrnoStatus(int err, const std::string& what) {
  std::string m = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return Status::NoSpace(std::move(m));
  return Status::IOError(std::move(m));
}

}  // namespace

void EncodeFooter(const ExtentFooter& f, uint8_t* out) {
  std::memcpy(out, kFooterMagic, 8);
  f.namespace_id.EncodeTo(out + 8);
  f.key.EncodeTo(out + 24);
  PutLE64(out + 40, f.length);
  PutLE64(out + 48, f.checksum);
  PutLE64(out + 56, Hash64(out, 56));
}

bool DecodeFooter(const uint8_t* in, ExtentFooter* f) {
  if (std::memcmp(in, kFooterMagic, 8) != 0) return false;
  if (GetLE64(in + 56) != Hash64(in, 56)) return false;
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
  int fd = -1;
  ~File() {
    if (fd >= 0) close(fd);
  }
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

SegmentStore::~SegmentStore() {
  if (dir_fd_ >= 0) close(dir_fd_);
}

std::string SegmentStore::PathOf(uint64_t id) const {
  return options_.dir + "/" + SegmentFileName(id);
}

Status SegmentStore::Open(std::map<uint64_t, uint64_t>* found) {
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec) return Status::IOError("create " + options_.dir + ": " + ec.message());
  dir_fd_ = open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) return ErrnoStatus(errno, "open " + options_.dir);
  if (options_.sync_directory) {  // the directory's own name, once
    const std::string parent = std::filesystem::path(options_.dir).parent_path().string();
    int pfd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd >= 0) {
      (void)fsync(pfd);
      close(pfd);
    }
  }
  // Probe O_DIRECT: tmpfs and some others refuse it (EINVAL at open).
  direct_ = false;
  if (options_.direct_io) {
    const std::string probe = options_.dir + "/.direct-probe";
    int fd = open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      direct_ = true;
      close(fd);
    }
    unlink(probe.c_str());
  }
  for (const auto& e : std::filesystem::directory_iterator(options_.dir, ec)) {
    uint64_t id = 0;
    if (!e.is_regular_file() || !ParseSegmentFileName(e.path().filename().string(), &id))
      continue;
    (*found)[id] = e.file_size();
  }
  if (ec) return Status::IOError("list " + options_.dir + ": " + ec.message());
  return Status::OK();
}

Status SegmentStore::Adopt(uint64_t id, uint64_t bytes) {
  auto file = std::make_shared<File>();
  file->id = id;
  file->fd = open(PathOf(id).c_str(), O_RDONLY | O_CLOEXEC | (direct_ ? O_DIRECT : 0));
  if (file->fd < 0) return ErrnoStatus(errno, "open " + PathOf(id));
  std::lock_guard<std::mutex> lock(mu_);
  segments_[id] = Entry{std::move(file), SegmentState{id, bytes, true, 0}};
  total_bytes_ += bytes;
  if (id >= next_id_) next_id_ = id + 1;
  return Status::OK();
}

Status SegmentStore::Delete(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = segments_.find(id); it != segments_.end()) {
      total_bytes_ -= it->second.state.bytes;
      if (!it->second.state.sealed) active_ -= 1;
      segments_.erase(it);  // readers in flight keep the descriptor
    }
  }
  if (unlink(PathOf(id).c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, "unlink " + PathOf(id));
  }
  return Status::OK();
}

void SegmentStore::SetNextId(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id > next_id_) next_id_ = id;
}

bool SegmentStore::Has(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return segments_.count(id) > 0;
}

Status SegmentStore::NewAppender(Appender* a) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
  }
  auto file = std::make_shared<File>();
  file->id = id;
  file->fd = open(PathOf(id).c_str(),
                  O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | (direct_ ? O_DIRECT : 0), 0644);
  if (file->fd < 0) return ErrnoStatus(errno, "create " + PathOf(id));
  // The new name must survive power loss before metadata may point into it.
  if (options_.sync_directory && fsync(dir_fd_) != 0) {
    return ErrnoStatus(errno, "fsync " + options_.dir);
  }
  std::lock_guard<std::mutex> lock(mu_);
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
  Status s =
      fdatasync(file->fd) == 0 ? Status::OK() : ErrnoStatus(errno, "fdatasync segment");
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = segments_.find(file->id);
      it != segments_.end() && !it->second.state.sealed) {
    it->second.state.sealed = true;
    active_ -= 1;
  }
  return s;
}

Status SegmentStore::Append(const std::vector<ExtentSpec>& extents, bool sync,
                            std::vector<ExtentLocation>* out) {
  uint64_t total = 0;
  for (const ExtentSpec& e : extents) total += ExtentBytes(e.payload->size());
  std::unique_ptr<Appender> a;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(a));
    return s;
  }
  const uint64_t base = a->size;
  const uint64_t id = a->file->id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SegmentState& st = segments_.at(id).state;
    st.bytes += total;  // reserved even if the write fails: never rewritten
    total_bytes_ += total;
    st.pending += 1;
  }
  a->size += total;
  // One staging copy per extent: O_DIRECT needs an aligned source, and the
  // padding and footer go in the same write.
  out->clear();
  uint64_t at = 0;
  for (const ExtentSpec& e : extents) {
    const uint64_t n = e.payload->size();
    const uint64_t ext = ExtentBytes(n);
    if (n > 0) std::memcpy(a->buf + at, e.payload->data(), n);
    std::memset(a->buf + at + n, 0, ext - n - kFooterBytes);
    EncodeFooter({e.namespace_id, e.key, n, e.checksum},
                 a->buf + at + ext - kFooterBytes);
    out->push_back({id, base + at});
    at += ext;
  }
  for (uint64_t done = 0; done < total && s.ok();) {
    ssize_t w =
        pwrite(a->file->fd, a->buf + done, total - done, static_cast<off_t>(base + done));
    if (w > 0) {
      done += static_cast<uint64_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      s = ErrnoStatus(w < 0 ? errno : EIO, "write segment " + SegmentFileName(id));
    }
  }
  if (s.ok() && sync && fdatasync(a->file->fd) != 0) {
    s = ErrnoStatus(errno, "fdatasync segment " + SegmentFileName(id));
  }
  if (!s.ok()) {
    // The file's tail is unknown now: stop appending to it (the bytes already
    // counted are garbage, reclaimed with the segment).
    (void)Seal(a.get());
    EndPending(id);
  }
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(a));
  return s;
}

void SegmentStore::EndPending(uint64_t segment) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = segments_.find(segment); it != segments_.end()) {
    it->second.state.pending -= 1;
  }
}

StatusOr<SharedBytes> SegmentStore::Read(const ExtentLocation& loc,
                                         uint64_t length) const {
  std::shared_ptr<File> file;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = segments_.find(loc.segment);
    if (it != segments_.end()) file = it->second.file;
  }
  if (file == nullptr) {
    return Status::NotFound("segment " + SegmentFileName(loc.segment) + " missing");
  }
  // The payload's aligned span only: the footer is for salvage, and a payload
  // of a multiple of 4096 bytes is read without the footer's extra page.
  const uint64_t n = std::max<uint64_t>(
      kExtentAlign, (length + kExtentAlign - 1) / kExtentAlign * kExtentAlign);
  uint8_t* buf = nullptr;
  SharedBytes out = SharedBytes::AllocateAligned(length, n, kExtentAlign, &buf);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r =
        pread(file->fd, buf + done, n - done, static_cast<off_t>(loc.offset + done));
    if (r > 0) {
      done += static_cast<uint64_t>(r);
    } else if (r == 0) {
      return Status::Corruption("segment " + SegmentFileName(loc.segment) +
                                " ends inside the extent at " +
                                std::to_string(loc.offset));
    } else if (errno != EINTR) {
      return ErrnoStatus(errno, "read segment " + SegmentFileName(loc.segment));
    }
  }
  return out;
}

Status SegmentStore::SyncActive() {
  std::vector<std::shared_ptr<File>> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : segments_) {
      if (!e.state.sealed) active.push_back(e.file);
    }
  }
  for (const auto& f : active) {
    if (fdatasync(f->fd) != 0) return ErrnoStatus(errno, "fdatasync segment");
  }
  return Status::OK();
}

void SegmentStore::Usage(uint64_t* bytes, uint64_t* active) const {
  std::lock_guard<std::mutex> lock(mu_);
  *bytes = total_bytes_;
  *active = active_;
}

std::vector<SegmentState> SegmentStore::Snapshot() const {
  std::vector<SegmentState> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : segments_) out.push_back(e.state);
  return out;
}

}  // namespace prefixkv::ssd
