// The typed conformance suite every BlockTier must pass (STYLE 5: the RocksDB
// tier and the in-memory ones pass the same tests).
//
// How to run it against a tier: write a factory type and instantiate the
// typed suite with it in your own *_test.cc file:
//
//   #include "tests/storage/tier_conformance.h"
//
//   struct SsdTierFactory {
//     // A fresh, empty tier whose files (if any) live in `dir`.
//     // `capacity_bytes` is the charged-byte capacity; 0 means unlimited.
//     static std::unique_ptr<prefixkv::BlockTier> Make(const prefixkv::testing::TempDir&
//     dir,
//                                                      uint64_t capacity_bytes);
//     // Optional: set to false when the tier cannot enforce a capacity (the
//     // eviction tests are then skipped). Defaults to true.
//     static constexpr bool kSupportsCapacity = true;
//   };
//   namespace prefixkv::testing {  // the suite's namespace (gtest requires it)
//   INSTANTIATE_TYPED_TEST_SUITE_P(Ssd, TierConformance,
//                                  ::testing::Types<SsdTierFactory>);
//   }
//
// The suite assumes only the BlockTier contract in prefixkv/tier.h: Get
// returns byte-identical payloads (not necessarily the same buffer), every
// capacity victim reaches the eviction listener with its dirty flag, the
// dirty ones count as spills, and counters match contents after every call.
// It does not assume that Peek() reports the owner given to Put (a tier may
// charge its own owner, as a HotTier view does); per-owner counters are
// checked against what ForEach() reports.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/advanced/tier.h"
#include "tests/storage/tier_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

template <typename Factory>
constexpr bool FactorySupportsCapacity() {
  if constexpr (requires { Factory::kSupportsCapacity; }) {
    return Factory::kSupportsCapacity;
  } else {
    return true;
  }
}

template <typename Factory>
class TierConformance : public ::testing::Test {
 protected:
  std::unique_ptr<BlockTier> Make(uint64_t capacity_bytes = 0) {
    return Factory::Make(dir_, capacity_bytes);
  }
  TempDir dir_;
};

TYPED_TEST_SUITE_P(TierConformance);

TYPED_TEST_P(TierConformance, GetReturnsByteIdenticalPayloadAfterPut) {
  auto tier = this->Make();
  const BlockMeta meta = ConformanceMeta(1);
  const SharedBytes payload = ConformancePayload(meta.key, 0, 3000);
  ASSERT_OK(tier->Put(meta, payload, /*dirty=*/true));
  StatusOr<SharedBytes> got = tier->Get(meta.key);
  ASSERT_OK(got);
  EXPECT_EQ(got->view(), payload.view());
  EXPECT_EQ(tier->Totals().hits, 1u);
  EXPECT_EQ(tier->Totals().inserts, 1u);
  ExpectCountersMatchContents(*tier, {0});
}

TYPED_TEST_P(TierConformance, PeekAndContainsSeeMetadataWithoutCountingHits) {
  auto tier = this->Make();
  const BlockMeta meta = ConformanceMeta(7);
  ASSERT_OK(tier->Put(meta, ConformancePayload(meta.key, 0, 100), false));
  StatusOr<BlockMeta> peeked = tier->Peek(meta.key);
  ASSERT_OK(peeked);
  EXPECT_EQ(peeked->key, meta.key);
  EXPECT_EQ(peeked->parent, meta.parent);
  EXPECT_EQ(peeked->namespace_id, meta.namespace_id);
  EXPECT_TRUE(tier->Contains(meta.key));
  EXPECT_FALSE(tier->Contains(ConformanceMeta(8).key));
  EXPECT_TRUE(tier->Peek(ConformanceMeta(8).key).status().IsNotFound());
  EXPECT_EQ(tier->Totals().hits, 0u);
  EXPECT_EQ(tier->Totals().misses, 0u);
}

