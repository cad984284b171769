#include "prefixkv/latency_histogram.h"

#include <algorithm>

namespace prefixkv {

void LatencyRecorder::Record(uint64_t micros) {
  const auto& bounds = LatencyHistogram::kBucketBoundsMicros;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds.begin(), bounds.end(), micros) - bounds.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(micros, std::memory_order_relaxed);
}

LatencyHistogram LatencyRecorder::Snapshot() const {
  LatencyHistogram s;
  for (size_t i = 0; i < counts_.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  }
  s.sum_micros = sum_micros_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace prefixkv
