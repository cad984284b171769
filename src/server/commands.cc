// The command table, dispatch (lookup, AUTH gate, arity) and the connection
// commands: PING, ECHO, AUTH, HELLO, QUIT, SELECT, COMMAND, CONFIG.
#include "commands.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "auth_throttle.h"
#include "command_stats.h"
#include "glob.h"
#include "prefixkv/version.h"

namespace prefixkv::server {
namespace {

constexpr std::string_view kNoAuth = "NOAUTH Authentication required.";
constexpr std::string_view kWrongPass =
    "WRONGPASS invalid username-password pair or user is disabled.";

constexpr std::string_view kAdminOff =
    "ERR admin commands are off: start the server with an admin password "
    "(--admin-pass-file or PREFIXKV_ADMIN_PASS)";
constexpr std::string_view kNoPerm =
    "NOPERM this is an admin command: AUTH admin <admin password> first";

// Redis's text (processCommand): the name, then each argument quoted while
// the list is under 128 bytes (the last cut to fit), every word read as a C
// string (up to a NUL) and the name cut at 128 bytes; CR and LF become spaces
// (ReplyBuffer::Error, as rejectCommandFormat).
void UnknownCommand(const RespArgs& args, ReplyBuffer* out) {
  constexpr size_t kMax = 128;
  const auto c_string = [](std::string_view s) { return s.substr(0, s.find('\0')); };
  std::string list;
  for (size_t i = 1; i < args.size() && list.size() < kMax; ++i) {
    list += '\'';
    list += c_string(args[i].view()).substr(0, kMax - list.size() + 1);
    list += "' ";
  }
  out->Error("ERR unknown command '" +
             std::string(c_string(args[0].view()).substr(0, kMax)) +
             "', with args beginning with: " + list);
}

// A failed or refused AUTH counts; the max_auth_failures-th closes the
// connection after its reply.
void CountAuthFailure(CommandContext& ctx) {
  const DispatcherConfig& config = ctx.dispatcher.config();
  if (config.max_auth_failures != 0 &&
      ctx.client->auth_failures + ctx.client->auth_throttled >=
          config.max_auth_failures) {
    ctx.client->close_requested = true;
  }
}

enum class AuthOutcome { kOk, kWrong, kThrottled };

// Checks `pass` for `user` ("default": requirepass, "admin": admin_pass) and
// records the outcome in the client: a success authenticates it as that user
// (an admin or not), a failure counts and changes nothing else. Past the server-wide
// budget (AuthThrottle) the password is not compared and the attempt counts as refused.
// Appends the error reply of a failure; the caller replies to a success.
AuthOutcome CheckPassword(CommandContext& ctx, std::string_view user,
                          std::string_view pass) {
  const DispatcherConfig& config = ctx.dispatcher.config();
  AuthThrottle* throttle = config.auth_throttle;
  if (throttle != nullptr && !throttle->TryAcquire()) {
    ++ctx.client->auth_throttled;
    CountAuthFailure(ctx);
    ctx.out->Error(
        "ERR too many failed AUTH attempts on this server: the password was not "
        "checked; retry in " +
        std::to_string(throttle->RetryAfterMs()) + " ms");
    return AuthOutcome::kThrottled;
  }
  const bool admin = user == "admin";
  const std::string& expected = admin ? config.admin_pass : config.requirepass;
  // Without a password the default user takes any (Redis's "nopass"): a
  // client configured with a username and password (redis-py's
  // Redis(username=, password=) sends AUTH default <password>) connects to
  // such a server as to Redis, where it was refused WRONGPASS here.
  const bool open_default = user == "default" && config.requirepass.empty();
  // An unknown user or an unset password compares too, so that failures all
  // take the same time.
  const bool ok = open_default || (PasswordMatches(pass, expected) && !expected.empty() &&
                                   (admin || user == "default"));
  if (ok) {
    if (throttle != nullptr) throttle->Refund();  // only failures spend the budget
    ctx.client->authenticated = true;
    // The connection is now this user's, as AUTH switches users in Redis: an
    // admin that authenticates as default is no longer an admin.
    ctx.client->admin = admin;
    return AuthOutcome::kOk;
  }
  ++ctx.client->auth_failures;
  CountAuthFailure(ctx);
  ctx.out->Error(kWrongPass);
  return AuthOutcome::kWrong;
}

// Adds one to a counter (if any) when it goes out of scope.
class CountOnExit {
 public:
  explicit CountOnExit(std::atomic<uint64_t>* counter) : counter_(counter) {}
  CountOnExit(const CountOnExit&) = delete;
  CountOnExit& operator=(const CountOnExit&) = delete;
  ~CountOnExit() {
    if (counter_ != nullptr) counter_->fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t>* counter_;
};

void ReplyCommandSpec(const CommandSpec& spec, ReplyBuffer* out) {
  out->ArrayHeader(6);
  out->Bulk(spec.name);
  out->Integer(spec.arity);
  out->ArrayHeader(1 + (spec.before_auth ? 1 : 0) + (spec.admin ? 1 : 0));
  out->Simple(spec.write ? "write" : "readonly");
  if (spec.before_auth) out->Simple("no_auth");
  if (spec.admin) out->Simple("admin");
  out->Integer(spec.first_key);
  out->Integer(spec.last_key);
  out->Integer(spec.key_step);
}

}  // namespace

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ParseRedisInteger(std::string_view s, int64_t* value) {
  const std::string_view digits = s.starts_with('-') ? s.substr(1) : s;
  if (digits.empty() || digits.front() < '0' || digits.front() > '9') return false;
  if (digits.front() == '0' && s != "0") return false;  // "01", "-0", "00"
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *value);
  return ec == std::errc() && end == s.data() + s.size();
}

// A client-supplied word made safe and short for an error message.
std::string Quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 64))
    out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return out + "'";
}

