// Latency histograms with fixed buckets: the snapshot type every latency
// figure is reported in (Engine::Restore per model, each RESP command of the
// server), and the lock-free recorder that fills one.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace prefixkv {

struct LatencyHistogram {
  // Upper bounds of the buckets in microseconds (a call of d us lands in the
  // first bucket with d <= bound, d exact to the nanosecond); a last bucket
  // holds the slower ones.
  static constexpr std::array<uint64_t, 14> kBucketBoundsMicros = {
      10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 1000000};
  // Calls per bucket (not cumulative); counts.back(): above the last bound.
  std::array<uint64_t, kBucketBoundsMicros.size() + 1> counts{};
  // Total time of the calls counted, summed in nanoseconds and then rounded
  // down to microseconds (calls shorter than 1 us add up instead of vanishing).
  uint64_t sum_micros = 0;
  uint64_t count() const {
    uint64_t n = 0;
    for (uint64_t c : counts) n += c;
    return n;
  }
};

// Thread-safe and lock-free: RecordNanos may run on many threads at once. A
// Snapshot taken during a RecordNanos may see its bucket before its time is in
// sum_micros (each field is exact once the call has returned).
class LatencyRecorder {
 public:
  void RecordNanos(uint64_t nanos);  // one call that took `nanos`
  LatencyHistogram Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, LatencyHistogram::kBucketBoundsMicros.size() + 1>
      counts_{};
  std::atomic<uint64_t> sum_nanos_{0};
};

}  // namespace prefixkv
