// Value types shared by the tiers, the Engine's options and its statistics:
// owners, counters, audit findings, tier levels, the SSD tier's durability
// modes, the hot tier's eviction policies, and the latency histograms every
// latency figure is reported in (Engine::Restore per model, each RESP
// command of the server) with the lock-free recorder that fills one.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv {

// Who is charged for an entry's bytes; one per registered model (0 = default).
using OwnerId = uint32_t;

// Counters every tier keeps, per owner and in total. Audit() recomputes the
// state counters (entries, bytes, pinned_bytes, external_bytes) from contents; the event
// counters (hits...) are checked for internal consistency (total = sum of owners).
struct TierCounters {
  uint64_t entries = 0;       // blocks resident
  uint64_t bytes = 0;         // charged bytes of resident blocks (see each tier's
                              // charge), plus external_bytes (below)
  uint64_t pinned_bytes = 0;  // charged bytes of pinned blocks (hot tier)
  uint64_t hits = 0;          // Get found the block
  uint64_t misses = 0;        // Get did not (including corrupt blocks)
  uint64_t inserts = 0;       // Put stored a new block or replaced one
  uint64_t removes = 0;       // explicit Remove
  uint64_t evictions = 0;     // removed for capacity
  uint64_t spills = 0;        // evicted blocks handed to the next tier
  uint64_t corruptions = 0;   // checksum or decode failures detected on read
  uint64_t io_errors = 0;     // failed writes/reads of the medium
  // Bytes charged for memory held outside the tier's blocks (the hot
  // budget's external charges, e.g. live sessions' KV; SharedHotBudget::
  // Charge). Included in `bytes`, which is then every charged byte; not in
  // `entries`. Always 0 in the other tiers.
  uint64_t external_bytes = 0;

  bool operator==(const TierCounters&) const = default;
};

// One line of an audit: which counter or block disagrees, and how.
struct AuditFinding {
  std::string what;    // e.g. "owner 2 bytes", "block <hex> checksum"
  std::string detail;  // e.g. "counter 4096, recomputed 2048"
};

// Which tier served a block.
enum class TierLevel : uint8_t { kNone = 0, kHot = 1, kSsd = 2, kRemote = 3 };

// "none", "hot", "ssd".
std::string_view TierLevelName(TierLevel level);

// What an SSD write must survive before it is acknowledged.
enum class SsdDurability {
  // No write-ahead log for the metadata: it reaches disk when a memtable is
  // flushed and at Close(). A kill -9 may lose the most recent blocks (never
  // exposes a partial or wrong one). The fastest mode.
  kFlush,
  // Metadata write-ahead log without fsync (default): survives kill -9, may
  // lose the last writes on power loss.
  kWal,
  // Payload fdatasync'ed and the log synced before every acknowledgement (one
  // sync for a whole write-back batch): survives power loss.
  kSync,
};

// "flush", "wal", "sync"; and back (InvalidArgument for anything else).
std::string_view SsdDurabilityName(SsdDurability d);
StatusOr<SsdDurability> ParseSsdDurability(std::string_view name);

// Which hot blocks leave first when the RAM budget is full.
enum class EvictionPolicyKind : unsigned char {
  kLru,      // least recently used first
  kLeafLru,  // least recently used among blocks without a resident child: a
             // chain is evicted from its tip back, never leaving a hole
  kChain,    // leaf-first like leaf-lru; chains that were reused before (a
             // resumed conversation) stay one budget's worth of accesses longer
             // than chains seen once (docs/eviction.md)
};

// "lru", "leaf-lru" or "chain"; InvalidArgument for anything else.
StatusOr<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name);
std::string_view EvictionPolicyName(EvictionPolicyKind kind);

// Which of the hot tier's dirty victims are written to the SSD tier
// (docs/eviction.md, "SSD admission"; advanced/ssd_admission.h).
enum class SsdAdmissionKind : unsigned char {
  kAll,     // every one (the default, and the behaviour before admission)
  kBudget,  // while a write budget (bytes per day) allows; beyond it prefix
            // blocks that may safely stay unwritten are skipped and counted
  kGhost,   // reject first: a prefix block that may safely stay unwritten is
            // skipped at its first eviction and its key remembered (a ghost);
            // written when it is evicted again (it was asked for and stored again)
};
// "all", "budget", "ghost"; and back (InvalidArgument for anything else).
std::string_view SsdAdmissionName(SsdAdmissionKind kind);
StatusOr<SsdAdmissionKind> ParseSsdAdmission(std::string_view name);

// What SSD admission decided, since open. Every dirty victim the hot tier
// hands to the SSD tier's write-back is counted once, as written or skipped.
struct SsdAdmissionCounters {
  uint64_t written_blocks = 0;  // handed to the SSD tier
  uint64_t written_bytes = 0;   // their payload bytes
  // Of those, written although the budget was spent (ghost: although its key
  // was not in the ghost): a raw value (never skipped: an acknowledged write)
  // or a block with a child in RAM or on SSD.
  uint64_t forced_blocks = 0;
  uint64_t skipped_blocks = 0;  // not written: over the budget
  uint64_t skipped_bytes = 0;
  bool operator==(const SsdAdmissionCounters&) const = default;
};

// The remote tier (advanced/remote_tier.h, docs/remote.md).
enum class RemoteWriteMode : uint8_t {
  kOnSpill,  // blocks the lowest local tier evicts (default)
  kAlways,   // every block stored, as soon as it is stored locally
};
StatusOr<RemoteWriteMode> ParseRemoteWriteMode(std::string_view name);

