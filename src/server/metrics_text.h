// The Prometheus text exposition format (version 0.0.4) of the engine's and
// the server's counters: what `GET /metrics` returns (metrics_http.h).
//
// Every family is declared once in MetricFamilies() (name, type, labels, help),
// which is also what docs/metrics.md lists; RenderMetrics writes the families
// that have samples, in that order, each as "# HELP", "# TYPE", then its
// samples; prefixkv_build_info first, the process_* families last. Tier-wide series carry
// a `tier` label ("hot", "ssd"); per-owner series (each registered model, "values",
// memory charges) add `owner`, the owner's name; the tier-wide value is the sum over
// owners (the SSD's may be larger: blocks of owner ids an earlier run wrote).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/engine.h"
#include "prefixkv/server.h"
#include "process_stats.h"

namespace prefixkv::server {

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter", "gauge", "histogram".
std::string_view MetricTypeName(MetricType type);

struct MetricFamilyInfo {
  std::string name;                 // counters end in _total
  MetricType type;                  //
  std::vector<std::string> labels;  // label names of every sample (histograms: and le)
  std::string help;                 // one line
};

// Every family RenderMetrics may write, in the order it writes them.
const std::vector<MetricFamilyInfo>& MetricFamilies();

// The exposition of one snapshot. Pure: no locks, no I/O. `process` (the
// process_* families) is written when given.
std::string RenderMetrics(const EngineStats& engine, const ServerStats& server,
                          const ProcessStats* process = nullptr);

// The Content-Type of RenderMetrics' text.
inline constexpr std::string_view kMetricsContentType =
    "text/plain; version=0.0.4; charset=utf-8";

}  // namespace prefixkv::server
