// SessionManager lifecycle: owned-layer allocation, truncate, release, route
// epochs, recipe checks, explicit misses, TTL/LRU/budget eviction, restored opens.
#include <gtest/gtest.h>

#include "tests/session/session_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::ExpectMiss;
using testing::ExpectSession;
using testing::ExpectTail;
using testing::FullShard;
using testing::ManagerFor;
using testing::SeedModel;
using testing::Tokens;

TEST(SessionManagerTest, ManagerAllocatesKvOnlyForOwnedLayers) {
  auto shard = testing::Shard(SeedModel(), 2, 3);
  auto manager = ManagerFor(*shard);
  auto session = manager->Open("sess-mid", 0);
  ASSERT_OK(session);
  EXPECT_EQ((*session)->owned_layers(), (std::vector<int>{2, 3}));
  EXPECT_EQ((*session)->ExportLayers().size(), 2u);
  EXPECT_OK((*session)->LayerLength(2));
  EXPECT_OK((*session)->LayerLength(3));
  EXPECT_TRUE((*session)->LayerLength(0).status().IsNotFound());
  EXPECT_TRUE((*session)->LayerSnapshot(4).status().IsNotFound());
}

TEST(SessionManagerTest, TruncateRollsBackAllOwnedLayers) {
  auto shard = FullShard(SeedModel());
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  ExpectTail(adapter.Prefill("s", 0, Tokens({1, 2, 3, 4, 5})));
  ASSERT_EQ(manager->Get("s", 0).value()->seq_len(), 5);
  uint64_t bytes_at_five = manager->total_bytes();
  ExpectSession(manager->Truncate("s", 0, 2));
  auto session = manager->Get("s", 0).value();
  EXPECT_EQ(session->seq_len(), 2);
  for (int layer : session->owned_layers())
    EXPECT_EQ(session->LayerLength(layer).value(), 2);
  EXPECT_EQ(manager->total_bytes() * 5, bytes_at_five * 2);  // the budget shrinks too
  EXPECT_TRUE(manager->Truncate("s", 0, 3).status().IsInvalidArgument());
}

TEST(SessionManagerTest, ReleaseOneSessionLeavesOthersIntactAndReturnsMemory) {
  auto model = SeedModel();
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::map<std::string, std::vector<int32_t>> prompts = {
      {"keep-1", {1, 2, 3}}, {"drop", {10, 11, 12, 13}}, {"keep-2", {5, 6, 7}}};
  const int n_new = 6;
  std::map<std::string, std::vector<int32_t>> gen;
  std::map<std::string, std::vector<std::vector<float>>> logits;
  for (const auto& [sid, prompt] : prompts) {
    TailOutput out = ExpectTail(adapter.Prefill(sid, 0, Tokens(prompt)));
    gen[sid] = {out.token_id};
    logits[sid] = {out.logits};
  }
  uint64_t bytes_before = manager->total_bytes();
  EXPECT_EQ(manager->Release("drop", 0).value(), true);
  EXPECT_LT(manager->total_bytes(), bytes_before);
  EXPECT_EQ(manager->total_bytes(), bytes_before / 10 * 6);  // 3 + 3 of 10 tokens remain
  // A decode on the released session is an explicit cache miss, not corruption.
  CacheMiss miss = ExpectMiss(adapter.Decode("drop", 0, Tokens({gen["drop"].back()})));
  EXPECT_EQ(miss.reason, CacheMissReason::kReleased);
  EXPECT_EQ(manager->Release("drop", 0).value(), false);
  for (int i = 1; i < n_new; ++i) {
    for (const char* sid : {"keep-1", "keep-2"}) {
      TailOutput out = ExpectTail(adapter.Decode(sid, 0, Tokens({gen[sid].back()})));
      gen[sid].push_back(out.token_id);
      logits[sid].push_back(out.logits);
    }
  }
  for (const char* sid : {"keep-1", "keep-2"}) {
    EXPECT_EQ(gen[sid], testing::StatelessGreedy(*model, prompts[sid], n_new)) << sid;
    // Bit for bit, where the tiny model's greedy tokens barely vary.
    SCOPED_TRACE(sid);
    testing::ExpectStatelessLogits(*model, prompts[sid], gen[sid], logits[sid]);
  }
}