const std::vector<CommandSpec>& Dispatcher::Table() {
  static const std::vector<CommandSpec> table = {
      {"ping", -1, false, false, 0, 0, 0, CmdPing},
      {"echo", 2, false, false, 0, 0, 0, CmdEcho},
      {"auth", -2, true, false, 0, 0, 0, CmdAuth},
      {"hello", -1, true, false, 0, 0, 0, CmdHello},
      {"quit", -1, true, false, 0, 0, 0, CmdQuit, false, /*immediate_in_multi=*/true},
      {"multi", 1, false, false, 0, 0, 0, CmdMulti, false, true},
      {"exec", 1, false, false, 0, 0, 0, CmdExec, false, true, /*exclusive=*/true},
      {"discard", 1, false, false, 0, 0, 0, CmdDiscard, false, true},
      {"watch", -2, false, false, 1, -1, 1, CmdWatch, false, true},
      {"unwatch", 1, false, false, 0, 0, 0, CmdUnwatch},
      {"select", 2, false, false, 0, 0, 0, CmdSelect},
      {"command", -1, false, false, 0, 0, 0, CmdCommand},
      {"config", -2, false, false, 0, 0, 0, CmdConfig},
      {"client", -2, false, false, 0, 0, 0, CmdClient},
      {"info", -1, false, false, 0, 0, 0, CmdInfo},
      {"get", 2, false, false, 1, 1, 1, CmdGet},
      {"set", -3, false, true, 1, 1, 1, CmdSet},
      {"del", -2, false, true, 1, -1, 1, CmdDel},
      {"unlink", -2, false, true, 1, -1, 1, CmdDel},
      {"dbsize", 1, false, false, 0, 0, 0, CmdDbsize},
      {"flushdb", -1, false, true, 0, 0, 0, CmdFlushdb, true, false, true},
      {"flushall", -1, false, true, 0, 0, 0, CmdFlushdb, true, false, true},
      {"scan", -2, false, false, 0, 0, 0, CmdScan},
      {"keys", 2, false, false, 0, 0, 0, CmdKeys},
      {"ttl", 2, false, false, 1, 1, 1, CmdTtl},
      {"pttl", 2, false, false, 1, 1, 1, CmdTtl},
      {"expiretime", 2, false, false, 1, 1, 1, CmdExpireTime},
      {"pexpiretime", 2, false, false, 1, 1, 1, CmdExpireTime},
      {"persist", 2, false, true, 1, 1, 1, CmdPersist},
      {"type", 2, false, false, 1, 1, 1, CmdType},
      {"expire", -3, false, true, 1, 1, 1, CmdExpire},
      {"pexpire", -3, false, true, 1, 1, 1, CmdExpire},
      {"expireat", -3, false, true, 1, 1, 1, CmdExpire},
      {"pexpireat", -3, false, true, 1, 1, 1, CmdExpire},
      {"exists", -2, false, false, 1, -1, 1, CmdExists},
      {"mget", -2, false, false, 1, -1, 1, CmdMget},
      {"mset", -3, false, true, 1, -1, 2, CmdMset},
      {"pkv.register", -5, false, true, 0, 0, 0, CmdPkvRegister},
      {"pkv.put", -2, false, true, 0, 0, 0, CmdPkvPut},
      {"pkv.get", 3, false, false, 0, 0, 0, CmdPkvGet},
      {"pkv.match", 4, false, false, 0, 0, 0, CmdPkvMatch},
      {"pkv.stats", 1, false, false, 0, 0, 0, CmdPkvStats},
      {"pkv.audit", 1, false, false, 0, 0, 0, CmdPkvAudit, /*admin=*/true},
      {"xread", -4, false, false, 0, 0, 0, CmdXread},
      {"xrange", -4, false, false, 1, 1, 1, CmdXrange},
      {"xrevrange", -4, false, false, 1, 1, 1, CmdXrevrange},
      {"xlen", 2, false, false, 1, 1, 1, CmdXlen},
      {"xinfo", -2, false, false, 0, 0, 0, CmdXinfo},
      {"pkv.snapshot", -1, false, false, 0, 0, 0, CmdPkvSnapshot},
  };
  return table;
}

