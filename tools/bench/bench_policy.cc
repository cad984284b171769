// `prefixkv bench policy`: every eviction policy (and Belady's offline MIN)
// replayed over every trace it is given (both traces of tests/data by
// default) at a range of hot-tier capacities, side by side in one run: per
// trace a table (or --json) of token hit ratios, prefill saved and replay
// speed, and with --svg FILE the hit-ratio curves drawn as SVG plots; then
// each policy's worst ratio to lru over all traces and capacities, since a
// policy becomes a default only if it wins on every trace (a win on one
// trace can be a property of its generator). A policy named with "+hint"
// (e.g. chain+hint) replays with reuse hints: requests whose answer is longer
// than --hint-unlikely-after tokens put their blocks as unlikely to be reused
// (docs/eviction.md, "Reuse hints").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "prefixkv/advanced/hot_tier.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/replay/policy_replay.h"

namespace prefixkv::cli {
namespace {

using replay::ReplayConfig;
using replay::ReplayReport;

constexpr std::string_view kHintSuffix = "+hint";
// The traces replayed when no --trace is given (paths from the source root).
constexpr const char* kMooncakeTrace = "tests/data/mooncake_synthetic_trace.jsonl";
constexpr const char* kAgentTrace = "tests/data/agent_synthetic_trace.jsonl";

// "chain+hint" -> "chain" and true; "chain" -> "chain" and false.
std::pair<std::string, bool> SplitHint(const std::string& policy) {
  if (policy.size() > kHintSuffix.size() && policy.ends_with(kHintSuffix))
    return {policy.substr(0, policy.size() - kHintSuffix.size()), true};
  return {policy, false};
}

struct Curve {
  std::string policy;
  std::vector<ReplayReport> points;  // one per capacity
  double hit_ns = 0;                 // Pin + release of a resident block
};

// The hit path as `bench hot` measures it (Pin + release of one of 4096
// resident 16 KiB blocks, shuffled keys, median of `repeats`), under `kind`.
// Every block has been hit once before the measurement, so the chain policy
// pays its window on every hit.
double HitNanos(EvictionPolicyKind kind, int repeats) {
  constexpr uint64_t kBlocks = 4096, kLookups = 200000;
  constexpr size_t kPayload = 16 << 10;
  auto tier = HotTier::Create(
                  {.capacity_bytes = kBlocks * HotEntryCharge(kPayload), .policy = kind})
                  .value();
  const SharedBytes payload = SharedBytes::Allocate(kPayload, nullptr);
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    BlockMeta m;
    m.key = BlockKey{0xBE7C, i};
    (void)tier->Put(m, payload, false);
    keys.push_back(m.key);
  }
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(3));
  for (const BlockKey& k : keys) (void)tier->Get(k);
  const double s = MedianSeconds(repeats, [&] {
    for (uint64_t i = 0; i < kLookups; ++i) {
      std::optional<PinnedBlock> pin = tier->Pin(keys[i % kBlocks]);
      DoNotOptimize(pin->payload().data());
    }
  });
  return s * 1e9 / kLookups;
}

// Decimal sizes: "3M" is 3,000,000 tokens (trace capacities are quoted so).
std::optional<uint64_t> ParseDecimal(std::string_view text) {
  uint64_t mult = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'k')) mult = 1000;
  if (!text.empty() && text.back() == 'M') mult = 1000 * 1000;
  if (!text.empty() && text.back() == 'G') mult = 1000 * 1000 * 1000;
  if (mult != 1) text.remove_suffix(1);
  if (text.empty() || text.size() > 12) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  // Twelve digits times G pass 2^64: "999999999999G" wrapped into another
  // capacity, replayed and printed as the one asked for.
  if (v > UINT64_MAX / mult) return std::nullopt;
  return v * mult;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string Tokens(uint64_t t) {
  char buf[32];
  if (t % 1'000'000 == 0)
    std::snprintf(buf, sizeof buf, "%lluM", (unsigned long long)(t / 1'000'000));
  else
    std::snprintf(buf, sizeof buf, "%llu", (unsigned long long)t);
  return buf;
}

