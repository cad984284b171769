// Raw-key commands: GET, SET, DEL (UNLINK), EXISTS, MGET, MSET, DBSIZE,
// FLUSHDB (FLUSHALL), TTL, PTTL, PERSIST, TYPE, over the engine's
// key-value space (Engine::GetValue...: its own hot-budget owner "values" over
// the shared SSD tier, keys apart from every model's blocks). The engine's
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

}  // namespace

void CmdGet(CommandContext& ctx) { ReplyValue(ctx, ctx.arg(1)); }

// SET key value. Expiry and condition options (EX, NX...) are not supported:
// this is a cache whose eviction is by capacity, not by time.
void CmdSet(CommandContext& ctx) {
  if (ctx.args.size() != 3) return ctx.out->Error("ERR syntax error");
  Status s = ctx.dispatcher.engine()->PutValue(ctx.arg(1), DetachArg(ctx.args[2]));
  if (!s.ok()) return ReplyStatus(s, ctx.out);
  ctx.out->Simple("OK");
}

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
// (Engine::CountValues: walks both indexes).
void CmdDbsize(CommandContext& ctx) {
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

// Values never expire: TTL / PTTL answer -1 for a key (no expiry) and -2 for
// a missing one, PERSIST 0 (nothing to remove), TYPE "string" or "none".
void CmdTtl(CommandContext& ctx) {
  ctx.out->Integer(ctx.dispatcher.engine()->ContainsValue(ctx.arg(1)) ? -1 : -2);
}
void CmdPersist(CommandContext& ctx) { ctx.out->Integer(0); }
void CmdType(CommandContext& ctx) {
  ctx.out->Simple(ctx.dispatcher.engine()->ContainsValue(ctx.arg(1)) ? "string" : "none");
}

// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: refused, not accepted and ignored (a
// client would count on the key going away).
void CmdExpire(CommandContext& ctx) {
  ctx.out->Error("ERR " + Lower(ctx.arg(0)) +
                 " is not supported: prefixkv values do not expire (the cache is "
                 "bounded by capacity, and evicts the least recently used)");
}

// SCAN and KEYS would list key names, which are not stored: a raw key lives
// under a hash of its name (docs/protocol.md, "Raw keys").
void CmdScan(CommandContext& ctx) {
  ctx.out->Error("ERR " + Lower(ctx.arg(0)) +
                 " is not supported: prefixkv stores a raw key under a hash of its "
                 "name, not the name, so it cannot list key names");
}

// Like Redis, a key named twice is counted twice.
void CmdExists(CommandContext& ctx) {
  int64_t n = 0;
  for (size_t i = 1; i < ctx.args.size(); ++i) {
    n += ctx.dispatcher.engine()->ContainsValue(ctx.arg(i)) ? 1 : 0;
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
// leaves the earlier pairs stored and reports the error).
void CmdMset(CommandContext& ctx) {
  if (ctx.args.size() % 2 != 1) {
    return ctx.out->Error("ERR wrong number of arguments for 'mset' command");
  }
  for (size_t i = 1; i + 1 < ctx.args.size(); i += 2) {
    Status s = ctx.dispatcher.engine()->PutValue(ctx.arg(i), DetachArg(ctx.args[i + 1]));
    if (!s.ok()) return ReplyStatus(s, ctx.out);
  }
  ctx.out->Simple("OK");
}

}  // namespace prefixkv::server
