// Helpers for the session tests: the seed's tiny dense Llama, managers and
// adapters over it, and greedy decoding through the KV manager.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "prefixkv/boundary_adapter.h"
#include "prefixkv/reference_model.h"
#include "prefixkv/session.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

// The seed fixture: vocab 48, hidden 32, 6 layers, 4 heads (MHA), seed 20260716.
inline std::shared_ptr<const ReferenceModel> SeedModel(ModelConfig config = {}) {
  auto model = ReferenceModel::Create(config);
  EXPECT_OK(model);
  return *model;
}

inline std::unique_ptr<ReferenceShard> Shard(std::shared_ptr<const ReferenceModel> model,
                                             int start, int end) {
  auto shard = ReferenceShard::Create(std::move(model), start, end);
  EXPECT_OK(shard);
  return std::move(shard).value();
}

inline std::unique_ptr<ReferenceShard> FullShard(
    std::shared_ptr<const ReferenceModel> model) {
  int last = model->config().n_layers - 1;
  return Shard(std::move(model), 0, last);
}

inline KvCacheRecipe RecipeOf(const ShardComputation& shard) {
  auto recipe = KvRecipeFor(shard);
  EXPECT_OK(recipe);
  return *recipe;
}

inline std::unique_ptr<SessionManager> ManagerFor(const ShardComputation& shard,
                                                  SessionManagerOptions config = {},
                                                  Clock* clock = nullptr) {
  return std::make_unique<SessionManager>(RecipeOf(shard), config, clock);
}

inline StepInput Tokens(std::vector<int32_t> ids) {
  StepInput in;
  in.token_ids = std::move(ids);
  return in;
}

inline StepInput Boundary(BoundaryBundle bundle) {
  StepInput in;
  in.boundary = std::move(bundle);
  return in;
}

// The TailOutput of a step; fails the test on an error, a miss or a bundle.
inline TailOutput ExpectTail(const StatusOr<StepOutput>& out) {
  EXPECT_OK(out);
  if (!out.ok()) return {};
  const TailOutput* tail = std::get_if<TailOutput>(&*out);
  EXPECT_NE(tail, nullptr) << "step did not return a TailOutput";
  return tail ? *tail : TailOutput{};
}

// The seed model's full shard, a manager and an adapter over it, and session
// "s" at epoch 0 after the prompt 1, 2, 3 (most adapter tests start there).
struct PrefilledSession {
  std::shared_ptr<const ReferenceModel> model = SeedModel();
  std::unique_ptr<ReferenceShard> shard = FullShard(model);
  std::unique_ptr<SessionManager> manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter{shard.get(), manager.get()};
  TailOutput first = ExpectTail(adapter.Prefill("s", 0, Tokens({1, 2, 3})));
};

inline BoundaryBundle ExpectBundle(const StatusOr<StepOutput>& out) {
  EXPECT_OK(out);
  if (!out.ok()) return {};
  const BoundaryBundle* bundle = std::get_if<BoundaryBundle>(&*out);
  EXPECT_NE(bundle, nullptr) << "step did not return a BoundaryBundle";
  return bundle ? *bundle : BoundaryBundle{};
}

// The CacheMiss a step or resolve returned; fails the test otherwise.
template <typename Variant>
CacheMiss ExpectMiss(const StatusOr<Variant>& out) {
  EXPECT_OK(out);
  if (!out.ok()) return {};
  const CacheMiss* miss = std::get_if<CacheMiss>(&*out);
  EXPECT_NE(miss, nullptr) << "expected a CacheMiss";
  return miss ? *miss : CacheMiss{};
}

// Greedy decode of one full-model session through the KV manager; each
// step's logits go to `logits` when given.
inline std::vector<int32_t> CachedGreedy(
    KvBoundaryAdapter& adapter, const std::string& sid, uint64_t epoch,
    const std::vector<int32_t>& prompt, int n_new,
    std::vector<std::vector<float>>* logits = nullptr) {
  TailOutput out = ExpectTail(adapter.Prefill(sid, epoch, Tokens(prompt)));
  std::vector<int32_t> tokens = {out.token_id};
  if (logits != nullptr) logits->push_back(out.logits);
  for (int i = 1; i < n_new; ++i) {
    out = ExpectTail(adapter.Decode(sid, epoch, Tokens({out.token_id})));
    tokens.push_back(out.token_id);
    if (logits != nullptr) logits->push_back(out.logits);
  }
  return tokens;
}

// Each of `logits` (one per step, the step after `prompt` + tokens[0..i)) equals
// the stateless runner's logits there bit for bit: stricter than the tokens where
// the tiny model's greedy tokens barely vary.
inline void ExpectStatelessLogits(const ReferenceModel& model,
                                  const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& tokens,
                                  const std::vector<std::vector<float>>& logits) {
  ASSERT_EQ(logits.size(), tokens.size());
  std::vector<int32_t> seq = prompt;
  for (size_t i = 0; i < logits.size(); ++i) {
    auto stateless = model.NextTokenLogits(seq);
    ASSERT_OK(stateless);
    EXPECT_TRUE(*stateless == logits[i]) << "logits differ at step " << i;
    seq.push_back(tokens[i]);
  }
}

inline std::vector<int32_t> StatelessGreedy(const ReferenceModel& model,
                                            const std::vector<int32_t>& prompt,
                                            int n_new) {
  auto tokens = model.StatelessGreedy(prompt, n_new);
  EXPECT_OK(tokens);
  return tokens.ok() ? *tokens : std::vector<int32_t>{};
}

inline std::shared_ptr<Session> ExpectSession(const StatusOr<SessionOrMiss>& found) {
  EXPECT_OK(found);
  if (!found.ok()) return nullptr;
  auto* session = std::get_if<std::shared_ptr<Session>>(&*found);
  EXPECT_NE(session, nullptr) << "expected a live session";
  return session ? *session : nullptr;
}

}  // namespace prefixkv::testing