const CommandSpec* Dispatcher::Find(std::string_view name) {
  // Runs for every command: lowercase on the stack, then a scan of ~35 names
  // (cheaper than hashing a freshly allocated string).
  char buf[16];
  if (name.size() > sizeof(buf)) return nullptr;
  for (size_t i = 0; i < name.size(); ++i) {
    buf[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
  }
  std::string_view lower(buf, name.size());
  for (const CommandSpec& spec : Table()) {
    if (lower == spec.name) return &spec;
  }
  return nullptr;
}

Dispatcher::Dispatcher(Engine* engine, DispatcherConfig config)
    : engine_(engine), config_(std::move(config)) {}

std::string Dispatcher::Refusal(const CommandSpec& spec, const RespArgs& args,
                                const ClientState& client) const {
  if (!client.authenticated && !spec.before_auth) return std::string(kNoAuth);
  if (spec.admin && !client.admin) {
    return std::string(config_.admin_pass.empty() ? kAdminOff : kNoPerm);
  }
  int n = static_cast<int>(std::min<size_t>(args.size(), 1 << 30));
  if ((spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity)) {
    return std::string("ERR wrong number of arguments for '") + spec.name + "' command";
  }
  return "";
}

ClientState Dispatcher::NewClient(std::string addr, std::string laddr) const {
  ClientState client;
  client.authenticated = config_.requirepass.empty();
  client.record = clients_->Add(std::move(addr), std::move(laddr), NowMillis());
  return client;
}

void Dispatcher::Execute(const RespArgs& args, ClientState* client,
                         ReplyBuffer* out) const {
  Dispatch(args, client, out);
  ClientRecord& record = *client->record;
  record.last_command_ms.store(NowMillis(), std::memory_order_relaxed);
  record.multi.store(
      client->in_multi ? static_cast<int64_t>(client->multi_queue.size()) : -1,
      std::memory_order_relaxed);
  record.admin.store(client->admin, std::memory_order_relaxed);
}

void Dispatcher::Dispatch(const RespArgs& args, ClientState* client,
                          ReplyBuffer* out) const {
  if (args.empty()) return out->Error("ERR empty command");  // parsers never send one
  const CommandSpec* spec = Find(args[0].view());
  if (spec != nullptr)
    client->record->last_command.store(spec, std::memory_order_relaxed);
  if (spec == nullptr) {
    if (!client->authenticated) return out->Error(kNoAuth);
    client->multi_dirty = client->in_multi;  // as Redis: EXEC will abort
    return UnknownCommand(args, out);
  }
  if (std::string refusal = Refusal(*spec, args, *client); !refusal.empty()) {
    if (config_.command_stats != nullptr) {
      config_.command_stats->Rejected(static_cast<size_t>(spec - Table().data()));
    }
    client->multi_dirty = client->multi_dirty || client->in_multi;
    return out->Error(refusal);
  }
  if (client->in_multi && !spec->immediate_in_multi) return Queue(args, client, out);
  if (spec->exclusive) {
    WriterLock lock(&exec_mu_);
    return Run(*spec, args, client, out);
  }
  ReaderLock lock(&exec_mu_);
  Run(*spec, args, client, out);
}

void Dispatcher::Run(const CommandSpec& spec, const RespArgs& args, ClientState* client,
                     ReplyBuffer* out) const {
  CommandContext ctx{*this, args, client, out};
  // Once the handler is done, as Redis counts (INFO does not count itself), or
  // left by an exception (a command refused for want of memory counts too).
  CountOnExit processed(config_.commands_processed);
  CommandStatsRecorder* stats = config_.command_stats;
  if (stats == nullptr) return spec.handler(ctx);
  const size_t index = static_cast<size_t>(&spec - Table().data());
  const uint64_t errors_before = out->errors();
  const uint64_t exec_errors_before = client->exec_command_errors;
  const uint64_t start_nanos = config_.clock->NowNanos();
  spec.handler(ctx);
  const uint64_t end_nanos = config_.clock->NowNanos();
  if (client->block.has_value()) {
    // An XREAD that waits: counted once answered (AnswerBlockedRead).
    client->block->stats_index = index;
    client->block->run_nanos = end_nanos > start_nanos ? end_nanos - start_nanos : 0;
    return;
  }
  // As in Redis, an EXEC fails only by its own error (EXECABORT): the errors
  // of the commands it ran are theirs, counted by their own Run.
  const uint64_t own_errors =
      out->errors() - errors_before - (client->exec_command_errors - exec_errors_before);
  stats->Ran(index, end_nanos > start_nanos ? end_nanos - start_nanos : 0,
             own_errors > 0);
}

bool Dispatcher::AnswerBlockedRead(const BlockedRead& read, bool final,
                                   ReplyBuffer* out) const {
  CommandStatsRecorder* stats = config_.command_stats;
  const uint64_t errors_before = out->errors();
  const uint64_t start_nanos = stats != nullptr ? config_.clock->NowNanos() : 0;
  if (!ReplyStreamRead(engine_, read.from_seq, read.count, final, out)) return false;
  if (stats != nullptr && read.stats_index != SIZE_MAX) {
    const uint64_t end_nanos = config_.clock->NowNanos();
    stats->Ran(read.stats_index,
               read.run_nanos + (end_nanos > start_nanos ? end_nanos - start_nanos : 0),
               out->errors() > errors_before);
  }
  return true;
}

bool PasswordMatches(std::string_view given, std::string_view expected) {
  // Every byte of `given` is compared (against `expected` repeated, or a
  // zero byte when it is empty) and the lengths are folded into the result.
  size_t diff = given.size() ^ expected.size();
  for (size_t i = 0; i < given.size(); ++i) {
    const unsigned char e =
        expected.empty() ? 0 : static_cast<unsigned char>(expected[i % expected.size()]);
    diff |= static_cast<unsigned char>(given[i]) ^ e;
  }
  return diff == 0;
}

void ReplyStatus(const Status& status, ReplyBuffer* out) {
  out->Error("ERR " + status.ToString());
}

void CmdPing(CommandContext& ctx) {
  if (ctx.args.size() > 2) {
    ctx.out->Error("ERR wrong number of arguments for 'ping' command");
  } else if (ctx.args.size() == 2) {
    ctx.out->Bulk(ctx.args[1]);
  } else {
    ctx.out->Simple("PONG");
  }
}

void CmdEcho(CommandContext& ctx) { ctx.out->Bulk(ctx.args[1]); }

// AUTH <password> (the default user) or AUTH <user> <password>, where the
// user is "default" (requirepass; any password when none is set, as Redis's
// nopass default user) or "admin" (admin_pass). As Redis: AUTH <password>
// without a requirepass is an error, an unknown user WRONGPASS.
void CmdAuth(CommandContext& ctx) {
  const DispatcherConfig& config = ctx.dispatcher.config();
  if (ctx.args.size() > 3) {
    ctx.out->Error("ERR syntax error");
  } else if (config.requirepass.empty() && ctx.args.size() == 2) {
    ctx.out->Error(
        "ERR AUTH <password> called without any password configured for the default "
        "user. Are you sure your configuration is correct?");
  } else if (CheckPassword(ctx, ctx.args.size() == 3 ? ctx.arg(1) : "default",
                           ctx.arg(ctx.args.size() - 1)) == AuthOutcome::kOk) {
    ctx.out->Simple("OK");
  }
}

void CmdHello(CommandContext& ctx) {
  if (ctx.args.size() >= 2) {
    int64_t proto = 0;
    if (!ParseRespLength(ctx.arg(1), &proto)) {
      return ctx.out->Error("ERR Protocol version is not an integer or out of range");
    }
    if (proto != 2)
      return ctx.out->Error("NOPROTO sorry, this protocol version is not supported.");
  }
  // As Redis: every option is checked before the password, and the name is
  // set only once the client is authenticated.
  std::string_view user, pass, name;
  bool auth = false, setname = false;
  for (size_t i = 2; i < ctx.args.size(); ++i) {
    std::string opt = Lower(ctx.arg(i));
    if (opt == "auth" && i + 2 < ctx.args.size()) {
      user = ctx.arg(i + 1);
      pass = ctx.arg(i + 2);
      auth = true;
      i += 2;
    } else if (opt == "setname" && i + 1 < ctx.args.size()) {
      name = ctx.arg(++i);
      setname = true;
      if (!ValidClientName(name)) return ctx.out->Error(kBadClientName);
    } else {
      return ctx.out->Error("ERR Syntax error in HELLO option " + Quoted(ctx.arg(i)));
    }
  }
  if (auth && CheckPassword(ctx, user, pass) != AuthOutcome::kOk) return;
  if (!ctx.client->authenticated) {
    return ctx.out->Error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise "
        "the "
        "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client");
  }
  ctx.out->ArrayHeader(14);
  ctx.out->Bulk("server");
  ctx.out->Bulk("prefixkv");
  ctx.out->Bulk("version");
  ctx.out->Bulk(PREFIXKV_VERSION_STRING);
  ctx.out->Bulk("proto");
  ctx.out->Integer(2);
  if (setname) ctx.client->record->set_name(std::string(name));
  ctx.out->Bulk("id");
  ctx.out->Integer(static_cast<int64_t>(ctx.client->record->id));
  ctx.out->Bulk("mode");
  ctx.out->Bulk("standalone");
  ctx.out->Bulk("role");
  ctx.out->Bulk("master");
  ctx.out->Bulk("modules");
  ctx.out->ArrayHeader(0);
}

