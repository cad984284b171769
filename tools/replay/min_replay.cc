// Belady's MIN (see min_replay.h): next uses computed backwards in one pass,
// then a forward pass with a max-heap of (next use, block) and lazy deletion:
// O(blocks log blocks).
#include "min_replay.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>

namespace prefixkv::replay {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// splitmix64's finalizer: a well-mixed identity for (parent, id).
uint64_t Mix(uint64_t parent, uint64_t id) {
  uint64_t z = parent * 0x9E3779B97F4A7C15ull + id + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<std::vector<uint64_t>> PrefixIds(const std::vector<TraceRequest>& requests) {
  std::vector<std::vector<uint64_t>> out(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    uint64_t parent = 0;
    for (uint64_t id : requests[r].hash_ids) out[r].push_back(parent = Mix(parent, id));
  }
  return out;
}

ReplayReport ReplayMin(const std::vector<TraceRequest>& requests,
                       uint64_t capacity_blocks, uint32_t block_tokens) {
  const std::vector<std::vector<uint64_t>> ids = PrefixIds(requests);
  // next[r][j]: the next request after r that holds block ids[r][j].
  std::vector<std::vector<uint64_t>> next(ids.size());
  std::unordered_map<uint64_t, uint64_t> later;
  for (size_t r = ids.size(); r-- > 0;) {
    next[r].resize(ids[r].size());
    for (size_t j = 0; j < ids[r].size(); ++j) {
      auto it = later.find(ids[r][j]);
      next[r][j] = it == later.end() ? kNever : it->second;
    }
    for (uint64_t id : ids[r]) later[id] = r;
  }
  ReplayReport report;
  ReplayTierReport tier{"min"};
  std::unordered_map<uint64_t, uint64_t> resident;              // block -> next use
  std::priority_queue<std::pair<uint64_t, uint64_t>> furthest;  // (next use, block)
  auto use = [&](uint64_t id, uint64_t next_use) {
    resident[id] = next_use;
    furthest.emplace(next_use, id);
  };
  for (size_t r = 0; r < ids.size(); ++r) {
    const std::vector<uint64_t>& req = ids[r];
    size_t hit = 0;
    for (; hit < req.size() && resident.contains(req[hit]); ++hit)
      use(req[hit], next[r][hit]);
    for (size_t j = hit; j < req.size(); ++j) {
      use(req[j], next[r][j]);
      while (resident.size() > capacity_blocks) {
        auto [when, victim] = furthest.top();
        furthest.pop();
        auto it = resident.find(victim);
        if (it == resident.end() || it->second != when) continue;  // stale
        resident.erase(it);
        ++tier.evictions;
      }
    }
    ++report.requests;
    report.blocks += req.size();
    report.hit_blocks += hit;
    report.input_tokens += requests[r].input_length;
    const uint64_t hit_tokens =
        std::min<uint64_t>(uint64_t{hit} * block_tokens, requests[r].input_length);
    report.hit_tokens += hit_tokens;
    report.AddPrefillCost(hit_tokens, requests[r].input_length);
  }
  tier.block_hits = report.hit_blocks;
  tier.entries = resident.size();
  report.tiers.push_back(tier);
  return report;
}

}  // namespace prefixkv::replay
