// FileSystem: the one seam through which the SSD tier touches files.
//
// Every segment read and write, every fsync and every directory operation of
// the SSD tier goes through a FileSystem (EngineOptions::file_system,
// SsdTierOptions::file_system), so an embedder can put the tier on its own
// storage layer and tests swap in one that injects errors or simulates power
// loss (tests/support/fault_injection_file_system.h) instead of needing a
// broken disk. The
// interface holds what the tier needs and nothing more (LevelDB's Env and
// RocksDB's FileSystem have the same shape): files opened for positional I/O,
// optionally with O_DIRECT, and the directory operations around them.
//
// FileSystem::Default() is the POSIX implementation (storage/base/
// posix_file_system.cc). Errors map to Status: ENOSPC and EDQUOT ->
// NoSpace, ENOENT -> NotFound, anything else -> IOError; every message names
// the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv {

// An open file, read and written at explicit offsets (pread/pwrite). Closed
// when destroyed; a file unlinked while open stays readable through it.
// Thread-safe: reads and writes of disjoint ranges, syncs and Size() may run
// concurrently.
class FileHandle {
 public:
  virtual ~FileHandle() = default;

  // Reads up to `n` bytes at `offset` into `buf`; returns how many were read,
  // fewer than `n` only at the end of the file (0 at or past it). With
  // direct_io(): `buf`, `offset` and `n` must be multiples of 4096 (a read
  // that reaches the end of the file may return a shorter count).
  virtual StatusOr<size_t> Read(uint64_t offset, size_t n, void* buf) const = 0;

  // Writes all `n` bytes at `offset`, extending the file as needed, or returns
  // the error that stopped it (then a prefix of the bytes may have been
  // written). With direct_io(): aligned as for Read. Not durable until a
  // DataSync() or Sync() returned OK.
  virtual Status Write(uint64_t offset, const void* data, size_t n) = 0;

  // fdatasync: the written bytes (and the size needed to read them) are
  // durable when it returns OK. After an error, what was written since the
  // last successful sync may or may not be durable.
  virtual Status DataSync() = 0;
  // fsync: DataSync plus the rest of the file's metadata.
  virtual Status Sync() = 0;

  // Sets the file's size (cutting or zero-extending it). Not durable until a
  // sync.
  virtual Status Truncate(uint64_t size) = 0;
  virtual StatusOr<uint64_t> Size() const = 0;

  // True when O_DIRECT is in effect (requested and granted).
  virtual bool direct_io() const = 0;
  const std::string& path() const { return path_; }

 protected:
  explicit FileHandle(std::string path) : path_(std::move(path)) {}

 private:
  const std::string path_;
};

// How OpenFile opens a file.
enum class OpenMode {
  kRead,              // an existing file, read only
  kReadWrite,         // an existing file, read and write
  kCreateNew,         // a new file, read and write; IOError if it exists (O_EXCL)
  kCreateOrTruncate,  // created if missing, else emptied; read and write
  kCreateOrOpen,      // created if missing, else kept as it is; read and write
};

struct FileOpenOptions {
  OpenMode mode = OpenMode::kRead;
  // Ask for O_DIRECT (bypass the page cache). Where the file system refuses it
  // (tmpfs, ...), the file is opened without it: FileHandle::direct_io() tells.
  bool direct_io = false;
};

// Thread-safe: every method may be called concurrently. Paths are plain
// strings ("dir/name"), as given; nothing is resolved or canonicalized.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The POSIX file system. Never null, never destroyed.
  static FileSystem* Default();

  virtual StatusOr<std::unique_ptr<FileHandle>> OpenFile(
      const std::string& path, const FileOpenOptions& options) = 0;

  // Removes a file's name (NotFound if there is none). Open handles keep
  // working. Durable once the directory is synced (SyncDir).
  virtual Status DeleteFile(const std::string& path) = 0;
  // rename(2): atomically replaces `to` if it exists; works for directories.
  // Durable once the directories involved are synced.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;

  // Size of a regular file: NotFound if absent, InvalidArgument if the name
  // is not a regular file (a directory...).
  virtual StatusOr<uint64_t> FileSize(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, without "." and ".."; in no
  // particular order. NotFound if `dir` does not exist.
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // Creates `dir` and any missing parents; OK if it exists already.
  virtual Status CreateDir(const std::string& dir) = 0;
  // fsync of a directory: the creations, renames and deletions of names in it
  // made before the call survive power loss.
  virtual Status SyncDir(const std::string& dir) = 0;
};

}  // namespace prefixkv
