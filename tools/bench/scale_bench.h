// The parts of `prefixkv bench scale` (bench_scale.cc), each in a file of
// its own: a Llama-3-8B-shaped prefix of 32k tokens restored hot and cold
// (scale_llama.cc), an SSD tier grown to 1M+ small blocks
// (scale_index.cc), restores racing write-back (scale_concurrency.cc), and
// deduplicated stores of blocks on SSD (scale_dedup.cc, only when named).
// Every figure is set against a limit measured in the same run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "prefixkv/status.h"
#include "tools/bench/bench_util.h"

namespace prefixkv::cli {

// A 32-layer, 8 KV heads x 128 dims, float16 model (Llama 3 8B's KV: 128 KiB
// per token) with `block_tokens`-token blocks and a `tokens`-token chain.
BenchModel LlamaModel(int block_tokens, int64_t tokens);

// A restore against its limit: ratios are the limit's seconds over
// prefixkv's, one per alternating pair; times in milliseconds.
struct RestoreFigures {
  Range ratio;
  Range ms, first_layer_ms;  // whole, and until layer 0's callback
};

// How a cold restore's engine is set up (the promotion of every block read
// into the hot tier is where a fresh engine spends half its time).
enum ColdKind : int {
  kColdFreshEngine = 0,  // a new engine: the hot tier's arena faulted in as it fills
  kColdWarmArena = 1,    // a long-running engine: its arena's pages already faulted in
  kColdNoPromotion = 2,  // EngineOptions::promote_on_ssd_hit = false
  kColdKinds = 3,
};
const char* ColdKindName(int kind);  // "fresh_engine", "warm_arena", "no_promotion"

// One block size of the Llama part.
struct LlamaFigures {
  int block_tokens = 0;
  int blocks = 0;
  uint64_t bytes = 0;  // keys and values restored
  // RestoreInto from the hot tier against memcpy, both into one warm buffer.
  RestoreFigures hot;
  Range memcpy_ms;
  // Cold RestoreInto from the SSD tier against a raw O_DIRECT read of the
  // segment files, by ColdKind: against the faster of two raw reads in each
  // pair (into a heap buffer, into a huge page: disk_util.h), both reported.
  RestoreFigures cold[kColdKinds];
  Range raw_ms, raw_heap_ms, raw_huge_page_ms;
  uint64_t segment_bytes = 0;
  uint64_t resident_bytes = 0;  // segment pages in the page cache after cold reads
  bool identical = false;       // the caller memory held the chain, hot and cold
};
StatusOr<LlamaFigures> MeasureLlama(int block_tokens, int64_t tokens, int repeats,
                                    const std::filesystem::path& dir);

// One size of the index part: the tier grown to `blocks` blocks.
struct IndexStep {
  uint64_t blocks = 0;
  double store_blocks_per_s = 0;  // write-back of the blocks added at this step
  double store_mb_per_s = 0;
  double get_p50_us = 0, get_p99_us = 0;  // cold reads of single blocks
  // Reopen after a clean close with the files' pages evicted: median and
  // slowest of three, and the process's CPU seconds during it (median).
  double open_s = 0, open_max_s = 0, open_cpu_s = 0;
  uint64_t heap_bytes = 0;           // malloc'ed by the reopened tier
  uint64_t metadata_disk_bytes = 0;  // the metadata database's files
  uint64_t segment_disk_bytes = 0;
};
struct IndexFigures {
  uint64_t block_bytes = 0;  // payload of each block
  std::vector<IndexStep> steps;
  // RAM per block: the heap's growth from the first step to the last over
  // the blocks added (the tier's fixed costs excluded), and the last step's
  // whole heap over its blocks.
  double ram_bytes_per_block = 0, ram_bytes_per_block_total = 0;
  double disk_metadata_bytes_per_block = 0;
  bool identical = false;  // every block read back held its own stamp
};
// Steps: 1000, 10x each, up to `max_blocks` (the last step).
StatusOr<IndexFigures> MeasureIndex(uint64_t max_blocks, uint64_t block_bytes,
                                    int samples, const std::filesystem::path& dir);
// The index figures as an SVG plot: restore latency and store throughput
// against the number of blocks (log scale).
std::string IndexSvg(const IndexFigures& f);

struct ConcurrencyFigures {
  int threads = 0;
  double seconds = 0;
  uint64_t block_bytes = 0;
  // Restores (Get of one block) alone, then while write-back runs.
  double alone_p50_ms = 0, alone_p99_ms = 0, alone_read_mb_s = 0;
  double p50_ms = 0, p99_ms = 0, read_mb_s = 0, write_mb_s = 0;
  uint64_t restores = 0;
  // The disk's limit with the same mix: raw O_DIRECT random reads on
  // `threads` threads, alone and beside sequential writers.
  double raw_alone_read_mb_s = 0, raw_read_mb_s = 0, raw_write_mb_s = 0;
  double raw_p50_ms = 0, raw_p99_ms = 0;
  bool identical = false;
};
StatusOr<ConcurrencyFigures> MeasureConcurrency(int threads, double seconds,
                                                uint64_t read_bytes,
                                                const std::filesystem::path& dir);

// The dedup part (scale_dedup.cc): a store of a chain every block of which
// is cached on SSD, for a model with layer shapes (its store compares cached
// blocks with them) and, the floor, one without; microseconds per store.
struct DedupFigures {
  int blocks = 0;
  uint64_t block_bytes = 0;
  Range warm_us, warm_floor_us;    // after a store of the same chain
  Range first_us, first_floor_us;  // the first store after the engine opened
};
// `repeats` + 1 opens of one engine in `dir` (the first writes the chains).
StatusOr<DedupFigures> MeasureDedup(int repeats, const std::filesystem::path& dir);

}  // namespace prefixkv::cli
