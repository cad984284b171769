// FileSystem::Default(): files and directories through POSIX calls (open,
// pread, pwrite, fdatasync, rename, unlink, opendir...), O_DIRECT where asked
// and granted. See prefixkv/file_system.h.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "prefixkv/file_system.h"

namespace prefixkv {
namespace {

Status ErrnoStatus(int err, std::string_view what, const std::string& path) {
  std::string m = std::string(what) + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return Status::NoSpace(std::move(m));
  if (err == ENOENT) return Status::NotFound(std::move(m));
  return Status::IOError(std::move(m));
}

// Thread-safe: positional I/O on one descriptor.
class PosixFile final : public FileHandle {
 public:
  PosixFile(std::string path, int fd, bool direct)
      : FileHandle(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixFile() override { close(fd_); }

  StatusOr<size_t> Read(uint64_t offset, size_t n, void* buf) const override {
    auto* out = static_cast<uint8_t*>(buf);
    size_t done = 0;
    while (done < n) {
      ssize_t r = pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
      if (r > 0) {
        done += static_cast<size_t>(r);
      } else if (r == 0) {
        break;  // end of file
      } else if (errno != EINTR) {
        return ErrnoStatus(errno, "read", path());
      }
    }
    return done;
  }

  Status Write(uint64_t offset, const void* data, size_t n) override {
    const auto* in = static_cast<const uint8_t*>(data);
    size_t done = 0;
    while (done < n) {
      ssize_t w = pwrite(fd_, in + done, n - done, static_cast<off_t>(offset + done));
      if (w > 0) {
        done += static_cast<size_t>(w);
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else {
        return ErrnoStatus(w < 0 ? errno : EIO, "write", path());
      }
    }
    return Status::OK();
  }

  Status DataSync() override {
    return fdatasync(fd_) == 0 ? Status::OK() : ErrnoStatus(errno, "fdatasync", path());
  }
  Status Sync() override {
    return fsync(fd_) == 0 ? Status::OK() : ErrnoStatus(errno, "fsync", path());
  }
  Status Truncate(uint64_t size) override {
    return ftruncate(fd_, static_cast<off_t>(size)) == 0
               ? Status::OK()
               : ErrnoStatus(errno, "truncate", path());
  }
  StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (fstat(fd_, &st) != 0) return ErrnoStatus(errno, "stat", path());
    return static_cast<uint64_t>(st.st_size);
  }
  bool direct_io() const override { return direct_; }

 private:
  const int fd_;
  const bool direct_;
};

int OpenFlags(OpenMode mode) {
  switch (mode) {
    case OpenMode::kRead:
      return O_RDONLY;
    case OpenMode::kReadWrite:
      return O_RDWR;
    case OpenMode::kCreateNew:
      return O_RDWR | O_CREAT | O_EXCL;
    case OpenMode::kCreateOrTruncate:
      return O_RDWR | O_CREAT | O_TRUNC;
    case OpenMode::kCreateOrOpen:
      return O_RDWR | O_CREAT;
  }
  return O_RDONLY;
}

// Stateless. Thread-safe.
class PosixFileSystem final : public FileSystem {
 public:
  StatusOr<std::unique_ptr<FileHandle>> OpenFile(
      const std::string& path, const FileOpenOptions& options) override {
    const int flags = OpenFlags(options.mode) | O_CLOEXEC;
    int fd = -1;
    bool direct = false;
    if (options.direct_io) {
      fd = open(path.c_str(), flags | O_DIRECT, 0644);
      direct = fd >= 0;
      // tmpfs and some others refuse O_DIRECT at open: use buffered I/O.
      if (fd < 0 && errno != EINVAL) return ErrnoStatus(errno, "open", path);
    }
    if (fd < 0) fd = open(path.c_str(), flags, 0644);
    if (fd < 0) return ErrnoStatus(errno, "open", path);
    return std::unique_ptr<FileHandle>(new PosixFile(path, fd, direct));
  }

  Status DeleteFile(const std::string& path) override {
    return unlink(path.c_str()) == 0 ? Status::OK() : ErrnoStatus(errno, "unlink", path);
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    return rename(from.c_str(), to.c_str()) == 0
               ? Status::OK()
               : ErrnoStatus(errno, "rename to " + to, from);
  }

  StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
    if (!S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(path + ": not a regular file");
    }
    return static_cast<uint64_t>(st.st_size);
  }

  StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus(errno, "opendir", dir);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = readdir(d)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    const int err = errno;
    closedir(d);
    if (err != 0) return ErrnoStatus(err, "readdir", dir);
    return names;
  }

  Status CreateDir(const std::string& dir) override {
    if (dir.empty()) return Status::InvalidArgument("create directory: empty path");
    // Parents first: every prefix ending before a '/'.
    for (size_t at = dir.find('/', 1); at != std::string::npos;
         at = dir.find('/', at + 1)) {
      PKV_RETURN_IF_ERROR(MakeOne(dir.substr(0, at)));
    }
    return MakeOne(dir);
  }

  Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "open directory", dir);
    const int r = fsync(fd);
    const int err = errno;
    close(fd);
    return r == 0 ? Status::OK() : ErrnoStatus(err, "fsync directory", dir);
  }

 private:
  static Status MakeOne(const std::string& dir) {
    if (mkdir(dir.c_str(), 0755) == 0) return Status::OK();
    if (errno != EEXIST) return ErrnoStatus(errno, "create directory", dir);
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::IOError("create directory " + dir + ": not a directory");
    }
    return Status::OK();
  }
};

}  // namespace

FileSystem* FileSystem::Default() {
  static PosixFileSystem* fs = new PosixFileSystem();  // never destroyed
  return fs;
}

}  // namespace prefixkv
