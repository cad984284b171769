// WearMeter: the SSD tier's write rate over a sliding window of clock time,
// from the running byte total sampled whenever stats are read (docs/ssd.md,
// "Wear"). Samples are kept at most window/16 apart, so the window is exact
// to a sixteenth; the rate is measured since the first sample while the
// meter is younger than the window.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "prefixkv/advanced/mutex.h"

namespace prefixkv::internal {

// Thread-safe.
class WearMeter {
 public:
  // REQUIRES: window_nanos > 0.
  WearMeter(uint64_t window_nanos, uint64_t now_nanos, uint64_t total_bytes);
  // Records `total_bytes` written by `now_nanos` (never less than an earlier
  // total) and returns the bytes per day over the window: 0 while no clock
  // time has passed.
  double Observe(uint64_t now_nanos, uint64_t total_bytes) EXCLUDES(mu_);

 private:
  const uint64_t window_nanos_;
  Mutex mu_;
  std::deque<std::pair<uint64_t, uint64_t>> samples_ GUARDED_BY(mu_);  // (time, total)
};

// Days until `endurance_bytes` are written at `bytes_per_day`; 0 when either
// is unknown (zero).
double ProjectedLifetimeDays(uint64_t endurance_bytes, double bytes_per_day);

}  // namespace prefixkv::internal
