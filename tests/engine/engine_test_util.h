// Helpers shared by the Engine tests: a KVCache model spec, token runs, random
// KVCache layers and options that keep the engine quiet.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
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

// The fixture of the engine tests: a temporary data directory, a fake clock
// from `start_nanos`, a random generator seeded by TestSeed(seed_name), and
// the open/store/restore steps they share.
class EngineFixture : public ::testing::Test {
 protected:
  explicit EngineFixture(std::string_view seed_name, uint64_t start_nanos = 1'000'000'000)
      : rng_(TestSeed(std::string(seed_name))), clock_(start_nanos) {}

  std::unique_ptr<Engine> Open(EngineOptions o) {
    StatusOr<std::unique_ptr<Engine>> e = Engine::Open(Quiet(std::move(o)));
    EXPECT_OK(e);
    return e.ok() ? std::move(e).value() : nullptr;
  }
  EngineOptions OnDisk(uint64_t hot_bytes = 1 << 20) {
    EngineOptions o;
    o.data_dir = dir_.str();
    o.hot_capacity_bytes = hot_bytes;
    return o;
  }
  // On disk, with time from clock_.
  EngineOptions OnDiskOnFakeClock() {
    EngineOptions o = OnDisk();
    o.clock = &clock_;
    return o;
  }
  // Stores `tokens` with fresh random layers and returns the layers.
  std::vector<LayerState> StoreAll(Engine& e, Namespace ns,
                                   const std::vector<int32_t>& tokens) {
    std::vector<LayerState> layers =
        KvLayers(2, static_cast<int64_t>(tokens.size()), rng_);
    StatusOr<StoreResult> r = e.Store(ns, tokens, layers);
    EXPECT_OK(r);
    return layers;
  }
  RestoreResult MatchAndRestore(Engine& e, Namespace ns,
                                const std::vector<int32_t>& tokens) {
    StatusOr<MatchResult> m = e.Match(ns, tokens);
    EXPECT_OK(m);
    if (!m.ok()) return {};
    StatusOr<RestoreResult> r = e.Restore(*m);
    EXPECT_OK(r);
    return r.ok() ? std::move(r).value() : RestoreResult{};
  }

  std::mt19937_64 rng_;
  TempDir dir_;
  FakeClock clock_;
};

}  // namespace prefixkv::testing
