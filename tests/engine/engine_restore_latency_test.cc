// Engine::Restore's latency histogram (EngineOwnerStats::restore_latency):
// every restore of a model lands in the bucket of its duration by the
// engine's Clock, per model; owners that are not models have none. And the
// token counters beside it (EngineOwnerStats::prefix_tokens): tokens asked
// and found by Match, restored by Restore or a served restore, per model.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine_impl.h"
#include "prefixkv/engine.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/stepping_clock.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

const EngineOwnerStats* Owner(const EngineStats& s, const std::string& name) {
  for (const EngineOwnerStats& o : s.owners) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

class EngineRestoreLatency : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(
        engine_, Engine::Open({.hot_capacity_bytes = 16 << 20, .clock = &clock_}));
    ASSERT_OK_AND_ASSIGN(ns_, engine_->RegisterModel(testing::KvOnlySpec()));
    tokens_ = testing::Tokens(3);
    ASSERT_OK(engine_->Store(
        ns_, tokens_, testing::KvOnlyLayers(static_cast<int64_t>(tokens_.size()))));
    ASSERT_OK_AND_ASSIGN(match_, engine_->Match(ns_, tokens_));
    ASSERT_GT(match_.keys.size(), 0u);
  }
  void RestoreTaking(uint64_t micros) {
    clock_.step_nanos = micros * 1000;
    ASSERT_OK_AND_ASSIGN(RestoreResult r, engine_->Restore(match_));
    EXPECT_EQ(r.restored_blocks, match_.keys.size());
    clock_.step_nanos = 0;
  }
  PrefixTokenCounters Tokens(const std::string& model = testing::KvOnlySpec().model) {
    const EngineStats s = engine_->Stats();
    const EngineOwnerStats* o = Owner(s, model);
    EXPECT_TRUE(o != nullptr && o->prefix_tokens.has_value());
    return o != nullptr && o->prefix_tokens ? *o->prefix_tokens : PrefixTokenCounters{};
  }
  RestoreLatencyStats Latency() {
    const EngineStats s = engine_->Stats();
    const EngineOwnerStats* o = Owner(s, testing::KvOnlySpec().model);
    EXPECT_NE(o, nullptr);
    EXPECT_TRUE(o != nullptr && o->restore_latency.has_value());
    return o != nullptr && o->restore_latency ? *o->restore_latency
                                              : RestoreLatencyStats{};
  }

  // With no SSD tier the engine reads its clock only around a restore, so a
  // restore takes exactly one step.
  testing::SteppingClock clock_;
  std::unique_ptr<Engine> engine_;
  Namespace ns_;
  std::vector<int32_t> tokens_;
  MatchResult match_;
};

TEST_F(EngineRestoreLatency, EachRestoreLandsInTheBucketOfItsDuration) {
  EXPECT_EQ(Latency().count(), 0u);
  RestoreTaking(10);         // on the first bound: its bucket
  RestoreTaking(11);         // just above it: the next
  RestoreTaking(3000);       // (2.5 ms, 5 ms]
  RestoreTaking(2'000'000);  // above the last bound (1 s)
  const RestoreLatencyStats h = Latency();
  RestoreLatencyStats want;
  want.counts[0] = 1;
  want.counts[1] = 1;
  want.counts[8] = 1;
  want.counts.back() = 1;
  EXPECT_EQ(h.counts, want.counts);
  EXPECT_EQ(h.sum_micros, 10u + 11 + 3000 + 2'000'000);
  EXPECT_EQ(h.count(), 4u);
}

TEST_F(EngineRestoreLatency, IsKeptPerModelAndOnlyForModels) {
  NamespaceSpec other = testing::KvOnlySpec();
  other.model = "other-model";
  ASSERT_OK_AND_ASSIGN(Namespace other_ns, engine_->RegisterModel(other));
  ASSERT_OK(engine_->PutValue("k", SharedBytes::Copy("v")));  // the "values" owner
  RestoreTaking(100);
  const EngineStats s = engine_->Stats();
  ASSERT_NE(Owner(s, other.model), nullptr);
  ASSERT_TRUE(Owner(s, other.model)->restore_latency.has_value());
  EXPECT_EQ(Owner(s, other.model)->restore_latency->count(), 0u);
  EXPECT_EQ(Owner(s, testing::KvOnlySpec().model)->restore_latency->count(), 1u);
  ASSERT_NE(Owner(s, "values"), nullptr);
  EXPECT_FALSE(Owner(s, "values")->restore_latency.has_value());
  EXPECT_FALSE(Owner(s, "values")->prefix_tokens.has_value());
  (void)other_ns;
}

