// `prefixkv bench route`: the prefix router against round-robin and random
// routing and against one node with N times the capacity, on several traces
// and node counts (tools/replay/routed_replay.h; docs/router.md;
// figures in docs/benchmarks.md). Prints a table per trace, the issue's
// goals at 4 nodes, and with --svg FILE one grouped bar chart per trace side
// by side.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/replay/routed_replay.h"

namespace prefixkv::cli {
namespace {

using replay::RoutedReplayConfig;
using replay::RoutedReplayReport;
using replay::RouterKind;

constexpr RouterKind kKinds[] = {RouterKind::kPrefix, RouterKind::kRoundRobin,
                                 RouterKind::kRandom};

struct Cell {
  size_t nodes = 0;
  RoutedReplayReport by[3];  // kKinds order; by[0].one_node is the big node
  double one() const { return by[0].one_node.token_hit_ratio(); }
  double hit(size_t k) const { return by[k].routed.token_hit_ratio(); }
};

struct TraceCells {
  std::string trace;
  std::vector<Cell> cells;
};

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, ',');)
    if (!p.empty()) out.push_back(p);
  return out;
}

// 3M = 3,000,000 (the figures are decimal).
std::optional<uint64_t> Decimal(std::string text) {
  uint64_t mult = 1;
  if (!text.empty() && (text.back() == 'M' || text.back() == 'K')) {
    mult = text.back() == 'M' ? 1'000'000 : 1'000;
    text.pop_back();
  }
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      text.size() > 12)
    return std::nullopt;
  return std::stoull(text) * mult;
}

void PrintTable(const TraceCells& t) {
  std::printf("trace %s\n", t.trace.c_str());
  std::printf("%5s %8s %8s %8s %8s %9s %9s %13s %13s\n", "nodes", "prefix", "rr",
              "random", "one", "prefix/rr", "prefix/1", "max/mean pfx", "max/mean rr");
  for (const Cell& c : t.cells) {
    std::printf("%5zu %8.3f %8.3f %8.3f %8.3f %9.2f %9.3f %13.3f %13.3f\n", c.nodes,
                c.hit(0), c.hit(1), c.hit(2), c.one(),
                c.hit(1) > 0 ? c.hit(0) / c.hit(1) : 0,
                c.one() > 0 ? c.hit(0) / c.one() : 0, c.by[0].max_over_mean_tokens(),
                c.by[1].max_over_mean_tokens());
  }
}

// The goals at 4 nodes: prefix >= 2x round-robin, >= 0.95x one node,
// busiest node <= 1.35x the mean.
bool MeetsGoals(const Cell& c) {
  return c.hit(0) >= 2 * c.hit(1) && c.hit(0) >= 0.95 * c.one() &&
         c.by[0].max_over_mean_tokens() <= 1.35;
}

