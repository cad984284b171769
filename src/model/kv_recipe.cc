// KV recipes (kv_recipe.h): canonical architecture names, the checks a recipe
// must pass to exist at all, and its fingerprint. The fingerprint is a readable
// string of every field that changes how KV is laid out or read (architecture,
// dtype, head geometry, layer count, owned range, per-layer windows), so two
// shards may share a session's cache exactly when their fingerprints are equal.
// Only certified architectures canonicalize; anything else fails closed.
#include "prefixkv/kv_recipe.h"

#include <algorithm>
#include <cctype>

namespace prefixkv {
namespace {

// Certified architectures: the reference model checks their KV semantics token
// for token. Aliases map to the canonical name; everything else fails closed.
struct Alias {
  std::string_view name;
  std::string_view canonical;
};
constexpr Alias kCertified[] = {
    {"dense-llama", "dense-llama"},
    {"llama", "dense-llama"},
    {"LlamaForCausalLM", "dense-llama"},
    {"LlamaModel", "dense-llama"},
};

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

StatusOr<std::string> CanonicalArchitecture(std::string_view name) {
  for (const Alias& a : kCertified) {
    if (Lower(a.name) == Lower(name)) return std::string(a.canonical);
  }
  return Status::NotSupported("uncertified architecture '" + std::string(name) +
                              "': its KV cache semantics are not verified");
}

KvCacheRecipe::KvCacheRecipe(KvRecipeSpec spec) : spec_(std::move(spec)) {
  fingerprint_ = "kv-recipe/v1|arch=" + spec_.architecture_adapter +
                 "|dtype=" + std::string(DTypeName(spec_.kv_dtype)) +
                 "|kv_heads=" + std::to_string(spec_.n_kv_heads) +
                 "|head_dim=" + std::to_string(spec_.head_dim) +
                 "|layers=" + std::to_string(spec_.total_layers) +
                 "|owned=" + std::to_string(spec_.start_layer) + "-" +
                 std::to_string(spec_.end_layer) + "|windows=";
  for (int layer = spec_.start_layer; layer <= spec_.end_layer; ++layer) {
    if (layer > spec_.start_layer) fingerprint_ += ",";
    fingerprint_ += std::to_string(layer_window_tokens(layer));
  }
  if (spec_.layer_recurrent.empty()) return;  // attention-only: the v1 form unchanged
  fingerprint_ += "|recurrent=";
  for (int layer = spec_.start_layer; layer <= spec_.end_layer; ++layer) {
    if (layer > spec_.start_layer) fingerprint_ += ",";
    RecurrentShape r = layer_recurrent(layer);
    fingerprint_ +=
        r.is_recurrent()
            ? std::to_string(r.conv_tokens) + "x" + std::to_string(r.channels) + ":" +
                  std::to_string(r.state_heads) + "x" + std::to_string(r.state_dim)
            : "-";
  }
}

StatusOr<KvCacheRecipe> KvCacheRecipe::Make(KvRecipeSpec spec) {
  PKV_ASSIGN_OR_RETURN(spec.architecture_adapter,
                       CanonicalArchitecture(spec.architecture_adapter));
  if (!IsValidDType(static_cast<uint8_t>(spec.kv_dtype))) {
    return Status::InvalidArgument("kv recipe: invalid kv dtype");
  }
  if (spec.n_kv_heads <= 0 || spec.head_dim <= 0) {
    return Status::InvalidArgument("kv recipe: n_kv_heads and head_dim must be positive");
  }
  if (spec.total_layers <= 0 || spec.start_layer < 0 ||
      spec.start_layer > spec.end_layer || spec.end_layer >= spec.total_layers) {
    return Status::InvalidArgument("kv recipe: owned range " +
                                   std::to_string(spec.start_layer) + ".." +
                                   std::to_string(spec.end_layer) + " outside " +
                                   std::to_string(spec.total_layers) + " layers");
  }
  if (!spec.layer_window_tokens.empty()) {
    if (spec.layer_window_tokens.size() != static_cast<size_t>(spec.total_layers)) {
      return Status::InvalidArgument("kv recipe: one window per model layer required");
    }
    for (int64_t w : spec.layer_window_tokens) {
      if (w < 0) return Status::InvalidArgument("kv recipe: negative window");
    }
  }
  if (!spec.layer_recurrent.empty()) {
    if (spec.layer_recurrent.size() != static_cast<size_t>(spec.total_layers)) {
      return Status::InvalidArgument(
          "kv recipe: one recurrent shape per model layer required");
    }
    for (size_t l = 0; l < spec.layer_recurrent.size(); ++l) {
      const RecurrentShape& r = spec.layer_recurrent[l];
      bool empty = r == RecurrentShape{};
      bool valid = r.conv_tokens > 0 && r.channels > 0 && r.state_heads > 0 &&
                   r.state_dim > 0 &&
                   (spec.layer_window_tokens.empty() || spec.layer_window_tokens[l] == 0);
      if (!empty && !valid) {
        return Status::InvalidArgument("kv recipe: layer " + std::to_string(l) +
                                       " has an invalid recurrent shape");
      }
    }
  }
  return KvCacheRecipe(std::move(spec));
}

std::vector<int> KvCacheRecipe::owned_layers() const {
  std::vector<int> out;
  for (int l = spec_.start_layer; l <= spec_.end_layer; ++l) out.push_back(l);
  return out;
}

int64_t KvCacheRecipe::layer_window_tokens(int layer) const {
  if (spec_.layer_window_tokens.empty() || layer < 0 || layer >= spec_.total_layers)
    return 0;
  return spec_.layer_window_tokens[static_cast<size_t>(layer)];
}

RecurrentShape KvCacheRecipe::layer_recurrent(int layer) const {
  if (spec_.layer_recurrent.empty() || layer < 0 || layer >= spec_.total_layers)
    return {};
  return spec_.layer_recurrent[static_cast<size_t>(layer)];
}

LayerKvGeometry KvCacheRecipe::layer_geometry(int layer) const {
  return {layer, spec_.n_kv_heads, spec_.head_dim, layer_window_tokens(layer),
          layer_recurrent(layer)};
}

uint64_t KvCacheRecipe::bytes_per_token() const {
  uint64_t owned = static_cast<uint64_t>(spec_.end_layer - spec_.start_layer + 1);
  return 2 * static_cast<uint64_t>(spec_.n_kv_heads) *
         static_cast<uint64_t>(spec_.head_dim) * DTypeSize(spec_.kv_dtype) * owned;
}

StatusOr<KvCacheRecipe> KvRecipeFor(const ShardComputation& shard) {
  KvGeometry g = shard.kv_geometry();
  KvRecipeSpec spec{std::string(shard.architecture_adapter()),
                    g.kv_dtype,
                    g.n_kv_heads,
                    g.head_dim,
                    shard.total_layers(),
                    shard.start_layer(),
                    shard.end_layer(),
                    {},
                    {}};
  bool any_window = false;
  bool any_recurrent = false;
  for (int layer = 0; layer < shard.total_layers(); ++layer) {
    spec.layer_window_tokens.push_back(shard.layer_window_tokens(layer));
    any_window = any_window || spec.layer_window_tokens.back() > 0;
    spec.layer_recurrent.push_back(shard.layer_recurrent_shape(layer));
    any_recurrent = any_recurrent || spec.layer_recurrent.back().is_recurrent();
  }
  if (!any_window) spec.layer_window_tokens.clear();  // all full: same as the plain form
  if (!any_recurrent) spec.layer_recurrent.clear();
  return KvCacheRecipe::Make(std::move(spec));
}

}  // namespace prefixkv
