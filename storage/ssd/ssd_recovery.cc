// SsdTier lifecycle: opening RocksDB (or moving an unopenable one aside),
// rebuilding the index and counters from the records, and closing cleanly.
#include <fcntl.h>
#include <rocksdb/convenience.h>
#include <rocksdb/listener.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include "ssd_layout.h"
#include "ssd_rocks_fs.h"
#include "ssd_segment.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace {

// Adds counter records field by field (see ssd_layout.h), so every batch can
// carry its owner's deltas without reading the current value.
class CounterAddOperator : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice&, const rocksdb::Slice* existing,
             const rocksdb::Slice& value, std::string* new_value,
             rocksdb::Logger*) const override {
    TierCounters sum, delta;
    if (existing != nullptr && !ssd::DecodeCounters(existing->ToStringView(), &sum))
      return false;
    if (!ssd::DecodeCounters(value.ToStringView(), &delta)) return false;
    ssd::AddCounters(&sum, delta);
    *new_value = ssd::EncodeCounters(sum);
    return true;
  }
  const char* Name() const override { return "prefixkv.CounterAdd"; }
};

// Whether a lock on `lock_file` is held, from /proc/locks (Linux), and by
// which process: 0 when /proc/locks names none. An open file description
// lock (F_OFD_SETLK) is listed with pid -1, which was given to the user as
// the holder ('in use by another process (pid -1)';
// AuditUsageTest.ALockHeldWithoutAPidNamesNoPid). nullopt: none is held, or
// it cannot be told.
std::optional<pid_t> LockHolder(const std::string& lock_file) {
  struct stat st;
  if (::stat(lock_file.c_str(), &st) != 0) return std::nullopt;
  // "MAJOR:MINOR" in hex, as /proc/locks prints the device.
  char device[32];
  std::snprintf(device, sizeof device, "%02x:%02x", ::major(st.st_dev),
                ::minor(st.st_dev));
  std::ifstream locks("/proc/locks");
  std::string line;
  std::optional<pid_t> holder;
  // "1: POSIX  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF"
  while (std::getline(locks, line)) {
    std::istringstream in(line);
    std::string id, kind, mode, rw, pid, dev_inode;
    if (!(in >> id >> kind >> mode >> rw >> pid >> dev_inode)) continue;
    // The device too: an open refuses a directory whose LOCK this names, so
    // a lock on another file system's file of the same inode number must
    // not match.
    if (dev_inode == std::string(device) + ":" + std::to_string(st.st_ino)) {
      const pid_t named = static_cast<pid_t>(std::strtol(pid.c_str(), nullptr, 10));
      if (named > 0) return named;
      holder = 0;  // held; another line may still name a process
    }
  }
  return holder;
}

// The read-only opens' shared locks on LOCK files: one per file for the
// whole process. A POSIX record lock belongs to the process, and closing any
// descriptor of the file drops every lock the process holds on it: a second
// reader of a directory in one process, once closed, took the first
// reader's lock with it (a server then opened the directory under the first
// reader), and a reader beside this process's writing tier turned RocksDB's
// lock into a shared one, which its close then dropped
// (AuditUsageTest.ASecondReaderInOneProcessKeepsTheDirectoryLocked). So the
// readers of one file share one descriptor, closed with the last of them.
struct ReadLocks {
  struct Held {
    int fd = -1;
    int readers = 0;
  };
  Mutex mu;
  std::map<std::pair<dev_t, ino_t>, Held> held GUARDED_BY(mu);
};

ReadLocks& TheReadLocks() {
  static ReadLocks* locks = new ReadLocks;  // never destroyed: used at exit
  return *locks;
}

rocksdb::CompressionType ParseCompression(const std::string& name) {
  if (name == "lz4") return rocksdb::kLZ4Compression;
  if (name == "zstd") return rocksdb::kZSTD;
  if (name == "snappy") return rocksdb::kSnappyCompression;
  return rocksdb::kNoCompression;
}

// Whether `s` is RocksDB refusing a LOCK someone holds: its lock call failed
// ("While lock file: D/LOCK: Resource temporarily unavailable") or this
// process holds it ("lock hold by current process"). A LOCK that could not
// even be opened ("while open a file for lock: D/LOCK: Read-only file
// system", a disk remounted read-only after errors) has no holder: that
// error is reported as it is, not as "in use by another process".
bool LockIsHeld(const Status& s) {
  const std::string_view m = s.message();
  return m.find("/LOCK") != std::string_view::npos &&
         (m.find("While lock file") != std::string_view::npos ||
          m.find("lock hold by current process") != std::string_view::npos);
}

