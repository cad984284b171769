// The reference model: a deterministic float32 dense Llama in plain C++.
//
// It exists to prove that cached decoding (and, later, restored prefix caches)
// produce exactly the tokens a stateless whole-sequence run produces. Components:
// token embeddings, RMSNorm, rotary position embeddings (rotate-half), grouped-query
// attention (n_kv_heads divides n_heads), a SwiGLU MLP, a final norm and an LM head.
// Weights come from a seeded generator, so a config names one model exactly.
//
// Optional sliding-window pattern: with sliding_window_tokens = W > 0, layer i is
// global when (i + 1) % global_layer_every == 0 and windowed otherwise; a windowed
// layer's query at position p attends to positions (p - W, p]. Windowed layers keep
// a rotating KV state in cached runs; the stateless runner applies the same mask.
//
// Optional recurrent layers (a hybrid model): `layer_kinds` names every layer's
// kind, one letter per layer: 'G' full attention, 'W' sliding window (needs
// sliding_window_tokens > 0), 'R' recurrent. A recurrent layer is a small gated
// linear-attention layer in the Mamba/GLA style: u = in_proj(norm(x)), a causal
// depthwise convolution of width conv_kernel over u, SiLU, then per head a state
// S (head_dim x head_dim) updated token by token, S = decay * S + k v^T, read as
// q S, gated by SiLU(z) and projected back. Its cached state is fixed-size: the
// last conv_kernel - 1 inputs u plus S (LayerKvCache's recurrent kind).
//
// Bit-exact parity: cached and stateless runs share every kernel, and every sum
// (dot products, softmax, weighted values) runs over positions in absolute order,
// so the logits are identical, not merely close.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/shard_computation.h"
#include "prefixkv/status.h"

namespace prefixkv {

// The model's shape and weights seed. Small defaults: tests run it in
// milliseconds. Every field is validated by Validate() (Create calls it).
struct ModelConfig {
  int64_t vocab_size = 48;
  int64_t hidden_size = 32;  // n_heads * head_dim
  int n_layers = 6;
  int64_t n_heads = 4;             // query heads
  int64_t n_kv_heads = 4;          // key/value heads; must divide n_heads
  int64_t intermediate_size = 64;  // SwiGLU width
  float rms_eps = 1e-6f;
  float rope_theta = 10000.0f;
  uint64_t seed = 20260716;           // weight generator seed
  int64_t sliding_window_tokens = 0;  // 0: every layer global
  int global_layer_every = 4;         // with a window: every Nth layer is global
  // Empty: the window rule above. Otherwise n_layers letters of G, W, R.
  std::string layer_kinds;
  int64_t conv_kernel = 4;  // recurrent layers' convolution width (>= 2)

  int64_t head_dim() const { return n_heads > 0 ? hidden_size / n_heads : 0; }
  // InvalidArgument naming the first inconsistent field.
  Status Validate() const;
};

// Immutable after Create; thread-safe for concurrent use.
class ReferenceModel {
 public:
  // Builds the weights from config.seed. InvalidArgument for a config that
  // fails Validate().
  static StatusOr<std::shared_ptr<const ReferenceModel>> Create(
      const ModelConfig& config);
  ~ReferenceModel();
  ReferenceModel(const ReferenceModel&) = delete;
  ReferenceModel& operator=(const ReferenceModel&) = delete;

  const ModelConfig& config() const { return config_; }
  // "dense-llama": the canonical architecture adapter of this model.
  static constexpr std::string_view kArchitecture = "dense-llama";
  // 0 for a global or recurrent layer, else the window in tokens.
  int64_t LayerWindowTokens(int layer) const;
  // The recurrent state shape of `layer`; empty (channels 0) unless recurrent.
  RecurrentShape LayerRecurrentShape(int layer) const;
  bool IsRecurrentLayer(int layer) const;
  // Floats RunLayer writes to new_keys / new_values for `rows` new positions.
  int64_t NewKeyFloats(int layer, int64_t rows) const;
  int64_t NewValueFloats(int layer, int64_t rows) const;

