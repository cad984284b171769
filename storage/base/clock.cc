// The steady system clock behind Clock::System(), and the timed waits of
// Clock and FakeClock.
#include "prefixkv/clock.h"

#include <algorithm>
#include <chrono>

namespace prefixkv {
namespace {

class SteadyClock final : public Clock {
 public:
  uint64_t NowNanos() const override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
};

}  // namespace

uint64_t Clock::UnixMillis() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

bool Clock::WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                    uint64_t timeout_nanos, const std::function<bool()>& done) const {
  // Capped (about 36 years) so that now() + timeout cannot overflow.
  const uint64_t capped = std::min<uint64_t>(timeout_nanos, uint64_t{1} << 60);
  return cv.wait_for(lock, std::chrono::nanoseconds(capped), done);
}

bool FakeClock::WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                        uint64_t timeout_nanos, const std::function<bool()>& done) const {
  const uint64_t now = NowNanos();
  const uint64_t deadline =
      timeout_nanos > UINT64_MAX - now ? UINT64_MAX : now + timeout_nanos;
  while (!done()) {
    if (NowNanos() >= deadline) return done();
    // A short real-time slice: the fake time has no way to wake this thread.
    cv.wait_for(lock, std::chrono::milliseconds(1));
  }
  return true;
}

Clock* Clock::System() {
  static SteadyClock* clock = new SteadyClock();  // never destroyed: usable at exit
  return clock;
}

}  // namespace prefixkv
