// `prefixkv bench restore`: restoring a cached chain from the hot tier into
// contiguous per-layer caches, against memcpy of the same bytes measured in
// the same run (the limit: a restore must at least copy every byte once).
//
// Model: 8 sliceable KVCache layers, 8 KV heads x 128 dims, float16, 256-token
// blocks; a 32-block chain (8192 tokens, 256 MiB of keys and values).
// `--model llama3-8b` is Llama 3 8B's KV shape instead (32 layers, 16-token
// blocks), `--model hybrid` the default shape with window, recurrent and full
// layers (WRWGWRWG; windows and recurrent states only in the tip), and
// `--tokens N` the chain's length.
//
// RestoreInto (restore_into_bench.h): the same chain restored into caller
// memory against memcpy into the same memory, in alternating pairs, into one
// warm buffer and into fresh pages; and the time until layer 0 is complete
// next to the whole restore, hot and cold from SSD.
//
// Two figures for restore: with glibc's default malloc every restore's
// 16 MiB output tensors are fresh mmap'ed pages, so much of the time goes to
// page faults and zeroing ("fresh_pages"); a long-running server keeps its
// heap warm (mallopt below, or jemalloc), which is the headline figure. A
// store is timed into a new, empty cache each time (nothing deduplicated):
// every layer cut into 32 blocks by the encoder as it copies their rows into
// the records (one copy and one checksum pass per byte), put into the hot
// tier; its records go to the new engine's own arena (fresh pages: a newly
// started engine), to one faulted in at Open, to fresh 4 KiB pages, or to an
// arena the engines share (warm: a long-running engine reuses its regions).
// Each store is paired with a memcpy of the same bytes right before it.
//
// Cold SSD restore: the chain stored in an SSD tier (in $TMPDIR) and the
// engine reopened with an empty hot tier before every timed Match + Restore,
// which then reads every block from the segment files (O_DIRECT where the
// file system allows it), verifies and decodes it and promotes it; against a
// raw sequential read of those segment files the same way, alternating with
// it in the same run.
#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "prefixkv/engine.h"
#include "prefixkv/namespace_spec.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/disk_util.h"
#include "tools/bench/restore_into_bench.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

struct RestoreBench {
  double restore_s = 0, memcpy_s = 0, fresh_pages_s = 0;
  // Store of the whole chain into a new engine each time, against a memcpy
  // of the same bytes right before it (ratios of the pairs): warm (the
  // engines share one arena), into fresh pages (the default engine's own
  // arena, 2 MiB pages), into an arena faulted in at Open
  // (EngineOptions::arena_prefault_bytes, before the mallopt below), and
  // into fresh 4 KiB pages (arena_huge_pages = false).
  Range store, store_fresh_pages, store_prefaulted, store_fresh_small;
  // PlanRestore of the hot chain (Match included), and the plan applied with
  // CopyPlannedLayer into one warm buffer per layer (a CPU stand-in for a
  // copy engine), medians; whether the applied plan is Restore's bytes.
  double plan_s = 0, plan_apply_s = 0;
  bool plan_identical = false;
  uint64_t bytes = 0;
  bool identical = false;
  // Cold SSD restore and the raw read of the segment files (medians).
  double ssd_restore_s = 0, raw_read_s = 0, ssd_restore_cpu_s = 0;
  uint64_t segment_bytes = 0;
  bool ssd_identical = false;
  // RestoreInto: into caller memory (hot), and cold from SSD into warm
  // caller memory (medians), with the time until layer 0 was complete.
  RestoreIntoFigures into;
  double ssd_into_s = 0, ssd_into_first_layer_s = 0;
};

namespace fs = std::filesystem;

