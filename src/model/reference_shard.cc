// ReferenceShard: a contiguous layer range of the reference model behind the
// ShardComputation interface, the shape a real inference worker has. It lets the
// session and boundary adapter code run against a model split across shards
// without a real model. CheckRunInputs rejects what a caller could get wrong
// (hidden state shape, non-consecutive positions, past KV of another length,
// window or head geometry) with InvalidArgument before any layer runs.
#include <string>

#include "prefixkv/reference_model.h"

namespace prefixkv {

ReferenceShard::ReferenceShard(std::shared_ptr<const ReferenceModel> model, int start,
                               int end, std::string_view architecture)
    : model_(std::move(model)), start_(start), end_(end), architecture_(architecture) {}

StatusOr<std::unique_ptr<ReferenceShard>> ReferenceShard::Create(
    std::shared_ptr<const ReferenceModel> model, int start_layer, int end_layer,
    std::string_view architecture_adapter) {
  if (model == nullptr) return Status::InvalidArgument("shard without a model");
  if (start_layer < 0 || start_layer > end_layer ||
      end_layer >= model->config().n_layers) {
    return Status::InvalidArgument("layer range " + std::to_string(start_layer) + ".." +
                                   std::to_string(end_layer) + " outside a model of " +
                                   std::to_string(model->config().n_layers) + " layers");
  }
  return std::unique_ptr<ReferenceShard>(
      new ReferenceShard(std::move(model), start_layer, end_layer, architecture_adapter));
}

KvGeometry ReferenceShard::kv_geometry() const {
  return {model_->config().n_kv_heads, model_->config().head_dim(), DType::kFloat32};
}

int64_t ReferenceShard::layer_window_tokens(int layer) const {
  return model_->LayerWindowTokens(layer);
}

RecurrentShape ReferenceShard::layer_recurrent_shape(int layer) const {
  return model_->LayerRecurrentShape(layer);
}

StatusOr<HiddenStates> ReferenceShard::EmbedTokens(
    std::span<const int32_t> token_ids) const {
  return model_->Embed(token_ids);
}

HiddenStates ReferenceShard::FinalNorm(const HiddenStates& hidden) const {
  return model_->FinalNorm(hidden);
}

std::vector<float> ReferenceShard::LmHead(const float* normed_row) const {
  return model_->LmHead(normed_row);
}

Status ReferenceShard::CheckRunInputs(const HiddenStates& hidden,
                                      std::span<const int64_t> positions,
                                      const PastKv& past) const {
  if (hidden.rows <= 0 || hidden.width != hidden_size() ||
      hidden.values.size() != static_cast<size_t>(hidden.rows * hidden.width)) {
    return Status::InvalidArgument("hidden states must be non-empty [rows, " +
                                   std::to_string(hidden_size()) + "]");
  }
  if (positions.size() != static_cast<size_t>(hidden.rows)) {
    return Status::InvalidArgument("one position per hidden row required");
  }
  for (size_t i = 1; i < positions.size(); ++i) {
    if (positions[i] != positions[i - 1] + 1) {
      return Status::InvalidArgument("positions must be consecutive");
    }
  }
  for (int layer = start_; layer <= end_; ++layer) {
    auto it = past.find(layer);
    const LayerKvCache* cache = it == past.end() ? nullptr : it->second;
    int64_t past_len = cache ? cache->length() : 0;
    if (positions[0] != past_len) {
      return Status::InvalidArgument(
          "layer " + std::to_string(layer) + " holds " + std::to_string(past_len) +
          " positions but the run starts at " + std::to_string(positions[0]));
    }
    if (cache && cache->geometry().window_tokens != layer_window_tokens(layer)) {
      return Status::InvalidArgument("layer " + std::to_string(layer) +
                                     " past KV has a different attention window");
    }
    if (cache && cache->geometry().recurrent != layer_recurrent_shape(layer)) {
      return Status::InvalidArgument("layer " + std::to_string(layer) +
                                     " past state has a different recurrent shape");
    }
    // The attention kernel reads every KV head of the model at its head dim
    // from the past: a cache of fewer heads or narrower rows would be read
    // past its end.
    const KvGeometry g = kv_geometry();
    if (cache && !cache->is_recurrent() &&
        (cache->geometry().n_kv_heads != g.n_kv_heads ||
         cache->geometry().head_dim != g.head_dim)) {
      return Status::InvalidArgument(
          "layer " + std::to_string(layer) + " past KV has " +
          std::to_string(cache->geometry().n_kv_heads) + " heads of " +
          std::to_string(cache->geometry().head_dim) + ", the model " +
          std::to_string(g.n_kv_heads) + " of " + std::to_string(g.head_dim));
    }
  }
  return Status::OK();
}

StatusOr<CachedRunResult> ReferenceShard::RunLayersCached(
    const HiddenStates& hidden, std::span<const int64_t> positions, const PastKv& past,
    const CancellationToken* cancel) const {
  PKV_RETURN_IF_ERROR(CheckRunInputs(hidden, positions, past));
  CachedRunResult result{hidden, {}};
  KvGeometry g = kv_geometry();
  for (int layer = start_; layer <= end_; ++layer) {
    if (IsCancelled(cancel)) {
      return Status::Aborted("cancelled before layer " + std::to_string(layer));
    }
    uint8_t* keys = nullptr;
    uint8_t* values = nullptr;
    SharedBytes key_bytes = SharedBytes::Allocate(
        static_cast<size_t>(model_->NewKeyFloats(layer, hidden.rows)) * sizeof(float),
        &keys);
    SharedBytes value_bytes = SharedBytes::Allocate(
        static_cast<size_t>(model_->NewValueFloats(layer, hidden.rows)) * sizeof(float),
        &values);
    auto it = past.find(layer);
    model_->RunLayer(layer, &result.hidden, positions,
                     it == past.end() ? nullptr : it->second,
                     reinterpret_cast<float*>(keys), reinterpret_cast<float*>(values));
    std::vector<int64_t> shape = {g.n_kv_heads, hidden.rows, g.head_dim};
    std::vector<int64_t> value_shape = shape;
    if (RecurrentShape r = layer_recurrent_shape(layer); r.is_recurrent()) {
      shape = {1, hidden.rows, r.channels};
      value_shape = {r.state_heads, r.state_dim, r.state_dim};
    }
    result.new_kv[layer] = {Tensor(DType::kFloat32, shape, std::move(key_bytes)),
                            Tensor(DType::kFloat32, value_shape, std::move(value_bytes))};
  }
  if (IsCancelled(cancel)) return Status::Aborted("cancelled after the last layer");
  return result;
}

}  // namespace prefixkv
