// The capacity advisor's sampled LRU recency (capacity_advisor.h): a map of
// sampled hashes to stamps, and a Fenwick tree counting the live stamps, so a
// reuse distance is one prefix sum.
#include "prefixkv/advanced/capacity_advisor.h"

#include <algorithm>
#include <cmath>

namespace prefixkv {
namespace {

// Distances below kLinear blocks have one bucket per block (exact for small
// caches); above, kBucketsPerDoubling per doubling (about 2% apart).
constexpr size_t kLinear = 256;
constexpr int kBucketsPerDoubling = 32;
constexpr size_t kBuckets = kLinear + kBucketsPerDoubling * 40;

double Rate(uint64_t threshold) {
  return threshold == ~uint64_t{0} ? 1.0
                                   : std::ldexp(static_cast<double>(threshold), -64);
}
// Bucket b holds distances in [Lower(b), Lower(b + 1)).
double Lower(size_t b) {
  if (b <= kLinear) return static_cast<double>(b);
  return kLinear * std::exp2(static_cast<double>(b - kLinear) / kBucketsPerDoubling);
}
size_t BucketOf(double distance) {
  if (distance < kLinear) return static_cast<size_t>(distance);
  const double b = std::floor(std::log2(distance / kLinear) * kBucketsPerDoubling);
  return std::min(kLinear + static_cast<size_t>(b), kBuckets - 1);
}

uint64_t ThresholdOf(double max_rate) {
  if (!(max_rate > 0) || max_rate >= 1) return ~uint64_t{0};
  return static_cast<uint64_t>(std::ldexp(max_rate, 64));
}

constexpr uint64_t kNanosPerSecond = 1'000'000'000;

// `factor` x `value` rounded, saturated at UINT64_MAX: an estimated size past
// 2^63 (an SSD of 2^62 bytes, a replay's unlimited tier, at 2x to 8x) went
// through llround, which has no such value (undefined; 2^63 came out).
uint64_t Scaled(double factor, uint64_t value) {
  const double v = std::round(factor * static_cast<double>(value));
  if (!(v > 0)) return 0;
  return v >= 18446744073709551616.0 ? UINT64_MAX : static_cast<uint64_t>(v);
}

}  // namespace

CapacityAdvisor::CapacityAdvisor(CapacityAdvisorOptions options)
    : options_([&] {
        options.max_keys = std::clamp<uint32_t>(options.max_keys, 1, kMaxAdvisorKeys);
        return std::move(options);
      }()),
      clock_(options_.clock != nullptr ? options_.clock : Clock::System()),
      threshold_(ThresholdOf(options_.max_rate)) {
  MutexLock lock(&mu_);
  decayed_at_nanos_ = clock_->NowNanos();
  const size_t slots = 2 * size_t{options_.max_keys} + 2;
  owner_.assign(slots, 0);
  fenwick_.assign(slots, 0);
  histogram_.assign(kBuckets, 0);
  table_bits_ = 4;  // grows to 2 * max_keys slots at most
  while ((size_t{1} << table_bits_) <
         2 * size_t{std::min<uint32_t>(options_.max_keys, 512)})
    ++table_bits_;
  keys_.assign(size_t{1} << table_bits_, Slot{});
}

void CapacityAdvisor::SetCapacities(uint64_t hot_bytes, uint64_t hot_blocks,
                                    uint64_t ssd_bytes, uint64_t ssd_blocks) {
  MutexLock lock(&mu_);
  hot_bytes_ = hot_bytes;
  hot_blocks_ = hot_blocks;
  ssd_bytes_ = ssd_bytes;
  ssd_blocks_ = ssd_blocks;
}

void CapacityAdvisor::OnGet(const BlockKey& key, bool hit, uint32_t tokens) {
  MutexLock lock(&mu_);
  Reference(HashOf(key), /*put=*/false, !hit, tokens);
}

void CapacityAdvisor::OnPut(const BlockKey& key, uint32_t tokens) {
  MutexLock lock(&mu_);
  Reference(HashOf(key), /*put=*/true, false, tokens);
}

void CapacityAdvisor::Reference(uint64_t hash, bool put, bool missed_get,
                                uint32_t tokens) {
  const uint64_t threshold = threshold_.load(std::memory_order_relaxed);
  if (hash >= threshold) return;  // dropped from the sample meanwhile
  hash = Nonzero(hash);           // 0 marks a free slot and stamp
  bool inserted = false;
  Entry& entry = FindOrInsert(hash, &inserted);  // one lookup per reference
  // A Put after a Get that missed is that Get's reference, not a new one.
  if (!put || inserted || !entry.missed_get) {
    Decay();
    // Each reference stands for 1/R references of the whole traffic: counted
    // at the rate of its time, so a period sampled at a higher rate (the
    // start, before the sample filled up) does not weigh more.
    const double rate = Rate(threshold);
    const double weight = tokens / rate;
    ++references_;
    raw_tokens_ += tokens;
    total_tokens_ += weight;
    if (inserted) {
      cold_tokens_ += weight;
    } else {
      // Every remembered block has one live stamp: those after this one's.
      const int64_t newer = static_cast<int64_t>(size_) - FenwickSum(entry.stamp);
      histogram_[BucketOf(static_cast<double>(newer) / rate)] += weight;
    }
  }
  entry.missed_get = missed_get;
  if (inserted) largest_.push(hash);
  Touch(entry, hash);
  if (inserted && size_ > options_.max_keys) Shrink();
}

size_t CapacityAdvisor::Home(uint64_t hash) const {
  // Sampled hashes are below the threshold (their top bits are zero): mix.
  return static_cast<size_t>((hash * 0x9E3779B97F4A7C15ull) >> (64 - table_bits_));
}

CapacityAdvisor::Entry& CapacityAdvisor::FindOrInsert(uint64_t hash, bool* inserted) {
  hash = Nonzero(hash);
  const size_t mask = keys_.size() - 1;
  for (size_t i = Home(hash);; i = (i + 1) & mask) {
    if (keys_[i].hash == hash) {
      *inserted = false;
      return keys_[i].e;
    }
    if (keys_[i].hash != 0) continue;
    if (2 * (size_ + 1) <= keys_.size()) {
      *inserted = true;
      ++size_;
      keys_[i].hash = hash;
      return keys_[i].e;
    }
    // At half full: double, rehash, insert again.
    std::vector<Slot> old(size_t{1} << ++table_bits_);
    old.swap(keys_);
    const size_t m = keys_.size() - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t j = Home(s.hash);
      while (keys_[j].hash != 0) j = (j + 1) & m;
      keys_[j] = s;
    }
    return FindOrInsert(hash, inserted);
  }
}

CapacityAdvisor::Entry* CapacityAdvisor::Find(uint64_t hash) {
  hash = Nonzero(hash);
  const size_t mask = keys_.size() - 1;
  for (size_t i = Home(hash); keys_[i].hash != 0; i = (i + 1) & mask) {
    if (keys_[i].hash == hash) return &keys_[i].e;
  }
  return nullptr;
}

// Backward-shift deletion: later slots of the probe run move up when their
// home is not between the hole and them, so no tombstones are needed.
void CapacityAdvisor::Erase(uint64_t hash) {
  hash = Nonzero(hash);
  const size_t mask = keys_.size() - 1;
  size_t hole = Home(hash);
  while (keys_[hole].hash != hash) {
    if (keys_[hole].hash == 0) return;
    hole = (hole + 1) & mask;
  }
  for (size_t j = (hole + 1) & mask; keys_[j].hash != 0; j = (j + 1) & mask) {
    const size_t home = Home(keys_[j].hash);
    // Stays when its home lies cyclically in (hole, j].
    const bool stays = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (stays) continue;
    keys_[hole] = keys_[j];
    hole = j;
  }
  keys_[hole] = Slot{};
  --size_;
}

void CapacityAdvisor::Decay() {
  if (options_.half_life_seconds == 0) return;
  const uint64_t half_life = options_.half_life_seconds * kNanosPerSecond;
  const uint64_t now = clock_->NowNanos();
  if (now < decayed_at_nanos_ + half_life) return;
  const uint64_t halvings = (now - decayed_at_nanos_) / half_life;
  decayed_at_nanos_ += halvings * half_life;
  const double f = std::exp2(-static_cast<double>(std::min<uint64_t>(halvings, 2000)));
  const uint64_t all = AllTokens();
  all_decayed_ = (all_decayed_ + static_cast<double>(all - all_at_decay_)) * f;
  all_at_decay_ = all;
  for (double& h : histogram_) h *= f;
  cold_tokens_ *= f;
  total_tokens_ *= f;
}

void CapacityAdvisor::Touch(Entry& e, uint64_t hash) {
  if (e.stamp != 0) {
    owner_[e.stamp] = 0;
    FenwickAdd(e.stamp, -1);
  }
  if (next_stamp_ >= owner_.size()) Compact();
  e.stamp = next_stamp_++;
  owner_[e.stamp] = hash;
  FenwickAdd(e.stamp, 1);
}

void CapacityAdvisor::Shrink() {
  while (size_ > options_.max_keys) {
    const uint64_t hash = largest_.top();
    largest_.pop();
    const uint32_t stamp = Find(hash)->stamp;
    owner_[stamp] = 0;
    FenwickAdd(stamp, -1);
    threshold_.store(hash, std::memory_order_relaxed);
    Erase(hash);
  }
}

// Renumbers the live stamps 1..n in their order (the stamps run out every
// max_keys references or so).
void CapacityAdvisor::Compact() {
  std::vector<uint64_t> live;
  live.reserve(size_);
  for (size_t s = 1; s < owner_.size(); ++s) {
    if (owner_[s] != 0) live.push_back(owner_[s]);
  }
  std::fill(owner_.begin(), owner_.end(), 0);
  std::fill(fenwick_.begin(), fenwick_.end(), 0);
  next_stamp_ = 1;
  for (uint64_t hash : live) {
    const uint32_t s = next_stamp_++;
    Find(hash)->stamp = s;
    owner_[s] = hash;
    FenwickAdd(s, 1);
  }
}

void CapacityAdvisor::FenwickAdd(uint32_t i, int64_t d) {
  for (; i < fenwick_.size(); i += i & (~i + 1)) fenwick_[i] += d;
}

int64_t CapacityAdvisor::FenwickSum(uint32_t i) const {
  int64_t s = 0;
  for (; i > 0; i -= i & (~i + 1)) s += fenwick_[i];
  return s;
}

uint64_t CapacityAdvisor::AllTokens() const {
  uint64_t sum = 0;
  for (const Stripe& s : all_tokens_) sum += s.n.load(std::memory_order_relaxed);
  return sum;
}

double CapacityAdvisor::AllTokensLocked() const {
  return all_decayed_ + static_cast<double>(AllTokens() - all_at_decay_);
}

double CapacityAdvisor::HitRatioAt(double blocks) const {
  MutexLock lock(&mu_);
  return HitRatioAtLocked(blocks);
}

// Tokens whose scaled distance is below `blocks`, interpolating linearly
// inside the bucket that `blocks` falls into; with every reference counted
// (Count), plus the tokens the sample's total misses (or minus those it
// overstates), as hits at the smallest distance, of that count.
double CapacityAdvisor::HitRatioAtLocked(double blocks) const {
  if (total_tokens_ <= 0) return 0;
  const double all = AllTokensLocked();
  double hit = 0;
  for (size_t b = 0; b < histogram_.size(); ++b) {
    const double lo = Lower(b), hi = Lower(b + 1);
    if (hi <= blocks) {
      hit += histogram_[b];
    } else {
      if (lo < blocks) hit += histogram_[b] * (blocks - lo) / (hi - lo);
      break;
    }
  }
  if (all <= 0 || blocks < 1) return hit / total_tokens_;
  return std::clamp((hit + all - total_tokens_) / all, 0.0, 1.0);
}

AdvisorReport CapacityAdvisor::Report() const {
  MutexLock lock(&mu_);
  AdvisorReport r;
  r.sampling_rate = Rate(threshold_.load(std::memory_order_relaxed));
  r.sampled_keys = size_;
  r.memory_bytes = keys_.size() * sizeof(Slot) + size_ * sizeof(uint64_t) +
                   owner_.size() * 16 + histogram_.size() * sizeof(double);
  r.references = references_;
  r.tokens = raw_tokens_;
  auto add = [&](const char* tier, uint64_t bytes, uint64_t blocks,
                 uint64_t base) REQUIRES(mu_) {
    if (blocks == 0) return;
    for (double f : options_.factors) {
      AdvisorPoint p;
      p.tier = tier;
      p.factor = f;
      p.capacity_bytes = Scaled(f, bytes);
      p.capacity_blocks = Scaled(f, blocks);
      p.hit_ratio = HitRatioAtLocked(double(base) + double(p.capacity_blocks));
      r.points.push_back(std::move(p));
    }
  };
  add("hot", hot_bytes_, hot_blocks_, 0);
  add("ssd", ssd_bytes_, ssd_blocks_, hot_blocks_);
  return r;
}

}  // namespace prefixkv
