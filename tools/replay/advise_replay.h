// Offline capacity advice (`prefixkv advise TRACE.jsonl`; docs/eviction.md,
// "The capacity advisor"): the live advisor (capacity_advisor.h) fed with a
// trace's block references, each weighed by the tokens it adds to the
// request's prompt, as `prefixkv replay` counts hit tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prefixkv/advanced/capacity_advisor.h"
#include "trace_reader.h"

namespace prefixkv::replay {

struct AdviseConfig {
  uint32_t block_tokens = 512;    // tokens per hash id
  uint64_t hot_tokens = 0;        // current hot tier size (0: no hot points)
  uint64_t ssd_tokens = 0;        // current SSD tier size (0: no SSD points)
  uint64_t bytes_per_token = 16;  // ReplayPoints' synthetic payload per token
  CapacityAdvisorOptions advisor;
};

// The tokens block i adds to a prompt of `input_length` tokens: what a replay
// counts when block i is a hit.
uint32_t BlockTokens(uint64_t input_length, size_t i, uint32_t block_tokens);

// The advisor's estimate after every request of `requests`. Capacities in the
// report are in tokens (capacity_bytes is tokens too).
AdvisorReport AdviseTrace(const std::vector<TraceRequest>& requests,
                          const AdviseConfig& config);

// The token hit ratio of a full replay (lru hot tier, leaf-lru SSD tier) at
// every point of `report`, in its order: a hot point with the hot tier at its
// size and no SSD tier, an SSD point with the hot tier at config.hot_tokens
// and the SSD tier at its size (in a directory under `ssd_dir`, removed
// after). What `prefixkv advise --check` and the accuracy test compare with.
StatusOr<std::vector<double>> ReplayPoints(const std::vector<TraceRequest>& requests,
                                           const AdviseConfig& config,
                                           const AdvisorReport& report,
                                           const std::string& ssd_dir);

}  // namespace prefixkv::replay
