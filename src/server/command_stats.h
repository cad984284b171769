// CommandStatsRecorder: each RESP command's calls, failures, rejections and
// latency (ServerStats::commands), one slot per Dispatcher::Table() entry.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "prefixkv/server.h"
#include "prefixkv/tier_types.h"

namespace prefixkv::server {

// Thread-safe and lock-free: every connection thread records into it.
class CommandStatsRecorder {
 public:
  CommandStatsRecorder();  // one slot per command of Dispatcher::Table()

  // `index`: the command's position in Dispatcher::Table().
  void Ran(size_t index, uint64_t nanos, bool failed);
  void Rejected(size_t index);

  // In table order, every command (those never called included).
  std::vector<CommandStats> Snapshot() const;

 private:
  struct alignas(64) Slot {  // no two commands share a cache line
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> failed{0};
    std::atomic<uint64_t> rejected{0};
    LatencyRecorder latency;
  };
  const size_t size_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace prefixkv::server
