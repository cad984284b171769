// Helpers for `prefixkv bench` suites: repeat a measurement and take the median,
// and keep the optimiser from deleting measured work.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "prefixkv/clock.h"

namespace prefixkv::cli {

// Runs `fn` `repeats` times and returns the median wall time in seconds.
inline double MedianSeconds(int repeats, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    uint64_t start = Clock::System()->NowNanos();
    fn();
    t.push_back(static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename T>
inline void DoNotOptimize(T const& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace prefixkv::cli