TYPED_TEST_P(TierConformance, PutOnExistingKeyReplacesPayloadAndShrinksBytesExactly) {
  auto tier = this->Make();
  const BlockMeta meta = ConformanceMeta(2);
  ASSERT_OK(tier->Put(meta, ConformancePayload(meta.key, 0, 8000), true));
  const uint64_t big = tier->Totals().bytes;
  const SharedBytes small = ConformancePayload(meta.key, 1, 1000);
  ASSERT_OK(tier->Put(meta, small, true));
  EXPECT_EQ(tier->Totals().entries, 1u);
  // Exactness (bytes == sum of charges) is checked below; every tier's charge
  // must at least shrink when its payload does.
  EXPECT_LT(tier->Totals().bytes, big);
  StatusOr<SharedBytes> got = tier->Get(meta.key);
  ASSERT_OK(got);
  EXPECT_EQ(got->view(), small.view());
  ExpectCountersMatchContents(*tier, {0});
}

TYPED_TEST_P(TierConformance, RemoveDeletesTheBlockAndASecondRemoveIsNotFound) {
  auto tier = this->Make();
  const BlockMeta meta = ConformanceMeta(3);
  ASSERT_OK(tier->Put(meta, ConformancePayload(meta.key, 0, 500), false));
  ASSERT_OK(tier->Remove(meta.key));
  EXPECT_FALSE(tier->Contains(meta.key));
  EXPECT_TRUE(tier->Remove(meta.key).IsNotFound());
  EXPECT_TRUE(tier->Get(meta.key).status().IsNotFound());
  EXPECT_EQ(tier->Totals().removes, 1u);
  EXPECT_EQ(tier->Totals().entries, 0u);
  EXPECT_EQ(tier->Totals().bytes, 0u);
  ExpectCountersMatchContents(*tier, {0});
}

TYPED_TEST_P(TierConformance, GetOfAbsentKeyIsNotFoundAndCountsAMiss) {
  auto tier = this->Make();
  StatusOr<SharedBytes> got = tier->Get(ConformanceMeta(99).key);
  EXPECT_TRUE(got.status().IsNotFound());
  EXPECT_EQ(tier->Totals().misses, 1u);
  EXPECT_EQ(tier->Totals().hits, 0u);
  ExpectCountersMatchContents(*tier, {0});
}

TYPED_TEST_P(TierConformance, CountersEqualRecomputedSumsAfterEveryOperation) {
  auto tier = this->Make();
  std::mt19937_64 rng(TestSeed("TierConformance.CountersEqualRecomputedSums"));
  const std::vector<OwnerId> owners = {0, 1, 2};
  uint64_t gets = 0;
  for (int op = 0; op < 300; ++op) {
    const BlockMeta meta = ConformanceMeta(rng() % 24, owners[rng() % owners.size()]);
    switch (rng() % 3) {
      case 0:
        ASSERT_OK(
            tier->Put(meta, ConformancePayload(meta.key, op, rng() % 5000), rng() % 2));
        break;
      case 1:
        ++gets;
        (void)tier->Get(meta.key);
        break;
      default:
        (void)tier->Remove(meta.key);
    }
    ExpectCountersMatchContents(*tier, owners);
    if (::testing::Test::HasFailure()) FAIL() << "after operation " << op;
  }
  EXPECT_EQ(tier->Totals().hits + tier->Totals().misses, gets);
}

TYPED_TEST_P(TierConformance, ForEachVisitsEveryResidentBlockOnce) {
  auto tier = this->Make();
  std::map<BlockKey, int> visits;
  std::map<BlockKey, uint64_t> payload_bytes;
  for (uint64_t i = 0; i < 20; ++i) {
    const BlockMeta meta = ConformanceMeta(i);
    ASSERT_OK(tier->Put(meta, ConformancePayload(meta.key, 0, 64 * i), false));
    visits[meta.key] = 0;
    payload_bytes[meta.key] = 64 * i;
  }
  ASSERT_OK(tier->Remove(ConformanceMeta(5).key));
  visits.erase(ConformanceMeta(5).key);
  tier->ForEach([&](const BlockMeta& meta, uint64_t bytes) {
    ASSERT_TRUE(visits.contains(meta.key)) << meta.key.ToHex();
    EXPECT_GE(bytes, payload_bytes[meta.key]) << "a charge covers at least the payload";
    ++visits[meta.key];
  });
  for (const auto& [key, n] : visits) EXPECT_EQ(n, 1) << key.ToHex();
}