// Whether `s` is the process or the system out of a resource (file
// descriptors: EMFILE, ENFILE; memory: ENOMEM; EAGAIN): no damage, the same
// open succeeds once it has them again. Known by the error's text, as
// RocksDB keeps no errno. Taken for damage, the metadata was moved aside and
// rebuilt from the segments, which bring back only what they prove current
// (no manifest, no removal history) (until 2026-12-07;
// SsdFaultTest.AnOpenOutOfFileDescriptorsFailsAndRebuildsNothing).
bool OutOfResources(const Status& s) {
  const std::string_view m = s.message();
  for (const int err : {EMFILE, ENFILE, ENOMEM, EAGAIN}) {
    if (m.find(std::strerror(err)) != std::string_view::npos) return true;
  }
  return false;
}

// "data directory D is in use by ...": a directory another process (or
// another tier of this one) holds.
Status InUse(const std::string& path, pid_t holder) {
  return Status::Busy(
      "data directory " + path + " is in use by " +
      (holder == 0 ? std::string("another process")
       : holder == ::getpid()
           ? "this process (pid " + std::to_string(holder) + ", another tier)"
           : "another process (pid " + std::to_string(holder) + ")"));
}

}  // namespace

StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(const SsdTierOptions& options) {
  PKV_RETURN_IF_ERROR(ssd::TierImpl::ValidateOptions(options));
  auto impl = std::make_unique<ssd::TierImpl>(options);
  PKV_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<SsdTier>(new SsdTier(std::move(impl)));
}

Status ssd::TierImpl::ValidateOptions(const SsdTierOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("ssd tier: empty path");
  if (options.clock == nullptr) return Status::InvalidArgument("ssd tier: null clock");
  if (options.file_system == nullptr)
    return Status::InvalidArgument("ssd tier: null file system");
  if (options.capacity_bytes == 0)
    return Status::InvalidArgument("ssd tier: zero capacity");
  if (options.segment_bytes < ssd::kExtentAlign)
    return Status::InvalidArgument("ssd tier: segment_bytes below 4096");
  if (!(options.reclaim_live_fraction >= 0 && options.reclaim_live_fraction < 1))
    return Status::InvalidArgument("ssd tier: reclaim_live_fraction must be in [0, 1)");
  const std::string& c = options.compression;
  if (c != "none" && c != "lz4" && c != "zstd" && c != "snappy") {
    return Status::InvalidArgument("ssd tier: unknown compression " + c);
  }
  return Status::OK();
}

ssd::TierImpl::TierImpl(const SsdTierOptions& options)
    : options_(WithSpaceBounds(options)),
      read_ahead_(options.read_ahead_threads, options.read_ahead_bytes,
                  [this](const ssd::IndexEntry& e) { return ReadExtent(e); }) {
  write_options_.disableWAL = options.durability == SsdDurability::kFlush;
  write_options_.sync = options.durability == SsdDurability::kSync;
  relaxed_options_.disableWAL = write_options_.disableWAL;
  MutexLock lock(&mu_);
  index_ = EmptyIndex();
}

ssd::SsdIndex ssd::TierImpl::EmptyIndex() const {
  SsdIndex index;
  if (options_.policy == EvictionPolicyKind::kChain) {
    index.SetChainCapacity(options_.capacity_bytes);
  }
  return index;
}

namespace {

// Runs `before_flush` before every memtable flush: the flush writes the
// deletes of removals to a table on the device, so the removal journal
// goes there first (ssd::TierImpl::SyncJournal).
class FlushListener final : public rocksdb::EventListener {
 public:
  explicit FlushListener(std::function<void()> before_flush)
      : before_flush_(std::move(before_flush)) {}
  void OnFlushBegin(rocksdb::DB* /*db*/, const rocksdb::FlushJobInfo& /*info*/) override {
    before_flush_();
  }

 private:
  const std::function<void()> before_flush_;
};

}  // namespace

ssd::TierImpl::~TierImpl() {
  (void)Close();
  ReleaseReadLock();  // also after a failed Open, which Close does not see
}

