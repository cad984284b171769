// RenderMetrics: one table of families (kFamilies below), each with the code
// that writes its samples from a snapshot; the table's order is the output's.
#include "metrics_text.h"

#include <charconv>
#include <functional>
#include <utility>

#include "prefixkv/prefix_token_fields.h"
#include "prefixkv/remote_counter_fields.h"
#include "prefixkv/tier_counter_fields.h"
#include "prefixkv/version.h"

namespace prefixkv::server {
namespace {

// One snapshot being rendered.
struct Snapshot {
  const EngineStats& engine;
  const ServerStats& server;
  const ProcessStats* process;  // null: no process_* samples
  bool has_hot() const { return engine.hot_capacity_bytes > 0; }
};

using Labels = std::vector<std::pair<std::string_view, std::string_view>>;

// The length of the UTF-8 sequence at v[i] (shortest form, no surrogate, at
// most U+10FFFF, as Go's utf8 package reads it), or 0 when it is not one.
size_t Utf8SequenceAt(std::string_view v, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(v[i + k]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  const size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
  if (n == 0 || i + n > v.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
  }
  const unsigned char second = byte(1);
  if ((c == 0xE0 && second < 0xA0) || (c == 0xED && second > 0x9F) ||
      (c == 0xF0 && second < 0x90) || (c == 0xF4 && second > 0x8F)) {
    return 0;
  }
  return n;
}

// Label values: backslash, double quote and line feed escaped. Prometheus
// refuses the whole scrape over a label value that is not UTF-8, and a model
// name (a label) is whatever bytes PKV.REGISTER was sent: a byte outside
// UTF-8 is written as the text \xHH, so such names stay apart.
void AppendLabelValue(std::string_view v, std::string* out) {
  for (size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (const size_t n = Utf8SequenceAt(v, i); n > 1) {
      out->append(v.substr(i, n));
      i += n - 1;
    } else if (n == 0) {
      static constexpr char kHex[] = "0123456789abcdef";
      const auto b = static_cast<unsigned char>(c);
      *out += "\\\\x";
      *out += kHex[b >> 4];
      *out += kHex[b & 0xF];
    } else if (c == '\\') {
      *out += "\\\\";
    } else if (c == '"') {
      *out += "\\\"";
    } else if (c == '\n') {
      *out += "\\n";
    } else {
      *out += c;
    }
  }
}

// Collects one family's sample lines.
class Samples {
 public:
  explicit Samples(const std::string& family) : family_(family) {}

  void Add(const Labels& labels, std::string_view value, std::string_view suffix = "") {
    body_ += family_;
    body_ += suffix;
    if (!labels.empty()) {
      body_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) body_ += ',';
        body_ += labels[i].first;
        body_ += "=\"";
        AppendLabelValue(labels[i].second, &body_);
        body_ += '"';
      }
      body_ += '}';
    }
    body_ += ' ';
    body_ += value;
    body_ += '\n';
  }
  void Add(const Labels& labels, uint64_t value) { Add(labels, std::to_string(value)); }
  // The shortest decimal that reads back as `value` (no exponent).
  void AddDouble(const Labels& labels, double value) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed);
    Add(labels, std::string_view(buf, r.ec == std::errc() ? r.ptr - buf : 0));
  }

  const std::string& body() const { return body_; }

 private:
  const std::string& family_;
  std::string body_;
};

// Microseconds as decimal seconds, exactly: 2500 -> "0.0025", 3000000 -> "3".
std::string MicrosAsSeconds(uint64_t micros) {
  std::string out = std::to_string(micros / 1000000);
  std::string frac = std::to_string(micros % 1000000);
  frac.insert(0, 6 - frac.size(), '0');
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  if (!frac.empty()) out += "." + frac;
  return out;
}

void AppendHistogram(const LatencyHistogram& h, const Labels& labels, Samples& s) {
  uint64_t cumulative = 0;
  const auto& bounds = LatencyHistogram::kBucketBoundsMicros;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < bounds.size() ? MicrosAsSeconds(bounds[i]) : "+Inf";
    Labels with_le = labels;
    with_le.emplace_back("le", le);
    s.Add(with_le, std::to_string(cumulative), "_bucket");
  }
  s.Add(labels, MicrosAsSeconds(h.sum_micros), "_sum");
  s.Add(labels, std::to_string(cumulative), "_count");
}

// The TierCounters families in the order they are written: the table's
// gauges, then its counters (docs/metrics.md).
template <typename Fn>
void ForEachTierFamily(Fn fn) {
  for (bool counters : {false, true}) {
    for (const TierCounterField& f : kTierCounterFields) {
      if (f.counter == counters) fn(f);
    }
  }
}

MetricType TierFieldType(const TierCounterField& f) {
  return f.counter ? MetricType::kCounter : MetricType::kGauge;
}

struct FamilyDef {
  MetricFamilyInfo info;
  std::function<void(const Snapshot&, Samples&)> samples;
};

FamilyDef Gauge(std::string name, std::vector<std::string> labels, std::string help,
                std::function<void(const Snapshot&, Samples&)> samples) {
  return {{std::move(name), MetricType::kGauge, std::move(labels), std::move(help)},
          std::move(samples)};
}

FamilyDef Counter(std::string name, std::string help,
                  std::function<uint64_t(const ServerStats&)> value) {
  return {{std::move(name), MetricType::kCounter, {}, std::move(help)},
          [value = std::move(value)](const Snapshot& s, Samples& out) {
            out.Add({}, value(s.server));
          }};
}

// A counter of the engine's SSD tier: no sample without one.
FamilyDef SsdCounter(std::string name, std::string help,
                     std::function<uint64_t(const EngineStats&)> value) {
  return {{std::move(name), MetricType::kCounter, {}, std::move(help)},
          [value = std::move(value)](const Snapshot& s, Samples& out) {
            if (s.engine.has_ssd) out.Add({}, value(s.engine));
          }};
}

// SSD wear and admission (docs/ssd.md "Wear"; only with an SSD tier).
void AddWearFamilies(std::vector<FamilyDef>& defs) {
  auto counter = [&defs](std::string name, std::string help, auto value) {
    defs.push_back(SsdCounter(std::move(name), std::move(help), value));
  };
  auto gauge = [&defs](std::string name, std::string help, auto value) {
    defs.push_back(Gauge(std::move(name), {}, std::move(help),
                         [value](const Snapshot& s, Samples& out) {
                           if (s.engine.has_ssd) out.AddDouble({}, value(s.engine));
                         }));
  };
  counter("prefixkv_ssd_written_bytes_total",
          "Bytes written to the SSD tier's segment files (payload extents with padding "
          "and footers, compaction moves included; not the metadata database)",
          [](const EngineStats& e) { return e.ssd_bytes_written; });
  // Base units (seconds), as Prometheus wants; INFO wear says it per day.
  gauge("prefixkv_ssd_write_rate_bytes_per_second",
        "SSD segment bytes written per second over the wear window (default one hour)",
        [](const EngineStats& e) { return e.ssd_write_bytes_per_day / 86400; });
  gauge("prefixkv_ssd_endurance_bytes",
        "The drive's rated endurance in bytes written (0: not configured)",
        [](const EngineStats& e) { return double(e.ssd_endurance_bytes); });
  gauge("prefixkv_ssd_projected_lifetime_seconds",
        "Time until the rated endurance is written at the current rate (0: unknown)",
        [](const EngineStats& e) { return e.ssd_projected_lifetime_days * 86400; });
  gauge("prefixkv_ssd_write_budget_bytes_per_second",
        "SSD admission's write budget per second (0: admission 'all', every evicted "
        "block written)",
        [](const EngineStats& e) {
          return double(e.ssd_write_budget_bytes_per_day) / 86400;
        });
  counter("prefixkv_ssd_admission_written_bytes_total",
          "Payload bytes of evicted hot blocks SSD admission wrote",
          [](const EngineStats& e) { return e.ssd_admission_counters.written_bytes; });
  counter("prefixkv_ssd_admission_forced_blocks_total",
          "Evicted blocks written although the budget was spent (raw values, blocks "
          "with a child)",
          [](const EngineStats& e) { return e.ssd_admission_counters.forced_blocks; });
  counter("prefixkv_ssd_admission_skipped_blocks_total",
          "Evicted prefix blocks not written to SSD: over the write budget",
          [](const EngineStats& e) { return e.ssd_admission_counters.skipped_blocks; });
  counter("prefixkv_ssd_admission_skipped_bytes_total",
          "Payload bytes of the evicted prefix blocks not written to SSD",
          [](const EngineStats& e) { return e.ssd_admission_counters.skipped_bytes; });
}

// The KV event log (docs/events.md; only when it is on).
void AddEventFamilies(std::vector<FamilyDef>& defs) {
  auto add = [&defs](MetricType type, std::string name, std::string help, auto value) {
    defs.push_back({{std::move(name), type, {}, std::move(help)},
                    [value](const Snapshot& s, Samples& out) {
                      if (s.engine.events.enabled) out.Add({}, value(s.engine.events));
                    }});
  };
  using E = const KvEventLogStats&;
  add(MetricType::kGauge, "prefixkv_events_head_seq",
      "Sequence number of the newest KV event (XREAD id <seq>-0)",
      [](E e) { return e.head_seq; });
  add(MetricType::kGauge, "prefixkv_events_first_seq",
      "Sequence number of the oldest KV event retained (0: none)",
      [](E e) { return e.first_seq; });
  add(MetricType::kGauge, "prefixkv_events_retained", "KV events retained (XLEN)",
      [](E e) { return e.events; });
  add(MetricType::kGauge, "prefixkv_events_bytes", "Bytes of the retained KV events",
      [](E e) { return e.bytes; });
  add(MetricType::kGauge, "prefixkv_events_retention_bytes",
      "The event log's retention in bytes", [](E e) { return e.retention_bytes; });
  add(MetricType::kGauge, "prefixkv_events_retention_seconds",
      "The event log's retention in seconds", [](E e) { return e.retention_ms / 1000; });
  add(MetricType::kCounter, "prefixkv_events_appended_total",
      "KV events appended since the engine opened", [](E e) { return e.appended; });
  add(MetricType::kCounter, "prefixkv_events_trimmed_total",
      "KV events dropped by retention since the engine opened",
      [](E e) { return e.trimmed; });
  add(MetricType::kCounter, "prefixkv_events_reconciled_total",
      "Corrective KV events emitted at open (reason reconciled)",
      [](E e) { return e.reconciled; });
  add(MetricType::kCounter, "prefixkv_events_write_errors_total",
      "KV event appends the file system refused (kept in RAM only)",
      [](E e) { return e.write_errors; });
  add(MetricType::kCounter, "prefixkv_events_append_waits_total",
      "KV event appends that waited for the log's writer thread (its queue was full)",
      [](E e) { return e.append_waits; });
}

// Tier-wide families: one sample per tier present.
void AddTierFamilies(std::vector<FamilyDef>& defs) {
  defs.push_back(Gauge("prefixkv_tier_capacity_bytes", {"tier"},
                       "Capacity of the tier in charged bytes",
                       [](const Snapshot& s, Samples& out) {
                         if (s.has_hot())
                           out.Add({{"tier", "hot"}}, s.engine.hot_capacity_bytes);
                         if (s.engine.has_ssd) {
                           out.Add({{"tier", "ssd"}}, s.engine.ssd_capacity_bytes);
                         }
                       }));
  ForEachTierFamily([&defs](const TierCounterField& f) {
    defs.push_back({{std::string("prefixkv_tier_") + f.metric,
                     TierFieldType(f),
                     {"tier"},
                     std::string(f.help) + ", whole tier"},
                    [&f](const Snapshot& s, Samples& out) {
                      if (s.has_hot()) out.Add({{"tier", "hot"}}, s.engine.hot.*f.field);
                      if (s.engine.has_ssd)
                        out.Add({{"tier", "ssd"}}, s.engine.ssd.*f.field);
                    }});
  });
  defs.push_back(Gauge("prefixkv_hot_dirty_blocks", {},
                       "Hot blocks not yet written to the SSD tier",
                       [](const Snapshot& s, Samples& out) {
                         if (s.has_hot()) out.Add({}, s.engine.dirty_blocks);
                       }));
  defs.push_back(Gauge("prefixkv_memory_mapped_bytes", {},
                       "Bytes of the regions the engine's memory resource has mapped "
                       "(hot blocks, SSD reads, restore plans)",
                       [](const Snapshot& s, Samples& out) {
                         if (s.has_hot() || s.engine.has_ssd)
                           out.Add({}, s.engine.memory_mapped_bytes);
                       }));
  defs.push_back(Gauge("prefixkv_memory_regions", {},
                       "Regions the engine's memory resource has mapped",
                       [](const Snapshot& s, Samples& out) {
                         if (s.has_hot() || s.engine.has_ssd)
                           out.Add({}, s.engine.memory_regions);
                       }));
  defs.push_back(Gauge("prefixkv_ssd_write_back_queue_blocks", {},
                       "Blocks queued for the SSD tier's background writers",
                       [](const Snapshot& s, Samples& out) {
                         if (s.engine.has_ssd) out.Add({}, s.engine.ssd_queued_blocks);
                       }));
  defs.push_back(Gauge("prefixkv_ssd_write_back_failed_blocks", {},
                       "Queued blocks whose last write attempt failed: above 0 while "
                       "write-back fails (write-back SETs are refused)",
                       [](const Snapshot& s, Samples& out) {
                         if (s.engine.has_ssd)
                           out.Add({}, s.engine.ssd_write_back_failed_blocks);
                       }));
  defs.push_back(
      SsdCounter("prefixkv_ssd_write_back_failures_total",
                 "Failed write-back attempts of the SSD tier (a batch, or an "
                 "inline write while the queue was full)",
                 [](const EngineStats& e) { return e.ssd_write_back_failures; }));
  defs.push_back(SsdCounter(
      "prefixkv_ssd_read_ahead_reads_total",
      "Reads the SSD tier started ahead of restores (docs/ssd.md \"Read-ahead\")",
      [](const EngineStats& e) { return e.ssd_read_ahead_reads; }));
  defs.push_back(
      SsdCounter("prefixkv_ssd_read_ahead_served_total",
                 "Reads made ahead that the restore's Get served",
                 [](const EngineStats& e) { return e.ssd_read_ahead_served; }));
  defs.push_back({{"prefixkv_ssd_read_ahead_discarded_total",
                   MetricType::kCounter,
                   {"reason"},
                   "Reads made ahead and not served: stale (the block changed "
                   "meanwhile or the read failed; the Get read it again), unused "
                   "(the restore stopped before it needed them)"},
                  [](const Snapshot& s, Samples& out) {
                    if (!s.engine.has_ssd) return;
                    out.Add({{"reason", "stale"}}, s.engine.ssd_read_ahead_stale);
                    out.Add({{"reason", "unused"}}, s.engine.ssd_read_ahead_unused);
                  }});
  defs.push_back(
      SsdCounter("prefixkv_ssd_read_ahead_bytes_total",
                 "Payload bytes the SSD tier read ahead of restores, served or not",
                 [](const EngineStats& e) { return e.ssd_read_ahead_bytes; }));
  AddWearFamilies(defs);
}

// The capacity advisor's curve (docs/eviction.md, "The capacity advisor").
void AddAdvisorFamilies(std::vector<FamilyDef>& defs) {
  defs.push_back(Gauge("prefixkv_advisor_hit_ratio", {"tier", "capacity_bytes"},
                       "Estimated token hit ratio if the tier had capacity_bytes (1/4x "
                       "to 8x its capacity; ssd: behind the hot tier as it is)",
                       [](const Snapshot& s, Samples& out) {
                         for (const AdvisorPoint& p : s.engine.advisor.points) {
                           out.AddDouble(
                               {{"tier", p.tier},
                                {"capacity_bytes", std::to_string(p.capacity_bytes)}},
                               p.hit_ratio);
                         }
                       }));
  defs.push_back(Gauge("prefixkv_advisor_sampling_rate", {},
                       "Share of block keys the capacity advisor samples",
                       [](const Snapshot& s, Samples& out) {
                         if (!s.engine.advisor.points.empty())
                           out.AddDouble({}, s.engine.advisor.sampling_rate);
                       }));
}

// The remote tier's families (only with a remote tier).
void AddRemoteFamilies(std::vector<FamilyDef>& defs) {
  defs.push_back(Gauge("prefixkv_remote_available", {},
                       "1 when the last call to the remote tier's cluster succeeded",
                       [](const Snapshot& s, Samples& out) {
                         if (s.engine.has_remote)
                           out.Add({}, uint64_t{s.engine.remote.available});
                       }));
  for (const RemoteCounterField& f : kRemoteCounterFields) {
    defs.push_back({{std::string("prefixkv_remote_") + f.metric,
                     f.counter ? MetricType::kCounter : MetricType::kGauge,
                     {},
                     f.help},
                    [&f](const Snapshot& s, Samples& out) {
                      if (s.engine.has_remote) out.Add({}, s.engine.remote.*f.field);
                    }});
  }
}

// Token counters per model (kPrefixTokenFields): the rows sharing a metric
// are one family, told apart by their `tier` label.
void AddPrefixTokenFamilies(std::vector<FamilyDef>& defs) {
  for (size_t i = 0; i < std::size(kPrefixTokenFields); ++i) {
    const PrefixTokenField& first = kPrefixTokenFields[i];
    if (i > 0 && std::string_view(kPrefixTokenFields[i - 1].metric) == first.metric) {
      continue;
    }
    std::vector<std::string> labels = {"owner"};
    if (first.tier != nullptr) labels.insert(labels.begin(), "tier");
    defs.push_back({{std::string("prefixkv_") + first.metric, MetricType::kCounter,
                     std::move(labels), first.help},
                    [&first](const Snapshot& s, Samples& out) {
                      for (const PrefixTokenField* f = &first;
                           f != std::end(kPrefixTokenFields) &&
                           std::string_view(f->metric) == first.metric;
                           ++f) {
                        for (const EngineOwnerStats& o : s.engine.owners) {
                          if (!o.prefix_tokens) continue;
                          const uint64_t v = *o.prefix_tokens.*f->field;
                          if (f->tier == nullptr) {
                            out.Add({{"owner", o.name}}, v);
                          } else {
                            out.Add({{"tier", f->tier}, {"owner", o.name}}, v);
                          }
                        }
                      }
                    }});
  }
}

// Per-owner families: one sample per owner and tier.
void AddOwnerFamilies(std::vector<FamilyDef>& defs) {
  defs.push_back(Gauge("prefixkv_owner_hot_quota_bytes", {"owner"},
                       "Most hot bytes the owner may hold (owners with a quota only)",
                       [](const Snapshot& s, Samples& out) {
                         for (const EngineOwnerStats& o : s.engine.owners) {
                           if (o.hot_quota_bytes)
                             out.Add({{"owner", o.name}}, *o.hot_quota_bytes);
                         }
                       }));
  ForEachTierFamily([&defs](const TierCounterField& f) {
    defs.push_back({{std::string("prefixkv_owner_") + f.metric,
                     TierFieldType(f),
                     {"tier", "owner"},
                     std::string(f.help) + ", per owner of the hot budget"},
                    [&f](const Snapshot& s, Samples& out) {
                      for (const EngineOwnerStats& o : s.engine.owners) {
                        out.Add({{"tier", "hot"}, {"owner", o.name}}, o.hot.*f.field);
                      }
                      if (!s.engine.has_ssd) return;
                      for (const EngineOwnerStats& o : s.engine.owners) {
                        out.Add({{"tier", "ssd"}, {"owner", o.name}}, o.ssd.*f.field);
                      }
                    }});
  });
  defs.push_back({{"prefixkv_restore_duration_seconds",
                   MetricType::kHistogram,
                   {"owner", "le"},
                   "Time of Engine::Restore calls per model"},
                  [](const Snapshot& s, Samples& out) {
                    for (const EngineOwnerStats& o : s.engine.owners) {
                      if (o.restore_latency) {
                        AppendHistogram(*o.restore_latency, {{"owner", o.name}}, out);
                      }
                    }
                  }});
  AddPrefixTokenFamilies(defs);
}

// Per-command families (INFO commandstats): a series for every command the
// server knows, called or not, so a rate over them never starts from nothing.
struct CommandField {
  const char* suffix;
  uint64_t CommandStats::*field;
  const char* help;
};

constexpr CommandField kCommandFields[] = {
    {"calls_total", &CommandStats::calls, "RESP commands run, per command"},
    {"failed_calls_total", &CommandStats::failed_calls,
     "RESP commands that ran and answered an error, per command"},
    {"rejected_calls_total", &CommandStats::rejected_calls,
     "RESP commands refused before running (arity, AUTH, admin permission), per "
     "command"},
};

void AddCommandFamilies(std::vector<FamilyDef>& defs) {
  for (const CommandField& f : kCommandFields) {
    defs.push_back({{std::string("prefixkv_command_") + f.suffix,
                     MetricType::kCounter,
                     {"command"},
                     f.help},
                    [&f](const Snapshot& s, Samples& out) {
                      for (const CommandStats& c : s.server.commands) {
                        out.Add({{"command", c.name}}, c.*f.field);
                      }
                    }});
  }
  defs.push_back({{"prefixkv_command_duration_seconds",
                   MetricType::kHistogram,
                   {"command", "le"},
                   "Time inside the server of RESP commands that ran, per command"},
                  [](const Snapshot& s, Samples& out) {
                    for (const CommandStats& c : s.server.commands) {
                      AppendHistogram(c.latency, {{"command", c.name}}, out);
                    }
                  }});
}

// prefixkv_build_info: always 1, its labels say which build this is.
void AddBuildInfo(std::vector<FamilyDef>& defs) {
#if defined(__clang__)
  static const std::string compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  static const std::string compiler = std::string("gcc ") + __VERSION__;
#else
  static const std::string compiler = "unknown";
#endif
  defs.push_back(
      Gauge("prefixkv_build_info", {"version", "compiler"},
            "Always 1; the labels name the version and compiler of this build",
            [](const Snapshot&, Samples& out) {
              out.Add({{"version", PREFIXKV_VERSION_STRING}, {"compiler", compiler}},
                      uint64_t{1});
            }));
}

// The process collector's families, with the client libraries' names and help.
void AddProcessFamilies(std::vector<FamilyDef>& defs) {
  using Field = std::function<double(const ProcessStats&)>;
  auto add = [&defs](const char* name, MetricType type, const char* help, Field field) {
    defs.push_back({{name, type, {}, help},
                    [field = std::move(field)](const Snapshot& s, Samples& out) {
                      if (s.process != nullptr) out.AddDouble({}, field(*s.process));
                    }});
  };
  add("process_cpu_seconds_total", MetricType::kCounter,
      "Total user and system CPU time spent in seconds.",
      [](const ProcessStats& p) { return p.cpu_seconds; });
  add("process_open_fds", MetricType::kGauge, "Number of open file descriptors.",
      [](const ProcessStats& p) { return static_cast<double>(p.open_fds); });
  add("process_max_fds", MetricType::kGauge, "Maximum number of open file descriptors.",
      [](const ProcessStats& p) { return static_cast<double>(p.max_fds); });
  add("process_virtual_memory_bytes", MetricType::kGauge, "Virtual memory size in bytes.",
      [](const ProcessStats& p) { return static_cast<double>(p.virtual_memory_bytes); });
  add("process_resident_memory_bytes", MetricType::kGauge,
      "Resident memory size in bytes.",
      [](const ProcessStats& p) { return static_cast<double>(p.resident_memory_bytes); });
  add("process_start_time_seconds", MetricType::kGauge,
      "Start time of the process since unix epoch in seconds.",
      [](const ProcessStats& p) { return p.start_time_seconds; });
}