void PrintJson(const std::vector<TraceCells>& traces, const RoutedReplayConfig& base) {
  JsonWriter j;
  j.BeginObject()
      .Field("hot_capacity_tokens_per_node", base.node.hot.tokens.value_or(0))
      .Field("load_bound", base.router_options.load_bound)
      .Field("event_delay_requests", base.event_delay_requests)
      .Field("in_flight_per_node", base.in_flight_per_node);
  j.Key("traces").BeginArray();
  for (const TraceCells& t : traces) {
    j.BeginObject().Field("trace", t.trace).Key("nodes").BeginArray();
    for (const Cell& c : t.cells) {
      j.BeginObject().Field("nodes", uint64_t{c.nodes}).Field("one_node", c.one());
      for (size_t k = 0; k < 3; ++k) {
        j.Key(replay::RouterKindName(kKinds[k]))
            .BeginObject()
            .Field("token_hit_ratio", c.hit(k))
            .Field("max_over_mean_tokens", c.by[k].max_over_mean_tokens())
            .Field("max_over_mean_requests", c.by[k].max_over_mean_requests())
            .EndObject();
      }
      if (c.nodes == 4) j.Field("meets_goals", MeetsGoals(c));
      j.EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray().EndObject();
  std::printf("%s\n", j.str().c_str());
}

// One panel per trace: for each node count, bars for round-robin, random,
// prefix and one node with N times the capacity.
std::string Svg(const std::vector<TraceCells>& traces, const std::string& title) {
  constexpr double kPanelW = 250, kH = 380, kL = 60, kT = 60, kB = 70, kGap = 20;
  const double w = kL + kPanelW * double(traces.size()) + 20;
  static const char* kColours[] = {"#bbbbbb", "#e0a060", "#1f77b4", "#2ca02c"};
  static const char* kNames[] = {"round-robin", "random", "prefix",
                                 "one node, N x capacity"};
  auto y = [&](double r) { return kT + (1 - r) * (kH - kT - kB); };
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << kH
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kL << "\" y=\"22\" font-size=\"14\">" << title << "</text>\n";
  for (int k = 0; k < 4; ++k) {
    const double lx = kL + 150.0 * k;
    s << "<rect x=\"" << lx << "\" y=\"32\" width=\"12\" height=\"12\" fill=\""
      << kColours[k] << "\"/><text x=\"" << lx + 16 << "\" y=\"43\">" << kNames[k]
      << "</text>\n";
  }
  for (int i = 0; i <= 10; i += 2) {
    const double r = i / 10.0;
    s << "<line x1=\"" << kL << "\" x2=\"" << w - 20 << "\" y1=\"" << y(r) << "\" y2=\""
      << y(r) << "\" stroke=\"#ddd\"/>\n<text x=\"" << kL - 8 << "\" y=\"" << y(r) + 4
      << "\" text-anchor=\"end\">" << r << "</text>\n";
  }
  s << "<text transform=\"translate(16," << (kT + kH - kB) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">token hit ratio</text>\n";
  for (size_t p = 0; p < traces.size(); ++p) {
    const TraceCells& t = traces[p];
    const double x0 = kL + kPanelW * double(p);
    const double group = (kPanelW - kGap) / double(std::max<size_t>(t.cells.size(), 1));
    const double bar = (group - 10) / 4;
    for (size_t g = 0; g < t.cells.size(); ++g) {
      const Cell& c = t.cells[g];
      const double values[] = {c.hit(1), c.hit(2), c.hit(0), c.one()};
      const double gx = x0 + kGap / 2 + group * double(g);
      for (int k = 0; k < 4; ++k) {
        s << "<rect x=\"" << gx + bar * k << "\" y=\"" << y(values[k]) << "\" width=\""
          << bar - 1 << "\" height=\"" << y(0) - y(values[k]) << "\" fill=\""
          << kColours[k] << "\"/>\n";
      }
      s << "<text x=\"" << gx + 2 * bar << "\" y=\"" << y(0) + 16
        << "\" text-anchor=\"middle\">N=" << c.nodes << "</text>\n";
    }
    const std::string name = t.trace.substr(t.trace.rfind('/') + 1);
    s << "<text x=\"" << x0 + kPanelW / 2 << "\" y=\"" << y(0) + 36
      << "\" text-anchor=\"middle\">" << name << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

int RunRouteBench(const std::vector<std::string>& args) {
  Flags flags("prefixkv bench route [flags]",
              {{"trace", "Mooncake-format trace; repeat the flag for several", false,
                "the three traces in tests/data"},
               {"nodes", "node counts, comma-separated", false, "2,4,8"},
               {"hot-capacity-tokens", "each node's hot tier, decimal (3M = 3,000,000)",
                false, "3M"},
               {"load-bound", "the prefix router's load bound (0: none)", false, "1.25"},
               {"event-delay-requests", "events reach the router this many requests late",
                false, "0"},
               {"in-flight-per-node", "requests in flight per node", false, "32"},
               {"trace-block-tokens", "tokens per hash id", false, "512"},
               {"svg", "also draw the hit ratios into this SVG file", false, ""},
               {"json", "print one JSON object", true, ""}});
  if (std::optional<int> done = ParseSuiteFlags(flags, args)) return *done;
  if (std::string e = EmptyOutputFile(flags, "svg"); !e.empty())
    return UsageError(flags, e);
  RoutedReplayConfig base;
  std::string error;
  base.router_options.load_bound = GetReal(flags, "load-bound", 1.25, 0, 1e6, &error);
  std::optional<uint64_t> delay = flags.Has("event-delay-requests")
                                      ? flags.GetCount("event-delay-requests", &error)
                                      : std::optional<uint64_t>(0);
  std::optional<uint64_t> in_flight =
      ParseCount(flags, "in-flight-per-node", "32", 1'000'000);
  std::optional<uint64_t> block = ParseSize(flags.GetString("trace-block-tokens", "512"));
  std::optional<uint64_t> hot = Decimal(flags.GetString("hot-capacity-tokens", "3M"));
  if (!error.empty()) return UsageError(flags, error);
  if (base.router_options.load_bound != 0 && base.router_options.load_bound < 1)
    return UsageError(flags, "--load-bound must be >= 1 (0: no bound)");
  // Each named with its value (one message listed all four flags).
  if (!in_flight || *in_flight == 0)
    return UsageError(flags, NotInRange(flags, "in-flight-per-node", "1..1000000"));
  if (!block || *block == 0 || *block > (1u << 22))
    return UsageError(flags, NotInRange(flags, "trace-block-tokens", "1..4194304"));
  if (!hot || *hot == 0) {
    return UsageError(
        flags, NotInRange(flags, "hot-capacity-tokens", "a decimal size > 0 (e.g. 3M)"));
  }
  // A node of no block is a hot tier of none: it failed the first replay
  // ('both tiers are off', exit 1) after the usage checks had passed.
  if (*hot < *block)
    return UsageError(flags, "--hot-capacity-tokens " + std::to_string(*hot) +
                                 " is below one block (--trace-block-tokens " +
                                 std::to_string(*block) + ")");
  base.event_delay_requests = *delay;
  base.in_flight_per_node = *in_flight;
  base.node.block_tokens = static_cast<uint32_t>(*block);
  base.node.hot.tokens = *hot;
  base.node.ssd.tokens = 0;
  base.node.advisor_max_keys = 0;
  std::vector<size_t> node_counts;
  for (const std::string& n : SplitCommas(flags.GetString("nodes", "2,4,8"))) {
    std::optional<uint64_t> v = Decimal(n);
    if (!v || *v < 1 || *v > kMaxRouterNodes)
      return UsageError(flags, "bad node count '" + n + "'");
    node_counts.push_back(*v);
  }
  std::vector<std::string> paths = flags.GetAll("trace");
  if (paths.empty())
    paths = {"tests/data/mooncake_synthetic_trace.jsonl",
             "tests/data/agent_synthetic_trace.jsonl",
             "tests/data/chat_synthetic_trace.jsonl"};
  std::vector<TraceCells> results;
  for (const std::string& path : paths) {
    StatusOr<std::vector<replay::TraceRequest>> trace = replay::ReadTrace(path);
    if (!trace.ok()) return OpenError(flags, "bench route", trace.status());
    TraceCells t{path, {}};
    for (size_t n : node_counts) {
      Cell cell;
      cell.nodes = n;
      for (size_t k = 0; k < 3; ++k) {
        RoutedReplayConfig c = base;
        c.nodes = n;
        c.router = kKinds[k];
        c.compare_one_node = k == 0;
        StatusOr<RoutedReplayReport> r = replay::RunRoutedReplay(*trace, c);
        if (!r.ok()) return Failure(flags, "bench route", r.status().ToString());
        cell.by[k] = std::move(r).value();
      }
      t.cells.push_back(std::move(cell));
    }
    results.push_back(std::move(t));
  }
  if (flags.GetBool("json")) {
    PrintJson(results, base);
  } else {
    for (const TraceCells& t : results) {
      PrintTable(t);
      for (const Cell& c : t.cells) {
        if (c.nodes != 4) continue;
        // 2x round-robin is out of reach where one big node itself is not.
        std::printf(
            "goals at 4 nodes: prefix/rr %.2f (>= 2; one node/rr %.2f), prefix/one %.3f "
            "(>= 0.95), max/mean %.3f (<= 1.35): %s\n",
            c.hit(1) > 0 ? c.hit(0) / c.hit(1) : 0, c.hit(1) > 0 ? c.one() / c.hit(1) : 0,
            c.one() > 0 ? c.hit(0) / c.one() : 0, c.by[0].max_over_mean_tokens(),
            MeetsGoals(c) ? "met" : "NOT met");
      }

      std::printf("\n");
    }
  }
  if (const std::string svg = flags.GetString("svg", ""); !svg.empty()) {
    std::ofstream out(svg);
    out << Svg(results, "token hit ratio by router, " +
                            flags.GetString("hot-capacity-tokens", "3M") +
                            " hot tokens per node");
    if (!out) return Failure(flags, "bench route", "cannot write " + svg);
  }
  return kExitOk;
}

}  // namespace

PKV_REGISTER_BENCH(
    "route",
    "prefix routing vs round-robin vs one big node over N nodes fed by KV events",
    RunRouteBench);

}  // namespace prefixkv::cli
