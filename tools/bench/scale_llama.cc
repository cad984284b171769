// The Llama part of `prefixkv bench scale` (scale_bench.h): a 32k-token prefix
// of Llama 3 8B's KV shape (4 GiB) restored with RestoreInto into one warm
// caller buffer, from the hot tier against memcpy of the same bytes into the
// same buffer, and cold from the SSD tier against a raw O_DIRECT read of the
// segment files holding them. The two sides alternate which goes first (the
// machine's speed drifts within a run) and each pair gives one ratio.
//
// Cold means: the SSD tier reads its segments with O_DIRECT (no page cache),
// the engine is reopened with an empty hot tier before every restore, the
// segment files' own pages are evicted (posix_fadvise) before each side, and
// mincore() after the restores counts the segment pages in the page cache
// (reported; 0 proves nothing was served from it). The machine's whole page
// cache is never dropped: other processes' figures would suffer.
#include <cstring>
#include <random>

#include "prefixkv/engine.h"
#include "tools/bench/disk_util.h"
#include "tools/bench/restore_into_bench.h"
#include "tools/bench/scale_bench.h"

namespace prefixkv::cli {

namespace fs = std::filesystem;

BenchModel LlamaModel(int block_tokens, int64_t tokens) {
  return BenchModel{.name = "llama3-8b",
                    .layers = 32,
                    .kv_heads = 8,
                    .head_dim = 128,
                    .block_tokens = block_tokens,
                    .blocks = static_cast<int>(tokens / block_tokens)};
}

namespace {

double Since(uint64_t start_ns) {
  return static_cast<double>(Clock::System()->NowNanos() - start_ns) * 1e-9;
}

// memcpy of every tensor of `layers` into `memory` (laid out as CallerMemory
// lays them out), timed.
double MemcpySeconds(const std::vector<LayerState>& layers, const CallerMemory& memory) {
  const uint64_t start = Clock::System()->NowNanos();
  size_t at = 0;
  for (const LayerState& l : layers) {
    for (const Tensor& t : l.tensors) {
      std::memcpy(memory.data() + at, t.data(), t.nbytes());
      at += t.nbytes();
    }
  }
  DoNotOptimize(memory.data());
  return Since(start);
}

// A hot tier with room for the chain and its blocks' overhead.
uint64_t HotBytes(uint64_t chain_bytes) {
  return chain_bytes + chain_bytes / 4 + (64 << 20);
}

Status MeasureHot(const BenchModel& model, const std::vector<int32_t>& tokens,
                  const std::vector<LayerState>& layers, CallerMemory& caller,
                  int repeats, LlamaFigures* f) {
  const EngineOptions ram_only{.hot_capacity_bytes = HotBytes(f->bytes)};
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(ram_only));
  PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(model.Spec()));
  PKV_RETURN_IF_ERROR(engine->Store(ns, tokens, layers).status());
  PKV_ASSIGN_OR_RETURN(TimedRestoreInto checked,
                       TimeRestoreInto(*engine, ns, tokens, caller));
  f->identical = checked.out.result.blocks_from_ssd == 0 && caller.Holds(layers);
  std::vector<double> ratio, ms, first_ms, copy_ms;
  for (int i = 0; i < repeats; ++i) {
    double copy_s = 0;
    if (i % 2 == 1) copy_s = MemcpySeconds(layers, caller);
    PKV_ASSIGN_OR_RETURN(TimedRestoreInto t,
                         TimeRestoreInto(*engine, ns, tokens, caller));
    if (i % 2 == 0) copy_s = MemcpySeconds(layers, caller);
    ratio.push_back(copy_s / t.whole_s);
    ms.push_back(t.whole_s * 1e3);
    first_ms.push_back(t.first_layer_s * 1e3);
    copy_ms.push_back(copy_s * 1e3);
  }
  f->hot_ratio = Summarize(ratio);
  f->hot_ms = Summarize(ms);
  f->hot_first_ms = Summarize(first_ms);
  f->memcpy_ms = Summarize(copy_ms);
  return engine->Close();
}