rocksdb::Options ssd::TierImpl::DbOptions(bool direct_io) const {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.paranoid_checks = true;
  o.merge_operator = std::make_shared<CounterAddOperator>();
  // Metadata, counters and markers only (payloads are in segment files), so
  // buffered I/O and RocksDB's software CRC32c cost little.
  o.compression = ParseCompression(options_.compression);
  BoundDbSpace(options_, &o);  // write_buffer_size and the log's size (ssd_space.cc)
  o.max_write_buffer_number = 4;
  o.max_background_flushes = 1;
  o.max_background_compactions = 1;
  o.use_direct_io_for_flush_and_compaction = direct_io;
  o.use_direct_reads = direct_io;
  // A torn tail after a kill is cut at the last complete batch; damage
  // before the tail fails the open (no silent point-in-time cut), and the
  // metadata is then rebuilt from the segments (ssd_salvage.cc).
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  o.keep_log_file_num = 3;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  // Into the tier's log, not a LOG file a full disk could make abort.
  o.info_log = ssd::NewForwardingRocksLogger(
      o.info_log_level, [this](std::string_view l) { Log(std::string(l)); });
  if (env_ != nullptr) o.env = env_.get();  // writes through options_.file_system
  o.listeners.push_back(std::make_shared<FlushListener>([this] {
    flushes_begun_.fetch_add(1, std::memory_order_seq_cst);  // ConfirmRemovals
    if (Status s = SyncJournal(); !s.ok()) {
      Log("removal journal sync before a metadata flush failed: " + s.ToString());
    }
  }));
  rocksdb::BlockBasedTableOptions t;
  t.checksum = rocksdb::kXXH3;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

Status ssd::TierImpl::OpenDb() {
  if (env_ == nullptr && options_.file_system != FileSystem::Default()) {
    env_ = ssd::NewRoutedRocksEnv(options_.file_system);
  }
  rocksdb::DB* raw = nullptr;
  // Read-only, RocksDB writes nothing: it replays the log into memory
  // instead of a new table, and writes no MANIFEST, OPTIONS or log file.
  rocksdb::Status rs =
      options_.read_only
          ? rocksdb::DB::OpenForReadOnly(DbOptions(/*direct_io=*/false), options_.path,
                                         &raw)
          : rocksdb::DB::Open(DbOptions(/*direct_io=*/false), options_.path, &raw);
  if (!rs.ok()) return FromRocks(rs, "open " + options_.path);
  db_.reset(raw);
  return Status::OK();
}

Status ssd::TierImpl::MoveAside(const Status& why) {
  db_.reset();
  std::string aside =
      options_.path + ".broken-" + std::to_string(options_.clock->NowNanos());
  Status renamed = options_.file_system->RenameFile(options_.path, aside);
  if (!renamed.ok()) {
    return Status::IOError("cannot move " + options_.path +
                           " aside: " + renamed.ToString());
  }
  report_.moved_aside_to = aside;
  Log("database at " + options_.path + " could not be opened (" + why.ToString() +
      "); moved to " + aside + ", starting cold");
  return Status::OK();
}

Status ssd::TierImpl::LockShared() {
  const std::string lock_file = options_.path + "/LOCK";
  // Looked up by stat: opening the file again, then closing it, would drop
  // the lock this process holds on it (TheReadLocks).
  struct stat st;
  if (::stat(lock_file.c_str(), &st) != 0) return Status::OK();  // no database
  ReadLocks& locks = TheReadLocks();
  MutexLock lock(&locks.mu);
  if (auto it = locks.held.find({st.st_dev, st.st_ino}); it != locks.held.end()) {
    it->second.readers += 1;  // another reader of this process holds it
    read_lock_fd_ = it->second.fd;
    return Status::OK();
  }
  // Held by this process and not by its readers: a writing tier's.
  if (const std::optional<pid_t> holder = LockHolder(lock_file); holder == ::getpid()) {
    return InUse(options_.path, *holder);
  }
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::OK();  // no database (the open says so) or not POSIX
  struct flock shared {};
  shared.l_type = F_RDLCK;
  shared.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &shared) != 0) {
    ::close(fd);
    return InUse(options_.path, LockHolder(lock_file).value_or(0));
  }
  locks.held[{st.st_dev, st.st_ino}] = {fd, 1};
  read_lock_fd_ = fd;
  return Status::OK();
}

void ssd::TierImpl::ReleaseReadLock() {
  if (read_lock_fd_ < 0) return;
  ReadLocks& locks = TheReadLocks();
  MutexLock lock(&locks.mu);
  for (auto it = locks.held.begin(); it != locks.held.end(); ++it) {
    if (it->second.fd != read_lock_fd_) continue;
    if (--it->second.readers == 0) {
      ::close(it->second.fd);  // drops the lock
      locks.held.erase(it);
    }
    break;
  }
  read_lock_fd_ = -1;
}

