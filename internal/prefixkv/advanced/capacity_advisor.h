// CapacityAdvisor: what hit ratio other RAM and SSD sizes would give, estimated
// live from the traffic (docs/eviction.md, "The capacity advisor").
//
// SHARDS (Waldspurger et al., FAST '15), fixed-size variant: a block is
// sampled when its key's hash is below a threshold T (rate R = T / 2^64); the
// advisor keeps the LRU recency of the sampled blocks only, and a sampled
// reference's reuse distance (distinct sampled blocks since its last
// reference), scaled by 1/R, estimates the block's LRU stack distance among
// all blocks. When more than `max_keys` blocks are sampled, T drops to the
// largest sampled hash and that block is forgotten, so memory stays fixed and
// the rate adapts to the traffic's working set.
//
// Prefix lookups stop at the first miss, yet an estimate is a plain per-block
// count: under LRU a chain's blocks are always referenced parent first, so a
// parent's reuse distance never exceeds its child's, and block i of a request
// is in an LRU cache of C blocks exactly when its own distance is below C.
// The estimate weighs each referenced block by its tokens, as `prefixkv
// replay` counts them.
//
// References (as the TierStack sees them): every Get is one; a Put is one too
// (a block past a request's first miss, which a larger cache would have
// served) unless the block's previous reference was a Get that missed (the
// store that follows a miss is the same reference).
//
// Thread-safe: Sampled() is one relaxed atomic load; the rest takes a mutex,
// and only sampled blocks reach it.
#pragma once

#include <atomic>
#include <cstdint>
#include <queue>
#include <string>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/block.h"
#include "prefixkv/clock.h"
#include "prefixkv/tier_types.h"

namespace prefixkv {

// The largest CapacityAdvisorOptions::max_keys (and EngineOptions::
// advisor_max_keys; Engine::Open refuses more).
inline constexpr uint32_t kMaxAdvisorKeys = uint32_t{1} << 24;

struct CapacityAdvisorOptions {
  // Sampled blocks remembered at most, 1..kMaxAdvisorKeys (about 100 bytes each). Default
  // 32768 (3 MB).
  uint32_t max_keys = 32768;
  // The largest share of block keys sampled, (0, 1]: a small working set is
  // sampled at this rate, not all of it, so the advisor's cost per reference
  // stays near one hash compare on any traffic. Default 1/8
  // (docs/eviction.md, "Cost").
  double max_rate = 0.125;
  // Decay: every `half_life_seconds` of `clock` time the counts so far weigh
  // half, so the estimate follows a traffic shift. 0: no decay (cumulative).
  uint64_t half_life_seconds = 0;
  Clock* clock = nullptr;  // null: Clock::System()
  // Sizes estimated, as multiples of each tier's current capacity.
  std::vector<double> factors = {0.25, 0.5, 1, 2, 4, 8};
};

class CapacityAdvisor {
 public:
  explicit CapacityAdvisor(CapacityAdvisorOptions options = {});
  CapacityAdvisor(const CapacityAdvisor&) = delete;
  CapacityAdvisor& operator=(const CapacityAdvisor&) = delete;

  // The tiers' current capacities, in bytes and in blocks (0 blocks: the tier
  // is absent, no points for it). The SSD tier is estimated with the hot tier
  // at its current size in front of it: a block hits either tier when its
  // distance is below hot + SSD blocks (write-back makes them nearly
  // exclusive).
  void SetCapacities(uint64_t hot_bytes, uint64_t hot_blocks, uint64_t ssd_bytes,
                     uint64_t ssd_blocks);

  // True when `key` is sampled: the caller then reports its reference.
  bool Sampled(const BlockKey& key) const {
    return HashOf(key) < threshold_.load(std::memory_order_relaxed);
  }
  // Every reference's tokens, sampled or not: each Get that hit and each Put
  // (a Get that missed is counted by the Put that follows it). The sample's
  // estimate of the total is corrected by the difference (SHARDS_adj: the
  // difference is hits at the smallest distance), so a few very popular
  // blocks (shared system prompts) that the sample happens to miss or hold do
  // not move the curve. One relaxed add on one of 16 padded counters.
  void Count(const BlockKey& key, uint32_t tokens) {
    all_tokens_[key.lo & (kStripes - 1)].n.fetch_add(tokens, std::memory_order_relaxed);
  }
  // A lookup of `key` (hit: whether the real tiers served it).
  void OnGet(const BlockKey& key, bool hit, uint32_t tokens);
  // A store of `key`.
  void OnPut(const BlockKey& key, uint32_t tokens);

