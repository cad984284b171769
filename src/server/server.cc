// Server: the acceptor, the I/O threads, the connection registry, idle sweeps
// and graceful shutdown. One io_context per I/O thread; a connection lives on
// the thread it was accepted onto (round robin), so its handlers never race.

// Boost.Asio brackets handler calls with std::atomic_thread_fence, which GCC
// warns about under ThreadSanitizer (-Wtsan). The scheduler's mutexes already
// order everything these fences do, so the warning is noise here.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#include "prefixkv/server.h"

#include <sys/resource.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <unordered_map>

#include "auth_throttle.h"
#include "command_stats.h"
#include "commands.h"
#include "connection.h"
#include "metrics_http.h"
#include "metrics_text.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/version.h"

namespace prefixkv {

namespace asio = boost::asio;
using asio::ip::tcp;
using server::Connection;

namespace {

// How long Stop() waits for clients to take their last replies.
constexpr auto kShutdownGrace = std::chrono::seconds(2);
// Pause before accepting again after an accept error such as EMFILE.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(50);
// A connection idle this long (by the options' clock) gives back the buffers
// it keeps for its next requests (Connection::PostReleaseBuffers).
constexpr uint64_t kReleaseBuffersAfterIdleMs = 2000;
// Most auth_failures_per_second and auth_failure_burst (the throttle's token
// arithmetic stays far from overflow).
constexpr uint64_t kMaxAuthRate = 1'000'000;

// Physical memory plus swap: the most a request could ever occupy.
uint64_t MachineMemoryBytes() {
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return UINT64_MAX;
  return (static_cast<uint64_t>(info.totalram) + info.totalswap) * info.mem_unit;
}

// The options as the server applies them: no request can be larger than the
// memory that would hold it, so max_request_bytes is lowered to the machine's.
// Applied before anything copies the options (the transaction limit is this
// max_request_bytes too: taken unlowered, a client could queue past RAM).
ServerOptions InForce(ServerOptions o) {
  o.max_request_bytes = std::min<uint64_t>(o.max_request_bytes, MachineMemoryBytes());
  return o;
}

// Runs an I/O thread's handlers. A handler that throws (an allocation that
// failed outside a request, which the connection already handles) must not
// end the process: the thread goes back to its loop.
void RunLoop(asio::io_context* ctx) {
  while (true) {
    try {
      ctx->run();
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "prefixkv server: an I/O handler failed: %s\n", e.what());
    }
  }
}

// Descriptors kept for the engine beyond those it holds when the server
// starts (as Redis keeps 32 beyond maxclients): new SSD segments, RocksDB
// tables and logs, event log segments, the metrics endpoint's connections.
constexpr uint64_t kReservedFds = 64;

// The clients that fit in RLIMIT_NOFILE with the engine's descriptors and
// kReservedFds left over: `max_connections`, or fewer, as Redis lowers
// maxclients to `ulimit -n`. Each client holds a descriptor: admitted past
// the limit, idle clients took the last ones, so the SSD tier could not open
// a segment (every write-through SET and write-back failed 'Too many open
// files') and new clients hung unanswered in the accept backlog instead of
// being told the server is full. `max_connections` when /proc or getrlimit
// cannot be read; at least 1.
size_t ConnectionsThatFit(size_t max_connections) {
  rlimit limit{};
  const StatusOr<uint64_t> open_fds = server::CountOpenFds();
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || !open_fds.ok() ||
      limit.rlim_cur == RLIM_INFINITY) {
    return max_connections;
  }
  const uint64_t kept = *open_fds + kReservedFds;
  const uint64_t fit = limit.rlim_cur > kept ? limit.rlim_cur - kept : 1;
  return static_cast<size_t>(
      std::max<uint64_t>(1, std::min<uint64_t>(max_connections, fit)));
}

// The server-wide AUTH budget; null when the options turn it off (or are out
// of range: Start() refuses them).
std::unique_ptr<server::AuthThrottle> NewAuthThrottle(const ServerOptions& o,
                                                      Clock* clock) {
  if (o.auth_failures_per_second == 0 || o.auth_failures_per_second > kMaxAuthRate ||
      o.auth_failure_burst == 0 || o.auth_failure_burst > kMaxAuthRate) {
    return nullptr;
  }
  std::function<void(std::string_view)> log = o.log;
  if (!log) {
    log = [](std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
  return std::make_unique<server::AuthThrottle>(
      o.auth_failures_per_second, o.auth_failure_burst, clock, std::move(log));
}

}  // namespace

class internal::ServerImpl {
 public:
  ServerImpl(ServerOptions options, Engine* engine);
  Status Start();
  void Stop();
  size_t SweepIdle();
  ServerStats Stats() const;
  uint16_t port() const { return port_; }
  uint16_t metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }

 private:
  using WorkGuard = asio::executor_work_guard<asio::io_context::executor_type>;

  // Lowers options_.max_connections to ConnectionsThatFit, saying so in the log.
  void LimitConnectionsToDescriptors();
  void AcceptNext();
  void OnAccepted(tcp::socket socket);
  void ScheduleSweep();
  void OnClosed(Connection* c);
  void AppendInfo(const std::function<bool(std::string_view)>& wanted,
                  std::string* out) const;

  ServerOptions options_;
  Clock* clock_;
  Engine* const engine_;
  server::CommandStatsRecorder command_stats_;  // before dispatcher_, which uses it
  std::unique_ptr<server::AuthThrottle> auth_throttle_;  // null: no server-wide limit
  // Before dispatcher_, which counts the commands it runs in it.
  server::ServerCounters counters_;
  server::Dispatcher dispatcher_;
  server::ConnectionEnv env_;
  uint64_t start_ms_ = 0;
  uint16_t port_ = 0;

  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<WorkGuard> guards_;
  std::vector<std::thread> threads_;
  std::optional<tcp::acceptor> acceptor_;    // on contexts_[0]
  std::optional<asio::steady_timer> timer_;  // idle sweeps and accept retries
  size_t next_context_ = 0;                  // acceptor thread only
  // The /metrics listener; null without options_.metrics_port.
  std::unique_ptr<server::MetricsHttpServer> metrics_;

  mutable Mutex mu_;
  CondVar all_closed_;
  std::unordered_map<Connection*, std::shared_ptr<Connection>> connections_
      GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
};

internal::ServerImpl::ServerImpl(ServerOptions options, Engine* engine)
    : options_(InForce(std::move(options))),
      clock_(options_.clock != nullptr ? options_.clock : Clock::System()),
      engine_(engine),
      auth_throttle_(NewAuthThrottle(options_, clock_)),
      dispatcher_(
          engine,
          server::DispatcherConfig{
              options_.requirepass, options_.admin_pass, options_.max_auth_failures,
              auth_throttle_.get(), options_.max_models,
              [this](const auto& wanted, std::string* out) { AppendInfo(wanted, out); },
              &command_stats_, clock_, options_.max_request_bytes,
              &counters_.total_commands_processed}) {
  env_.dispatcher = &dispatcher_;
  env_.options = &options_;
  env_.clock = clock_;
  env_.counters = &counters_;
  env_.on_closed = [this](Connection* c) { OnClosed(c); };
}

Status internal::ServerImpl::Start() {
  if (engine_ == nullptr || engine_->closed()) {
    return Status::InvalidArgument("server needs an open engine");
  }
  if (options_.io_threads < 1) return Status::InvalidArgument("io_threads must be >= 1");
  if (options_.read_chunk_bytes < 512) {
    return Status::InvalidArgument("read_chunk_bytes must be >= 512");
  }
  if (options_.auth_failures_per_second > kMaxAuthRate ||
      options_.auth_failure_burst > kMaxAuthRate ||
      (options_.auth_failures_per_second != 0 && options_.auth_failure_burst == 0)) {
    return Status::InvalidArgument(
        "auth_failures_per_second and auth_failure_burst must be <= 1000000, and the "
        "burst >= 1 unless the rate is 0");
  }
  {
    MutexLock lock(&mu_);
    if (started_) return Status::InvalidArgument("server already started");
    started_ = true;
  }
  for (int i = 0; i < options_.io_threads; ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    guards_.push_back(asio::make_work_guard(*contexts_.back()));
  }
  boost::system::error_code ec;
  asio::ip::address address = asio::ip::make_address(options_.bind_address, ec);
  if (ec) return Status::InvalidArgument("bad bind address: " + options_.bind_address);
  acceptor_.emplace(*contexts_[0]);
  tcp::endpoint endpoint(address, options_.port);
  if (acceptor_->open(endpoint.protocol(), ec) ||
      acceptor_->set_option(tcp::acceptor::reuse_address(true), ec) ||
      acceptor_->bind(endpoint, ec) ||
      acceptor_->listen(asio::socket_base::max_listen_connections, ec)) {
    return Status::IOError("cannot listen on " + options_.bind_address + ":" +
                           std::to_string(options_.port) + ": " + ec.message());
  }
  if (options_.metrics_port) {
    metrics_ = std::make_unique<server::MetricsHttpServer>([this] {
      // Without /proc the process_* families are left out, nothing else.
      const StatusOr<server::ProcessStats> process = server::ReadProcessStats();
      return server::RenderMetrics(engine_->Stats(), Stats(),
                                   process.ok() ? &*process : nullptr);
    });
    PKV_RETURN_IF_ERROR(metrics_->Start(options_.bind_address, *options_.metrics_port));
  }
  port_ = acceptor_->local_endpoint().port();
  start_ms_ = clock_->NowMillis();
  timer_.emplace(*contexts_[0]);
  // Once the I/O threads' and listeners' descriptors are open: they count.
  LimitConnectionsToDescriptors();
  AcceptNext();
  ScheduleSweep();
  for (auto& ctx : contexts_) threads_.emplace_back([c = ctx.get()] { RunLoop(c); });
  return Status::OK();
}