TEST_F(EngineRestoreLatency, ARestoreOfAnUnknownNamespaceIsNotCounted) {
  MatchResult stray = match_;
  stray.ns.index = 1000;
  EXPECT_FALSE(engine_->Restore(stray).ok());
  EXPECT_EQ(Latency().count(), 0u);
}

TEST_F(EngineRestoreLatency, MatchCountsTokensAskedAndTokensFoundPerModel) {
  const PrefixTokenCounters before = Tokens();  // SetUp matched tokens_ once
  EXPECT_EQ(before.query_tokens, tokens_.size());
  EXPECT_EQ(before.hit_tokens, tokens_.size());
  std::vector<int32_t> longer = tokens_;
  for (int i = 0; i < 5; ++i) longer.push_back(-1 - i);  // not cached
  ASSERT_OK_AND_ASSIGN(MatchResult m, engine_->Match(ns_, longer));
  EXPECT_EQ(m.matched_tokens(), tokens_.size());
  const std::vector<int32_t> miss = {-7, -8, -9};
  ASSERT_OK(engine_->Match(ns_, miss).status());
  const PrefixTokenCounters after = Tokens();
  EXPECT_EQ(after.query_tokens, 2 * tokens_.size() + 5 + 3);
  EXPECT_EQ(after.hit_tokens, 2 * tokens_.size());
  EXPECT_EQ(after.restored_tokens_hot, 0u);  // matching restores nothing
  NamespaceSpec other = testing::KvOnlySpec();
  other.model = "other-model";
  ASSERT_OK(engine_->RegisterModel(other).status());
  EXPECT_EQ(Tokens(other.model).query_tokens, 0u);
}

TEST_F(EngineRestoreLatency, RestoreCountsRestoredTokensByTier) {
  RestoreTaking(10);
  ASSERT_OK(engine_->RestorePinned(match_).status());
  const PrefixTokenCounters t = Tokens();
  EXPECT_EQ(t.restored_tokens_hot, 2 * tokens_.size());  // no SSD tier: all from RAM
  EXPECT_EQ(t.restored_tokens_ssd, 0u);
  EXPECT_EQ(t.restored_tokens_remote, 0u);
}

TEST_F(EngineRestoreLatency, AServedRestoreIsTimedAndCountedLikeARestore) {
  ASSERT_OK(engine_->RecordServedRestore(
      ns_, 300'000,
      {.restored_tokens_hot = 4, .restored_tokens_ssd = 2, .restored_tokens_remote = 1}));
  const RestoreLatencyStats h = Latency();
  EXPECT_EQ(h.count(), 1u);
  EXPECT_EQ(h.counts[5], 1u);  // 300 us: (250 us, 500 us]
  EXPECT_EQ(h.sum_micros, 300u);
  const PrefixTokenCounters t = Tokens();
  EXPECT_EQ(t.restored_tokens_hot, 4u);
  EXPECT_EQ(t.restored_tokens_ssd, 2u);
  EXPECT_EQ(t.restored_tokens_remote, 1u);
  Namespace stray = ns_;
  stray.index = 1000;
  EXPECT_TRUE(engine_->RecordServedRestore(stray, 1, {}).IsNotFound());
}

// A model's token counters are copied (Stats: INFO, /metrics) while Matches
// add to them: one copy holds each Match's whole count or none of it, so it
// never shows more hit tokens than query tokens (a hit ratio above 1). They
// were added and read one counter at a time: a copy taken while a Match
// added showed its hit tokens without its query tokens.
TEST(PrefixTokenRecorder, ACopyHoldsEachAdditionWholeOrNotAtAll) {
  PrefixTokenRecorder recorder;
  std::atomic<bool> done{false};
  std::atomic<int> added{0};
  std::thread matches([&] {
    while (!done.load(std::memory_order_relaxed)) {
      recorder.Add({.query_tokens = 16, .hit_tokens = 16});  // every token found
      added.fetch_add(1, std::memory_order_relaxed);
    }
  });
  int torn = 0;
  // Copies tore within 0.3 s in every run (a Mutex's waits make the run
  // slower with the fix, under ThreadSanitizer most of all: bounded in time).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (added.load(std::memory_order_relaxed) < 5000000 && torn == 0 &&
         std::chrono::steady_clock::now() < end) {
    const PrefixTokenCounters c = recorder.Snapshot();
    if (c.hit_tokens != c.query_tokens) ++torn;
  }
  done = true;
  matches.join();
  EXPECT_EQ(torn, 0) << "a copy with another Match's hit tokens than query tokens";
}

}  // namespace
}  // namespace prefixkv
