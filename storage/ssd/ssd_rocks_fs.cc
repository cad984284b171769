// RocksDB's writes through prefixkv's FileSystem seam (ssd_rocks_fs.h): an
// adapter from RocksDB's FileSystem and file classes to ours. It exists so that
// a fault-injecting FileSystem sees the metadata database's writes as well as
// the segment files': a simulated power loss then drops RocksDB's unsynced log
// tail and new files too, and a crash test sees the database and the segments
// lose the same unsynced writes. Reads, locking and RocksDB's info log stay on
// RocksDB's own file system.
#include "ssd_rocks_fs.h"

#include <rocksdb/file_system.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace prefixkv::ssd {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;

IOStatus ToIo(const Status& s) {
  if (s.ok()) return IOStatus::OK();
  if (s.IsNoSpace()) return IOStatus::NoSpace(s.message());
  if (s.IsNotFound()) return IOStatus::PathNotFound(s.message());
  return IOStatus::IOError(s.message());
}

// A file RocksDB appends to, written at its end through a FileHandle.
// Thread-compatible, like every FSWritableFile (RocksDB serializes appends);
// syncs may run concurrently with appends (the handle is thread-safe).
class RoutedWritableFile final : public rocksdb::FSWritableFile {
 public:
  RoutedWritableFile(std::unique_ptr<FileHandle> file, uint64_t size,
                     const rocksdb::FileOptions& options)
      : FSWritableFile(options), file_(std::move(file)), size_(size) {}

  IOStatus Append(const rocksdb::Slice& data, const IOOptions&,
                  IODebugContext*) override {
    if (file_ == nullptr) return IOStatus::IOError("append to a closed file");
    IOStatus s = ToIo(file_->Write(size_, data.data(), data.size()));
    if (s.ok()) size_ += data.size();
    return s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions&, IODebugContext*) override {
    if (file_ == nullptr) return IOStatus::IOError("truncate a closed file");
    IOStatus s = ToIo(file_->Truncate(size));
    if (s.ok()) size_ = size;
    return s;
  }
  IOStatus Close(const IOOptions&, IODebugContext*) override {
    file_.reset();
    return IOStatus::OK();
  }
  IOStatus Flush(const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();  // nothing is buffered here
  }
  IOStatus Sync(const IOOptions&, IODebugContext*) override {
    return file_ == nullptr ? IOStatus::OK() : ToIo(file_->DataSync());
  }
  IOStatus Fsync(const IOOptions&, IODebugContext*) override {
    return file_ == nullptr ? IOStatus::OK() : ToIo(file_->Sync());
  }
  bool IsSyncThreadSafe() const override { return true; }
  uint64_t GetFileSize(const IOOptions&, IODebugContext*) override { return size_; }

 private:
  std::unique_ptr<FileHandle> file_;
  uint64_t size_;
};

// Thread-safe: its Fsync is FileSystem::SyncDir.
class RoutedDirectory final : public rocksdb::FSDirectory {
 public:
  RoutedDirectory(prefixkv::FileSystem* fs, std::string path)
      : fs_(fs), path_(std::move(path)) {}
  IOStatus Fsync(const IOOptions&, IODebugContext*) override {
    return ToIo(fs_->SyncDir(path_));
  }
  IOStatus Close(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }

 private:
  prefixkv::FileSystem* const fs_;
  const std::string path_;
};

// RocksDB's default file system, with the write paths routed through `fs`.
// Thread-safe.
class RoutedFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit RoutedFileSystem(prefixkv::FileSystem* fs)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), fs_(fs) {}

  static const char* kClassName() { return "PrefixkvRoutedFileSystem"; }
  const char* Name() const override { return kClassName(); }

  IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                           std::unique_ptr<rocksdb::FSWritableFile>* r,
                           IODebugContext*) override {
    return Open(f, OpenMode::kCreateOrTruncate, o, r);
  }
  IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                              std::unique_ptr<rocksdb::FSWritableFile>* r,
                              IODebugContext*) override {
    return Open(f, OpenMode::kCreateOrOpen, o, r);
  }
  IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                             const rocksdb::FileOptions& o,
                             std::unique_ptr<rocksdb::FSWritableFile>* r,
                             IODebugContext*) override {
    IOStatus s = ToIo(fs_->RenameFile(old, f));
    return s.ok() ? Open(f, OpenMode::kCreateOrTruncate, o, r) : s;
  }
  IOStatus NewDirectory(const std::string& name, const IOOptions& io,
                        std::unique_ptr<rocksdb::FSDirectory>* r,
                        IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSDirectory> probe;  // exists and is a directory
    IOStatus s = target()->NewDirectory(name, io, &probe, dbg);
    if (s.ok()) r->reset(new RoutedDirectory(fs_, name));
    return s;
  }
  IOStatus DeleteFile(const std::string& f, const IOOptions&, IODebugContext*) override {
    return ToIo(fs_->DeleteFile(f));
  }
  IOStatus RenameFile(const std::string& from, const std::string& to, const IOOptions&,
                      IODebugContext*) override {
    return ToIo(fs_->RenameFile(from, to));
  }
  IOStatus Truncate(const std::string& f, size_t size, const IOOptions&,
                    IODebugContext*) override {
    StatusOr<std::unique_ptr<FileHandle>> file =
        fs_->OpenFile(f, {.mode = OpenMode::kReadWrite});
    return file.ok() ? ToIo((*file)->Truncate(size)) : ToIo(file.status());
  }

 private:
  IOStatus Open(const std::string& f, OpenMode mode, const rocksdb::FileOptions& o,
                std::unique_ptr<rocksdb::FSWritableFile>* r) {
    // RocksDB's own direct writes would need PositionedAppend; the metadata
    // database never asks for them (docs/ssd.md: it uses buffered I/O).
    if (o.use_direct_writes) return IOStatus::NotSupported("direct writes");
    StatusOr<std::unique_ptr<FileHandle>> file = fs_->OpenFile(f, {.mode = mode});
    if (!file.ok()) return ToIo(file.status());
    uint64_t size = 0;
    if (mode == OpenMode::kCreateOrOpen) {
      StatusOr<uint64_t> got = (*file)->Size();
      if (!got.ok()) return ToIo(got.status());
      size = *got;
    }
    r->reset(new RoutedWritableFile(std::move(file).value(), size, o));
    return IOStatus::OK();
  }

  prefixkv::FileSystem* const fs_;
};

// Thread-safe (the sink is).
class ForwardingLogger final : public rocksdb::Logger {
 public:
  ForwardingLogger(rocksdb::InfoLogLevel level,
                   std::function<void(std::string_view)> sink)
      : rocksdb::Logger(level), sink_(std::move(sink)) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(line, sizeof line, format, copy);
    va_end(copy);
    if (n < 0) return;
    std::string_view text(line,
                          std::min<size_t>(static_cast<size_t>(n), sizeof line - 1));
    while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    sink_("rocksdb: " + std::string(text));
  }

 private:
  const std::function<void(std::string_view)> sink_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewForwardingRocksLogger(
    rocksdb::InfoLogLevel level, std::function<void(std::string_view)> sink) {
  return std::make_shared<ForwardingLogger>(level, std::move(sink));
}

std::unique_ptr<rocksdb::Env> NewRoutedRocksEnv(prefixkv::FileSystem* fs) {
  return rocksdb::NewCompositeEnv(std::make_shared<RoutedFileSystem>(fs));
}

}  // namespace prefixkv::ssd
