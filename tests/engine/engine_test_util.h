// Helpers shared by the Engine tests: a KVCache model spec, token runs, random
// KVCache layers and options that keep the engine quiet.
#pragma once

#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/engine.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

inline constexpr uint32_t kBlockTokens = 4;

inline NamespaceSpec KvSpec(const std::string& model = "engine-model",
                            size_t layers = 2) {
  NamespaceSpec spec;
  spec.model = model;
  spec.block_tokens = kBlockTokens;
  spec.dtype = DType::kFloat32;
  spec.layer_types = std::vector<std::string>(layers, "KVCache");
  return spec;
}

inline std::vector<int32_t> Tokens(size_t n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// KVCache layers of `tokens` positions: keys and values [1, 2, tokens, 8].
inline std::vector<LayerState> KvLayers(size_t layers, int64_t tokens,
                                        std::mt19937_64& rng) {
  std::vector<LayerState> out(layers);
  for (LayerState& l : out) {
    l.cache_type = "KVCache";
    l.meta = {std::to_string(tokens)};
    for (int i = 0; i < 2; ++i) {
      l.tensors.push_back(RandomTensor(rng, DType::kFloat32, {1, 2, tokens, 8}));
    }
  }
  return out;
}

inline EngineOptions Quiet(EngineOptions o) {
  o.log = [](std::string_view) {};
  return o;
}

}  // namespace prefixkv::testing
