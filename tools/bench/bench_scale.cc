// `prefixkv bench scale`: the engine at the scale users run it (issue 28),
// each figure against a limit measured in the same run, and the goals:
//  - llama: a 32k-token prefix of Llama 3 8B's KV shape (32 layers, 8 KV
//    heads x 128 dims, fp16: 128 KiB per token, 4 GiB) in 16-token (2 MiB)
//    and 256-token (32 MiB) blocks, restored into caller memory from the hot
//    tier (against memcpy into the same memory) and cold from the SSD tier
//    (against a raw O_DIRECT read of the same segment files), with the time
//    until layer 0 is complete (scale_llama.cc). Goal: cold >= 0.7x raw.
//  - index: one SSD tier grown from 1,000 to 1M+ small blocks: RAM and disk
//    metadata per block, open time, restore-read latency and store
//    throughput at every size (scale_index.cc; --svg draws them). Goals:
//    <= 200 bytes of RAM per block, open with 1M blocks < 5 s.
//  - concurrency: N threads restoring while write-back runs, against the
//    same mix done raw (scale_concurrency.cc). Goal: p99 <= 3x p50.
//  - dedup (only when named): a store of a 4-block chain of 1 MiB blocks all
//    cached on SSD, for a model with layer shapes, against the same store of
//    a model without them (scale_dedup.cc).
// The defaults are the full-size run (about 10 GiB of disk at most at a
// time, all removed afterwards); the smoke test passes tiny sizes.
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "tools/bench/scale_bench.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

namespace fs = std::filesystem;

struct ScaleArgs {
  bool json = false;
  int repeats = 3;
  bool llama = true, index = true, concurrency = true, dedup = false;
  int64_t tokens = 32768;
  std::vector<int> block_tokens{16, 256};
  uint64_t index_blocks = 1'000'000, index_block_bytes = 16320;
  int samples = 2000;
  int threads = 4;
  double seconds = 5;
  uint64_t conc_bytes = uint64_t{1} << 30;
  fs::path dir;
  std::string svg;
};

struct ScaleResult {
  std::vector<LlamaFigures> llama;
  std::optional<IndexFigures> index;
  std::optional<ConcurrencyFigures> concurrency;
  std::optional<DedupFigures> dedup;
};

// Splits "a,b,c".
std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) out.push_back(part);
  return out;
}

std::string ParseParts(const Flags& flags, ScaleArgs* a) {
  a->llama = a->index = a->concurrency = false;
  for (const std::string& p :
       Split(flags.GetString("parts", "llama,index,concurrency"))) {
    if (p == "llama")
      a->llama = true;
    else if (p == "index")
      a->index = true;
    else if (p == "concurrency")
      a->concurrency = true;
    else if (p == "dedup")
      a->dedup = true;
    else
      return "unknown part '" + p + "' in --parts (llama, index, concurrency, dedup)";
  }
  return "";
}

std::string ParseSizes(const Flags& flags, ScaleArgs* a) {
  std::optional<uint64_t> tokens =
      ParseCount(flags, "tokens", "32768", uint64_t{1} << 20);
  if (!tokens) return NotInRange(flags, "tokens", "1..1048576");
  a->tokens = static_cast<int64_t>(*tokens);
  a->block_tokens.clear();
  for (const std::string& b : Split(flags.GetString("block-tokens", "16,256"))) {
    std::optional<uint64_t> n = ParseSize(b);
    if (!n || *n == 0 || *n > 65536 || *tokens % *n != 0)
      return "bad --block-tokens '" + b + "': each a divisor of --tokens";
    a->block_tokens.push_back(static_cast<int>(*n));
  }
  std::optional<uint64_t> blocks =
      ParseCount(flags, "index-blocks", "1000000", 100'000'000);
  std::optional<uint64_t> bytes =
      ParseCount(flags, "index-block-bytes", "16320", 64 << 20);
  std::optional<uint64_t> samples = ParseCount(flags, "samples", "2000", 1'000'000);
  std::optional<uint64_t> threads = ParseCount(flags, "threads", "4", 256);
  std::optional<uint64_t> conc =
      ParseCount(flags, "conc-bytes", "1G", uint64_t{64} << 30);
  // Each named with its value (one message listed all five flags).
  if (!blocks) return NotInRange(flags, "index-blocks", "1..100000000");
  if (!bytes || *bytes < 8) return NotInRange(flags, "index-block-bytes", "8..64M");
  if (!samples) return NotInRange(flags, "samples", "1..1000000");
  if (!threads) return NotInRange(flags, "threads", "1..256");
  if (!conc) return NotInRange(flags, "conc-bytes", "1..64G");
  a->index_blocks = *blocks;
  a->index_block_bytes = *bytes;
  a->samples = static_cast<int>(*samples);
  a->threads = static_cast<int>(*threads);
  a->conc_bytes = *conc;
  try {
    a->seconds = std::stod(flags.GetString("seconds", "5"));
  } catch (...) {
    a->seconds = -1;
  }
  if (!(a->seconds > 0 && a->seconds <= 600))
    return NotInRange(flags, "seconds", "a number in (0, 600]");
  return "";
}

