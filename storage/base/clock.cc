// The steady system clock behind Clock::System().
#include "prefixkv/clock.h"

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

Clock* Clock::System() {
  static SteadyClock* clock = new SteadyClock();  // never destroyed: usable at exit
  return clock;
}

}  // namespace prefixkv
