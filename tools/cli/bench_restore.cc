// `prefixkv bench restore`: restoring a cached chain from the hot tier into
// contiguous per-layer caches, against memcpy of the same bytes measured in
// the same run (the limit: a restore must at least copy every byte once).
//
// Model: 8 sliceable KVCache layers, 8 KV heads x 128 dims, float16, 256-token
// blocks; a 32-block chain (8192 tokens, 256 MiB of keys and values).
//
// Two figures each for restore and store: with glibc's default malloc every
// restore's 16 MiB output tensors (and every store's block slices and encoded
// records) are fresh mmap'ed pages, so much of the time goes to page faults
// and zeroing ("fresh_pages"); a long-running server keeps its heap warm
// (mallopt below, or jemalloc), which is the headline figure. A store is timed
// into a new, empty cache each time (nothing deduplicated): slice every layer
// into 32 blocks, encode with the checksum, put into the hot tier.
#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "prefixkv/engine.h"
#include "tools/cli/bench_util.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

constexpr int kLayers = 8;
constexpr int64_t kHeads = 8;
constexpr int64_t kHeadDim = 128;
constexpr int kBlockTokens = 256;
constexpr int kBlocks = 32;
constexpr int64_t kTokens = int64_t{kBlocks} * kBlockTokens;

struct RestoreBench {
  double restore_s = 0, memcpy_s = 0, fresh_pages_s = 0;
  double store_s = 0, store_fresh_pages_s = 0;  // Store of the whole chain
  uint64_t bytes = 0;
  bool identical = false;
};

// Stores the chain once, then times Match + Restore against memcpy.
StatusOr<RestoreBench> Measure(int repeats) {
  // RAM only: this measures the hot path (the SSD tier has `bench ssd`).
  const EngineOptions ram_only{.hot_capacity_bytes = 1ull << 30};
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(ram_only));
  NamespaceSpec spec{.model = "bench-8l",
                     .block_tokens = kBlockTokens,
                     .dtype = DType::kFloat16,
                     .layer_types = std::vector<std::string>(kLayers, "KVCache"),
                     .salt = ""};
  PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(spec));
  std::mt19937_64 rng(11);
  const std::vector<LayerState> layers =
      RandomKvLayers(rng, kLayers, kHeads, kTokens, kHeadDim);
  std::vector<int32_t> tokens(kTokens);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 128000);
  RestoreBench r;
  PKV_RETURN_IF_ERROR(engine->Store(ns, tokens, layers).status());
  // Median seconds of one Store of the chain into a new, empty cache (the
  // cache is built and torn down outside the timing).
  Status store_failed;
  auto median_store = [&]() -> double {
    std::vector<double> t;
    for (int i = 0; i < repeats; ++i) {
      StatusOr<std::unique_ptr<Engine>> fresh = Engine::Open(ram_only);
      StatusOr<Namespace> fresh_ns =
          fresh.ok() ? (*fresh)->RegisterModel(spec) : fresh.status();
      if (!fresh_ns.ok()) {
        store_failed = fresh_ns.status();
        return 1;
      }
      const uint64_t start = Clock::System()->NowNanos();
      StatusOr<StoreResult> stored = (*fresh)->Store(*fresh_ns, tokens, layers);
      t.push_back(static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9);
      if (!stored.ok() || stored->blocks_written != static_cast<size_t>(kBlocks)) {
        store_failed = Status::Internal("store failed");
      }
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  r.store_fresh_pages_s = median_store();

  for (const LayerState& l : layers) {
    for (const Tensor& t : l.tensors) r.bytes += t.nbytes();
  }
  auto restore = [&]() -> StatusOr<RestoreResult> {
    PKV_ASSIGN_OR_RETURN(MatchResult m, engine->Match(ns, tokens));
    return engine->Restore(m);
  };
  // Checked once, outside the timing: the restore is exact.
  PKV_ASSIGN_OR_RETURN(RestoreResult first, restore());
  r.identical = first.restored_tokens == kTokens && first.layers == layers;
  first = RestoreResult{};
  Status failed;
  auto timed = [&] {
    StatusOr<RestoreResult> out = restore();
    if (!out.ok() || out->restored_tokens != kTokens)
      failed = Status::Internal("restore failed");
    DoNotOptimize(out);
  };
  r.fresh_pages_s = MedianSeconds(repeats, timed);
  // Keep freed memory in the heap instead of returning it to the kernel.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, INT32_MAX);
  timed();  // warm the heap once
  r.restore_s = MedianSeconds(repeats, timed);
  PKV_RETURN_IF_ERROR(failed);
  (void)median_store();  // warm the heap for stores too
  r.store_s = median_store();
  PKV_RETURN_IF_ERROR(store_failed);
  std::vector<uint8_t> src(r.bytes, 1), dst(r.bytes, 0);
  r.memcpy_s = MedianSeconds(repeats, [&] {
    std::memcpy(dst.data(), src.data(), r.bytes);
    DoNotOptimize(dst.data());
  });
  return r;
}

int RunRestoreBench(const std::vector<std::string>& args) {
  BenchArgs bench;
  if (std::optional<int> done = ParseBenchArgs("restore", 7, args, &bench)) return *done;
  StatusOr<RestoreBench> r = Measure(bench.repeats);
  if (!r.ok()) {
    std::fprintf(stderr, "prefixkv bench restore: %s\n", r.status().ToString().c_str());
    return 1;
  }
  const double ratio = r->memcpy_s / r->restore_s;
  const double gb_s = static_cast<double>(r->bytes) / r->restore_s / 1e9;
  if (bench.json) {
    JsonWriter j;
    j.BeginObject()
        .Field("suite", "restore")
        .Field("restore_ratio_vs_memcpy", ratio)
        .Field("restore_gb_per_second", gb_s)
        .Field("restore_ratio_vs_memcpy_fresh_pages", r->memcpy_s / r->fresh_pages_s)
        .Field("store_ratio_vs_memcpy", r->memcpy_s / r->store_s)
        .Field("store_ratio_vs_memcpy_fresh_pages", r->memcpy_s / r->store_fresh_pages_s)
        .Field("memcpy_gb_per_second", static_cast<double>(r->bytes) / r->memcpy_s / 1e9)
        .Field("bytes", r->bytes)
        .Field("blocks", kBlocks)
        .Field("byte_identical", r->identical)
        .EndObject();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf(
        "restore of %d blocks x %d layers (%llu bytes): %.2f GB/s, %.2fx memcpy%s\n",
        kBlocks, kLayers, static_cast<unsigned long long>(r->bytes), gb_s, ratio,
        r->identical ? "" : " (NOT byte-identical)");
    std::printf("store of the same chain: %.2fx memcpy (%.2fx with fresh pages)\n",
                r->memcpy_s / r->store_s, r->memcpy_s / r->store_fresh_pages_s);
  }
  return r->identical ? 0 : 1;
}

}  // namespace

PKV_REGISTER_BENCH("restore", "hot-tier restore of a 32-block chain vs memcpy",
                   RunRestoreBench);

}  // namespace prefixkv::cli
