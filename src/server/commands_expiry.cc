// Expiry on raw keys: SET with its options (NX, XX, GET, EX, PX, EXAT, PXAT,
// KEEPTTL), EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT with NX, XX, GT, LT,
// TTL / PTTL, EXPIRETIME / PEXPIRETIME and PERSIST. The engine keeps the expiry with the
// value (Engine::SetValue, SetValueExpiry) in Unix milliseconds of its clock; the replies
// and error texts are Redis 7's (docs/protocol.md, "Expiry").
#include <limits>

#include "commands.h"

namespace prefixkv::server {
namespace {

constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";

// An absolute expiry in Unix ms from a command's time argument, as Redis
// computes it: `unit_ms` (1000 for seconds) times `value`, plus now unless
// `absolute`. False on overflow (of that product or sum only: any int64 of
// milliseconds is a time). A time at or before the epoch becomes 1 (in the
// past: 0 would mean "never").
bool ExpiryTime(int64_t value, int64_t unit_ms, bool absolute, uint64_t now_ms,
                uint64_t* at_ms) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (value > kMax / unit_ms || value < kMin / unit_ms) return false;
  int64_t at = value * unit_ms;
  if (!absolute) {
    if (at > kMax - static_cast<int64_t>(now_ms)) return false;
    at += static_cast<int64_t>(now_ms);
  }
  *at_ms = at <= 0 ? 1 : static_cast<uint64_t>(at);
  return true;
}

// SET's options after the value; an error text, or "" when they parse. As
// Redis 7 reads them: every option first (a syntax error wins), an option
// given twice takes its last value (EX 10 EX 20 is EX 20; only two different
// times, or a time and KEEPTTL, or NX and XX, conflict), and then the time's
// number is checked.
std::string ParseSetOptions(CommandContext& ctx, SetValueOptions* o) {
  using Condition = SetValueOptions::Condition;
  std::string time_unit;  // "ex", "px", "exat" or "pxat" once given
  std::string_view time_arg;
  for (size_t i = 3; i < ctx.args.size(); ++i) {
    const std::string opt = Lower(ctx.arg(i));
    const bool timed = opt == "ex" || opt == "px" || opt == "exat" || opt == "pxat";
    if (opt == "nx" || opt == "xx") {
      const Condition c = opt == "nx" ? Condition::kIfAbsent : Condition::kIfPresent;
      if (o->condition != Condition::kAlways && o->condition != c) {
        return "ERR syntax error";
      }
      o->condition = c;
    } else if (opt == "get") {
      o->return_old = true;
    } else if (opt == "keepttl") {
      if (!time_unit.empty()) return "ERR syntax error";
      o->keep_ttl = true;
    } else if (timed) {
      if (o->keep_ttl || (!time_unit.empty() && time_unit != opt) ||
          i + 1 >= ctx.args.size()) {
        return "ERR syntax error";
      }
      time_unit = opt;
      time_arg = ctx.arg(++i);
    } else {
      return "ERR syntax error";
    }
  }
  if (time_unit.empty()) return "";
  int64_t value = 0;
  if (!ParseRedisInteger(time_arg, &value)) return std::string(kNotInteger);
  const bool seconds = time_unit == "ex" || time_unit == "exat";
  const uint64_t now_ms = ctx.dispatcher.engine()->clock()->UnixMillis();
  if (value <= 0 || !ExpiryTime(value, seconds ? 1000 : 1, time_unit.size() == 4, now_ms,
                                &o->expires_at_unix_ms)) {
    return "ERR invalid expire time in 'set' command";
  }
  return "";
}

void ReplyTtl(CommandContext& ctx, bool millis) {
  StatusOr<int64_t> ttl = ctx.dispatcher.engine()->ValueTtlMillis(ctx.arg(1));
  if (!ttl.ok()) return ReplyStatus(ttl.status(), ctx.out);
  // As Redis: TTL rounds the milliseconds left to the nearest second.
  ctx.out->Integer(millis || *ttl < 0 ? *ttl : (*ttl + 500) / 1000);
}

// EXPIRE's NX | XX | GT | LT, with Redis' checks of their combinations.
std::string ParseExpiryCondition(CommandContext& ctx, ExpiryCondition* c) {
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t i = 3; i < ctx.args.size(); ++i) {
    const std::string opt = Lower(ctx.arg(i));
    bool* flag = opt == "nx"   ? &nx
                 : opt == "xx" ? &xx
                 : opt == "gt" ? &gt
                 : opt == "lt" ? &lt
                               : nullptr;
    if (flag == nullptr) return "ERR Unsupported option " + std::string(ctx.arg(i));
    *flag = true;
  }
  if (nx && (xx || gt || lt)) {
    return "ERR NX and XX, GT or LT options at the same time are not compatible";
  }
  if (gt && lt) return "ERR GT and LT options at the same time are not compatible";
  // GT implies XX (no expiry is later than any time); LT does not.
  *c = nx         ? ExpiryCondition::kIfNone
       : gt       ? ExpiryCondition::kIfLater
       : lt && xx ? ExpiryCondition::kIfSetAndEarlier
       : lt       ? ExpiryCondition::kIfEarlier
       : xx       ? ExpiryCondition::kIfSet
                  : ExpiryCondition::kAlways;
  return "";
}

}  // namespace

