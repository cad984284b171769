// Raw-key commands: GET, DEL (UNLINK), EXISTS, MGET, MSET, DBSIZE, FLUSHDB
// (FLUSHALL), TYPE, over the engine's
// key-value space (Engine::GetValue...: its own hot-budget owner "values" over
// the shared SSD tier, keys apart from every model's blocks); SET and the
// expiry commands are in commands_expiry.cc, SCAN and KEYS in
// commands_scan.cc. The engine's
// tier stack serialises the operations of one key, so a value read from SSD
// and promoted never overwrites one stored meanwhile.
#include "commands.h"

namespace prefixkv::server {
namespace {

// Appends the value of `key` (or a null) to the reply; false after an error reply.
bool ReplyValue(CommandContext& ctx, std::string_view key) {
  StatusOr<SharedBytes> value = ctx.dispatcher.engine()->GetValue(key);
  if (value.ok()) {
    ctx.out->Bulk(*value);
  } else if (value.status().IsNotFound()) {
    ctx.out->Null();
  } else {
    ReplyStatus(value.status(), ctx.out);
    return false;
  }
  return true;
}

// Whether `key` is present (ValueTtlMillis, not ContainsValue: a key whose
// record cannot be read is an error, not absent).
StatusOr<bool> KeyPresent(CommandContext& ctx, std::string_view key) {
  PKV_ASSIGN_OR_RETURN(int64_t ttl, ctx.dispatcher.engine()->ValueTtlMillis(key));
  return ttl != -2;
}

}  // namespace

void CmdGet(CommandContext& ctx) { ReplyValue(ctx, ctx.arg(1)); }

void CmdDel(CommandContext& ctx) {
  int64_t removed = 0;
  for (size_t i = 1; i < ctx.args.size(); ++i) {
    StatusOr<bool> r = ctx.dispatcher.engine()->DeleteValue(ctx.arg(i));
    if (!r.ok()) return ReplyStatus(r.status(), ctx.out);
    removed += *r ? 1 : 0;
  }
  ctx.out->Integer(removed);
}

// DBSIZE: the raw keys, each counted once whatever tiers hold it
// (Engine::CountValues: walks both indexes), after removing up to
// kDbsizeSweep expired ones; as in Redis, an expired key not yet removed
// still counts.
void CmdDbsize(CommandContext& ctx) {
  constexpr size_t kDbsizeSweep = 1000;
  StatusOr<uint64_t> swept = ctx.dispatcher.engine()->RemoveExpiredValues(kDbsizeSweep);
  if (!swept.ok()) return ReplyStatus(swept.status(), ctx.out);
  StatusOr<uint64_t> n = ctx.dispatcher.engine()->CountValues();
  if (!n.ok()) return ReplyStatus(n.status(), ctx.out);
  ctx.out->Integer(static_cast<int64_t>(*n));
}

// FLUSHDB / FLUSHALL [ASYNC | SYNC]: an admin command that removes every raw
// key (the only Redis database); blocks of registered models stay. It runs
// alone (CommandSpec::exclusive), so no SET lands in the middle of it; ASYNC
// is accepted and runs synchronously.
void CmdFlushdb(CommandContext& ctx) {
  if (ctx.args.size() > 2) return ctx.out->Error("ERR syntax error");
  if (ctx.args.size() == 2) {
    const std::string mode = Lower(ctx.arg(1));
    if (mode != "async" && mode != "sync") return ctx.out->Error("ERR syntax error");
  }
  StatusOr<uint64_t> removed = ctx.dispatcher.engine()->ClearValues();
  if (!removed.ok()) return ReplyStatus(removed.status(), ctx.out);
  ctx.out->Simple("OK");
}

// TYPE: "string" for a raw key (an expired one is absent), "none" otherwise.
void CmdType(CommandContext& ctx) {
  StatusOr<bool> present = KeyPresent(ctx, ctx.arg(1));
  if (!present.ok()) return ReplyStatus(present.status(), ctx.out);
  ctx.out->Simple(*present ? "string" : "none");
}

// Like Redis, a key named twice is counted twice.
void CmdExists(CommandContext& ctx) {
  int64_t n = 0;
  for (size_t i = 1; i < ctx.args.size(); ++i) {
    StatusOr<bool> present = KeyPresent(ctx, ctx.arg(i));
    if (!present.ok()) return ReplyStatus(present.status(), ctx.out);
    n += *present ? 1 : 0;
  }
  ctx.out->Integer(n);
}

void CmdMget(CommandContext& ctx) {
  // Fetch first so that a failing tier yields one error instead of a torn array.
  std::vector<StatusOr<SharedBytes>> values;
  values.reserve(ctx.args.size() - 1);
  for (size_t i = 1; i < ctx.args.size(); ++i) {
    values.push_back(ctx.dispatcher.engine()->GetValue(ctx.arg(i)));
    const Status& s = values.back().status();
    if (!s.ok() && !s.IsNotFound()) return ReplyStatus(s, ctx.out);
  }
  ctx.out->ArrayHeader(values.size());
  for (const auto& v : values) {
    if (v.ok()) {
      ctx.out->Bulk(*v);
    } else {
      ctx.out->Null();
    }
  }
}

// MSET stores pairs in order; it is not atomic across keys (a failing tier
// leaves the earlier pairs stored and reports the error). A key the engine
// refuses as a name refuses the whole command before any pair is stored.
void CmdMset(CommandContext& ctx) {
  if (ctx.args.size() % 2 != 1) {
    return ctx.out->Error("ERR wrong number of arguments for 'mset' command");
  }
  for (size_t i = 1; i + 1 < ctx.args.size(); i += 2) {
    Status s = Engine::CheckValueKey(ctx.arg(i));
    if (!s.ok()) return ReplyStatus(s, ctx.out);
  }
  for (size_t i = 1; i + 1 < ctx.args.size(); i += 2) {
    Status s = ctx.dispatcher.engine()->PutValue(ctx.arg(i), DetachArg(ctx.args[i + 1]));
    if (!s.ok()) return ReplyStatus(s, ctx.out);
  }
  ctx.out->Simple("OK");
}

}  // namespace prefixkv::server
