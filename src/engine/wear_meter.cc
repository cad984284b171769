// WearMeter (see wear_meter.h): a deque of (time, total) samples, the oldest
// one at or before the window's start kept as the rate's base.
#include "wear_meter.h"

namespace prefixkv::internal {
namespace {

constexpr double kNanosPerDay = 86400.0 * 1e9;

}  // namespace

WearMeter::WearMeter(uint64_t window_nanos, uint64_t now_nanos, uint64_t total_bytes)
    : window_nanos_(window_nanos) {
  samples_.emplace_back(now_nanos, total_bytes);
}

double WearMeter::Observe(uint64_t now_nanos, uint64_t total_bytes) {
  MutexLock lock(&mu_);
  if (now_nanos >= samples_.back().first + window_nanos_ / 16) {
    samples_.emplace_back(now_nanos, total_bytes);
  }
  // Keep one sample at or before the window's start: the base of the rate.
  const uint64_t start = now_nanos > window_nanos_ ? now_nanos - window_nanos_ : 0;
  while (samples_.size() > 1 && samples_[1].first <= start) samples_.pop_front();
  const auto& [base_nanos, base_bytes] = samples_.front();
  if (now_nanos <= base_nanos || total_bytes < base_bytes) return 0;
  return static_cast<double>(total_bytes - base_bytes) * kNanosPerDay /
         static_cast<double>(now_nanos - base_nanos);
}

double ProjectedLifetimeDays(uint64_t endurance_bytes, double bytes_per_day) {
  if (endurance_bytes == 0 || !(bytes_per_day > 0)) return 0;
  return static_cast<double>(endurance_bytes) / bytes_per_day;
}

}  // namespace prefixkv::internal
