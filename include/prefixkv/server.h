// The prefixkv network server (docs/protocol.md): RESP2, the Redis protocol,
// over TCP, so redis-cli, redis-benchmark and any Redis client work unchanged.
//
// It serves an Engine (engine.h): raw keys (GET/SET/DEL/...) are the engine's
// key-value space, a persistent Redis-compatible blob store; prefix-cache
// blocks (PKV.* commands carrying encoded block records, see codec.h) go
// through the engine's prefix cache, per registered model (PKV.REGISTER):
// its namespace, its share of the hot budget, its tip lineage.
// docs/protocol.md lists every command with examples.
//
// The server does not own the engine: the caller opens it, hands it in, and
// after Stop() returns (no command runs any more) closes it, which is where
// dirty hot blocks are written back to SSD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/clock.h"
#include "prefixkv/engine.h"
#include "prefixkv/status.h"
#include "prefixkv/tier_types.h"

namespace prefixkv {

namespace internal {
class ServerImpl;  // src/server/server.cc
}  // namespace internal

struct ServerOptions {
  // Address to listen on. Loopback by default: the protocol has no encryption.
  std::string bind_address = "127.0.0.1";
  // TCP port; 0 picks a free one (read it back with Server::port()).
  uint16_t port = 0;
  // When set, an HTTP listener on bind_address:metrics_port (0 picks a free
  // one; Server::metrics_port()) serves GET /metrics, every engine and server
  // counter in the Prometheus text format (docs/metrics.md), from its own
  // thread. Unset (default): no HTTP listener.
  std::optional<uint16_t> metrics_port;
  // I/O threads; each connection lives on one of them. Commands run on the
  // connection's thread. >= 1.
  int io_threads = 2;
  // When non-empty, every command except AUTH, HELLO and QUIT needs
  // AUTH <password> first (Redis `requirepass`). Compared in constant time
  // (independent of where the first difference is and of its length).
  std::string requirepass;
  // Admin commands (PKV.AUDIT: it pauses writes and reads every payload) need
  // `AUTH admin <admin_pass>` on the connection; empty (the default): they are
  // off, and answer an error to every client.
  std::string admin_pass;
  // A failed AUTH (or HELLO ... AUTH) pauses the connection this long before
  // its next command is run (real time; the error reply is sent at once), and
  // the max_auth_failures-th failure closes it after the reply.
  uint64_t auth_failure_delay_ms = 100;
  size_t max_auth_failures = 3;
  // Across all connections, passwords are checked on a budget refilled at
  // auth_failures_per_second up to auth_failure_burst: every AUTH (and HELLO
  // ... AUTH) takes one check, a correct password gives it back. With the
  // budget spent, AUTH is answered "-ERR too many failed AUTH attempts on this
  // server: the password was not checked; retry in N ms" without the password
  // being compared (even a correct one: otherwise guessing would go on at any
  // rate), counts toward max_auth_failures and in ServerStats::auth_throttled,
  // and `log` says so (at most one line per 10 s). So many connections guess
  // no faster than auth_failures_per_second together; while they do, a client
  // with the right password waits its turn for a check. 0: no server-wide
  // limit. Time is `clock`'s. Both at most 1,000,000.
  uint64_t auth_failures_per_second = 10;
  uint64_t auth_failure_burst = 10;
  // While a connection has not authenticated (requirepass set), its requests,
  // inline lines and unsent replies are limited to this many bytes and its
  // commands to 16 arguments: an anonymous client cannot make the server
  // buffer more.
  size_t max_unauthenticated_bytes = 16 << 10;
  // Largest accepted request: the sum of the argument bytes of one command, and
  // so also the largest single bulk argument (a SET value, a PKV.PUT record).
  // The server lowers it to the machine's memory (RAM plus swap) when it is
  // larger (for every request and for a MULTI's queue). A bulk argument's
  // buffer grows as its bytes arrive (resp_parser.h); when memory runs out
  // the request is refused ("out of memory") and the connection closed, the
  // server goes on.
  size_t max_request_bytes = size_t{512} << 20;
  // Most arguments in one command (a RESP array's element count).
  size_t max_array_elements = 1 << 20;
  // Longest inline command line (telnet-style "PING\r\n").
  size_t max_inline_bytes = 64 << 10;
  // Connections beyond this are told "max number of clients reached" and closed.
  // Start() lowers it to what fits in RLIMIT_NOFILE with the descriptors held
  // then and 64 more left (INFO maxclients shows the limit in force).
  size_t max_connections = 10000;
  // A connection stops reading while this many reply bytes wait to be sent
  // (backpressure against clients that pipeline without reading).
  size_t max_pending_reply_bytes = size_t{32} << 20;
  // Bytes read from a socket at a time (bulk arguments larger than this are
  // read straight into their final buffer).
  size_t read_chunk_bytes = 64 << 10;
  // Connections idle (no bytes received from the client nor taken in by it)
  // for longer than this are closed; 0 disables the timeout. A client reading
  // a long reply is not idle; one that stops reading it is.
  uint64_t idle_timeout_ms = 0;
  // How often the server looks for idle connections (real time).
  uint64_t idle_check_interval_ms = 1000;
  // Most models PKV.REGISTER may register (each is a hot-budget owner with
  // its own namespace, kept until the engine closes); beyond it PKV.REGISTER
  // of a new model is an error. Write-through and the tiers' sizes are the
  // engine's options (EngineOptions).
  size_t max_models = 256;
  // Time source for idle accounting and uptime; nullptr = Clock::System().
  Clock* clock = nullptr;
  // Where the server reports what an operator should know (AUTH throttling),
  // one line per call; empty: standard error.
  std::function<void(std::string_view)> log;
};

// One RESP command's calls and their time inside the server (INFO
// commandstats, the prefixkv_command_* metrics). Redis's counting: a call is
// one that ran; a call that was refused before it ran (a number of arguments
// outside the command's arity, no AUTH, no admin permission) is rejected, not
// a call.
struct CommandStats {
  std::string name;             // lowercase, as COMMAND reports it ("pkv.get")
  uint64_t calls = 0;           // ran
  uint64_t failed_calls = 0;    // ran and answered an error (a bad key, a missing model)
  uint64_t rejected_calls = 0;  // refused before running
  // Time from the handler's start to its reply being queued, by
  // ServerOptions::clock: the server's own share of a request's latency
  // (not the network's, nor the time a pipelined request waited behind others).
  LatencyHistogram latency;
};

// Counters the server keeps about itself (INFO "clients" and "stats").
struct ServerStats {
  uint64_t connected_clients = 0;
  uint64_t total_connections_received = 0;  // accepted and served
  uint64_t rejected_connections = 0;        // over max_connections (not received)
  uint64_t total_commands_processed = 0;
  uint64_t protocol_errors = 0;  // connections closed for malformed input
  uint64_t idle_disconnections = 0;
  uint64_t auth_failures = 0;   // failed AUTH / HELLO AUTH (a wrong password)
  uint64_t auth_throttled = 0;  // AUTH refused unchecked over the server-wide budget
  uint64_t out_of_memory = 0;   // requests refused because an allocation failed
  // Heap bytes the open connections' buffers hold now (read buffers, partial
  // requests, queued replies; not stored values a reply references). A
  // connection that has sent nothing holds none; buffers over a few KiB are
  // freed once used (docs/protocol.md, "Limits and bad input").
  uint64_t client_buffer_bytes = 0;
  // Every command the server knows, in COMMAND's order (unknown names are
  // counted only in total_commands_processed).
  std::vector<CommandStats> commands;
};

// Thread-safe: every method may be called from any thread; Start/Stop once each.
class Server {
 public:
  // REQUIRES: `engine` outlives the Server and is closed only after Stop().
  Server(ServerOptions options, Engine* engine);
  ~Server();  // Stop()s if needed.
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the I/O threads. InvalidArgument for bad options
  // (no engine or a closed one, zero threads...), IOError when the address
  // cannot be bound.
  Status Start();

  // The bound port (after a successful Start).
  uint16_t port() const;
  // The bound metrics port (after a successful Start); 0 without one.
  uint16_t metrics_port() const;

  // Graceful stop: stops accepting, lets every command already received finish
  // and its reply be sent (bounded by a short grace period for clients that do
  // not read), closes every connection and joins the I/O threads. After it
  // returns no command touches the engine. Idempotent.
  void Stop();

  // Closes connections idle (nothing received, nothing sent) for longer than
  // idle_timeout_ms, by the options' clock, and has those idle for 2 s free
  // the buffers they keep for their next requests. The server calls it every
  // idle_check_interval_ms; tests call it after advancing a FakeClock.
  // Returns how many it closed.
  size_t SweepIdleConnections();

  ServerStats stats() const;

 private:
  std::unique_ptr<internal::ServerImpl> impl_;
};

}  // namespace prefixkv