std::string ParseScale(const Flags& flags, ScaleArgs* a) {
  if (std::string e = EmptyOutputFile(flags, "svg"); !e.empty()) return e;
  if (std::string e = ParseParts(flags, a); !e.empty()) return e;
  if (std::string e = ParseSizes(flags, a); !e.empty()) return e;
  a->dir = flags.Has("dir") ? fs::path(flags.GetString("dir"))
                            : fs::temp_directory_path() / "prefixkv-bench-scale";
  a->dir /= "run-" + std::to_string(getpid());
  a->svg = flags.GetString("svg", "");
  return "";
}

StatusOr<ScaleResult> RunParts(const ScaleArgs& a) {
  ScaleResult r;
  if (a.llama) {
    for (int b : a.block_tokens) {
      PKV_ASSIGN_OR_RETURN(LlamaFigures f,
                           MeasureLlama(b, a.tokens, a.repeats, a.dir / "llama"));
      r.llama.push_back(f);
    }
  }
  if (a.index) {
    PKV_ASSIGN_OR_RETURN(r.index, MeasureIndex(a.index_blocks, a.index_block_bytes,
                                               a.samples, a.dir / "index"));
  }
  if (a.concurrency) {
    PKV_ASSIGN_OR_RETURN(r.concurrency, MeasureConcurrency(a.threads, a.seconds,
                                                           a.conc_bytes, a.dir / "conc"));
  }
  if (a.dedup) {
    PKV_ASSIGN_OR_RETURN(r.dedup, MeasureDedup(a.repeats, a.dir / "dedup"));
  }
  return r;
}

bool Identical(const ScaleResult& r) {
  bool ok = true;
  for (const LlamaFigures& f : r.llama) ok = ok && f.identical;
  if (r.index) ok = ok && r.index->identical;
  if (r.concurrency) ok = ok && r.concurrency->identical;
  return ok;
}

void RangeFields(JsonWriter& j, const std::string& name, const Range& r) {
  j.Field(name, r.median).Field(name + "_min", r.min).Field(name + "_max", r.max);
}

void RestoreJson(JsonWriter& j, const std::string& prefix, const std::string& limit,
                 const RestoreFigures& f) {
  RangeFields(j, prefix + "_ratio_vs_" + limit, f.ratio);
  RangeFields(j, prefix + "_ms", f.ms);
  RangeFields(j, prefix + "_first_layer_ms", f.first_layer_ms);
}

// The goal's figure: the cold restore of a long-running engine.
double ColdGoalRatio(const LlamaFigures& f) {
  return f.cold[kColdWarmArena].ratio.median;
}

