// Token-level prefix-cache counters of one registered model
// (EngineOwnerStats::prefix_tokens) and their one field table, in the style
// of remote_counter_fields.h: INFO's "# Owners" lines, PKV.STATS and the
// Prometheus families (docs/metrics.md) all iterate kPrefixTokenFields, so a
// counter added here is shown everywhere.
//
// They count tokens, not blocks, as vLLM's prefix_cache_queries and
// prefix_cache_hits do: a hit rate is hit_tokens / query_tokens.
#pragma once

#include <cstdint>
#include <iterator>

namespace prefixkv {

struct PrefixTokenCounters {
  uint64_t query_tokens = 0;  // tokens asked in Engine::Match (PKV.MATCH)
  uint64_t hit_tokens = 0;    // of those, tokens Match found cached
  // Tokens restored, by the tier each block came from: Engine::Restore's
  // RestoreResult::tokens_from_{hot,ssd,remote}, and the blocks a RESP client
  // read with PKV.GET after its PKV.MATCH (Engine::RecordServedRestore).
  uint64_t restored_tokens_hot = 0;
  uint64_t restored_tokens_ssd = 0;
  uint64_t restored_tokens_remote = 0;
};

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
};

// Every field of PrefixTokenCounters is in the table.
static_assert(sizeof(PrefixTokenCounters) ==
              sizeof(uint64_t) * std::size(kPrefixTokenFields));

}  // namespace prefixkv
