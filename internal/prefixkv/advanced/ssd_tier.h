// SsdTier: the persistent block tier (docs/ssd.md).
//
// One data directory per tier: an embedded RocksDB holds the metadata of each
// block (namespace, parent, owner, payload length and XXH3-64, access order,
// and where the payload is), per-owner counters and markers; the payload bytes
// go to append-only segment files that the tier writes and reads itself with
// O_DIRECT (`<path>/segments/`). A block's payload is written before its
// metadata commits, and the metadata and the counter deltas are one WriteBatch,
// so a crash can leave unreferenced payload bytes (reclaimed) but never a
// half-visible block, metadata pointing at unwritten bytes, or counters that
// disagree with the contents. Reads verify length and checksum every time: a
// damaged block is counted, removed and reported as a miss, never served.
// Capacity is enforced in bytes by evicting chain leaves in persisted
// least-recently-used order, so no stored block loses its stored parent.
// Segments whose payloads were mostly evicted or removed are compacted and
// unlinked in the background, which bounds disk use (docs/ssd.md "Space").
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
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixkv/advanced/kv_event_sink.h"
#include "prefixkv/advanced/tier.h"
#include "prefixkv/clock.h"
#include "prefixkv/file_system.h"
#include "prefixkv/memory_resource.h"

namespace prefixkv {
namespace ssd {
class TierImpl;  // storage/ssd/ssd_tier_impl.h
struct Access;   // storage/ssd/ssd_tier_impl.h: the module's own way to the TierImpl
}  // namespace ssd

struct SsdTierOptions {
  // The data directory (created if missing). One tier per directory.
  std::string path;
  // Total payload bytes kept; beyond it chain leaves are evicted (never a
  // block with a stored child). A single payload larger than this is rejected
  // with NoSpace.
  uint64_t capacity_bytes = 64ull << 30;
  // The order of the leaves: kLru and kLeafLru are the same here (least
  // recently used leaf first); kChain keeps the leaves of reused chains one
  // tier's worth of blocks longer (docs/eviction.md). Reuse counts live in
  // memory: after a restart every chain starts as never reused.
  EvictionPolicyKind policy = EvictionPolicyKind::kLeafLru;
  // RocksDB compression for the metadata tables: "none", "lz4", "zstd",
  // "snappy". Payloads (already compressed by the codec) are never recompressed.
  std::string compression = "none";
  SsdDurability durability = SsdDurability::kWal;
  // Background threads writing queued (write-back) blocks.
  uint32_t writer_threads = 2;
  // Write-back queue bound, in blocks. When full, OnEvict writes inline.
  uint32_t queue_depth = 64;
  // A segment file is sealed (and a new one started) before an append would
  // take it past this size. Smaller segments are reclaimed at a finer grain.
  uint64_t segment_bytes = 128ull << 20;
  // A sealed segment whose live payload bytes fall below this fraction of its
  // size is compacted (live payloads copied to an active segment, the file
  // unlinked); one with none left is unlinked. Disk use stays below about
  // capacity / fraction plus the active segments.
  double reclaim_live_fraction = 0.5;
  // RocksDB memtable size (metadata only).
  uint64_t write_buffer_bytes = 64ull << 20;
  // O_DIRECT for payload writes and reads (keeps the page cache for the hot
  // tier, and no CPU copy through it). Silently turned off on file systems
  // without O_DIRECT (tmpfs); then buffered I/O plus fdatasync where the
  // durability mode requires it.
  bool use_direct_io = true;
  // After an I/O error, a failed background write is retried this often.
  uint64_t retry_interval_ms = 1000;
  // When the metadata database cannot be opened or read (a damaged log,
  // table, MANIFEST or CURRENT), rebuild it from the segment files' own
  // records at Open (logged; the damaged files are kept in
  // `<path>/metadata.broken-<nanoseconds>/`). false: Open returns the error
  // and changes nothing (`prefixkv audit`). docs/ssd.md "Metadata repair".
  bool repair_damaged_metadata = true;
  // Writes nothing in the directory (`prefixkv inspect`, `explain-miss`, a
  // clean `audit`): the metadata database is opened read-only (RocksDB's own
  // read-only mode: no new log, MANIFEST or OPTIONS file, no flush), the
  // removal journal is read, not rewritten, no segment is deleted or
  // probed, and no counter, access order, marker or reserve is written; a
  // write (Put, Remove, a damaged block's drop) answers NotSupported. The
  // directory's LOCK is held shared meanwhile, so a server cannot open it
  // under the reader (it is told who holds it). Implies
  // repair_damaged_metadata = false. docs/ssd.md "Read-only opens".
  bool read_only = false;
  // A writing open that finds at least 9 in 10 of the segment files the
  // metadata references missing, and no removal journal, refuses with Unavailable ("N
  // of N segment files ... are missing: is the drive mounted?") and changes nothing: the
  // segments vanished as a whole (an SSD not mounted, a wrong path), and the
  // open would drop every block at its first read and write a new journal
  // and new segments where the real ones come back. true: open anyway, each
  // missing segment's blocks reading as corrupt (`prefixkv repair
  // --accept-missing-segments`). docs/ssd.md "Segments that vanished as a whole".
  bool accept_missing_segments = false;
  // How many block removals the metadata database remembers (a ring of
  // records written in each removal's own metadata batch: key, namespace,
  // evicted / removed / corrupt; docs/ssd.md "Removal history"), so
  // `prefixkv explain-miss` can tell an evicted block from one never stored.
  // Blocks of the zero namespace (raw values) are not recorded. 0: none.
  uint32_t removal_history_entries = 16384;
  // Disk space held back for the metadata database (a file `space-reserve`
  // in the data directory, written at open). When a write finds the disk
  // full, the file is deleted: the metadata database then has this much
  // room for removals, flushes and its own recovery, and payload writes
  // answer NoSpace (without touching the disk) until the file can be written
  // again (tried every retry_interval_ms). 0: no reserve. docs/ssd.md
  // "Full disk".
  uint64_t reserve_bytes = 8ull << 20;
  // Time source for access order and retry pacing (the waits between retries
  // run on it: Clock::WaitFor). Never null.
  Clock* clock = Clock::System();
  // Every segment file read and write, fsync and directory operation (create,
  // list, rename, unlink) goes through it. Never null; must outlive the tier.
  // With the default, the metadata database uses RocksDB's own file system;
  // with any other, RocksDB's writes, syncs, renames and deletes go through
  // this one too (its reads stay RocksDB's), so a fault-injecting file system
  // (fault_injection_file_system.h) sees the whole tier. docs/ssd.md
  // "FileSystem seam".
  FileSystem* file_system = FileSystem::Default();
  // Receives one line per notable event (recovery, errors). Null: stderr.
  std::function<void(std::string_view line)> log;
  // How a metadata rebuild finds a restored block's parent, which segment
  // extents do not keep: given its key, namespace and intact payload, the
  // parent (a zero key: none). Unset, every rebuilt block is a chain root.
  // The Engine reads it from the block record's header.
  std::function<BlockKey(const BlockKey& key, const BlockKey& namespace_id,
                         std::string_view payload)>
      rebuilt_parent;
  // Receives the tier's KV events (kv_event_sink.h; not owned; null: none):
  // kStored when a direct Put commits, kMoved (from the hot tier) when an
  // evicted dirty block enters the write-back queue, kRemoved on Remove,
  // eviction and a corrupt drop. Blocks found at Open are not reported.
  KvEventSink* events = nullptr;
  // Where a read's payload buffer comes from (null: the process heap). The
  // Engine passes its memory resource, so a read lands in memory that is
  // already faulted in and registered (docs/hot_tier.md, "Memory"), and a
  // promotion keeps that buffer instead of copying it in. A read the
  // resource has no room for falls back to the heap.
  std::shared_ptr<MemoryResource> read_memory;
  // Read-ahead (docs/ssd.md "Read-ahead"): a restore of a chain asks for the
  // blocks after the one it is checking (TierStack::ReadAhead), and this
  // many threads read them meanwhile, up to read_ahead_bytes of payload
  // ahead (one block of any size always). A read made ahead counts nothing;
  // Get serves it only if the block is still at the same extent with the
  // same checksum. 0 threads or 0 bytes: off. The bytes hold four 32 MiB
  // blocks (256-token Llama-3-8B blocks, each with its record header)
  // ahead, so each thread can have one read in flight and one done while
  // the restore takes the next: with 64 MiB only one 32 MiB block fitted
  // ahead, and a cold 2 GiB restore ran at 0.64-0.70x the raw read against
  // 0.77-0.79x (docs/benchmarks.md, "scale").
  uint32_t read_ahead_threads = 2;
  uint64_t read_ahead_bytes = 160ull << 20;
};

// Reads made ahead since Open (SsdTierOptions::read_ahead_threads).
struct SsdReadAheadStats {
  uint64_t started = 0;        // reads queued
  uint64_t served = 0;         // taken by a Get and served
  uint64_t stale = 0;          // taken, but the block changed meanwhile or the
                               // read failed: the Get read it again
  uint64_t unused = 0;         // forgotten before a Get took them (a restore
                               // that stopped early)
  uint64_t failed = 0;         // reads that failed (a damaged extent, an I/O
                               // error): the Get reads and handles it itself
  uint64_t bytes_read = 0;     // payload bytes read ahead (successful reads)
  uint64_t pending_bytes = 0;  // now held: queued, being read, or read and not taken
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
  // Records failing their own checksum that were dropped: only when the
  // segments cannot prove every block (no usable journal, or segments from
  // before it); otherwise such a record is metadata damage, rebuilt from
  // the segments (metadata_damage; docs/ssd.md "Open and recovery").
  uint64_t corrupt_records_removed = 0;
  uint64_t segments = 0;                       // segment files in use
  uint64_t unreferenced_segments_deleted = 0;  // crash garbage removed
  // Unreferenced segments left in place because records of an unknown
  // (newer) layout exist, which may reference them.
  uint64_t unreferenced_segments_kept = 0;
  uint64_t missing_segments = 0;  // referenced but absent (their blocks read as corrupt)
  std::vector<AuditFinding>
      counter_repairs;  // persisted counters that disagreed (repaired)
  // The metadata database was damaged and rebuilt from the segment files
  // (docs/ssd.md "Metadata repair"): why, where the damaged files went, and
  // what the segments proved.
  std::string metadata_damage;           // non-empty: the database was rebuilt
  std::string damaged_metadata_kept;     // directory holding the damaged files
  uint64_t rebuilt_blocks = 0;           // restored from segment records
  uint64_t rebuild_unprovable = 0;       // intact records not restored (see docs)
  uint64_t rebuild_damaged_extents = 0;  // records whose payload failed its checksum
  // The metadata was intact but older than the segments and the removal
  // journal (a lost or deleted log): why, and what rolling it forward did.
  std::string metadata_rollback;         // non-empty: the database was rolled forward
  uint64_t rolled_forward_restored = 0;  // committed blocks it had lost, restored
  uint64_t rolled_forward_removed = 0;   // journaled removals it had lost, applied
  uint64_t rollforward_unprovable = 0;   // lost extents not provably current (dropped)
  // The removal journal was missing or damaged (a later rebuild could prove
  // nothing with it): what was wrong, and how many removals a repairing open
  // regenerated from the intact metadata (0 when it only reported).
  std::string journal_problem;
  uint64_t journal_regenerated_removals = 0;
  bool journal_regenerated = false;
  // What a repairing open journaled so that a later rebuild from the
  // segments (a second fault) restores exactly the blocks this metadata
  // holds (docs/ssd.md "The journal agrees with the metadata at every
  // open"): extents at the end of a segment that nothing references or
  // names (a store's payload written, its commit never made, and the record
  // naming it dead lost to a power cut), journaled dead; and live blocks the
  // journal would exclude (a removal whose commit never came, or a commit
  // record lost to a power cut), given a commit record.
  uint64_t journal_garbage_named = 0;
  uint64_t journal_live_recommitted = 0;
};

// Blocks and bytes of one namespace.
struct SsdNamespaceUsage {
  BlockKey namespace_id;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};

// Why a block left the SSD tier (SsdTier::Removals).
enum class SsdRemovalReason : uint8_t {
  kEvicted = 1,  // capacity eviction (handed to the listener, if any)
  kRemoved = 2,  // an explicit Remove (a purge, a repair, a rewrite's hot copy)
  kCorrupt = 3,  // its payload failed verification and it was dropped
};
std::string_view SsdRemovalReasonName(SsdRemovalReason reason);  // "evicted", ...

// One record of the removal history.
struct SsdRemoval {
  BlockKey key;
  BlockKey namespace_id;
  SsdRemovalReason reason = SsdRemovalReason::kRemoved;
  uint64_t sequence = 0;  // larger: removed later (per data directory)
};

// Disk use of the payload segments.
struct SsdSpaceUsage {
  uint64_t segments = 0;         // files
  uint64_t file_bytes = 0;       // their total size
  uint64_t live_bytes = 0;       // extents referenced by stored blocks (payload
                                 // rounded up to 4096 with its 64-byte footer)
  uint64_t active_segments = 0;  // still being appended to
  // Bytes this process wrote to segment files since Open: every extent
  // (payload rounded up with its footer) of block writes and of compaction
  // moves, including writes that failed. What wears the drive, apart from
  // the metadata database's own writes (not counted).
  uint64_t bytes_written = 0;
};

// The write-back queue now (docs/ssd.md "Write-back failures").
struct SsdWriteBackState {
  uint64_t queued_blocks = 0;  // waiting to be written, or being written
  // Of those, blocks whose last write attempt failed. Nonzero: write-back is
  // failing (WriteBackStatus is its error) until they are written; another
  // block's successful write meanwhile does not clear it.
  uint64_t failed_blocks = 0;
  // Failed write attempts since Open: a writer's batch, or the inline write
  // of a block evicted while the queue was full.
  uint64_t failed_attempts = 0;
};

// Thread-safe: every method may be called concurrently, except that nothing may
// be called during or after Close() and the destructor.
class SsdTier final : public BlockTier, public EvictionListener {
 public:
  // Opens (or creates) the tier. A database that cannot be opened is moved
  // aside (renamed with a timestamp suffix) and the tier starts empty.
  static StatusOr<std::unique_ptr<SsdTier>> Open(const SsdTierOptions& options);
  // Whether `path`/segments holds what a rebuild of unreadable metadata
  // needs: a segment file with blocks, or a removal journal. Without either
  // (an empty mount point: the drive not mounted) a writing open refuses to
  // rebuild and changes nothing, unless accept_missing_segments.
  static bool CanRebuildMetadata(const std::string& path,
                                 FileSystem* fs = FileSystem::Default());
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
  // Reads and verifies a block exactly like Get (a damaged one is removed and
  // counted as a corruption and a miss), but a sound or absent block counts no
  // hit or miss and keeps its access order: what audits use, so checking every
  // block does not reorder eviction.
  StatusOr<SharedBytes> GetForAudit(const BlockKey& key);
  // GetForAudit (BlockTier's quiet read).
  StatusOr<SharedBytes> PeekPayload(const BlockKey& key) override {
    return GetForAudit(key);
  }
  // Reads and verifies a block like GetForAudit, but a damaged one is left
  // in place (Corruption; nothing counted): for a reader that needs the bytes
  // only if they are sound, and must leave a damaged block to the reads of
  // its own key (Engine::Open's look at the value records).
  StatusOr<SharedBytes> PeekIntact(const BlockKey& key);
  StatusOr<BlockMeta> Peek(const BlockKey& key) const override;
  bool Contains(const BlockKey& key) const override;
  Status Remove(const BlockKey& key) override;
  TierCounters Totals() const override;
  // The same, and OwnerCounters(o) of every o below `owners` into `counters`
  // (indexed by id), read at one moment: they never add up to more than the
  // totals (Engine::Stats: owners read one by one before the totals added up
  // to more than them once blocks left meanwhile).
  TierCounters Totals(OwnerId owners, std::vector<TierCounters>* counters) const;
  // Of this run's `owner` (as every owner id the tier takes and gives): its
  // blocks and counters, under whichever id it was named by (BindOwner).
  TierCounters OwnerCounters(OwnerId owner) const override;
  // Owner names (docs/ssd.md "Owner names"). Names this run's `owner` (an
  // id of the caller's, such as SharedHotBudget's, handed out per run) by
  // `name`, stable across runs: the tier stores the owner's blocks and
  // counters under an id of that name's (kept in the metadata database), so
  // after a restart that gives the owner another id they are still its own.
  // `namespace_id`: the namespace whose blocks the owner writes (nullopt:
  // none), by which a directory written before names were kept is
  // attributed: the earlier run's id whose blocks are all of that namespace
  // becomes this name's. Call before any block of `owner` is written; an
  // owner never named is stored as its own id (a tier used on its own).
  // InvalidArgument when `owner` or `name` is bound already (to another);
  // the error of writing a new name's record (bound for this run anyway).
  Status BindOwner(OwnerId owner, const std::string& name,
                   std::optional<BlockKey> namespace_id);
  // Flushes the queue, then (with writes paused) recomputes entries and bytes
  // from the database, compares them with the live and persisted counters and
  // verifies every payload checksum (a damaged block is removed and counted).
  Status Audit(std::vector<AuditFinding>* findings) override;
  // Stored blocks whose parent is neither zero, their namespace root, nor
  // stored here. Eviction never creates one; an explicit Remove of a parent,
  // or a parent kept in another tier, can.
  std::vector<BlockKey> FindOrphans() const;
  // A child of `key` is stored, being committed, queued or being written.
  bool HasStoredChildren(const BlockKey& key) const override;
  // Stored blocks only (not those still queued).
  void ForEach(
      const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const override;
  // Stored blocks and those still queued for write-back (or being written),
  // each once: what a whole-space walk needs, since a block evicted to the
  // queue after a Flush is in no index yet.
  void ForEachIncludingQueued(
      const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const;
  // Receives blocks evicted for capacity (read back from disk and verified).
  // Waits for running calls to the previous listener: once it returns, the
  // old listener is never called again. Must not be called from a listener.
  void SetEvictionListener(EvictionListener* listener) override;

  // EvictionListener: queues the block for the background writers (a clean
  // block is ignored: it is already stored below). Blocks the caller when the
  // queue is full by writing inline; on a write error the block stays queued
  // and is retried.
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override;
  // OK, or the latest write-back error while blocks whose last write attempt
  // failed are still queued (they live in RAM only). A full queue whose
  // inline write fails counts at once.
  Status WriteBackStatus() const override;
  SsdWriteBackState WriteBackState() const;

  // Waits until every block queued before the call is stored. Returns the
  // error of the last failed attempt if the queue could not be emptied.
  Status Flush();
  // Flushes the queue and the memtables and closes the database. Blocks whose
  // writes keep failing are reported in the Status. Idempotent. The tier is
  // marked as stopped cleanly (open_report().previous_shutdown_clean) only
  // when Close put everything away and no NoteBlocksLostAtStop came before.
  Status Close();
  // The caller stops with blocks it could not put away (an engine whose
  // write-back of RAM failed at Close): the next open reports the stop as
  // not clean, though this tier's own Close succeeds.
  void NoteBlocksLostAtStop();
  // The caller's last writes before Close follow (an engine's write-back of
  // RAM): on a full disk every payload write from now on tries to take the
  // space reserve back at once, not once per retry_interval_ms, since nothing
  // retries them later (Close does the same for the queued blocks).
  void BeginStop();

  // Removes every block of a namespace (including records of unknown layout
  // versions); returns how many indexed blocks went.
  StatusOr<uint64_t> PurgeNamespace(const BlockKey& namespace_id);
  std::vector<SsdNamespaceUsage> Namespaces() const;
  // Namespace manifests (docs/ssd.md "Namespace manifests"): opaque bytes
  // kept per namespace root in the metadata database, synced per durability
  // like a block's metadata. Put replaces. A purge keeps the manifest; a
  // metadata rebuild from the segments loses it (the next registration of
  // the model writes it again).
  Status PutManifest(const BlockKey& namespace_id, std::string_view manifest);
  // Every stored manifest, by root (ascending).
  StatusOr<std::vector<std::pair<BlockKey, std::string>>> Manifests() const;
  // A named flag in the metadata database: a one-time task of the tier's
  // owner that is done (the engine's sweep of older-scheme values). Set
  // once, synced per durability; a metadata rebuild from the segments loses
  // it (the task is then done again). False when never set.
  StatusOr<bool> HasFlag(std::string_view name) const;
  Status SetFlag(std::string_view name);
  // The removal history (SsdTierOptions::removal_history_entries), oldest
  // first. A block stored again after its removal keeps its record.
  StatusOr<std::vector<SsdRemoval>> Removals() const;
  uint32_t removal_history_entries() const;  // the ring's size in effect

  // Reclaims segment space now (normally a background thread does it): every
  // sealed segment below reclaim_live_fraction is compacted, every empty one
  // unlinked; then compacts the metadata database.
  Status Compact();
  SsdSpaceUsage SpaceUsage() const;

  const SsdOpenReport& open_report() const;
  uint64_t queued_blocks() const;

  // Read-ahead (BlockTier): starts reading `key` in the background for a Get
  // that will follow. kNone: read-ahead off, or the block absent or still in
  // the write-back queue; kFull: read_ahead_bytes are taken.
  ReadAheadResult ReadAhead(const BlockKey& key) override;
  // Forgets a read made ahead that no Get will take.
  void CancelReadAhead(const BlockKey& key) override;
  SsdReadAheadStats ReadAheadStats() const;

 private:
  friend struct ssd::Access;

  explicit SsdTier(std::unique_ptr<ssd::TierImpl> impl);
  std::unique_ptr<ssd::TierImpl> impl_;
};

}  // namespace prefixkv