void LlamaJson(JsonWriter& j, const std::vector<LlamaFigures>& all) {
  j.Key("llama").BeginArray();
  for (const LlamaFigures& f : all) {
    j.BeginObject()
        .Field("block_tokens", f.block_tokens)
        .Field("blocks", f.blocks)
        .Field("bytes", f.bytes);
    RestoreJson(j, "hot", "memcpy", f.hot);
    RangeFields(j, "memcpy_ms", f.memcpy_ms);
    for (int k = 0; k < kColdKinds; ++k)
      RestoreJson(j, std::string("cold_") + ColdKindName(k), "raw_read", f.cold[k]);
    RangeFields(j, "raw_read_ms", f.raw_ms);
    RangeFields(j, "raw_read_heap_buffer_ms", f.raw_heap_ms);
    RangeFields(j, "raw_read_huge_page_ms", f.raw_huge_page_ms);
    j.Field("segment_bytes", f.segment_bytes)
        .Field("segment_bytes_resident_after", f.resident_bytes)
        .Field("goal_cold_ratio_met", ColdGoalRatio(f) >= 0.7)
        .Field("byte_identical", f.identical)
        .EndObject();
  }
  j.EndArray();
}

void IndexJson(JsonWriter& j, const IndexFigures& f) {
  j.Key("index")
      .BeginObject()
      .Field("block_bytes", f.block_bytes)
      .Key("steps")
      .BeginArray();
  for (const IndexStep& s : f.steps) {
    j.BeginObject()
        .Field("blocks", s.blocks)
        .Field("store_blocks_per_s", s.store_blocks_per_s)
        .Field("store_mb_per_s", s.store_mb_per_s)
        .Field("get_p50_us", s.get_p50_us)
        .Field("get_p99_us", s.get_p99_us)
        .Field("open_s", s.open_s)
        .Field("open_max_s", s.open_max_s)
        .Field("open_cpu_s", s.open_cpu_s)
        .Field("heap_bytes", s.heap_bytes)
        .Field("metadata_disk_bytes", s.metadata_disk_bytes)
        .Field("segment_disk_bytes", s.segment_disk_bytes)
        .EndObject();
  }
  const IndexStep& last = f.steps.back();
  j.EndArray()
      .Field("ram_bytes_per_block", f.ram_bytes_per_block)
      .Field("ram_bytes_per_block_total", f.ram_bytes_per_block_total)
      .Field("disk_metadata_bytes_per_block", f.disk_metadata_bytes_per_block)
      .Field("goal_ram_met", f.ram_bytes_per_block <= 200)
      .Field("goal_open_met", last.blocks >= 1'000'000 && last.open_s < 5)
      .Field("byte_identical", f.identical)
      .EndObject();
}

void ConcurrencyJson(JsonWriter& j, const ConcurrencyFigures& f) {
  j.Key("concurrency")
      .BeginObject()
      .Field("threads", f.threads)
      .Field("seconds", f.seconds)
      .Field("block_bytes", f.block_bytes)
      .Field("alone_p50_ms", f.alone_p50_ms)
      .Field("alone_p99_ms", f.alone_p99_ms)
      .Field("alone_read_mb_per_s", f.alone_read_mb_s)
      .Field("p50_ms", f.p50_ms)
      .Field("p99_ms", f.p99_ms)
      .Field("p99_over_p50", f.p99_ms / f.p50_ms)
      .Field("restores", f.restores)
      .Field("read_mb_per_s", f.read_mb_s)
      .Field("write_mb_per_s", f.write_mb_s)
      .Field("raw_alone_read_mb_per_s", f.raw_alone_read_mb_s)
      .Field("raw_read_mb_per_s", f.raw_read_mb_s)
      .Field("raw_write_mb_per_s", f.raw_write_mb_s)
      .Field("raw_p50_ms", f.raw_p50_ms)
      .Field("raw_p99_ms", f.raw_p99_ms)
      .Field("total_ratio_vs_raw",
             (f.read_mb_s + f.write_mb_s) / (f.raw_read_mb_s + f.raw_write_mb_s))
      .Field("goal_p99_met", f.p99_ms <= 3 * f.p50_ms)
      .Field("byte_identical", f.identical)
      .EndObject();
}

