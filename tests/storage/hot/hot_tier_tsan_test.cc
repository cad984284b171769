// Eight threads hammer one SharedHotBudget through three owners' views:
// inserts and replacements, lookups, pins held across other threads'
// evictions, removals, external charges and uncharges (each thread returns
// what it charged), reuse hints, flush-style peeks and clean marks, quota
// changes, listener swaps and audits, while the listeners call back into the
// budget. Run under ThreadSanitizer by `tools/run test`.
// At the end: no wrong byte was ever read, every victim reached its owner's
// listener exactly as counted, the budget total equals the sum of the owners,
// the budget was never exceeded, no charge is left, and Audit() finds nothing.
// The arena the hot tier's blocks live in: callers allocating, writing and
// freeing while the arena's thread faults regions in and maps ahead.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/memory_resource.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr int kThreads = 8;
constexpr int kOwners = 3;  // owner 2 has no listener
constexpr uint64_t kKeys = 64;
constexpr uint64_t kCapacity = 256 << 10;

// Every payload of a key is filled with the key's byte, so any reader can
// check what it got (lengths vary between versions).
uint8_t ByteOf(uint64_t id) { return static_cast<uint8_t>(id * 37 + 11); }

SharedBytes PayloadOf(uint64_t id, size_t size) {
  uint8_t* out = nullptr;
  SharedBytes b = SharedBytes::Allocate(size, &out);
  if (size > 0) std::memset(out, ByteOf(id), size);
  return b;
}

bool Intact(uint64_t id, const SharedBytes& b) {
  for (size_t i = 0; i < b.size(); i += 97) {
    if (b.data()[i] != ByteOf(id)) return false;
  }
  return b.empty() || b.data()[b.size() - 1] == ByteOf(id);
}

// Counts what it receives and calls back into the budget, which must not
// deadlock: listeners run after the budget's lock is released.
class CountingListener final : public EvictionListener {
 public:
  explicit CountingListener(SharedHotBudget* budget) : budget_(budget) {}
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override {
    if (!Intact(meta.key.lo, payload)) ++wrong;
    ++calls;
    if (dirty) ++dirty_calls;
    if (budget_->Totals().bytes > kCapacity) ++wrong;
  }
  std::atomic<uint64_t> calls{0}, dirty_calls{0}, wrong{0};

 private:
  SharedHotBudget* budget_;
};

struct Shared {
  std::shared_ptr<SharedHotBudget> budget;
  std::vector<std::unique_ptr<HotTier>> tiers;
  // [0] serves owner 0; owner 1 switches between [1] and [2] while running.
  std::vector<std::unique_ptr<CountingListener>> listeners;
  std::atomic<uint64_t> wrong{0}, over_budget{0};
};

void Worker(Shared* s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uint64_t, PinnedBlock>> pins;
  uint64_t charged[kOwners] = {};  // this thread's external charges
  const uint64_t ops = testing::Iterations(40000, 400000);
  for (uint64_t op = 0; op < ops; ++op) {
    const OwnerId o = static_cast<OwnerId>(rng() % kOwners);
    HotTier& tier = *s->tiers[o];
    const uint64_t id = 1 + rng() % kKeys;
    BlockMeta meta;
    meta.key = BlockKey{0x75A4, id};
    if (id % 4 != 1) meta.parent = BlockKey{0x75A4, id - 1};
    const int dice = static_cast<int>(rng() % 100);
    if (dice < 40) {
      const Status st = tier.Put(meta, PayloadOf(id, rng() % 6000), rng() % 2 == 0);
      if (!st.ok() && !st.IsNoSpace()) ++s->wrong;
    } else if (dice < 66) {
      StatusOr<SharedBytes> got = tier.Get(meta.key);
      if (got.ok() && !Intact(id, *got)) ++s->wrong;
    } else if (dice < 68) {
      (void)tier.HintUnlikelyReuse(meta.key);
    } else if (dice < 70) {
      // The stack's Flush path: read without a hit, mark clean.
      StatusOr<SharedBytes> got = tier.PeekPayload(meta.key);
      if (got.ok() && !Intact(id, *got)) ++s->wrong;
      if (got.ok()) (void)tier.MarkStoredBelow(meta, *got);
    } else if (dice < 80 && pins.size() < 4) {
      if (std::optional<PinnedBlock> pin = tier.Pin(meta.key))
        pins.emplace_back(id, std::move(*pin));
    } else if (dice < 90 && !pins.empty()) {
      // The bytes a pin holds survive every other thread's evictions.
      if (!Intact(pins.back().first, pins.back().second.payload())) ++s->wrong;
      pins.pop_back();
    } else if (dice < 94) {
      const Status st = tier.Remove(meta.key);
      if (!st.ok() && !st.IsNotFound() && !st.IsBusy()) ++s->wrong;
    } else if (dice < 95) {
      const uint64_t bytes = rng() % 8000;
      const Status st = s->budget->Charge(o, bytes);
      if (st.ok()) charged[o] += bytes;
      if (!st.ok() && !st.IsNoSpace()) ++s->wrong;
    } else if (dice < 96) {
      const uint64_t bytes = rng() % (charged[o] + 1);
      if (!s->budget->Uncharge(o, bytes).ok()) ++s->wrong;
      charged[o] -= bytes;
    } else if (dice < 97) {
      std::optional<uint64_t> quota;
      if (rng() % 2 == 0) quota = kCapacity / 4 + rng() % kCapacity;
      if (!s->budget->SetOwnerQuota(o, quota).ok()) ++s->wrong;
    } else if (dice < 98) {
      s->tiers[1]->SetEvictionListener(s->listeners[1 + rng() % 2].get());
    } else {
      std::vector<AuditFinding> findings;
      (void)s->budget->Audit(&findings);
      if (!findings.empty()) ++s->wrong;
    }
    if (s->budget->Totals().bytes > kCapacity) ++s->over_budget;
  }
  for (OwnerId o = 0; o < kOwners; ++o) {
    if (!s->budget->Uncharge(o, charged[o]).ok()) ++s->wrong;
  }
}