// Limits of one namespace's blocks in the remote store.
struct RemoteNamespaceLimits {
  // Expiry of each block written (refreshed when written again). 0: none.
  uint32_t ttl_seconds = 24 * 3600;
  // Bytes this namespace may write per TTL window, counted cluster-wide in a
  // counter key that expires with the window (0: unlimited). Writes over it
  // are dropped and counted (RemoteCounters::over_quota). With ttl_seconds 0
  // the counter never expires: a limit on all the namespace ever writes.
  uint64_t max_bytes = 0;
};

// What the remote tier did, on this node.
struct RemoteCounters {
  uint64_t hits = 0;              // blocks read back intact
  uint64_t misses = 0;            // absent, unreadable or corrupt
  uint64_t corruptions = 0;       // values that failed the envelope check or were refused
  uint64_t errors = 0;            // failed store calls (reads and writes)
  uint64_t bytes_read = 0;        // payload bytes of hits
  uint64_t bytes_written = 0;     // payload bytes stored
  uint64_t writes = 0;            // blocks stored
  uint64_t dropped = 0;           // blocks not written: the queue was full
  uint64_t write_failures = 0;    // blocks the cluster refused or did not acknowledge
  uint64_t over_quota = 0;        // blocks not written: namespace max_bytes
  uint64_t rewrites_skipped = 0;  // victims not written: the cluster holds them
  uint64_t queued_blocks = 0;     // now waiting in the write queue
  uint64_t queued_bytes = 0;
  bool available = false;  // the last store call succeeded
};

// What the capacity advisor reports (Engine::AdvisorStats(); docs/eviction.md,
// "The capacity advisor").

// One estimated point of a tier's hit-ratio curve.
struct AdvisorPoint {
  std::string tier;             // "hot" or "ssd"
  double factor = 0;            // multiple of the tier's current capacity
  uint64_t capacity_bytes = 0;  // factor x the current capacity in bytes
  uint64_t capacity_blocks = 0;
  // Estimated token hit ratio at that size (an SSD point: with the hot tier
  // at its current size in front of it).
  double hit_ratio = 0;
};

struct AdvisorReport {
  double sampling_rate = 1;   // share of block keys sampled now
  uint64_t sampled_keys = 0;  // blocks remembered now
  uint64_t memory_bytes = 0;  // estimated memory of the sampled state
  uint64_t references = 0;    // sampled references counted
  uint64_t tokens = 0;        // their tokens (unscaled)
  std::vector<AdvisorPoint> points;
};

// Token-level prefix-cache counters of one registered model
// (EngineOwnerStats::prefix_tokens). They count tokens, not blocks, as vLLM's
// prefix_cache_queries and prefix_cache_hits do: a hit rate is hit_tokens /
// query_tokens; and the stores refused for their layer shapes. Their field
// table (INFO, PKV.STATS, the metrics) is internal.
struct PrefixTokenCounters {
  uint64_t query_tokens = 0;  // tokens asked in Engine::Match (PKV.MATCH)
  uint64_t hit_tokens = 0;    // of those, tokens Match found cached
  // Tokens restored, by the tier each block came from: Engine::Restore's
  // RestoreResult::tokens_from_{hot,ssd,remote}, and the blocks a RESP client
  // read with PKV.GET after its PKV.MATCH (Engine::RecordServedRestore).
  uint64_t restored_tokens_hot = 0;
  uint64_t restored_tokens_ssd = 0;
  uint64_t restored_tokens_remote = 0;
  // What the spec's layer shapes (NamespaceSpec::layer_shapes) refused:
  // stores (Store, StoreRecords / PKV.PUT) whose layers or records, or the
  // cached first block their records extend, hold other shapes; and matched
  // tokens a restore did not serve because a block of them held other
  // shapes: that block's and the matched tokens after it, which it drops.
  uint64_t shape_refused_stores = 0;
  uint64_t shape_refused_tokens = 0;
};

// ---- Latency histograms -------------------------------------------------

struct LatencyHistogram {
  // Upper bounds of the buckets in microseconds (a call of d us lands in the
  // first bucket with d <= bound, d exact to the nanosecond); a last bucket
  // holds the slower ones.
  static constexpr std::array<uint64_t, 14> kBucketBoundsMicros = {
      10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 1000000};
  // Calls per bucket (not cumulative); counts.back(): above the last bound.
  std::array<uint64_t, kBucketBoundsMicros.size() + 1> counts{};
  // Total time of the calls counted, summed in nanoseconds and then rounded
  // down to microseconds (calls shorter than 1 us add up instead of vanishing).
  uint64_t sum_micros = 0;
  uint64_t count() const {
    uint64_t n = 0;
    for (uint64_t c : counts) n += c;
    return n;
  }
};

// Thread-safe and lock-free: RecordNanos may run on many threads at once. A
// Snapshot taken during a RecordNanos may see its bucket before its time is in
// sum_micros (each field is exact once the call has returned).
class LatencyRecorder {
 public:
  void RecordNanos(uint64_t nanos);  // one call that took `nanos`
  LatencyHistogram Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, LatencyHistogram::kBucketBoundsMicros.size() + 1>
      counts_{};
  std::atomic<uint64_t> sum_nanos_{0};
};

}  // namespace prefixkv