Status ssd::TierImpl::OpenOrMoveAside() {
  // A read-only open creates nothing (RocksDB's read-only open fails where
  // there is no database).
  if (!options_.read_only) {
    PKV_RETURN_IF_ERROR(options_.file_system->CreateDir(options_.path));
  }
  // Missing metadata beside segments that hold blocks is damage: opening it
  // would create an empty database (ssd_rollforward.cc).
  Status s = CheckMetadataPresent();
  if (s.ok()) s = OpenDb();
  if (s.ok()) s = Rebuild();
  if (s.ok()) s = CheckAgainstJournal();  // older than the segments: rolled forward
  // Another process (or tier) has the directory open: one line that says so,
  // not RocksDB's raw lock error.
  if (!s.ok() && LockIsHeld(s)) {
    return InUse(options_.path, LockHolder(options_.path + "/LOCK").value_or(0));
  }
  // A held lock, a full disk, missing permissions or a lack of descriptors
  // or memory are not damage: report them; nor is another program's
  // database (CheckFormat), left untouched, nor segments that vanished as a
  // whole (CheckSegmentsPresent).
  if (s.ok() || s.IsBusy() || s.IsNoSpace() || s.IsInvalidArgument() ||
      s.IsUnavailable() || s.message().find("LOCK:") != std::string::npos ||
      s.message().find("Permission denied") != std::string::npos || OutOfResources(s)) {
    return s;
  }
  if (!options_.repair_damaged_metadata) return s;  // report, change nothing
  if (s.message().find("older or foreign layout") == std::string::npos) {
    // Damaged metadata: the segment files describe themselves.
    {
      MutexLock lock(&mu_);
      index_ = EmptyIndex();
      unpersisted_.clear();
    }
    report_ = SsdOpenReport{};
    PKV_RETURN_IF_ERROR(RebuildFromSegments(s));
    return Rebuild();
  }
  PKV_RETURN_IF_ERROR(MoveAside(s));
  {
    MutexLock lock(&mu_);
    index_ = EmptyIndex();
    unpersisted_.clear();
  }
  report_ = SsdOpenReport{.moved_aside_to = report_.moved_aside_to};
  PKV_RETURN_IF_ERROR(options_.file_system->CreateDir(options_.path));
  PKV_RETURN_IF_ERROR(OpenDb());
  return Rebuild();
}

Status ssd::TierImpl::Open() {
  // A directory a running tier holds is refused before anything in it is
  // touched: releasing its space reserve (below) and writing it back after
  // the database's lock refused us left a running server without one when
  // its writes took the freed room meanwhile, and `prefixkv audit` or
  // `inspect` beside a server changed the directory they only look at
  // (AuditUsageTest.ADirectoryInUseIsLeftExactlyAsItWas). The lock check in
  // OpenOrMoveAside stays for a holder that comes between the two.
  // RocksDB's read-only mode takes no lock: a server opening the directory
  // meanwhile would rewrite the journal, compact segments and delete files
  // under the reader. Held shared, the lock refuses such a server (naming
  // this process, as the check below does) and admits other readers.
  if (options_.read_only) {
    PKV_RETURN_IF_ERROR(LockShared());
  } else if (const std::optional<pid_t> holder = LockHolder(options_.path + "/LOCK")) {
    return InUse(options_.path, *holder);
  }
  // A report-only open (audit, inspect) leaves the reserve as it finds it:
  // released and written again, on a nearly full disk the database's own
  // files took the room first and the directory was left without one
  // (AuditUsageTest.AStoppedServersSpaceReserveIsLeftAsItWas). On a full
  // disk such an open may then fail with NoSpace, changing nothing.
  const bool report_only = !options_.repair_damaged_metadata;
  PKV_RETURN_IF_ERROR(CheckSegmentsPresentBeforeWriting());
  bool had_reserve = false;  // room for the database's recovery (ssd_space.cc)
  if (!report_only) (void)ReleaseReserveForOpen(&had_reserve);
  if (Status s = OpenOrMoveAside(); !s.ok()) {
    // The reserve may be another process's (the database is locked by it):
    // put it back as it was before returning. Only one that was there: a
    // directory that is no tier's (`prefixkv inspect` or `audit` pointed at
    // another program's database) must not be left with one.
    if (options_.reserve_bytes > 0 && had_reserve) (void)WriteReserveFile();
    return s;
  }
  PKV_RETURN_IF_ERROR(journal_read_error_);  // CheckAgainstJournal
  PKV_RETURN_IF_ERROR(LoadOwnerNames());
  PKV_RETURN_IF_ERROR(OpenSegments());
  PKV_RETURN_IF_ERROR(OpenJournal());
  PKV_RETURN_IF_ERROR(ReconcileJournal());
  if (!report_only) FillReserve();
  // From here until Close() completes, a kill is an unclean stop. A
  // report-only open (audit, inspect) leaves the marker as the last tier left
  // it: closing cleanly, it hid an unclean stop from every later audit
  // (AuditUsageTest.AnUncleanStopIsReportedByEveryAudit). Its own writes (an
  // audit's removals) are single batches, so a kill mid-way leaves no state
  // the marker would have to flag.
  if (!report_only) {
    rocksdb::WriteOptions w;
    w.sync = options_.durability == SsdDurability::kSync;
    PKV_RETURN_IF_ERROR(FromRocks(db_->Put(w, std::string(ssd::kCleanKey), "0"), "open"));
  }
  queue_ = std::make_unique<ssd::WriteBackQueue>(
      options_.queue_depth, options_.writer_threads, options_.retry_interval_ms,
      options_.clock, [this](const std::vector<ssd::WriteBackItem>& items) {
        PKV_RETURN_IF_ERROR(Store(items, /*dirty=*/true));
        EnforceCapacity();
        ThrottleWrites();
        return Status::OK();
      });
  Log("opened " + options_.path + ": " + std::to_string(report_.blocks) + " blocks, " +
      std::to_string(report_.bytes) + " bytes, durability " +
      std::string(SsdDurabilityName(options_.durability)) + ", direct io " +
      (direct_io_ ? "on" : "off") + ", " + std::to_string(report_.segments) +
      " segments" +
      (report_.unreferenced_segments_deleted == 0
           ? ""
           : ", " + std::to_string(report_.unreferenced_segments_deleted) +
                 " unreferenced segments deleted") +
      (report_.created                   ? ", new"
       : report_.previous_shutdown_clean ? ", clean"
                                         : ", recovered") +
      (report_.counter_repairs.empty()
           ? ""
           : ", " + std::to_string(report_.counter_repairs.size()) +
                 " counters repaired"));
  // A report-only open moves no block: the reclaimer compacted the segments
  // the last run left sparse, so `prefixkv inspect` or `audit` rewrote every
  // live payload of the directory they only look at
  // (AuditUsageTest.AuditAndInspectMoveNoBlock). The next server compacts them.
  if (report_only) return Status::OK();
  StartReclaimer();
  WakeReclaimer();  // segments left sparse by the previous run
  return Status::OK();
}

