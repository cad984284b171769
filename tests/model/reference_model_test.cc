// The reference model: determinism, config validation, and bit-exact parity of the
// shard's cached runner against the stateless whole-sequence runner (MHA, GQA and
// sliding-window layers, and hybrid mixes with recurrent layers), driven here without
// the session manager.
#include "prefixkv/reference_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

std::shared_ptr<const ReferenceModel> Model(ModelConfig config) {
  auto model = ReferenceModel::Create(config);
  EXPECT_OK(model);
  return *model;
}

ModelConfig Gqa() {
  ModelConfig c;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  return c;
}

ModelConfig Windowed() {
  ModelConfig c = Gqa();
  c.n_layers = 8;
  c.sliding_window_tokens = 3;
  c.global_layer_every = 4;
  return c;
}

// Decodes through one full shard with caches kept by hand; returns per-step logits.
std::vector<std::vector<float>> CachedLogits(std::shared_ptr<const ReferenceModel> model,
                                             const std::vector<int32_t>& tokens,
                                             size_t prefill) {
  auto shard = ReferenceShard::Create(model, 0, model->config().n_layers - 1);
  EXPECT_OK(shard);
  std::map<int, LayerKvCache> caches;
  PastKv past;
  for (int l = 0; l < model->config().n_layers; ++l) {
    caches.emplace(
        l, LayerKvCache({l, model->config().n_kv_heads, model->config().head_dim(),
                         model->LayerWindowTokens(l), model->LayerRecurrentShape(l)}));
    past[l] = &caches.at(l);
  }
  std::vector<std::vector<float>> logits;
  size_t pos = 0;
  while (pos < tokens.size()) {
    size_t n = pos == 0 ? prefill : 1;
    std::vector<int32_t> ids(tokens.begin() + static_cast<long>(pos),
                             tokens.begin() + static_cast<long>(pos + n));
    std::vector<int64_t> positions;
    for (size_t i = 0; i < n; ++i) positions.push_back(static_cast<int64_t>(pos + i));
    auto hidden = (*shard)->EmbedTokens(ids);
    auto run = (*shard)->RunLayersCached(*hidden, positions, past, nullptr);
    EXPECT_OK(run);
    for (auto& [layer, chunk] : run->new_kv) {
      EXPECT_OK(caches.at(layer).Append(chunk.keys, chunk.values));
    }
    const HiddenStates& h = run->hidden;
    HiddenStates last{1, h.width,
                      std::vector<float>(h.row(h.rows - 1), h.row(h.rows - 1) + h.width)};
    logits.push_back((*shard)->LmHead((*shard)->FinalNorm(last).values.data()));
    pos += n;
  }
  return logits;
}

void ExpectBitExactParity(const ModelConfig& config, size_t prefill) {
  auto model = Model(config);
  std::vector<int32_t> tokens = {2, 17, 8, 25, 6, 40, 1, 33, 12, 9, 44, 3};
  auto cached = CachedLogits(model, tokens, prefill);
  ASSERT_EQ(cached.size(), tokens.size() - prefill + 1);
  for (size_t step = 0; step < cached.size(); ++step) {
    size_t len = prefill + step;
    auto stateless = model->NextTokenLogits(std::span(tokens).first(len));
    ASSERT_OK(stateless);
    ASSERT_EQ(stateless->size(), cached[step].size());
    // Same kernels, same summation order: equal bits, not just close values.
    EXPECT_EQ(std::memcmp(stateless->data(), cached[step].data(), stateless->size() * 4),
              0)
        << "logits differ after " << len << " tokens";
  }
}

TEST(ReferenceModel, CachedDecodeIsBitExactWithStatelessForMultiHeadAttention) {
  ExpectBitExactParity(ModelConfig{}, 4);
}

TEST(ReferenceModel, CachedDecodeIsBitExactWithStatelessForGroupedQueryAttention) {
  ExpectBitExactParity(Gqa(), 5);
}

