// AuthThrottle: one budget of password checks for the whole server, so that
// guessing from many connections at once is no faster than from one.
//
// A token bucket refilled at `per_second` up to `burst` tokens, by the
// server's Clock. Every AUTH (and HELLO ... AUTH) takes a token before its
// password is compared; a correct password gives it back, so only failures
// spend the budget. With no token left the attempt is refused without the
// password being compared: answering "wrong" or "right" then would let a
// guesser go on at any rate. The cost: while guessers keep the budget empty, a
// client with the right password is refused too until it gets a token (one
// is freed every 1/per_second s, first come first served); it is never locked
// out for longer than the guessers keep going.
//
// Refusals are reported through `log`, at most one line per kLogIntervalMs
// (with how many there were since the last line).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/clock.h"

namespace prefixkv::server {

// Thread-safe.
class AuthThrottle {
 public:
  static constexpr uint64_t kLogIntervalMs = 10'000;

  // REQUIRES: per_second > 0, burst > 0, `clock` outlives the throttle.
  AuthThrottle(uint64_t per_second, uint64_t burst, Clock* clock,
               std::function<void(std::string_view)> log);

  // Takes a token for one password check; false (and the refusal counted and
  // maybe logged) when the budget is spent.
  bool TryAcquire() EXCLUDES(mu_);
  // Gives back the token of a check that succeeded.
  void Refund() EXCLUDES(mu_);
  // Milliseconds until the next token (for the refusal's message).
  uint64_t RetryAfterMs() EXCLUDES(mu_);

 private:
  void RefillLocked(uint64_t now_nanos) REQUIRES(mu_);

  const uint64_t per_second_;
  const uint64_t burst_;
  Clock* const clock_;
  const std::function<void(std::string_view)> log_;
  Mutex mu_;
  // Tokens in billionths (a token is 10^9), so refills are exact integers.
  uint64_t nano_tokens_ GUARDED_BY(mu_);
  uint64_t refilled_at_nanos_ GUARDED_BY(mu_);
  uint64_t refused_since_log_ GUARDED_BY(mu_) = 0;
  uint64_t logged_at_ms_ GUARDED_BY(mu_) = 0;
  bool logged_ GUARDED_BY(mu_) = false;
};

}  // namespace prefixkv::server