// The restored layers hold exactly the stored state: the same tensors and
// meta, and cache types of one family (a restore hands a rotating tip back as
// PrefillReadyRotatingKVCache, docs/prefix_cache.md).
bool SameState(const std::vector<LayerState>& restored,
               const std::vector<LayerState>& stored) {
  if (restored.size() != stored.size()) return false;
  for (size_t i = 0; i < stored.size(); ++i) {
    LayerState a = restored[i];
    const StatusOr<CacheFamily> fa = CacheTypeRegistry::Lookup(a.cache_type);
    const StatusOr<CacheFamily> fb = CacheTypeRegistry::Lookup(stored[i].cache_type);
    if (!fa.ok() || !fb.ok() || *fa != *fb) return false;
    a.cache_type = stored[i].cache_type;
    if (!(a == stored[i])) return false;
  }
  return true;
}

// A hot tier with room for the chain twice (its blocks and their overhead).
uint64_t HotBytes(const BenchModel& model) {
  const uint64_t chain = static_cast<uint64_t>(model.layers) * 2 *
                         static_cast<uint64_t>(model.kv_heads * model.head_dim * 2) *
                         static_cast<uint64_t>(model.chain_tokens());
  return std::max<uint64_t>(uint64_t{1} << 30, 2 * chain);
}

// The cold SSD restore against the raw read of the same segment files,
// alternating `repeats` times (the disk's rate drifts; docs/benchmarks.md).
Status MeasureColdSsd(const BenchModel& model, int repeats,
                      const std::vector<int32_t>& tokens,
                      const std::vector<LayerState>& layers, RestoreBench* r) {
  const NamespaceSpec spec = model.Spec();
  const fs::path dir = fs::temp_directory_path() / "prefixkv-bench-restore";
  std::error_code ec;
  fs::remove_all(dir, ec);
  const EngineOptions on_disk{.data_dir = dir.string(),
                              .hot_capacity_bytes = HotBytes(model),
                              .log = [](std::string_view) {}};
  {
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(on_disk));
    PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(spec));
    PKV_RETURN_IF_ERROR(engine->Store(ns, tokens, layers).status());
    PKV_RETURN_IF_ERROR(engine->Close());
  }
  fs::path segments;  // the SSD tier's segment files
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename() == "segments") segments = e.path();
  }
  if (segments.empty())
    return Status::NotFound("no segments directory in " + dir.string());
  std::vector<double> restore_s, raw_s, cpu_s, into_s, into_first_s;
  CallerMemory caller(layers);
  if (!caller.ok()) return Status::NoSpace("cannot map the caller memory");
  caller.Touch();
  for (int i = 0; i < repeats; ++i) {
    RawReadTimes raw;
    if (!TimeRawReads(segments, i % 2 == 0, &r->segment_bytes, &raw)) {
      return Status::IOError("raw read of " + segments.string() + " failed");
    }
    raw_s.push_back(raw.fastest_s());
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(on_disk));
    PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(spec));
    const uint64_t t0 = Clock::System()->NowNanos();
    const double cpu0 = ProcessCpuSeconds();
    PKV_ASSIGN_OR_RETURN(MatchResult m, engine->Match(ns, tokens));
    PKV_ASSIGN_OR_RETURN(RestoreResult out, engine->Restore(m));
    cpu_s.push_back(ProcessCpuSeconds() - cpu0);
    restore_s.push_back(static_cast<double>(Clock::System()->NowNanos() - t0) * 1e-9);
    if (out.blocks_from_ssd != static_cast<size_t>(model.blocks)) {
      return Status::Internal("the cold restore did not read every block from SSD");
    }
    if (i == 0) r->ssd_identical = SameState(out.layers, layers);
    PKV_RETURN_IF_ERROR(engine->Close());
    // The same cold read, into the caller's memory.
    PKV_ASSIGN_OR_RETURN(engine, Engine::Open(on_disk));
    PKV_ASSIGN_OR_RETURN(ns, engine->RegisterModel(spec));
    PKV_ASSIGN_OR_RETURN(TimedRestoreInto into,
                         TimeRestoreInto(*engine, ns, tokens, caller));
    if (into.out.result.blocks_from_ssd != static_cast<size_t>(model.blocks)) {
      return Status::Internal("the cold RestoreInto did not read every block from SSD");
    }
    into_s.push_back(into.whole_s);
    into_first_s.push_back(into.first_layer_s);
    if (i == 0) r->ssd_identical &= caller.Holds(layers);
    PKV_RETURN_IF_ERROR(engine->Close());
  }
  r->ssd_into_s = Summarize(into_s).median;
  r->ssd_into_first_layer_s = Summarize(into_first_s).median;
  std::sort(restore_s.begin(), restore_s.end());
  std::sort(raw_s.begin(), raw_s.end());
  std::sort(cpu_s.begin(), cpu_s.end());
  r->ssd_restore_cpu_s = cpu_s[cpu_s.size() / 2];
  r->ssd_restore_s = restore_s[restore_s.size() / 2];
  r->raw_read_s = raw_s[raw_s.size() / 2];
  fs::remove_all(dir, ec);
  return Status::OK();
}

