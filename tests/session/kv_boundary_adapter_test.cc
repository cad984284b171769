// KvBoundaryAdapter: prefill/decode through the KV manager reproduce the stateless
// whole model token for token (full shard, head/tail seam, head/middle/tail,
// GQA, sliding windows), sessions do not talk across, a disagreeing sequence
// length is a miss, and a cancelled prefill leaves nothing behind.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "tests/session/session_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::Boundary;
using testing::CachedGreedy;
using testing::ExpectBundle;
using testing::ExpectMiss;
using testing::ExpectTail;
using testing::FullShard;
using testing::ManagerFor;
using testing::SeedModel;
using testing::StatelessGreedy;
using testing::Tokens;

TEST(KvBoundaryAdapter, PrefillThenDecodeAppendGrowsOwnedLayers) {
  auto shard = FullShard(SeedModel());
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::vector<int32_t> prompt = {5, 12, 3, 41};
  TailOutput out = ExpectTail(adapter.Prefill("s", 0, Tokens(prompt)));
  auto session = manager->Get("s", 0).value();
  EXPECT_EQ(session->seq_len(), 4);
  for (int layer : session->owned_layers())
    EXPECT_EQ(session->LayerLength(layer).value(), 4);
  EXPECT_EQ(manager->total_bytes(), 4 * manager->recipe().bytes_per_token());
  ExpectTail(adapter.Decode("s", 0, Tokens({out.token_id})));
  EXPECT_EQ(manager->Get("s", 0).value()->seq_len(), 5);
  EXPECT_EQ(manager->total_bytes(), 5 * manager->recipe().bytes_per_token());
}

TEST(KvBoundaryAdapter, CachedFullShardDecodeMatchesStatelessWholeModel) {
  auto model = SeedModel();
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::vector<int32_t> prompt = {2, 17, 8, 25, 6};
  std::vector<int32_t> cached = CachedGreedy(adapter, "s", 0, prompt, 12);
  EXPECT_EQ(cached.size(), 12u);
  EXPECT_EQ(cached, StatelessGreedy(*model, prompt, 12));
}

TEST(KvBoundaryAdapter, CachedPrefillNextTokenMatchesWholeModelLogits) {
  auto model = SeedModel();
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::vector<int32_t> prompt = {9, 1, 44, 6, 30, 11};
  TailOutput out = ExpectTail(adapter.Prefill("s", 0, Tokens(prompt)));
  EXPECT_EQ(out.token_id, model->WholeModelNextToken(prompt).value());
  std::vector<float> whole = model->NextTokenLogits(prompt).value();
  ASSERT_EQ(out.logits.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i)
    EXPECT_NEAR(out.logits[i], whole[i], 1e-6) << i;
}

// Runs a pipeline of shards (head first) greedily; returns the tail's tokens and,
// in *last_logits, the logits of the last step.
std::vector<int32_t> PipelineGreedy(std::vector<KvBoundaryAdapter*> stages,
                                    const std::vector<int32_t>& prompt, int n_new,
                                    std::vector<float>* last_logits = nullptr) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n_new; ++i) {
    StepInput in = Tokens(i == 0 ? prompt : std::vector<int32_t>{tokens.back()});
    for (size_t s = 0; s + 1 < stages.size(); ++s) {
      auto out = i == 0 ? stages[s]->Prefill("s", 0, in) : stages[s]->Decode("s", 0, in);
      in = Boundary(ExpectBundle(out));
    }
    auto out =
        i == 0 ? stages.back()->Prefill("s", 0, in) : stages.back()->Decode("s", 0, in);
    TailOutput tail = ExpectTail(out);
    tokens.push_back(tail.token_id);
    if (last_logits) *last_logits = tail.logits;
  }
  return tokens;
}

// The stateless logits after prompt + every generated token but the last: what
// the last pipeline step must have produced, bit for bit.
std::vector<float> StatelessLastLogits(const ReferenceModel& model,
                                       std::vector<int32_t> prompt,
                                       const std::vector<int32_t>& generated) {
  prompt.insert(prompt.end(), generated.begin(), generated.end() - 1);
  return model.NextTokenLogits(prompt).value();
}