// The curves as an SVG line plot: capacity (log scale) against token hit
// ratio, one coloured line per policy, the unlimited ratio as a dashed line.
std::string Svg(const std::vector<uint64_t>& caps, const std::vector<Curve>& curves,
                double unlimited, const std::string& title) {
  constexpr double kW = 720, kH = 440, kL = 70, kR = 150, kT = 40, kB = 60;
  const double lo = std::log10(double(caps.front())),
               hi = std::log10(double(caps.back()));
  auto x = [&](uint64_t c) {
    const double f = hi > lo ? (std::log10(double(c)) - lo) / (hi - lo) : 0.5;
    return kL + f * (kW - kL - kR);
  };
  auto y = [&](double ratio) { return kT + (1 - ratio) * (kH - kT - kB); };
  static const char* kColours[] = {"#d62728", "#ff7f0e", "#2ca02c",
                                   "#1f77b4", "#9467bd", "#8c564b"};
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kL << "\" y=\"24\" font-size=\"14\">" << title << "</text>\n";
  for (int i = 0; i <= 10; i += 2) {  // y grid every 0.2
    const double r = i / 10.0;
    s << "<line x1=\"" << kL << "\" x2=\"" << kW - kR << "\" y1=\"" << y(r) << "\" y2=\""
      << y(r) << "\" stroke=\"#ddd\"/>\n<text x=\"" << kL - 8 << "\" y=\"" << y(r) + 4
      << "\" text-anchor=\"end\">" << r << "</text>\n";
  }
  for (uint64_t c : caps) {
    s << "<line x1=\"" << x(c) << "\" x2=\"" << x(c) << "\" y1=\"" << kT << "\" y2=\""
      << kH - kB << "\" stroke=\"#eee\"/>\n<text x=\"" << x(c) << "\" y=\""
      << kH - kB + 16 << "\" text-anchor=\"middle\">" << Tokens(c) << "</text>\n";
  }
  s << "<text x=\"" << (kL + kW - kR) / 2 << "\" y=\"" << kH - 18
    << "\" text-anchor=\"middle\">hot tier capacity (tokens, log scale)</text>\n"
    << "<text transform=\"translate(18," << (kT + kH - kB) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">token hit ratio</text>\n"
    << "<rect x=\"" << kL << "\" y=\"" << kT << "\" width=\"" << kW - kL - kR
    << "\" height=\"" << kH - kT - kB << "\" fill=\"none\" stroke=\"black\"/>\n";
  if (unlimited > 0) {
    s << "<line x1=\"" << kL << "\" x2=\"" << kW - kR << "\" y1=\"" << y(unlimited)
      << "\" y2=\"" << y(unlimited) << "\" stroke=\"gray\" stroke-dasharray=\"6,4\"/>\n";
  }
  for (size_t p = 0; p < curves.size(); ++p) {
    const char* colour = kColours[p % 6];
    s << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << colour
      << "\" points=\"";
    for (size_t i = 0; i < caps.size(); ++i)
      s << x(caps[i]) << "," << y(curves[p].points[i].token_hit_ratio()) << " ";
    s << "\"/>\n";
    for (size_t i = 0; i < caps.size(); ++i)
      s << "<circle r=\"3\" fill=\"" << colour << "\" cx=\"" << x(caps[i]) << "\" cy=\""
        << y(curves[p].points[i].token_hit_ratio()) << "\"/>\n";
    const double ly = kT + 16 + 20.0 * double(p);
    s << "<line x1=\"" << kW - kR + 12 << "\" x2=\"" << kW - kR + 36 << "\" y1=\"" << ly
      << "\" y2=\"" << ly << "\" stroke=\"" << colour
      << "\" stroke-width=\"2\"/>\n<text x=\"" << kW - kR + 42 << "\" y=\"" << ly + 4
      << "\">" << curves[p].policy << "</text>\n";
  }
  if (unlimited > 0) {
    const double ly = kT + 16 + 20.0 * double(curves.size());
    s << "<line x1=\"" << kW - kR + 12 << "\" x2=\"" << kW - kR + 36 << "\" y1=\"" << ly
      << "\" y2=\"" << ly << "\" stroke=\"gray\" stroke-dasharray=\"6,4\"/>\n<text x=\""
      << kW - kR + 42 << "\" y=\"" << ly + 4 << "\">unlimited</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

// Replay blocks per second, median over the capacities.
double MedianSpeed(const Curve& c) {
  std::vector<double> v;
  for (const ReplayReport& r : c.points) v.push_back(r.blocks_per_second());
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void PrintTable(const std::vector<uint64_t>& caps, const std::vector<Curve>& curves,
                double unlimited) {
  std::printf("token hit ratio (unlimited capacity: %.3f)\n%-10s", unlimited, "tokens");
  for (const Curve& c : curves) std::printf(" %10s", c.policy.c_str());
  std::printf("\n");
  for (size_t i = 0; i < caps.size(); ++i) {
    std::printf("%-10s", Tokens(caps[i]).c_str());
    for (const Curve& c : curves) std::printf(" %10.3f", c.points[i].token_hit_ratio());
    std::printf("\n");
  }
  std::printf("\nprefill cost saved (attention-weighted share)\n%-10s", "tokens");
  for (const Curve& c : curves) std::printf(" %10s", c.policy.c_str());
  std::printf("\n");
  for (size_t i = 0; i < caps.size(); ++i) {
    std::printf("%-10s", Tokens(caps[i]).c_str());
    for (const Curve& c : curves)
      std::printf(" %10.3f", c.points[i].prefill_cost_saved_ratio());
    std::printf("\n");
  }
  std::printf("\n%-10s %14s %14s\n", "policy", "replay blk/s", "hit ns/block");
  for (const Curve& c : curves) {
    std::printf("%-10s %14.0f %14.1f\n", c.policy.c_str(), MedianSpeed(c), c.hit_ns);
  }
}

// One trace's results.
struct TraceResult {
  std::string trace;
  std::vector<Curve> curves;
  double unlimited = 0;  // token hit ratio with unlimited capacity
};

void WriteTraceJson(JsonWriter& j, const std::vector<uint64_t>& caps,
                    const TraceResult& t) {
  j.BeginObject().Field("trace", t.trace).Field("unlimited_token_hit_ratio", t.unlimited);
  j.Key("capacities_tokens").BeginArray();
  for (uint64_t c : caps) j.Uint(c);
  j.EndArray().Key("policies").BeginObject();
  for (const Curve& c : t.curves) {
    j.Key(c.policy).BeginObject();
    j.Field("replay_blocks_per_second", MedianSpeed(c));
    if (c.hit_ns > 0) j.Field("hit_ns_per_block", c.hit_ns);
    j.Key("points").BeginArray();
    for (size_t i = 0; i < caps.size(); ++i) {
      const ReplayReport& r = c.points[i];
      j.BeginObject()
          .Field("capacity_tokens", caps[i])
          .Field("token_hit_ratio", r.token_hit_ratio())
          .Field("block_hit_ratio", r.block_hit_ratio())
          .Field("prefill_tokens_saved", r.prefill_tokens_saved())
          .Field("prefill_cost_saved_ratio", r.prefill_cost_saved_ratio())
          .Field("blocks_per_second", r.blocks_per_second())
          .EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndObject().EndObject();
}

// A policy against lru over every trace and capacity: the worst ratio of its
// token hit ratio to lru's, and where. A default may only change to a policy
// whose worst ratio is above 1 (it wins on every trace given).
struct Verdict {
  std::string policy;
  double worst_ratio = 0;
  std::string worst_trace;
  uint64_t worst_capacity = 0;
  bool wins_everywhere() const { return worst_ratio > 1.0; }
};

std::vector<Verdict> VersusLru(const std::vector<uint64_t>& caps,
                               const std::vector<TraceResult>& traces) {
  std::vector<Verdict> out;
  if (traces.empty()) return out;
  for (size_t p = 0; p < traces[0].curves.size(); ++p) {
    const std::string& policy = traces[0].curves[p].policy;
    if (policy == "lru" || policy == "min") continue;
    Verdict v{policy, 1e300, "", 0};
    for (const TraceResult& t : traces) {
      auto lru = std::find_if(t.curves.begin(), t.curves.end(),
                              [](const Curve& c) { return c.policy == "lru"; });
      if (lru == t.curves.end()) return {};
      for (size_t i = 0; i < caps.size(); ++i) {
        const double base = lru->points[i].token_hit_ratio();
        const double ratio =
            base > 0 ? t.curves[p].points[i].token_hit_ratio() / base : 1.0;
        if (ratio < v.worst_ratio) v = {policy, ratio, t.trace, caps[i]};
      }
    }
    out.push_back(v);
  }
  return out;
}

void PrintVerdicts(const std::vector<Verdict>& verdicts, size_t traces) {
  if (verdicts.empty()) return;
  std::printf("\nagainst lru on all %zu trace(s) (worst token hit ratio / lru's):\n",
              traces);
  for (const Verdict& v : verdicts) {
    std::printf("%-12s %.3fx at %s tokens on %s: %s\n", v.policy.c_str(), v.worst_ratio,
                Tokens(v.worst_capacity).c_str(), v.worst_trace.c_str(),
                v.wins_everywhere() ? "wins on every trace"
                                    : "does not win on every trace: not a default");
  }
}

void PrintJson(const std::vector<uint64_t>& caps, const std::vector<TraceResult>& traces,
               const std::vector<Verdict>& verdicts) {
  JsonWriter j;
  j.BeginObject().Key("traces").BeginArray();
  for (const TraceResult& t : traces) WriteTraceJson(j, caps, t);
  j.EndArray().Key("versus_lru").BeginObject();
  for (const Verdict& v : verdicts) {
    j.Key(v.policy)
        .BeginObject()
        .Field("worst_ratio", v.worst_ratio)
        .Field("worst_trace", v.worst_trace)
        .Field("worst_capacity_tokens", v.worst_capacity)
        .Field("wins_on_every_trace", v.wins_everywhere())
        .EndObject();
  }
  j.EndObject().EndObject();
  std::printf("%s\n", j.str().c_str());
}

// --svg FILE for the n-th trace (from 0): FILE itself for the first, then
// FILE with "-2", "-3"... before its extension.
std::string SvgPath(const std::string& file, size_t n) {
  if (n == 0) return file;
  const size_t dot = file.rfind('.');
  const size_t slash = file.rfind('/');
  const std::string suffix = "-" + std::to_string(n + 1);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return file + suffix;
  return file.substr(0, dot) + suffix + file.substr(dot);
}

int RunPolicyBench(const std::vector<std::string>& args) {
  Flags flags("prefixkv bench policy [flags]",
              {{"trace",
                "Mooncake-format trace to replay; repeat the flag to compare policies "
                "on several traces (each gets its table; --svg FILE writes FILE, "
                "FILE-2, ...)",
                false, std::string(kMooncakeTrace) + " and " + kAgentTrace},
               {"capacities", "hot tier sizes in tokens, decimal (3M = 3,000,000)", false,
                "1M,2M,3M,5M,10M,20M,50M"},
               {"policies",
                "comma-separated: lru, leaf-lru, chain, min; lru, leaf-lru or chain "
                "with +hint replays with reuse hints",
                false, "lru,leaf-lru,chain,chain+hint,min"},
               {"hint-unlikely-after",
                "for +hint policies: a request whose answer is longer than this many "
                "tokens puts its blocks as unlikely to be reused",
                false, "100"},
               {"trace-block-tokens", "tokens per hash id", false, "512"},
               {"repeats", "hit-path measurements per policy (median taken)", false, "5"},
               {"svg", "also draw the hit-ratio curves into this SVG file", false, ""},
               {"json", "print one JSON object", true, ""}});
  if (std::optional<int> done = ParseSuiteFlags(flags, args)) return *done;
  if (std::string e = EmptyOutputFile(flags, "svg"); !e.empty())
    return UsageError(flags, e);
  std::vector<uint64_t> caps;
  for (const std::string& c :
       Split(flags.GetString("capacities", "1M,2M,3M,5M,10M,20M,50M"))) {
    std::optional<uint64_t> v = ParseDecimal(c);
    if (!v || *v == 0) return UsageError(flags, "bad capacity '" + c + "'");
    caps.push_back(*v);
  }
  std::sort(caps.begin(), caps.end());
  if (caps.empty()) return UsageError(flags, "no capacities");
  std::optional<uint64_t> block = ParseSize(flags.GetString("trace-block-tokens", "512"));
  if (!block || *block == 0 || *block > (1u << 22))
    return UsageError(flags, NotInRange(flags, "trace-block-tokens", "1..4194304"));
  // A capacity below one block is a hot tier of none ('both tiers are off').
  if (caps.front() < *block)
    return UsageError(flags, "capacity " + std::to_string(caps.front()) +
                                 " is below one block (--trace-block-tokens " +
                                 std::to_string(*block) + ")");
  const std::vector<std::string> policies =
      Split(flags.GetString("policies", "lru,leaf-lru,chain,chain+hint,min"));
  const std::vector<std::string> known = replay::ReplayPolicyNames();
  for (const std::string& p : policies) {
    const auto [name, hinted] = SplitHint(p);
    if (std::find(known.begin(), known.end(), name) == known.end() ||
        (hinted && name == "min"))
      return UsageError(flags, "unknown policy '" + p +
                                   "' (lru, leaf-lru, chain, min; the first three "
                                   "also with +hint)");
  }
  std::optional<uint64_t> hint_after =
      ParseSize(flags.GetString("hint-unlikely-after", "100"));
  if (!hint_after)
    return UsageError(flags,
                      NotInRange(flags, "hint-unlikely-after", "a size (e.g. 100, 4K)"));
  std::vector<std::string> paths = flags.GetAll("trace");
  if (paths.empty()) paths = {kMooncakeTrace, kAgentTrace};
  std::optional<uint64_t> reps = ParseCount(flags, "repeats", "5", 1000);
  if (!reps) return UsageError(flags, NotInRange(flags, "repeats", "1..1000"));
  const int repeats = static_cast<int>(*reps);
  ReplayConfig base;
  base.block_tokens = static_cast<uint32_t>(*block);
  base.ssd.tokens = 0;
  // The hit path does not depend on the trace: measured once per policy.
  std::vector<double> hit_ns(policies.size(), 0);
  for (size_t p = 0; p < policies.size(); ++p) {
    StatusOr<EvictionPolicyKind> kind = ParseEvictionPolicy(SplitHint(policies[p]).first);
    if (kind.ok()) hit_ns[p] = HitNanos(*kind, repeats);  // min has no hit path
  }
  std::vector<TraceResult> results;
  for (const std::string& path : paths) {
    StatusOr<std::vector<replay::TraceRequest>> trace = replay::ReadTrace(path);
    if (!trace.ok()) return OpenError(flags, "bench policy", trace.status());
    TraceResult result{path, {}, 0};
    for (size_t p = 0; p < policies.size(); ++p) {
      Curve curve{policies[p], {}, hit_ns[p]};
      const auto [name, hinted] = SplitHint(policies[p]);
      for (uint64_t cap : caps) {
        ReplayConfig config = base;
        config.hot.tokens = cap;
        if (hinted) config.unlikely_reuse_after_output_tokens = hint_after;
        StatusOr<ReplayReport> r = replay::ReplayWithPolicy(*trace, config, name);
        if (!r.ok()) return UsageError(flags, r.status().ToString());
        curve.points.push_back(*r);
      }
      result.curves.push_back(std::move(curve));
    }
    StatusOr<ReplayReport> unlimited = replay::ReplayWithPolicy(
        *trace, ReplayConfig{.block_tokens = base.block_tokens}, "lru");
    if (!unlimited.ok()) return UsageError(flags, unlimited.status().ToString());
    result.unlimited = unlimited->token_hit_ratio();
    results.push_back(std::move(result));
  }
  const std::vector<Verdict> verdicts = VersusLru(caps, results);
  if (flags.GetBool("json")) {
    PrintJson(caps, results, verdicts);
  } else {
    for (const TraceResult& t : results) {
      std::printf("trace %s\n", t.trace.c_str());
      PrintTable(caps, t.curves, t.unlimited);
      std::printf("\n");
    }
    PrintVerdicts(verdicts, results.size());
  }
  const std::string svg = flags.GetString("svg", "");
  for (size_t i = 0; !svg.empty() && i < results.size(); ++i) {
    const TraceResult& t = results[i];
    std::ofstream out(SvgPath(svg, i));
    out << Svg(caps, t.curves, t.unlimited, "token hit ratio by policy: " + t.trace);
    if (!out) return Failure(flags, "bench policy", "cannot write " + SvgPath(svg, i));
  }
  return kExitOk;
}

}  // namespace

PKV_REGISTER_BENCH("policy", "eviction policies' hit ratios over capacities on a trace",
                   RunPolicyBench);

}  // namespace prefixkv::cli