TEST(HotTierTsan, EightThreadsOfMixedOperationsKeepEveryInvariant) {
  const uint64_t seed = testing::TestSeed("HotTierTsan");
  Shared s;
  s.budget = SharedHotBudget::Create(
                 {.capacity_bytes = kCapacity, .policy = EvictionPolicyKind::kLeafLru})
                 .value();
  for (int l = 0; l < 3; ++l) {
    s.listeners.push_back(std::make_unique<CountingListener>(s.budget.get()));
  }
  for (int o = 0; o < kOwners; ++o) {
    s.tiers.push_back(
        HotTier::Open(s.budget,
                      s.budget->RegisterOwner("model" + std::to_string(o)).value())
            .value());
    if (o < kOwners - 1) s.tiers.back()->SetEvictionListener(s.listeners[o].get());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(Worker, &s, seed + t);
  for (auto& th : threads) th.join();

  EXPECT_EQ(s.wrong.load(), 0u);
  for (const auto& l : s.listeners) EXPECT_EQ(l->wrong.load(), 0u);
  EXPECT_EQ(s.over_budget.load(), 0u);
  TierCounters sum;
  for (int o = 0; o < kOwners; ++o) {
    const TierCounters c = s.budget->OwnerCounters(o);
    EXPECT_EQ(c.pinned_bytes, 0u) << "every pin was released";
    EXPECT_EQ(c.external_bytes, 0u) << "every charge was returned";
    if (o < kOwners - 1) {
      // Owner 1's victims went to whichever of its two listeners was current.
      uint64_t calls = s.listeners[o]->calls, dirty = s.listeners[o]->dirty_calls;
      if (o == 1) {
        calls += s.listeners[2]->calls;
        dirty += s.listeners[2]->dirty_calls;
      }
      EXPECT_EQ(calls, c.evictions) << "owner " << o;
      EXPECT_EQ(dirty, c.spills) << "owner " << o;
    } else {
      EXPECT_EQ(c.spills, 0u);
    }
    sum.entries += c.entries;
    sum.bytes += c.bytes;
    sum.hits += c.hits;
    sum.misses += c.misses;
    sum.inserts += c.inserts;
    sum.removes += c.removes;
    sum.evictions += c.evictions;
    sum.spills += c.spills;
  }
  const TierCounters total = s.budget->Totals();
  std::printf("[tsan] inserts %llu hits %llu evictions %llu removes %llu\n",
              static_cast<unsigned long long>(total.inserts),
              static_cast<unsigned long long>(total.hits),
              static_cast<unsigned long long>(total.evictions),
              static_cast<unsigned long long>(total.removes));
  EXPECT_EQ(total, sum);
  EXPECT_GT(total.evictions, 0u) << "the run must have exercised eviction";
  std::vector<AuditFinding> findings;
  ASSERT_OK(s.budget->Audit(&findings));
  for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
}

// Two threads allocate (64 bytes to 3 MiB), fill and free in an arena with
// map_ahead while its thread faults in the regions they were handed and
// maps ahead, and regions emptied beyond a small retain budget are
// unmapped (some while the thread is still faulting them in). Every
// allocation keeps its bytes until freed; the arena unmaps everything when
// it goes.
TEST(ArenaTsan, CallersRaceTheArenasThreadWithoutLosingAByte) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mutex mu;
  size_t mapped = 0, unmapped = 0;
  ArenaOptions o{.max_region_bytes = size_t{8} << 20,
                 .min_region_bytes = size_t{2} << 20,
                 .retain_bytes = size_t{12} << 20,
                 .map_ahead = true,
                 .huge_pages = false};
  o.callbacks = {.mapped =
                     [&](void*, size_t) {
                       std::lock_guard<std::mutex> lock(mu);
                       ++mapped;
                     },
                 .unmapping =
                     [&](void*, size_t) {
                       std::lock_guard<std::mutex> lock(mu);
                       ++unmapped;
                     }};
  std::shared_ptr<MemoryResource> arena = NewArenaMemoryResource(o);
  std::atomic<int> wrong{0};
  auto run = [&](int t) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
    struct Live {
      uint8_t* p;
      size_t n;
      uint8_t b;
    };
    std::vector<Live> live;
    auto check_and_free = [&](size_t i) {
      const Live l = live[i];
      if (l.p[0] != l.b || l.p[l.n / 2] != l.b || l.p[l.n - 1] != l.b) ++wrong;
      arena->Deallocate(l.p, l.n, 64);
      live[i] = live.back();
      live.pop_back();
    };
    for (int i = 0; i < 300; ++i) {
      if (!live.empty() && (live.size() > 12 || rng() % 3 == 0)) {
        check_and_free(rng() % live.size());
        continue;
      }
      const size_t n =
          rng() % 2 == 0 ? 64 + rng() % 4096 : (size_t{64} << 10) + rng() % (3 << 20);
      auto* p = static_cast<uint8_t*>(arena->Allocate(n, 64));
      if (p == nullptr) {
        ++wrong;
        continue;
      }
      const auto b = static_cast<uint8_t>(rng());
      std::memset(p, b, n);
      live.push_back({p, n, b});
    }
    while (!live.empty()) check_and_free(live.size() - 1);
  };
  std::thread a(run, 0), b(run, 1);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0) << "an allocation lost its bytes or failed";
  arena.reset();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_GT(mapped, 1u);
  EXPECT_EQ(unmapped, mapped);
}

}  // namespace
}  // namespace prefixkv
