// Trace replay (docs/prefix_cache.md, "prefixkv replay"): drive a TierStack with a
// Mooncake-format trace and measure prefix hit ratios per tier.
//
// Each hash id is one block of `block_tokens` tokens; equal ids are equal
// prefixes, so block i of a request gets the chain key of its ids 0..i. For
// each request, in file order: look the blocks up in chain order (hot, then
// SSD; a Get is a touch and an SSD hit is promoted when the stack says so)
// and stop at the first miss; then put every block after the hit prefix, in
// chain order (a block still resident past the miss is put again, which is a
// touch). Payloads are synthetic: `bytes_per_token * block_tokens` bytes, one
// shared buffer (only the sizes matter to the tiers' accounting).
//
// Capacities: in tokens, a tier holds tokens / block_tokens blocks whatever its
// per-entry overhead (the byte capacity is derived from the tier's own charge
// per block); in bytes, the tier's byte capacity as given. 0 turns a tier off;
// no capacity means unlimited.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "prefixkv/advanced/eviction_policy.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/remote_tier.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/advanced/tier_stack.h"
#include "prefixkv/clock.h"
#include "prefixkv/engine.h"
#include "trace_reader.h"

namespace prefixkv::replay {

// A tier's size: tokens or bytes (at most one set); neither = unlimited.
struct ReplayCapacity {
  std::optional<uint64_t> tokens;
  std::optional<uint64_t> bytes;
  bool off() const { return tokens == 0u || bytes == 0u; }
};

struct ReplayConfig {
  uint32_t block_tokens = 512;    // tokens per hash id
  uint64_t bytes_per_token = 16;  // synthetic payload per token
  ReplayCapacity hot;
  ReplayCapacity ssd;
  EvictionPolicyKind policy = EvictionPolicyKind::kLru;          // hot tier order
  EvictionPolicyKind ssd_policy = EvictionPolicyKind::kLeafLru;  // SSD leaf order
  // Reuse hints (docs/eviction.md, "Reuse hints"): a request whose answer
  // (output_length) is longer than this many tokens puts the blocks it
  // writes with ReuseHint::kUnlikely, as a serving engine that stores a turn
  // once its answer is done would. nullopt: no hints.
  std::optional<uint64_t> unlikely_reuse_after_output_tokens;
  // SSD admission (EngineOptions::ssd_admission, docs/eviction.md). Under a
  // budget the engine's clock is the trace's: each request's timestamp_ms
  // (the budget is bytes per day of trace time).
  SsdAdmissionKind ssd_admission = SsdAdmissionKind::kAll;
  uint64_t ssd_write_budget_bytes_per_day = 0;
  // The SSD tier's directory. Empty: no SSD tier unless a capacity is given
  // (then InvalidArgument).
  std::string ssd_path;
  bool promote_on_ssd_hit = true;
  // The engine's capacity advisor (EngineOptions::advisor_max_keys; 0: off).
  uint32_t advisor_max_keys = 32768;
  uint64_t advisor_half_life_seconds = 3600;
  // A shared remote tier (EngineOptions::remote; docs/remote.md): every node
  // of a replay uses it. Empty and no factory: none.
  std::string remote;
  RemoteWriteMode remote_write = RemoteWriteMode::kOnSpill;
  uint32_t remote_timeout_ms = 5;
  uint32_t remote_ttl_seconds = 3600;
  // Bytes each namespace may write to the cluster per TTL window
  // (RemoteNamespaceLimits::max_bytes; 0: unlimited).
  uint64_t remote_max_bytes = 0;
  // Keys of this replay's blocks start with it, so runs sharing a cluster do
  // not see each other's blocks (every node of one run must use the same).
  std::string remote_key_prefix = "prefixkv:replay:";
  // For tests: the store instead of a Redis Cluster client.
  std::function<std::unique_ptr<RemoteStore>()> remote_store_factory;
  // EngineOptions::on_kv_event of the node's engine (a routed replay feeds
  // its router from it; routed_replay.h). Null: none.
  KvEventCallback on_kv_event;
};

// The tiers of one replay: an Engine built from a ReplayConfig with one
// model, "replay", whose stack the replayer drives. Thread-safe as the engine
// is; the replayer uses it from one thread.
class ReplayTiers {
 public:
  // InvalidArgument when both tiers are off or the SSD tier has no path.
  static StatusOr<std::unique_ptr<ReplayTiers>> Open(const ReplayConfig& config);
  ~ReplayTiers();

