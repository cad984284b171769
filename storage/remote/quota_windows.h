// QuotaWindows: what one node saw of each namespace's quota counter (the
// remote tier's --remote-max-bytes, docs/remote.md "Per-namespace limits"):
// the end of the window the counter counts and the total it last answered.
//
// The counter is a key of the cluster like the blocks, and the cluster may
// lose it inside its window: evicted under maxmemory (volatile-ttl,
// volatile-lru, allkeys-lru, *-random), flushed, on a master restarted
// empty. The next charge then starts a new counter at zero with a new
// window, and the namespace could write its limit again within the window
// it had used up. A charge that finds the counter's window ending later than
// the one this node saw, before that one ended, met such a new counter: the
// lost window held at least the total seen, which the remote tier puts back
// with that window's end. Only a node that saw the window can tell; a node
// that did not charge in it takes the new counter as it is.
//
// Thread-compatible: the remote tier holds its mutex around every call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "prefixkv/block_key.h"

namespace prefixkv::internal {

class QuotaWindows {
 public:
  // A counter's end is known within the time its call took (the cluster read
  // its PTTL somewhere between the call's start and its return); this much
  // more covers PTTL's rounding to milliseconds.
  static constexpr uint64_t kSlackNanos = 5'000'000;

  // One call's answer, timed by the tier's clock.
  struct Answer {
    uint64_t start_nanos = 0, end_nanos = 0;  // the call's
    int64_t total = 0;
    int64_t ttl_ms = -1;  // < 0: not known
  };
  struct Seen {
    uint64_t earliest_end = 0, latest_end = 0;  // the window's, clock time
    int64_t total = 0;
  };

  // The window seen of `ns`, when the counter that answered `a` (a charge)
  // is not that one but a new counter, started before it ended; nullopt when
  // it is the same window, the window seen may have ended by the answer (a
  // counter that expired meanwhile starts the next window), none was seen
  // (or it held nothing), or the time left is not known.
  std::optional<Seen> Lost(const BlockKey& ns, const Answer& a) const {
    auto it = seen_.find(ns);
    if (it == seen_.end() || it->second.total <= 0 || a.ttl_ms < 0) return std::nullopt;
    const Seen& s = it->second;
    if (a.end_nanos >= s.earliest_end) return std::nullopt;
    if (EarliestEnd(a) <= s.latest_end + kSlackNanos) return std::nullopt;
    return s;
  }

  // A charge's (or a put-back's) answer; one whose time left is not known
  // records nothing.
  void Saw(const BlockKey& ns, const Answer& a) {
    if (a.ttl_ms < 0) return;
    seen_[ns] = Seen{EarliestEnd(a), a.end_nanos + Millis(a.ttl_ms), a.total};
  }

  // A refund of `bytes` answered `total`: the counter's total when it still
  // held the window (>= 0); a refund that found it gone (created below zero)
  // takes the bytes off the total seen.
  void Refunded(const BlockKey& ns, int64_t total, uint64_t bytes) {
    auto it = seen_.find(ns);
    if (it == seen_.end()) return;
    int64_t& seen = it->second.total;
    seen = total >= 0 ? total : std::max<int64_t>(0, seen - static_cast<int64_t>(bytes));
  }

 private:
  static uint64_t Millis(int64_t ms) { return static_cast<uint64_t>(ms) * 1000000; }
  static uint64_t EarliestEnd(const Answer& a) {
    return a.start_nanos + Millis(a.ttl_ms);
  }

  std::unordered_map<BlockKey, Seen, BlockKeyHash> seen_;
};

}  // namespace prefixkv::internal