// SET key value [NX | XX] [GET] [EX s | PX ms | EXAT unix-s | PXAT unix-ms |
// KEEPTTL]: +OK, or nil when NX / XX did not hold; with GET the old value
// (or nil) instead, whether or not it was replaced.
void CmdSet(CommandContext& ctx) {
  SetValueOptions options;
  if (std::string error = ParseSetOptions(ctx, &options); !error.empty()) {
    return ctx.out->Error(error);
  }
  StatusOr<SetValueResult> r =
      ctx.dispatcher.engine()->SetValue(ctx.arg(1), DetachArg(ctx.args[2]), options);
  if (!r.ok()) return ReplyStatus(r.status(), ctx.out);
  if (options.return_old) {
    if (r->old.has_value()) return ctx.out->Bulk(*r->old);
    return ctx.out->Null();
  }
  if (!r->written) return ctx.out->Null();
  ctx.out->Simple("OK");
}

// EXPIRE key seconds, PEXPIRE key ms, EXPIREAT key unix-s, PEXPIREAT key
// unix-ms, each [NX | XX | GT | LT]: 1 when the expiry was set (a time in
// the past removes the key), 0 when the key is absent or the condition fails.
void CmdExpire(CommandContext& ctx) {
  const std::string name = Lower(ctx.arg(0));
  ExpiryCondition condition = ExpiryCondition::kAlways;
  if (std::string error = ParseExpiryCondition(ctx, &condition); !error.empty()) {
    return ctx.out->Error(error);
  }
  int64_t value = 0;
  if (!ParseRedisInteger(ctx.arg(2), &value)) return ctx.out->Error(kNotInteger);
  const bool millis = name[0] == 'p';
  const bool absolute = name.size() > 2 && name.substr(name.size() - 2) == "at";
  uint64_t at_ms = 0;
  if (!ExpiryTime(value, millis ? 1 : 1000, absolute,
                  ctx.dispatcher.engine()->clock()->UnixMillis(), &at_ms)) {
    return ctx.out->Error("ERR invalid expire time in '" + name + "' command");
  }
  StatusOr<bool> changed =
      ctx.dispatcher.engine()->SetValueExpiry(ctx.arg(1), at_ms, condition);
  if (!changed.ok()) return ReplyStatus(changed.status(), ctx.out);
  ctx.out->Integer(*changed ? 1 : 0);
}

// TTL: seconds left (rounded), PTTL: milliseconds; -1 without expiry, -2 for
// an absent (or expired) key.
void CmdTtl(CommandContext& ctx) { ReplyTtl(ctx, Lower(ctx.arg(0)) == "pttl"); }

// EXPIRETIME: the Unix time in seconds (rounded, as Redis 7 rounds it) at which
// the key expires, PEXPIRETIME in milliseconds; -1 without expiry, -2 for an
// absent (or expired) key.
void CmdExpireTime(CommandContext& ctx) {
  StatusOr<int64_t> at = ctx.dispatcher.engine()->ValueExpiresAtMillis(ctx.arg(1));
  if (!at.ok()) return ReplyStatus(at.status(), ctx.out);
  const bool millis = Lower(ctx.arg(0)) == "pexpiretime";
  ctx.out->Integer(millis || *at < 0 ? *at : (*at + 500) / 1000);
}

// PERSIST: 1 when it removed an expiry, 0 otherwise.
void CmdPersist(CommandContext& ctx) {
  StatusOr<bool> changed = ctx.dispatcher.engine()->SetValueExpiry(ctx.arg(1), 0);
  if (!changed.ok()) return ReplyStatus(changed.status(), ctx.out);
  ctx.out->Integer(*changed ? 1 : 0);
}

}  // namespace prefixkv::server