// Times Match + PlanRestore of the hot chain, and the plan applied with
// CopyPlannedLayer (checked once against the stored layers).
Status MeasurePlan(Engine& engine, Namespace ns, const std::vector<int32_t>& tokens,
                   const std::vector<LayerState>& layers, int repeats, RestoreBench* r) {
  auto plan = [&]() -> StatusOr<RestorePlan> {
    PKV_ASSIGN_OR_RETURN(MatchResult m, engine.Match(ns, tokens));
    return engine.PlanRestore(m);
  };
  PKV_ASSIGN_OR_RETURN(RestorePlan first, plan());
  std::vector<std::vector<uint8_t>> dst(first.layers.size());
  r->plan_identical = first.layers.size() == layers.size();
  for (size_t l = 0; l < first.layers.size() && r->plan_identical; ++l) {
    dst[l].assign(first.layers[l].bytes, 0);
    CopyPlannedLayer(first.layers[l], dst[l].data());
    for (size_t t = 0; t < layers[l].tensors.size(); ++t) {
      const Tensor& want = layers[l].tensors[t];
      const PlannedTensor& got = first.layers[l].tensors[t];
      r->plan_identical =
          r->plan_identical && got.nbytes == want.nbytes() &&
          std::memcmp(dst[l].data() + got.offset, want.data(), got.nbytes) == 0;
    }
  }
  first.Release();
  Status failed;
  r->plan_s = MedianSeconds(repeats, [&] {
    StatusOr<RestorePlan> p = plan();
    if (!p.ok()) failed = p.status();
    DoNotOptimize(p);
  });
  r->plan_apply_s = MedianSeconds(repeats, [&] {
    StatusOr<RestorePlan> p = plan();
    if (!p.ok()) {
      failed = p.status();
      return;
    }
    for (size_t l = 0; l < p->layers.size(); ++l)
      CopyPlannedLayer(p->layers[l], dst[l].data());
    DoNotOptimize(dst[0].data());
  });
  return failed;
}

