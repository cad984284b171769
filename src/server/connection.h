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
// Memory: a connection allocates its read buffer only when bytes arrive (it
// waits for readability with no buffer), sized to what is waiting, and frees
// it once its bytes are parsed when it is over kKeepReadBytes; the parser and
// the reply buffers free large buffers once used the same way. The server's
// sweep frees the small ones too once a connection idles (PostReleaseBuffers).
// What it holds is summed in ServerCounters::client_buffer_bytes.
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
  std::atomic<uint64_t> auth_throttled{0};  // refused unchecked (AuthThrottle)
  std::atomic<uint64_t> out_of_memory{0};
  // Heap bytes of every connection's buffers (Connection::BufferBytes()),
  // updated by differences (modulo 2^64, so the sum is exact).
  std::atomic<uint64_t> client_buffer_bytes{0};
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
  // A read buffer is at least kMinReadBytes; one over kKeepReadBytes is freed
  // once its bytes are parsed.
  static constexpr size_t kMinReadBytes = 512;
  static constexpr size_t kKeepReadBytes = 4 << 10;

  Connection(boost::asio::ip::tcp::socket socket, const ConnectionEnv* env);
  ~Connection();  // takes its buffers out of client_buffer_bytes

  // Starts reading (posted to the connection's executor).
  void PostStart();
  // Graceful: stop reading, send every queued reply, then close.
  void PostShutdown();
  // Closes now (idle timeout, end of the shutdown grace period).
  void PostClose();
  // Frees every buffer an idle connection keeps for its next requests; does
  // nothing while a request or reply is under way.
  void PostReleaseBuffers();

  // Clock milliseconds of the last bytes received from the client or written
  // to it (idle: neither; a client that stops reading a long reply is idle
  // from the last bytes its socket took).
  uint64_t last_activity_ms() const {
    return last_activity_ms_.load(std::memory_order_relaxed);
  }
  // An XREAD BLOCK waits on it (any thread): the idle sweep leaves it open,
  // as Redis's `timeout` leaves blocked clients.
  bool blocked_read() const { return blocked_read_.load(std::memory_order_relaxed); }
  // The idle sweep's claim on closing it (any thread): true once only, so a
  // sweep running before an earlier one's close took effect neither posts
  // another nor counts the connection again in idle_disconnections.
  bool ClaimIdleClose() { return !idle_close_claimed_.exchange(true); }
  // Heap bytes of its buffers when last counted (any thread).
  size_t buffer_bytes() const { return accounted_bytes_.load(std::memory_order_relaxed); }

 private:
  // Parses what is buffered, starts a write, and reads more unless paused.
  void Pump();
  // Starts a read when the connection may take more input.
  void MaybeRead();
  void WaitReadable();
  // Reads what is waiting into a read buffer sized for it.
  void OnReadable(const boost::system::error_code& ec);
  // Allocates or grows the read buffer for what is waiting; false when the
  // allocation failed.
  bool SizeReadBuffer();
  void OnRead(const boost::system::error_code& ec, size_t n);
  // The most one read takes: read_chunk_bytes, and no more than the
  // unauthenticated limit before AUTH.
  size_t ReadChunkBytes() const;
  // Heap bytes of the connection's buffers, and their update in the counters.
  size_t BufferBytes() const;
  void AccountBuffers();
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
  // XREAD BLOCK (commands_streams.cc): command execution pauses until the
  // engine's event log has an event at or after from_seq (WatchEvents posts
  // the wakeup here) or the timer ends it with a null reply. The I/O thread
  // serves other connections meanwhile.
  void StartBlockedRead(const BlockedRead& read);
  void WatchBlockedRead();
  void ResumeBlockedRead(uint64_t generation, bool timed_out);
  void EndBlockedRead();
  // The client closed its end while its XREAD BLOCK waits: as Redis frees
  // such a client, the XREAD and what was pipelined after it are dropped and
  // the connection closes once the replies before it are sent.
  void DropBlockedRead();
  // Input pipelined behind a waiting XREAD BLOCK, moved to the front of the
  // read buffer so that more is read after it (the client's close is seen);
  // false once a read chunk waits (the client is then not read until the
  // XREAD answers).
  bool KeepUnparsedInput();

  boost::asio::ip::tcp::socket socket_;
  const ConnectionEnv* env_;
  RespParser parser_;
  ClientState client_;
  RespArgs args_;
  std::unique_ptr<char[]> read_buf_;  // null until bytes arrive
  size_t read_cap_ = 0;               // bytes of read_buf_
  bool grow_read_ = false;            // the last read filled read_buf_
  // Unparsed input is read_buf_[read_pos_, read_end_); a read appends after
  // read_end_ (0 but while an XREAD BLOCK waits: KeepUnparsedInput).
  size_t read_pos_ = 0;
  size_t read_end_ = 0;
  // This connection's share of client_buffer_bytes; written on its thread.
  std::atomic<size_t> accounted_bytes_{0};
  ReplyBuffer queued_;   // replies not yet handed to the socket
  ReplyBuffer writing_;  // replies of the write in flight
  std::vector<boost::asio::const_buffer> write_pieces_;
  bool reading_ = false;
  bool writing_in_flight_ = false;
  bool stop_reading_ = false;  // EOF, QUIT, protocol error or shutdown
  bool peer_closed_ = false;   // the read end saw end-of-file
  bool closed_ = false;
  bool delayed_ = false;  // a failed AUTH's pause is running
  boost::asio::steady_timer delay_timer_;
  bool blocked_ = false;  // an XREAD BLOCK waits
  BlockedRead block_;
  uint64_t block_generation_ = 0;  // tells a stale wakeup from the current one
  uint64_t block_watch_ = 0;       // Engine::WatchEvents id (0: none)
  boost::asio::steady_timer block_timer_;
  std::atomic<uint64_t> last_activity_ms_{0};
  std::atomic<bool> blocked_read_{false};  // blocked_, for the idle sweep
  std::atomic<bool> idle_close_claimed_{false};
};

}  // namespace prefixkv::server
