// One client connection: the read / parse / execute / write pump.

// Boost.Asio brackets handler calls with std::atomic_thread_fence, which GCC
// warns about under ThreadSanitizer (-Wtsan). The scheduler's mutexes already
// order everything these fences do, so the warning is noise here.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#include "connection.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstring>
#include <new>

namespace prefixkv::server {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

RespLimits LimitsFrom(const ServerOptions& o, bool authenticated) {
  RespLimits limits{o.max_request_bytes, o.max_array_elements, o.max_inline_bytes};
  if (!authenticated) {
    const size_t cap = o.max_unauthenticated_bytes;
    limits.max_request_bytes = std::min(limits.max_request_bytes, cap);
    limits.max_inline_bytes = std::min(limits.max_inline_bytes, cap);
    limits.max_array_elements = std::min<size_t>(limits.max_array_elements, 16);
  }
  return limits;
}

// XREAD's BLOCK as the timer's duration. The timer counts nanoseconds in an
// int64 (about 292 years): a longer BLOCK (up to 2^64-1 ms is accepted) is
// cut to the longest it can hold, rather than converted with an overflow
// into a time in the past, which answered nil at once.
asio::steady_timer::duration BlockTimeout(uint64_t ms) {
  using Duration = asio::steady_timer::duration;
  constexpr auto kMaxMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(Duration::max());
  return std::chrono::duration_cast<Duration>(std::chrono::milliseconds(
      std::min<uint64_t>(ms, static_cast<uint64_t>(kMaxMs.count()))));
}

// "ip:port" of one end of the socket ("" when it is not connected).
std::string EndpointText(const tcp::socket& socket, bool remote) {
  boost::system::error_code ec;
  const tcp::endpoint e = remote ? socket.remote_endpoint(ec) : socket.local_endpoint(ec);
  if (ec) return "";
  return e.address().to_string() + ":" + std::to_string(e.port());
}

}  // namespace

Connection::Connection(tcp::socket socket, const ConnectionEnv* env)
    : socket_(std::move(socket)),
      env_(env),
      parser_(LimitsFrom(*env->options, true)),
      client_(env->dispatcher->NewClient(EndpointText(socket_, true),
                                         EndpointText(socket_, false))),
      delay_timer_(socket_.get_executor()),
      block_timer_(socket_.get_executor()) {
  // Reads are attempted only after a wait for readability; a wake with
  // nothing to read must not block the I/O thread.
  boost::system::error_code ignored;
  socket_.non_blocking(true, ignored);
  ApplyLimits();
  Touch();
}

Connection::~Connection() {
  env_->counters->client_buffer_bytes.fetch_sub(buffer_bytes(),
                                                std::memory_order_relaxed);
}

size_t Connection::ReadChunkBytes() const {
  const ServerOptions& o = *env_->options;
  if (client_.authenticated) return o.read_chunk_bytes;
  return std::min(o.read_chunk_bytes,
                  std::max(kMinReadBytes, o.max_unauthenticated_bytes));
}

size_t Connection::BufferBytes() const {
  return read_cap_ + parser_.buffer_bytes() + args_.capacity() * sizeof(SharedBytes) +
         queued_.buffer_bytes() + writing_.buffer_bytes() +
         write_pieces_.capacity() * sizeof(asio::const_buffer) + client_.multi_bytes;
}

void Connection::AccountBuffers() {
  const size_t now = BufferBytes();
  // Unsigned: a shrink adds its two's complement, which subtracts.
  env_->counters->client_buffer_bytes.fetch_add(now - buffer_bytes(),
                                                std::memory_order_relaxed);
  accounted_bytes_.store(now, std::memory_order_relaxed);
}

void Connection::ApplyLimits() {
  parser_.set_limits(LimitsFrom(*env_->options, client_.authenticated));
}

size_t Connection::ReplyLimit() const {
  const ServerOptions& o = *env_->options;
  return client_.authenticated
             ? o.max_pending_reply_bytes
             : std::min(o.max_pending_reply_bytes, o.max_unauthenticated_bytes);
}

void Connection::PostStart() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Pump(); });
}

void Connection::PostShutdown() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->stop_reading_ = true;
    // Wakes a pending read with end-of-file; queued replies still go out.
    boost::system::error_code ignored;
    if (self->reading_) self->socket_.shutdown(tcp::socket::shutdown_receive, ignored);
    self->Pump();
  });
}

void Connection::PostClose() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

void Connection::PostReleaseBuffers() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    // Idle: waiting for the client's next bytes, every byte parsed, no reply
    // pending (a connection reading a large value straight into its final
    // buffer is not idle: that buffer is the value).
    if (self->closed_ || !self->reading_ || self->writing_in_flight_ ||
        !self->queued_.empty() || self->read_pos_ < self->read_end_ ||
        self->parser_.body_capacity() > kSharedArgBytes) {
      return;
    }
    self->read_buf_.reset();
    self->read_cap_ = 0;
    self->parser_.ReleaseIdleBuffers();
    RespArgs().swap(self->args_);
    self->queued_.Release();
    self->writing_.Release();
    decltype(self->write_pieces_)().swap(self->write_pieces_);
    self->AccountBuffers();
  });
}

void Connection::Touch() {
  last_activity_ms_.store(env_->clock->NowMillis(), std::memory_order_relaxed);
}

void Connection::Pump() {
  if (closed_) return;
  ProcessInput();
  if (blocked_ && peer_closed_) DropBlockedRead();
  Flush();
  if (stop_reading_) {
    // A read kept under way behind an XREAD BLOCK (MaybeRead) would hold the
    // connection open after a QUIT or protocol error pipelined behind it
    // until the client sent more: end it as PostShutdown does.
    boost::system::error_code ignored;
    if (reading_) socket_.shutdown(tcp::socket::shutdown_receive, ignored);
    if (!reading_ && !writing_in_flight_ && queued_.empty() && !delayed_ && !blocked_) {
      return Close();
    }
  } else {
    MaybeRead();
  }
  AccountBuffers();
}

void Connection::MaybeRead() {
  bool paused = PendingReplyBytes() > ReplyLimit();
  if (reading_ || paused) return;  // OnWritten resumes
  if (read_pos_ < read_end_) {
    // Unparsed input waits behind an XREAD BLOCK: read on after it, or the
    // client's close would go unseen until the XREAD answers.
    if (blocked_ && KeepUnparsedInput()) {
      reading_ = true;
      WaitReadable();
    }
    return;
  }
  read_pos_ = read_end_ = 0;
  if (read_cap_ > kKeepReadBytes) {  // every byte is parsed: give a large one back
    read_buf_.reset();
    read_cap_ = 0;
  }
  reading_ = true;
  std::span<uint8_t> direct = parser_.DirectTarget(env_->options->read_chunk_bytes);
  if (!direct.empty()) {
    // A large bulk argument: read it straight into its final buffer.
    socket_.async_read_some(asio::buffer(direct.data(), direct.size()),
                            [self = shared_from_this()](auto ec, size_t n) {
                              if (!ec) self->parser_.CommitDirect(n);
                              self->OnRead(ec, 0);
                            });
  } else {
    WaitReadable();
  }
}

void Connection::WaitReadable() {
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](auto ec) { self->OnReadable(ec); });
}

void Connection::OnReadable(const boost::system::error_code& ec) {
  if (closed_) return;
  if (ec) {
    reading_ = false;
    return Close();
  }
  if (!SizeReadBuffer()) {
    env_->counters->out_of_memory.fetch_add(1, std::memory_order_relaxed);
    reading_ = false;
    return Close();
  }
  boost::system::error_code read_ec;
  const size_t room = read_cap_ - read_end_;
  const size_t n =
      socket_.read_some(asio::buffer(read_buf_.get() + read_end_, room), read_ec);
  if (read_ec == asio::error::would_block || read_ec == asio::error::try_again) {
    return WaitReadable();  // woken with nothing to read
  }
  // A full buffer: more may be waiting, so size the next one by it.
  grow_read_ = !read_ec && n == room && read_cap_ < ReadChunkBytes();
  OnRead(read_ec, n);
}

bool Connection::SizeReadBuffer() {
  const size_t kept = read_end_;  // input a read appends to (KeepUnparsedInput)
  // A kept buffer serves as it is unless the last read filled it (one ioctl
  // spared per read of a client that sends small requests).
  if (read_cap_ != 0 && !grow_read_ && read_cap_ - kept >= kMinReadBytes) return true;
  boost::system::error_code ignored;
  const size_t want =
      kept + std::clamp(socket_.available(ignored), kMinReadBytes, ReadChunkBytes());
  if (read_cap_ >= want) return true;
  if (kept == 0) {  // nothing to carry over: the old buffer goes first
    read_buf_.reset();
    read_cap_ = 0;
  }
  std::unique_ptr<char[]> buf;
  try {
    buf.reset(new char[want]);
  } catch (const std::bad_alloc&) {
    return false;
  }
  if (kept > 0) std::memcpy(buf.get(), read_buf_.get(), kept);
  read_buf_ = std::move(buf);
  read_cap_ = want;
  return true;
}

bool Connection::KeepUnparsedInput() {
  const size_t unparsed = read_end_ - read_pos_;
  if (unparsed >= ReadChunkBytes()) return false;
  std::memmove(read_buf_.get(), read_buf_.get() + read_pos_, unparsed);
  read_pos_ = 0;
  read_end_ = unparsed;
  return true;
}

void Connection::OnRead(const boost::system::error_code& ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  if (ec == asio::error::eof) {
    stop_reading_ = true;  // the client is done sending; answer what it sent
    peer_closed_ = true;
  } else if (ec) {
    Close();
    return;
  } else {
    Touch();
    read_end_ += n;
  }
  Pump();
}

void Connection::ProcessInput() {
  while (read_pos_ < read_end_ && !client_.close_requested && !delayed_ && !blocked_ &&
         PendingReplyBytes() <= ReplyLimit()) {
    std::string_view in(read_buf_.get() + read_pos_, read_end_ - read_pos_);
    RespParser::Result r = parser_.Parse(&in, &args_);
    read_pos_ = read_end_ - in.size();
    if (r == RespParser::Result::kCommand) {
      Execute();
    } else if (r == RespParser::Result::kError) {
      queued_.Error("ERR " + parser_.error());
      (parser_.out_of_memory() ? env_->counters->out_of_memory
                               : env_->counters->protocol_errors)
          .fetch_add(1, std::memory_order_relaxed);
      client_.close_requested = stop_reading_ = true;
    }
  }
  // Never parse past QUIT. Once every byte is parsed the next read starts at
  // the front, even one under way (a read behind an XREAD BLOCK appends at
  // read_end_): the buffer then holds nothing to keep, and may be freed.
  if (client_.close_requested || read_pos_ == read_end_) read_pos_ = read_end_ = 0;
}

void Connection::Execute() {
  const bool was_authenticated = client_.authenticated;
  const size_t failures = client_.auth_failures;
  const size_t throttled = client_.auth_throttled;
  try {
    env_->dispatcher->Execute(args_, &client_, &queued_);
  } catch (const std::bad_alloc&) {
    // The reply may be torn: answer the error and close, the server goes on.
    queued_.Error("ERR out of memory: the request was refused");
    env_->counters->out_of_memory.fetch_add(1, std::memory_order_relaxed);
    client_.close_requested = true;
  }
  if (client_.block.has_value()) {
    const BlockedRead read = *client_.block;
    client_.block.reset();
    StartBlockedRead(read);
  }
  // Stored values are now owned by the tiers alone; the list of a command of
  // many arguments is freed.
  if (args_.capacity() * sizeof(SharedBytes) > kKeepReadBytes) {
    RespArgs().swap(args_);
  } else {
    args_.clear();
  }
  if (client_.authenticated != was_authenticated) ApplyLimits();
  if (client_.close_requested) stop_reading_ = true;
  if (client_.auth_failures > failures || client_.auth_throttled > throttled) {
    env_->counters->auth_failures.fetch_add(client_.auth_failures - failures,
                                            std::memory_order_relaxed);
    env_->counters->auth_throttled.fetch_add(client_.auth_throttled - throttled,
                                             std::memory_order_relaxed);
    if (!client_.close_requested) DelayAfterAuthFailure();
  }
}

