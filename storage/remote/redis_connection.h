// RedisConnection: one synchronous hiredis connection to one Redis node whose
// every write and read ends by a deadline, so a pipelined batch to a slow or
// dead node costs at most the request timeout. hiredis formats commands and
// parses replies (no hand-written RESP: received bytes go into its reader's
// buffer); this class only moves the bytes: ppoll until the socket is ready or
// the deadline passes, then one non-blocking send or a large recv, with
// MSG_NOSIGNAL so a peer that died never raises SIGPIPE. TakeBuffered and
// Receive let one thread read several connections at once (the cluster
// store's rounds).
//
// After any error the connection is broken() and must be closed, not reused:
// its pipeline is out of step with the replies.
//
// Thread-compatible: one thread uses a connection at a time (the node's pool
// hands it out).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/bytes.h"
#include "prefixkv/status.h"

struct redisContext;
struct redisReply;

namespace prefixkv {

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const;
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

// Real monotonic time in nanoseconds (socket deadlines are real time).
uint64_t RedisNowNanos();

// The bytes of a string reply (REDIS_REPLY_STRING) read by a RedisConnection,
// taken out of it without a copy: 64-byte aligned. `reply` is left empty.
SharedBytes TakeStringReply(redisReply& reply);

class RedisConnection {
 public:
  // Connects to `host`:`port` within connect_timeout_ms and authenticates when
  // `password` is not empty. Unavailable when the node cannot be reached,
  // IOError when it rejects AUTH.
  static StatusOr<std::unique_ptr<RedisConnection>> Connect(const std::string& host,
                                                            int port,
                                                            uint32_t connect_timeout_ms,
                                                            const std::string& password);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Queues one command; arguments are binary-safe (any bytes, \0 included).
  void Append(std::initializer_list<std::string_view> args);
  // Writes every queued command before `deadline_nanos` (RedisNowNanos time).
  Status Flush(uint64_t deadline_nanos);
  // The next reply, read before `deadline_nanos`. An error reply (-ERR ...) is
  // a reply, not an error Status; Unavailable on a timeout or a closed
  // connection, IOError on a protocol error.
  StatusOr<RedisReplyPtr> Read(uint64_t deadline_nanos);
  // Reading several connections at once (poll on their fd()s): a reply whose
  // bytes have all been received, or null (never waits); IOError on a
  // protocol error.
  StatusOr<RedisReplyPtr> TakeBuffered();
  // Receives what the socket holds, without waiting (one recv, large);
  // Unavailable when the node closed the connection.
  Status Receive();
  int fd() const;
  // When a wait for this connection's next bytes must end: `deadline_nanos`,
  // or later while bytes keep flowing (the idle timeout below).
  uint64_t WaitDeadline(uint64_t deadline_nanos) const;
  // Gives up waiting: the connection is broken; Unavailable.
  Status TimedOut(std::string_view what);
  // Bytes moved, or a wait starts: the idle deadline becomes now + the idle
  // timeout.
  void Progress();

  // Whether the node closed this idle connection, or sent it bytes no command
  // asked for (it then cannot carry a pipeline either): a master restarted
  // or killed since, or its idle `timeout` passed. One non-blocking peek at
  // the socket; never waits. REQUIRES: no command in flight.
  bool ClosedWhileIdle() const;

  // Flush, then one Read: a single command's round trip.
  StatusOr<RedisReplyPtr> Call(std::initializer_list<std::string_view> args,
                               uint64_t deadline_nanos);

  // With a non-zero idle timeout, a deadline only bounds the wait for the
  // NEXT bytes: each Flush and Read call, and every send or read that moves
  // bytes, extends it to now + the idle timeout. A node that stops answering
  // still fails within the idle timeout (per call that waits on it), and a
  // large batch (megabytes of blocks) is not cut off while its bytes keep
  // flowing. 0 (the default): a deadline bounds the whole call.
  void set_idle_timeout_nanos(uint64_t nanos) { idle_nanos_ = nanos; }
  bool broken() const { return broken_; }
  // Bytes sent over this connection's life (whether a failed Flush sent any).
  uint64_t bytes_sent() const { return bytes_sent_; }
  const std::string& host() const { return host_; }
  const std::string& name() const { return name_; }

 private:
  RedisConnection(redisContext* context, std::string host, std::string name)
      : context_(context), host_(std::move(host)), name_(std::move(name)) {}
  // Waits until the socket is ready or WaitDeadline passes (Unavailable).
  Status Arm(uint64_t deadline_nanos, std::string_view what);
  // Marks the connection broken and returns `code` with the node's name.
  Status Fail(bool protocol_error, std::string_view what);
  Status OutOfMemory();

  redisContext* context_;
  std::string host_;
  std::string name_;  // "host:port", for messages
  bool broken_ = false;
  // Room made for each recv, and what hiredis's reader may keep of its input
  // buffer between replies.
  static constexpr size_t kReadBytes = 256 << 10;
  static constexpr size_t kReaderKeepBytes = 4 * kReadBytes;
  uint64_t idle_nanos_ = 0;
  uint64_t progress_deadline_ = 0;  // last progress + idle_nanos_
  uint64_t bytes_sent_ = 0;
};

}  // namespace prefixkv