void AddServerFamilies(std::vector<FamilyDef>& defs) {
  defs.push_back(Gauge(
      "prefixkv_server_connected_clients", {}, "Open RESP connections",
      [](const Snapshot& s, Samples& out) { out.Add({}, s.server.connected_clients); }));
  defs.push_back(Gauge("prefixkv_server_client_buffer_bytes", {},
                       "Heap bytes held by the buffers of open RESP connections",
                       [](const Snapshot& s, Samples& out) {
                         out.Add({}, s.server.client_buffer_bytes);
                       }));
  defs.push_back(
      Counter("prefixkv_server_connections_received_total", "RESP connections accepted",
              [](const ServerStats& s) { return s.total_connections_received; }));
  defs.push_back(Counter("prefixkv_server_rejected_connections_total",
                         "RESP connections refused over the client limit",
                         [](const ServerStats& s) { return s.rejected_connections; }));
  defs.push_back(
      Counter("prefixkv_server_commands_processed_total", "RESP commands executed",
              [](const ServerStats& s) { return s.total_commands_processed; }));
  defs.push_back(Counter("prefixkv_server_protocol_errors_total",
                         "RESP connections closed for malformed input",
                         [](const ServerStats& s) { return s.protocol_errors; }));
  defs.push_back(Counter("prefixkv_server_idle_disconnections_total",
                         "RESP connections closed for being idle",
                         [](const ServerStats& s) { return s.idle_disconnections; }));
  defs.push_back(Counter("prefixkv_server_auth_failures_total",
                         "Failed AUTH (and HELLO AUTH) attempts",
                         [](const ServerStats& s) { return s.auth_failures; }));
  defs.push_back(Counter("prefixkv_server_auth_throttled_total",
                         "AUTH attempts refused unchecked over the server-wide budget",
                         [](const ServerStats& s) { return s.auth_throttled; }));
  defs.push_back(Counter("prefixkv_server_out_of_memory_refusals_total",
                         "RESP requests refused because an allocation failed",
                         [](const ServerStats& s) { return s.out_of_memory; }));
  AddCommandFamilies(defs);
}

const std::vector<FamilyDef>& FamilyDefs() {
  static const std::vector<FamilyDef>* defs = [] {
    auto* d = new std::vector<FamilyDef>;
    AddBuildInfo(*d);
    AddTierFamilies(*d);
    AddRemoteFamilies(*d);
    AddOwnerFamilies(*d);
    AddAdvisorFamilies(*d);
    AddEventFamilies(*d);
    AddServerFamilies(*d);
    AddProcessFamilies(*d);
    return d;
  }();
  return *defs;
}

// HELP text: backslash and line feed escaped.
std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

const std::vector<MetricFamilyInfo>& MetricFamilies() {
  static const std::vector<MetricFamilyInfo>* infos = [] {
    auto* v = new std::vector<MetricFamilyInfo>;
    for (const FamilyDef& d : FamilyDefs()) v->push_back(d.info);
    return v;
  }();
  return *infos;
}

std::string RenderMetrics(const EngineStats& engine, const ServerStats& server,
                          const ProcessStats* process) {
  const Snapshot snapshot{engine, server, process};
  std::string out;
  for (const FamilyDef& d : FamilyDefs()) {
    Samples samples(d.info.name);
    d.samples(snapshot, samples);
    if (samples.body().empty()) continue;
    out += "# HELP " + d.info.name + " " + EscapeHelp(d.info.help) + "\n";
    out +=
        "# TYPE " + d.info.name + " " + std::string(MetricTypeName(d.info.type)) + "\n";
    out += samples.body();
  }
  return out;
}

}  // namespace prefixkv::server