// One cold RestoreInto: the engine opened on `options` (an empty hot tier),
// every block read from the SSD tier's segments.
StatusOr<TimedRestoreInto> ColdRestore(const EngineOptions& options,
                                       const BenchModel& model,
                                       const std::vector<int32_t>& tokens,
                                       const CallerMemory& caller) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(options));
  PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(model.Spec()));
  PKV_ASSIGN_OR_RETURN(TimedRestoreInto t, TimeRestoreInto(*engine, ns, tokens, caller));
  if (t.out.result.blocks_from_ssd != static_cast<size_t>(model.blocks)) {
    return Status::Internal("the cold RestoreInto read " +
                            std::to_string(t.out.result.blocks_from_ssd) + " of " +
                            std::to_string(model.blocks) + " blocks from SSD");
  }
  PKV_RETURN_IF_ERROR(engine->Close());
  return t;
}

Status MeasureCold(const BenchModel& model, const std::vector<int32_t>& tokens,
                   const std::vector<LayerState>& layers, CallerMemory& caller,
                   int repeats, const fs::path& dir, LlamaFigures* f) {
  const EngineOptions on_disk{.data_dir = dir.string(),
                              .hot_capacity_bytes = HotBytes(f->bytes),
                              .log = [](std::string_view) {}};
  {
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(on_disk));
    PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(model.Spec()));
    PKV_RETURN_IF_ERROR(engine->Store(ns, tokens, layers).status());
    PKV_RETURN_IF_ERROR(engine->Close());  // writes every block to the SSD tier
  }
  fs::path segments;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename() == "segments") segments = e.path();
  }
  if (segments.empty()) return Status::NotFound("no segments under " + dir.string());
  std::memset(caller.data(), 0, caller.size());
  std::vector<double> ratio, ms, first_ms, raw_ms;
  bool identical = true;
  for (int i = 0; i < repeats; ++i) {
    double raw_s = 0;
    auto raw = [&]() -> Status {
      EvictFilePages(segments);
      const uint64_t start = Clock::System()->NowNanos();
      if (!RawReadFiles(segments, &f->segment_bytes))
        return Status::IOError("raw read of " + segments.string() + " failed");
      raw_s = Since(start);
      return Status::OK();
    };
    if (i % 2 == 1) PKV_RETURN_IF_ERROR(raw());
    EvictFilePages(segments);
    PKV_ASSIGN_OR_RETURN(TimedRestoreInto t, ColdRestore(on_disk, model, tokens, caller));
    if (i == 0) identical = caller.Holds(layers);
    if (i % 2 == 0) PKV_RETURN_IF_ERROR(raw());
    ratio.push_back(raw_s / t.whole_s);
    ms.push_back(t.whole_s * 1e3);
    first_ms.push_back(t.first_layer_s * 1e3);
    raw_ms.push_back(raw_s * 1e3);
  }
  f->resident_bytes = ResidentBytes(segments);
  f->identical = f->identical && identical;
  f->cold_ratio = Summarize(ratio);
  f->cold_ms = Summarize(ms);
  f->cold_first_ms = Summarize(first_ms);
  f->raw_ms = Summarize(raw_ms);
  return Status::OK();
}

}  // namespace

StatusOr<LlamaFigures> MeasureLlama(int block_tokens, int64_t tokens, int repeats,
                                    const fs::path& dir) {
  const BenchModel model = LlamaModel(block_tokens, tokens);
  LlamaFigures f;
  f.block_tokens = block_tokens;
  f.blocks = model.blocks;
  std::mt19937_64 rng(28);
  const std::vector<LayerState> layers = model.RandomChain(rng);
  std::vector<int32_t> ids(static_cast<size_t>(model.chain_tokens()));
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 128000);
  CallerMemory caller(layers);
  if (!caller.ok()) return Status::NoSpace("cannot map the caller memory");
  caller.Touch();
  f.bytes = caller.size();
  PKV_RETURN_IF_ERROR(MeasureHot(model, ids, layers, caller, repeats, &f));
  std::error_code ec;
  fs::remove_all(dir, ec);
  Status cold = MeasureCold(model, ids, layers, caller, repeats, dir, &f);
  fs::remove_all(dir, ec);
  PKV_RETURN_IF_ERROR(cold);
  return f;
}

}  // namespace prefixkv::cli
