// FaultInjectionFileSystem: a FileSystem wrapper for tests that makes chosen
// operations fail and simulates power loss (RocksDB's FaultInjectionTestFS,
// for prefixkv's FileSystem seam).
//
// Faults: read errors, write errors, short writes and sync failures, on the
// files whose path contains a given string, after N matching operations
// succeeded, for M operations. A failed operation changes nothing below,
// except a short write, which writes a prefix of the bytes first.
//
// Power loss: the wrapper remembers, for every file written through it, the
// size and content it had at its last successful DataSync()/Sync(), and for
// every directory the names created (or replaced by a rename) since its last
// successful SyncDir(). SimulatePowerLoss() puts the files below back into
// that durable state:
//   * a file is cut back to its last synced size, and bytes it overwrote below
//     that size since the sync get their synced content back (saved, 4096-byte
//     page by page, before the first overwrite);
//   * a name created since its directory's last sync disappears; a name that a
//     rename replaced gets the replaced file's content back;
//   * directory creations, unlinks and the removal of a rename's source name
//     count as durable at once (one of the outcomes a real file system allows;
//     the harsher one for a cache that must not lose what it acknowledged);
//     with KeepUnlinksUntilDirSync(true), an unlink is durable only once its
//     directory is synced (the other outcome: the harsher one for a file
//     whose removal must stay removed), and a loss before that puts the file
//     back with its durable content;
//   * files written without this wrapper are untouched.
// Afterwards the power stays off: every operation (through the wrapper, or a
// handle opened before) fails with IOError until PowerOn(), so the code that
// was running cannot write after the "loss". Handles opened before the loss
// keep failing after PowerOn(). What is on disk then counts as durable.
//
// Every mutating operation holds one lock across the call below, so a loss
// falls between operations, never inside one. Test code: not for production.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/file_system.h"

namespace prefixkv {

// The operation a fault applies to.
enum class FaultOp {
  kRead,     // FileHandle::Read
  kWrite,    // FileHandle::Write
  kSync,     // FileHandle::DataSync and Sync
  kSyncDir,  // FileSystem::SyncDir
};

struct FaultSpec {
  FaultOp op = FaultOp::kWrite;
  // Applies to paths that contain this string (a file's path, or the
  // directory for kSyncDir); empty: every path.
  std::string path_contains;
  // Matching operations that succeed before the first failure.
  uint64_t skip = 0;
  // Matching operations that fail after those; then the fault is spent.
  uint64_t count = UINT64_MAX;
  // What a failed operation returns: NoSpace for ENOSPC, IOError for EIO.
  Status error = Status::IOError("injected EIO");
  // kWrite only: the first half of the bytes (rounded down to 4096 on an
  // O_DIRECT file) are written before `error` is returned.
  bool short_write = false;
};

// What SimulatePowerLoss() undid.
struct PowerLossReport {
  uint64_t files_rolled_back = 0;  // files cut back or restored to their synced state
  uint64_t bytes_dropped = 0;      // bytes past the synced sizes, plus restored ones
  uint64_t names_undone = 0;       // unsynced new names removed or restored
};

// Thread-safe.
class FaultInjectionFileSystem final : public FileSystem {
 public:
  // REQUIRES: `base` outlives this object.
  explicit FaultInjectionFileSystem(FileSystem* base = FileSystem::Default());
  ~FaultInjectionFileSystem() override;
  FaultInjectionFileSystem(const FaultInjectionFileSystem&) = delete;
  FaultInjectionFileSystem& operator=(const FaultInjectionFileSystem&) = delete;

  // Adds a fault; faults are checked in the order added and the first that
  // fires decides.
  void AddFault(FaultSpec fault) EXCLUDES(mu_);
  void ClearFaults() EXCLUDES(mu_);
  // Operations failed by faults so far.
  uint64_t faults_injected() const EXCLUDES(mu_);

  // Puts every file and name written through this wrapper back to its durable
  // state (see above) and turns the power off. Returns the first error of the
  // file system below (the rollback then may be incomplete).
  StatusOr<PowerLossReport> SimulatePowerLoss() EXCLUDES(mu_);
  // Operations work again (new handles only); what is on disk is durable.
  void PowerOn() EXCLUDES(mu_);
  // From now on, whether a file unlinked through the wrapper comes back at a
  // power loss until its directory's next successful SyncDir (see above).
  void KeepUnlinksUntilDirSync(bool keep) EXCLUDES(mu_);

