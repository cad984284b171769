// SteppingClock: a Clock whose every reading moves it `step_nanos` forward,
// so code that reads it once before and once after an operation measures
// exactly one step (when nothing else reads it in between).
#pragma once

#include <atomic>
#include <cstdint>

#include "prefixkv/clock.h"

namespace prefixkv::testing {

class SteppingClock final : public Clock {
 public:
  uint64_t NowNanos() const override {
    return now_.fetch_add(step_nanos.load(), std::memory_order_relaxed);
  }
  std::atomic<uint64_t> step_nanos{0};

 private:
  mutable std::atomic<uint64_t> now_{1'000'000'000};
};

}  // namespace prefixkv::testing
