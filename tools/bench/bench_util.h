// The one set of helpers of the `prefixkv-bench` suites: repeat a measurement
// and take the median (or its range), keep the optimiser from deleting
// measured work, the model shape of the chains a suite stores and its random
// KV caches, and the suites' flag parsing.
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
#include "prefixkv/block_key.h"
#include "prefixkv/clock.h"
#include "prefixkv/namespace_spec.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

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

// Median, min and max of one figure over the rounds.
struct Range {
  double median = 0, min = 0, max = 0;
};

inline Range Summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return Range{v[v.size() / 2], v.front(), v.back()};
}

// The q-quantile (0..1) of `v` by the nearest-rank rule; 0 when empty.
inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
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

// The model whose chains a suite stores and restores: `layers` KVCache layers,
// float16 keys and values of [1, kv_heads, tokens, head_dim] each, chains of
// `blocks` blocks of `block_tokens` tokens. One struct, so the suites state
// only where their shape differs (bench restore: 256-token blocks of 8 KV
// heads; bench remote: 16-token blocks of 4).
struct BenchModel {
  const char* name = "bench-8l";
  int layers = 8;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  int block_tokens = 256;
  int blocks = 32;
  // Empty: every layer KVCache. Else one letter per layer: G KVCache, W a
  // RotatingKVCache of window_tokens, R an ArraysCache (conv ring of
  // conv_tokens x kv_heads * head_dim, state kv_heads x head_dim x head_dim):
  // the window and recurrent state live only in the chain's tip.
  std::string kinds;
  int64_t window_tokens = 1024;
  int64_t conv_tokens = 3;

  constexpr int64_t chain_tokens() const { return int64_t{blocks} * block_tokens; }
  char Kind(int layer) const {
    return kinds.empty() ? 'G' : kinds[static_cast<size_t>(layer)];
  }
  NamespaceSpec Spec() const {
    std::vector<std::string> types;
    for (int l = 0; l < layers; ++l) {
      types.push_back(Kind(l) == 'W'   ? "RotatingKVCache"
                      : Kind(l) == 'R' ? "ArraysCache"
                                       : "KVCache");
    }
    return NamespaceSpec{.model = name,
                         .block_tokens = static_cast<uint32_t>(block_tokens),
                         .dtype = DType::kFloat16,
                         .layer_types = std::move(types),
                         .salt = ""};
  }
  // The caches of one whole chain, random bits from `rng`: a full KV per
  // G layer, a ring at the chain's end per W layer, a conv ring and a
  // state per R layer.
  std::vector<LayerState> RandomChain(std::mt19937_64& rng) const {
    std::vector<LayerState> out =
        RandomKvLayers(rng, layers, kv_heads, chain_tokens(), head_dim);
    const int64_t t = chain_tokens();
    for (int l = 0; l < layers; ++l) {
      const char kind = Kind(l);
      if (kind == 'G') continue;
      const bool window = kind == 'W';
      const int64_t ring = window ? window_tokens : conv_tokens;
      LayerState& s = out[static_cast<size_t>(l)];
      s = RandomKvLayers(rng, 1, window ? kv_heads : 1, std::min(ring, t),
                         window ? head_dim : kv_heads * head_dim)[0];
      s.cache_type = window ? "RotatingKVCache" : "ArraysCache";
      s.meta = {"0", std::to_string(ring), std::to_string(t), std::to_string(t % ring)};
      if (!window) {
        s.tensors[1] = RandomKvLayers(rng, 1, kv_heads, head_dim, head_dim)[0].tensors[0];
      }
    }
    return out;
  }
};

// Parses `args` into `flags`: an exit code when the command ends here (0
// after --help, printing it; 2 on a usage error), nullopt otherwise.
inline std::optional<int> ParseSuiteFlags(Flags& flags,
                                          const std::vector<std::string>& args) {
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return kExitOk;
  }
  return std::nullopt;
}

// Flag `name` as a count from 1 to `max` (`def` when absent); nullopt when it
// is not one.
inline std::optional<uint64_t> ParseCount(const Flags& flags, const std::string& name,
                                          const std::string& def, uint64_t max) {
  std::optional<uint64_t> n = ParseSize(flags.GetString(name, def));
  if (!n || *n == 0 || *n > max) return std::nullopt;
  return n;
}

// The flags every ratio suite takes: --json and --repeats N.
struct BenchArgs {
  bool json = false;
  int repeats = 0;  // measurements per figure; the median is reported
};

// Parses `prefixkv bench SUITE` arguments into `out`. Returns an exit code when
// the command ends here (0 after --help, 2 on a usage error), nullopt otherwise.
// A suite with flags of its own passes them in `extra` and reads them in
// `parse_extra`, which returns a usage error ("" when they are good).
inline std::optional<int> ParseBenchArgs(
    const std::string& suite, int default_repeats, const std::vector<std::string>& args,
    BenchArgs* out, std::vector<FlagSpec> extra = {},
    const std::function<std::string(const Flags&)>& parse_extra = nullptr) {
  const std::string def = std::to_string(default_repeats);
  std::string usage = "prefixkv bench " + suite + " [--json] [--repeats N]";
  for (const FlagSpec& f : extra) usage += " [--" + f.name + (f.is_bool ? "]" : " X]");
  std::vector<FlagSpec> specs = {
      {"json", "print one JSON object", true, ""},
      {"repeats", "measurements per figure (median taken)", false, def}};
  specs.insert(specs.end(), extra.begin(), extra.end());
  Flags flags(usage, std::move(specs));
  if (std::optional<int> done = ParseSuiteFlags(flags, args)) return *done;
  std::optional<uint64_t> repeats = ParseCount(flags, "repeats", def, 1000);
  if (!repeats) return UsageError(flags, NotInRange(flags, "repeats", "1..1000"));
  if (parse_extra) {
    const std::string error = parse_extra(flags);
    if (!error.empty()) return UsageError(flags, error);
  }
  out->json = flags.GetBool("json");
  out->repeats = static_cast<int>(*repeats);
  return std::nullopt;
}

// The one JSON line a suite prints with --json: {"suite":"NAME", then the
// fields the suite adds to j()}; Print() closes the object and prints it.
class SuiteJson {
 public:
  explicit SuiteJson(std::string_view suite) { j_.BeginObject().Field("suite", suite); }
  JsonWriter& j() { return j_; }
  void Print() {
    j_.EndObject();
    std::printf("%s\n", j_.str().c_str());
  }

 private:
  JsonWriter j_;
};

template <typename T>
inline void DoNotOptimize(T const& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace prefixkv::cli
