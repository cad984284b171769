// The KV event log in the Redis Streams dialect (docs/events.md, "RESP"):
// one read-only stream, prefixkv:events, whose entry IDs are "<seq>-0".
// XREAD [COUNT n] [BLOCK ms] STREAMS prefixkv:events <id>, XRANGE,
// XREVRANGE, XLEN and XINFO STREAM, and PKV.SNAPSHOT (the key sets the
// stream adds up to, with the ID to continue after). An XREAD that finds nothing and may
// block leaves ClientState::block set and no reply: the connection waits for the log's
// watch or its timer on its own I/O thread, which is never held (connection.cc,
// StartBlockedRead).
#include <cctype>
#include <charconv>

#include "commands.h"

namespace prefixkv::server {
namespace {

constexpr std::string_view kStream = "prefixkv:events";
constexpr size_t kFieldPairs = 11;
// XRANGE/XREAD without COUNT: at most this many entries per reply.
constexpr size_t kDefaultCount = 10'000;

bool ParseU64(std::string_view s, uint64_t* v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

// An entry ID as Redis holds one: prefixkv's entries are "<seq>-0".
struct StreamId {
  uint64_t ms = 0;
  uint64_t seq = 0;
};

// A part of a stream ID read as Redis reads it (string2ull): string2ll's
// strict form, else strtoull's (leading spaces, a sign, leading zeros; "+5" is
// 5 and "-05" 2^64 - 5), in uint64 range. Clients send "+5" or "007" to Redis
// as IDs, so they are IDs here too.
bool ParseIdPart(std::string_view s, uint64_t* v) {
  int64_t strict = 0;
  if (ParseRedisInteger(s, &strict)) {
    *v = static_cast<uint64_t>(strict);
    return strict >= 0;
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  const bool negative = s.starts_with('-');
  if (negative || s.starts_with('+')) s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return false;
  if (negative) *v = 0 - *v;
  return true;
}

// A stream ID as Redis reads one (streamGenericParseIDOrReply): "-" and "+"
// (the least and the largest, refused when `strict`), "<ms>-<seq>", or "<ms>"
// with `missing_seq`; text up to its first NUL, at most 127 bytes.
bool ParseStreamId(std::string_view text, bool strict, uint64_t missing_seq,
                   StreamId* id) {
  if (text.size() > 127) return false;
  text = text.substr(0, text.find('\0'));
  if (text == "-" || text == "+") {
    if (strict) return false;
    *id = text == "-" ? StreamId{} : StreamId{UINT64_MAX, UINT64_MAX};
    return true;
  }
  const size_t dash = text.find('-');
  id->seq = missing_seq;
  return ParseIdPart(text.substr(0, dash), &id->ms) &&
         (dash == std::string_view::npos || ParseIdPart(text.substr(dash + 1), &id->seq));
}

// An XRANGE bound: an ID, or "(" and a strict ID for an exclusive one (so
// "(-" and "(+" are not bounds, as in Redis).
bool ParseIntervalId(std::string_view text, uint64_t missing_seq, StreamId* id,
                     bool* exclusive) {
  *exclusive = text.size() > 1 && text.front() == '(';
  return ParseStreamId(*exclusive ? text.substr(1) : text, *exclusive, missing_seq, id);
}

// The next / previous ID (Redis's streamIncrID / streamDecrID); false past the
// largest / before the least.
bool IncrementId(StreamId* id) {
  if (id->seq != UINT64_MAX) return ++id->seq, true;
  if (id->ms == UINT64_MAX) return false;
  *id = StreamId{id->ms + 1, 0};
  return true;
}
bool DecrementId(StreamId* id) {
  if (id->seq != 0) return --id->seq, true;
  if (id->ms == 0) return false;
  *id = StreamId{id->ms - 1, UINT64_MAX};
  return true;
}

std::string IdOf(uint64_t seq) { return std::to_string(seq) + "-0"; }

bool WrongStream(CommandContext& ctx, std::string_view key) {
  if (key == kStream) return false;
  ctx.out->Error("ERR prefixkv has one stream, " + std::string(kStream) + ", not " +
                 Quoted(key));
  return true;
}

void ReplyEntry(const KvEvent& e, ReplyBuffer* out) {
  out->ArrayHeader(2);
  out->Bulk(IdOf(e.seq));
  out->ArrayHeader(2 * kFieldPairs);
  const auto field = [out](std::string_view name, std::string_view value) {
    out->Bulk(name);
    out->Bulk(value);
  };
  field("kind", KvEventKindName(e.kind));
  field("reason", KvRemoveReasonName(e.reason));
  field("tier", TierLevelName(e.tier));
  field("from", TierLevelName(e.from));
  field("copy_remains", e.copy_remains ? "1" : "0");
  field("owner", std::to_string(e.owner));
  field("namespace", e.namespace_id.ToHex());
  field("key", e.key.ToHex());
  field("parent", e.parent.ToHex());
  field("bytes", std::to_string(e.bytes));
  field("unix_ms", std::to_string(e.unix_ms));
}

void ReplyEntries(const std::vector<KvEvent>& events, ReplyBuffer* out) {
  out->ArrayHeader(events.size());
  for (const KvEvent& e : events) ReplyEntry(e, out);
}

// "COUNT n" at args[i], i+1, read as Redis reads it (a negative n is 0);
// false (with the error replied) when malformed.
bool ParseCount(CommandContext& ctx, size_t i, uint64_t* n) {
  const std::string_view s = ctx.arg(i + 1);
  int64_t v = 0;
  if (!ParseRedisInteger(s, &v)) {
    ctx.out->Error("ERR value is not an integer or out of range");
    return false;
  }
  *n = v < 0 ? 0 : static_cast<uint64_t>(v);
  return true;
}

// The entries a reply holds at most for COUNT n (0: no limit, as without
// COUNT).
size_t Capped(uint64_t n) {
  return n == 0 ? kDefaultCount
                : static_cast<size_t>(std::min<uint64_t>(n, kDefaultCount));
}

// XRANGE / XREVRANGE key a b [COUNT n]: `first`/`last` are the bounds in
// seq order.
void Range(CommandContext& ctx, bool reverse) {
  if (WrongStream(ctx, ctx.arg(1))) return;
  // As Redis: the start is read (and stepped past when exclusive), then the
  // end, each error in that order, then COUNT.
  StreamId lo, hi;
  bool lo_open = false, hi_open = false;
  if (!ParseIntervalId(ctx.arg(reverse ? 3 : 2), 0, &lo, &lo_open)) {
    return ctx.out->Error("ERR Invalid stream ID specified as stream command argument");
  }
  if (lo_open && !IncrementId(&lo)) {
    return ctx.out->Error("ERR invalid start ID for the interval");
  }
  if (!ParseIntervalId(ctx.arg(reverse ? 2 : 3), UINT64_MAX, &hi, &hi_open)) {
    return ctx.out->Error("ERR Invalid stream ID specified as stream command argument");
  }
  if (hi_open && !DecrementId(&hi)) {
    return ctx.out->Error("ERR invalid end ID for the interval");
  }
  // The entries <seq>-0 in [lo, hi]: from lo.ms, or the one after it when lo
  // lies past lo.ms-0 (none after the largest), to hi.ms.
  const bool past_max = lo.seq != 0 && lo.ms == UINT64_MAX;
  const uint64_t first = lo.seq == 0 || past_max ? lo.ms : lo.ms + 1;
  const uint64_t last = hi.ms;
  std::optional<uint64_t> count;
  for (size_t i = 4; i < ctx.args.size(); i += 2) {
    if (Lower(ctx.arg(i)) != "count" || i + 1 >= ctx.args.size()) {
      return ctx.out->Error("ERR syntax error");
    }
    count.emplace();
    if (!ParseCount(ctx, i, &*count)) return;
  }
  // COUNT 0 asks for no entry: Redis answers a null array (not, as XREAD's
  // COUNT 0, every entry).
  if (count == 0) return ctx.out->NullArray();
  if (past_max || first > last) return ctx.out->ArrayHeader(0);
  StatusOr<std::vector<KvEvent>> events = ctx.dispatcher.engine()->EventRange(
      first, last, count.has_value() ? Capped(*count) : kDefaultCount, reverse);
  if (!events.ok()) return ReplyStatus(events.status(), ctx.out);
  ReplyEntries(*events, ctx.out);
}

}  // namespace

bool ReplyStreamRead(Engine* engine, uint64_t from_seq, size_t count, bool final,
                     ReplyBuffer* out) {
  StatusOr<KvEventPage> page = engine->Events(from_seq, count);
  if (!page.ok()) {
    if (page.status().IsOutOfRange()) {
      out->Error("RESNAPSHOT " + page.status().message());
    } else {
      ReplyStatus(page.status(), out);
    }
    return true;
  }
  if (page->events.empty()) {
    if (final) out->NullArray();
    return final;
  }
  out->ArrayHeader(1);
  out->ArrayHeader(2);
  out->Bulk(kStream);
  ReplyEntries(page->events, out);
  return true;
}

// XREAD [COUNT n] [BLOCK ms] STREAMS prefixkv:events <id>
void CmdXread(CommandContext& ctx) {
  size_t count = kDefaultCount;
  std::optional<uint64_t> block_ms;
  size_t i = 1;
  for (; i < ctx.args.size(); i += 2) {
    const std::string word = Lower(ctx.arg(i));
    if (word == "streams") break;
    if (i + 1 >= ctx.args.size()) return ctx.out->Error("ERR syntax error");
    if (word == "count") {
      uint64_t n = 0;
      if (!ParseCount(ctx, i, &n)) return;
      count = Capped(n);
    } else if (word == "block") {
      int64_t ms = 0;
      if (!ParseRedisInteger(ctx.arg(i + 1), &ms)) {
        return ctx.out->Error("ERR timeout is not an integer or out of range");
      }
      if (ms < 0) return ctx.out->Error("ERR timeout is negative");
      block_ms = static_cast<uint64_t>(ms);
    } else {
      return ctx.out->Error("ERR syntax error");
    }
  }
  if (i + 3 != ctx.args.size()) {
    return ctx.out->Error(i + 3 > ctx.args.size() || (ctx.args.size() - i - 1) % 2 != 0
                              ? "ERR Unbalanced 'xread' list of streams: for each stream "
                                "key an ID or '$' must be specified."
                              : "ERR prefixkv has one stream, " + std::string(kStream));
  }
  if (WrongStream(ctx, ctx.arg(i + 1))) return;
  const std::string_view id = ctx.arg(i + 2);
  uint64_t last_seen = 0;
  StreamId after;
  if (id == "$") {
    last_seen = ctx.dispatcher.engine()->EventLogStats().head_seq;
  } else if (ParseStreamId(id, /*strict=*/true, 0, &after)) {
    last_seen = after.ms;  // every <seq>-0 after <ms>-<n> has seq > ms
  } else {
    return ctx.out->Error("ERR Invalid stream ID specified as stream command argument");
  }
  if (last_seen == UINT64_MAX) {
    // No seq follows the largest: beyond the head, as any ID there (its next
    // seq would wrap to 0 and replay the log from its start as new events).
    return ctx.out->Error("RESNAPSHOT the event log cannot continue after seq " +
                          std::to_string(last_seen) + " (beyond its head): resnapshot");
  }
  // Inside EXEC a BLOCK does not block (as in Redis).
  const bool may_block = block_ms.has_value() && !ctx.client->in_exec;
  if (ReplyStreamRead(ctx.dispatcher.engine(), last_seen + 1, count, !may_block,
                      ctx.out)) {
    return;
  }
  ctx.client->block =
      BlockedRead{.from_seq = last_seen + 1, .count = count, .timeout_ms = *block_ms};
}

void CmdXrange(CommandContext& ctx) { Range(ctx, /*reverse=*/false); }
void CmdXrevrange(CommandContext& ctx) { Range(ctx, /*reverse=*/true); }

void CmdXlen(CommandContext& ctx) {
  if (WrongStream(ctx, ctx.arg(1))) return;
  ctx.out->Integer(static_cast<int64_t>(ctx.dispatcher.engine()->EventLogStats().events));
}

// XINFO STREAM prefixkv:events: Redis' fields (no consumer groups, no
// deletions) and the log's retention.
void CmdXinfo(CommandContext& ctx) {
  if (Lower(ctx.arg(1)) != "stream" || ctx.args.size() != 3) {
    return ctx.out->Error("ERR prefixkv supports XINFO STREAM " + std::string(kStream));
  }
  if (WrongStream(ctx, ctx.arg(2))) return;
  Engine* engine = ctx.dispatcher.engine();
  const KvEventLogStats s = engine->EventLogStats();
  const auto entry = [&](uint64_t seq) {
    StatusOr<std::vector<KvEvent>> e = engine->EventRange(seq, seq, 1, false);
    if (seq == 0 || !e.ok() || e->empty()) return ctx.out->Null();
    ReplyEntry(e->front(), ctx.out);
  };
  ctx.out->ArrayHeader(2 * 14);
  const auto number = [&](std::string_view name, uint64_t v) {
    ctx.out->Bulk(name);
    ctx.out->Integer(static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)));
  };
  const auto id = [&](std::string_view name, uint64_t seq) {
    ctx.out->Bulk(name);
    ctx.out->Bulk(IdOf(seq));
  };
  number("length", s.events);
  number("radix-tree-keys", 0);
  number("radix-tree-nodes", 0);
  id("last-generated-id", s.head_seq);
  id("max-deleted-entry-id", s.first_seq > 0 ? s.first_seq - 1 : 0);
  number("entries-added", s.appended);
  id("recorded-first-entry-id", s.first_seq);
  number("groups", 0);
  ctx.out->Bulk("first-entry");
  entry(s.first_seq);
  ctx.out->Bulk("last-entry");
  entry(s.head_seq);
  number("retention-bytes", s.retention_bytes);
  number("retention-ms", s.retention_ms);
  number("bytes", s.bytes);
  number("persistent", s.persistent ? 1 : 0);
}

// PKV.SNAPSHOT [cursor [COUNT n]]: the bootstrap of a stream consumer
// (Engine::EventSnapshot): ["id", "<seq>-0", "hot", blocks, "ssd", blocks],
// each block [key, parent, namespace, owner, bytes]; the consumer goes on
// with XREAD ... STREAMS prefixkv:events <seq>-0. With a cursor, one page
// (Engine::EventSnapshotPage): ["id", "<seq>-0", "cursor", "<next>", "hot",
// blocks, "ssd", blocks], next "0" after the last page; the consumer goes on
// with XREAD from the FIRST page's ID.
void CmdPkvSnapshot(CommandContext& ctx) {
  const bool paged = ctx.args.size() > 1;
  uint64_t cursor = 0;
  size_t count = kDefaultCount;
  // A cursor is one this command answered: decimal without a sign or a
  // leading zero, as Redis's integers ("007" is not 7).
  if (paged && (!ParseU64(ctx.arg(1), &cursor) || std::to_string(cursor) != ctx.arg(1))) {
    return ctx.out->Error("ERR invalid cursor");
  }
  for (size_t i = 2; i < ctx.args.size(); i += 2) {
    if (Lower(ctx.arg(i)) != "count" || i + 1 >= ctx.args.size()) {
      return ctx.out->Error("ERR syntax error");
    }
    uint64_t n = 0;
    if (!ParseCount(ctx, i, &n)) return;
    count = Capped(n);
  }
  StatusOr<KvEventSnapshot> snap =
      paged ? ctx.dispatcher.engine()->EventSnapshotPage(cursor, count)
            : ctx.dispatcher.engine()->EventSnapshot();
  if (!snap.ok()) return ReplyStatus(snap.status(), ctx.out);
  const auto blocks = [&](std::string_view tier, const std::vector<KvSnapshotBlock>& bs) {
    ctx.out->Bulk(tier);
    ctx.out->ArrayHeader(bs.size());
    for (const KvSnapshotBlock& b : bs) {
      ctx.out->ArrayHeader(5);
      ctx.out->Bulk(b.key.ToHex());
      ctx.out->Bulk(b.parent.ToHex());
      ctx.out->Bulk(b.namespace_id.ToHex());
      ctx.out->Integer(static_cast<int64_t>(b.owner));
      ctx.out->Integer(static_cast<int64_t>(std::min<uint64_t>(b.bytes, INT64_MAX)));
    }
  };
  ctx.out->ArrayHeader(paged ? 8 : 6);
  ctx.out->Bulk("id");
  ctx.out->Bulk(IdOf(snap->seq));
  if (paged) {
    ctx.out->Bulk("cursor");
    ctx.out->Bulk(std::to_string(snap->next_cursor));
  }
  blocks("hot", snap->hot);
  blocks("ssd", snap->ssd);
}

}  // namespace prefixkv::server
