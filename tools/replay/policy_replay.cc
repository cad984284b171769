// ReplayWithPolicy (policy_replay.h): one trace replay under a policy named on
// the command line, either a hot-tier eviction policy over a real Engine or
// Belady's offline MIN, which needs the whole trace in advance and so exists
// only in replay. MIN models the hot tier alone: a configuration it cannot
// model (an SSD tier, reuse hints, no hot tier) is InvalidArgument rather than
// a figure that compares unlike things.
#include "policy_replay.h"

#include <limits>

#include "min_replay.h"

namespace prefixkv::replay {
namespace {

constexpr std::string_view kMin = "min";

// The blocks a hot tier of `c` holds (as trace_replay.cc sizes the real one).
uint64_t CapacityBlocks(const ReplayConfig& c) {
  if (c.hot.tokens) return *c.hot.tokens / c.block_tokens;
  const uint64_t charge = HotEntryCharge(uint64_t{c.block_tokens} * c.bytes_per_token);
  if (c.hot.bytes) return *c.hot.bytes / charge;
  return std::numeric_limits<uint64_t>::max();
}

}  // namespace

std::vector<std::string> ReplayPolicyNames() {
  std::vector<std::string> names;
  for (EvictionPolicyKind k : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLeafLru,
                               EvictionPolicyKind::kChain})
    names.emplace_back(EvictionPolicyName(k));
  names.emplace_back(kMin);
  return names;
}

StatusOr<ReplayReport> ReplayWithPolicy(const std::vector<TraceRequest>& requests,
                                        ReplayConfig config, std::string_view policy) {
  if (config.block_tokens == 0)
    return Status::InvalidArgument("block tokens must be > 0");
  if (policy == kMin) {
    const bool ssd = !config.ssd.off() &&
                     (config.ssd.tokens || config.ssd.bytes || !config.ssd_path.empty());
    if (ssd)
      return Status::InvalidArgument(
          "policy min models the hot tier alone: turn the SSD tier off");
    if (config.hot.off()) return Status::InvalidArgument("--policy min needs a hot tier");
    if (config.unlikely_reuse_after_output_tokens)
      return Status::InvalidArgument(
          "policy min takes no reuse hints: it knows the future");
    const uint64_t start = Clock::System()->NowNanos();
    ReplayReport r = ReplayMin(requests, CapacityBlocks(config), config.block_tokens);
    r.seconds = static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9;
    return r;
  }
  PKV_ASSIGN_OR_RETURN(config.policy, ParseEvictionPolicy(policy));
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<ReplayTiers> tiers, ReplayTiers::Open(config));
  TraceReplayer replayer(tiers.get(), config.block_tokens);
  PKV_RETURN_IF_ERROR(replayer.ReplayAll(requests));
  return replayer.Report();
}

}  // namespace prefixkv::replay