void CmdQuit(CommandContext& ctx) {
  ctx.client->close_requested = true;
  ctx.out->Simple("OK");
}

void CmdSelect(CommandContext& ctx) {
  if (ctx.arg(1) == "0") return ctx.out->Simple("OK");
  const std::string_view index = ctx.arg(1);
  int64_t number = 0;
  if (!ParseRedisInteger(index, &number)) {
    return ctx.out->Error("ERR value is not an integer or out of range");
  }
  // Redis reads the index as an int (getIntFromObjectOrReply) first.
  if (number < INT32_MIN || number > INT32_MAX) {
    return ctx.out->Error(
        "ERR value is out of range, value must between -2147483648 and 2147483647");
  }
  // Redis's reply: a number other than 0 names a database this server does not have.
  ctx.out->Error("ERR DB index is out of range");
}

void CmdCommand(CommandContext& ctx) {
  const auto& table = Dispatcher::Table();
  std::string sub = ctx.args.size() > 1 ? Lower(ctx.arg(1)) : "";
  if (sub.empty()) {
    ctx.out->ArrayHeader(table.size());
    for (const CommandSpec& spec : table) ReplyCommandSpec(spec, ctx.out);
  } else if (sub == "count") {
    ctx.out->Integer(static_cast<int64_t>(table.size()));
  } else if (sub == "docs") {
    ctx.out->ArrayHeader(0);  // no documentation strings; docs/protocol.md has them
  } else if (sub == "info") {
    ctx.out->ArrayHeader(ctx.args.size() - 2);
    for (size_t i = 2; i < ctx.args.size(); ++i) {
      const CommandSpec* spec = Dispatcher::Find(ctx.arg(i));
      if (spec == nullptr) {
        ctx.out->Null();
      } else {
        ReplyCommandSpec(*spec, ctx.out);
      }
    }
  } else {
    ctx.out->Error("ERR unknown subcommand " + Quoted(ctx.arg(1)) +
                   ". COMMAND takes COUNT, INFO name... or DOCS.");
  }
}

// CONFIG GET answers the few parameters Redis tools ask about (redis-benchmark
// reads "save" and "appendonly"); nothing is settable at run time. As Redis 7:
// each argument is a glob, matched without case (`CONFIG GET *` lists them
// all; it listed none), and a parameter several arguments match is listed once.
void CmdConfig(CommandContext& ctx) {
  if (Lower(ctx.arg(1)) != "get") {
    return ctx.out->Error("ERR CONFIG " + Quoted(ctx.arg(1)) + " is not supported");
  }
  static const std::vector<std::pair<std::string, std::string>> known = {
      {"save", ""}, {"appendonly", "no"}, {"databases", "1"}};
  std::vector<const std::pair<std::string, std::string>*> found;
  for (const auto& kv : known) {
    for (size_t i = 2; i < ctx.args.size(); ++i) {
      if (GlobMatch(Lower(ctx.arg(i)), kv.first)) {
        found.push_back(&kv);
        break;
      }
    }
  }
  ctx.out->ArrayHeader(found.size() * 2);
  for (const auto* kv : found) {
    ctx.out->Bulk(kv->first);
    ctx.out->Bulk(kv->second);
  }
}

}  // namespace prefixkv::server