TEST(SessionManagerTest, StaleRouteEpochIsRejected) {
  auto shard = FullShard(SeedModel());
  auto manager = ManagerFor(*shard);
  ASSERT_OK(manager->Open("s", 5));
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Open("s", 4).status()));
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Resolve("s", 4).status()));
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Append("s", 4, {}).status()));
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Truncate("s", 4, 0).status()));
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Release("s", 4).status()));
  // A released session still remembers its epoch: older ones stay stale.
  ASSERT_TRUE(manager->Release("s", 5).value());
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Resolve("s", 4).status()));
}

TEST(SessionManagerTest, NewRouteEpochSupersedesAndFreesOldEpoch) {
  auto shard = FullShard(SeedModel());
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  ExpectTail(adapter.Prefill("s", 1, Tokens({1, 2, 3, 4})));
  uint64_t bytes_epoch1 = manager->total_bytes();
  ASSERT_GT(bytes_epoch1, 0u);
  // Re-planned route: epoch 2 starts a fresh isolated context.
  ExpectTail(adapter.Prefill("s", 2, Tokens({9, 8})));
  using Keys = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(manager->session_keys(), (Keys{{"s", 2}}));
  EXPECT_EQ(manager->total_bytes(), bytes_epoch1 / 2);  // only epoch 2's two tokens
  EXPECT_EQ(manager->Get("s", 2).value()->seq_len(), 2);
  // Old epoch is gone; a lookup for it is now stale (epoch < current).
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Resolve("s", 1).status()));
  EXPECT_EQ(manager->stats().superseded, 1u);
}

TEST(SessionManagerTest, AFloat16RecipeIsRefusedRatherThanHeldAsFloat32) {
  // LayerKvCache holds float32; a float16 manager would charge and store
  // float32 bytes as if they were float16.
  auto model = SeedModel();
  auto f16 = KvCacheRecipe::Make(KvRecipeSpec{"dense-llama",
                                              DType::kFloat16,
                                              model->config().n_kv_heads,
                                              model->config().head_dim(),
                                              model->config().n_layers,
                                              0,
                                              model->config().n_layers - 1,
                                              {}});
  ASSERT_OK(f16);
  SessionManager manager(*f16);
  Status opened = manager.Open("s", 0).status();
  EXPECT_TRUE(opened.IsInvalidArgument()) << opened.ToString();
  EXPECT_NE(opened.message().find("float16"), std::string::npos) << opened.ToString();
  EXPECT_EQ(manager.session_count(), 0u);
  EXPECT_EQ(manager.total_bytes(), 0u);
}

TEST(SessionManagerTest, IncompatibleCacheRecipeIsRejected) {
  auto model = SeedModel();
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  ASSERT_OK(manager->Open("s", 0));
  auto incompatible =
      KvCacheRecipe::Make(KvRecipeSpec{"dense-llama",
                                       DType::kFloat16,  // different KV dtype
                                       model->config().n_kv_heads,
                                       model->config().head_dim(),
                                       model->config().n_layers,
                                       0,
                                       model->config().n_layers - 1,
                                       {}});
  ASSERT_OK(incompatible);
  EXPECT_TRUE(IsIncompatibleRecipe(manager->Resolve("s", 0, &*incompatible).status()));
  SessionOpenOptions options;
  options.recipe = &*incompatible;
  EXPECT_TRUE(IsIncompatibleRecipe(manager->Open("s2", 0, options).status()));
  EXPECT_EQ(manager->session_count(), 1u);
  // The compatible alias spelling is accepted.
  auto alias = KvCacheRecipe::Make(KvRecipeSpec{"LlamaForCausalLM",
                                                DType::kFloat32,
                                                model->config().n_kv_heads,
                                                model->config().head_dim(),
                                                model->config().n_layers,
                                                0,
                                                model->config().n_layers - 1,
                                                {}});
  EXPECT_NE(testing::ExpectSession(manager->Resolve("s", 0, &*alias)), nullptr);
}

