// Trace replay over an Engine's tiers: a real hot tier (the chosen policy) and
// a real SSD tier (see trace_replay.h).
#include "trace_replay.h"

#include <algorithm>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv::replay {
namespace {

// "Unlimited": far above any memory or disk, still safe to add charges to.
constexpr uint64_t kUnlimitedBytes = uint64_t{1} << 62;

// A capacity in tokens holds tokens / block_tokens blocks of `charge` bytes.
// Beyond kUnlimitedBytes it is unlimited: the product used to wrap past 2^64
// into a cache of a block or so.
uint64_t CapacityBytes(const ReplayCapacity& c, uint32_t block_tokens, uint64_t charge) {
  if (c.bytes) return std::min(*c.bytes, kUnlimitedBytes);
  if (!c.tokens) return kUnlimitedBytes;
  const uint64_t blocks = *c.tokens / block_tokens;
  return blocks > kUnlimitedBytes / std::max<uint64_t>(charge, 1) ? kUnlimitedBytes
                                                                  : blocks * charge;
}

}  // namespace

StatusOr<std::unique_ptr<ReplayTiers>> ReplayTiers::Open(const ReplayConfig& config) {
  if (config.block_tokens == 0)
    return Status::InvalidArgument("block tokens must be > 0");
  std::unique_ptr<ReplayTiers> t(new ReplayTiers());
  t->payload_bytes_ = uint64_t{config.block_tokens} * config.bytes_per_token;
  const uint64_t hot_bytes =
      CapacityBytes(config.hot, config.block_tokens, HotEntryCharge(t->payload_bytes_));
  const uint64_t ssd_bytes =
      CapacityBytes(config.ssd, config.block_tokens, t->payload_bytes_);
  const bool hot_on = !config.hot.off() && hot_bytes > 0;
  const bool ssd_sized = config.ssd.tokens.has_value() || config.ssd.bytes.has_value();
  // Without a directory an unsized SSD tier is simply absent.
  const bool ssd_on =
      !config.ssd.off() && ssd_bytes > 0 && (ssd_sized || !config.ssd_path.empty());
  if (!hot_on && !ssd_on) return Status::InvalidArgument("both tiers are off");
  if (ssd_on && config.ssd_path.empty())
    return Status::InvalidArgument("the SSD tier needs a directory");
  EngineOptions o;
  o.hot_capacity_bytes = hot_on ? hot_bytes : 0;
  o.hot_policy = config.policy;
  o.data_dir = ssd_on ? config.ssd_path : "";
  o.ssd_capacity_bytes = ssd_bytes;
  o.ssd_policy = config.ssd_policy;
  o.durability = SsdDurability::kFlush;  // a replay measures hit ratios, not crash safety
  o.promote_on_ssd_hit = config.promote_on_ssd_hit;
  o.ssd_admission = config.ssd_admission;
  o.ssd_write_budget_bytes_per_day = config.ssd_write_budget_bytes_per_day;
  // Budgeted: a day is a day of the trace. Else the system clock, as before.
  if (config.ssd_admission == SsdAdmissionKind::kBudget) {
    o.clock = &t->trace_clock_;
    t->trace_clock_used_ = true;
  }
  o.advisor_max_keys = config.advisor_max_keys;
  o.advisor_half_life_seconds = config.advisor_half_life_seconds;
  o.log = [](std::string_view) {};
  o.remote = config.remote;
  o.remote_write = config.remote_write;
  o.remote_timeout_ms = config.remote_timeout_ms;
  o.remote_limits.ttl_seconds = config.remote_ttl_seconds;
  o.remote_limits.max_bytes = config.remote_max_bytes;
  // No event log: a routed replay feeds its router from on_kv_event (the
  // tiers' events, unnumbered), and nothing else reads events; a log would
  // cost every node RAM, files and a writer thread.
  o.event_log = false;
  o.on_kv_event = config.on_kv_event;
  EngineHooks hooks;
  hooks.remote_store_factory = config.remote_store_factory;
  hooks.configure_remote = [prefix = config.remote_key_prefix](RemoteTierOptions& r) {
    r.key_prefix = prefix;
    // A replay writes faster than a server: a deep queue so that blocks are
    // not dropped (Flush at the end of each node's request drains it).
    r.queue_blocks = 1 << 16;
  };
  PKV_ASSIGN_OR_RETURN(t->engine_, OpenEngine(o, std::move(hooks)));
  t->unlikely_reuse_after_output_tokens_ = config.unlikely_reuse_after_output_tokens;
  // The trace's blocks live in one model's namespace; its layout only names
  // the chains (payloads are synthetic and never decoded).
  NamespaceSpec spec;
  spec.model = "replay";
  spec.block_tokens = config.block_tokens;
  spec.layer_types = {"KVCache"};
  PKV_ASSIGN_OR_RETURN(t->ns_, t->engine_->RegisterModel(spec));
  return t;
}

