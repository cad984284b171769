// Engine: prefixkv as one object. Open a data directory, register each model,
// then Match / Restore / Store token prefixes; Close when done.
//
//   auto engine = Engine::Open({.data_dir = "/var/cache/prefixkv"}).value();
//   Namespace ns = engine->RegisterModel(spec).value();
//   MatchResult m = engine->Match(ns, prompt).value();      // hot, then SSD
//   RestoreResult r = engine->Restore(m).value();           // per-layer caches
//   // or engine->RestoreInto(m, destinations): into memory the caller owns
//   ... prefill prompt[r.restored_tokens:], decode ...
//   engine->Store(ns, all_tokens, layers);                  // new blocks only
//   engine->Close();                                        // or let it go
//
// What it owns and wires (docs/architecture.md draws it): one RAM budget shared
// by every registered model (each model is an owner with its own hot-tier view
// and counters, all in one eviction order), one SSD tier in `data_dir` that hot
// blocks spill to (write-back) and that survives restarts, one tier stack per
// model joining the two, and the prefix cache over them (chain keys, tips,
// supersede-on-extend lineage). Memory kept outside the blocks, such as live
// sessions' KV caches, joins the same budget through OpenMemoryCharge. A
// small key-value space (GetValue/PutValue) shares the same tiers for callers
// that store opaque values by name (the RESP server's GET/SET).
//
// Lifetime: Close() flushes every dirty hot block to SSD, releases the hot
// tier (budget, views, stacks, the prefix cache, in that order, top down) and
// closes the SSD tier (its write-back queue drained, its metadata flushed). The
// destructor closes an engine the caller did not close, ignoring the Status.
// After Close, every call returns InvalidArgument "engine is closed".
//
// Thread-safe: every method may be called concurrently, except Close() (and
// the destructor), which must not run while another call is in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/block_key.h"
#include "prefixkv/bytes.h"
#include "prefixkv/clock.h"
#include "prefixkv/codec.h"
#include "prefixkv/file_system.h"
#include "prefixkv/kv_events.h"
#include "prefixkv/memory_resource.h"
#include "prefixkv/namespace_spec.h"
#include "prefixkv/prefix_types.h"
#include "prefixkv/status.h"
#include "prefixkv/tensor.h"
#include "prefixkv/tier_types.h"

namespace prefixkv {

// MemoryCharge: memory held outside the cache's blocks (a session manager's
// live KV caches) charged to the engine's one RAM budget, so that cached
// blocks and that memory share a single byte limit.
//
//   std::shared_ptr<MemoryCharge> sessions =
//       engine->OpenMemoryCharge("sessions").value();
//   SessionManagerOptions config{.memory = sessions, ...};  // session.h
//
// A charge is an owner of the budget like a model (Engine::Stats lists it
// under its name, its bytes in `hot.bytes` and `hot.external_bytes`), but its
// bytes are never evicted: to make room for a charge the budget evicts
// unpinned cache blocks (dirty ones are written back to SSD first, so none is
// lost), and when even that is not enough the charge fails and the holder must
// free memory of its own (the session manager evicts its least recently used
// sessions). docs/hot_tier.md, "External charges".

// Thread-safe: every method may be called concurrently.
class MemoryCharge {
 public:
  virtual ~MemoryCharge() = default;

  // Charges `bytes` more, evicting cache blocks to make room when needed.
  // OK once charged. NoSpace when even evicting every evictable block would
  // not make room: nothing changes, and `*shortfall_bytes` (if not null) is
  // set to the bytes still missing after such an eviction, that is how much
  // must be uncharged first; UINT64_MAX when `bytes` alone exceeds
  // limit_bytes(). May block while evicted blocks are handed to the SSD
  // tier's write-back queue (backpressure). REQUIRES: the caller holds no
  // lock that an engine store or an SSD write could need.
  virtual Status Charge(uint64_t bytes, uint64_t* shortfall_bytes) = 0;
  // Returns `bytes` of this handle's charges. Never blocks or evicts.
  // InvalidArgument, changing nothing, for more than charged_bytes().
  virtual Status Uncharge(uint64_t bytes) = 0;

