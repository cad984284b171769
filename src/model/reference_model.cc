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
  // Recurrent layers only (q, k, v unused): input, conv, output-gate and decay
  // projections and the recurrent q/k/v read from the conv output.
  std::vector<float> in_proj, conv, z, decay, rq, rk, rv;
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
  if (!layer_kinds.empty()) {
    if (layer_kinds.size() != static_cast<size_t>(n_layers))
      return bad("layer_kinds needs one letter per layer");
    for (char k : layer_kinds) {
      if (k != 'G' && k != 'W' && k != 'R')
        return bad(std::string("layer kind '") + k + "' is not G, W or R");
      if (k == 'W' && sliding_window_tokens <= 0)
        return bad("a W layer needs sliding_window_tokens > 0");
    }
  }
  if (conv_kernel < 2) return bad("conv_kernel must be at least 2");
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
    if (!c.layer_kinds.empty() && c.layer_kinds[Sz(i)] == 'R') {
      // Channels == hidden: the state heads are the query heads.
      l.in_proj = gen.Fill(Sz(h * h), scale(h));
      l.conv = gen.Fill(Sz(c.conv_kernel * h), 0.5f / std::sqrt(float(c.conv_kernel)));
      l.z = gen.Fill(Sz(h * h), scale(h));
      l.decay = gen.Fill(Sz(c.n_heads * h), scale(h));
      l.rq = gen.Fill(Sz(h * h), scale(h));
      l.rk = gen.Fill(Sz(h * h), scale(h));
      l.rv = gen.Fill(Sz(h * h), scale(h));
    } else {
      l.q = gen.Fill(Sz(h * h), scale(h));
      l.k = gen.Fill(Sz(kv * h), scale(h));
      l.v = gen.Fill(Sz(kv * h), scale(h));
    }
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

char ReferenceModel::LayerKind(int layer) const {
  if (!config_.layer_kinds.empty()) return config_.layer_kinds[Sz(layer)];
  if (config_.sliding_window_tokens == 0) return 'G';
  return (layer + 1) % config_.global_layer_every == 0 ? 'G' : 'W';
}

int64_t ReferenceModel::LayerWindowTokens(int layer) const {
  return LayerKind(layer) == 'W' ? config_.sliding_window_tokens : 0;
}

bool ReferenceModel::IsRecurrentLayer(int layer) const { return LayerKind(layer) == 'R'; }

RecurrentShape ReferenceModel::LayerRecurrentShape(int layer) const {
  if (!IsRecurrentLayer(layer)) return {};
  return {config_.conv_kernel - 1, config_.hidden_size, config_.n_heads,
          config_.head_dim()};
}

int64_t ReferenceModel::NewKeyFloats(int layer, int64_t rows) const {
  if (IsRecurrentLayer(layer)) return rows * config_.hidden_size;
  return config_.n_kv_heads * rows * config_.head_dim();
}

int64_t ReferenceModel::NewValueFloats(int layer, int64_t rows) const {
  if (IsRecurrentLayer(layer)) return LayerRecurrentShape(layer).state_floats();
  return NewKeyFloats(layer, rows);
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
  if (IsRecurrentLayer(layer)) {
    RunRecurrent(layer, x, positions, past, new_keys, new_values);
  } else {
    RunAttention(layer, x, positions, past, new_keys, new_values);
  }
  RunMlp(layer, x);
}

void ReferenceModel::RunRecurrent(int layer, HiddenStates* x,
                                  std::span<const int64_t> positions,
                                  const LayerKvCache* past, float* new_conv,
                                  float* new_state) const {
  const LayerWeights& w = weights_->layers[Sz(layer)];
  const ModelConfig& c = config_;
  const int64_t rows = x->rows, h = c.hidden_size, heads = c.n_heads, d = c.head_dim(),
                k_width = c.conv_kernel;
  std::vector<float> normed(Sz(rows * h)), z(Sz(rows * h)), a(Sz(rows * heads)),
      conv(Sz(rows * h)), q(Sz(rows * h)), k(Sz(rows * h)), v(Sz(rows * h)),
      y(Sz(rows * h)), proj(Sz(rows * h));
  RmsNormRows(x->values.data(), rows, h, w.in_norm.data(), c.rms_eps, normed.data());
  MatMulRows(normed.data(), rows, h, w.in_proj.data(), h, new_conv);
  MatMulRows(normed.data(), rows, h, w.z.data(), h, z.data());
  MatMulRows(normed.data(), rows, h, w.decay.data(), heads, a.data());
  const int64_t past_len = past ? past->length() : 0;
  // The conv input at an absolute position: the past ring, this chunk, or (before
  // position 0) nothing, which contributes no term.
  auto input = [&](int64_t pos) -> const float* {
    if (pos < 0) return nullptr;
    if (pos < past_len) return past->ConvRow(pos);
    return new_conv + (pos - past_len) * h;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = positions[Sz(r)];
    for (int64_t ch = 0; ch < h; ++ch) {
      float acc = 0;
      for (int64_t j = 0; j < k_width; ++j) {
        const float* in = input(p - (k_width - 1) + j);
        if (in != nullptr) acc += w.conv[Sz(j * h + ch)] * in[ch];
      }
      conv[Sz(r * h + ch)] = model_internal::Silu(acc);
    }
  }
  MatMulRows(conv.data(), rows, h, w.rq.data(), h, q.data());
  MatMulRows(conv.data(), rows, h, w.rk.data(), h, k.data());
  MatMulRows(conv.data(), rows, h, w.rv.data(), h, v.data());
  std::vector<float> state(Sz(heads * d * d), 0.0f);
  if (past != nullptr) std::copy_n(past->State(), state.size(), state.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // Token by token in position order: the same steps whether the rows come in one
  // run or one per decode.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t hh = 0; hh < heads; ++hh) {
      const float decay = 1.0f / (1.0f + std::exp(-(a[Sz(r * heads + hh)] + 2.0f)));
      const float* qh = q.data() + r * h + hh * d;
      const float* kh = k.data() + r * h + hh * d;
      const float* vh = v.data() + r * h + hh * d;
      float* s = state.data() + hh * d * d;
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j)
          s[i * d + j] = decay * s[i * d + j] + kh[i] * vh[j];
      }
      for (int64_t j = 0; j < d; ++j) {
        float acc = 0;
        for (int64_t i = 0; i < d; ++i) acc += qh[i] * s[i * d + j];
        const int64_t at = r * h + hh * d + j;
        y[Sz(at)] = acc * scale * model_internal::Silu(z[Sz(at)]);
      }
    }
  }
  std::copy(state.begin(), state.end(), new_state);
  MatMulRows(y.data(), rows, h, w.o.data(), h, proj.data());
  for (size_t i = 0; i < proj.size(); ++i) x->values[i] += proj[i];
}

void ReferenceModel::RunAttention(int layer, HiddenStates* x,
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
}

void ReferenceModel::RunMlp(int layer, HiddenStates* x) const {
  const LayerWeights& w = weights_->layers[Sz(layer)];
  const ModelConfig& c = config_;
  const int64_t rows = x->rows, h = c.hidden_size;
  std::vector<float> normed(Sz(rows * h)), proj(Sz(rows * h));
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
  std::vector<float> keys, values;
  // Stateless: every layer sees only this run's keys (no past), all positions at once.
  for (int layer = 0; layer < config_.n_layers; ++layer) {
    keys.resize(Sz(NewKeyFloats(layer, x.rows)));
    values.resize(Sz(NewValueFloats(layer, x.rows)));
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
