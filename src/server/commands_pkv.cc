// Prefix-cache block commands (PKV.PUT, PKV.GET, PKV.MATCH, PKV.STATS,
// PKV.AUDIT) and INFO, which reports the same tier counters.
#include <cctype>
#include <cstring>

#include "commands.h"
#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"

namespace prefixkv::server {
namespace {

// Tokens per block accepted by PKV.MATCH (the codec's own token limit).
constexpr int64_t kMaxBlockTokens = 1 << 22;

bool ParseKey(CommandContext& ctx, size_t i, BlockKey* key) {
  StatusOr<BlockKey> k = BlockKey::FromHex(ctx.arg(i));
  if (!k.ok()) {
    ctx.out->Error("ERR invalid key: expected 32 lowercase hex digits");
    return false;
  }
  *key = *k;
  return true;
}

void AppendTierInfo(const BlockTier& tier, std::string* out) {
  std::string name(tier.name());
  *out += "# Tier_" + name + "\r\n";
  ForEachCounter(tier.Totals(), [&](std::string_view field, uint64_t v) {
    *out += name + "_" + std::string(field) + ":" + std::to_string(v) + "\r\n";
  });
  *out += "\r\n";
}

bool WantSection(std::string_view want, std::string_view section) {
  return want.empty() || want == "all" || want == "everything" || want == "default" ||
         want == section;
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
}

// INFO [section]: "server", "clients" and "stats" from the running server, then
// one "tier_<name>" section per tier with every TierCounters field.
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
  for (BlockTier* tier : ctx.dispatcher.store()->tiers()) {
    if (WantSection(want, "tiers") || want == "tier_" + std::string(tier->name())) {
      AppendTierInfo(*tier, &text);
    }
  }
  ctx.out->Bulk(text);
}

// PKV.PUT <record>: the record must decode and verify; it is stored under its
// own key with its parent and namespace.
void CmdPkvPut(CommandContext& ctx) {
  DecodeLimits limits;
  limits.max_record_bytes = ctx.dispatcher.config().max_record_bytes;
  SharedBytes encoded = DetachArg(ctx.args[1]);
  StatusOr<BlockRecord> record = DecodeBlock(encoded, limits);
  if (!record.ok()) {
    return ctx.out->Error("ERR invalid block record: " + record.status().ToString());
  }
  if (record->key.IsZero() || record->namespace_id.IsZero()) {
    return ctx.out->Error("ERR invalid block record: zero key or namespace");
  }
  BlockMeta meta;
  meta.key = record->key;
  meta.parent = record->parent;
  meta.namespace_id = record->namespace_id;
  Status s = ctx.dispatcher.store()->Put(meta, std::move(encoded));
  if (!s.ok()) return ReplyStatus(s, ctx.out);
  ctx.out->Simple("OK");
}

void CmdPkvGet(CommandContext& ctx) {
  BlockKey key;
  if (!ParseKey(ctx, 1, &key)) return;
  StatusOr<SharedBytes> value = ctx.dispatcher.store()->Get(key);
  if (value.ok()) return ctx.out->Bulk(*value);
  if (value.status().IsNotFound()) return ctx.out->Null();
  ReplyStatus(value.status(), ctx.out);
}

// PKV.MATCH <namespace root> <block_tokens> <tokens>: the leading full blocks
// of the token sequence that are stored, as [count, [key...]].
void CmdPkvMatch(CommandContext& ctx) {
  BlockKey root;
  if (!ParseKey(ctx, 1, &root)) return;
  int64_t block_tokens = 0;
  if (!ParseRespLength(ctx.arg(2), &block_tokens) || block_tokens <= 0 ||
      block_tokens > kMaxBlockTokens) {
    return ctx.out->Error("ERR block_tokens must be an integer in [1, 4194304]");
  }
  const SharedBytes& blob = ctx.args[3];
  if (blob.size() % sizeof(int32_t) != 0) {
    return ctx.out->Error(
        "ERR tokens must be int32 little-endian (length a multiple of 4)");
  }
  // Keys are chained block by block (ChainKey, exactly what ChainKeys does)
  // so the walk stops at the first missing block: the work and the reply are
  // bounded by what is stored, not by the length of the token blob.
  const size_t bt = static_cast<size_t>(block_tokens);
  const size_t full_blocks = blob.size() / sizeof(int32_t) / bt;
  std::vector<int32_t> block(full_blocks > 0 ? bt : 0);
  std::vector<BlockKey> keys;
  BlockKey parent = root;
  for (size_t i = 0; i < full_blocks; ++i) {
    std::memcpy(block.data(), blob.data() + i * bt * sizeof(int32_t),
                bt * sizeof(int32_t));
    BlockKey key = ChainKey(parent, block);
    if (!ctx.dispatcher.store()->Contains(key)) break;
    keys.push_back(key);
    parent = key;
  }
  const size_t n = keys.size();
  ctx.out->ArrayHeader(2);
  ctx.out->Integer(static_cast<int64_t>(n));
  ctx.out->ArrayHeader(n);
  for (size_t i = 0; i < n; ++i) ctx.out->Bulk(keys[i].ToHex());
}

// PKV.STATS: a flat array of "<tier>.<counter>" names and integer values.
void CmdPkvStats(CommandContext& ctx) {
  std::vector<std::pair<std::string, uint64_t>> fields;
  for (BlockTier* tier : ctx.dispatcher.store()->tiers()) {
    ForEachCounter(tier->Totals(), [&](std::string_view field, uint64_t v) {
      fields.emplace_back(std::string(tier->name()) + "." + std::string(field), v);
    });
  }
  ctx.out->ArrayHeader(fields.size() * 2);
  for (const auto& [name, v] : fields) {
    ctx.out->Bulk(name);
    ctx.out->Integer(static_cast<int64_t>(v));
  }
}

// PKV.AUDIT: runs every tier's Audit; replies with one line per finding
// ("<tier>: <what>: <detail>"), an empty array when everything agrees.
void CmdPkvAudit(CommandContext& ctx) {
  std::vector<std::string> lines;
  for (BlockTier* tier : ctx.dispatcher.store()->tiers()) {
    std::vector<AuditFinding> findings;
    Status s = tier->Audit(&findings);
    if (!s.ok()) return ReplyStatus(s.WithContext(tier->name()), ctx.out);
    for (const AuditFinding& f : findings) {
      lines.push_back(std::string(tier->name()) + ": " + f.what + ": " + f.detail);
    }
  }
  ctx.out->ArrayHeader(lines.size());
  for (const std::string& line : lines) ctx.out->Bulk(line);
}

}  // namespace prefixkv::server