TEST(ReferenceModel, CachedDecodeIsBitExactWithStatelessForSlidingWindowLayers) {
  // Window 3 with a 5-token prefill: the ring wraps during prefill and again while
  // decoding, and the global layers (3 and 7) still see every position.
  ExpectBitExactParity(Windowed(), 5);
}

ModelConfig Hybrid(const std::string& kinds) {
  ModelConfig c = Gqa();
  c.n_layers = static_cast<int>(kinds.size());
  c.sliding_window_tokens = 3;
  c.layer_kinds = kinds;
  return c;
}

TEST(ReferenceModel, CachedDecodeIsBitExactWithStatelessForEveryHybridMix) {
  // Conv kernel 4 keeps 3 inputs: prefill 1 leaves the ring short, 3 fills it, 5
  // wraps it; the window-3 layers wrap too. Every mix of the three kinds.
  for (const std::string kinds : {"R", "GR", "RW", "WRG", "RGWR", "GWRRWG", "RRR"}) {
    for (size_t prefill : {1, 3, 5}) {
      SCOPED_TRACE(kinds + " prefill " + std::to_string(prefill));
      ExpectBitExactParity(Hybrid(kinds), prefill);
    }
  }
}

TEST(ReferenceModel, RecurrentStateCarriesTokensBeyondTheConvolution) {
  // A recurrent-only model: the first token is far outside the conv kernel, so
  // only the state can carry it. Guards the hybrid parity test against a state
  // that is silently ignored, and the R layers against being attention layers.
  std::vector<int32_t> a = {2, 17, 8, 25, 6, 40, 1, 33, 12};
  std::vector<int32_t> b = a;
  b[0] = 30;
  auto model = Model(Hybrid("RRR"));
  auto la = model->NextTokenLogits(a);
  auto lb = model->NextTokenLogits(b);
  auto attention = Model(Hybrid("GGG"))->NextTokenLogits(a);
  ASSERT_OK(la);
  ASSERT_OK(lb);
  ASSERT_OK(attention);
  EXPECT_NE(*la, *lb);
  EXPECT_NE(*la, *attention);
  EXPECT_TRUE(model->IsRecurrentLayer(1));
  EXPECT_EQ(model->LayerRecurrentShape(1).state_floats(), 4 * 8 * 8);
}

TEST(ReferenceModel, RejectsBadLayerKinds) {
  for (const std::string kinds : {"GR", "GRX", "GWR"}) {
    ModelConfig c = Hybrid("GRR");
    c.layer_kinds = kinds;
    if (kinds == "GWR") c.sliding_window_tokens = 0;  // W without a window
    EXPECT_TRUE(ReferenceModel::Create(c).status().IsInvalidArgument()) << kinds;
  }
  ModelConfig short_kernel = Hybrid("GRR");
  short_kernel.conv_kernel = 1;
  EXPECT_TRUE(ReferenceModel::Create(short_kernel).status().IsInvalidArgument());
}

TEST(ReferenceModel, SlidingWindowChangesTheModelsOutput) {
  // Guards the windowed parity test against a window that is silently ignored.
  std::vector<int32_t> tokens = {2, 17, 8, 25, 6, 40, 1, 33, 12};
  ModelConfig full = Windowed();
  full.sliding_window_tokens = 0;
  auto windowed_logits = Model(Windowed())->NextTokenLogits(tokens);
  auto full_logits = Model(full)->NextTokenLogits(tokens);
  ASSERT_OK(windowed_logits);
  ASSERT_OK(full_logits);
  EXPECT_NE(*windowed_logits, *full_logits);
}

TEST(ReferenceModel, SameConfigGivesTheSameModelAndSeedsDiffer) {
  std::vector<int32_t> prompt = {5, 12, 3, 41};
  auto a = Model(ModelConfig{})->StatelessGreedy(prompt, 6);
  auto b = Model(ModelConfig{})->StatelessGreedy(prompt, 6);
  ModelConfig other;
  other.seed = 7;
  auto c = Model(other)->NextTokenLogits(prompt);
  auto d = Model(ModelConfig{})->NextTokenLogits(prompt);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  ASSERT_OK(d);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*c, *d);
}

