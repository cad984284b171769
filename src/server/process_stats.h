// The standard Prometheus process metrics (process_cpu_seconds_total,
// process_open_fds, process_max_fds, process_virtual_memory_bytes,
// process_resident_memory_bytes, process_start_time_seconds) of the running
// process, read from /proc as the Prometheus client libraries read them
// (docs/metrics.md, "Process metrics").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "prefixkv/status.h"

namespace prefixkv::server {

struct ProcessStats {
  double cpu_seconds = 0;              // user + system CPU time (utime + stime)
  uint64_t open_fds = 0;               // entries of /proc/self/fd
  uint64_t max_fds = 0;                // soft RLIMIT_NOFILE
  uint64_t virtual_memory_bytes = 0;   // vsize
  uint64_t resident_memory_bytes = 0;  // rss pages * page size
  double start_time_seconds = 0;       // since the Unix epoch: btime + starttime
};

// The fields of /proc/<pid>/stat (`stat`) and the boot time line of
// /proc/stat (`proc_stat`, "btime N") that ProcessStats takes, with the
// clock ticks per second and the page size. Corruption naming what is
// missing or malformed. Pure: tests give it crafted texts.
StatusOr<ProcessStats> ParseProcessStat(std::string_view stat, std::string_view proc_stat,
                                        uint64_t ticks_per_second, uint64_t page_bytes);

// Entries of /proc/self/fd: the descriptors this process holds. IOError
// without /proc.
StatusOr<uint64_t> CountOpenFds();

// This process's stats from /proc/self/stat, /proc/stat, /proc/self/fd and
// getrlimit. IOError when /proc cannot be read (not Linux, no /proc mounted).
StatusOr<ProcessStats> ReadProcessStats();

}  // namespace prefixkv::server
