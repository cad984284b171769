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

// Per-pair samples of one restore against its limit.
struct Samples {
  std::vector<double> ratio, ms, first_ms;
  void Add(double limit_s, const TimedRestoreInto& t) {
    ratio.push_back(limit_s / t.whole_s);
    ms.push_back(t.whole_s * 1e3);
    first_ms.push_back(t.first_layer_s * 1e3);
  }
  RestoreFigures Figures() const {
    return RestoreFigures{Summarize(ratio), Summarize(ms), Summarize(first_ms)};
  }
};

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
  Samples hot;
  std::vector<double> copy_ms;
  for (int i = 0; i < repeats; ++i) {
    double copy_s = 0;
    if (i % 2 == 1) copy_s = MemcpySeconds(layers, caller);
    PKV_ASSIGN_OR_RETURN(TimedRestoreInto t,
                         TimeRestoreInto(*engine, ns, tokens, caller));
    if (i % 2 == 0) copy_s = MemcpySeconds(layers, caller);
    hot.Add(copy_s, t);
    copy_ms.push_back(copy_s * 1e3);
  }
  f->hot = hot.Figures();
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

// The engine options of each ColdKind over `on_disk`. The warm arena is one
// memory resource shared by every engine opened on it, faulted in once.
std::vector<EngineOptions> ColdOptions(const EngineOptions& on_disk) {
  std::vector<EngineOptions> out(kColdKinds, on_disk);
  out[kColdWarmArena].memory_resource =
      NewArenaMemoryResource({.max_region_bytes = size_t{256} << 20,
                              .retain_bytes = on_disk.hot_capacity_bytes});
  out[kColdNoPromotion].promote_on_ssd_hit = false;
  return out;
}

fs::path SegmentsDir(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename() == "segments") return e.path();
  }
  return {};
}

// Writes the chain to the SSD tier of a data directory at `dir` (the engine
// closes: write-back flushes every block).
Status StoreCold(const BenchModel& model, const std::vector<int32_t>& tokens,
                 const std::vector<LayerState>& layers, const EngineOptions& on_disk) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(on_disk));
  PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(model.Spec()));
  PKV_RETURN_IF_ERROR(engine->Store(ns, tokens, layers).status());
  return engine->Close();
}

// The cold restores of the chain StoreCold wrote, each checked against
// `digest` (the caller memory's after a restore checked byte for byte): the
// source chain is gone by now, so a 4 GiB chain needs its memory once for
// the caller's buffers and once per engine, not once more for the source.
Status MeasureCold(const BenchModel& model, const std::vector<int32_t>& tokens,
                   uint64_t digest, CallerMemory& caller, int repeats,
                   const EngineOptions& on_disk, LlamaFigures* f) {
  const fs::path segments = SegmentsDir(on_disk.data_dir);
  if (segments.empty()) return Status::NotFound("no segments under " + on_disk.data_dir);
  const std::vector<EngineOptions> kinds = ColdOptions(on_disk);
  // Faults the warm arena in (untimed), as a long-running engine's would be.
  PKV_RETURN_IF_ERROR(ColdRestore(kinds[kColdWarmArena], model, tokens, caller).status());
  std::memset(caller.data(), 0, caller.size());
  Samples cold[kColdKinds];
  std::vector<double> raw_ms, raw_heap_ms, raw_huge_ms;
  for (int i = 0; i < repeats; ++i) {
    double raw_s = 0;
    auto raw = [&]() -> Status {
      RawReadTimes times;
      if (!TimeRawReads(segments, i % 4 < 2, &f->segment_bytes, &times))
        return Status::IOError("raw read of " + segments.string() + " failed");
      raw_s = times.fastest_s();
      raw_heap_ms.push_back(times.heap_s * 1e3);
      raw_huge_ms.push_back(times.huge_page_s * 1e3);
      return Status::OK();
    };
    if (i % 2 == 1) PKV_RETURN_IF_ERROR(raw());
    TimedRestoreInto t[kColdKinds];
    for (int k = 0; k < kColdKinds; ++k) {
      EvictFilePages(segments);
      PKV_ASSIGN_OR_RETURN(t[k], ColdRestore(kinds[k], model, tokens, caller));
      if (i == 0) f->identical = f->identical && caller.Digest() == digest;
      if (i == 0) std::memset(caller.data(), 0, caller.size());
    }
    if (i % 2 == 0) PKV_RETURN_IF_ERROR(raw());
    for (int k = 0; k < kColdKinds; ++k) cold[k].Add(raw_s, t[k]);
    raw_ms.push_back(raw_s * 1e3);
  }
  f->resident_bytes = ResidentBytes(segments);
  for (int k = 0; k < kColdKinds; ++k) f->cold[k] = cold[k].Figures();
  f->raw_ms = Summarize(raw_ms);
  f->raw_heap_ms = Summarize(raw_heap_ms);
  f->raw_huge_page_ms = Summarize(raw_huge_ms);
  return Status::OK();
}

}  // namespace

const char* ColdKindName(int kind) {
  static const char* const kNames[kColdKinds] = {"fresh_engine", "warm_arena",
                                                 "no_promotion"};
  return kind >= 0 && kind < kColdKinds ? kNames[kind] : "?";
}

StatusOr<LlamaFigures> MeasureLlama(int block_tokens, int64_t tokens, int repeats,
                                    const fs::path& dir) {
  const BenchModel model = LlamaModel(block_tokens, tokens);
  LlamaFigures f;
  f.block_tokens = block_tokens;
  f.blocks = model.blocks;
  std::mt19937_64 rng(28);
  std::vector<LayerState> layers = model.RandomChain(rng);
  std::vector<int32_t> ids(static_cast<size_t>(model.chain_tokens()));
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 128000);
  CallerMemory caller(layers);
  if (!caller.ok()) return Status::NoSpace("cannot map the caller memory");
  caller.Touch();
  f.bytes = caller.size();
  // MeasureHot checks the caller memory against `layers` byte for byte
  // after its first restore, and leaves the last restore in it.
  PKV_RETURN_IF_ERROR(MeasureHot(model, ids, layers, caller, repeats, &f));
  if (!caller.Holds(layers)) f.identical = false;
  const uint64_t digest = caller.Digest();
  std::error_code ec;
  fs::remove_all(dir, ec);
  const EngineOptions on_disk{.data_dir = dir.string(),
                              .hot_capacity_bytes = HotBytes(f.bytes),
                              .log = [](std::string_view) {}};
  Status cold = StoreCold(model, ids, layers, on_disk);
  std::vector<LayerState>().swap(layers);  // the source's memory goes back
  if (cold.ok()) cold = MeasureCold(model, ids, digest, caller, repeats, on_disk, &f);
  fs::remove_all(dir, ec);
  PKV_RETURN_IF_ERROR(cold);
  return f;
}

}  // namespace prefixkv::cli