  AdvisorReport Report() const;
  // The estimated token hit ratio of an LRU cache of `blocks` blocks.
  double HitRatioAt(double blocks) const;

  static uint64_t HashOf(const BlockKey& key) {
    return key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull);
  }

 private:
  static constexpr size_t kStripes = 16;
  struct alignas(64) Stripe {
    std::atomic<uint64_t> n{0};
  };
  uint64_t AllTokens() const;
  // The counted tokens of every reference, decayed as the sample's counts are.
  double AllTokensLocked() const REQUIRES(mu_);
  struct Entry {
    uint32_t stamp = 0;       // position in the Fenwick tree
    bool missed_get = false;  // the last reference was a Get that missed
  };
  static uint64_t Nonzero(uint64_t hash) { return hash == 0 ? 1 : hash; }
  void Reference(uint64_t hash, bool put, bool missed_get, uint32_t tokens) REQUIRES(mu_);
  void Touch(Entry& e, uint64_t hash) REQUIRES(mu_);
  void Shrink() REQUIRES(mu_);
  void Compact() REQUIRES(mu_);
  void FenwickAdd(uint32_t i, int64_t d) REQUIRES(mu_);
  int64_t FenwickSum(uint32_t i) const REQUIRES(mu_);  // stamps 1..i
  double HitRatioAtLocked(double blocks) const REQUIRES(mu_);

  // Halves the counts once per half-life passed since the last decay (before
  // a reference adds to them; a ratio of counts does not change by halving
  // both, so Report needs no decay).
  void Decay() REQUIRES(mu_);

  const CapacityAdvisorOptions options_;
  Clock* const clock_;
  std::atomic<uint64_t> threshold_;
  mutable Mutex mu_;
  // The sampled blocks by hash: open addressing, linear probing, backward-
  // shift deletion (one cache line per lookup; a node-based map's lookup was
  // most of the advisor's cost). Hash 0 marks an empty slot (a key hashing
  // to 0 is kept as 1). Grows to twice the sampled keys, at most.
  struct Slot {
    uint64_t hash = 0;
    Entry e;
  };
  size_t Home(uint64_t hash) const REQUIRES(mu_);
  // The key's entry, inserting it (inserted: true) if absent.
  Entry& FindOrInsert(uint64_t hash, bool* inserted) REQUIRES(mu_);
  Entry* Find(uint64_t hash) REQUIRES(mu_);
  void Erase(uint64_t hash) REQUIRES(mu_);
  std::vector<Slot> keys_ GUARDED_BY(mu_);
  size_t size_ GUARDED_BY(mu_) = 0;
  int table_bits_ GUARDED_BY(mu_) = 0;
  std::priority_queue<uint64_t> largest_ GUARDED_BY(mu_);  // keys_' hashes
  std::vector<uint64_t> owner_ GUARDED_BY(mu_);            // stamp -> hash (0: free)
  std::vector<int64_t> fenwick_ GUARDED_BY(mu_);           // 1-based, live stamps
  uint32_t next_stamp_ GUARDED_BY(mu_) = 1;
  // Token-weighted histogram of scaled reuse distances in log buckets
  // (kBucketsPerDoubling per doubling); cold references in `cold_tokens_`.
  std::vector<double> histogram_ GUARDED_BY(mu_);
  double cold_tokens_ GUARDED_BY(mu_) = 0;
  double total_tokens_ GUARDED_BY(mu_) = 0;
  uint64_t references_ GUARDED_BY(mu_) = 0;
  uint64_t raw_tokens_ GUARDED_BY(mu_) = 0;
  uint64_t hot_bytes_ GUARDED_BY(mu_) = 0, hot_blocks_ GUARDED_BY(mu_) = 0;
  uint64_t ssd_bytes_ GUARDED_BY(mu_) = 0, ssd_blocks_ GUARDED_BY(mu_) = 0;
  uint64_t decayed_at_nanos_ GUARDED_BY(mu_) = 0;
  Stripe all_tokens_[kStripes];
  double all_decayed_ GUARDED_BY(mu_) = 0;  // AllTokens() at the last decay, decayed
  uint64_t all_at_decay_ GUARDED_BY(mu_) = 0;
};

}  // namespace prefixkv