TYPED_TEST_P(TierConformance, EveryEvictedBlockReachesTheListenerWithItsDirtyFlag) {
  if constexpr (!FactorySupportsCapacity<TypeParam>()) {
    GTEST_SKIP() << "tier has no capacity";
  } else {
    constexpr uint64_t kCapacity = 64 << 10;
    auto tier = this->Make(kCapacity);
    RecordingListener listener;
    tier->SetEvictionListener(&listener);
    std::map<BlockKey, std::pair<std::string, bool>> put;  // payload, dirty
    for (uint64_t i = 0; i < 48; ++i) {
      // Unchained blocks: a policy that keeps chain ancestors (leaf-lru) may
      // legitimately refuse to evict the parent of the block being inserted.
      BlockMeta meta = ConformanceMeta(i);
      meta.parent = BlockKey{};
      const SharedBytes payload = ConformancePayload(meta.key, 0, 4096);
      const bool dirty = i % 3 != 0;
      ASSERT_OK(tier->Put(meta, payload, dirty));
      put[meta.key] = {std::string(payload.view()), dirty};
      EXPECT_LE(tier->Totals().bytes, kCapacity);
    }
    const std::vector<RecordingListener::Call> calls = listener.calls();
    ASSERT_FALSE(calls.empty()) << "48 x 4 KiB cannot fit in 64 KiB";
    std::map<BlockKey, int> evicted;
    uint64_t dirty_calls = 0;
    for (const auto& call : calls) {
      ASSERT_TRUE(put.contains(call.meta.key));
      EXPECT_EQ(call.payload, put[call.meta.key].first);
      EXPECT_EQ(call.dirty, put[call.meta.key].second);
      dirty_calls += call.dirty ? 1 : 0;
      ++evicted[call.meta.key];
    }
    for (const auto& [key, unused] : put) {
      // Nothing is dropped silently: resident, or handed over exactly once.
      EXPECT_EQ(tier->Contains(key) ? 1 : 0, 1 - evicted[key]) << key.ToHex();
    }
    EXPECT_EQ(tier->Totals().evictions, calls.size());
    EXPECT_EQ(tier->Totals().spills, dirty_calls);
    ExpectCountersMatchContents(*tier, {0});
  }
}

TYPED_TEST_P(TierConformance, ConcurrentPutAndGetFromSeveralThreadsStayConsistent) {
  auto tier = this->Make();
  constexpr int kThreads = 4;
  constexpr int kOps = 400;
  std::atomic<uint64_t> gets{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < kOps; ++i) {
        // Every thread reads and writes every key; payload bytes are a
        // function of the key, so any hit can be checked.
        const BlockMeta meta = ConformanceMeta(rng() % 64, static_cast<OwnerId>(t % 2));
        if (rng() % 2 == 0) {
          if (!tier->Put(meta, ConformancePayload(meta.key, 0, 256 + rng() % 2048), false)
                   .ok()) {
            ++wrong;
          }
        } else {
          ++gets;
          StatusOr<SharedBytes> got = tier->Get(meta.key);
          if (got.ok() &&
              got->view() != ConformancePayload(meta.key, 0, got->size()).view()) {
            ++wrong;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(tier->Totals().hits + tier->Totals().misses, gets.load());
  ExpectCountersMatchContents(*tier, {0, 1});
}

REGISTER_TYPED_TEST_SUITE_P(TierConformance, GetReturnsByteIdenticalPayloadAfterPut,
                            PeekAndContainsSeeMetadataWithoutCountingHits,
                            PutOnExistingKeyReplacesPayloadAndShrinksBytesExactly,
                            RemoveDeletesTheBlockAndASecondRemoveIsNotFound,
                            GetOfAbsentKeyIsNotFoundAndCountsAMiss,
                            CountersEqualRecomputedSumsAfterEveryOperation,
                            ForEachVisitsEveryResidentBlockOnce,
                            EveryEvictedBlockReachesTheListenerWithItsDirtyFlag,
                            ConcurrentPutAndGetFromSeveralThreadsStayConsistent);

}  // namespace prefixkv::testing