Status ssd::TierImpl::Close() {
  if (closed_ || db_ == nullptr) return Status::OK();
  closed_ = true;
  read_ahead_.Stop();
  BeginStop();
  Status first = queue_ ? queue_->Stop() : Status::OK();
  StopReclaimer();
  if (options_.read_only) {
    // Nothing was written: no payload, journal, marker, counter or access
    // order to put on the device, and RocksDB flushes nothing read-only.
    Status s = FromRocks(db_->Close(), "close");
    if (first.ok()) first = s;
    db_.reset();
    ReleaseReadLock();
    return first;
  }
  // Payloads on the device before the metadata that points at them is flushed.
  Status synced = store_ ? store_->SyncActive() : Status::OK();
  if (first.ok()) first = synced;
  // The reads' access order, before the clean marker: a clean restart keeps
  // the eviction order. Not an error of Close when it fails (blocks age).
  (void)FlushAccessOrder();
  // The removal journal before the metadata's flush below puts the deletes
  // of its removals on the device (else a power loss after a clean Close
  // could bring a removed block back at the next Open).
  Status s = SyncJournal();
  if (first.ok()) first = s;
  rocksdb::WriteBatch batch;
  // A report-only open never marked the tier open (Open above). A stop that
  // lost queued blocks, left acknowledged ones unsynced or whose caller lost
  // blocks (NoteBlocksLostAtStop) is no clean one: the next open (its log,
  // `prefixkv audit`) must say so
  // (SsdFaultTest.ACloseThatCouldNotPutEverythingAwayIsNotMarkedClean).
  if (options_.repair_damaged_metadata && first.ok() && !blocks_lost_at_stop_) {
    batch.Put(std::string(ssd::kCleanKey), "1");
  }
  s = Commit(&batch, {}, 0);  // also persists the event counters
  if (first.ok()) first = s;
  rocksdb::FlushOptions fo;
  fo.wait = true;
  s = FromRocks(db_->Flush(fo), "flush at close");
  if (first.ok()) first = s;
  s = FromRocks(db_->Close(), "close");
  if (first.ok()) first = s;
  db_.reset();
  if (!first.ok()) Log("close: " + first.ToString());
  return first;
}

}  // namespace prefixkv