void DedupJson(JsonWriter& j, const DedupFigures& f) {
  j.Key("dedup")
      .BeginObject()
      .Field("blocks", f.blocks)
      .Field("block_bytes", f.block_bytes);
  RangeFields(j, "warm_us", f.warm_us);
  RangeFields(j, "warm_floor_us", f.warm_floor_us);
  RangeFields(j, "first_us", f.first_us);
  RangeFields(j, "first_floor_us", f.first_floor_us);
  j.EndObject();
}

const char* Met(bool met) { return met ? "met" : "MISSED"; }

void PrintDedupLine(const char* name, const Range& r, const Range& floor) {
  std::printf("  %-6s %.0f [%.0f-%.0f] vs %.0f [%.0f-%.0f] (%.2fx)\n", name, r.median,
              r.min, r.max, floor.median, floor.min, floor.max, r.median / floor.median);
}

void PrintText(const ScaleResult& r) {
  for (const LlamaFigures& f : r.llama) {
    std::printf(
        "llama3-8b, %d-token blocks (%d blocks, %.2f GiB):\n"
        "  hot RestoreInto %.2fx memcpy [%.2f-%.2f] (%.0f ms; first layer %.1f ms)\n"
        "  cold SSD RestoreInto vs raw O_DIRECT read (%.0f ms: the faster of %.0f ms "
        "into a heap buffer, %.0f ms into a huge page; %llu segment bytes cached "
        "after):\n",
        f.block_tokens, f.blocks, static_cast<double>(f.bytes) / (1 << 30),
        f.hot.ratio.median, f.hot.ratio.min, f.hot.ratio.max, f.hot.ms.median,
        f.hot.first_layer_ms.median, f.raw_ms.median, f.raw_heap_ms.median,
        f.raw_huge_page_ms.median, static_cast<unsigned long long>(f.resident_bytes));
    for (int k = 0; k < kColdKinds; ++k) {
      const RestoreFigures& c = f.cold[k];
      std::printf(
          "    %-13s %.2fx [%.2f-%.2f] (%.0f ms; first layer %.0f ms)%s\n",
          ColdKindName(k), c.ratio.median, c.ratio.min, c.ratio.max, c.ms.median,
          c.first_layer_ms.median,
          k == kColdWarmArena
              ? (ColdGoalRatio(f) >= 0.7 ? "  goal >= 0.7: met" : "  goal >= 0.7: MISSED")
              : "");
    }
    if (!f.identical) std::printf("  NOT byte-identical\n");
  }
  if (r.index) {
    const IndexFigures& f = *r.index;
    std::printf("SSD index, %llu-byte blocks:\n  %10s %12s %10s %10s %10s %8s %8s %12s\n",
                static_cast<unsigned long long>(f.block_bytes), "blocks", "store blk/s",
                "store MB/s", "get p50us", "get p99us", "open s", "cpu s", "heap bytes");
    for (const IndexStep& s : f.steps) {
      std::printf("  %10llu %12.0f %10.1f %10.1f %10.1f %8.3f %8.3f %12llu\n",
                  static_cast<unsigned long long>(s.blocks), s.store_blocks_per_s,
                  s.store_mb_per_s, s.get_p50_us, s.get_p99_us, s.open_s, s.open_cpu_s,
                  static_cast<unsigned long long>(s.heap_bytes));
    }
    const IndexStep& last = f.steps.back();
    std::printf(
        "  RAM %.0f bytes per block (%.0f with fixed costs)  goal <= 200: %s\n"
        "  metadata on disk %.0f bytes per block; open with %llu blocks %.2f s  goal < 5 "
        "s at 1M: %s%s\n",
        f.ram_bytes_per_block, f.ram_bytes_per_block_total,
        Met(f.ram_bytes_per_block <= 200), f.disk_metadata_bytes_per_block,
        static_cast<unsigned long long>(last.blocks), last.open_s,
        Met(last.blocks >= 1'000'000 && last.open_s < 5),
        f.identical ? "" : " (NOT byte-identical)");
  }
  if (r.concurrency) {
    const ConcurrencyFigures& f = *r.concurrency;
    std::printf(
        "concurrency, %d threads restoring 2 MiB blocks for %.1f s:\n"
        "  alone: p50 %.1f ms p99 %.1f ms, %.0f MB/s (raw %.0f MB/s)\n"
        "  with write-back: p50 %.1f ms p99 %.1f ms (%.2fx) goal <= 3x: %s\n"
        "  read %.0f + write %.0f MB/s vs raw %.0f + %.0f MB/s (%.2fx)%s\n",
        f.threads, f.seconds, f.alone_p50_ms, f.alone_p99_ms, f.alone_read_mb_s,
        f.raw_alone_read_mb_s, f.p50_ms, f.p99_ms, f.p99_ms / f.p50_ms,
        Met(f.p99_ms <= 3 * f.p50_ms), f.read_mb_s, f.write_mb_s, f.raw_read_mb_s,
        f.raw_write_mb_s,
        (f.read_mb_s + f.write_mb_s) / (f.raw_read_mb_s + f.raw_write_mb_s),
        f.identical ? "" : " (NOT byte-identical)");
  }
  if (r.dedup) {
    const DedupFigures& f = *r.dedup;
    std::printf(
        "dedup, a store of %d cached 1 MiB blocks on SSD, with layer shapes vs "
        "without (the floor), us:\n",
        f.blocks);
    PrintDedupLine("warm", f.warm_us, f.warm_floor_us);
    PrintDedupLine("first", f.first_us, f.first_floor_us);
  }
}