ReplayTiers::~ReplayTiers() = default;

Status ReplayTiers::AdvanceTraceClock(uint64_t timestamp_ms) {
  constexpr uint64_t kNanosPerMilli = 1'000'000;
  if (timestamp_ms > UINT64_MAX / kNanosPerMilli) {
    if (!trace_clock_used_) return Status::OK();  // nothing reads the time
    return Status::InvalidArgument(
        "trace timestamp " + std::to_string(timestamp_ms) +
        " ms is past the clock of --ssd-admission budget (2^64 ns, " +
        std::to_string(UINT64_MAX / kNanosPerMilli) +
        " ms): timestamps are milliseconds (a microsecond or nanosecond trace?)");
  }
  const uint64_t nanos = timestamp_ms * kNanosPerMilli;
  if (nanos > trace_clock_.NowNanos()) trace_clock_.SetNanos(nanos);
  return Status::OK();
}

TierStack& ReplayTiers::stack() { return *EngineTiers(*engine_, ns_); }
HotTier* ReplayTiers::hot() { return EngineHotTier(*engine_, ns_); }
SsdTier* ReplayTiers::ssd() { return EngineSsdTier(*engine_); }
RemoteTier* ReplayTiers::remote() { return EngineRemoteTier(*engine_); }

TraceReplayer::TraceReplayer(ReplayTiers* tiers, uint32_t block_tokens, Clock* clock)
    : TraceReplayer(std::vector<ReplayTiers*>{tiers}, block_tokens, clock) {}

TraceReplayer::TraceReplayer(std::vector<ReplayTiers*> nodes, uint32_t block_tokens,
                             Clock* clock)
    : nodes_(std::move(nodes)),
      block_tokens_(block_tokens),
      clock_(clock),
      root_(nodes_.front()->root()) {
  uint8_t* out = nullptr;
  payload_ = SharedBytes::Allocate(nodes_.front()->payload_bytes(), &out);
  std::fill(out, out + nodes_.front()->payload_bytes(), uint8_t{0x5A});
}

