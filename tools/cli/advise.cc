// `prefixkv advise TRACE.jsonl`: the capacity advisor (docs/eviction.md, "The
// capacity advisor") over a trace: the estimated token hit ratio at 1/4x to
// 8x the given hot and SSD sizes, and with --check the full replay at each.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/replay/advise_replay.h"

namespace prefixkv::cli {
namespace {

Flags AdviseFlags() {
  return Flags(
      "prefixkv advise TRACE.jsonl --hot-capacity-tokens N [flags]",
      {{"trace-block-tokens", "tokens per hash id", false, "512"},
       {"hot-capacity-tokens", "the hot tier's current size in tokens", false, ""},
       {"ssd-capacity-tokens",
        "the SSD tier's current size in tokens, at least one block (0: no SSD points)",
        false, "none"},
       {"max-keys", "sampled blocks the advisor remembers at most", false, "32768"},
       {"max-rate", "the largest share of blocks sampled, 1e-06..1", false, "0.125"},
       {"svg",
        "also draw the estimated (and with --check the replayed) curves to this file",
        false, ""},
       {"check", "also replay the trace at every size and print the difference", true,
        ""},
       {"data-dir", "where --check makes its SSD tiers' scratch directories", false,
        "./prefixkv-data"},
       {"json", "print one JSON object", true, ""}},
      /*max_positional=*/1);
}

void Print(const Flags& flags, const AdvisorReport& r,
           const std::vector<double>& replayed) {
  if (flags.GetBool("json")) {
    JsonWriter j;
    j.BeginObject()
        .Field("sampling_rate", r.sampling_rate)
        .Field("sampled_keys", r.sampled_keys)
        .Field("memory_bytes", r.memory_bytes)
        .Field("references", r.references);
    j.Key("points").BeginArray();
    for (size_t i = 0; i < r.points.size(); ++i) {
      const AdvisorPoint& p = r.points[i];
      j.BeginObject()
          .Field("tier", p.tier)
          .Field("factor", p.factor)
          .Field("capacity_tokens", p.capacity_bytes)
          .Field("hit_ratio", p.hit_ratio);
      if (i < replayed.size()) j.Field("replayed_hit_ratio", replayed[i]);
      j.EndObject();
    }
    j.EndArray().EndObject();
    std::printf("%s\n", j.str().c_str());
    return;
  }
  std::printf("sampling rate %.4f, %llu sampled blocks, %llu bytes, %llu references\n",
              r.sampling_rate, static_cast<unsigned long long>(r.sampled_keys),
              static_cast<unsigned long long>(r.memory_bytes),
              static_cast<unsigned long long>(r.references));
  std::printf("%-4s %6s %14s %10s%s\n", "tier", "factor", "tokens", "estimated",
              replayed.empty() ? "" : "   replayed  difference");
  double worst = 0;
  for (size_t i = 0; i < r.points.size(); ++i) {
    const AdvisorPoint& p = r.points[i];
    std::printf("%-4s %6.2f %14llu %10.4f", p.tier.c_str(), p.factor,
                static_cast<unsigned long long>(p.capacity_bytes), p.hit_ratio);
    if (i < replayed.size()) {
      std::printf(" %10.4f %+11.4f", replayed[i], p.hit_ratio - replayed[i]);
      worst = std::max(worst, std::fabs(p.hit_ratio - replayed[i]));
    }
    std::printf("\n");
  }
  if (!replayed.empty()) std::printf("largest difference %.4f\n", worst);
}

// `text` as XML character data: the title names the trace file, and a name
// with '&' or '<' made the SVG malformed (a viewer shows an XML error).
std::string XmlText(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

// The estimated (solid) and replayed (dashed) curves of each tier as SVG:
// the size as a multiple of the tier's capacity (log scale) against the
// token hit ratio.
std::string CurvesSvg(const AdvisorReport& r, const std::vector<double>& replayed,
                      const std::string& title) {
  constexpr double kW = 640, kH = 400, kPad = 60;
  auto x = [&](double f) { return kPad + (std::log2(f) + 2) / 5 * (kW - 2 * kPad); };
  auto y = [&](double h) { return kH - kPad - h * (kH - 2 * kPad); };
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" "
    << "height=\"100%\" fill=\"white\"/>\n<text x=\"" << kPad << "\" y=\"24\">"
    << XmlText(title) << "</text>\n";
  for (int i = 0; i <= 5; ++i) {
    const double h = i / 5.0, f = std::exp2(i - 2);
    char factor[16];
    std::snprintf(factor, sizeof factor, "%gx", f);
    s << "<text x=\"" << kPad - 6 << "\" y=\"" << y(h) + 4 << "\" text-anchor=\"end\">"
      << h << "</text>\n<text x=\"" << x(f) << "\" y=\"" << kH - kPad + 16
      << "\" text-anchor=\"middle\">" << factor << "</text>\n";
  }
  s << "<rect x=\"" << kPad << "\" y=\"" << kPad << "\" width=\"" << kW - 2 * kPad
    << "\" height=\"" << kH - 2 * kPad << "\" fill=\"none\" stroke=\"black\"/>\n"
    << "<text x=\"" << kW / 2 << "\" y=\"" << kH - 20
    << "\" text-anchor=\"middle\">size / current capacity (log scale); solid: "
    << "estimated, dashed: replayed</text>\n";
  int legend = 0;
  for (const char* tier : {"hot", "ssd"}) {
    const char* colour = std::string(tier) == "hot" ? "#d62728" : "#1f77b4";
    for (int kind = 0; kind < (replayed.empty() ? 1 : 2); ++kind) {
      s << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << colour << "\""
        << (kind == 1 ? " stroke-dasharray=\"6,4\"" : "") << " points=\"";
      for (size_t i = 0; i < r.points.size(); ++i) {
        if (r.points[i].tier != tier) continue;
        const double h = kind == 0 ? r.points[i].hit_ratio : replayed[i];
        s << x(r.points[i].factor) << "," << y(h) << " ";
      }
      s << "\"/>\n";
    }
    s << "<text x=\"" << kW - kPad - 80 << "\" y=\"" << kH - kPad - 12 - 16 * legend++
      << "\" fill=\"" << colour << "\">" << tier << " tier</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

int RunAdvise(const std::vector<std::string>& args) {
  Flags flags = AdviseFlags();
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return 0;
  }
  replay::AdviseConfig config;
  std::optional<uint64_t> block = flags.GetSize("trace-block-tokens", &error);
  std::optional<uint64_t> hot = flags.GetSize("hot-capacity-tokens", &error);
  std::optional<uint64_t> ssd = flags.GetSize("ssd-capacity-tokens", &error);
  std::optional<uint64_t> keys = flags.GetCount("max-keys", &error);
  if (!error.empty()) return UsageError(flags, error);
  if (flags.positional().size() != 1)
    return UsageError(flags, "expected one TRACE.jsonl");
  if (block && (*block == 0 || *block > (1u << 22)))
    return UsageError(flags, NotInRange(flags, "trace-block-tokens", "1..4194304"));
  if (block) config.block_tokens = static_cast<uint32_t>(*block);
  if (!hot) return UsageError(flags, "--hot-capacity-tokens must be at least one block");
  const std::string one_block =
      "at least one block (" + std::to_string(config.block_tokens) + " tokens)";
  if (*hot < config.block_tokens)
    return UsageError(flags, NotInRange(flags, "hot-capacity-tokens", one_block));
  // An SSD tier of no whole block has no point to estimate: it was dropped
  // without a word (the hot points alone, exit 0).
  if (ssd && *ssd != 0 && *ssd < config.block_tokens)
    return UsageError(flags,
                      NotInRange(flags, "ssd-capacity-tokens", "0 or " + one_block));
  if (keys && (*keys < 16 || *keys > (1u << 24)))
    return UsageError(flags, NotInRange(flags, "max-keys", "16..16777216"));
  if (std::string e = EmptyOutputFile(flags, "svg"); !e.empty())
    return UsageError(flags, e);
  config.hot_tokens = *hot;
  config.ssd_tokens = ssd.value_or(0);
  if (keys) config.advisor.max_keys = static_cast<uint32_t>(*keys);
  config.advisor.max_rate =
      GetReal(flags, "max-rate", config.advisor.max_rate, 1e-6, 1, &error);
  if (!error.empty()) return UsageError(flags, error);
  StatusOr<std::vector<replay::TraceRequest>> trace =
      replay::ReadTrace(flags.positional()[0]);
  if (!trace.ok()) return OpenError(flags, "advise", trace.status());
  const AdvisorReport report = replay::AdviseTrace(*trace, config);
  std::vector<double> replayed;
  if (flags.GetBool("check")) {
    const std::filesystem::path dir =
        std::filesystem::path(flags.GetString("data-dir", "./prefixkv-data")) /
        ("advise-" + std::to_string(::getpid()));
    StatusOr<std::vector<double>> r =
        replay::ReplayPoints(*trace, config, report, dir.string());
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (!r.ok()) return Failure(flags, "advise", r.status().ToString());
    replayed = std::move(r).value();
  }
  if (const std::string svg = flags.GetString("svg", ""); !svg.empty()) {
    std::ofstream out(svg);
    out << CurvesSvg(
        report, replayed,
        "token hit ratio: " +
            std::filesystem::path(flags.positional()[0]).filename().string());
    if (!out) return Failure(flags, "advise", "cannot write " + svg);
  }
  Print(flags, report, replayed);
  return kExitOk;
}

}  // namespace

PKV_REGISTER_COMMAND("advise",
                     "estimate the hit ratio of other hot and SSD sizes from a trace "
                     "(the capacity advisor; --check replays each size)",
                     RunAdvise);

}  // namespace prefixkv::cli
