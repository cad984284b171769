// The server-wide budget of password checks (see auth_throttle.h).
#include "auth_throttle.h"

#include <algorithm>

namespace prefixkv::server {

namespace {
constexpr uint64_t kOneToken = 1'000'000'000;
}  // namespace

AuthThrottle::AuthThrottle(uint64_t per_second, uint64_t burst, Clock* clock,
                           std::function<void(std::string_view)> log)
    : per_second_(per_second),
      burst_(burst),
      clock_(clock),
      log_(std::move(log)),
      nano_tokens_(burst * kOneToken),
      refilled_at_nanos_(clock->NowNanos()) {}

void AuthThrottle::RefillLocked(uint64_t now_nanos) {
  if (now_nanos <= refilled_at_nanos_) return;
  const uint64_t cap = burst_ * kOneToken;
  // per_second tokens per 10^9 ns: elapsed * per_second nano-tokens. The
  // elapsed time is clamped first so the product cannot overflow.
  const uint64_t elapsed =
      std::min(now_nanos - refilled_at_nanos_, cap / per_second_ + 1);
  nano_tokens_ = std::min(cap, nano_tokens_ + elapsed * per_second_);
  refilled_at_nanos_ = now_nanos;
}

bool AuthThrottle::TryAcquire() {
  const uint64_t now = clock_->NowNanos();
  std::string line;
  {
    MutexLock lock(&mu_);
    RefillLocked(now);
    if (nano_tokens_ >= kOneToken) {
      nano_tokens_ -= kOneToken;
      return true;
    }
    ++refused_since_log_;
    const uint64_t now_ms = now / 1'000'000;
    if (logged_ && now_ms - logged_at_ms_ < kLogIntervalMs) return false;
    line = "prefixkv server: AUTH throttled: more than " + std::to_string(per_second_) +
           " failed AUTH per second (burst " + std::to_string(burst_) +
           ") across all connections; " + std::to_string(refused_since_log_) +
           " attempt(s) refused without checking the password since the last report";
    logged_ = true;
    logged_at_ms_ = now_ms;
    refused_since_log_ = 0;
  }
  if (log_) log_(line);
  return false;
}

void AuthThrottle::Refund() {
  MutexLock lock(&mu_);
  nano_tokens_ = std::min(burst_ * kOneToken, nano_tokens_ + kOneToken);
}

uint64_t AuthThrottle::RetryAfterMs() {
  MutexLock lock(&mu_);
  RefillLocked(clock_->NowNanos());
  if (nano_tokens_ >= kOneToken) return 0;
  const uint64_t missing_nanos =
      (kOneToken - nano_tokens_ + per_second_ - 1) / per_second_;
  return (missing_nanos + 999'999) / 1'000'000;
}

}  // namespace prefixkv::server
