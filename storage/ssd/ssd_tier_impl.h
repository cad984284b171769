// SsdTier::Impl: the SSD tier's state, shared by ssd_tier.cc (read/write
// paths), ssd_eviction.cc (capacity), ssd_reclaim.cc (segment space),
// ssd_recovery.cc (Open/Close) and ssd_audit.cc. Private to storage/.
//
// Locking: a write appends its payloads to a segment WITHOUT any block lock
// (the append goes to the writer's own active segment), then holds pause_
// shared and the stripes of its keys across the metadata commit and the index
// update, so writes of one key are serialized at the commit (the last commit
// wins; a superseded extent is garbage) while different keys proceed in
// parallel. Reads, removes, evictions and segment compaction hold the
// block's stripe. Audit holds pause_ exclusively. mu_ guards the in-memory
// index (including live bytes per segment) and the not-yet-persisted event
// counters; it is never held across I/O. Lock order: gc_run_mu_, pause_,
// stripe, mu_, then the segment store's own lock. The write-back queue has its
// own lock and calls Store() without holding it.
#pragma once

#include <rocksdb/db.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "prefixkv/advanced/ssd_tier.h"
#include "ssd_index.h"
#include "ssd_segment.h"
#include "ssd_writer.h"

namespace prefixkv {

class SsdTier::Impl {
 public:
  explicit Impl(const SsdTierOptions& options);
  ~Impl();

  // Checks the options Open relies on (path, clock, file system, sizes).
  static Status ValidateOptions(const SsdTierOptions& options);
  // Test seam (SsdTierTestPeer only, before Open): called before every
  // metadata commit; a non-OK result is handled exactly like the database
  // returning that error.
  void SetCommitHookForTest(std::function<Status()> hook) {
    commit_hook_ = std::move(hook);
  }

  // ssd_recovery.cc
  Status Open();
  Status Close();

  // ssd_tier.cc
  Status Put(const BlockMeta& meta, const SharedBytes& payload, bool dirty);
  // Stores blocks as one atomic write (no queue interplay, no capacity
  // enforcement). REQUIRES: distinct keys, at least one block.
  Status Store(const std::vector<ssd::WriteBackItem>& items, bool dirty);
  // `touch`: count the hit (or miss) and refresh the access order.
  StatusOr<SharedBytes> Get(const BlockKey& key, bool touch = true);
  StatusOr<BlockMeta> Peek(const BlockKey& key) const;
  Status Remove(const BlockKey& key);
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload);
  StatusOr<uint64_t> PurgeNamespace(const BlockKey& ns);
  std::vector<SsdNamespaceUsage> Namespaces() const;
  TierCounters Totals() const;
  TierCounters OwnerCounters(OwnerId owner) const;
  void ForEach(const std::function<void(const BlockMeta&, uint64_t)>& fn) const;

  // ssd_eviction.cc
  // Evicts least recently used leaves until the payload bytes fit capacity.
  void EnforceCapacity();
  void SetEvictionListener(EvictionListener* l);

  // ssd_audit.cc
  Status Audit(std::vector<AuditFinding>* findings);
  std::vector<BlockKey> FindOrphans() const;

  // ssd_reclaim.cc
  Status Compact();
  SsdSpaceUsage SpaceUsage() const;

  Status Flush() { return queue_->Flush(); }
  uint64_t queued_blocks() const { return queue_ ? queue_->size() : 0; }
  const SsdOpenReport& report() const { return report_; }

 private:
  using Deltas = std::map<OwnerId, TierCounters>;

  // ssd_recovery.cc
  rocksdb::Options DbOptions(bool direct_io) const;
  Status OpenDb();
  Status OpenOrMoveAside();
  Status MoveAside(const Status& why);
  Status Rebuild();
  Status CheckFormat();
  Status RebuildIndex(rocksdb::WriteBatch* repairs);
  Status RepairCounters();
  Status OpenSegments();

  // ssd_reclaim.cc
  void StartReclaimer();
  void StopReclaimer();
  void WakeReclaimer();
  // One pass: compacts sparse sealed segments, unlinks empty ones.
  Status ReclaimPass();
  Status ReclaimLocked();  // REQUIRES: gc_run_mu_ held
  // After a write and its evictions: if the segment files exceed the space
  // bound, runs a reclaim pass on the calling thread. REQUIRES: no lock held.
  void ThrottleWrites();
  // Copies the live payloads of `segment` to an active segment.
  Status Relocate(uint64_t segment);
  // Makes every committed metadata change survive what the mode promises
  // before a segment it no longer references is unlinked.
  Status MakeMetadataDurable();

