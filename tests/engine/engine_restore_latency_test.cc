// Engine::Restore's latency histogram (EngineOwnerStats::restore_latency):
// every restore of a model lands in the bucket of its duration by the
// engine's Clock, per model; owners that are not models have none.
#include <gtest/gtest.h>

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
  (void)other_ns;
}

TEST_F(EngineRestoreLatency, ARestoreOfAnUnknownNamespaceIsNotCounted) {
  MatchResult stray = match_;
  stray.ns.index = 1000;
  EXPECT_FALSE(engine_->Restore(stray).ok());
  EXPECT_EQ(Latency().count(), 0u);
}

}  // namespace
}  // namespace prefixkv