// Stores the chain once, then times Match + Restore against memcpy.
StatusOr<RestoreBench> Measure(const BenchModel& model, int repeats) {
  // RAM only: this measures the hot path (the SSD tier has `bench ssd`).
  const EngineOptions ram_only{.hot_capacity_bytes = HotBytes(model)};
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(ram_only));
  const NamespaceSpec spec = model.Spec();
  PKV_ASSIGN_OR_RETURN(Namespace ns, engine->RegisterModel(spec));
  std::mt19937_64 rng(11);
  const std::vector<LayerState> layers = model.RandomChain(rng);
  std::vector<int32_t> tokens(model.chain_tokens());
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 128000);
  RestoreBench r;
  for (const LayerState& l : layers) {
    for (const Tensor& t : l.tensors) r.bytes += t.nbytes();
  }
  PKV_RETURN_IF_ERROR(engine->Store(ns, tokens, layers).status());
  std::vector<uint8_t> src(r.bytes, 1), dst(r.bytes, 0);
  auto time_memcpy = [&] {
    const uint64_t start = Clock::System()->NowNanos();
    std::memcpy(dst.data(), src.data(), r.bytes);
    DoNotOptimize(dst.data());
    return static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9;
  };
  // A memcpy of the chain's bytes, then one Store of the chain into a new,
  // empty cache (built and torn down outside the timing), `repeats` times:
  // the ratios memcpy / store (the machine's speed drifts between runs; the
  // memcpy goes first so that work an engine leaves running in the
  // background, such as its arena faulting in pages, cannot slow it).
  Status store_failed;
  auto store_ratios = [&](const EngineOptions& options) -> Range {
    std::vector<double> t;
    for (int i = 0; i < repeats; ++i) {
      StatusOr<std::unique_ptr<Engine>> fresh = Engine::Open(options);
      StatusOr<Namespace> fresh_ns =
          fresh.ok() ? (*fresh)->RegisterModel(spec) : fresh.status();
      if (!fresh_ns.ok()) {
        store_failed = fresh_ns.status();
        return Range{};
      }
      const double memcpy_s = time_memcpy();
      const uint64_t start = Clock::System()->NowNanos();
      StatusOr<StoreResult> stored = (*fresh)->Store(*fresh_ns, tokens, layers);
      t.push_back(memcpy_s /
                  (static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9));
      if (!stored.ok() || stored->blocks_written != static_cast<size_t>(model.blocks)) {
        store_failed = Status::Internal("store failed");
      }
    }
    return Summarize(t);
  };
  time_memcpy();  // fault the destination in
  r.store_fresh_pages = store_ratios(ram_only);
  EngineOptions prefaulted = ram_only;
  prefaulted.arena_prefault_bytes = HotBytes(model) / 2 + (uint64_t{64} << 20);
  r.store_prefaulted = store_ratios(prefaulted);
  EngineOptions small = ram_only;
  small.arena_huge_pages = false;
  r.store_fresh_small = store_ratios(small);

  auto restore = [&]() -> StatusOr<RestoreResult> {
    PKV_ASSIGN_OR_RETURN(MatchResult m, engine->Match(ns, tokens));
    return engine->Restore(m);
  };
  // Checked once, outside the timing: the restore is exact.
  PKV_ASSIGN_OR_RETURN(RestoreResult first, restore());
  r.identical = first.restored_tokens == static_cast<uint64_t>(model.chain_tokens()) &&
                SameState(first.layers, layers);
  first = RestoreResult{};
  Status failed;
  auto timed = [&] {
    StatusOr<RestoreResult> out = restore();
    if (!out.ok() || out->restored_tokens != static_cast<uint64_t>(model.chain_tokens()))
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
  // Warm: the stores' engines share one arena, as one long-running engine
  // reuses its regions (a new engine's own arena would be fresh pages).
  EngineOptions warm = ram_only;
  warm.memory_resource = NewArenaMemoryResource(
      {.max_region_bytes = size_t{256} << 20, .retain_bytes = HotBytes(model)});
  (void)store_ratios(warm);  // warm the heap and the arena for stores too
  r.store = store_ratios(warm);
  PKV_RETURN_IF_ERROR(store_failed);
  r.memcpy_s = MedianSeconds(repeats, [&] { DoNotOptimize(time_memcpy()); });
  PKV_ASSIGN_OR_RETURN(r.into, MeasureRestoreInto(*engine, ns, tokens, layers, repeats));
  PKV_RETURN_IF_ERROR(MeasurePlan(*engine, ns, tokens, layers, repeats, &r));
  PKV_RETURN_IF_ERROR(MeasureColdSsd(model, repeats, tokens, layers, &r));
  return r;
}

