// INFO, PKV.STATS and PKV.AUDIT: the engine's counters (Engine::Stats) and
// their recomputation (Engine::Audit). The hot tier is one budget shared by
// every owner (each registered model, "values" for the raw keys, memory
// charges): its totals are reported first, then each owner's share, whose
// sum is the total; then the SSD tier.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/prefix_token_fields.h"
#include "prefixkv/remote_counter_fields.h"
#include "prefixkv/tier_counter_fields.h"

namespace prefixkv::server {
namespace {

// INFO with no argument, "all", "everything" or "default" returns every
// section but "commandstats" (as in Redis, only "all", "everything" and its own
// name ask for it); "tiers" the four engine sections; any other name that
// section only.
bool WantSection(std::string_view want, std::string_view section) {
  if (section == "commandstats") {
    return want == "all" || want == "everything" || want == section;
  }
  if (want.empty() || want == "all" || want == "everything" || want == "default") {
    return true;
  }
  if (want == "tiers") {
    return section == "tier_hot" || section == "owners" || section == "tier_ssd" ||
           section == "tier_remote";
  }
  return want == section;
}

// The process's resident set size, from /proc/self/statm; 0 when unknown.
uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// "1.50M" style, as Redis prints used_memory_human.
std::string HumanBytes(uint64_t bytes) {
  const char* units = "BKMGT";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%c" : "%.2f%c", v, units[u]);
  return buf;
}

// "# Memory": the hot tier's charged bytes (what the budget limits), its
// capacity, the process's resident size, and the regions the engine's
// memory resource has mapped (where hot blocks, SSD reads and restore plans
// live: next to the charged bytes, what the budget costs in RAM).
void AppendMemory(const EngineStats& s, const EngineOptions& options, std::string* out) {
  *out += "# Memory\r\n";
  *out += "used_memory:" + std::to_string(s.hot.bytes) + "\r\n";
  *out += "used_memory_human:" + HumanBytes(s.hot.bytes) + "\r\n";
  const uint64_t rss = ResidentBytes();
  *out += "used_memory_rss:" + std::to_string(rss) + "\r\n";
  *out += "used_memory_rss_human:" + HumanBytes(rss) + "\r\n";
  *out += "memory_mapped_bytes:" + std::to_string(s.memory_mapped_bytes) + "\r\n";
  *out += "memory_mapped_bytes_human:" + HumanBytes(s.memory_mapped_bytes) + "\r\n";
  *out += "memory_regions:" + std::to_string(s.memory_regions) + "\r\n";
  *out += "maxmemory:" + std::to_string(s.hot_capacity_bytes) + "\r\n";
  *out += "maxmemory_human:" + HumanBytes(s.hot_capacity_bytes) + "\r\n";
  *out +=
      "maxmemory_policy:" + std::string(EvictionPolicyName(options.hot_policy)) + "\r\n";
  *out += "hot_dirty_blocks:" + std::to_string(s.dirty_blocks) + "\r\n\r\n";
}

// "# Keyspace": raw keys (GET/SET) and blocks per tier, and Redis's db0 line,
// whose `keys` is the raw-key entries of both tiers (a key held in both, a
// clean copy in RAM of one on SSD, counts in each). Counting the raw keys on
// SSD walks the SSD index.
void AppendKeyspace(Engine* engine, const EngineStats& s, std::string* out) {
  uint64_t raw_hot = 0;
  for (const EngineOwnerStats& o : s.owners) {
    if (o.name == "values") raw_hot += o.hot.entries;
  }
  uint64_t raw_ssd = 0;
  if (SsdTier* ssd = EngineSsdTier(*engine)) {
    ssd->ForEach([&](const BlockMeta& meta, uint64_t) {
      if (meta.namespace_id.IsZero()) ++raw_ssd;
    });
  }
  const uint64_t blocks_ssd = s.ssd.entries > raw_ssd ? s.ssd.entries - raw_ssd : 0;
  *out += "# Keyspace\r\n";
  *out += "db0:keys=" + std::to_string(raw_hot + raw_ssd) + ",expires=0,avg_ttl=0\r\n";
  *out += "raw_keys_hot:" + std::to_string(raw_hot) + "\r\n";
  *out += "raw_keys_ssd:" + std::to_string(raw_ssd) + "\r\n";
  *out +=
      "blocks_hot:" + std::to_string(s.hot.entries - std::min(s.hot.entries, raw_hot)) +
      "\r\n";
  *out += "blocks_ssd:" + std::to_string(blocks_ssd) + "\r\n";
  *out += "models:" + std::to_string(engine->model_count()) + "\r\n\r\n";
}

// An owner's name made safe for one INFO "key=value,..." line.
std::string InfoName(std::string_view name) {
  std::string out(name.substr(0, 128));
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' &&
        c != '.' && c != '@' && c != '/') {
      c = '_';
    }
  }
  return out;
}

