// The one field table of PrefixTokenCounters (tier_types.h: a registered
// model's token-level prefix-cache counters, EngineOwnerStats::prefix_tokens),
// in the style of remote_counter_fields.h: INFO's "# Owners" lines, PKV.STATS
// and the Prometheus families (docs/metrics.md) all iterate
// kPrefixTokenFields, so a counter added here is shown everywhere.
#pragma once

#include <cstdint>
#include <iterator>

#include "prefixkv/tier_types.h"

namespace prefixkv {

struct PrefixTokenField {
  const char* name;    // INFO "# Owners" / PKV.STATS field
  const char* metric;  // the Prometheus family: prefixkv_<metric>
  const char* tier;    // the family's `tier` label value; null: no tier label
  uint64_t PrefixTokenCounters::*field;
  const char* help;  // the family's HELP (the same for every row of a family)
};

inline constexpr PrefixTokenField kPrefixTokenFields[] = {
    {"prefix_query_tokens", "prefix_cache_queries_total", nullptr,
     &PrefixTokenCounters::query_tokens,
     "Prefix cache queries in tokens: tokens asked in a match, per model"},
    {"prefix_hit_tokens", "prefix_cache_hits_total", nullptr,
     &PrefixTokenCounters::hit_tokens,
     "Prefix cache hits in tokens: tokens a match found cached, per model"},
    {"restored_tokens_hot", "restored_tokens_total", "hot",
     &PrefixTokenCounters::restored_tokens_hot,
     "Tokens restored, per model and the tier their blocks came from"},
    {"restored_tokens_ssd", "restored_tokens_total", "ssd",
     &PrefixTokenCounters::restored_tokens_ssd,
     "Tokens restored, per model and the tier their blocks came from"},
    {"restored_tokens_remote", "restored_tokens_total", "remote",
     &PrefixTokenCounters::restored_tokens_remote,
     "Tokens restored, per model and the tier their blocks came from"},
    {"shape_refused_stores", "shape_refused_stores_total", nullptr,
     &PrefixTokenCounters::shape_refused_stores,
     "Stores refused for holding other layer shapes than the model's spec, per model"},
    {"shape_refused_tokens", "shape_refused_tokens_total", nullptr,
     &PrefixTokenCounters::shape_refused_tokens,
     "Matched tokens a restore refused because a block of them held other layer "
     "shapes than the model's spec, per model"},
};

// Every field of PrefixTokenCounters is in the table.
static_assert(sizeof(PrefixTokenCounters) ==
              sizeof(uint64_t) * std::size(kPrefixTokenFields));

}  // namespace prefixkv