void Connection::DelayAfterAuthFailure() {
  const uint64_t ms = env_->options->auth_failure_delay_ms;
  if (ms == 0) return;
  delayed_ = true;
  delay_timer_.expires_after(std::chrono::milliseconds(ms));
  delay_timer_.async_wait([self = shared_from_this()](const boost::system::error_code&) {
    self->delayed_ = false;
    self->Pump();
  });
}

void Connection::StartBlockedRead(const BlockedRead& read) {
  blocked_ = true;
  blocked_read_.store(true, std::memory_order_relaxed);
  block_ = read;
  const uint64_t generation = ++block_generation_;
  if (read.timeout_ms > 0) {
    block_timer_.expires_after(BlockTimeout(read.timeout_ms));
    block_timer_.async_wait(
        [weak = weak_from_this(), generation](const boost::system::error_code& ec) {
          auto self = weak.lock();
          if (!ec && self) self->ResumeBlockedRead(generation, true);
        });
  }
  WatchBlockedRead();
}

void Connection::WatchBlockedRead() {
  const uint64_t generation = block_generation_;
  std::weak_ptr<Connection> weak = weak_from_this();
  auto executor = socket_.get_executor();
  // Runs on the thread appending the event, under a tier's lock: only posts.
  StatusOr<uint64_t> watch = env_->dispatcher->engine()->WatchEvents(
      block_.from_seq, [weak, executor, generation] {
        asio::post(executor, [weak, generation] {
          if (auto self = weak.lock()) self->ResumeBlockedRead(generation, false);
        });
      });
  block_watch_ = watch.ok() ? *watch : 0;
  if (!watch.ok()) ResumeBlockedRead(generation, true);  // replies the error
}

void Connection::ResumeBlockedRead(uint64_t generation, bool timed_out) {
  if (!blocked_ || closed_ || generation != block_generation_) return;
  if (!timed_out) block_watch_ = 0;  // a watch runs once: this one is gone
  if (!env_->dispatcher->AnswerBlockedRead(block_, timed_out, &queued_)) {
    return WatchBlockedRead();  // woken for nothing newer: wait again
  }
  EndBlockedRead();
  Touch();
  Pump();
}

void Connection::EndBlockedRead() {
  if (!blocked_) return;
  blocked_ = false;
  blocked_read_.store(false, std::memory_order_relaxed);
  ++block_generation_;
  if (block_watch_ != 0) env_->dispatcher->engine()->UnwatchEvents(block_watch_);
  block_watch_ = 0;
  block_timer_.cancel();
}

void Connection::DropBlockedRead() {
  EndBlockedRead();
  client_.close_requested = stop_reading_ = true;  // like QUIT: nothing after it runs
  read_pos_ = read_end_ = 0;
}

void Connection::Flush() {
  if (writing_in_flight_ || queued_.empty() || closed_) return;
  std::swap(writing_, queued_);
  write_pieces_.clear();
  writing_.ForEachPiece(
      [this](const void* p, size_t n) { write_pieces_.emplace_back(p, n); });
  writing_in_flight_ = true;
  // Every piece of the reply the client takes in is activity: a client reading
  // a long reply is not idle (one that stops reading is, once its socket
  // buffers are full). The completion condition runs after each write.
  asio::async_write(
      socket_, write_pieces_,
      [this](const boost::system::error_code& ec, size_t written) -> size_t {
        if (written > 0) Touch();
        return asio::transfer_all()(ec, written);
      },
      [self = shared_from_this()](auto ec, size_t) { self->OnWritten(ec); });
}

void Connection::OnWritten(const boost::system::error_code& ec) {
  writing_in_flight_ = false;
  writing_.Clear();
  if (write_pieces_.capacity() * sizeof(asio::const_buffer) > kKeepReadBytes) {
    decltype(write_pieces_)().swap(write_pieces_);
  }
  if (closed_) return;
  if (ec) {
    Close();
    return;
  }
  Pump();
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  delay_timer_.cancel();
  EndBlockedRead();
  queued_.Clear();
  read_buf_.reset();
  read_cap_ = 0;
  AccountBuffers();
  if (env_->on_closed) env_->on_closed(this);
}

}  // namespace prefixkv::server