void internal::ServerImpl::LimitConnectionsToDescriptors() {
  const size_t fit = ConnectionsThatFit(options_.max_connections);
  if (fit >= options_.max_connections) return;
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const std::string line =
      "prefixkv server: the open file limit (ulimit -n) is " +
      std::to_string(limit.rlim_cur) + ": at most " + std::to_string(fit) + " of " +
      std::to_string(options_.max_connections) +
      " clients are accepted, so the engine keeps the descriptors it needs (raise the "
      "limit to serve more)";
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  options_.max_connections = fit;
}

void internal::ServerImpl::AcceptNext() {
  asio::io_context& target = *contexts_[next_context_++ % contexts_.size()];
  acceptor_->async_accept(target, [this](const boost::system::error_code& ec,
                                         tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
    if (ec) {  // out of descriptors, a reset before accept...: try again shortly
      auto retry = std::make_shared<asio::steady_timer>(*contexts_[0], kAcceptRetryDelay);
      retry->async_wait([this, retry](const boost::system::error_code& wait_ec) {
        if (!wait_ec && acceptor_->is_open()) AcceptNext();
      });
      return;
    }
    OnAccepted(std::move(socket));
    AcceptNext();
  });
}

void internal::ServerImpl::OnAccepted(tcp::socket socket) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  std::shared_ptr<Connection> conn;
  bool stopping = false;
  {
    MutexLock lock(&mu_);
    stopping = stopped_;
    if (!stopping && connections_.size() < options_.max_connections) {
      conn = std::make_shared<Connection>(std::move(socket), &env_);
      connections_.emplace(conn.get(), conn);
    }
  }
  if (conn == nullptr && stopping) {
    socket.close(ignored);  // accepted while Stop() runs: no reply, just close
    return;
  }
  if (conn == nullptr) {
    counters_.rejected_connections.fetch_add(1, std::memory_order_relaxed);
    // A fresh socket's send buffer is empty: this short write cannot block.
    constexpr std::string_view kFull = "-ERR max number of clients reached\r\n";
    asio::write(socket, asio::buffer(kFull.data(), kFull.size()), ignored);
    socket.close(ignored);
    return;
  }
  // As in Redis, a connection refused over max_connections is counted only
  // in rejected_connections.
  counters_.total_connections_received.fetch_add(1, std::memory_order_relaxed);
  conn->PostStart();
}

void internal::ServerImpl::OnClosed(Connection* c) {
  MutexLock lock(&mu_);
  connections_.erase(c);
  if (connections_.empty()) all_closed_.NotifyAll();
}

void internal::ServerImpl::ScheduleSweep() {
  timer_->expires_after(
      std::chrono::milliseconds(std::max<uint64_t>(1, options_.idle_check_interval_ms)));
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    SweepIdle();
    ScheduleSweep();
  });
}

size_t internal::ServerImpl::SweepIdle() {
  const uint64_t now = clock_->NowMillis();
  const uint64_t timeout = options_.idle_timeout_ms;
  size_t closed = 0;
  MutexLock lock(&mu_);
  for (auto& [ptr, conn] : connections_) {
    // A client waiting in XREAD BLOCK is not idle (its block ends with a
    // reply, which counts as activity).
    if (conn->blocked_read()) continue;
    const uint64_t last = conn->last_activity_ms();
    const uint64_t idle_ms = now > last ? now - last : 0;
    if (timeout != 0 && idle_ms > timeout) {
      if (conn->ClaimIdleClose()) {  // not closing already for an earlier sweep
        conn->PostClose();
        ++closed;
      }
    } else if (idle_ms >= kReleaseBuffersAfterIdleMs && conn->buffer_bytes() > 0) {
      conn->PostReleaseBuffers();
    }
  }
  counters_.idle_disconnections.fetch_add(closed, std::memory_order_relaxed);
  return closed;
}