  TierStack& stack();
  HotTier* hot();        // null when the hot tier is off
  SsdTier* ssd();        // null when the SSD tier is off
  RemoteTier* remote();  // null without a remote tier
  Engine& engine() { return *engine_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The chain root of the trace's blocks.
  const BlockKey& root() const { return ns_.root; }
  // ReplayConfig::unlikely_reuse_after_output_tokens.
  std::optional<uint64_t> unlikely_reuse_after_output_tokens() const {
    return unlikely_reuse_after_output_tokens_;
  }
  // Moves the trace clock (the engine's under a write budget) forward to a
  // request's timestamp; never back. Under a budget a timestamp past the
  // clock's reach (2^64 ns: 18,446,744,073,709 ms, about 584 years; a
  // microsecond or nanosecond trace read as milliseconds) is InvalidArgument
  // naming it: its nanoseconds wrapped into another time, which refilled the
  // budget for the wrong window.
  Status AdvanceTraceClock(uint64_t timestamp_ms);
  EngineStats stats() const { return engine_->Stats(); }

 private:
  ReplayTiers() = default;
  uint64_t payload_bytes_ = 0;
  std::optional<uint64_t> unlikely_reuse_after_output_tokens_;
  FakeClock trace_clock_{0};       // declared before the engine that reads it
  bool trace_clock_used_ = false;  // the engine's clock: a write budget
  std::unique_ptr<Engine> engine_;
  Namespace ns_;
};

struct ReplayTierReport {
  std::string name;         // "hot", "ssd", "remote" (summed over the nodes)
  uint64_t block_hits = 0;  // blocks of matched prefixes this tier served
  uint64_t bytes = 0;       // charged bytes resident at the end
  uint64_t entries = 0;     // blocks resident at the end
  uint64_t evictions = 0;   // blocks evicted for capacity
};

// Prefill cost of n prompt tokens, in token units: n for the per-token work
// (projections, MLP) plus n^2 / (2 * kAttentionTokens) for attention, which
// grows with the position. kAttentionTokens is the context length at which a
// token's attention work equals its other work (about 4096 for 7B-class
// dense models). A hit of h tokens of an n-token prompt saves cost(h): a block
// deep in a long prefix saves more prefill than a shallow one.
inline constexpr double kAttentionTokens = 4096;
inline double PrefillCost(uint64_t tokens) {
  const double n = static_cast<double>(tokens);
  return n + n * n / (2 * kAttentionTokens);
}

struct ReplayReport {
  uint64_t requests = 0;
  uint64_t blocks = 0;            // hash ids replayed
  uint64_t hit_blocks = 0;        // blocks of matched prefixes
  uint64_t input_tokens = 0;      // sum of input_length
  uint64_t hit_tokens = 0;        // sum of min(hit_blocks * block_tokens, input_length)
  double prefill_cost = 0;        // sum of PrefillCost(input_length)
  double prefill_cost_saved = 0;  // sum of PrefillCost(hit tokens)
  double seconds = 0;             // replay time (parsing excluded)
  uint64_t hinted_blocks = 0;     // blocks put with ReuseHint::kUnlikely
  // SSD writes (summed over the nodes): what SSD admission decided about the
  // hot tier's dirty victims (payload bytes), and the segment bytes written.
  SsdAdmissionCounters ssd_admission;
  uint64_t ssd_segment_bytes_written = 0;
  uint64_t ssd_hit_blocks = 0;  // blocks served by the SSD tier
  // Payload bytes written to SSD per block it served (0 without SSD hits).
  double ssd_bytes_written_per_hit() const {
    return ssd_hit_blocks ? double(ssd_admission.written_bytes) / double(ssd_hit_blocks)
                          : 0;
  }
  std::vector<ReplayTierReport> tiers;
  void AddPrefillCost(uint64_t hit_tokens_of_request, uint64_t input_length) {
    prefill_cost += PrefillCost(input_length);
    prefill_cost_saved += PrefillCost(hit_tokens_of_request);
  }
  // Prompt tokens that needed no prefill (equal to hit_tokens).
  uint64_t prefill_tokens_saved() const { return hit_tokens; }
  // The share of the prefill cost the hits saved (weights deep hits more).
  double prefill_cost_saved_ratio() const {
    return prefill_cost > 0 ? prefill_cost_saved / prefill_cost : 0;
  }
  double block_hit_ratio() const {
    return blocks ? double(hit_blocks) / double(blocks) : 0;
  }
  double token_hit_ratio() const {
    return input_tokens ? double(hit_tokens) / double(input_tokens) : 0;
  }
  double blocks_per_second() const { return seconds > 0 ? double(blocks) / seconds : 0; }
};

// Not thread-safe: one replay, one thread.
class TraceReplayer {
 public:
  // REQUIRES: `tiers` outlives the replayer.
  TraceReplayer(ReplayTiers* tiers, uint32_t block_tokens,
                Clock* clock = Clock::System());
  // Several nodes (each its own engine, normally sharing a remote tier):
  // request i goes to node i % nodes.size(), as a router without affinity
  // would send it. A block a node finds only remotely is a hit (counted as
  // "remote") and is stored in that node's local tiers.
  // REQUIRES: nodes non-empty, every node outlives the replayer.
  TraceReplayer(std::vector<ReplayTiers*> nodes, uint32_t block_tokens,
                Clock* clock = Clock::System());

  // Picks the node of a request (an index into the nodes) from the request
  // and the chain keys of its blocks; `done` is called after it was replayed
  // with the node and the request's hit blocks. Without a chooser request i
  // goes to node i % nodes.
  using NodeChooser =
      std::function<size_t(const TraceRequest& request, std::span<const BlockKey> keys)>;
  using RequestDone =
      std::function<void(size_t node, const TraceRequest& request, size_t hit_blocks)>;
  void set_chooser(NodeChooser chooser, RequestDone done) {
    chooser_ = std::move(chooser);
    done_ = std::move(done);
  }

  // Replays one request. An error only for a tier failure other than NoSpace.
  Status Replay(const TraceRequest& request);
  // Replays all, calling `progress(done, total)` every few hundred requests.
  Status ReplayAll(const std::vector<TraceRequest>& requests,
                   const std::function<void(size_t, size_t)>& progress = nullptr);
  ReplayReport Report() const;

 private:
  const std::vector<ReplayTiers*> nodes_;
  const uint32_t block_tokens_;
  Clock* const clock_;
  const BlockKey root_;
  SharedBytes payload_;
  ReplayReport report_;
  uint64_t hot_hits_ = 0, ssd_hits_ = 0, remote_hits_ = 0;
  std::vector<BlockKey> keys_;  // scratch
  NodeChooser chooser_;
  RequestDone done_;
};

}  // namespace prefixkv::replay
