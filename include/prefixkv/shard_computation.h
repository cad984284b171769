// ShardComputation: what a contiguous layer range of a model must offer so that
// KvBoundaryAdapter can run it with per-session KV state.
//
// A shard owns layers [start_layer, end_layer] (inclusive) of a model with
// total_layers layers. The head shard (start_layer == 0) embeds token ids, the tail
// shard (end_layer == total_layers - 1) applies the final norm and the LM head;
// one shard may be both. Between shards travel hidden states (BoundaryBundle).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "prefixkv/layer_kv_cache.h"
#include "prefixkv/status.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

// CancellationToken: how a caller stops a long prefill from another thread.
// Computations poll the token between layers (and the adapter once more
// before committing), so a cancelled call returns Status::Aborted and commits
// nothing.
// Thread-safe: Cancel() may race with IsCancelled() from any number of threads.
class CancellationToken {
 public:
  CancellationToken() = default;
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;

  // Requests cancellation. Idempotent; a token cannot be un-cancelled.
  void Cancel() { cancelled_.store(true, std::memory_order_release); }
  bool IsCancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> cancelled_{false};
};

// True when `token` is non-null and cancelled (a null token never cancels).
inline bool IsCancelled(const CancellationToken* token) {
  return token != nullptr && token->IsCancelled();
}

// Row-major float32 activations: `rows` positions of `width` features each.
struct HiddenStates {
  int64_t rows = 0;
  int64_t width = 0;
  std::vector<float> values;  // rows * width

  float* row(int64_t r) { return values.data() + r * width; }
  const float* row(int64_t r) const { return values.data() + r * width; }
};

// The new keys and values one run produced for one layer:
// float32 [kv_heads, tokens, head_dim] each (post-RoPE keys). A recurrent layer:
// keys float32 [1, tokens, channels] (conv inputs), values its state after them.
struct LayerKvChunk {
  Tensor keys;
  Tensor values;
};

// New KV by absolute layer index, for exactly the shard's owned layers.
using KvChunks = std::map<int, LayerKvChunk>;
// Read-only past KV by absolute layer index; a missing or null entry means "no past".
using PastKv = std::map<int, const LayerKvCache*>;

struct CachedRunResult {
  HiddenStates hidden;  // the shard's output for the new positions
  KvChunks new_kv;      // what the session must append to commit this run
};

// KV geometry shared by every owned layer.
struct KvGeometry {
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType kv_dtype = DType::kFloat32;
};

// Implementations must be thread-safe for concurrent const calls (weights are
// read-only; all per-session state arrives in PastKv and leaves in KvChunks).
class ShardComputation {
 public:
  virtual ~ShardComputation() = default;

  // The architecture name used in KV recipes ("dense-llama" or an alias).
  virtual std::string_view architecture_adapter() const = 0;
  virtual int start_layer() const = 0;
  virtual int end_layer() const = 0;  // inclusive
  virtual int total_layers() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual KvGeometry kv_geometry() const = 0;
  // 0 for a full-attention layer, else the sliding window of `layer` in tokens.
  virtual int64_t layer_window_tokens(int layer) const = 0;
  // The recurrent state of `layer`; empty (channels 0) for attention layers.
  virtual RecurrentShape layer_recurrent_shape(int /*layer*/) const { return {}; }

  bool is_head() const { return start_layer() == 0; }
  bool is_tail() const { return end_layer() == total_layers() - 1; }

  // Embedding rows for `token_ids`. InvalidArgument for an id outside the vocabulary.
  virtual StatusOr<HiddenStates> EmbedTokens(
      std::span<const int32_t> token_ids) const = 0;

  // Runs the owned layers over `hidden` at absolute `positions`, attending to `past`
  // plus the new positions. REQUIRES-checked (InvalidArgument): positions are
  // consecutive and start at every owned layer's past length. Polls `cancel`
  // between layers and returns Aborted when it fires. Never modifies `past`.
  virtual StatusOr<CachedRunResult> RunLayersCached(
      const HiddenStates& hidden, std::span<const int64_t> positions, const PastKv& past,
      const CancellationToken* cancel) const = 0;

  // The final RMSNorm, row by row.
  virtual HiddenStates FinalNorm(const HiddenStates& hidden) const = 0;
  // Logits for one normalized row (vocab floats).
  virtual std::vector<float> LmHead(const float* normed_row) const = 0;
};

// The index of the largest value, first one on ties (numpy argmax). -1 when empty.
int32_t ArgMax(std::span<const float> values);

}  // namespace prefixkv
