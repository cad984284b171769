// Helpers for `prefixkv bench` suites: repeat a measurement and take the median,
// keep the optimiser from deleting measured work, and random KV caches.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "prefixkv/block.h"
#include "prefixkv/clock.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {

// Runs `fn` `repeats` times and returns the median wall time in seconds.
inline double MedianSeconds(int repeats, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    uint64_t start = Clock::System()->NowNanos();
    fn();
    t.push_back(static_cast<double>(Clock::System()->NowNanos() - start) * 1e-9);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// CPU seconds the whole process (every thread) has used so far: the work a
// measured path does, less disturbed than its wall time by a noisy disk.
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// `layers` KVCache layers of `tokens` positions: keys then values, each a
// float16 [1, heads, tokens, head_dim] tensor of random bits from `rng`.
inline std::vector<LayerState> RandomKvLayers(std::mt19937_64& rng, int layers,
                                              int64_t heads, int64_t tokens,
                                              int64_t head_dim) {
  std::vector<LayerState> out(static_cast<size_t>(layers));
  const size_t bytes = static_cast<size_t>(heads * tokens * head_dim * 2);
  for (LayerState& l : out) {
    l.cache_type = "KVCache";
    l.meta = {std::to_string(tokens)};
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* data = nullptr;
      SharedBytes b = SharedBytes::Allocate(bytes, &data);
      for (size_t i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t v = rng();
        std::memcpy(data + i, &v, 8);
      }
      l.tensors.push_back(
          Tensor(DType::kFloat16, {1, heads, tokens, head_dim}, std::move(b)));
    }
  }
  return out;
}

// The flags every ratio suite takes: --json and --repeats N.
struct BenchArgs {
  bool json = false;
  int repeats = 0;  // measurements per figure; the median is reported
};

// Parses `prefixkv bench SUITE` arguments into `out`. Returns an exit code when
// the command ends here (0 after --help, 2 on a usage error), nullopt otherwise.
inline std::optional<int> ParseBenchArgs(const std::string& suite, int default_repeats,
                                         const std::vector<std::string>& args,
                                         BenchArgs* out) {
  const std::string def = std::to_string(default_repeats);
  Flags flags("prefixkv bench " + suite + " [--json] [--repeats N]",
              {{"json", "print one JSON object", true, ""},
               {"repeats", "measurements per figure (median taken)", false, def}});
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return 0;
  }
  std::optional<uint64_t> repeats = ParseSize(flags.GetString("repeats", def));
  if (!repeats || *repeats == 0 || *repeats > 1000) {
    return UsageError(flags, "bad --repeats (1 to 1000)");
  }
  out->json = flags.GetBool("json");
  out->repeats = static_cast<int>(*repeats);
  return std::nullopt;
}

template <typename T>
inline void DoNotOptimize(T const& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace prefixkv::cli
