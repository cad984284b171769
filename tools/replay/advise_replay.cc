// Offline capacity advice over a trace (advise_replay.h).
#include "advise_replay.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "prefixkv/block_key.h"
#include "trace_replay.h"

namespace prefixkv::replay {

uint32_t BlockTokens(uint64_t input_length, size_t i, uint32_t block_tokens) {
  const uint64_t start = uint64_t{i} * block_tokens;
  if (start >= input_length) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(block_tokens, input_length - start));
}

AdvisorReport AdviseTrace(const std::vector<TraceRequest>& requests,
                          const AdviseConfig& config) {
  CapacityAdvisor advisor(config.advisor);
  const uint32_t bt = std::max<uint32_t>(config.block_tokens, 1);
  advisor.SetCapacities(config.hot_tokens, config.hot_tokens / bt, config.ssd_tokens,
                        config.ssd_tokens / bt);
  const BlockKey root{0, 1};
  for (const TraceRequest& r : requests) {
    BlockKey parent = root;
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      const uint64_t id = r.hash_ids[i];
      const int32_t tokens[2] = {static_cast<int32_t>(id & 0xFFFFFFFFu),
                                 static_cast<int32_t>(id >> 32)};
      parent = ChainKey(parent, tokens);
      const uint32_t t = BlockTokens(r.input_length, i, bt);
      advisor.Count(parent, t);
      if (advisor.Sampled(parent)) advisor.OnGet(parent, /*hit=*/true, t);
    }
  }
  return advisor.Report();
}

StatusOr<std::vector<double>> ReplayPoints(const std::vector<TraceRequest>& requests,
                                           const AdviseConfig& config,
                                           const AdvisorReport& report,
                                           const std::string& ssd_dir) {
  namespace fs = std::filesystem;
  std::vector<double> ratios;
  for (size_t i = 0; i < report.points.size(); ++i) {
    const AdvisorPoint& p = report.points[i];
    ReplayConfig c;
    c.block_tokens = config.block_tokens;
    c.bytes_per_token = config.bytes_per_token;
    const bool ssd = p.tier == "ssd";
    // A hot point below one block (0.25x of a hot tier under 4 blocks) is a
    // cache of nothing, which hits nothing: opened, its tiers were both off
    // and the whole --check failed ('both tiers are off', exit 1).
    if (!ssd && p.capacity_bytes < config.block_tokens) {
      ratios.push_back(0);
      continue;
    }
    c.hot.tokens = ssd ? config.hot_tokens : p.capacity_bytes;
    c.ssd.tokens = ssd ? p.capacity_bytes : 0;
    const fs::path dir = fs::path(ssd_dir) / ("advise-" + std::to_string(i));
    if (ssd) c.ssd_path = dir.string();
    StatusOr<double> ratio = [&]() -> StatusOr<double> {
      PKV_ASSIGN_OR_RETURN(std::unique_ptr<ReplayTiers> tiers, ReplayTiers::Open(c));
      TraceReplayer replayer(tiers.get(), c.block_tokens);
      PKV_RETURN_IF_ERROR(replayer.ReplayAll(requests));
      return replayer.Report().token_hit_ratio();
    }();
    std::error_code ec;
    if (ssd) fs::remove_all(dir, ec);
    if (!ratio.ok()) return ratio.status();
    ratios.push_back(*ratio);
  }
  return ratios;
}

}  // namespace prefixkv::replay
