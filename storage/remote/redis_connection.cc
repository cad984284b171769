// RedisConnection: deadline-bounded pipelining over one hiredis context.
#include "redis_connection.h"

// hiredis 0.14's sds.h declares its C functions without extern "C".
extern "C" {
#include <hiredis/sds.h>
}
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "prefixkv/clock.h"

namespace prefixkv {

void RedisReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

uint64_t RedisNowNanos() { return Clock::System()->NowNanos(); }

namespace {

timeval ToTimeval(uint64_t nanos) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(nanos / 1000000000);
  tv.tv_usec = static_cast<suseconds_t>((nanos % 1000000000) / 1000);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;  // 0 would mean "no timeout"
  return tv;
}

// hiredis's createString, except that the string lands in a 64-byte aligned
// buffer from SharedBytes::AllocateBuffer (recycled when large, and
// freeReplyObject's free() may release it): a GET's value can then be handed
// on as SharedBytes without a copy (TakeStringReply), aligned for the block's
// tensors and, on a node whose hot tier is full, in pages an evicted block
// already faulted in.
void* CreateAlignedString(const redisReadTask* task, char* str, size_t len) {
  void* buf = nullptr;
  try {
    buf = SharedBytes::AllocateBuffer(len + 1);
  } catch (const std::bad_alloc&) {
    return nullptr;  // hiredis reports out of memory
  }
  auto* r = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (r == nullptr) {
    std::free(buf);
    return nullptr;
  }
  std::memcpy(buf, str, len);
  static_cast<char*>(buf)[len] = '\0';
  r->type = task->type;
  r->str = static_cast<char*>(buf);
  r->len = len;
  if (task->parent != nullptr) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    parent->element[task->idx] = r;
  }
  return r;
}

// hiredis's own reply functions with CreateAlignedString.
redisReplyObjectFunctions* AlignedStringFunctions(
    const redisReplyObjectFunctions* defaults) {
  static redisReplyObjectFunctions functions = [defaults] {
    redisReplyObjectFunctions f = *defaults;
    f.createString = CreateAlignedString;
    return f;
  }();
  return &functions;
}

}  // namespace

SharedBytes TakeStringReply(redisReply& reply) {
  SharedBytes bytes = SharedBytes::AdoptBuffer(reply.str, reply.len + 1, reply.len);
  reply.str = nullptr;  // freeReplyObject frees nothing more
  reply.len = 0;
  return bytes;
}

StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Connect(
    const std::string& host, int port, uint32_t connect_timeout_ms,
    const std::string& password) {
  const std::string name = host + ":" + std::to_string(port);
  const uint64_t timeout_nanos = uint64_t{connect_timeout_ms} * 1000000;
  const uint64_t deadline = RedisNowNanos() + timeout_nanos;
  redisContext* context =
      redisConnectWithTimeout(host.c_str(), port, ToTimeval(timeout_nanos));
  if (context == nullptr) {
    return Status::Unavailable("redis " + name + ": connect: out of memory");
  }
  if (context->err != 0) {
    Status status = Status::Unavailable("redis " + name +
                                        ": connect: " + std::string(context->errstr));
    redisFree(context);
    return status;
  }
  context->reader->fn = AlignedStringFunctions(context->reader->fn);
  // hiredis frees its input buffer whenever it empties with more than maxbuf
  // (16 KiB) spare, so every batch of megabytes would regrow it from fresh
  // pages; it may keep a few reads' worth instead.
  context->reader->maxbuf = kReaderKeepBytes;
  std::unique_ptr<RedisConnection> connection(new RedisConnection(context, host, name));
  if (!password.empty()) {
    PKV_ASSIGN_OR_RETURN(RedisReplyPtr reply,
                         connection->Call({"AUTH", password}, deadline));
    if (reply->type == REDIS_REPLY_ERROR) {
      return Status::IOError("redis " + name +
                             ": AUTH: " + std::string(reply->str, reply->len));
    }
  }
  return connection;
}

RedisConnection::~RedisConnection() { redisFree(context_); }

void RedisConnection::Append(std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> argv_len;
  argv.reserve(args.size());
  argv_len.reserve(args.size());
  for (std::string_view arg : args) {
    argv.push_back(arg.data() != nullptr ? arg.data() : "");
    argv_len.push_back(arg.size());
  }
  if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(),
                             argv_len.data()) != REDIS_OK) {
    broken_ = true;  // out of memory formatting: Flush reports it
  }
}

