// SsdAdmission: which of the hot tier's dirty victims TierStack writes to the
// SSD tier (docs/eviction.md, "SSD admission").
//
// The decision point is TierStack's write-back of an evicted dirty block (the
// stack is the single door between the tiers). Under kAll every victim is
// written, as before admission existed. Under kBudget a token bucket on the
// engine's Clock refills at `budget_bytes_per_day` and holds at most
// `burst_seconds` of it; a victim that does not fit the allowance is skipped
// (and counted) when it may safely stay unwritten, and written (counted as
// forced) otherwise. A write is never blocked. Under kGhost a victim is
// allowed when its key is in the ghost (a fixed table of the hashes of keys
// skipped before, `ghost_keys` slots; a newer key may overwrite an older one
// in its slot): reject first, write when it comes back. Which blocks may be
// skipped is the stack's call (tier_stack.h): never a raw value, only a block
// with no child in RAM or on SSD.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/block.h"
#include "prefixkv/clock.h"
#include "prefixkv/status.h"
#include "prefixkv/tier_types.h"

namespace prefixkv {

// Exact byte-nanosecond arithmetic (a GCC and clang extension).
__extension__ using SsdAdmissionUnits = __int128;

struct SsdAdmissionOptions {
  SsdAdmissionKind kind = SsdAdmissionKind::kAll;
  // kBudget: payload bytes of evicted blocks the SSD tier may take per day of
  // `clock` time. Required > 0 for kBudget, 0 otherwise.
  uint64_t budget_bytes_per_day = 0;
  // The allowance saved up while little is written: at most this many
  // seconds of budget (the bucket starts full). Must be > 0.
  uint64_t burst_seconds = 60;
  Clock* clock = nullptr;  // null: Clock::System()
  // kGhost: slots of the ghost table (8 bytes each). Default 2^17 (1 MB), the
  // blocks of a 64 GB SSD tier of 512 KB blocks.
  uint32_t ghost_keys = uint32_t{1} << 17;
};

// Thread-safe: every method may be called concurrently (one mutex, a leaf).
class SsdAdmission {
 public:
  // InvalidArgument for a budget without kBudget, kBudget without a budget,
  // or no burst.
  static StatusOr<std::unique_ptr<SsdAdmission>> Create(
      const SsdAdmissionOptions& options);

  SsdAdmissionKind kind() const { return options_.kind; }
  const SsdAdmissionOptions& options() const { return options_; }

  // Whether the allowance covers `bytes` now (always under kAll). Changes no
  // counter; the caller then records what it did.
  bool Allows(uint64_t bytes) EXCLUDES(mu_);
  // The same for a victim `key`: under kGhost whether the key is in the ghost
  // (then it leaves the ghost: it is written now).
  bool Allows(const BlockKey& key, uint64_t bytes) EXCLUDES(mu_);
  // A skipped victim: under kGhost its key enters the ghost.
  void RecordSkipped(const BlockKey& key, uint64_t bytes) EXCLUDES(mu_);
  // A victim handed to the SSD tier; it spends its bytes of the allowance
  // (which may go below zero: a forced write is paid back by later refills).
  void RecordWritten(uint64_t bytes, bool forced) EXCLUDES(mu_);
  void RecordSkipped(uint64_t bytes) EXCLUDES(mu_);
  SsdAdmissionCounters Counters() const EXCLUDES(mu_);

 private:
  explicit SsdAdmission(const SsdAdmissionOptions& options);
  void Refill() REQUIRES(mu_);

  const SsdAdmissionOptions options_;
  Clock* const clock_;
  // The allowance in byte-nanoseconds per day: one byte is kNanosPerDay units
  // and a nanosecond refills budget_bytes_per_day units, so the arithmetic is
  // exact in integers.
  const SsdAdmissionUnits capacity_units_;
  mutable Mutex mu_;
  SsdAdmissionUnits units_ GUARDED_BY(mu_);
  uint64_t refilled_at_nanos_ GUARDED_BY(mu_);
  SsdAdmissionCounters counters_ GUARDED_BY(mu_);
  std::vector<uint64_t> ghost_ GUARDED_BY(mu_);  // kGhost: key hashes (0: empty)
};

}  // namespace prefixkv
