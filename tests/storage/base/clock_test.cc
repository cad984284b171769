// Clock::WaitFor: timed waits in the clock's own time. A FakeClock wait ends
// when the test advances the fake time, never by waiting out real time.
#include "prefixkv/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace prefixkv {
namespace {

constexpr uint64_t kHourNanos = 3600ull * 1000 * 1000 * 1000;

// Real time since `start`, in milliseconds.
int64_t MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now() - start)
      .count();
}

TEST(FakeClockWait, EndsWhenTheFakeTimePassesTheDeadlineNotBefore) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> result{-1};
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    std::unique_lock<std::mutex> lock(mu);
    result = clock.WaitFor(cv, lock, kHourNanos, [] { return false; }) ? 1 : 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  clock.AdvanceNanos(kHourNanos / 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(result, -1) << "half the interval must not end the wait";
  clock.AdvanceNanos(kHourNanos / 2);
  waiter.join();
  EXPECT_EQ(result, 0);  // timed out, in fake time
  EXPECT_LT(MillisSince(start), 10'000) << "an hour of fake time, not of real time";
}

TEST(FakeClockWait, ReturnsAsSoonAsThePredicateHolds) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::thread notifier([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> lock(mu);
    ready = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_TRUE(clock.WaitFor(cv, lock, kHourNanos, [&] { return ready; }));
  lock.unlock();
  notifier.join();
  // A predicate already true returns at once, even with no time to wait.
  lock.lock();
  EXPECT_TRUE(clock.WaitFor(cv, lock, 0, [] { return true; }));
}

TEST(SystemClockWait, TimesOutInRealTime) {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(Clock::System()->WaitFor(cv, lock, 20'000'000, [] { return false; }));
  EXPECT_GE(MillisSince(start), 20);
  // Huge timeouts do not overflow into "already expired".
  bool ready = false;
  std::thread notifier([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> l(mu);
    ready = true;
    cv.notify_all();
  });
  EXPECT_TRUE(Clock::System()->WaitFor(cv, lock, UINT64_MAX, [&] { return ready; }));
  lock.unlock();
  notifier.join();
}

}  // namespace
}  // namespace prefixkv