Status TraceReplayer::Replay(const TraceRequest& request) {
  const size_t n = request.hash_ids.size();
  keys_.resize(n);
  BlockKey parent = root_;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = request.hash_ids[i];
    const int32_t tokens[2] = {static_cast<int32_t>(id & 0xFFFFFFFFu),
                               static_cast<int32_t>(id >> 32)};
    parent = keys_[i] = ChainKey(parent, tokens);
  }
  const size_t node_index = chooser_ ? chooser_(request, keys_) % nodes_.size()
                                     : report_.requests % nodes_.size();
  ReplayTiers& node = *nodes_[node_index];
  PKV_RETURN_IF_ERROR(node.AdvanceTraceClock(request.timestamp_ms));
  TierStack& stack = node.stack();
  // The namespace owner's read: its misses and the advisor's block weight.
  // Without a hot tier every owner is 0 (no budget registers them).
  const TierRead read{.owner = node.hot() != nullptr ? node.hot()->owner() : OwnerId{0}};
  size_t hit = 0;
  for (; hit < n; ++hit) {
    StatusOr<TierHit> h = stack.Get(keys_[hit], read);
    if (!h.ok()) break;
    if (h->level == TierLevel::kRemote) {
      ++remote_hits_;
      const BlockMeta meta{keys_[hit], hit == 0 ? root_ : keys_[hit - 1], root_, 0};
      Status s = stack.Promote(meta, h->payload);
      if (!s.ok() && !s.IsNoSpace()) return s;
      continue;
    }
    ++(h->level == TierLevel::kHot ? hot_hits_ : ssd_hits_);
  }
  const std::optional<uint64_t> hint_after = node.unlikely_reuse_after_output_tokens();
  const bool unlikely = hint_after && request.output_length > *hint_after;
  for (size_t i = hit; i < n; ++i) {
    const BlockMeta meta{keys_[i], i == 0 ? root_ : keys_[i - 1], root_, 0};
    // As Engine::Store, the hint covers the blocks the request writes, not
    // one still resident past its first miss.
    const bool hint = unlikely && !stack.Contains(keys_[i]);
    Status s = stack.Put(meta, payload_);
    // NoSpace: the block does not fit any tier (a capacity below one block).
    if (!s.ok() && !s.IsNoSpace()) return s;
    if (hint && s.ok() && stack.HintUnlikelyReuse(keys_[i])) ++report_.hinted_blocks;
  }
  ++report_.requests;
  report_.blocks += n;
  report_.hit_blocks += hit;
  report_.input_tokens += request.input_length;
  const uint64_t hit_tokens =
      std::min<uint64_t>(uint64_t{hit} * block_tokens_, request.input_length);
  report_.hit_tokens += hit_tokens;
  report_.AddPrefillCost(hit_tokens, request.input_length);
  if (done_) done_(node_index, request, hit);
  // The next request may go to another node: this one's spills must be
  // visible there, as they would be a moment later in a real deployment.
  if (RemoteTier* remote = node.remote(); remote != nullptr && nodes_.size() > 1) {
    remote->Flush();
  }
  return Status::OK();
}

Status TraceReplayer::ReplayAll(const std::vector<TraceRequest>& requests,
                                const std::function<void(size_t, size_t)>& progress) {
  const uint64_t start = clock_->NowNanos();
  for (size_t i = 0; i < requests.size(); ++i) {
    PKV_RETURN_IF_ERROR(Replay(requests[i]));
    if (progress && (i % 256 == 0 || i + 1 == requests.size()))
      progress(i + 1, requests.size());
  }
  report_.seconds += static_cast<double>(clock_->NowNanos() - start) * 1e-9;
  // The SSD tiers' counters include every block evicted to them: without
  // this, the blocks still queued for write-back were missing from the
  // report, a different number each run.
  for (ReplayTiers* node : nodes_) {
    if (SsdTier* ssd = node->ssd(); ssd != nullptr) PKV_RETURN_IF_ERROR(ssd->Flush());
  }
  return Status::OK();
}

ReplayReport TraceReplayer::Report() const {
  ReplayReport r = report_;
  auto add = [&](const std::string& name, BlockTier* (*tier_of)(ReplayTiers&),
                 uint64_t hits) {
    ReplayTierReport t{name, hits, 0, 0, 0};
    bool present = false;
    for (ReplayTiers* node : nodes_) {
      BlockTier* tier = tier_of(*node);
      if (tier == nullptr) continue;
      present = true;
      const TierCounters c = tier->Totals();
      t.bytes += c.bytes;
      t.entries += c.entries;
      t.evictions += c.evictions;
    }
    if (present) r.tiers.push_back(t);
  };
  add(
      "hot", [](ReplayTiers& n) -> BlockTier* { return n.hot(); }, hot_hits_);
  add(
      "ssd", [](ReplayTiers& n) -> BlockTier* { return n.ssd(); }, ssd_hits_);
  add(
      "remote", [](ReplayTiers& n) -> BlockTier* { return n.remote(); }, remote_hits_);
  r.ssd_hit_blocks = ssd_hits_;
  for (ReplayTiers* node : nodes_) {
    const EngineStats s = node->stats();
    r.ssd_segment_bytes_written += s.ssd_bytes_written;
    const SsdAdmissionCounters& a = s.ssd_admission_counters;
    r.ssd_admission.written_blocks += a.written_blocks;
    r.ssd_admission.written_bytes += a.written_bytes;
    r.ssd_admission.forced_blocks += a.forced_blocks;
    r.ssd_admission.skipped_blocks += a.skipped_blocks;
    r.ssd_admission.skipped_bytes += a.skipped_bytes;
  }
  return r;
}

}  // namespace prefixkv::replay
