// Command dispatch: one RESP command in, its reply appended to a ReplyBuffer.
//
// The dispatcher owns no connection state: what a client has done (AUTH, QUIT)
// lives in ClientState, which the connection keeps. docs/protocol.md lists
// every command; the table in commands.cc is the single source of names,
// arities and whether a command may run before AUTH.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client_registry.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/engine.h"
#include "reply_buffer.h"
#include "resp_parser.h"
#include "served_restore.h"

namespace prefixkv::server {

// An XREAD BLOCK that found nothing yet (commands_streams.cc): the
// connection waits for an event at or after from_seq, or the timeout
// (0: none), then replies (connection.cc).
struct BlockedRead {
  uint64_t from_seq = 0;
  size_t count = 0;
  uint64_t timeout_ms = 0;
  // The XREAD is counted in commandstats when it is answered, as Redis counts
  // a blocked command (Dispatcher::AnswerBlockedRead): its slot, and the
  // time its first run took.
  size_t stats_index = SIZE_MAX;
  uint64_t run_nanos = 0;
};

// Per-connection protocol state.
struct ClientState {
  bool authenticated = false;    // AUTH succeeded (or no password is set)
  bool close_requested = false;  // QUIT: close after the reply is sent
  bool admin = false;            // AUTH admin <admin password> succeeded
  size_t auth_failures = 0;      // failed AUTH / HELLO AUTH on this connection
  // AUTH / HELLO AUTH refused unchecked by the server-wide AuthThrottle; they
  // count toward max_auth_failures too.
  size_t auth_throttled = 0;
  // MULTI ... EXEC: the commands queued since MULTI (arguments detached from
  // the parser's buffers), their argument bytes, and whether one was refused
  // at queue time (EXEC then answers -EXECABORT).
  bool in_multi = false;
  bool multi_dirty = false;
  std::vector<RespArgs> multi_queue;
  size_t multi_bytes = 0;
  // This connection's PKV.MATCH + PKV.GET sequence (served_restore.h).
  ServedRestore restore;
  // EXEC is running the queue (a BLOCK does not block then).
  bool in_exec = false;
  // Error replies of the commands EXEC ran, since the connection opened:
  // each is its own command's failure, not the EXEC's (Dispatcher::Run).
  uint64_t exec_command_errors = 0;
  // Set by an XREAD that is to block, with no reply appended; the connection
  // takes it (and replies later).
  std::optional<BlockedRead> block;
  // What CLIENT LIST shows of this client (id, name...); never null.
  std::shared_ptr<ClientRecord> record;
};

class AuthThrottle;          // auth_throttle.h
class CommandStatsRecorder;  // command_stats.h

struct DispatcherConfig {
  std::string requirepass;  // empty: no AUTH needed
  std::string admin_pass;   // empty: admin commands are off
  // The failed AUTH that closes the connection (after its reply); 0: never.
  size_t max_auth_failures = 3;
  // The server-wide budget of password checks; null: none.
  AuthThrottle* auth_throttle = nullptr;
  size_t max_models = 256;  // models PKV.REGISTER may register
  // Appends those of the "server", "clients" and "stats" INFO sections that
  // `wanted(name)` accepts (RESP-free text, "name:value\r\n" lines) for the
  // running server; may be empty in tests.
  std::function<void(const std::function<bool(std::string_view)>& wanted,
                     std::string* out)>
      append_server_info;
  // Where each command's calls, failures, rejections and time are counted
  // (ServerStats::commands), timed by `clock`; null: not counted.
  CommandStatsRecorder* command_stats = nullptr;
  Clock* clock = nullptr;  // required with command_stats; CLIENT LIST's ages
  // Argument bytes one transaction (MULTI) may queue; past it the command is
  // refused and EXEC answers -EXECABORT.
  size_t max_multi_bytes = size_t{512} << 20;
  // INFO's total_commands_processed, counted as Redis 7 counts it: every command
  // that runs (inside EXEC too, and EXEC itself), not one refused before it
  // runs (unknown, wrong arity, NOAUTH, NOPERM) nor one only queued by MULTI;
  // null: not counted.
  std::atomic<uint64_t>* commands_processed = nullptr;
};

class Dispatcher;

// What a command handler sees.
struct CommandContext {
  const Dispatcher& dispatcher;
  const RespArgs& args;
  ClientState* client;
  ReplyBuffer* out;