// The model of `--model`, with `--tokens` tokens: "default" (8 layers, 8 KV
// heads x 128, fp16, 256-token blocks, 32 blocks) or "llama3-8b" (Llama 3 8B's
// KV shape: 32 layers, 8 KV heads x 128, fp16: 128 KiB per token; 16-token,
// 2 MiB blocks; 8192 tokens, 1 GiB, unless --tokens says otherwise).
std::string ParseModel(const Flags& flags, BenchModel* model) {
  const std::string name = flags.GetString("model", "default");
  if (name == "llama3-8b") {
    *model =
        BenchModel{.name = "llama3-8b", .layers = 32, .block_tokens = 16, .blocks = 512};
  } else if (name == "hybrid") {
    model->name = "hybrid";
    model->kinds = "WRWGWRWG";
  } else if (name != "default") {
    return "unknown --model " + name + " (default, llama3-8b or hybrid)";
  }
  if (!flags.Has("tokens")) return "";
  std::string error;
  std::optional<uint64_t> tokens = flags.GetCount("tokens", &error);
  if (!tokens || *tokens == 0 ||
      *tokens % static_cast<uint64_t>(model->block_tokens) != 0 ||
      *tokens > (uint64_t{1} << 20)) {
    return "bad --tokens: a multiple of " + std::to_string(model->block_tokens) +
           " up to 1048576";
  }
  model->blocks = static_cast<int>(*tokens / static_cast<uint64_t>(model->block_tokens));
  return "";
}

