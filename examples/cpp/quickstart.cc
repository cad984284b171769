// The README's C++ example, whole: two turns of a conversation through one
// Engine. Turn 1 stores its KV cache; turn 2 restores the longest cached prefix
// of its longer prompt and checks the restored bytes are the ones stored.
// Built against an installed prefixkv (find_package or pkg-config) by
// tests/install/install_test.sh; docs/install.md shows how.
//
//   quickstart DATA_DIR   exit 0 when the restore matched, 1 otherwise
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "prefixkv/engine.h"
#include "prefixkv/version.h"
using namespace prefixkv;

// One KVCache layer of `tokens` positions: keys and values [1, heads, tokens,
// head_dim] in float16, filled with a pattern (a model would compute these).
LayerState KvLayer(int64_t tokens) {
  LayerState layer{.cache_type = "KVCache", .meta = {std::to_string(tokens)}};
  for (int t = 0; t < 2; ++t) {
    std::string bytes(2 * 8 * tokens * 64, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + t);
    layer.tensors.push_back(Tensor::Make(DType::kFloat16, {1, 8, tokens, 64},
                                         SharedBytes::Adopt(std::move(bytes)))
                                .value());
  }
  return layer;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: quickstart DATA_DIR\n");
    return 2;
  }
  // One engine per process: one RAM budget shared by every model, spilling to SSD.
  auto engine =
      Engine::Open({.data_dir = argv[1], .hot_capacity_bytes = 64ull << 20}).value();
  NamespaceSpec spec{.model = "llama-3-8b",
                     .block_tokens = 16,
                     .dtype = DType::kFloat16,
                     .layer_types = std::vector<std::string>(4, "KVCache")};
  Namespace ns = engine->RegisterModel(spec).value();

  // Turn N: the model computed the KV of the whole sequence; store it.
  std::vector<int32_t> turn1(40);
  std::iota(turn1.begin(), turn1.end(), 100);
  std::vector<LayerState> caches(4, KvLayer(40));
  StoreResult stored = engine->Store(ns, turn1, caches).value();  // full blocks only

  // Turn N+1 repeats turn N's prompt: restore the longest cached prefix,
  // prefill only the rest.
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), {7, 8, 9, 10});
  MatchResult match = engine->Match(ns, turn2).value();
  RestoreResult restored = engine->Restore(match).value();  // .layers, .restored_tokens
  // ... run the model from restored.restored_tokens ...
  bool same =
      restored.restored_tokens == 32 && restored.layers.size() == 4 &&
      restored.layers[0].tensors[0] == caches[0].tensors[0].SliceAxis(2, 0, 32).value();

  // Close() writes dirty RAM blocks to SSD: its Status says whether they got there.
  if (Status s = engine->Close(); !s.ok()) {
    std::fprintf(stderr, "close: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("prefixkv %s: stored %zu blocks, restored %llu of %zu tokens: %s\n",
              PREFIXKV_VERSION_STRING, stored.blocks_written,
              static_cast<unsigned long long>(restored.restored_tokens), turn2.size(),
              same ? "ok" : "MISMATCH");
  return same ? 0 : 1;
}
