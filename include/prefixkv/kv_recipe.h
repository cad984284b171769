// KvCacheRecipe: the identity of a shard's KV state, so a session's cache is
// never reused by a shard that would read it differently.
//
// A recipe names the architecture adapter (canonicalized: "LlamaForCausalLM",
// "llama" and "dense-llama" are one architecture), the KV dtype, the KV head
// geometry, the model's layer count, the owned layer range and the per-layer
// sliding windows. Two recipes are compatible exactly when their fingerprints are
// equal. Only certified architectures can be described at all: anything else
// (for example "qwen3-moe", whose expert routing the reference cannot check) fails
// closed with NotSupported at construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/shard_computation.h"
#include "prefixkv/status.h"
#include "prefixkv/tensor.h"

namespace prefixkv {

// The fields a recipe is built from.
struct KvRecipeSpec {
  std::string architecture_adapter;  // canonicalized by KvCacheRecipe::Make
  DType kv_dtype = DType::kFloat32;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int total_layers = 0;
  int start_layer = 0;  // first owned layer
  int end_layer = 0;    // last owned layer, inclusive
  // Sliding window of every model layer in tokens (0 = full attention). Empty means
  // every layer is full attention; otherwise exactly total_layers entries.
  std::vector<int64_t> layer_window_tokens;
  // The recurrent state shape of every model layer (channels 0: attention). Empty
  // means no recurrent layer; otherwise exactly total_layers entries.
  std::vector<RecurrentShape> layer_recurrent;
};

// The canonical name of a certified architecture, or NotSupported ("uncertified
// architecture") for any other name, including known but uncertified ones.
StatusOr<std::string> CanonicalArchitecture(std::string_view name);

// Immutable value type; thread-safe for concurrent readers.
class KvCacheRecipe {
 public:
  // NotSupported for an uncertified architecture; InvalidArgument for an empty
  // geometry, a bad layer range or a window list of the wrong length.
  static StatusOr<KvCacheRecipe> Make(KvRecipeSpec spec);

  const std::string& architecture_adapter() const { return spec_.architecture_adapter; }
  DType kv_dtype() const { return spec_.kv_dtype; }
  int64_t n_kv_heads() const { return spec_.n_kv_heads; }
  int64_t head_dim() const { return spec_.head_dim; }
  int total_layers() const { return spec_.total_layers; }
  int start_layer() const { return spec_.start_layer; }
  int end_layer() const { return spec_.end_layer; }
  // start_layer..end_layer.
  std::vector<int> owned_layers() const;
  bool owns_layer(int layer) const {
    return layer >= spec_.start_layer && layer <= spec_.end_layer;
  }
  // 0 for a full-attention layer, else its window in tokens.
  int64_t layer_window_tokens(int layer) const;
  // The recurrent state shape of `layer` (empty for attention layers).
  RecurrentShape layer_recurrent(int layer) const;
  // Geometry of owned layer `layer` (REQUIRES: owns_layer(layer)).
  LayerKvGeometry layer_geometry(int layer) const;

  // K plus V bytes one token adds across the owned layers:
  // 2 * n_kv_heads * head_dim * dtype size * owned layer count. (A rotating layer
  // stops growing once its window is full; the manager charges what is held.)
  uint64_t bytes_per_token() const;

  // "kv-recipe/v1|arch=dense-llama|dtype=float32|kv_heads=4|head_dim=8|layers=6|
  // owned=2-3|windows=0,0" (windows of the owned layers), plus
  // "|recurrent=-,3x32:4x8,-" (conv_tokens x channels : heads x state_dim per owned
  // layer) when any model layer is recurrent. Equal for aliases.
  const std::string& fingerprint() const { return fingerprint_; }
  bool is_compatible(const KvCacheRecipe& other) const {
    return fingerprint_ == other.fingerprint_;
  }

 private:
  explicit KvCacheRecipe(KvRecipeSpec spec);

  KvRecipeSpec spec_;
  std::string fingerprint_;
};

// The recipe of a shard's owned layers (kv_recipe_for in the seed).
StatusOr<KvCacheRecipe> KvRecipeFor(const ShardComputation& shard);

}  // namespace prefixkv
