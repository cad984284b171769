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
  // first bucket with d <= bound); a last bucket holds the slower ones.
  static constexpr std::array<uint64_t, 14> kBucketBoundsMicros = {
      10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 1000000};
  // Calls per bucket (not cumulative); counts.back(): above the last bound.
  std::array<uint64_t, kBucketBoundsMicros.size() + 1> counts{};
  uint64_t sum_micros = 0;  // total time of the calls counted
  uint64_t count() const {
    uint64_t n = 0;
    for (uint64_t c : counts) n += c;
    return n;
  }
};

// Thread-safe and lock-free: Record may run on many threads at once. A
// Snapshot taken during a Record may see its bucket before its time is in
// sum_micros (each field is exact once the Record has returned).
class LatencyRecorder {
 public:
  void Record(uint64_t micros);
  LatencyHistogram Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, LatencyHistogram::kBucketBoundsMicros.size() + 1>
      counts_{};
  std::atomic<uint64_t> sum_micros_{0};
};

}  // namespace prefixkv
