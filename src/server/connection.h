// Connection: one client socket, its RESP parser and its reply queue.
//
// Every handler of a connection runs on the single I/O thread that owns its
// socket, so its state needs no lock; other threads reach it only by posting
// (Shutdown, CloseIdle). Flow:
//   read -> parse every complete command -> execute -> queue replies -> write.
// Backpressure: while more than max_pending_reply_bytes of replies wait to be
// sent, the connection neither parses buffered input nor reads the socket.
// Malformed input gets an error reply, then the connection closes once that
// reply is sent (the stream cannot be resynchronized); so does a request that
// runs out of memory. Before AUTH the parser's and the reply queue's limits
// are ServerOptions::max_unauthenticated_bytes; a failed AUTH pauses the
// connection (auth_failure_delay_ms) before its next command.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "commands.h"
#include "prefixkv/clock.h"
#include "prefixkv/server.h"
#include "reply_buffer.h"
#include "resp_parser.h"

namespace prefixkv::server {

// Server-wide counters the connections update (INFO "stats").
struct ServerCounters {
  std::atomic<uint64_t> total_connections_received{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> total_commands_processed{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> idle_disconnections{0};
  std::atomic<uint64_t> auth_failures{0};
  std::atomic<uint64_t> out_of_memory{0};
};

// What a connection needs from its server; everything outlives the connection.
struct ConnectionEnv {
  const Dispatcher* dispatcher = nullptr;
  const ServerOptions* options = nullptr;
  Clock* clock = nullptr;
  ServerCounters* counters = nullptr;
  // Called once, on the connection's thread, when it closes.
  std::function<void(class Connection*)> on_closed;
};

// Thread-compatible: methods other than Post* and last_activity_ms() must run
// on the connection's executor.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, const ConnectionEnv* env);

  // Starts reading (posted to the connection's executor).
  void PostStart();
  // Graceful: stop reading, send every queued reply, then close.
  void PostShutdown();
  // Closes now (idle timeout, end of the shutdown grace period).
  void PostClose();

  // Clock milliseconds of the last bytes received from the client or written
  // to it (idle: neither; a client that stops reading a long reply is idle
  // from the last bytes its socket took).
  uint64_t last_activity_ms() const {
    return last_activity_ms_.load(std::memory_order_relaxed);
  }

 private:
  // Parses what is buffered, starts a write, and reads more unless paused.
  void Pump();
  void OnRead(const boost::system::error_code& ec, size_t n);
  // Parses and executes buffered input until it is used up, the reply queue is
  // over its limit, or the stream must close.
  void ProcessInput();
  void Flush();
  void OnWritten(const boost::system::error_code& ec);
  size_t PendingReplyBytes() const { return writing_.bytes() + queued_.bytes(); }
  void Touch();
  void Close();
  // The parser limits and the reply-queue limit for the client's state.
  void ApplyLimits();
  size_t ReplyLimit() const;
  // Runs one parsed command; an allocation failure becomes an error reply
  // and closes the connection.
  void Execute();
  // Pauses command execution for the auth failure delay.
  void DelayAfterAuthFailure();

  boost::asio::ip::tcp::socket socket_;
  const ConnectionEnv* env_;
  RespParser parser_;
  ClientState client_;
  RespArgs args_;
  std::vector<char> read_buf_;
  size_t read_pos_ = 0;  // unparsed input is read_buf_[read_pos_, read_end_)
  size_t read_end_ = 0;
  ReplyBuffer queued_;   // replies not yet handed to the socket
  ReplyBuffer writing_;  // replies of the write in flight
  std::vector<boost::asio::const_buffer> write_pieces_;
  bool reading_ = false;
  bool writing_in_flight_ = false;
  bool stop_reading_ = false;  // EOF, QUIT, protocol error or shutdown
  bool closed_ = false;
  bool delayed_ = false;  // a failed AUTH's pause is running
  boost::asio::steady_timer delay_timer_;
  std::atomic<uint64_t> last_activity_ms_{0};
};

}  // namespace prefixkv::server
