// Helpers for the prefix cache tests: the seed's hybrid (KVCache + rotating)
// and KVCache-only layer caches, and block inspection straight from a tier.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/prefix_cache.h"
#include "prefixkv/advanced/shared_hot_budget.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/codec.h"
#include "prefixkv/engine.h"
#include "prefixkv/namespace_spec.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

inline constexpr uint32_t kBlockTokens = 4;  // the seed's BLOCK_SIZE
inline constexpr int64_t kWindow = 4;        // the seed's WINDOW

inline NamespaceSpec HybridSpec(const std::string& rotating_type = "RotatingKVCache") {
  NamespaceSpec spec;
  spec.model = "test-model";
  spec.block_tokens = kBlockTokens;
  spec.dtype = DType::kFloat32;
  spec.layer_types = {"KVCache", rotating_type};
  return spec;
}

inline NamespaceSpec KvOnlySpec() {
  NamespaceSpec spec = HybridSpec();
  spec.layer_types = {"KVCache", "KVCache"};
  return spec;
}

inline std::vector<int32_t> Tokens(size_t num_blocks) {
  std::vector<int32_t> t(num_blocks * kBlockTokens);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

// A KVCache layer of `seq_len` tokens: keys and values [1, 2, seq_len, 8].
inline LayerState KvLayer(int64_t seq_len, std::mt19937_64* rng = nullptr) {
  LayerState s;
  s.cache_type = "KVCache";
  s.meta = {std::to_string(seq_len)};
  for (int i = 0; i < 2; ++i) {
    std::vector<int64_t> shape = {1, 2, seq_len, 8};
    s.tensors.push_back(rng != nullptr ? RandomTensor(*rng, DType::kFloat32, shape)
                                       : Tensor::Filled(DType::kFloat32, shape, 1));
  }
  return s;
}

// A rotating layer at position `seq_len`: window [1, 2, kWindow, 8], meta
// (keep 0, max_size kWindow, offset seq_len, idx kWindow).
inline LayerState RotatingLayer(int64_t seq_len,
                                const std::string& type = "RotatingKVCache",
                                std::mt19937_64* rng = nullptr) {
  LayerState s;
  s.cache_type = type;
  s.meta = RotatingMeta{0, kWindow, seq_len, kWindow}.ToStrings();
  for (int i = 0; i < 2; ++i) {
    std::vector<int64_t> shape = {1, 2, kWindow, 8};
    s.tensors.push_back(rng != nullptr ? RandomTensor(*rng, DType::kFloat32, shape)
                                       : Tensor::Filled(DType::kFloat32, shape, 1));
  }
  return s;
}

// A recurrent (arrays) layer at position `seq_len`: a conv ring [1, 3, 16] and a
// state [4, 8, 8], meta (keep 0, max_size 3, offset seq_len, idx seq_len % 3).
inline LayerState ArraysLayer(int64_t seq_len) {
  LayerState s;
  s.cache_type = "ArraysCache";
  s.meta = RotatingMeta{0, 3, seq_len, seq_len % 3}.ToStrings();
  s.tensors = {Tensor::Filled(DType::kFloat32, {1, 3, 16}, 1),
               Tensor::Filled(DType::kFloat32, {4, 8, 8}, 1)};
  return s;
}

inline std::vector<LayerState> HybridLayers(int64_t seq_len,
                                            const std::string& type = "RotatingKVCache") {
  return {KvLayer(seq_len), RotatingLayer(seq_len, type)};
}

inline std::vector<LayerState> KvOnlyLayers(int64_t seq_len) {
  return {KvLayer(seq_len), KvLayer(seq_len)};
}

// The block as stored in `tier` (decoded and verified).
inline BlockRecord ReadBlock(BlockTier& tier, const BlockKey& key) {
  StatusOr<SharedBytes> payload = tier.Get(key);
  EXPECT_OK(payload);
  if (!payload.ok()) return {};
  StatusOr<BlockRecord> rec = DecodeBlock(*payload);
  EXPECT_OK(rec);
  return rec.ok() ? std::move(rec).value() : BlockRecord{};
}

// Index of the first layer of the rotating family (by family, not name).
inline size_t RotatingIndex(const BlockRecord& rec) {
  for (size_t i = 0; i < rec.layers.size(); ++i) {
    if (CacheTypeRegistry::IsRotatingFamily(rec.layers[i].cache_type)) return i;
  }
  ADD_FAILURE() << "no rotating layer in block";
  return 0;
}

// Shape of the rotating layer's first tensor; empty for a placeholder.
inline std::vector<int64_t> RotatingShape(BlockTier& tier, const BlockKey& key) {
  BlockRecord rec = ReadBlock(tier, key);
  if (rec.layers.empty()) return {-1};
  const LayerState& layer = rec.layers[RotatingIndex(rec)];
  return layer.tensors.empty() ? std::vector<int64_t>{} : layer.tensors[0].shape();
}

inline std::vector<int64_t> KvShape(BlockTier& tier, const BlockKey& key) {
  BlockRecord rec = ReadBlock(tier, key);
  for (const LayerState& l : rec.layers) {
    if (l.cache_type == "KVCache") return l.tensors.at(0).shape();
  }
  ADD_FAILURE() << "no KVCache layer in block";
  return {};
}

// An Engine with a real hot tier over an optional real SSD tier in
// `ssd_path` (empty: RAM only), and direct access to the pieces it wires so
// tests can look at blocks where they live. Closed (flushed) when destroyed.
struct TestTiers {
  TestTiers(uint64_t hot_capacity_bytes, const std::string& ssd_path) {
    EngineOptions o;
    o.hot_capacity_bytes = hot_capacity_bytes;
    o.data_dir = ssd_path;
    o.log = [](std::string_view) {};
    EngineHooks hooks;
    hooks.configure_ssd = [](SsdTierOptions& ssd) { ssd.write_buffer_bytes = 4 << 20; };
    StatusOr<std::unique_ptr<Engine>> opened = OpenEngine(o, std::move(hooks));
    EXPECT_OK(opened);
    if (!opened.ok()) return;
    engine = std::move(opened).value();
    budget = EngineHotBudget(*engine);
    ssd = EngineSsdTier(*engine);
  }
  ~TestTiers() {
    if (engine == nullptr) return;
    Status closed = engine->Close();
    EXPECT_OK(closed);
  }

  // Registers a model; `hot` and `stack` then are its hot view and stack.
  StatusOr<Namespace> Register(const NamespaceSpec& spec, ModelOptions options = {}) {
    StatusOr<Namespace> ns = engine->RegisterModel(spec, options);
    if (ns.ok()) {
      hot = EngineHotTier(*engine, *ns);
      stack = EngineTiers(*engine, *ns);
    }
    return ns;
  }
  PrefixCache& cache() { return EnginePrefixCache(*engine); }

  std::unique_ptr<Engine> engine;
  SharedHotBudget* budget = nullptr;
  SsdTier* ssd = nullptr;      // null without ssd_path
  HotTier* hot = nullptr;      // the last registered model's view
  TierStack* stack = nullptr;  // the last registered model's stack
};

inline const std::vector<int64_t> kRealRotatingShape = {1, 2, kWindow, 8};
inline const std::vector<int64_t> kPlaceholderShape = {};

}  // namespace prefixkv::testing