  // ssd_tier.cc
  std::mutex& Stripe(const BlockKey& key);
  // Holds pause_ shared and stripe(key): the lock of one block operation.
  struct BlockLock {
    BlockLock(Impl* impl, const BlockKey& key)
        : pause(impl->pause_), stripe(impl->Stripe(key)) {}
    std::shared_lock<std::shared_mutex> pause;
    std::lock_guard<std::mutex> stripe;
  };
  // Holds pause_ shared and the stripes of several keys, in ascending order.
  struct BatchLock {
    BatchLock(Impl* impl, const std::vector<BlockKey>& keys);
    std::shared_lock<std::shared_mutex> pause;
    std::vector<std::unique_lock<std::mutex>> stripes;
  };
  // Writes `batch` with `deltas` and the pending event counters merged in.
  // `relaxed`: never synced (access-order updates). Counts and logs failures.
  Status Commit(rocksdb::WriteBatch* batch, Deltas deltas, OwnerId owner,
                bool relaxed = false);
  // The only call into RocksDB's write path, out of line: RocksDB is not
  // instrumented, so ThreadSanitizer attributes its internal memory traffic
  // (a write group's leader merging the followers' batches) to the caller;
  // this frame lets ssd_tier_tsan_test suppress exactly those reports.
  [[gnu::noinline]] rocksdb::Status DbWrite(const rocksdb::WriteOptions& o,
                                            rocksdb::WriteBatch* batch);
  void AddDeletes(rocksdb::WriteBatch* batch, const BlockKey& key,
                  const ssd::IndexEntry& e);
  // Removes a block whose payload failed verification and counts it.
  // REQUIRES: stripe(key) held, or pause_ held exclusively.
  Status DropCorrupt(const BlockKey& key, const ssd::IndexEntry& e,
                     const std::string& why);
  // Reads and verifies a payload. NotFound("corrupt: ...") after DropCorrupt.
  // REQUIRES: stripe(key) held, or pause_ held exclusively.
  StatusOr<SharedBytes> ReadVerified(const BlockKey& key, const ssd::IndexEntry& e);
  void CountEvent(OwnerId owner, uint64_t TierCounters::*field);
  void CountIoError(OwnerId owner);
  // flush mode: starts a memtable flush every write_buffer_bytes of payload.
  void PaceMemtableFlush(const std::vector<ssd::WriteBackItem>& items);
  void NoteWriteResult(const Status& s);
  void Log(const std::string& line) const;

  // ssd_eviction.cc
  Status Evict(const BlockKey& key);

  static constexpr size_t kStripes = 64;

  const SsdTierOptions options_;
  std::function<Status()> commit_hook_;  // tests only; set before Open
  // RocksDB's writes through options_.file_system (null with the default
  // file system: RocksDB's own is used). Declared before db_: outlives it.
  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<ssd::SegmentStore> store_;  // the payload segment files
  rocksdb::WriteOptions write_options_;       // per durability
  rocksdb::WriteOptions relaxed_options_;     // never synced
  bool direct_io_ = false;  // O_DIRECT in effect for segments (the fs may refuse it)
  SsdOpenReport report_;

  std::shared_mutex pause_;  // shared by block operations, exclusive for Audit
  std::array<std::mutex, kStripes> stripes_;
  mutable std::mutex mu_;
  ssd::SsdIndex index_;    // GUARDED_BY(mu_)
  Deltas unpersisted_;     // GUARDED_BY(mu_): event counts not yet in the db
  uint64_t next_seq_ = 0;  // GUARDED_BY(mu_)
  EvictionListener* listener_ = nullptr;   // GUARDED_BY(mu_)
  uint32_t listener_calls_ = 0;            // GUARDED_BY(mu_): evictions using listener_
  std::condition_variable listener_idle_;  // signalled when listener_calls_ drops

  std::atomic<uint64_t> unflushed_payload_bytes_{0};  // flush mode pacing
  std::atomic<bool> failing_{false};  // the last write failed (logged once)
  std::atomic<uint64_t> last_resume_nanos_{0};
  std::unique_ptr<ssd::WriteBackQueue> queue_;
  bool closed_ = false;

  // Segment reclamation (ssd_reclaim.cc): a background thread woken after
  // writes that may have left garbage; gc_run_mu_ serializes passes (the
  // thread's and Compact()'s).
  std::mutex gc_run_mu_;
  std::mutex gc_mu_;
  std::condition_variable gc_cv_;
  bool gc_wake_ = false;  // GUARDED_BY(gc_mu_)
  bool gc_stop_ = false;  // GUARDED_BY(gc_mu_)
  std::thread gc_thread_;
};

// rocksdb::Status -> Status (NoSpace, Corruption, NotFound, IOError).
Status FromRocks(const rocksdb::Status& s, std::string_view context);

}  // namespace prefixkv
