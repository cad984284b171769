// The remote tier's counters (RemoteCounters) as named fields: one table for
// every place that shows them (INFO tier_remote, PKV.STATS, the Prometheus
// families in docs/metrics.md, Python's Engine.stats()["remote"]), so a new
// counter is added once and shown everywhere.
#pragma once

#include <cstdint>
#include <iterator>

#include "prefixkv/tier_types.h"

namespace prefixkv {

struct RemoteCounterField {
  const char* name;  // INFO / PKV.STATS field; the metric is prefixkv_remote_<metric>
  const char* metric;
  uint64_t RemoteCounters::*field;
  bool counter;  // false: a gauge
  const char* help;
};

inline constexpr RemoteCounterField kRemoteCounterFields[] = {
    {"hits", "hits_total", &RemoteCounters::hits, true,
     "Blocks read back intact from the remote tier"},
    {"misses", "misses_total", &RemoteCounters::misses, true,
     "Remote reads that found no usable block (absent, unreachable or damaged)"},
    {"corruptions", "checksum_failures_total", &RemoteCounters::corruptions, true,
     "Remote values that failed the envelope check or whose record was refused (a miss; "
     "the value is deleted)"},
    {"errors", "errors_total", &RemoteCounters::errors, true,
     "Failed calls to the cluster (timeouts, refused connections, errors)"},
    {"bytes_read", "read_bytes_total", &RemoteCounters::bytes_read, true,
     "Payload bytes of remote hits"},
    {"bytes_written", "written_bytes_total", &RemoteCounters::bytes_written, true,
     "Payload bytes written to the cluster"},
    {"writes", "writes_total", &RemoteCounters::writes, true,
     "Blocks written to the cluster"},
    {"dropped", "dropped_total", &RemoteCounters::dropped, true,
     "Blocks not written: the write queue was full"},
    {"write_failures", "write_failures_total", &RemoteCounters::write_failures, true,
     "Blocks whose write the cluster refused or did not acknowledge (a master down or "
     "out of memory); only those blocks are lost"},
    {"over_quota", "over_quota_total", &RemoteCounters::over_quota, true,
     "Blocks not written: their namespace reached its max bytes"},
    {"rewrites_skipped", "rewrites_skipped_total", &RemoteCounters::rewrites_skipped,
     true, "Evicted blocks not written again: this node read or wrote them recently"},
    {"queued_blocks", "queue_blocks", &RemoteCounters::queued_blocks, false,
     "Blocks waiting in the remote write queue"},
    {"queued_bytes", "queue_bytes", &RemoteCounters::queued_bytes, false,
     "Payload bytes waiting in the remote write queue"},
};

// Every uint64_t of RemoteCounters is in the table (the struct is those
// counters plus `available`): a counter added there without a row here fails
// to compile.
static_assert(sizeof(RemoteCounters) ==
              sizeof(uint64_t) * (std::size(kRemoteCounterFields) + 1));

}  // namespace prefixkv
