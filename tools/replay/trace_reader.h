// Mooncake-format trace lines (docs/prefix_cache.md, "prefixkv replay"), parsed by hand:
// one JSON object per line with "timestamp", "input_length", "output_length" and
// "hash_ids". The parser accepts exactly what such a line can hold (numbers,
// strings, booleans, null and arrays of numbers; other keys are skipped) and
// reports the first problem with its column, never crashes on bad input.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv::replay {

struct TraceRequest {
  uint64_t timestamp_ms = 0;       // "timestamp" (optional, default 0)
  uint64_t input_length = 0;       // "input_length": prompt tokens (required)
  uint64_t output_length = 0;      // "output_length" (optional)
  std::vector<uint64_t> hash_ids;  // "hash_ids": one id per prompt block (required)
};

// Parses one line. InvalidArgument naming the column for anything else (a
// request key given twice too).
StatusOr<TraceRequest> ParseTraceLine(std::string_view line);

// Reads a whole trace file; blank lines are skipped. An error names the file
// and line ("trace.jsonl:12: ..."), also for an input_length that takes the
// trace's sum of them past 2^64 - 1 (the replays' hit ratio denominator),
// and for a trace with no request. NotFound when it cannot be opened (a
// directory included), IOError when a read fails.
StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path);

}  // namespace prefixkv::replay
