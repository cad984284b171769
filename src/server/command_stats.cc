// CommandStatsRecorder: per-command call, failure, rejection and latency
// counters for INFO commandstats / latencystats and the metrics. One slot per
// entry of the dispatcher's table, allocated once, so recording a command is
// a few relaxed atomic adds on the connection's thread, with no lock and no
// map lookup (command_stats.h).
#include "command_stats.h"

#include <utility>

#include "commands.h"

namespace prefixkv::server {

CommandStatsRecorder::CommandStatsRecorder()
    : size_(Dispatcher::Table().size()), slots_(std::make_unique<Slot[]>(size_)) {}

void CommandStatsRecorder::Ran(size_t index, uint64_t nanos, bool failed) {
  if (index >= size_) return;
  Slot& slot = slots_[index];
  // The call first, then what it is a call of, each published after it
  // (release), and Snapshot loads them in the other order (acquire): a copy
  // never holds a failure or a time whose call it lacks. Loaded in the order
  // they were added, a copy taken while a call was counted showed more failed
  // or timed calls than calls
  // (CommandStatsRecorder.ACopyNeverShowsMoreFailuresOrTimedCallsThanCalls).
  slot.calls.fetch_add(1, std::memory_order_relaxed);
  if (failed) slot.failed.fetch_add(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);  // RecordNanos adds relaxed
  slot.latency.RecordNanos(nanos);
}

void CommandStatsRecorder::Rejected(size_t index) {
  if (index < size_) slots_[index].rejected.fetch_add(1, std::memory_order_relaxed);
}

std::vector<CommandStats> CommandStatsRecorder::Snapshot() const {
  std::vector<CommandStats> out;
  out.reserve(size_);
  const auto& table = Dispatcher::Table();
  for (size_t i = 0; i < size_; ++i) {
    const Slot& slot = slots_[i];
    CommandStats c;
    c.name = table[i].name;
    // The reverse of Ran's order: the times, the failures, then the calls.
    c.latency = slot.latency.Snapshot();
    std::atomic_thread_fence(std::memory_order_acquire);
    c.failed_calls = slot.failed.load(std::memory_order_acquire);
    c.calls = slot.calls.load(std::memory_order_relaxed);
    c.rejected_calls = slot.rejected.load(std::memory_order_relaxed);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace prefixkv::server