  std::string_view arg(size_t i) const { return args[i].view(); }
};

using CommandHandler = void (*)(CommandContext& ctx);

struct CommandSpec {
  const char* name;  // lowercase, as COMMAND reports it
  int arity;         // Redis convention: n = exactly n words, -n = at least n
  bool before_auth;  // may run before AUTH when a password is set
  bool write;        // changes stored data ("write" flag in COMMAND)
  int first_key;     // key positions, as COMMAND reports them (0: no keys)
  int last_key;      // -1: the last argument
  int key_step;
  CommandHandler handler;
  bool admin = false;  // needs AUTH admin (off without an admin password)
  // Runs at once inside MULTI instead of being queued (MULTI, EXEC, DISCARD,
  // WATCH, QUIT, as in Redis).
  bool immediate_in_multi = false;
  // Runs holding the dispatcher's lock exclusively: no other client's command
  // runs meanwhile (EXEC, FLUSHDB).
  bool exclusive = false;
};

// Thread-safe: Execute may be called concurrently (per-client state is in
// ClientState; PKV.REGISTER is serialised by register_mu_). Every command runs
// holding exec_mu_ shared, and EXEC and FLUSHDB hold it exclusively, so no
// other client's command runs between a transaction's commands.
class Dispatcher {
 public:
  // REQUIRES: `engine` outlives the dispatcher.
  Dispatcher(Engine* engine, DispatcherConfig config);

  // Runs one command (or queues it inside MULTI) and appends exactly one
  // reply to `out`.
  void Execute(const RespArgs& args, ClientState* client, ReplyBuffer* out) const;

  // EXEC: runs the client's queued commands in order (the caller holds
  // exec_mu_ exclusively) and replies with the array of their replies.
  void ExecQueued(ClientState* client, ReplyBuffer* out) const;

  // Answers a waiting XREAD BLOCK when its log has news or `final` (its time
  // is up), and counts it in commandstats then; false (nothing appended)
  // while it waits on.
  bool AnswerBlockedRead(const BlockedRead& read, bool final, ReplyBuffer* out) const;

  // The initial state of a new connection from `addr` to `laddr` ("ip:port"),
  // listed by CLIENT LIST for as long as the state (or a copy) lives.
  ClientState NewClient(std::string addr = "", std::string laddr = "") const;
  const ClientRegistry& clients() const { return *clients_; }
  uint64_t NowMillis() const { return config_.clock ? config_.clock->NowMillis() : 0; }
  // The config's clock, or the system's.
  Clock* clock() const { return config_.clock ? config_.clock : Clock::System(); }

  Engine* engine() const { return engine_; }
  const DispatcherConfig& config() const { return config_; }
  // Held by PKV.REGISTER across its count check and the registration, so the
  // model cap is exact.
  Mutex& register_mu() const { return register_mu_; }

  // Every command, in table order (COMMAND, tests, docs).
  static const std::vector<CommandSpec>& Table();
  static const CommandSpec* Find(std::string_view name);

 private:
  // Why `spec` may not run now for `client` ("" when it may).
  std::string Refusal(const CommandSpec& spec, const RespArgs& args,
                      const ClientState& client) const;
  // Execute() before the client's record is brought up to date.
  void Dispatch(const RespArgs& args, ClientState* client, ReplyBuffer* out) const;
  // Runs a command that passed the checks (timed and counted).
  void Run(const CommandSpec& spec, const RespArgs& args, ClientState* client,
           ReplyBuffer* out) const;
  // Queues a command inside MULTI, or refuses it when the transaction is full.
  void Queue(const RespArgs& args, ClientState* client, ReplyBuffer* out) const;