TEST(SessionManagerTest, UnknownSessionIsAnExplicitCacheMiss) {
  auto manager = ManagerFor(*FullShard(SeedModel()));
  CacheMiss miss = ExpectMiss(manager->Resolve("nope", 0));
  EXPECT_EQ(miss.reason, CacheMissReason::kUnknownSession);
  EXPECT_EQ(miss.session_id, "nope");
  auto get = manager->Get("nope", 0);
  EXPECT_TRUE(IsKvCacheMiss(get.status())) << get.status().ToString();
  EXPECT_EQ(manager->stats().misses, 2u);
}

TEST(SessionManagerTest, TtlEvictionYieldsAnExplicitCacheMiss) {
  auto shard = FullShard(SeedModel());
  FakeClock clock;
  SessionManagerOptions config;
  config.ttl_ms = 10'000;
  auto manager = ManagerFor(*shard, config, &clock);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  ExpectTail(adapter.Prefill("s", 0, Tokens({1, 2, 3})));
  clock.AdvanceMillis(10'000);  // exactly the TTL: still alive
  ExpectSession(manager->Resolve("s", 0));
  clock.AdvanceMillis(11'000);
  CacheMiss miss = ExpectMiss(manager->Resolve("s", 0));
  EXPECT_EQ(miss.reason, CacheMissReason::kEvictedTtl);
  EXPECT_EQ(manager->total_bytes(), 0u);
  EXPECT_EQ(manager->session_count(), 0u);
  EXPECT_EQ(manager->stats().evicted_ttl, 1u);
}

TEST(SessionManagerTest, ATtlPastTheClocksReachNeverExpires) {
  auto shard = FullShard(SeedModel());
  FakeClock clock;
  // 18'446'744'073'710 ms in nanoseconds is 448'384 past 2^64: it wrapped to
  // a TTL of under a millisecond.
  for (uint64_t ttl_ms : {uint64_t{18'446'744'073'710}, UINT64_MAX}) {
    auto manager = ManagerFor(*shard, {.ttl_ms = ttl_ms}, &clock);
    ASSERT_OK(manager->Open("s", 0));
    clock.AdvanceMillis(1000);
    EXPECT_NE(ExpectSession(manager->Resolve("s", 0)), nullptr) << ttl_ms;
    EXPECT_EQ(manager->EvictExpired(), 0u) << ttl_ms;
  }
}

TEST(SessionManagerTest, LruEvictionBySessionCapReportsAMiss) {
  auto shard = FullShard(SeedModel());
  SessionManagerOptions config;
  config.max_sessions = 2;
  auto manager = ManagerFor(*shard, config);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  ExpectTail(adapter.Prefill("a", 0, Tokens({1, 2})));
  ExpectTail(adapter.Prefill("b", 0, Tokens({3, 4})));
  // Touch 'a' so 'b' becomes the LRU victim.
  ExpectTail(adapter.Decode("a", 0, Tokens({1})));
  ExpectTail(adapter.Prefill("c", 0, Tokens({5, 6})));
  CacheMiss miss = ExpectMiss(manager->Resolve("b", 0));
  EXPECT_EQ(miss.reason, CacheMissReason::kEvictedLru);
  using Keys = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(manager->session_keys(), (Keys{{"a", 0}, {"c", 0}}));
}

TEST(SessionManagerTest, BudgetEvictionKeepsTotalWithinBudget) {
  auto shard = FullShard(SeedModel());
  uint64_t budget = testing::RecipeOf(*shard).bytes_per_token() * 5;
  SessionManagerOptions config;
  config.budget_bytes = budget;
  config.max_sessions = 8;
  auto manager = ManagerFor(*shard, config);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  ExpectTail(adapter.Prefill("a", 0, Tokens({1, 2, 3})));
  ExpectTail(adapter.Prefill("b", 0, Tokens({4, 5, 6, 7})));
  EXPECT_LE(manager->total_bytes(), budget);
  // 'a' (older, LRU) was evicted to make room for 'b'.
  CacheMiss miss = ExpectMiss(manager->Resolve("a", 0));
  EXPECT_EQ(miss.reason, CacheMissReason::kEvictedLru);
  EXPECT_EQ(manager->Get("b", 0).value()->seq_len(), 4);
  EXPECT_EQ(manager->total_bytes(), manager->Get("b", 0).value()->payload_bytes());
}

TEST(SessionManagerTest, SingleSessionExceedingBudgetRaises) {
  auto shard = FullShard(SeedModel());
  SessionManagerOptions config;
  config.budget_bytes = testing::RecipeOf(*shard).bytes_per_token() * 2;  // 2 tokens fit
  auto manager = ManagerFor(*shard, config);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  ExpectTail(adapter.Prefill("small", 0, Tokens({9})));
  uint64_t bytes_before = manager->total_bytes();
  auto out = adapter.Prefill("a", 0, Tokens({1, 2, 3, 4, 5}));
  EXPECT_TRUE(out.status().IsNoSpace()) << out.status().ToString();
  // Nothing is left behind, and nobody was evicted for a request that cannot fit.
  EXPECT_EQ(ExpectMiss(manager->Resolve("a", 0)).reason,
            CacheMissReason::kUnknownSession);
  EXPECT_EQ(manager->total_bytes(), bytes_before);
  using Keys = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(manager->session_keys(), (Keys{{"small", 0}}));
}

// Exports session "first" as tensors (what the prefix cache stores), opens
// "second" from them, prefills only a suffix, and checks it against the whole model.
void ExpectRestoredSessionContinuesExactly(ModelConfig config) {
  auto model = SeedModel(config);
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::vector<int32_t> prompt = {2, 17, 8, 25, 6};
  ExpectTail(adapter.Prefill("first", 0, Tokens(prompt)));
  SessionOpenOptions restored;
  for (auto& [layer, state] : manager->Get("first", 0).value()->ExportLayers()) {
    auto cache = LayerKvCache::Restore(manager->recipe().layer_geometry(layer),
                                       state.keys, state.values, state.rotating_meta);
    ASSERT_OK(cache);
    restored.initial_layers.push_back(std::move(*cache));
  }
  ASSERT_OK(manager->Open("second", 0, std::move(restored)));
  EXPECT_EQ(manager->total_bytes(),
            2 * manager->Get("first", 0).value()->payload_bytes());
  // Only the new suffix is prefilled, at positions 5..6, and matches the whole model.
  TailOutput out = ExpectTail(adapter.Prefill("second", 0, Tokens({40, 1})));
  std::vector<int32_t> whole = prompt;
  whole.insert(whole.end(), {40, 1});
  EXPECT_EQ(out.seq_len, 7);
  EXPECT_EQ(out.logits, model->NextTokenLogits(whole).value());
}

TEST(SessionManagerTest, OpenWithRestoredLayersContinuesFromThem) {
  ExpectRestoredSessionContinuesExactly(ModelConfig{});
}

TEST(SessionManagerTest, OpenWithRestoredRotatingLayersContinuesFromThem) {
  ModelConfig windowed;
  windowed.n_kv_heads = 2;
  windowed.n_layers = 8;
  windowed.sliding_window_tokens = 3;  // the 5-token prompt already wrapped the rings
  windowed.global_layer_every = 4;
  ExpectRestoredSessionContinuesExactly(windowed);
}

TEST(SessionManagerTest, OpenRejectsRestoredLayersThatDoNotFitTheRecipe) {
  auto shard = testing::Shard(SeedModel(), 2, 3);
  auto manager = ManagerFor(*shard);
  SessionOpenOptions wrong_layer;
  wrong_layer.initial_layers.emplace_back(LayerKvGeometry{0, 4, 8, 0});
  wrong_layer.initial_layers.emplace_back(LayerKvGeometry{3, 4, 8, 0});
  EXPECT_TRUE(manager->Open("s", 0, std::move(wrong_layer)).status().IsInvalidArgument());
  SessionOpenOptions missing_layer;
  missing_layer.initial_layers.emplace_back(LayerKvGeometry{2, 4, 8, 0});
  EXPECT_TRUE(
      manager->Open("s", 0, std::move(missing_layer)).status().IsInvalidArgument());
  EXPECT_EQ(manager->session_count(), 0u);
}

}  // namespace
}  // namespace prefixkv