  // What this handle holds now.
  virtual uint64_t charged_bytes() const = 0;
  // The most this owner may ever be charged: the budget's capacity, or its
  // quota when smaller. Blocks and other owners' charges may leave less.
  virtual uint64_t limit_bytes() const = 0;
  // The owner's name in the budget (EngineStats::owners).
  virtual const std::string& name() const = 0;
};

namespace internal {
class EngineImpl;     // src/engine/engine_impl.h
struct EngineAccess;  // the in-tree tools' and tests' door to the tiers
}  // namespace internal

struct EngineOptions {
  // Directory of the SSD tier (one engine per directory). Empty: no SSD tier,
  // blocks live in RAM only and nothing survives Close().
  std::string data_dir;
  // Create `data_dir` when it does not exist (else Open fails with NotFound).
  bool create_if_missing = true;
  // The RAM budget shared by every registered model and the key-value space
  // (charged bytes: payload plus a fixed per-entry overhead, see
  // docs/hot_tier.md). 0: no hot tier, every block goes straight to SSD
  // (requires data_dir).
  uint64_t hot_capacity_bytes = uint64_t{1} << 30;
  // Which hot blocks leave first when the budget is full.
  EvictionPolicyKind hot_policy = EvictionPolicyKind::kLru;
  // Where the hot tier's blocks, the records Store encodes and the buffers a
  // restore plan stages live (memory_resource.h). The budget still charges
  // each block its exact payload bytes, not its share of a region. Null: an
  // arena (NewArenaMemoryResource) of pre-faulted regions growing from
  // 2 MiB to min(hot_capacity_bytes / 8, 256 MiB) each, keeping empty
  // regions mapped up to hot_capacity_bytes plus one region, and mapping the
  // next region ahead on a thread of its own while it grows (map_ahead,
  // memory_resource.h). It is held by
  // every block and view of its memory, so it outlives Close() while any is.
  std::shared_ptr<MemoryResource> memory_resource;
  // The default arena's regions on transparent huge pages (MADV_HUGEPAGE;
  // nothing changes where the kernel's THP setting is "never"). An O_DIRECT
  // read pins each page of its buffer, so SSD reads into 2 MiB pages pin 512
  // times fewer (1.7x faster reads into the arena on the VM of
  // docs/benchmarks.md "scale"), and a device registers fewer, larger pages.
  bool arena_huge_pages = true;
  // Bytes of regions the default arena maps and faults in at Open (at most
  // hot_capacity_bytes plus one region are kept): the first stores then
  // write to memory already faulted in. Default 0: regions are mapped when
  // first needed (each faulted in at once) and kept, so only the first fill
  // of the hot tier pays for fresh pages.
  uint64_t arena_prefault_bytes = 0;
  // Told of every region of the memory resource, once when it is mapped (or
  // at Open, for regions mapped before) and once before it is unmapped: the
  // place to register the memory for DMA (cudaHostRegister and
  // cudaHostUnregister). Every range of a RestorePlan lies in such a region.
  // The unmapping call may come after Close(), when the last view of a
  // region goes. See RegionCallbacks for what they may do.
  RegionCallbacks on_region;
  // Payload bytes the SSD tier keeps; beyond it chain leaves are evicted, in
  // the order of ssd_policy: leaf-first LRU (kLru and kLeafLru, the default)
  // or kChain (docs/eviction.md).
  uint64_t ssd_capacity_bytes = uint64_t{64} << 30;
  EvictionPolicyKind ssd_policy = EvictionPolicyKind::kLeafLru;
  // What an SSD write survives before it is acknowledged (tier_types.h).
  SsdDurability durability = SsdDurability::kWal;
  // Store() and PutValue() write the SSD tier before returning (a kill -9 then
  // loses nothing acknowledged, with wal or sync durability); the hot copy is
  // clean. Default off: write-back, blocks reach SSD when the hot tier evicts
  // them or at Flush()/Close().
  bool write_through = false;
  // Copy a block found only on SSD into the hot tier when a restore reads it.
  bool promote_on_ssd_hit = true;
  // SSD admission (docs/eviction.md, "SSD admission"): which blocks the hot
  // tier evicts are written to the SSD tier. kAll (default): every one.
  // kBudget: while ssd_write_budget_bytes_per_day allows (a token bucket on
  // `clock` holding ssd_write_budget_burst_seconds of it); beyond it prefix
  // blocks with no child on SSD are skipped and counted, never blocked. Raw
  // values (PutValue, SET) are always written. kGhost: reject first, such a
  // block is skipped at its first eviction and its key remembered; written
  // at its next eviction (best under a leaf-first hot_policy). Write-through
  // Puts, blocks too large for RAM and Flush() are not subject to it.
  SsdAdmissionKind ssd_admission = SsdAdmissionKind::kAll;
  uint64_t ssd_write_budget_bytes_per_day = 0;  // kBudget only, then > 0
  uint64_t ssd_write_budget_burst_seconds = 60;
  // The drive's rated endurance, for EngineStats' projected lifetime
  // (docs/ssd.md, "Wear"): total bytes written (a TBW rating times 10^12),
  // or drive writes per day times ssd_drive_capacity_bytes (0: use
  // ssd_capacity_bytes) times ssd_warranty_years. At most one of the two;
  // neither: unknown, no projection.
  uint64_t ssd_endurance_bytes = 0;
  double ssd_drive_writes_per_day = 0;
  uint64_t ssd_drive_capacity_bytes = 0;
  uint32_t ssd_warranty_years = 5;
  // The window the SSD write rate is measured over, in seconds of `clock`.
  uint32_t ssd_wear_window_seconds = 3600;
  // How blocks are encoded (compression) and the bounds for decoding them.
  EncodeOptions encode;
  DecodeLimits decode_limits;
  // Time source for the tiers (access order, retries). Null: Clock::System().
  Clock* clock = nullptr;
  // Every file operation of the SSD tier (segments, fsyncs, directories; its
  // RocksDB metadata too) goes through it (file_system.h; not owned, must
  // outlive the engine). Null: FileSystem::Default(), the POSIX one.
  FileSystem* file_system = nullptr;
  // Receives every KV event (kv_events.h: a block stored in, removed from or
  // moved between the local tiers), synchronously and possibly under a tier's
  // lock: it must be quick and must not call into the engine. Null: none.
  KvEventCallback on_kv_event;
  // The KV event log (docs/events.md): every event numbered (KvEvent::seq,
  // monotonic across restarts), kept within the retention below for
  // Engine::Events / EventSnapshot and the server's XREAD, in
  // data_dir/events (in RAM without a data_dir). Off: events reach
  // on_kv_event unnumbered and nothing is kept.
  bool event_log = true;
  // The log keeps at least the events of the last event_retention_ms and at
  // most about event_retention_bytes of them (89 bytes each; dropped a
  // segment of an eighth of it at a time). At least 8 KiB and 1 ms. Defaults:
  // 64 MiB (about 720,000 events) and 24 hours. The retained events are also
  // held in RAM, with the log's key set (about 100 bytes per block held).
  uint64_t event_retention_bytes = uint64_t{64} << 20;
  uint64_t event_retention_ms = uint64_t{24} * 3600 * 1000;
  // Receives one line per notable event (SSD recovery, I/O errors). Null:
  // stderr.
  std::function<void(std::string_view line)> log;
  // The remote tier shared by every node (docs/remote.md): a Redis Cluster,
  // "redis://host:port[,host:port...]". Empty: none. Open succeeds when the
  // cluster is down (the tier reports unavailable and its blocks are misses).
  std::string remote;
  RemoteWriteMode remote_write = RemoteWriteMode::kOnSpill;
  // TTL and per-namespace byte limit of the blocks written (ModelOptions may
  // override them per model).
  RemoteNamespaceLimits remote_limits;
  // Bound of one request batch to one cluster node.
  uint32_t remote_timeout_ms = 5;
  // The capacity advisor (docs/eviction.md, "The capacity advisor"): the
  // sampled blocks it remembers at most (about 100 bytes each), whatever the
  // traffic; 0 turns it off; at most 2^24 (Open: InvalidArgument). Default
  // 32768 (about 3 MB).
  uint32_t advisor_max_keys = 32768;
  // The advisor's decay: every this many seconds of `clock` time the traffic
  // so far counts half, so the estimate follows a shift in the traffic. 0:
  // cumulative since the engine opened. Default one hour.
  uint64_t advisor_half_life_seconds = 3600;
};

// How one model's blocks are kept.
struct ModelOptions {
  // Store the tokens after the last full block as one marked partial block,
  // which carries the sliding-window/recurrent state at the exact end of a
  // store. Recommended for models with such layers (docs/prefix_cache.md).
  bool store_partial_tail = false;
  // Most hot bytes this model may hold (nullopt: only the shared budget
  // limits it).
  std::optional<uint64_t> hot_quota_bytes;
  // This model's remote TTL and byte limit (nullopt: EngineOptions's).
  std::optional<RemoteNamespaceLimits> remote_limits;
};

// How long one model's restores took: its Engine::Restore calls (by the
// engine's Clock, every call that reached the prefix cache, errors included)
// and the served restores a RESP server reports (RecordServedRestore).
using RestoreLatencyStats = LatencyHistogram;

// One owner of the shared hot budget: a model, the key-value space, or a
// memory charge (OpenMemoryCharge).
struct EngineOwnerStats {
  // The model name (spec.model), "values" for the key-value space, or the
  // memory charge's name.
  std::string name;
  TierCounters hot;  // this owner's share of the budget (a charge's in external_bytes)
  std::optional<uint64_t> hot_quota_bytes;
  // This owner's blocks on the SSD tier (zero without one), kept under a
  // name stable across runs (a model's namespace root, docs/ssd.md "Owner
  // names"), so they stay its own whatever order a run registers owners in.
  // Blocks of an earlier run's owner that this run has not registered are
  // only in EngineStats::ssd.
  TierCounters ssd;
  // Models only: Restore latencies since the engine opened.
  std::optional<RestoreLatencyStats> restore_latency;
  // Models only: tokens matched and restored since the engine opened.
  std::optional<PrefixTokenCounters> prefix_tokens;
};

// Every counter the engine's tiers keep. hot.bytes is the whole budget's
// charge, blocks and memory charges (hot.external_bytes: live sessions' KV)
// alike; it never exceeds hot_capacity_bytes and equals the sum of the owners.
struct EngineStats {
  uint64_t hot_capacity_bytes = 0;
  TierCounters hot;                      // all owners
  std::vector<EngineOwnerStats> owners;  // in registration order
  uint64_t dirty_blocks = 0;             // hot blocks not yet on SSD
  // The regions the engine's memory resource has mapped (hot blocks, SSD
  // reads, restore plans live there), in bytes and in number: next to
  // hot.bytes, the bytes the budget charges, what the budget costs in RAM
  // (docs/hot_tier.md, "Memory").
  uint64_t memory_mapped_bytes = 0;
  uint64_t memory_regions = 0;
  bool has_ssd = false;
  uint64_t ssd_capacity_bytes = 0;
  TierCounters ssd;
  uint64_t ssd_queued_blocks = 0;  // write-back queue depth
  // Queued blocks whose last write attempt failed: nonzero while the SSD
  // tier's write-back fails, and write-back Puts (SETs) are then refused.
  uint64_t ssd_write_back_failed_blocks = 0;
  uint64_t ssd_write_back_failures = 0;  // failed write-back attempts since open
  // Reads made ahead of restores since open (docs/ssd.md "Read-ahead"):
  // started; served by the Get that took them; stale (the block changed
  // meanwhile, or the read failed: the Get read it again); unused (a restore
  // stopped before it needed them); and the payload bytes they read, so disk
  // reads that no hit accounts for are visible.
  uint64_t ssd_read_ahead_reads = 0;
  uint64_t ssd_read_ahead_served = 0;
  uint64_t ssd_read_ahead_stale = 0;
  uint64_t ssd_read_ahead_unused = 0;
  uint64_t ssd_read_ahead_bytes = 0;
  // Wear (docs/ssd.md, "Wear"): segment bytes written since open (block
  // payloads as stored, padding, footers and compaction moves; the metadata
  // database's writes are not counted), their rate per day over the last
  // ssd_wear_window_seconds (since open while younger; sampled at each
  // Stats()), the rated endurance, and the days until it is written at that
  // rate (0: rate or endurance unknown).
  uint64_t ssd_bytes_written = 0;
  double ssd_write_bytes_per_day = 0;
  uint64_t ssd_endurance_bytes = 0;
  double ssd_projected_lifetime_days = 0;
  // SSD admission (EngineOptions::ssd_admission) and what it decided.
  SsdAdmissionKind ssd_admission = SsdAdmissionKind::kAll;
  uint64_t ssd_write_budget_bytes_per_day = 0;
  SsdAdmissionCounters ssd_admission_counters;
  bool has_remote = false;
  std::string remote_describe;  // the cluster, e.g. "remote: redis cluster ..."
  RemoteCounters remote;        // this node's view of the remote tier
  // The capacity advisor's estimates (Engine::AdvisorStats); no points when
  // it is off.
  AdvisorReport advisor;
  // The KV event log (Engine::EventLogStats; enabled false when it is off).
  KvEventLogStats events;
};

// What Audit() found. Empty findings and orphans: every counter agrees with
// the contents, every SSD payload checksum verifies, every chain link holds.
struct EngineAudit {
  std::vector<AuditFinding> findings;  // "hot ..." / "ssd ..." counters and blocks
  std::vector<BlockKey> orphans;       // SSD blocks whose parent is nowhere
  bool ok() const { return findings.empty() && orphans.empty(); }
};

// Why a prompt's blocks are not (all) cached (Engine::ExplainMiss).
enum class MissKind : uint8_t {
  kNone,            // every full block is cached and a restore gets them all
  kNeverStored,     // no tier holds the block and the SSD tier's removal
                    // history, which still holds every removal, has none of it
  kNotStored,       // never stored or evicted: no history reaches back to it
                    // (no SSD tier, or a full history ring)
  kEvicted,         // evicted from the SSD tier for capacity (history)
  kRemoved,         // removed explicitly: a purge or a repair (history)
  kCorruptDropped,  // dropped after its bytes failed verification (history)
  kStripped,        // cached, but its tip-only (window/recurrent) state is a
                    // placeholder, so a restore walks back before it
  kOtherNamespace,  // the prompt's first block is stored under another
                    // namespace: `differences` names the fields
  kInRemote,        // not in the local tiers, but the remote tier holds it
                    // (and `remote_blocks` - 1 after it): a Match fetches them
};
std::string_view MissKindName(MissKind kind);  // "none", "never-stored", ...

// Engine::ExplainMiss's value: where a prompt stops hitting and why.
struct MissExplanation {
  BlockKey root;  // the asked spec's namespace root
  uint64_t prompt_tokens = 0;
  uint64_t full_blocks = 0;    // the prompt's full blocks
  uint64_t cached_blocks = 0;  // leading blocks some local tier holds
  // Tokens a restore would give now (after the tip-only walk-back).
  uint64_t restorable_tokens = 0;
  int64_t first_missed_block = -1;  // index among the full blocks; -1: none
  BlockKey first_missed_key;        // zero when none
  MissKind kind = MissKind::kNone;
  std::string reason;  // one sentence naming the block and the cause
  // kOtherNamespace: the namespace holding the prompt's first block, how many
  // leading blocks it holds, and every field its manifest differs in (empty
  // with other_has_manifest false: written before manifests).
  BlockKey other_root;
  uint64_t other_cached_blocks = 0;
  bool other_has_manifest = false;
  std::vector<ManifestDifference> differences;
  // With a remote tier the namespace uses: the blocks from the first one the
  // local tiers miss on that the remote tier holds in a row, each checked as a
  // Match checks it (at most 256 looked up, without counting), and the tokens
  // a restore would give once a Match fetched them (after the tip-only
  // walk-back). 0 without one.
  uint64_t remote_blocks = 0;
  uint64_t restorable_with_remote_tokens = 0;
};

// A namespace's stored manifest (Engine::Manifests).
struct StoredManifest {
  BlockKey root;
  std::string text;  // as stored (namespace_spec.h, manifests)
  StatusOr<NamespaceManifest> decoded = Status::NotFound("not decoded");
};

// One block of a PinnedRestore, as the tier holds it: its record's tensors
// view `payload` without a copy.
struct RestoredBlock {
  BlockKey key;
  // kHot: `payload` is the hot tier's own buffer and the block is pinned
  // there while `pin` is held. kSsd: the block was not resident after the
  // restore (no hot tier, promotion off or no room): `payload` is a verified
  // copy read from the SSD tier and nothing is pinned. A block that left the
  // hot tier, or was rewritten there, between the restore's read and its pin
  // (a concurrent store) keeps the level and the bytes the restore read, with
  // no pin: `payload` is that buffer, held by this block, no longer the tier's.
  TierLevel level = TierLevel::kNone;
  BlockRecord record;  // decoded in place: raw tensors are slices of `payload`
  SharedBytes payload;
  // Holding this (any copy) keeps the block pinned in the hot tier: never
  // evicted, its charge counted in pinned_bytes. The last copy's destruction
  // unpins it; it may outlive the Engine (it keeps the RAM budget alive).
  // Null when the block is not pinned.
  std::shared_ptr<const void> pin;
};

// Engine::RestorePinned's value: a restore plus its blocks, pinned.
struct PinnedRestore {
  RestoreResult result;               // exactly what Restore returns
  std::vector<RestoredBlock> blocks;  // result.restored_blocks blocks, chain order
};

// Engine::SetValue's options: Redis' SET options on the key-value space.
struct SetValueOptions {
  enum class Condition {
    kAlways,
    kIfAbsent,   // NX: only when the key is absent
    kIfPresent,  // XX: only when the key is present
  };
  Condition condition = Condition::kAlways;
  // When the key expires, in Unix milliseconds (Clock::UnixMillis); 0: never.
  // A time already past stores nothing and removes the key.
  uint64_t expires_at_unix_ms = 0;
  // KEEPTTL: keep the expiry the key has (expires_at_unix_ms is ignored).
  bool keep_ttl = false;
  // GET: SetValueResult::old gets the value the key had.
  bool return_old = false;
};

// Engine::SetValue's value.
struct SetValueResult {
  bool written = false;            // false when the condition did not hold
  std::optional<SharedBytes> old;  // with return_old: the previous value, if any
};

// When Engine::SetValueExpiry changes an expiry (Redis 7's EXPIRE options);
// a key without expiry counts as expiring never (later than any time).
enum class ExpiryCondition {
  kAlways,
  kIfNone,           // NX: only when the key has no expiry
  kIfSet,            // XX: only when it has one
  kIfLater,          // GT: only when the new time is later than the current one
  kIfEarlier,        // LT: only when it is earlier
  kIfSetAndEarlier,  // XX LT: only when the key has an expiry and the new time is earlier
};

// Engine::ScanValues's value: a page of key names and the cursor of the next.
struct ValueScanPage {
  std::vector<std::string> keys;
  uint64_t next_cursor = 0;  // 0: the walk is complete
};

class Engine {
 public:
  // Opens (or creates) the engine's tiers. InvalidArgument for contradictory
  // options (no hot tier and no data_dir...), NotFound for a missing data_dir
  // with create_if_missing off, the SSD tier's errors otherwise. A damaged
  // SSD database is handled as the SSD tier does (docs/ssd.md, "Recovery").
  static StatusOr<std::unique_ptr<Engine>> Open(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Registers a model: a hot-budget owner named spec.model (suffixed with its
  // root when the name is taken) with its own counters, and a namespace whose
  // chains start at the fingerprint's root. With an SSD tier the namespace's
  // manifest (its spec) is stored the first time; a stored manifest of the
  // same root whose fingerprint differs (a damaged record or a hash
  // collision) refuses the registration (Corruption): never a silent reuse. Registering
  // the same spec with the same options again returns the same Namespace. InvalidArgument
  // for a bad spec (NamespaceSpec::Fingerprint) or the same spec with other options.
  StatusOr<Namespace> RegisterModel(const NamespaceSpec& spec,
                                    const ModelOptions& options = {});
  // The registered namespace with this root; NotFound when none is.
  StatusOr<Namespace> FindModel(const BlockKey& root) const;
  // The namespace registered with this spec (the same fingerprint), whatever
  // root RegisterModel gave it: a spec with layer shapes may have been given
  // the root of its form without them (docs/format.md §5.1), which
  // NamespaceRoot(spec) does not compute. NotFound when none is registered;
  // InvalidArgument for a bad spec.
  StatusOr<Namespace> FindModel(const NamespaceSpec& spec) const;

  // The longest cached prefix of `tokens` (hot, then SSD; stops at the first
  // missing block). Counts no tier hits; counts tokens.size() query tokens and
  // the matched tokens as hit tokens of the model (PrefixTokenCounters).
  // Reads and moves nothing local: a block on SSD stays there until Restore
  // reads (and promotes) it. With a remote tier, the blocks after the local
  // prefix are fetched from it (one round trip per cluster master for up to
  // 256 blocks, docs/remote.md) and each one that is the block asked for
  // (record identity and checksum) is stored in the local tiers, hot first, as
  // a Put would (so `const` means: no cached block changes or leaves; copies
  // may be added). MatchResult::tiers says kRemote for those.
  StatusOr<MatchResult> Match(Namespace ns, std::span<const int32_t> tokens) const;
  // Loads a match into per-layer caches (RestoreResult). Restoring less than
  // matched is a value with a reason, not an error. Timed in the model's
  // restore_latency; its restored tokens are counted by tier.
  StatusOr<RestoreResult> Restore(const MatchResult& match);
  // Restore, plus every restored block as stored (the partial tip the restore
  // ended at included), each pinned in the hot tier when resident there: the
  // per-block, per-layer tensors view the tier's bytes without a copy and stay
  // resident while their pin is held (docs/python.md). Multi-block sliceable
  // layers of `result` are still one concatenated copy. Each pin counts one
  // more hot hit (the restore's read counted the first). The blocks are the
  // very bytes the restore read and assembled `result` from, never another
  // version a concurrent store put under the same key meanwhile. Errors as
  // Restore.
  StatusOr<PinnedRestore> RestorePinned(const MatchResult& match);
  // Restore straight into the caller's memory (docs/prefix_cache.md,
  // "Restoring into the caller's buffers"): one LayerDestination per layer of
  // the namespace, one TensorDestination per restored tensor of that layer
  // (TensorDestination, tensor.h: base pointer, bytes, dtype, byte strides). Each
  // block's slice goes from the tier to its place in the destination in one
  // copy, byte for byte what Restore would return. Every destination is
  // checked before the first byte is written: InvalidArgument, and nothing
  // written, for a wrong count, dtype or stride, a null or too small buffer.
  // `on_layer` (optional) is told, on this thread, as each layer completes,
  // in layer order; all blocks are read before the first layer (a block
  // holds every layer). Counted and timed as Restore (the callbacks' time
  // included).
  StatusOr<RestoreIntoResult> RestoreInto(const MatchResult& match,
                                          std::span<const LayerDestination> destinations,
                                          const LayerRestoredCallback& on_layer = {});
  // Restore as a plan for a copy engine (RestorePlan, prefix_types.h): per layer, the
  // host ranges holding its bytes and where each goes in a contiguous
  // per-layer layout; applying them reproduces Restore byte for byte (every
  // cache family: rotating and arrays tips, partial tails and quantized
  // layers are stored as they are restored, so no family needs a transform).
  // Every range lies in a region of the memory resource (on_region told of
  // it). The hot blocks used are pinned (never evicted) until the plan is
  // released; SSD and remote hits and compressed tensors are staged in the
  // resource and held by the plan. Each pin counts one more hot hit. Counted
  // and timed as Restore. NoSpace when the resource has no room to stage.
  StatusOr<RestorePlan> PlanRestore(const MatchResult& match);
  // Stores the caches of `tokens` (one LayerState per layer covering every
  // token); blocks already cached are not rewritten. InvalidArgument when the
  // layers do not fit the namespace layout. `options.reuse` hints whether the
  // blocks this store writes will be read again (ReuseHint; docs/eviction.md).
  StatusOr<StoreResult> Store(Namespace ns, std::span<const int32_t> tokens,
                              const std::vector<LayerState>& layers,
                              const StoreOptions& options = {});
  // The namespace's recorded tips and the tip each extended, oldest first.
  StatusOr<std::vector<std::pair<BlockKey, BlockKey>>> RecordedTips(Namespace ns) const;
  // Stores block records encoded elsewhere (the RESP server's PKV.PUT) as one
  // store of `ns`: a chain from the root or from a cached block, checked like
  // a restore checks blocks, then deduplicated, charged to the model and
  // recorded in its lineage exactly as Store does
  // (PrefixCache::StoreRecords has the rules). InvalidArgument naming the
  // first record that breaks one; nothing is written then.
  StatusOr<StoreResult> StoreRecords(Namespace ns,
                                     const std::vector<SharedBytes>& records,
                                     const StoreOptions& options = {});
  // The encoded record of block `key` when it is cached in `ns`; NotFound
  // otherwise (another namespace's block, a key-value entry, a miss). In a
  // spec with layer shapes, NotFound too for a block of other shapes than the
  // spec's (an older binary's, a node's of one), which a reader would take
  // for the spec's: never served, as Restore never restores one. Its tokens
  // and `after`'s (the blocks a match found after it: PKV.GET passes its
  // connection's last PKV.MATCH) count in PrefixTokenCounters::
  // shape_refused_tokens, and they are removed (docs/metrics.md, "Shape
  // refusals"), but in a namespace adopted from before shapes were keyed.
  StatusOr<SharedBytes> GetBlock(Namespace ns, const BlockKey& key,
                                 const BlocksAfter& after = {});
  // The spec `ns` was registered with.
  StatusOr<NamespaceSpec> ModelSpec(Namespace ns) const;
  // For a server whose clients restore block by block (PKV.MATCH, then
  // PKV.GET of the matched blocks) instead of calling Restore: records one
  // restore of `ns` that took `duration_nanos` in the model's restore_latency
  // and adds `tokens` to its PrefixTokenCounters. NotFound for an unknown ns.
  Status RecordServedRestore(Namespace ns, uint64_t duration_nanos,
                             const PrefixTokenCounters& tokens);
  // Why `tokens` do not fully hit under `spec` (which need not be
  // registered; nothing is registered, counted or promoted): the first full
  // block that no local tier (hot, SSD) holds, or the first whose tip-only
  // state is a placeholder, and the cause: the SSD tier's removal history
  // (evicted, removed, corrupt-dropped), or, when even the first block is
  // missing, another namespace (stored manifests and registered models)
  // holding it, with the fields its spec differs in. With a remote tier,
  // blocks it holds after the local ones come first (kInRemote: a Match
  // would fetch them). docs/prefix_cache.md "Explaining a miss".
  // InvalidArgument for a bad spec.
  StatusOr<MissExplanation> ExplainMiss(const NamespaceSpec& spec,
                                        std::span<const int32_t> tokens);
  // Every namespace manifest in the SSD tier (RegisterModel writes one per
  // namespace; docs/format.md §5), by root; empty without an SSD tier.
  StatusOr<std::vector<StoredManifest>> Manifests() const;
  // How many models are registered.
  size_t model_count() const;
  // The clock the engine reads (EngineOptions::clock, or the system's): a
  // value's expiry is in its UnixMillis.
  Clock* clock() const;

  // The key-value space: opaque values by name, in the same tiers (a hot
  // owner "values", then SSD), apart from every model's blocks. Get returns
  // NotFound for an absent key; Put replaces (NoSpace when no tier can hold
  // the value); Delete returns whether the key was present.
  StatusOr<SharedBytes> GetValue(std::string_view key);
  Status PutValue(std::string_view key, SharedBytes value);
  StatusOr<bool> DeleteValue(std::string_view key);
  // False also when the key's record cannot be read (an SSD read error):
  // ValueTtlMillis reports that error.
  bool ContainsValue(std::string_view key) const;
  // How many keys the key-value space holds: each counted once, whether in
  // RAM, on SSD or both. Waits for the SSD write-back queue, then walks both
  // indexes and what is still queued (time in proportion to their entries). Entries of
  // the older naming scheme still on SSD (unreachable by name) count too. Exact unless
  // values are put or deleted meanwhile.
  StatusOr<uint64_t> CountValues();
  // Removes every key of the key-value space from every tier; returns how
  // many there were. Keys put meanwhile may survive it: a caller that needs
  // all gone serialises it with its writers (the server runs FLUSHDB alone).
  // Blocks of registered models are not touched.
  StatusOr<uint64_t> ClearValues();

  // Redis' SET with its options (see SetValueOptions); PutValue is SetValue
  // with none. A value's expiry is stored with it (it survives a restart),
  // and an expired value is never served: Get, Contains and the TTL read it
  // as absent, and remove it (docs/protocol.md, "Expiry"). InvalidArgument
  // for a key longer than 64 KiB.
  StatusOr<SetValueResult> SetValue(std::string_view key, SharedBytes value,
                                    const SetValueOptions& options);
  // OK when SetValue takes `key` as a name; its InvalidArgument otherwise
  // (longer than 64 KiB). For callers that check every key of a batch before
  // storing any (MSET).
  static Status CheckValueKey(std::string_view key);
  // Milliseconds until `key` expires; -1 when it never does, -2 when absent.
  StatusOr<int64_t> ValueTtlMillis(std::string_view key);
  // The Unix ms at which `key` expires (Redis' PEXPIRETIME); -1 when it never
  // does, -2 when absent.
  StatusOr<int64_t> ValueExpiresAtMillis(std::string_view key);
  // Sets the expiry of `key` (Unix ms; 0 removes it, as PERSIST) when it is
  // present and `condition` holds; returns whether it changed (EXPIRE's 1 or
  // 0; PERSIST answers 0 for a key without expiry). A time already past
  // removes the key (and counts as a change). Rewrites the value (one copy).
  StatusOr<bool> SetValueExpiry(std::string_view key, uint64_t expires_at_unix_ms,
                                ExpiryCondition condition = ExpiryCondition::kAlways);
  // One page of a walk over the key-value space's names (SCAN): about
  // `count` names from `cursor` (0 starts a walk). Every key present for a
  // whole walk is returned at least once; expired keys are not returned.
  // Keys of data directories older than the value records (docs/format.md,
  // section 4) are not listed until written again. The first walk, DBSIZE or
  // sweep after an open reads every value record once to learn its name.
  StatusOr<ValueScanPage> ScanValues(uint64_t cursor, size_t count);
  // Removes up to `max_keys` expired values (the bounded sweep that SetValue
  // also runs, a few keys at a time); returns how many it removed.
  StatusOr<uint64_t> RemoveExpiredValues(size_t max_keys);

  // Opens a charge to the RAM budget for memory held outside the blocks
  // (MemoryCharge, above; SessionManagerOptions::memory charges live sessions' KV to
  // it): a budget owner named `name`, whose charges count against the hot
  // capacity and `quota_bytes` (nullopt: only the capacity limits it) and
  // make room by evicting cache blocks. Opening a name again returns another
  // handle of the same owner. A handle keeps the budget alive (even past
  // Close) and uncharges what it still holds when destroyed. InvalidArgument
  // without a hot tier, for an empty name, one a model holds or "values"
  // (the key-value space's owner), a zero quota, or another quota than the
  // name was opened with.
  StatusOr<std::shared_ptr<MemoryCharge>> OpenMemoryCharge(
      const std::string& name, std::optional<uint64_t> quota_bytes = std::nullopt);

  // Writes every dirty hot block to the SSD tier and waits for its write-back
  // queue, so a crash after it loses nothing stored before it (with wal or
  // sync durability). No-op without an SSD tier. On a failing SSD every block
  // is still tried, and the first error says how many blocks (and bytes) are
  // not on SSD (at Close: lost).
  Status Flush();
  // See the header comment. Idempotent: a second call returns OK.
  Status Close();
  bool closed() const;

  EngineStats Stats() const;
  // The capacity advisor's estimates for the models' blocks (also in
  // Stats().advisor): the token hit ratio at 1/4x to 8x the hot and SSD
  // capacities (a tier's capacity in blocks from its bytes and the models'
  // mean charge per block; no points for a tier that is absent or holds no
  // model block yet). No points when the advisor is off.
  AdvisorReport AdvisorStats() const;
  // Flushes, then recomputes every counter of the hot budget and the SSD tier
  // from their contents, verifies every SSD payload checksum (a damaged block
  // is removed and reported) and every SSD chain link. An error only when the
  // audit could not run.
  StatusOr<EngineAudit> Audit();

  // KV events (kv_events.h, docs/events.md). Events numbered from
  // `from_seq` on (the last seq a consumer applied, plus one; 0 or 1: the
  // oldest the log holds when it holds the start), at most `max_events`,
  // waiting up to `wait_ms` (of the engine's clock) for the first when none
  // is newer yet. OutOfRange when the log cannot continue after from_seq - 1
  // (retention dropped the next events, or the number is from a run whose
  // last events were lost, or beyond the head): the consumer must take an
  // EventSnapshot and continue from its seq + 1. NotSupported with
  // event_log off.
  //
  //   uint64_t next = snap.seq + 1;
  //   for (;;) {
  //     StatusOr<KvEventPage> p = engine->Events(next, 1024, /*wait_ms=*/1000);
  //     if (p.status().IsOutOfRange()) { /* resnapshot */ }
  //     for (const KvEvent& e : p->events) Apply(e);
  //     next = p->next_seq;
  //   }
  StatusOr<KvEventPage> Events(uint64_t from_seq, size_t max_events = 1024,
                               uint64_t wait_ms = 0) const;
  // The retained events with first_seq <= seq <= last_seq, at most
  // `max_events`, ascending (descending from last_seq with `reverse`). No
  // continuity check: what the log keeps (the server's XRANGE).
  StatusOr<std::vector<KvEvent>> EventRange(uint64_t first_seq, uint64_t last_seq,
                                            size_t max_events,
                                            bool reverse = false) const;
  // Calls `wake` once, on the thread that appends it, when an event with seq
  // >= from_seq is there; at once (on this thread) when one already is or
  // Events(from_seq) would be OutOfRange. `wake` runs under a tier's lock:
  // it must be quick and must not call the engine. Returns the id for
  // UnwatchEvents (0: it already ran).
  StatusOr<uint64_t> WatchEvents(uint64_t from_seq, std::function<void()> wake) const;
  void UnwatchEvents(uint64_t watch_id) const;
  // The blocks of the hot and SSD tiers as the events say, with the seq they
  // are consistent with (after that event, before the next).
  StatusOr<KvEventSnapshot> EventSnapshot() const;
  // EventSnapshot in pages, for key sets too large for one answer: the
  // blocks whose key's high 64 bits (BlockKey::hi) lie in [cursor,
  // next_cursor), next_cursor 0 meaning to the end; about `count` of them
  // (the span is sized from the key count: keys are XXH3 values, uniform).
  // Start with cursor 0 and go on with next_cursor until it is 0. Each page
  // has its own seq (the pages are taken at increasing seqs while the node
  // changes). A consumer that applies every page, then the events from the
  // FIRST page's seq + 1 on (Events), holds exactly the key sets: a block
  // is in exactly one page, with its state at that page's seq, and the
  // events it replays over it end in that same state (each event sets a
  // block's state in a tier whole). When the log no longer holds those
  // events (Events: OutOfRange) the consumer starts again from cursor 0.
  // InvalidArgument for count 0; NotSupported with event_log off.
  StatusOr<KvEventSnapshot> EventSnapshotPage(uint64_t cursor, size_t count) const;
  KvEventLogStats EventLogStats() const;

  const EngineOptions& options() const;
  // The memory resource hot blocks and restore plans live in
  // (EngineOptions::memory_resource or the default arena). Stays valid after
  // Close() for as long as the caller holds it.
  std::shared_ptr<MemoryResource> memory_resource() const;

 private:
  friend struct internal::EngineAccess;
  explicit Engine(std::unique_ptr<internal::EngineImpl> impl);
  std::unique_ptr<internal::EngineImpl> impl_;
};

}  // namespace prefixkv
