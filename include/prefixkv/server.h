// The prefixkv network server (docs/protocol.md): RESP2, the Redis protocol,
// over TCP, so redis-cli, redis-benchmark and any Redis client work unchanged.
//
// It serves two key spaces over the same tiers: raw keys (GET/SET/DEL/... a
// persistent Redis-compatible blob store) and prefix-cache blocks (PKV.*
// commands carrying encoded block records, see codec.h). docs/protocol.md lists
// every command with examples.
//
// The server does not own the tiers: the caller creates them, hands them in,
// and after Stop() returns (no command runs any more) closes them, which is
// where write-back of dirty hot blocks happens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "prefixkv/advanced/tier.h"
#include "prefixkv/clock.h"
#include "prefixkv/status.h"

namespace prefixkv {

struct ServerOptions {
  // Address to listen on. Loopback by default: the protocol has no encryption.
  std::string bind_address = "127.0.0.1";
  // TCP port; 0 picks a free one (read it back with Server::port()).
  uint16_t port = 0;
  // I/O threads; each connection lives on one of them. Commands run on the
  // connection's thread. >= 1.
  int io_threads = 2;
  // When non-empty, every command except AUTH, HELLO and QUIT needs
  // AUTH <password> first (Redis `requirepass`).
  std::string requirepass;
  // Largest accepted request: the sum of the argument bytes of one command, and
  // so also the largest single bulk argument (a SET value, a PKV.PUT record).
  size_t max_request_bytes = size_t{512} << 20;
  // Most arguments in one command (a RESP array's element count).
  size_t max_array_elements = 1 << 20;
  // Longest inline command line (telnet-style "PING\r\n").
  size_t max_inline_bytes = 64 << 10;
  // Connections beyond this are told "max number of clients reached" and closed.
  size_t max_connections = 10000;
  // A connection stops reading while this many reply bytes wait to be sent
  // (backpressure against clients that pipeline without reading).
  size_t max_pending_reply_bytes = size_t{32} << 20;
  // Bytes read from a socket at a time (bulk arguments larger than this are
  // read straight into their final buffer).
  size_t read_chunk_bytes = 64 << 10;
  // Connections idle (no bytes received) for longer than this are closed;
  // 0 disables the timeout.
  uint64_t idle_timeout_ms = 0;
  // How often the server looks for idle connections (real time).
  uint64_t idle_check_interval_ms = 1000;
  // Write-through: a SET or PKV.PUT is stored in the SSD tier (with its
  // durability) before it is acknowledged, and kept in RAM as a clean copy.
  // Off (write-back): acknowledged once in RAM, written to SSD when evicted or
  // at a graceful shutdown, so a kill -9 loses values only in RAM.
  bool write_through = false;
  // Time source for idle accounting and uptime; nullptr = Clock::System().
  Clock* clock = nullptr;
};

// Counters the server keeps about itself (INFO "clients" and "stats").
struct ServerStats {
  uint64_t connected_clients = 0;
  uint64_t total_connections_received = 0;
  uint64_t rejected_connections = 0;  // over max_connections
  uint64_t total_commands_processed = 0;
  uint64_t protocol_errors = 0;  // connections closed for malformed input
  uint64_t idle_disconnections = 0;
};

// Thread-safe: every method may be called from any thread; Start/Stop once each.
class Server {
 public:
  // `hot` may be null (SSD only) and `ssd` may be null (RAM only); not both.
  // Both must outlive the Server.
  Server(ServerOptions options, BlockTier* hot, BlockTier* ssd);
  ~Server();  // Stop()s if needed.
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the I/O threads. InvalidArgument for bad options
  // (no tiers, zero threads...), IOError when the address cannot be bound.
  Status Start();

  // The bound port (after a successful Start).
  uint16_t port() const;

  // Graceful stop: stops accepting, lets every command already received finish
  // and its reply be sent (bounded by a short grace period for clients that do
  // not read), closes every connection and joins the I/O threads. After it
  // returns no command touches the tiers. Idempotent.
  void Stop();

  // Closes connections that received nothing for longer than idle_timeout_ms,
  // by the options' clock. The server calls it every idle_check_interval_ms;
  // tests call it after advancing a FakeClock. Returns how many it closed.
  size_t SweepIdleConnections();

  ServerStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixkv
