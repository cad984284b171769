// What the capacity advisor reports (advanced/capacity_advisor.h,
// Engine::AdvisorStats(); docs/eviction.md, "The capacity advisor").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace prefixkv {

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

}  // namespace prefixkv
