// The reference dense Llama (reference_model.h): config validation, seeded
// weights, one layer's forward pass, the final norm and LM head, and the
// stateless greedy runner. It is the oracle of the project: cached and restored
// decoding is checked against StatelessGreedy, so everything here shares the
// kernels of kernels.cc and sums over positions in absolute order, so that the
// two paths give identical logits.
#include "prefixkv/reference_model.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "kernels.h"

namespace prefixkv {

using model_internal::AttendRows;
using model_internal::AttentionShape;
using model_internal::KvSource;
using model_internal::MatMulRows;
using model_internal::RmsNormRows;

struct LayerWeights {
  std::vector<float> in_norm, q, k, v, o, post_norm, gate, up, down;
};

struct ReferenceModel::Weights {
  std::vector<float> embed;  // [vocab][hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  std::vector<float> lm_head;   // [vocab][hidden]
  std::vector<float> inv_freq;  // [head_dim / 2]
};

namespace {

// Standard normals from mt19937_64 via Box-Muller written out here, so the
// weights do not depend on the standard library's distribution implementation.
class NormalGenerator {
 public:
  explicit NormalGenerator(uint64_t seed) : rng_(seed) {}
  float Next() {
    double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;          // [0, 1)
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(2.0 * std::numbers::pi * u2));
  }
  std::vector<float> Fill(size_t n, float scale, float mean = 0.0f) {
    std::vector<float> out(n);
    for (float& x : out) x = mean + Next() * scale;
    return out;
  }

 private:
  std::mt19937_64 rng_;
};

size_t Sz(int64_t n) { return static_cast<size_t>(n); }

}  // namespace

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("model config: " + what);
  };
  if (vocab_size <= 0) return bad("vocab_size must be positive");
  if (n_layers <= 0) return bad("n_layers must be positive");
  if (n_heads <= 0 || hidden_size <= 0 || hidden_size % n_heads != 0) {
    return bad("hidden_size must be a positive multiple of n_heads");
  }
  if (head_dim() % 2 != 0) return bad("head_dim must be even (rotate-half RoPE)");
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    return bad("n_kv_heads must divide n_heads");
  if (intermediate_size <= 0) return bad("intermediate_size must be positive");
  if (sliding_window_tokens < 0) return bad("sliding_window_tokens must be >= 0");
  if (sliding_window_tokens > 0 && global_layer_every <= 0) {
    return bad("global_layer_every must be positive with a sliding window");
  }
  if (!(rms_eps > 0) || !(rope_theta > 0))
    return bad("rms_eps and rope_theta must be positive");
  return Status::OK();
}

ReferenceModel::ReferenceModel(const ModelConfig& config,
                               std::unique_ptr<Weights> weights)
    : config_(config), weights_(std::move(weights)) {}
ReferenceModel::~ReferenceModel() = default;

StatusOr<std::shared_ptr<const ReferenceModel>> ReferenceModel::Create(
    const ModelConfig& c) {
  PKV_RETURN_IF_ERROR(c.Validate());
  NormalGenerator gen(c.seed);
  auto w = std::make_unique<Weights>();
  int64_t h = c.hidden_size, hd = c.head_dim(), kv = c.n_kv_heads * hd,
          im = c.intermediate_size;
  // Scaled by 1/sqrt(fan_in) so activations stay O(1) at any width (0.08 at 32).
  auto scale = [](int64_t fan_in) {
    return 0.45f / std::sqrt(static_cast<float>(fan_in));
  };
  w->embed = gen.Fill(Sz(c.vocab_size * h), 0.08f);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights l;
    l.in_norm = gen.Fill(Sz(h), 0.02f, 1.0f);
    l.q = gen.Fill(Sz(h * h), scale(h));
    l.k = gen.Fill(Sz(kv * h), scale(h));
    l.v = gen.Fill(Sz(kv * h), scale(h));
    l.o = gen.Fill(Sz(h * h), scale(h));
    l.post_norm = gen.Fill(Sz(h), 0.02f, 1.0f);
    l.gate = gen.Fill(Sz(im * h), scale(h));
    l.up = gen.Fill(Sz(im * h), scale(h));
    l.down = gen.Fill(Sz(h * im), scale(im));
    w->layers.push_back(std::move(l));
  }
  w->final_norm = gen.Fill(Sz(h), 0.02f, 1.0f);
  w->lm_head = gen.Fill(Sz(c.vocab_size * h), scale(h));
  for (int64_t i = 0; i < hd / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(hd);
    w->inv_freq.push_back(1.0f / std::pow(c.rope_theta, exponent));
  }
  return std::shared_ptr<const ReferenceModel>(new ReferenceModel(c, std::move(w)));
}

int64_t ReferenceModel::LayerWindowTokens(int layer) const {
  if (config_.sliding_window_tokens == 0) return 0;
  bool global = (layer + 1) % config_.global_layer_every == 0;
  return global ? 0 : config_.sliding_window_tokens;
}

StatusOr<HiddenStates> ReferenceModel::Embed(std::span<const int32_t> token_ids) const {
  HiddenStates x{static_cast<int64_t>(token_ids.size()), config_.hidden_size, {}};
  x.values.resize(Sz(x.rows * x.width));
  for (int64_t r = 0; r < x.rows; ++r) {
    int32_t id = token_ids[Sz(r)];
    if (id < 0 || id >= config_.vocab_size) {
      return Status::InvalidArgument("token id " + std::to_string(id) +
                                     " outside vocabulary of " +
                                     std::to_string(config_.vocab_size));
    }
    std::copy_n(weights_->embed.data() + id * x.width, x.width, x.row(r));
  }
  return x;
}