int RunRestoreBench(const std::vector<std::string>& args) {
  BenchArgs bench;
  BenchModel model;
  if (std::optional<int> done = ParseBenchArgs(
          "restore", 7, args, &bench,
          {{"model",
            "default (8 layers, 256-token blocks), llama3-8b or hybrid (default's "
            "shape, layers WRWGWRWG: 1024-token windows and recurrent states kept in "
            "the tip)",
            false, "default"},
           {"tokens", "the restored prefix, in tokens (default: 32 blocks)", false, ""}},
          [&](const Flags& flags) { return ParseModel(flags, &model); })) {
    return *done;
  }
  StatusOr<RestoreBench> r = Measure(model, bench.repeats);
  if (!r.ok()) {
    return ReportError(bench.json, "prefixkv bench restore", r.status().ToString(),
                       kExitProblem);
  }
  const double ratio = r->memcpy_s / r->restore_s;
  const double gb_s = static_cast<double>(r->bytes) / r->restore_s / 1e9;
  if (bench.json) {
    SuiteJson out("restore");
    JsonWriter& j = out.j();
    j.Field("restore_ratio_vs_memcpy", ratio)
        .Field("restore_gb_per_second", gb_s)
        .Field("restore_ratio_vs_memcpy_fresh_pages", r->memcpy_s / r->fresh_pages_s)
        .Field("store_ratio_vs_memcpy", r->store.median)
        .Field("store_ratio_vs_memcpy_fresh_pages", r->store_fresh_pages.median)
        .Field("store_ratio_vs_memcpy_fresh_pages_min", r->store_fresh_pages.min)
        .Field("store_ratio_vs_memcpy_fresh_pages_max", r->store_fresh_pages.max)
        .Field("store_ratio_vs_memcpy_prefaulted_arena", r->store_prefaulted.median)
        .Field("store_ratio_vs_memcpy_fresh_small_pages", r->store_fresh_small.median)
        .Field("memcpy_gb_per_second", static_cast<double>(r->bytes) / r->memcpy_s / 1e9)
        .Field("ssd_restore_ratio_vs_raw_read", r->raw_read_s / r->ssd_restore_s)
        .Field("ssd_restore_gb_per_second",
               static_cast<double>(r->bytes) / r->ssd_restore_s / 1e9)
        .Field("ssd_restore_cpu_ms", r->ssd_restore_cpu_s * 1e3)
        .Field("raw_read_gb_per_second",
               static_cast<double>(r->segment_bytes) / r->raw_read_s / 1e9)
        .Field("restore_into_ratio_vs_memcpy", r->into.ratio_warm.median)
        .Field("restore_into_ratio_vs_memcpy_min", r->into.ratio_warm.min)
        .Field("restore_into_ratio_vs_memcpy_max", r->into.ratio_warm.max)
        .Field("restore_into_ratio_vs_memcpy_fresh_pages", r->into.ratio_fresh.median)
        .Field("restore_into_ratio_vs_memcpy_fresh_pages_min", r->into.ratio_fresh.min)
        .Field("restore_into_ratio_vs_memcpy_fresh_pages_max", r->into.ratio_fresh.max)
        .Field("restore_into_ms", r->into.whole_ms.median)
        .Field("restore_into_first_layer_ms", r->into.first_layer_ms.median)
        .Field("ssd_restore_into_ms", r->ssd_into_s * 1e3)
        .Field("ssd_restore_into_first_layer_ms", r->ssd_into_first_layer_s * 1e3)
        .Field("ssd_restore_into_ratio_vs_raw_read", r->raw_read_s / r->ssd_into_s)
        .Field("plan_restore_ms", r->plan_s * 1e3)
        .Field("plan_apply_ratio_vs_memcpy", r->memcpy_s / r->plan_apply_s)
        .Field("model", model.name)
        .Field("layers", model.layers)
        .Field("block_tokens", model.block_tokens)
        .Field("bytes", r->bytes)
        .Field("blocks", model.blocks)
        .Field("byte_identical", r->identical && r->ssd_identical && r->into.identical &&
                                     r->plan_identical);
    out.Print();
  } else {
    std::printf(
        "restore of %d blocks x %d layers (%llu bytes): %.2f GB/s, %.2fx memcpy%s\n",
        model.blocks, model.layers, static_cast<unsigned long long>(r->bytes), gb_s,
        ratio, r->identical ? "" : " (NOT byte-identical)");
    std::printf(
        "store of the same chain: %.2fx memcpy (%.2fx [%.2f-%.2f] into a new engine's "
        "fresh pages, %.2fx into fresh 4 KiB pages, %.2fx into an arena prefaulted at "
        "Open)\n",
        r->store.median, r->store_fresh_pages.median, r->store_fresh_pages.min,
        r->store_fresh_pages.max, r->store_fresh_small.median,
        r->store_prefaulted.median);
    std::printf(
        "PlanRestore: %.3f ms to plan; plan applied with memcpy: %.2fx memcpy%s\n",
        r->plan_s * 1e3, r->memcpy_s / r->plan_apply_s,
        r->plan_identical ? "" : " (NOT byte-identical)");
    std::printf(
        "cold SSD restore: %.2f GB/s, %.2fx a raw O_DIRECT read of the segments%s\n",
        static_cast<double>(r->bytes) / r->ssd_restore_s / 1e9,
        r->raw_read_s / r->ssd_restore_s,
        r->ssd_identical ? "" : " (NOT byte-identical)");
    std::printf(
        "RestoreInto caller memory: %.2fx memcpy [%.2f-%.2f] into the same warm buffer, "
        "%.2fx [%.2f-%.2f] into fresh pages%s\n",
        r->into.ratio_warm.median, r->into.ratio_warm.min, r->into.ratio_warm.max,
        r->into.ratio_fresh.median, r->into.ratio_fresh.min, r->into.ratio_fresh.max,
        r->into.identical ? "" : " (NOT byte-identical)");
    std::printf(
        "  first layer after %.2f ms of %.2f ms; cold from SSD: %.2f ms of %.2f ms "
        "(%.2fx the raw read)\n",
        r->into.first_layer_ms.median, r->into.whole_ms.median,
        r->ssd_into_first_layer_s * 1e3, r->ssd_into_s * 1e3,
        r->raw_read_s / r->ssd_into_s);
  }
  return r->identical && r->ssd_identical && r->into.identical ? 0 : 1;
}

}  // namespace

PKV_REGISTER_BENCH("restore",
                   "hot-tier restore (and RestoreInto) of a 32-block chain vs memcpy",
                   RunRestoreBench);

}  // namespace prefixkv::cli