  // --- stateless whole-sequence runner (ground truth) ---
  // Logits (vocab_size floats) after the last token of `token_ids`,
  // recomputing the whole sequence. InvalidArgument for an empty sequence or a
  // token outside [0, vocab_size).
  StatusOr<std::vector<float>> NextTokenLogits(std::span<const int32_t> token_ids) const;
  // The argmax of NextTokenLogits (ties: the lowest id). Errors as above.
  StatusOr<int32_t> WholeModelNextToken(std::span<const int32_t> token_ids) const;
  // Greedy continuation of `prompt` by `n_new` tokens, recomputing every step.
  StatusOr<std::vector<int32_t>> StatelessGreedy(std::span<const int32_t> prompt,
                                                 int n_new) const;

  // --- building blocks shared by both runners and by ReferenceShard ---
  // One hidden row per token. InvalidArgument for a token outside the vocab.
  StatusOr<HiddenStates> Embed(std::span<const int32_t> token_ids) const;
  // Runs layer `layer` in place over x at consecutive `positions` starting at
  // past length (0 without `past`). Writes this chunk's post-RoPE keys/values,
  // [n_kv_heads][rows][head_dim], to new_keys/new_values; a recurrent layer writes
  // its conv inputs [1][rows][hidden] and the state after the last row. REQUIRES: a
  // valid layer index, positions.size() == x->rows, and new_keys/new_values sized
  // NewKeyFloats / NewValueFloats (ReferenceShard checks these for callers).
  void RunLayer(int layer, HiddenStates* x, std::span<const int64_t> positions,
                const LayerKvCache* past, float* new_keys, float* new_values) const;
  // RMSNorm with the final norm's weights, row by row.
  HiddenStates FinalNorm(const HiddenStates& x) const;
  // Logits of one normed hidden row (hidden_size floats at `normed_row`).
  std::vector<float> LmHead(const float* normed_row) const;

 private:
  struct Weights;
  ReferenceModel(const ModelConfig& config, std::unique_ptr<Weights> weights);
  void RunAttention(int layer, HiddenStates* x, std::span<const int64_t> positions,
                    const LayerKvCache* past, float* new_keys, float* new_values) const;
  void RunRecurrent(int layer, HiddenStates* x, std::span<const int64_t> positions,
                    const LayerKvCache* past, float* new_conv, float* new_state) const;
  void RunMlp(int layer, HiddenStates* x) const;
  char LayerKind(int layer) const;

  ModelConfig config_;
  std::unique_ptr<Weights> weights_;
};

// Layers [start_layer, end_layer] of a ReferenceModel as a ShardComputation.
// Immutable; thread-safe for concurrent use.
class ReferenceShard final : public ShardComputation {
 public:
  // InvalidArgument unless 0 <= start_layer <= end_layer < n_layers.
  // `architecture_adapter` overrides the reported architecture (tests of aliases).
  static StatusOr<std::unique_ptr<ReferenceShard>> Create(
      std::shared_ptr<const ReferenceModel> model, int start_layer, int end_layer,
      std::string_view architecture_adapter = ReferenceModel::kArchitecture);

  // ShardComputation (shard_computation.h states each contract).
  std::string_view architecture_adapter() const override { return architecture_; }
  int start_layer() const override { return start_; }
  int end_layer() const override { return end_; }
  int total_layers() const override { return model_->config().n_layers; }
  int64_t hidden_size() const override { return model_->config().hidden_size; }
  KvGeometry kv_geometry() const override;
  int64_t layer_window_tokens(int layer) const override;
  RecurrentShape layer_recurrent_shape(int layer) const override;
  StatusOr<HiddenStates> EmbedTokens(std::span<const int32_t> token_ids) const override;
  StatusOr<CachedRunResult> RunLayersCached(
      const HiddenStates& hidden, std::span<const int64_t> positions, const PastKv& past,
      const CancellationToken* cancel) const override;
  HiddenStates FinalNorm(const HiddenStates& hidden) const override;
  std::vector<float> LmHead(const float* normed_row) const override;

  // The model this shard runs layers of.
  const ReferenceModel& model() const { return *model_; }

 private:
  ReferenceShard(std::shared_ptr<const ReferenceModel> model, int start, int end,
                 std::string_view architecture);
  Status CheckRunInputs(const HiddenStates& hidden, std::span<const int64_t> positions,
                        const PastKv& past) const;

  std::shared_ptr<const ReferenceModel> model_;
  int start_;
  int end_;
  std::string architecture_;
};

}  // namespace prefixkv