int RunScaleBench(const std::vector<std::string>& args) {
  ScaleArgs a;
  BenchArgs bench;
  if (std::optional<int> done = ParseBenchArgs(
          "scale", 3, args, &bench,
          {{"parts", "llama,index,concurrency,dedup (any of them; dedup only when named)",
            false, "llama,index,concurrency"},
           {"tokens", "llama: the restored prefix in tokens", false, "32768"},
           {"block-tokens", "llama: block sizes in tokens", false, "16,256"},
           {"index-blocks", "index: blocks at the last step", false, "1000000"},
           {"index-block-bytes", "index: payload bytes per block", false, "16320"},
           {"samples", "index: cold reads timed per step", false, "2000"},
           {"threads", "concurrency: restoring threads", false, "4"},
           {"seconds", "concurrency: length of each window", false, "5"},
           {"conc-bytes", "concurrency: bytes stored to restore from", false, "1G"},
           {"dir", "scratch directory (removed afterwards)", false,
            "$TMPDIR/prefixkv-bench-scale"},
           {"svg", "index: draw latency and throughput by blocks into this file", false,
            ""}},
          [&](const Flags& flags) { return ParseScale(flags, &a); })) {
    return *done;
  }
  a.json = bench.json;
  a.repeats = bench.repeats;
  StatusOr<ScaleResult> r = RunParts(a);
  std::error_code ec;
  fs::remove_all(a.dir, ec);
  if (!r.ok()) {
    return ReportError(a.json, "prefixkv bench scale", r.status().ToString(),
                       kExitProblem);
  }
  if (!a.svg.empty() && r->index) {
    std::ofstream out(a.svg);
    out << IndexSvg(*r->index);
    if (!out) {
      return ReportError(a.json, "prefixkv bench scale", "cannot write " + a.svg,
                         kExitProblem);
    }
  }
  if (a.json) {
    SuiteJson out("scale");
    if (!r->llama.empty()) LlamaJson(out.j(), r->llama);
    if (r->index) IndexJson(out.j(), *r->index);
    if (r->concurrency) ConcurrencyJson(out.j(), *r->concurrency);
    if (r->dedup) DedupJson(out.j(), *r->dedup);
    out.j().Field("byte_identical", Identical(*r));
    out.Print();
  } else {
    PrintText(*r);
  }
  return Identical(*r) ? kExitOk : kExitProblem;
}

}  // namespace

PKV_REGISTER_BENCH("scale",
                   "Llama-3-8B-sized restores, a 1M-block SSD index, restores under "
                   "write-back",
                   RunScaleBench);

}  // namespace prefixkv::cli
