// SsdTier::Impl: the SSD tier's state, shared by ssd_tier.cc (read/write
// paths), ssd_eviction.cc (capacity), ssd_recovery.cc (Open/Close) and
// ssd_audit.cc. Private to storage/.
//
// Locking: an operation on block K holds pause_ shared and stripe(K) across
// its database write, so writes of one key are serialized while different
// keys proceed in parallel (RocksDB group-commits them). Audit holds pause_
// exclusively. mu_ guards the in-memory index and the not-yet-persisted event
// counters; it is never held across I/O. Lock order: pause_, stripe, mu_. The write-back
// queue has its own lock and calls Store() without holding it.
#pragma once

#include <rocksdb/db.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "prefixkv/ssd_tier.h"
#include "storage/ssd_index.h"
#include "storage/ssd_writer.h"

namespace prefixkv {

class SsdTier::Impl {
 public:
  explicit Impl(const SsdTierOptions& options);
  ~Impl();

  // ssd_recovery.cc
  Status Open();
  Status Close();

  // ssd_tier.cc
  Status Put(const BlockMeta& meta, const SharedBytes& payload, bool dirty);
  // Stores blocks as one atomic write (no queue interplay, no capacity
  // enforcement). REQUIRES: distinct keys, at least one block.
  Status Store(const std::vector<ssd::WriteBackItem>& items, bool dirty);
  StatusOr<SharedBytes> Get(const BlockKey& key);
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

  Status Flush() { return queue_->Flush(); }
  Status Compact();
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
  void NoteWriteResult(const Status& s);
  void Log(const std::string& line) const;

  // ssd_eviction.cc
  Status Evict(const BlockKey& key);

  static constexpr size_t kStripes = 64;

  const SsdTierOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions write_options_;    // per durability
  rocksdb::WriteOptions relaxed_options_;  // never synced
  bool direct_io_ = false;                 // in effect (the fs may refuse it)
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

  std::atomic<bool> failing_{false};  // the last write failed (logged once)
  std::atomic<uint64_t> last_resume_nanos_{0};
  std::unique_ptr<ssd::WriteBackQueue> queue_;
  bool closed_ = false;
};

// rocksdb::Status -> Status (NoSpace, Corruption, NotFound, IOError).
Status FromRocks(const rocksdb::Status& s, std::string_view context);

}  // namespace prefixkv
