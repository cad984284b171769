// The dedup part of `prefixkv bench scale` (scale_bench.h): a store whose
// every block is already cached on SSD (a conversation stored again, a shared
// prefix stored by another session), for a model with layer shapes, whose
// store compares the cached blocks it deduplicates against with them
// (docs/prefix_cache.md, "Validate"), against the same store for a model
// without shapes, which compares nothing: the floor. 4-block chains of 1 MiB
// blocks (2 layers of 8 KV heads x 128 dims, float16, 128-token blocks) held
// on SSD only (a hot tier smaller than one block), one engine, the two
// models' stores alternating. Warm: stores after one of the same chain;
// first: the first store of each model after the engine reopened.
#include <filesystem>
#include <random>

#include "prefixkv/engine.h"
#include "tools/bench/scale_bench.h"

namespace prefixkv::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kBlocks = 4;
constexpr int kWarmStoresPerRepeat = 20;

BenchModel DedupModel(const char* name) {
  return BenchModel{.name = name,
                    .layers = 2,
                    .kv_heads = 8,
                    .head_dim = 128,
                    .block_tokens = 128,
                    .blocks = kBlocks};
}

struct Model {
  Namespace ns;
  std::vector<int32_t> tokens;
  std::vector<LayerState> layers;
};

StatusOr<std::unique_ptr<Engine>> OpenEngine(const fs::path& dir) {
  EngineOptions o;
  o.data_dir = dir.string();
  o.hot_capacity_bytes = uint64_t{512} << 10;  // smaller than a block: SSD only
  o.log = [](std::string_view) {};
  return Engine::Open(o);
}

StatusOr<Namespace> RegisterModel(Engine& engine, bool shaped) {
  const BenchModel m = DedupModel(shaped ? "bench-dedup-shaped" : "bench-dedup-plain");
  NamespaceSpec spec = m.Spec();
  if (shaped) {
    PKV_ASSIGN_OR_RETURN(spec.layer_shapes, ParseLayerShapes("8x128,8x128"));
  }
  return engine.RegisterModel(spec);
}

// One store of `m`'s chain, in microseconds; every block must be deduplicated.
StatusOr<double> DedupStoreUs(Engine& engine, const Model& m) {
  const uint64_t start = Clock::System()->NowNanos();
  PKV_ASSIGN_OR_RETURN(StoreResult r, engine.Store(m.ns, m.tokens, m.layers));
  const double us = static_cast<double>(Clock::System()->NowNanos() - start) * 1e-3;
  if (r.blocks_deduplicated != kBlocks) {
    return Status::Internal("bench scale dedup: a store wrote " +
                            std::to_string(r.blocks_written) + " blocks");
  }
  return us;
}

}  // namespace

StatusOr<DedupFigures> MeasureDedup(int repeats, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937_64 rng(11);
  Model models[2];  // shaped, plain
  for (Model& m : models) {
    const BenchModel shape = DedupModel("");
    m.tokens.resize(static_cast<size_t>(shape.chain_tokens()));
    for (size_t t = 0; t < m.tokens.size(); ++t) m.tokens[t] = static_cast<int32_t>(t);
    m.layers = shape.RandomChain(rng);
  }
  std::vector<double> warm[2], first[2];
  for (int round = 0; round <= repeats; ++round) {
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, OpenEngine(dir));
    for (int k = 0; k < 2; ++k) {
      PKV_ASSIGN_OR_RETURN(models[k].ns, RegisterModel(*engine, k == 0));
    }
    if (round == 0) {
      for (const Model& m : models) {
        PKV_RETURN_IF_ERROR(engine->Store(m.ns, m.tokens, m.layers).status());
      }
      PKV_RETURN_IF_ERROR(engine->Close());
      continue;  // the chains written; each round's first stores follow an open
    }
    for (int k = 0; k < 2; ++k) {
      const int which = (round + k) % 2;
      PKV_ASSIGN_OR_RETURN(double us, DedupStoreUs(*engine, models[which]));
      first[which].push_back(us);
    }
    for (int i = 0; i < kWarmStoresPerRepeat; ++i) {
      for (int k = 0; k < 2; ++k) {
        const int which = (i + k) % 2;
        PKV_ASSIGN_OR_RETURN(double us, DedupStoreUs(*engine, models[which]));
        warm[which].push_back(us);
      }
    }
    PKV_RETURN_IF_ERROR(engine->Close());
  }
  fs::remove_all(dir);
  return DedupFigures{.blocks = kBlocks,
                      .block_bytes = uint64_t{1} << 20,
                      .warm_us = Summarize(warm[0]),
                      .warm_floor_us = Summarize(warm[1]),
                      .first_us = Summarize(first[0]),
                      .first_floor_us = Summarize(first[1])};
}

}  // namespace prefixkv::cli