TEST(KvBoundaryAdapter, MultiRangeCachedDecodeParityAcrossASeam) {
  auto model = SeedModel();
  auto head_shard = testing::Shard(model, 0, 2);
  auto tail_shard = testing::Shard(model, 3, 5);
  auto head_mgr = ManagerFor(*head_shard);
  auto tail_mgr = ManagerFor(*tail_shard);
  KvBoundaryAdapter head(head_shard.get(), head_mgr.get());
  KvBoundaryAdapter tail(tail_shard.get(), tail_mgr.get());
  std::vector<int32_t> prompt = {7, 3, 22, 5, 9};
  std::vector<float> logits;
  std::vector<int32_t> tokens = PipelineGreedy({&head, &tail}, prompt, 8, &logits);
  EXPECT_EQ(logits, StatelessLastLogits(*model, prompt, tokens));
  EXPECT_EQ(head_mgr->Get("s", 0).value()->owned_layers(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(tail_mgr->Get("s", 0).value()->owned_layers(), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(tokens, StatelessGreedy(*model, prompt, 8));
}

TEST(KvBoundaryAdapter, HeadMiddleTailShardsReproduceTheWholeModel) {
  auto model = SeedModel();
  auto head_shard = testing::Shard(model, 0, 1);
  auto middle_shard = testing::Shard(model, 2, 3);
  auto tail_shard = testing::Shard(model, 4, 5);
  auto head_mgr = ManagerFor(*head_shard);
  auto middle_mgr = ManagerFor(*middle_shard);
  auto tail_mgr = ManagerFor(*tail_shard);
  KvBoundaryAdapter head(head_shard.get(), head_mgr.get());
  KvBoundaryAdapter middle(middle_shard.get(), middle_mgr.get());
  KvBoundaryAdapter tail(tail_shard.get(), tail_mgr.get());
  std::vector<int32_t> prompt = {31, 5, 18, 22, 4};
  std::vector<float> logits;
  std::vector<int32_t> tokens =
      PipelineGreedy({&head, &middle, &tail}, prompt, 8, &logits);
  EXPECT_EQ(tokens, StatelessGreedy(*model, prompt, 8));
  EXPECT_EQ(logits, StatelessLastLogits(*model, prompt, tokens));
  EXPECT_EQ(middle_mgr->Get("s", 0).value()->seq_len(), 5 + 7);
  EXPECT_EQ(middle_mgr->total_bytes(), 12 * middle_mgr->recipe().bytes_per_token());
}

TEST(KvBoundaryAdapter, GroupedQueryAttentionCachedDecodeMatchesStateless) {
  ModelConfig config;
  config.n_heads = 4;
  config.n_kv_heads = 1;
  auto model = SeedModel(config);
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::vector<int32_t> prompt = {3, 14, 1, 5, 9};
  std::vector<float> logits;
  std::vector<int32_t> tokens = PipelineGreedy({&adapter}, prompt, 10, &logits);
  EXPECT_EQ(tokens, StatelessGreedy(*model, prompt, 10));
  EXPECT_EQ(logits, StatelessLastLogits(*model, prompt, tokens));
  // One KV head instead of four: a quarter of the MHA bytes per token.
  EXPECT_EQ(manager->recipe().bytes_per_token(), 2u * 1 * 8 * 4 * 6);
}

TEST(KvBoundaryAdapter, SlidingWindowCachedDecodeMatchesStatelessAcrossASeam) {
  ModelConfig config;
  config.n_layers = 8;
  config.n_kv_heads = 2;
  config.sliding_window_tokens = 4;
  config.global_layer_every = 4;
  auto model = SeedModel(config);
  auto head_shard = testing::Shard(model, 0, 4);
  auto tail_shard = testing::Shard(model, 5, 7);
  auto head_mgr = ManagerFor(*head_shard);
  auto tail_mgr = ManagerFor(*tail_shard);
  KvBoundaryAdapter head(head_shard.get(), head_mgr.get());
  KvBoundaryAdapter tail(tail_shard.get(), tail_mgr.get());
  std::vector<int32_t> prompt = {2, 27, 18, 4, 33, 7};
  // 6 + 11 positions: every window wraps several times while decoding.
  std::vector<float> logits;
  std::vector<int32_t> tokens = PipelineGreedy({&head, &tail}, prompt, 12, &logits);
  EXPECT_EQ(tokens, StatelessGreedy(*model, prompt, 12));
  EXPECT_EQ(logits, StatelessLastLogits(*model, prompt, tokens));
  auto exported = head_mgr->Get("s", 0).value()->ExportLayers();
  EXPECT_EQ(exported.at(0).cache_type, "RotatingKVCache");
  EXPECT_EQ(exported.at(0).rotating_meta->offset, 17);
  EXPECT_EQ(exported.at(0).keys.dim(1), 4);  // a window, not the whole sequence
  EXPECT_EQ(exported.at(3).cache_type, "KVCache");
  EXPECT_EQ(exported.at(3).keys.dim(1), 17);
}

// Four sessions decoded round-robin on one manager of `config`'s model: tokens
// and every step's logits equal the stateless runner's.
void ExpectFourInterleavedSessionsHaveNoKvCrossTalk(const ModelConfig& config) {
  auto model = SeedModel(config);
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::map<std::string, std::vector<int32_t>> prompts = {{"alpha", {1, 2, 3, 4}},
                                                         {"bravo", {40, 39, 2, 15}},
                                                         {"charlie", {7, 7, 7, 7}},
                                                         {"delta", {31, 5, 18, 22}}};
  const int n_new = 10;
  std::map<std::string, std::vector<int32_t>> references;
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [sid, prompt] : prompts) {
    references[sid] = StatelessGreedy(*model, prompt, n_new);
    distinct.insert(references[sid]);
  }
  // The four prompts must actually diverge, else "no cross-talk" is vacuous.
  ASSERT_EQ(distinct.size(), 4u);
  std::map<std::string, std::vector<int32_t>> generated;
  std::map<std::string, std::vector<std::vector<float>>> logits;
  for (const auto& [sid, prompt] : prompts) {
    TailOutput out = ExpectTail(adapter.Prefill(sid, 0, Tokens(prompt)));
    generated[sid] = {out.token_id};
    logits[sid] = {out.logits};
  }
  // Round-robin decode: every session takes one step per round, interleaved.
  for (int i = 1; i < n_new; ++i) {
    for (const auto& [sid, prompt] : prompts) {
      TailOutput out =
          ExpectTail(adapter.Decode(sid, 0, Tokens({generated[sid].back()})));
      generated[sid].push_back(out.token_id);
      logits[sid].push_back(out.logits);
    }
  }
  for (const auto& [sid, prompt] : prompts) {
    EXPECT_EQ(generated[sid], references[sid]) << sid;
    SCOPED_TRACE(sid);
    testing::ExpectStatelessLogits(*model, prompt, generated[sid], logits[sid]);
  }
  EXPECT_EQ(manager->session_count(), 4u);
}

TEST(KvBoundaryAdapter, FourInterleavedSessionsHaveNoKvCrossTalk) {
  ExpectFourInterleavedSessionsHaveNoKvCrossTalk(ModelConfig{});
}

TEST(KvBoundaryAdapter, FourInterleavedHybridSessionsHaveNoStateCrossTalk) {
  // Window, recurrent and full-attention layers: the recurrent states of four
  // sessions advance in turn on one manager.
  ModelConfig hybrid;
  hybrid.n_kv_heads = 2;
  hybrid.sliding_window_tokens = 3;
  hybrid.layer_kinds = "WRGWRG";
  ExpectFourInterleavedSessionsHaveNoKvCrossTalk(hybrid);
}

TEST(KvBoundaryAdapter, SeqLenMismatchIsAnExplicitCacheMiss) {
  auto shard = FullShard(SeedModel());
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  TailOutput out = ExpectTail(adapter.Prefill("s", 0, Tokens({1, 2, 3})));
  StepInput claim = Tokens({out.token_id});
  claim.expected_seq_len = 99;  // the cache holds 3
  CacheMiss miss = ExpectMiss(adapter.Decode("s", 0, claim));
  EXPECT_EQ(miss.reason, CacheMissReason::kSeqLenMismatch);
  EXPECT_EQ(manager->Get("s", 0).value()->seq_len(),
            3);  // nothing was computed or appended
  claim.expected_seq_len = 3;
  EXPECT_EQ(ExpectTail(adapter.Decode("s", 0, claim)).seq_len, 4);
}

TEST(KvBoundaryAdapter, BoundaryAtTheWrongPositionIsASeqLenMiss) {
  auto model = SeedModel();
  auto head_shard = testing::Shard(model, 0, 2);
  auto tail_shard = testing::Shard(model, 3, 5);
  auto head_mgr = ManagerFor(*head_shard);
  auto tail_mgr = ManagerFor(*tail_shard);
  KvBoundaryAdapter head(head_shard.get(), head_mgr.get());
  KvBoundaryAdapter tail(tail_shard.get(), tail_mgr.get());
  BoundaryBundle first = ExpectBundle(head.Prefill("s", 0, Tokens({1, 2, 3})));
  ExpectTail(tail.Prefill("s", 0, Boundary(first)));
  // Replaying the same bundle (positions 0..2) on a tail that holds 3 positions.
  EXPECT_EQ(ExpectMiss(tail.Decode("s", 0, Boundary(first))).reason,
            CacheMissReason::kSeqLenMismatch);
  EXPECT_EQ(tail_mgr->Get("s", 0).value()->seq_len(), 3);
}

// Delegates to a real shard, calling `before` / `after` around its layers: lets a
// test cancel, release or evict deterministically while a step is in flight.
class HookedShard final : public ShardComputation {
 public:
  HookedShard(const ShardComputation* inner, std::function<void()> before,
              std::function<void()> after)
      : inner_(inner), before_(std::move(before)), after_(std::move(after)) {}
  std::string_view architecture_adapter() const override {
    return inner_->architecture_adapter();
  }
  int start_layer() const override { return inner_->start_layer(); }
  int end_layer() const override { return inner_->end_layer(); }
  int total_layers() const override { return inner_->total_layers(); }
  int64_t hidden_size() const override { return inner_->hidden_size(); }
  KvGeometry kv_geometry() const override { return inner_->kv_geometry(); }
  int64_t layer_window_tokens(int l) const override {
    return inner_->layer_window_tokens(l);
  }
  StatusOr<HiddenStates> EmbedTokens(std::span<const int32_t> ids) const override {
    return inner_->EmbedTokens(ids);
  }
  StatusOr<CachedRunResult> RunLayersCached(
      const HiddenStates& hidden, std::span<const int64_t> positions, const PastKv& past,
      const CancellationToken* cancel) const override {
    if (before_) before_();
    auto out = inner_->RunLayersCached(hidden, positions, past, cancel);
    if (after_) after_();
    return out;
  }
  HiddenStates FinalNorm(const HiddenStates& h) const override {
    return inner_->FinalNorm(h);
  }
  std::vector<float> LmHead(const float* row) const override {
    return inner_->LmHead(row);
  }

 private:
  const ShardComputation* inner_;
  std::function<void()> before_;
  std::function<void()> after_;
};

TEST(KvBoundaryAdapter, CancelledPrefillLeavesTheSessionAndBudgetUnchanged) {
  testing::PrefilledSession s;
  auto& [model, shard, manager, plain, first] = s;
  auto before = manager->Get("s", 0).value()->ExportLayers();
  uint64_t bytes = manager->total_bytes();
  for (bool cancel_before_layers : {true, false}) {
    CancellationToken token;
    std::function<void()> cancel = [&token] { token.Cancel(); };
    HookedShard cancelling(shard.get(), cancel_before_layers ? cancel : nullptr,
                           cancel_before_layers ? nullptr : cancel);
    KvBoundaryAdapter adapter(&cancelling, manager.get());
    StepInput long_prompt = Tokens({4, 5, 6, 7, 8, 9, 10, 11});
    long_prompt.cancel = &token;
    // A continuing turn on a live session, and a brand-new session.
    EXPECT_EQ(adapter.Prefill("s", 0, long_prompt).status().code(), StatusCode::kAborted);
    EXPECT_EQ(adapter.Prefill("fresh", 0, long_prompt).status().code(),
              StatusCode::kAborted);
    auto after = manager->Get("s", 0).value()->ExportLayers();
    for (const auto& [layer, state] : before) {
      EXPECT_TRUE(after.at(layer).keys == state.keys) << layer;
      EXPECT_TRUE(after.at(layer).values == state.values) << layer;
    }
    EXPECT_EQ(manager->total_bytes(), bytes);
    EXPECT_EQ(ExpectMiss(manager->Resolve("fresh", 0)).reason,
              CacheMissReason::kUnknownSession);
  }
  // The session still decodes exactly as if the cancelled calls never happened.
  TailOutput next = ExpectTail(plain.Decode("s", 0, Tokens({4})));
  EXPECT_EQ(next.token_id,
            model->WholeModelNextToken(std::vector<int32_t>{1, 2, 3, 4}).value());
}

TEST(KvBoundaryAdapter, ACancelledFirstStepOfANewerEpochLeavesOlderEpochsStale) {
  testing::PrefilledSession s;
  auto& [model, shard, manager, adapter, first] = s;
  // The route is re-planned (epoch 1); its first prefill is cancelled, so the
  // session it opened (superseding epoch 0) is discarded.
  CancellationToken token;
  token.Cancel();
  StepInput cancelled = Tokens({1, 2, 3, 4});
  cancelled.cancel = &token;
  EXPECT_EQ(adapter.Prefill("s", 1, cancelled).status().code(), StatusCode::kAborted);
  // A late step of the old route is still stale: it neither opens nor commits.
  EXPECT_TRUE(IsStaleRouteEpoch(adapter.Prefill("s", 0, Tokens({1, 2, 3})).status()));
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Resolve("s", 0).status()));
  EXPECT_EQ(manager->session_count(), 0u);
  // Epoch 1 misses as never opened, and its retry runs.
  EXPECT_EQ(ExpectMiss(manager->Resolve("s", 1)).reason,
            CacheMissReason::kUnknownSession);
  EXPECT_EQ(ExpectTail(adapter.Prefill("s", 1, Tokens({1, 2, 3, 4}))).token_id,
            model->WholeModelNextToken(std::vector<int32_t>{1, 2, 3, 4}).value());
}

