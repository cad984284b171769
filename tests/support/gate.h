// Gate: holds the threads that call Pass() until Open(), and counts them, so a
// test can stop background threads (writers, listeners) at a known point and
// release them together.
#pragma once

#include <condition_variable>
#include <mutex>

namespace prefixkv::testing {

// Thread-safe.
class Gate {
 public:
  // Blocks until Open() has been called (returns at once after it).
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  // Waits until `n` calls of Pass() have arrived (waiting, or through).
  void WaitForArrivals(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return arrived_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  bool open_ = false;
};

}  // namespace prefixkv::testing
