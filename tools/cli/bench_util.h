// Helpers for `prefixkv bench` suites: repeat a measurement and take the median,
// and keep the optimiser from deleting measured work.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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
