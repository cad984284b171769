// Writers, readers and a flusher hammer the same few keys of one TierStack
// whose hot tier is small enough to evict (write-back) and promote all the
// time, and some of whose values are too large for it. Each key has one
// writer, so its versions are in order; a reader checks every Get against the
// newest state already acknowledged to it (the writer's last acknowledged
// Put or Remove, and the newest version it read itself): never an older
// value, never a removed one back, never a torn one. Run under
// ThreadSanitizer by `tools/run test`.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "tests/support/mem_tier.h"
#include "prefixkv/advanced/tier_stack.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr int kKeys = 8;
constexpr int kWriters = 2;  // writer w owns the keys k with k % kWriters == w
constexpr int kReaders = 3;
constexpr size_t kSmall = 2000;
constexpr size_t kHotCapacity = 3 * (kSmall + 512);  // three small values fit
constexpr size_t kTooLarge = 3 * kHotCapacity;

BlockMeta Meta(int key) {
  return BlockMeta{BlockKey{0x5EED, uint64_t(key) + 1}, {}, {}, 0};
}

// A value names its key and version in its first 16 bytes; the rest is a
// function of both, so a torn or mixed-up value is detected.
SharedBytes Value(int key, uint64_t version, size_t size) {
  uint8_t* out = nullptr;
  SharedBytes b = SharedBytes::Allocate(size, &out);
  const uint64_t head[2] = {uint64_t(key), version};
  std::memcpy(out, head, sizeof(head));
  for (size_t i = sizeof(head); i < size; ++i) out[i] = uint8_t(key * 31 + version + i);
  return b;
}

// The version of an intact value of `key`, or 0 when it is not one.
uint64_t VersionOf(int key, const SharedBytes& b) {
  uint64_t head[2] = {0, 0};
  if (b.size() < sizeof(head)) return 0;
  std::memcpy(head, b.data(), sizeof(head));
  if (head[0] != uint64_t(key)) return 0;
  for (size_t i = sizeof(head); i < b.size(); i += 61) {
    if (b.data()[i] != uint8_t(key * 31 + head[1] + i)) return 0;
  }
  return head[1];
}

// What a key's writer has acknowledged: its newest version, and the version
// of its newest Remove, announced when it starts (a version is either a Put
// or a Remove).
struct KeyState {
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> removed{0};
};

struct Hammer {
  TierStack* stack;
  std::array<KeyState, kKeys> keys;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};

  void Writer(int w, uint64_t seed, uint64_t ops) {
    std::mt19937_64 rng(seed + w);
    uint64_t version = 0;
    for (uint64_t i = 0; i < ops; ++i) {
      const int key = w + kWriters * int(rng() % (kKeys / kWriters));
      ++version;  // versions are per writer, so in order per key
      if (rng() % 5 == 0) {
        // Announced before it runs: a reader that finds the key gone may
        // have run after the Remove but before its acknowledgement.
        keys[key].removed.store(version, std::memory_order_release);
        Status s = stack->Remove(Meta(key).key);
        if (!s.ok() && !s.IsNotFound()) ++failures;
      } else {
        const size_t size = rng() % 10 == 0 ? kTooLarge : 16 + rng() % kSmall;
        if (!stack->Put(Meta(key), Value(key, version, size)).ok()) ++failures;
      }
      keys[key].acked.store(version, std::memory_order_release);
    }
  }

  void Reader(int r, uint64_t seed) {
    std::mt19937_64 rng(seed + 100 + r);
    std::array<uint64_t, kKeys> seen{};  // newest version this reader read
    while (!stop.load(std::memory_order_acquire)) {
      const int key = int(rng() % kKeys);
      const uint64_t floor =
          std::max(seen[key], keys[key].acked.load(std::memory_order_acquire));
      StatusOr<TierHit> hit = stack->Get(Meta(key).key, /*allow_promotion=*/true);
      const uint64_t removed = keys[key].removed.load(std::memory_order_acquire);
      if (hit.ok()) {
        const uint64_t version = VersionOf(key, hit->payload);
        if (version == 0 || version < floor) ++failures;  // torn, or older
        seen[key] = std::max(seen[key], version);
      } else if (!hit.status().IsNotFound() || (floor != 0 && removed < floor)) {
        ++failures;  // absent although nothing removed it since `floor`
      }
    }
  }

  void Flusher() {
    while (!stop.load(std::memory_order_acquire)) {
      if (!stack->Flush().ok()) ++failures;
      std::this_thread::yield();
    }
  }

  void Run(uint64_t seed, uint64_t ops) {
    std::vector<std::thread> readers;
    for (int r = 0; r < kReaders; ++r) readers.emplace_back([&, r] { Reader(r, seed); });
    std::thread flusher([&] { Flusher(); });
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] { Writer(w, seed, ops); });
    }
    for (auto& t : writers) t.join();
    stop.store(true, std::memory_order_release);
    for (auto& t : readers) t.join();
    flusher.join();
  }

  // After the storm: every key reads as its last acknowledged state, and
  // after a Flush the lower tier holds it too.
  void ExpectFinalState(BlockTier& below) {
    ASSERT_OK(stack->Flush());
    EXPECT_EQ(stack->dirty_blocks(), 0u);
    for (int key = 0; key < kKeys; ++key) {
      const uint64_t acked = keys[key].acked.load();
      if (acked == 0 || keys[key].removed.load() == acked) {
        EXPECT_FALSE(stack->Contains(Meta(key).key)) << "key " << key;
        continue;
      }
      StatusOr<TierHit> hit = stack->Get(Meta(key).key);
      ASSERT_OK(hit) << "key " << key;
      EXPECT_EQ(VersionOf(key, hit->payload), acked) << "key " << key;
      StatusOr<SharedBytes> stored = below.Get(Meta(key).key);
      ASSERT_OK(stored) << "key " << key;
      EXPECT_EQ(VersionOf(key, *stored), acked) << "key " << key;
    }
  }
};

void HammerStack(BlockTier* hot, TierStackOptions options, const char* name) {
  MemTier ssd;
  TierStack stack(hot, &ssd, /*ssd_writer=*/nullptr, options);
  Hammer h{&stack};
  h.Run(testing::TestSeed(name), testing::Iterations(3000, 60000));
  EXPECT_EQ(h.failures.load(), 0);
  h.ExpectFinalState(ssd);
  std::vector<AuditFinding> findings;
  ASSERT_OK(hot->Audit(&findings));
  ASSERT_OK(ssd.Audit(&findings));
  EXPECT_TRUE(findings.empty());
  EXPECT_GT(hot->Totals().evictions, 0u);
}

TEST(TierStackConcurrency, ReadersNeverSeeAnOlderValueOverAWriteBackMemTier) {
  MemTier hot({.capacity_bytes = kHotCapacity});
  HammerStack(&hot, {}, "TierStackWriteBackMem");
}

TEST(TierStackConcurrency, ReadersNeverSeeAnOlderValueOverAWriteThroughMemTier) {
  MemTier hot({.capacity_bytes = kHotCapacity});
  HammerStack(&hot, {.write_through = true}, "TierStackWriteThroughMem");
}

TEST(TierStackConcurrency, ReadersNeverSeeAnOlderValueOverAHotTier) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HotTier> hot,
                       HotTier::Create({.capacity_bytes = kHotCapacity}));
  HammerStack(hot.get(), {}, "TierStackWriteBackHot");
}

}  // namespace
}  // namespace prefixkv