Status RedisConnection::Arm(uint64_t deadline_nanos, std::string_view what) {
  // ppoll waits to the nanosecond (SO_RCVTIMEO would round up to jiffies: a
  // 5 ms timeout became up to 12 ms), and the send or recv that follows does
  // not block (MSG_DONTWAIT), so no socket timeout is needed. Past the
  // deadline, bytes that already arrived are still taken (a zero wait still
  // reports a ready socket).
  const uint64_t now = RedisNowNanos();
  deadline_nanos = WaitDeadline(deadline_nanos);
  const uint64_t left = deadline_nanos > now ? deadline_nanos - now : 0;
  pollfd ready{context_->fd, what == "send" ? short{POLLOUT} : short{POLLIN}, 0};
  timespec wait{static_cast<time_t>(left / 1000000000),
                static_cast<long>(left % 1000000000)};
  int n;
  do {
    n = ppoll(&ready, 1, &wait, nullptr);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Fail(false, what);
  if (n == 0) return TimedOut(what);
  return Status::OK();
}

Status RedisConnection::Fail(bool protocol_error, std::string_view what) {
  broken_ = true;
  std::string detail = context_->err != 0 ? std::string(context_->errstr)
                                          : std::string(std::strerror(errno));
  if (detail == std::strerror(EAGAIN) || detail == std::strerror(EWOULDBLOCK)) {
    detail = "request timeout";
  }
  std::string message = "redis " + name_ + ": " + std::string(what) + ": " + detail;
  return protocol_error ? Status::IOError(std::move(message))
                        : Status::Unavailable(std::move(message));
}

Status RedisConnection::Flush(uint64_t deadline_nanos) {
  if (broken_) return Status::IOError("redis " + name_ + ": connection is broken");
  Progress();  // the node's silence is counted from now
  while (sdslen(context_->obuf) > 0) {
    PKV_RETURN_IF_ERROR(Arm(deadline_nanos, "send"));
    const ssize_t n = send(context_->fd, context_->obuf, sdslen(context_->obuf),
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Fail(false, "send");
    }
    sdsrange(context_->obuf, static_cast<int>(n), -1);
    bytes_sent_ += static_cast<uint64_t>(n);
    if (n > 0) Progress();
  }
  return Status::OK();
}

StatusOr<RedisReplyPtr> RedisConnection::Read(uint64_t deadline_nanos) {
  if (broken_) return Status::IOError("redis " + name_ + ": connection is broken");
  Progress();  // the node's silence is counted from now
  while (true) {
    PKV_ASSIGN_OR_RETURN(RedisReplyPtr reply, TakeBuffered());
    if (reply != nullptr) return reply;
    PKV_RETURN_IF_ERROR(Arm(deadline_nanos, "reply"));
    PKV_RETURN_IF_ERROR(Receive());
  }
}

StatusOr<RedisReplyPtr> RedisConnection::TakeBuffered() {
  if (broken_) return Status::IOError("redis " + name_ + ": connection is broken");
  void* reply = nullptr;
  if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) {
    return Fail(context_->err == REDIS_ERR_PROTOCOL, "reply");
  }
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

Status RedisConnection::Receive() {
  if (broken_) return Status::IOError("redis " + name_ + ": connection is broken");
  // The socket's bytes go straight into hiredis's input buffer, where
  // redisReaderFeed would have copied them, in large reads (hiredis's own
  // read takes 16 KiB at a time): a restore's batch is megabytes, every read
  // is a system call and every copy a pass over the bytes. The buffer is
  // handled as redisReaderFeed does (read.h's public fields, an sds string).
  redisReader* r = context_->reader;
  if (r->len == 0 && r->maxbuf != 0 && sdsavail(r->buf) > r->maxbuf) {
    sdsfree(r->buf);  // emptied and far larger than needed
    r->buf = sdsempty();
    r->pos = 0;
    if (r->buf == nullptr) return OutOfMemory();
  }
  sds room = sdsMakeRoomFor(r->buf, kReadBytes);
  if (room == nullptr) return OutOfMemory();
  r->buf = room;
  const ssize_t n =
      recv(context_->fd, r->buf + sdslen(r->buf), sdsavail(r->buf), MSG_DONTWAIT);
  if (n == 0) {
    broken_ = true;
    return Status::Unavailable("redis " + name_ + ": reply: connection closed");
  }
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
    return Fail(false, "reply");
  }
  sdsIncrLen(r->buf, static_cast<int>(n));
  r->len = sdslen(r->buf);
  Progress();
  return Status::OK();
}

Status RedisConnection::OutOfMemory() {
  broken_ = true;
  return Status::IOError("redis " + name_ + ": reply: out of memory");
}

bool RedisConnection::ClosedWhileIdle() const {
  if (broken_) return true;
  char byte;
  const ssize_t n = recv(context_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  // Nothing to read is the one idle state: 0 is the node's FIN, an error its
  // reset, a byte a reply to nothing.
  return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

int RedisConnection::fd() const { return context_->fd; }

uint64_t RedisConnection::WaitDeadline(uint64_t deadline_nanos) const {
  return std::max(deadline_nanos, progress_deadline_);
}

Status RedisConnection::TimedOut(std::string_view what) {
  broken_ = true;
  return Status::Unavailable("redis " + name_ + ": " + std::string(what) +
                             ": request timeout");
}

void RedisConnection::Progress() {
  if (idle_nanos_ != 0) progress_deadline_ = RedisNowNanos() + idle_nanos_;
}

StatusOr<RedisReplyPtr> RedisConnection::Call(
    std::initializer_list<std::string_view> args, uint64_t deadline_nanos) {
  Append(args);
  PKV_RETURN_IF_ERROR(Flush(deadline_nanos));
  return Read(deadline_nanos);
}

}  // namespace prefixkv
