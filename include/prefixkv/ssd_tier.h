// SsdTier: the persistent block tier on an embedded RocksDB (DESIGN section 7).
//
// One RocksDB per data directory. Each block is two records keyed by its
// namespace and key (metadata with an XXH3-64 of the payload, and the payload,
// which RocksDB keeps in blob files); both go into one WriteBatch together with
// the per-owner counter deltas, so a crash never leaves a half-visible block or
// counters that disagree with the contents. Reads verify the checksum every
// time: a damaged block is counted, removed and reported as a miss, never
// served. Capacity is enforced in bytes by evicting chain leaves in persisted
// least-recently-used order, so no stored block loses its stored parent.
//
// The tier is also the hot tier's write-back target (an EvictionListener):
// OnEvict queues a dirty block for background writer threads; a full queue
// makes the caller write inline (backpressure); a dirty block is never dropped.
//
// Byte layout, durability modes and recovery: docs/ssd.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/clock.h"
#include "prefixkv/tier.h"

namespace prefixkv {

// What a write must survive before Put (or the writer) acknowledges it.
enum class SsdDurability {
  // No write-ahead log: payloads reach disk when a memtable is flushed and at
  // Close(). A kill -9 may lose the most recent blocks (never exposes a partial
  // or wrong one). Each payload byte is written about once: the fastest mode.
  kFlush,
  // Write-ahead log without fsync (default): survives kill -9, may lose the
  // last writes on power loss. Payload bytes are written twice (log + blob).
  kWal,
  // Write-ahead log synced before every acknowledgement: survives power loss.
  kSync,
};

// "flush", "wal", "sync"; and back (InvalidArgument for anything else).
std::string_view SsdDurabilityName(SsdDurability d);
StatusOr<SsdDurability> ParseSsdDurability(std::string_view name);

struct SsdTierOptions {
  // The data directory (created if missing). One tier per directory.
  std::string path;
  // Total payload bytes kept; beyond it the least recently used chain leaves
  // are evicted. A single payload larger than this is rejected with NoSpace.
  uint64_t capacity_bytes = 64ull << 30;
  // RocksDB compression for the metadata tables: "none", "lz4", "zstd",
  // "snappy". Payloads (already compressed by the codec) are never recompressed.
  std::string compression = "none";
  SsdDurability durability = SsdDurability::kWal;
  // Background threads writing queued (write-back) blocks.
  uint32_t writer_threads = 2;
  // Write-back queue bound, in blocks. When full, OnEvict writes inline.
  uint32_t queue_depth = 64;
  // Payloads of at least this many bytes go to RocksDB blob files; smaller
  // ones stay in the tables.
  uint64_t min_blob_bytes = 4096;
  // RocksDB memtable size; larger means fewer, bigger sequential flushes.
  uint64_t write_buffer_bytes = 64ull << 20;
  // O_DIRECT for flushes, compactions and payload reads (keeps the page cache
  // for the hot tier). Silently turned off on file systems without O_DIRECT.
  bool use_direct_io = true;
  // After an I/O error, a failed background write is retried this often.
  uint64_t retry_interval_ms = 1000;
  // Time source for access order and retry pacing. Never null.
  Clock* clock = Clock::System();
  // Receives one line per notable event (recovery, errors). Null: stderr.
  std::function<void(std::string_view line)> log;
  // Test seam: called before every write to the database; a non-OK result is
  // treated exactly like the database returning that error. Null: none.
  std::function<Status()> inject_write_error;
};

// What Open found. Also logged as one line.
struct SsdOpenReport {
  bool created = false;                  // the directory held no database
  bool previous_shutdown_clean = false;  // the last Close() completed
  std::string moved_aside_to;            // non-empty: an unopenable DB was renamed here
  uint64_t blocks = 0;                   // blocks indexed
  uint64_t bytes = 0;                    // their payload bytes
  uint64_t incompatible_records =
      0;  // records of an unknown layout version (kept, not served)
  uint64_t corrupt_records_removed = 0;  // metadata that failed its checksum
  std::vector<AuditFinding>
      counter_repairs;  // persisted counters that disagreed (repaired)
};

// Blocks and bytes of one namespace.
struct SsdNamespaceUsage {
  BlockKey namespace_id;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};

// Thread-safe: every method may be called concurrently, except that nothing may
// be called during or after Close() and the destructor.
class SsdTier final : public BlockTier, public EvictionListener {
 public:
  // Opens (or creates) the tier. A database that cannot be opened is moved
  // aside (renamed with a timestamp suffix) and the tier starts empty.
  static StatusOr<std::unique_ptr<SsdTier>> Open(const SsdTierOptions& options);
  ~SsdTier() override;  // Close(), ignoring its status

  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // BlockTier. The charge of a block is its payload size in bytes. Put is
  // synchronous (durable per options.durability on return); `dirty` is kept
  // with the block and handed to the eviction listener (dirty evictions count
  // as spills).
  std::string_view name() const override { return "ssd"; }
  Status Put(const BlockMeta& meta, SharedBytes payload, bool dirty) override;
  // Also finds blocks still in the write-back queue.
  StatusOr<SharedBytes> Get(const BlockKey& key) override;
  StatusOr<BlockMeta> Peek(const BlockKey& key) const override;
  bool Contains(const BlockKey& key) const override;
  Status Remove(const BlockKey& key) override;
  TierCounters Totals() const override;
  TierCounters OwnerCounters(OwnerId owner) const override;
  // Flushes the queue, then (with writes paused) recomputes entries and bytes
  // from the database, compares them with the live and persisted counters and
  // verifies every payload checksum (a damaged block is removed and counted).
  Status Audit(std::vector<AuditFinding>* findings) override;
  // Stored blocks whose parent is neither zero, their namespace root, nor
  // stored here. Eviction never creates one; an explicit Remove of a parent,
  // or a parent kept in another tier, can.
  std::vector<BlockKey> FindOrphans() const;
  // Stored blocks only (not those still queued).
  void ForEach(
      const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const override;
  // Receives blocks evicted for capacity (read back from disk and verified).
  // Waits for running calls to the previous listener: once it returns, the
  // old listener is never called again. Must not be called from a listener.
  void SetEvictionListener(EvictionListener* listener) override;

  // EvictionListener: queues the block for the background writers (a clean
  // block is ignored: it is already stored below). Blocks the caller when the
  // queue is full by writing inline; on a write error the block stays queued
  // and is retried.
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override;

  // Waits until every block queued before the call is stored. Returns the
  // error of the last failed attempt if the queue could not be emptied.
  Status Flush();
  // Flushes the queue and the memtables and closes the database. Blocks whose
  // writes keep failing are reported in the Status. Idempotent.
  Status Close();

  // Removes every block of a namespace (including records of unknown layout
  // versions); returns how many indexed blocks went.
  StatusOr<uint64_t> PurgeNamespace(const BlockKey& namespace_id);
  std::vector<SsdNamespaceUsage> Namespaces() const;

  // Compacts the whole database now (normally left to RocksDB's background
  // jobs), which also collects blob garbage of evicted and removed payloads.
  Status Compact();

  const SsdOpenReport& open_report() const;
  uint64_t queued_blocks() const;

  class Impl;  // storage/ssd_tier_impl.h

 private:
  explicit SsdTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixkv
