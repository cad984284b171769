// INFO, PKV.STATS and PKV.AUDIT: the engine's counters (Engine::Stats) and
// their recomputation (Engine::Audit). The hot tier is one budget shared by
// every owner (each registered model, "values" for the raw keys, memory
// charges): its totals are reported first, then each owner's share, whose
// sum is the total; then the SSD tier.
#include <cctype>

#include "commands.h"

namespace prefixkv::server {
namespace {

bool WantSection(std::string_view want, std::string_view section) {
  return want.empty() || want == "all" || want == "everything" || want == "default" ||
         want == section;
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

void AppendTier(std::string_view name, const TierCounters& c, uint64_t capacity_bytes,
                std::string_view extra_name, uint64_t extra, std::string* out) {
  const std::string tier(name);
  *out += "# Tier_" + tier + "\r\n";
  *out += tier + "_capacity_bytes:" + std::to_string(capacity_bytes) + "\r\n";
  ForEachCounter(c, [&](std::string_view field, uint64_t v) {
    *out += tier + "_" + std::string(field) + ":" + std::to_string(v) + "\r\n";
  });
  *out += tier + "_" + std::string(extra_name) + ":" + std::to_string(extra) + "\r\n\r\n";
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
    *out += "\r\n";
  }
  *out += "\r\n";
}

}  // namespace

void ForEachCounter(const TierCounters& c,
                    const std::function<void(std::string_view, uint64_t)>& fn) {
  fn("entries", c.entries);
  fn("bytes", c.bytes);
  fn("pinned_bytes", c.pinned_bytes);
  fn("hits", c.hits);
  fn("misses", c.misses);
  fn("inserts", c.inserts);
  fn("removes", c.removes);
  fn("evictions", c.evictions);
  fn("spills", c.spills);
  fn("corruptions", c.corruptions);
  fn("io_errors", c.io_errors);
  fn("external_bytes", c.external_bytes);
}

// INFO [section]: "server", "clients" and "stats" from the running server,
// then "tier_hot", "owners" and "tier_ssd" from the engine ("tiers": all
// three).
void CmdInfo(CommandContext& ctx) {
  std::string want;
  if (ctx.args.size() > 1) {
    want = std::string(ctx.arg(1));
    for (char& c : want)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string text;
  const auto& server_info = ctx.dispatcher.config().append_server_info;
  if (server_info && (WantSection(want, "server") || WantSection(want, "clients") ||
                      WantSection(want, "stats"))) {
    server_info(&text);
  }
  const bool tiers = WantSection(want, "tiers");
  const EngineStats s = ctx.dispatcher.engine()->Stats();
  if (tiers || want == "tier_hot") {
    AppendTier("hot", s.hot, s.hot_capacity_bytes, "dirty_blocks", s.dirty_blocks, &text);
  }
  if (tiers || want == "owners") AppendOwners(s, &text);
  if (s.has_ssd && (tiers || want == "tier_ssd")) {
    AppendTier("ssd", s.ssd, s.ssd_capacity_bytes, "queued_blocks", s.ssd_queued_blocks,
               &text);
  }
  ctx.out->Bulk(text);
}

// PKV.STATS: a flat array of names and integers: "hot.<counter>" (every
// owner), "owner.<name>.<counter>" per owner, "ssd.<counter>".
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
  for (const EngineOwnerStats& o : s.owners) add("owner." + o.name + ".", o.hot);
  if (s.has_ssd) {
    fields.emplace_back("ssd.capacity_bytes", s.ssd_capacity_bytes);
    add("ssd.", s.ssd);
    fields.emplace_back("ssd.queued_blocks", s.ssd_queued_blocks);
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