  // FileSystem.
  StatusOr<std::unique_ptr<FileHandle>> OpenFile(const std::string& path,
                                                 const FileOpenOptions& options) override
      EXCLUDES(mu_);
  Status DeleteFile(const std::string& path) override EXCLUDES(mu_);
  Status RenameFile(const std::string& from, const std::string& to) override
      EXCLUDES(mu_);
  StatusOr<uint64_t> FileSize(const std::string& path) override EXCLUDES(mu_);
  StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override
      EXCLUDES(mu_);
  Status CreateDir(const std::string& dir) override EXCLUDES(mu_);
  Status SyncDir(const std::string& dir) override EXCLUDES(mu_);

 private:
  class Handle;
  // The durable state of one file written through the wrapper. Guarded by
  // the wrapper's mu_ (reached through nodes_ or a Handle's node; the
  // analysis cannot name another object's mutex from here).
  struct Node {
    std::string path;  // current name; empty once unlinked
    uint64_t synced_size = 0;
    uint64_t size = 0;
    std::map<uint64_t, std::string> saved_pages;  // page -> synced content
    bool dirty = false;                           // changed since the last sync
  };
  struct ActiveFault {
    FaultSpec spec;
    uint64_t seen = 0;  // matching operations so far
  };

  // OK, or the error of the first fault that fires (`*short_write` tells
  // whether it asks for a short write).
  Status CheckFault(FaultOp op, const std::string& path, bool* short_write = nullptr)
      REQUIRES(mu_);
  // IOError while the power is off or for a stale handle.
  Status CheckPower(uint64_t epoch) const REQUIRES(mu_);
  // Saves the synced content of the pages of [begin, end) below
  // node.synced_size that have none saved yet, read through `file`.
  Status SavePages(Node& node, const FileHandle& file, uint64_t begin, uint64_t end)
      REQUIRES(mu_);
  // Records that `path` is a new (`previous` nullopt) or replaced name,
  // unless it is recorded already since its directory's sync.
  void RecordName(const std::string& path, std::optional<std::string> previous)
      REQUIRES(mu_);
  // (SimulatePowerLoss, holding mu_: nothing may write meanwhile.)
  Status RollBackFile(const Node& node, PowerLossReport* report) REQUIRES(mu_);
  Status UndoName(const std::string& path, const std::optional<std::string>& previous)
      REQUIRES(mu_);
  // The content `path` would have after a power loss now (its last synced
  // state, when written through the wrapper).
  StatusOr<std::string> DurableContent(const std::string& path) REQUIRES(mu_);

  // Called by Handle.
  StatusOr<size_t> Read(const Handle& h, uint64_t offset, size_t n, void* buf)
      EXCLUDES(mu_);
  Status Write(Handle& h, uint64_t offset, const void* data, size_t n) EXCLUDES(mu_);
  Status SyncFile(Handle& h, bool data_only) EXCLUDES(mu_);
  Status Truncate(Handle& h, uint64_t size) EXCLUDES(mu_);

  FileSystem* const base_;
  // Held across the operations of `base_` that it keeps books on, so the
  // books and the files below agree; a leaf: never held while taking another
  // prefixkv lock.
  mutable Mutex mu_;
  bool power_off_ GUARDED_BY(mu_) = false;
  bool keep_unlinks_ GUARDED_BY(mu_) = false;  // KeepUnlinksUntilDirSync
  uint64_t epoch_ GUARDED_BY(mu_) = 0;         // +1 at every power loss
  std::vector<ActiveFault> faults_ GUARDED_BY(mu_);
  uint64_t faults_injected_ GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, std::shared_ptr<Node>> nodes_ GUARDED_BY(mu_);
  // Per directory: names not yet durable -> what a loss restores (nullopt:
  // the name did not exist).
  std::map<std::string, std::map<std::string, std::optional<std::string>>> names_
      GUARDED_BY(mu_);
};

}  // namespace prefixkv