void ReferenceModel::RunLayer(int layer, HiddenStates* x,
                              std::span<const int64_t> positions,
                              const LayerKvCache* past, float* new_keys,
                              float* new_values) const {
  const LayerWeights& w = weights_->layers[Sz(layer)];
  const ModelConfig& c = config_;
  int64_t rows = x->rows, h = c.hidden_size, hd = c.head_dim(), kvw = c.n_kv_heads * hd;
  std::vector<float> normed(Sz(rows * h)), q(Sz(rows * h)), k(Sz(rows * kvw)),
      v(Sz(rows * kvw)), attn(Sz(rows * h)), proj(Sz(rows * h));
  RmsNormRows(x->values.data(), rows, h, w.in_norm.data(), c.rms_eps, normed.data());
  MatMulRows(normed.data(), rows, h, w.q.data(), h, q.data());
  MatMulRows(normed.data(), rows, h, w.k.data(), kvw, k.data());
  MatMulRows(normed.data(), rows, h, w.v.data(), kvw, v.data());
  for (int64_t r = 0; r < rows; ++r) {
    model_internal::ApplyRope(q.data() + r * h, c.n_heads, hd, positions[Sz(r)],
                              weights_->inv_freq.data());
    model_internal::ApplyRope(k.data() + r * kvw, c.n_kv_heads, hd, positions[Sz(r)],
                              weights_->inv_freq.data());
  }
  // Re-lay this chunk's K/V head-major: the layout of LayerKvCache and of tensors.
  for (int64_t kh = 0; kh < c.n_kv_heads; ++kh) {
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(k.data() + r * kvw + kh * hd, hd, new_keys + (kh * rows + r) * hd);
      std::copy_n(v.data() + r * kvw + kh * hd, hd, new_values + (kh * rows + r) * hd);
    }
  }
  KvSource src{past, past ? past->length() : 0, new_keys, new_values, rows, hd};
  AttentionShape shape{c.n_heads, c.n_kv_heads, hd, LayerWindowTokens(layer)};
  AttendRows(q.data(), rows, positions.data(), shape, src, attn.data());
  MatMulRows(attn.data(), rows, h, w.o.data(), h, proj.data());
  for (size_t i = 0; i < proj.size(); ++i) x->values[i] += proj[i];
  // SwiGLU MLP on the post-attention norm.
  int64_t im = c.intermediate_size;
  std::vector<float> gate(Sz(rows * im)), up(Sz(rows * im));
  RmsNormRows(x->values.data(), rows, h, w.post_norm.data(), c.rms_eps, normed.data());
  MatMulRows(normed.data(), rows, h, w.gate.data(), im, gate.data());
  MatMulRows(normed.data(), rows, h, w.up.data(), im, up.data());
  for (size_t i = 0; i < gate.size(); ++i)
    gate[i] = model_internal::Silu(gate[i]) * up[i];
  MatMulRows(gate.data(), rows, im, w.down.data(), h, proj.data());
  for (size_t i = 0; i < proj.size(); ++i) x->values[i] += proj[i];
}

HiddenStates ReferenceModel::FinalNorm(const HiddenStates& x) const {
  HiddenStates out{x.rows, x.width, std::vector<float>(x.values.size())};
  RmsNormRows(x.values.data(), x.rows, x.width, weights_->final_norm.data(),
              config_.rms_eps, out.values.data());
  return out;
}

std::vector<float> ReferenceModel::LmHead(const float* normed_row) const {
  std::vector<float> logits(Sz(config_.vocab_size));
  MatMulRows(normed_row, 1, config_.hidden_size, weights_->lm_head.data(),
             config_.vocab_size, logits.data());
  return logits;
}

StatusOr<std::vector<float>> ReferenceModel::NextTokenLogits(
    std::span<const int32_t> token_ids) const {
  if (token_ids.empty()) return Status::InvalidArgument("no tokens to run");
  PKV_ASSIGN_OR_RETURN(HiddenStates x, Embed(token_ids));
  std::vector<int64_t> positions(token_ids.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  size_t kv_size = Sz(config_.n_kv_heads * x.rows * config_.head_dim());
  std::vector<float> keys(kv_size), values(kv_size);
  // Stateless: every layer sees only this run's keys (no past), all positions at once.
  for (int layer = 0; layer < config_.n_layers; ++layer) {
    RunLayer(layer, &x, positions, nullptr, keys.data(), values.data());
  }
  HiddenStates last{1, x.width,
                    std::vector<float>(x.row(x.rows - 1), x.row(x.rows - 1) + x.width)};
  return LmHead(FinalNorm(last).values.data());
}

StatusOr<int32_t> ReferenceModel::WholeModelNextToken(
    std::span<const int32_t> token_ids) const {
  PKV_ASSIGN_OR_RETURN(std::vector<float> logits, NextTokenLogits(token_ids));
  return ArgMax(logits);
}

StatusOr<std::vector<int32_t>> ReferenceModel::StatelessGreedy(
    std::span<const int32_t> prompt, int n_new) const {
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int i = 0; i < n_new; ++i) {
    PKV_ASSIGN_OR_RETURN(int32_t next, WholeModelNextToken(tokens));
    tokens.push_back(next);
    out.push_back(next);
  }
  return out;
}

int32_t ArgMax(std::span<const float> values) {
  int32_t best = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (best < 0 || values[i] > values[Sz(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace prefixkv
