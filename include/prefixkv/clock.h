// Clock: the one seam through which prefixkv reads time.
//
// Nothing in prefixkv calls std::chrono::*::now() directly; TTLs, access order
// and timings go through a Clock so tests advance a FakeClock instead of sleeping.
// Timed waits too: a thread that must wait N milliseconds of clock time (a
// retry interval) waits through Clock::WaitFor, which a FakeClock ends when
// the test advances it past the deadline, not after N real milliseconds.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace prefixkv {

// Thread-safe: every implementation may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in nanoseconds since an arbitrary epoch.
  virtual uint64_t NowNanos() const = 0;
  uint64_t NowMicros() const { return NowNanos() / 1000; }
  uint64_t NowMillis() const { return NowNanos() / 1000000; }
  // Wall-clock time: milliseconds since the Unix epoch, for what must mean the
  // same instant after a restart (a raw key's expiry, Redis' EXPIREAT). May
  // jump when the system time is set. The default reads the system clock.
  virtual uint64_t UnixMillis() const;

  // Waits on `cv` until `done()` returns true (checked before the first wait
  // and after every wakeup) or until `timeout_nanos` of THIS clock's time have
  // passed, whichever is first; returns done(). REQUIRES: `lock` holds the
  // mutex that `cv` is used with; it is held again on return.
  // This default waits in real time (std::condition_variable::wait_for), for
  // the system clock and any clock that follows real time. FakeClock
  // overrides it to end when its time is advanced past the deadline.
  virtual bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                       uint64_t timeout_nanos, const std::function<bool()>& done) const;

  // The process-wide steady clock. Never null, never destroyed.
  static Clock* System();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(uint64_t start_nanos = 1'000'000'000) : now_(start_nanos) {}
  uint64_t NowNanos() const override { return now_.load(std::memory_order_acquire); }
  // The fake time read as Unix time, so that one SetNanos/Advance moves both.
  uint64_t UnixMillis() const override { return NowMillis(); }
  void AdvanceNanos(uint64_t d) { now_.fetch_add(d, std::memory_order_acq_rel); }
  void AdvanceMillis(uint64_t ms) { AdvanceNanos(ms * 1000000); }
  void SetNanos(uint64_t t) { now_.store(t, std::memory_order_release); }

  // Returns once done() or once NowNanos() reached the deadline (call time +
  // timeout_nanos) through AdvanceNanos/SetNanos. A notify of `cv` is seen at
  // once; an advance of the time within about a millisecond of real time (the
  // waiter polls the fake time with a short real-time wait, so no registry of
  // waiters is needed). Never waits out the timeout in real time.
  bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
               uint64_t timeout_nanos, const std::function<bool()>& done) const override;

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace prefixkv
