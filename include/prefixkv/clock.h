// Clock: the one seam through which prefixkv reads time.
//
// Nothing in prefixkv calls std::chrono::*::now() directly; TTLs, access order
// and timings go through a Clock so tests advance a FakeClock instead of sleeping.
#pragma once

#include <atomic>
#include <cstdint>

namespace prefixkv {

// Thread-safe: every implementation may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in nanoseconds since an arbitrary epoch.
  virtual uint64_t NowNanos() const = 0;
  uint64_t NowMicros() const { return NowNanos() / 1000; }
  uint64_t NowMillis() const { return NowNanos() / 1000000; }

  // The process-wide steady clock. Never null, never destroyed.
  static Clock* System();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(uint64_t start_nanos = 1'000'000'000) : now_(start_nanos) {}
  uint64_t NowNanos() const override { return now_.load(std::memory_order_acquire); }
  void AdvanceNanos(uint64_t d) { now_.fetch_add(d, std::memory_order_acq_rel); }
  void AdvanceMillis(uint64_t ms) { AdvanceNanos(ms * 1000000); }
  void SetNanos(uint64_t t) { now_.store(t, std::memory_order_release); }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace prefixkv