// The tier's counters, then its own `extras` (name without the tier prefix).
// "# Wear": the SSD tier's write volume, rate, endurance and admission
// (docs/ssd.md "Wear").
void AppendWear(const EngineStats& s, std::string* out) {
  char rate[64], days[64];
  std::snprintf(rate, sizeof(rate), "%.0f", s.ssd_write_bytes_per_day);
  std::snprintf(days, sizeof(days), "%.1f", s.ssd_projected_lifetime_days);
  const SsdAdmissionCounters& a = s.ssd_admission_counters;
  *out += "# Wear\r\n";
  *out += "ssd_written_bytes:" + std::to_string(s.ssd_bytes_written) + "\r\n";
  *out += "ssd_written_bytes_human:" + HumanBytes(s.ssd_bytes_written) + "\r\n";
  *out += std::string("ssd_write_bytes_per_day:") + rate + "\r\n";
  *out += "ssd_write_per_day_human:" +
          HumanBytes(static_cast<uint64_t>(s.ssd_write_bytes_per_day)) + "\r\n";
  *out += "ssd_endurance_bytes:" + std::to_string(s.ssd_endurance_bytes) + "\r\n";
  *out += std::string("ssd_projected_lifetime_days:") + days + "\r\n";
  *out += "ssd_admission:" + std::string(SsdAdmissionName(s.ssd_admission)) + "\r\n";
  *out += "ssd_write_budget_bytes_per_day:" +
          std::to_string(s.ssd_write_budget_bytes_per_day) + "\r\n";
  *out += "ssd_admission_written_blocks:" + std::to_string(a.written_blocks) + "\r\n";
  *out += "ssd_admission_written_bytes:" + std::to_string(a.written_bytes) + "\r\n";
  *out += "ssd_admission_forced_blocks:" + std::to_string(a.forced_blocks) + "\r\n";
  *out += "ssd_admission_skipped_blocks:" + std::to_string(a.skipped_blocks) + "\r\n";
  *out += "ssd_admission_skipped_bytes:" + std::to_string(a.skipped_bytes) + "\r\n\r\n";
}

void AppendTier(std::string_view name, const TierCounters& c, uint64_t capacity_bytes,
                std::initializer_list<std::pair<std::string_view, uint64_t>> extras,
                std::string* out) {
  const std::string tier(name);
  *out += "# Tier_" + tier + "\r\n";
  *out += tier + "_capacity_bytes:" + std::to_string(capacity_bytes) + "\r\n";
  ForEachCounter(c, [&](std::string_view field, uint64_t v) {
    *out += tier + "_" + std::string(field) + ":" + std::to_string(v) + "\r\n";
  });
  for (const auto& [extra_name, v] : extras) {
    *out += tier + "_" + std::string(extra_name) + ":" + std::to_string(v) + "\r\n";
  }
  *out += "\r\n";
}

// "# Owners", one line per owner of the hot budget, Redis keyspace style:
// owner0:name=values,entries=1,bytes=259,...
void AppendOwners(const EngineStats& s, std::string* out) {
  *out += "# Owners\r\n";
  for (size_t i = 0; i < s.owners.size(); ++i) {
    const EngineOwnerStats& o = s.owners[i];
    *out += "owner" + std::to_string(i) + ":name=" + InfoName(o.name);
    ForEachCounter(o.hot, [&](std::string_view field, uint64_t v) {
      *out += "," + std::string(field) + "=" + std::to_string(v);
    });
    if (o.hot_quota_bytes) *out += ",quota_bytes=" + std::to_string(*o.hot_quota_bytes);
    if (o.prefix_tokens) {
      for (const PrefixTokenField& f : kPrefixTokenFields) {
        *out +=
            "," + std::string(f.name) + "=" + std::to_string(*o.prefix_tokens.*f.field);
      }
    }
    *out += "\r\n";
  }
  *out += "\r\n";
}

}  // namespace

void ForEachCounter(const TierCounters& c,
                    const std::function<void(std::string_view, uint64_t)>& fn) {
  for (const TierCounterField& f : kTierCounterFields) fn(f.name, c.*f.field);
}

// "# Advisor": the capacity advisor's estimated token hit ratio at 1/4x to 8x
// each tier's capacity (docs/eviction.md, "The capacity advisor"), one line
// per point: advisor_<tier>_<factor>x:capacity_bytes=N,hit_ratio=R.
void AppendAdvisor(const AdvisorReport& r, std::string* out) {
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "# Advisor\r\nadvisor_sampling_rate:%.6f\r\nadvisor_sampled_keys:%llu\r\n"
                "advisor_memory_bytes:%llu\r\nadvisor_references:%llu\r\n",
                r.sampling_rate, static_cast<unsigned long long>(r.sampled_keys),
                static_cast<unsigned long long>(r.memory_bytes),
                static_cast<unsigned long long>(r.references));
  *out += buf;
  for (const AdvisorPoint& p : r.points) {
    std::snprintf(buf, sizeof(buf),
                  "advisor_%s_%gx:capacity_bytes=%llu,hit_ratio=%.4f\r\n", p.tier.c_str(),
                  p.factor, static_cast<unsigned long long>(p.capacity_bytes),
                  p.hit_ratio);
    *out += buf;
  }
  *out += "\r\n";
}

// "# Events": the KV event log (docs/events.md), when it is on.
void AppendEvents(const KvEventLogStats& e, std::string* out) {
  *out += "# Events\r\n";
  const std::pair<const char*, uint64_t> fields[] = {
      {"events_persistent", e.persistent ? 1 : 0},
      {"events_head_seq", e.head_seq},
      {"events_first_seq", e.first_seq},
      {"events_retained", e.events},
      {"events_bytes", e.bytes},
      {"events_retention_bytes", e.retention_bytes},
      {"events_retention_ms", e.retention_ms},
      {"events_appended", e.appended},
      {"events_trimmed", e.trimmed},
      {"events_reconciled", e.reconciled},
      {"events_write_errors", e.write_errors},
      {"events_append_waits", e.append_waits},
      {"events_keys_hot", e.keys_hot},
      {"events_keys_ssd", e.keys_ssd},
  };
  for (const auto& [name, v] : fields)
    *out += std::string(name) + ":" + std::to_string(v) + "\r\n";
  *out += "\r\n";
}

// INFO [section ...]: "server", "clients", "stats" and "commandstats" from the
// running server, "memory" and "keyspace", then "tier_hot", "owners",
// "tier_ssd" and "tier_remote" from the engine ("tiers": those four), then
// "advisor" and "events". An unknown section is an empty reply, as in Redis.
void CmdInfo(CommandContext& ctx) {
  std::vector<std::string> wants;  // none: the default sections
  for (size_t i = 1; i < ctx.args.size(); ++i) {
    std::string want(ctx.arg(i));
    for (char& c : want)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    wants.push_back(std::move(want));
  }
  if (wants.empty()) wants.emplace_back();
  // Several names (Redis 7): every section one of them asks for, once each.
  auto wanted = [&wants](std::string_view section) {
    return std::any_of(wants.begin(), wants.end(), [section](const std::string& want) {
      return WantSection(want, section);
    });
  };
  std::string text;
  const auto& server_info = ctx.dispatcher.config().append_server_info;
  if (server_info) server_info(wanted, &text);
  Engine* engine = ctx.dispatcher.engine();
  const EngineStats s = engine->Stats();
  if (wanted("memory")) AppendMemory(s, engine->options(), &text);
  if (wanted("keyspace")) AppendKeyspace(engine, s, &text);
  if (wanted("tier_hot")) {
    AppendTier("hot", s.hot, s.hot_capacity_bytes, {{"dirty_blocks", s.dirty_blocks}},
               &text);
  }
  if (wanted("owners")) AppendOwners(s, &text);
  if (s.has_ssd && wanted("tier_ssd")) {
    // Write-back failing: SETs are refused until the failed blocks are written.
    AppendTier("ssd", s.ssd, s.ssd_capacity_bytes,
               {{"queued_blocks", s.ssd_queued_blocks},
                {"write_back_failing", uint64_t{s.ssd_write_back_failed_blocks > 0}},
                {"write_back_failed_blocks", s.ssd_write_back_failed_blocks},
                {"write_back_failures", s.ssd_write_back_failures},
                {"read_ahead_reads", s.ssd_read_ahead_reads},
                {"read_ahead_served", s.ssd_read_ahead_served},
                {"read_ahead_stale", s.ssd_read_ahead_stale},
                {"read_ahead_unused", s.ssd_read_ahead_unused},
                {"read_ahead_bytes", s.ssd_read_ahead_bytes}},
               &text);
  }
  if (s.has_ssd && wanted("wear")) AppendWear(s, &text);
  if (s.has_remote && wanted("tier_remote")) {
    text += "# Tier_remote\r\nremote_cluster:" + s.remote_describe + "\r\n";
    text += std::string("remote_available:") + (s.remote.available ? "1" : "0") + "\r\n";
    for (const RemoteCounterField& f : kRemoteCounterFields) {
      text += "remote_" + std::string(f.name) + ":" + std::to_string(s.remote.*f.field) +
              "\r\n";
    }
    text += "\r\n";
  }
  if (wanted("advisor")) AppendAdvisor(engine->AdvisorStats(), &text);
  if (s.events.enabled && wanted("events")) AppendEvents(s.events, &text);
  ctx.out->Bulk(text);
}

// PKV.STATS: a flat array of names and integers: "hot.<counter>" (every
// owner), "owner.<name>.<counter>" per owner (models: and their token
// counters, kPrefixTokenFields), "ssd.<counter>",
// "remote.<counter>".
void CmdPkvStats(CommandContext& ctx) {
  const EngineStats s = ctx.dispatcher.engine()->Stats();
  std::vector<std::pair<std::string, uint64_t>> fields;
  auto add = [&](const std::string& prefix, const TierCounters& c) {
    ForEachCounter(c, [&](std::string_view field, uint64_t v) {
      fields.emplace_back(prefix + std::string(field), v);
    });
  };
  fields.emplace_back("hot.capacity_bytes", s.hot_capacity_bytes);
  add("hot.", s.hot);
  fields.emplace_back("hot.dirty_blocks", s.dirty_blocks);
  for (const EngineOwnerStats& o : s.owners) {
    add("owner." + o.name + ".", o.hot);
    if (!o.prefix_tokens) continue;
    for (const PrefixTokenField& f : kPrefixTokenFields) {
      fields.emplace_back("owner." + o.name + "." + f.name, *o.prefix_tokens.*f.field);
    }
  }
  if (s.has_ssd) {
    fields.emplace_back("ssd.capacity_bytes", s.ssd_capacity_bytes);
    add("ssd.", s.ssd);
    fields.emplace_back("ssd.queued_blocks", s.ssd_queued_blocks);
    fields.emplace_back("ssd.write_back_failed_blocks", s.ssd_write_back_failed_blocks);
    fields.emplace_back("ssd.write_back_failures", s.ssd_write_back_failures);
    fields.emplace_back("ssd.read_ahead_reads", s.ssd_read_ahead_reads);
    fields.emplace_back("ssd.read_ahead_served", s.ssd_read_ahead_served);
    fields.emplace_back("ssd.read_ahead_stale", s.ssd_read_ahead_stale);
    fields.emplace_back("ssd.read_ahead_unused", s.ssd_read_ahead_unused);
    fields.emplace_back("ssd.read_ahead_bytes", s.ssd_read_ahead_bytes);
  }
  if (s.has_remote) {
    fields.emplace_back("remote.available", s.remote.available ? 1 : 0);
    for (const RemoteCounterField& f : kRemoteCounterFields) {
      fields.emplace_back("remote." + std::string(f.name), s.remote.*f.field);
    }
  }
  ctx.out->ArrayHeader(fields.size() * 2);
  for (const auto& [name, v] : fields) {
    ctx.out->Bulk(name);
    ctx.out->Integer(static_cast<int64_t>(v));
  }
}

// PKV.AUDIT: flushes, then recomputes every counter from contents and
// verifies every SSD checksum and chain link (Engine::Audit); replies with
// one line per finding ("<tier> <what>: <detail>", "ssd orphan: <key>"), an
// empty array when everything agrees.
void CmdPkvAudit(CommandContext& ctx) {
  StatusOr<EngineAudit> audit = ctx.dispatcher.engine()->Audit();
  if (!audit.ok()) return ReplyStatus(audit.status(), ctx.out);
  ctx.out->ArrayHeader(audit->findings.size() + audit->orphans.size());
  for (const AuditFinding& f : audit->findings) ctx.out->Bulk(f.what + ": " + f.detail);
  for (const BlockKey& k : audit->orphans) ctx.out->Bulk("ssd orphan: " + k.ToHex());
}

}  // namespace prefixkv::server
