// A tier's counters (TierCounters) as named fields: one table for every place
// that shows, sums or checks them: INFO's "# Tier_hot" / "# Tier_ssd" sections
// and "# Owners" lines, PKV.STATS, the prefixkv_tier_* and prefixkv_owner_*
// Prometheus families (docs/metrics.md), Python's Engine.stats()["hot"] /
// ["ssd"], the audits' findings and the SSD tier's counter record
// (docs/ssd.md). A counter is added here once and shown everywhere.
//
// Two naming schemes, both driven by this table: `name` is the INFO /
// PKV.STATS / Python / audit name ("entries", "corruptions"), `metric` the
// Prometheus suffix ("blocks", "checksum_failures_total").
#pragma once

#include <cstdint>
#include <iterator>

#include "prefixkv/tier_types.h"

namespace prefixkv {

struct TierCounterField {
  const char* name;    // INFO / PKV.STATS / Python / audit field
  const char* metric;  // prefixkv_tier_<metric> and prefixkv_owner_<metric>
  uint64_t TierCounters::*field;
  bool counter;      // false: a gauge
  const char* help;  // the families' HELP, before ", whole tier" / ", per owner ..."
};

// In TierCounters' declaration order, which is INFO's and PKV.STATS' order
// and (the first kTierCounterRecordFields rows) the SSD counter record's. The
// metrics write the gauges first, then the counters, each in this order.
inline constexpr TierCounterField kTierCounterFields[] = {
    {"entries", "blocks", &TierCounters::entries, false, "Blocks resident"},
    {"bytes", "bytes", &TierCounters::bytes, false,
     "Charged bytes of resident blocks plus external charges (hot: payload and "
     "per-entry overhead; ssd: payload)"},
    {"pinned_bytes", "pinned_bytes", &TierCounters::pinned_bytes, false,
     "Charged bytes of blocks pinned by readers (hot)"},
    {"hits", "hits_total", &TierCounters::hits, true, "Reads that found the block"},
    {"misses", "misses_total", &TierCounters::misses, true,
     "Reads that did not find the block (damaged blocks included)"},
    {"inserts", "inserts_total", &TierCounters::inserts, true,
     "Blocks stored, new or replacing one"},
    {"removes", "removes_total", &TierCounters::removes, true,
     "Blocks removed explicitly"},
    {"evictions", "evictions_total", &TierCounters::evictions, true,
     "Blocks removed to make room"},
    {"spills", "spills_total", &TierCounters::spills, true,
     "Evicted blocks handed to the next tier (hot: to the SSD write-back)"},
    {"corruptions", "checksum_failures_total", &TierCounters::corruptions, true,
     "Blocks that failed their checksum or decoding when read"},
    {"io_errors", "io_errors_total", &TierCounters::io_errors, true,
     "Failed reads or writes of the medium"},
    {"external_bytes", "external_bytes", &TierCounters::external_bytes, false,
     "Bytes charged for memory held outside the blocks, such as live sessions' KV "
     "(hot)"},
};

// Every field of TierCounters is in the table: a counter added there without
// a row here fails to compile.
static_assert(sizeof(TierCounters) == sizeof(uint64_t) * std::size(kTierCounterFields));

// The SSD tier's persisted counter record holds the rows before
// external_bytes (always 0 in that tier); its layout is a disk format
// (docs/ssd.md), so a new row goes after external_bytes, not before.
inline constexpr size_t kTierCounterRecordFields = 11;
static_assert(kTierCounterFields[kTierCounterRecordFields].field ==
              &TierCounters::external_bytes);

// Adds every counter of `c` to `*into` (unsigned: wraps on overflow).
inline void AddTierCounters(TierCounters* into, const TierCounters& c) {
  for (const TierCounterField& f : kTierCounterFields) into->*f.field += c.*f.field;
}

}  // namespace prefixkv