TEST(ReferenceModel, RejectsInconsistentConfigs) {
  ModelConfig bad_heads = Gqa();
  bad_heads.n_kv_heads = 3;  // does not divide 4 query heads
  EXPECT_TRUE(ReferenceModel::Create(bad_heads).status().IsInvalidArgument());
  ModelConfig odd_dim;
  odd_dim.hidden_size = 12;  // head_dim 3 cannot be rotated in halves
  EXPECT_TRUE(ReferenceModel::Create(odd_dim).status().IsInvalidArgument());
  auto model = Model(ModelConfig{});
  EXPECT_TRUE(
      model->NextTokenLogits(std::vector<int32_t>{48}).status().IsInvalidArgument());
  EXPECT_TRUE(ReferenceShard::Create(model, 4, 6).status().IsInvalidArgument());
}

TEST(ReferenceShard, RejectsPositionsThatDoNotContinueThePast) {
  auto model = Model(ModelConfig{});
  auto shard = ReferenceShard::Create(model, 0, 5);
  ASSERT_OK(shard);
  auto hidden = (*shard)->EmbedTokens(std::vector<int32_t>{1, 2});
  ASSERT_OK(hidden);
  std::vector<int64_t> gap = {1, 2};  // no past, so the run must start at 0
  EXPECT_TRUE(
      (*shard)->RunLayersCached(*hidden, gap, {}, nullptr).status().IsInvalidArgument());
  std::vector<int64_t> skip = {0, 2};
  EXPECT_TRUE(
      (*shard)->RunLayersCached(*hidden, skip, {}, nullptr).status().IsInvalidArgument());
}

TEST(ReferenceShard, ACancelledTokenStopsTheRun) {
  auto model = Model(ModelConfig{});
  auto shard = ReferenceShard::Create(model, 0, 5);
  ASSERT_OK(shard);
  auto hidden = (*shard)->EmbedTokens(std::vector<int32_t>{1, 2});
  CancellationToken cancel;
  cancel.Cancel();
  std::vector<int64_t> positions = {0, 1};
  auto run = (*shard)->RunLayersCached(*hidden, positions, {}, &cancel);
  EXPECT_EQ(run.status().code(), StatusCode::kAborted);
}

TEST(ReferenceShard, RejectsPastKvOfAnotherHeadGeometry) {
  auto model = Model(Gqa());  // 2 KV heads of 8
  auto shard = ReferenceShard::Create(model, 0, 0);
  ASSERT_OK(shard);
  auto hidden = (*shard)->EmbedTokens(std::vector<int32_t>{1});
  ASSERT_OK(hidden);
  std::vector<int64_t> positions = {2};
  // Two cached positions of 1 KV head of 8, then of 2 KV heads of 4: the
  // attention kernel would read the model's heads and rows past their end.
  for (auto [heads, dim] : {std::pair<int64_t, int64_t>{1, 8}, {2, 4}}) {
    LayerKvCache cache({0, heads, dim, 0, {}});
    auto rows = [heads = heads, dim = dim] {  // clang 14 captures no structured binding
      uint8_t* out = nullptr;
      SharedBytes b =
          SharedBytes::Allocate(static_cast<size_t>(heads * 2 * dim) * 4, &out);
      std::memset(out, 0, b.size());
      return Tensor(DType::kFloat32, {heads, 2, dim}, std::move(b));
    };
    ASSERT_OK(cache.Append(rows(), rows()));
    PastKv past{{0, &cache}};
    EXPECT_TRUE((*shard)
                    ->RunLayersCached(*hidden, positions, past, nullptr)
                    .status()
                    .IsInvalidArgument())
        << heads << " KV heads of " << dim;
  }
}

}  // namespace
}  // namespace prefixkv