void internal::ServerImpl::Stop() {
  {
    MutexLock lock(&mu_);
    if (!started_ || stopped_) return;
    stopped_ = true;
  }
  if (metrics_ != nullptr) metrics_->Stop();  // no scrape reads the engine after Stop
  asio::post(*contexts_[0], [this] {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
    timer_->cancel();
  });
  MutexLock lock(&mu_);
  for (auto& [ptr, conn] : connections_) conn->PostShutdown();
  auto all_closed = [this]() REQUIRES(mu_) { return connections_.empty(); };
  if (!all_closed_.WaitFor(lock, kShutdownGrace, all_closed)) {
    for (auto& [ptr, conn] : connections_) conn->PostClose();  // clients that never read
    all_closed_.Wait(lock, all_closed);
  }
  lock.Unlock();
  for (auto& guard : guards_) guard.reset();
  for (auto& ctx : contexts_) ctx->stop();
  for (auto& t : threads_) t.join();
}

ServerStats internal::ServerImpl::Stats() const {
  ServerStats s;
  {
    MutexLock lock(&mu_);
    s.connected_clients = connections_.size();
  }
  s.total_connections_received = counters_.total_connections_received.load();
  s.rejected_connections = counters_.rejected_connections.load();
  s.total_commands_processed = counters_.total_commands_processed.load();
  s.protocol_errors = counters_.protocol_errors.load();
  s.idle_disconnections = counters_.idle_disconnections.load();
  s.auth_failures = counters_.auth_failures.load();
  s.auth_throttled = counters_.auth_throttled.load();
  s.out_of_memory = counters_.out_of_memory.load();
  s.client_buffer_bytes = counters_.client_buffer_bytes.load();
  s.commands = command_stats_.Snapshot();
  return s;
}

void internal::ServerImpl::AppendInfo(const std::function<bool(std::string_view)>& wanted,
                                      std::string* out) const {
  ServerStats s = Stats();
  auto line = [out](const char* name, const std::string& v) {
    *out += std::string(name) + ":" + v + "\r\n";
  };
  if (wanted("server")) {
    *out += "# Server\r\n";
    line("prefixkv_version", PREFIXKV_VERSION_STRING);
    line("redis_version", "7.0.0");  // the protocol level clients may check
    line("redis_mode", "standalone");
    line("tcp_port", std::to_string(port_));
    line("uptime_in_seconds", std::to_string((clock_->NowMillis() - start_ms_) / 1000));
    line("io_threads", std::to_string(options_.io_threads));
    line("max_request_bytes", std::to_string(options_.max_request_bytes));
    line("admin_commands", options_.admin_pass.empty() ? "off" : "on");
    *out += "\r\n";
  }
  if (wanted("clients")) {
    *out += "# Clients\r\n";
    line("connected_clients", std::to_string(s.connected_clients));
    line("maxclients", std::to_string(options_.max_connections));
    line("client_buffer_bytes", std::to_string(s.client_buffer_bytes));
    *out += "\r\n";
  }
  if (wanted("stats")) {
    *out += "# Stats\r\n";
    line("total_connections_received", std::to_string(s.total_connections_received));
    line("total_commands_processed", std::to_string(s.total_commands_processed));
    line("rejected_connections", std::to_string(s.rejected_connections));
    line("protocol_errors", std::to_string(s.protocol_errors));
    line("idle_disconnections", std::to_string(s.idle_disconnections));
    line("auth_failures", std::to_string(s.auth_failures));
    line("auth_throttled", std::to_string(s.auth_throttled));
    line("out_of_memory_refusals", std::to_string(s.out_of_memory));
    *out += "\r\n";
  }
  if (wanted("commandstats")) {
    // Redis's format; only commands that ran or were refused at least once.
    *out += "# Commandstats\r\n";
    for (const CommandStats& c : s.commands) {
      if (c.calls == 0 && c.rejected_calls == 0) continue;
      char per_call[32];
      std::snprintf(per_call, sizeof(per_call), "%.2f",
                    c.calls == 0 ? 0.0
                                 : static_cast<double>(c.latency.sum_micros) /
                                       static_cast<double>(c.calls));
      *out += "cmdstat_" + c.name + ":calls=" + std::to_string(c.calls) +
              ",usec=" + std::to_string(c.latency.sum_micros) +
              ",usec_per_call=" + per_call +
              ",rejected_calls=" + std::to_string(c.rejected_calls) +
              ",failed_calls=" + std::to_string(c.failed_calls) + "\r\n";
    }
    *out += "\r\n";
  }
}

Server::Server(ServerOptions options, Engine* engine)
    : impl_(std::make_unique<internal::ServerImpl>(std::move(options), engine)) {}
Server::~Server() { Stop(); }
Status Server::Start() { return impl_->Start(); }
uint16_t Server::port() const { return impl_->port(); }
uint16_t Server::metrics_port() const { return impl_->metrics_port(); }
void Server::Stop() { impl_->Stop(); }
size_t Server::SweepIdleConnections() { return impl_->SweepIdle(); }
ServerStats Server::stats() const { return impl_->Stats(); }

}  // namespace prefixkv