  Engine* const engine_;
  const DispatcherConfig config_;
  mutable Mutex register_mu_;
  mutable SharedMutex exec_mu_;
  const std::shared_ptr<ClientRegistry> clients_ = std::make_shared<ClientRegistry>();
};

// Handlers by group: commands.cc (connection), commands_keys.cc (raw keys),
// commands_pkv.cc (blocks), commands_info.cc (INFO, PKV.STATS, PKV.AUDIT).
void CmdPing(CommandContext& ctx);
void CmdEcho(CommandContext& ctx);
void CmdAuth(CommandContext& ctx);
void CmdHello(CommandContext& ctx);
void CmdQuit(CommandContext& ctx);
void CmdMulti(CommandContext& ctx);
void CmdExec(CommandContext& ctx);
void CmdDiscard(CommandContext& ctx);
void CmdWatch(CommandContext& ctx);
void CmdUnwatch(CommandContext& ctx);
void CmdSelect(CommandContext& ctx);
void CmdCommand(CommandContext& ctx);
void CmdClient(CommandContext& ctx);
void CmdConfig(CommandContext& ctx);
void CmdInfo(CommandContext& ctx);
void CmdGet(CommandContext& ctx);
void CmdSet(CommandContext& ctx);
void CmdDel(CommandContext& ctx);
void CmdDbsize(CommandContext& ctx);
void CmdFlushdb(CommandContext& ctx);
void CmdScan(CommandContext& ctx);
void CmdKeys(CommandContext& ctx);
void CmdTtl(CommandContext& ctx);
void CmdExpireTime(CommandContext& ctx);
void CmdPersist(CommandContext& ctx);
void CmdType(CommandContext& ctx);
void CmdExpire(CommandContext& ctx);
void CmdExists(CommandContext& ctx);
void CmdMget(CommandContext& ctx);
void CmdMset(CommandContext& ctx);
void CmdPkvRegister(CommandContext& ctx);
void CmdPkvSnapshot(CommandContext& ctx);
void CmdPkvPut(CommandContext& ctx);
void CmdPkvGet(CommandContext& ctx);
void CmdPkvMatch(CommandContext& ctx);
void CmdPkvStats(CommandContext& ctx);
void CmdPkvAudit(CommandContext& ctx);
void CmdXread(CommandContext& ctx);
void CmdXrange(CommandContext& ctx);
void CmdXrevrange(CommandContext& ctx);
void CmdXlen(CommandContext& ctx);
void CmdXinfo(CommandContext& ctx);

// XREAD's reply for the events from `from_seq` (at most `count`): the
// entries, or a RESNAPSHOT error when the log cannot continue there. When
// there are none yet, appends a null array if `final`, else nothing; returns
// whether it appended a reply.
bool ReplyStreamRead(Engine* engine, uint64_t from_seq, size_t count, bool final,
                     ReplyBuffer* out);

// True when `given` equals `expected`, in time that depends only on the
// length of `given` (not on `expected`'s length or the first difference).
bool PasswordMatches(std::string_view given, std::string_view expected);

// Visits every TierCounters field as (name, value), in declaration order.
void ForEachCounter(const TierCounters& c,
                    const std::function<void(std::string_view, uint64_t)>& fn);

// `s` in lowercase (ASCII).
std::string Lower(std::string_view s);
// A command's integer argument read as Redis reads it (string2ll): an
// optional '-', then digits without a leading zero ("0" alone is zero), in
// int64 range. "01", "-0", "+5" and " 5" are not integers to Redis, so a client
// that a server refuses them must not see them accepted here.
bool ParseRedisInteger(std::string_view s, int64_t* value);
// A client-supplied word made safe and short for an error message, in quotes.
std::string Quoted(std::string_view s);

// "ERR <status>" for a failed engine operation.
void ReplyStatus(const Status& status, ReplyBuffer* out);

}  // namespace prefixkv::server