TEST(KvBoundaryAdapter, SessionReleasedDuringAStepIsAMissAtCommit) {
  auto shard = FullShard(SeedModel());
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter plain(shard.get(), manager.get());
  ExpectTail(plain.Prefill("s", 0, Tokens({1, 2, 3})));
  // The step computes against the session, which is released before it commits.
  HookedShard releasing(shard.get(), nullptr,
                        [&] { ASSERT_OK(manager->Release("s", 0)); });
  KvBoundaryAdapter adapter(&releasing, manager.get());
  EXPECT_EQ(ExpectMiss(adapter.Decode("s", 0, Tokens({4}))).reason,
            CacheMissReason::kReleased);
  EXPECT_EQ(manager->total_bytes(), 0u);
  EXPECT_EQ(manager->session_count(), 0u);
}

TEST(KvBoundaryAdapter, NewerEpochDuringAStepMakesItsCommitStale) {
  auto shard = FullShard(SeedModel());
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter plain(shard.get(), manager.get());
  ExpectTail(plain.Prefill("s", 0, Tokens({1, 2, 3})));
  HookedShard replanning(shard.get(), nullptr, [&] { ASSERT_OK(manager->Open("s", 1)); });
  KvBoundaryAdapter adapter(&replanning, manager.get());
  EXPECT_TRUE(IsStaleRouteEpoch(adapter.Decode("s", 0, Tokens({4})).status()));
  EXPECT_EQ(manager->Get("s", 1).value()->seq_len(), 0);  // the new epoch got nothing
}

TEST(KvBoundaryAdapter, MalformedInputsAreRejected) {
  auto model = SeedModel();
  auto head_shard = testing::Shard(model, 0, 2);
  auto tail_shard = testing::Shard(model, 3, 5);
  auto head_mgr = ManagerFor(*head_shard);
  auto tail_mgr = ManagerFor(*tail_shard);
  KvBoundaryAdapter head(head_shard.get(), head_mgr.get());
  KvBoundaryAdapter tail(tail_shard.get(), tail_mgr.get());
  EXPECT_TRUE(head.Prefill("s", 0, Tokens({})).status().IsInvalidArgument());
  EXPECT_TRUE(
      head.Prefill("s", 0, Tokens({48})).status().IsInvalidArgument());  // vocab 48
  EXPECT_TRUE(tail.Prefill("s", 0, Tokens({1})).status().IsInvalidArgument());
  EXPECT_EQ(head_mgr->session_count() + tail_mgr->session_count(), 0u);
}

}  // namespace
}  // namespace prefixkv
