// LatencyRecorder: the lock-free side of the latency histograms (the snapshot
// type is in prefixkv/tier_types.h). Every restore and every RESP command
// records one sample on a hot path, so recording is two relaxed atomic adds and
// no lock; a snapshot reads the buckets one by one and may mix a sample in
// flight into the count but not yet the sum, which a figure for humans can
// afford. Sums are kept in nanoseconds so that sub-microsecond calls add up.
#include <algorithm>

#include "prefixkv/tier_types.h"

namespace prefixkv {

void LatencyRecorder::RecordNanos(uint64_t nanos) {
  const auto& bounds = LatencyHistogram::kBucketBoundsMicros;
  // The first bound b with nanos <= b * 1000.
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), nanos,
                                           [](uint64_t bound_micros, uint64_t n) {
                                             return bound_micros * 1000 < n;
                                           }) -
                          bounds.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_nanos_.fetch_add(nanos, std::memory_order_relaxed);
}

LatencyHistogram LatencyRecorder::Snapshot() const {
  LatencyHistogram s;
  for (size_t i = 0; i < counts_.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  }
  s.sum_micros = sum_nanos_.load(std::memory_order_relaxed) / 1000;
  return s;
}

}  // namespace prefixkv
