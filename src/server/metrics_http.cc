// MetricsHttpServer on Boost.Beast: one io_context and one thread; each
// connection a Session that reads a request (bounded by a flat_buffer limit,
// the parser's header and body limits and a deadline), answers it, and reads
// the next while the client keeps the connection alive. The listener keeps
// the open sessions in accept order, so at the connection limit it can close
// the one that has waited longest for a request.

// Boost.Asio brackets handler calls with std::atomic_thread_fence, which GCC
// warns about under ThreadSanitizer (-Wtsan); see server.cc.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#include "metrics_http.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <optional>
#include <string_view>
#include <thread>

#include "metrics_text.h"
#include "prefixkv/advanced/mutex.h"

namespace prefixkv::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Pause before accepting again after an accept error such as EMFILE.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(50);

namespace {
class Session;
}  // namespace

class MetricsHttpImpl {
 public:
  MetricsHttpImpl(std::function<std::string()> render, MetricsHttpOptions options)
      : render_(std::move(render)), options_(options) {}
  Status Start(const std::string& address, uint16_t port);
  void Stop();
  uint16_t port() const { return port_.load(std::memory_order_acquire); }
  uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }

  const std::function<std::string()>& render() const { return render_; }
  const MetricsHttpOptions& options() const { return options_; }
  // The open sessions, oldest first (the metrics thread only).
  std::list<Session*>& sessions() { return sessions_; }

 private:
  void AcceptNext();
  // Makes room for one more session when at the limit.
  void EvictOne();

  const std::function<std::string()> render_;
  const MetricsHttpOptions options_;
  std::atomic<uint16_t> port_{0};
  std::atomic<uint64_t> evicted_{0};
  std::list<Session*> sessions_;
  std::optional<asio::io_context> context_;
  std::optional<tcp::acceptor> acceptor_;  // on context_
  std::thread thread_;
  Mutex mu_;
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
};

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response MakeResponse(const Request& req, const std::function<std::string()>& render) {
  std::string_view target(req.target().data(), req.target().size());
  target = target.substr(0, target.find('?'));
  Response res;
  res.version(req.version());
  res.set(http::field::server, "prefixkv");
  if (target != "/metrics") {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = "not found: only /metrics is served\n";
  } else if (req.method() != http::verb::get) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = "method not allowed: GET /metrics\n";
  } else {
    res.result(http::status::ok);
    res.set(http::field::content_type,
            beast::string_view(kMetricsContentType.data(), kMetricsContentType.size()));
    res.body() = render();
  }
  if (req.method() == http::verb::head) res.body().clear();  // a HEAD reply has no body
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  return res;
}

// One HTTP connection; owned by the handlers in flight (shared_from_this),
// listed in its owner's sessions() while open.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, MetricsHttpImpl* owner)
      : stream_(std::move(socket)),
        owner_(owner),
        listed_(owner->sessions().insert(owner->sessions().end(), this)) {}
  ~Session() { Unlist(); }

  void Read() {
    parser_.emplace();
    parser_->header_limit(MetricsHttpServer::kMaxRequestBytes);
    parser_->body_limit(MetricsHttpServer::kMaxRequestBytes);
    // One deadline for the whole request: a client sending it a byte at a
    // time does not extend it.
    stream_.expires_after(owner_->options().request_timeout);
    waiting_ = true;
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  // Waiting for (the rest of) a request rather than answering one.
  bool waiting() const { return waiting_; }

  // Closes the connection and leaves the list at once (its handlers finish
  // with operation_aborted).
  void Evict() {
    Unlist();
    Close();
  }

 private:
  void Unlist() {
    if (!listed_) return;
    owner_->sessions().erase(*listed_);
    listed_.reset();
  }

  void OnRead(beast::error_code ec) {
    waiting_ = false;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
      return Close();
    }
    if (ec) {  // malformed, or over a limit: say so, then close
      response_ = Response(http::status::bad_request, 11);
      response_.set(http::field::server, "prefixkv");
      response_.set(http::field::content_type, "text/plain; charset=utf-8");
      response_.body() = "bad request: " + ec.message() + "\n";
      response_.keep_alive(false);
      response_.prepare_payload();
    } else {
      response_ = MakeResponse(parser_->get(), owner_->render());
    }
    stream_.expires_after(owner_->options().write_timeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code write_ec, size_t) {
                        self->OnWritten(write_ec);
                      });
  }

  void OnWritten(beast::error_code ec) {
    if (ec || !response_.keep_alive()) return Close();
    Read();
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  MetricsHttpImpl* const owner_;
  std::optional<std::list<Session*>::iterator> listed_;  // empty once unlisted
  bool waiting_ = false;
  beast::flat_buffer buffer_{MetricsHttpServer::kMaxRequestBytes};
  std::optional<http::request_parser<http::string_body>> parser_;
  Response response_;
};

}  // namespace

Status MetricsHttpImpl::Start(const std::string& address, uint16_t port) {
  {
    MutexLock lock(&mu_);
    if (started_) return Status::InvalidArgument("metrics server already started");
    started_ = true;
  }
  boost::system::error_code ec;
  asio::ip::address ip = asio::ip::make_address(address, ec);
  if (ec) return Status::InvalidArgument("bad metrics bind address: " + address);
  context_.emplace(1);
  acceptor_.emplace(*context_);
  tcp::endpoint endpoint(ip, port);
  if (acceptor_->open(endpoint.protocol(), ec) ||
      acceptor_->set_option(tcp::acceptor::reuse_address(true), ec) ||
      acceptor_->bind(endpoint, ec) ||
      acceptor_->listen(asio::socket_base::max_listen_connections, ec)) {
    return Status::IOError("cannot listen for metrics on " + address + ":" +
                           std::to_string(port) + ": " + ec.message());
  }
  port_.store(acceptor_->local_endpoint().port(), std::memory_order_release);
  AcceptNext();
  thread_ = std::thread([this] { context_->run(); });
  return Status::OK();
}

void MetricsHttpImpl::AcceptNext() {
  acceptor_->async_accept(
      [this](const boost::system::error_code& ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
        if (ec) {  // out of descriptors, a reset before accept...: try again shortly
          auto retry = std::make_shared<asio::steady_timer>(*context_, kAcceptRetryDelay);
          retry->async_wait([this, retry](const boost::system::error_code& wait_ec) {
            if (!wait_ec && acceptor_->is_open()) AcceptNext();
          });
          return;
        }
        if (sessions_.size() >= options_.max_connections) EvictOne();
        std::make_shared<Session>(std::move(socket), this)->Read();
        AcceptNext();
      });
}

void MetricsHttpImpl::EvictOne() {
  if (sessions_.empty()) return;
  Session* victim = sessions_.front();  // the oldest, when every one is answering
  for (Session* s : sessions_) {
    if (s->waiting()) {
      victim = s;
      break;
    }
  }
  victim->Evict();
  evicted_.fetch_add(1, std::memory_order_relaxed);
}

void MetricsHttpImpl::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (thread_.joinable()) {
    context_->stop();
    thread_.join();
  }
  // Destroying the context destroys the handlers still pending, and with them
  // the sessions they own (their sockets close).
  acceptor_.reset();
  context_.reset();
}

MetricsHttpServer::MetricsHttpServer(std::function<std::string()> render,
                                     MetricsHttpOptions options)
    : impl_(std::make_unique<MetricsHttpImpl>(std::move(render), options)) {}
MetricsHttpServer::~MetricsHttpServer() { Stop(); }
Status MetricsHttpServer::Start(const std::string& address, uint16_t port) {
  return impl_->Start(address, port);
}
uint16_t MetricsHttpServer::port() const { return impl_->port(); }
uint64_t MetricsHttpServer::evicted_connections() const { return impl_->evicted(); }
void MetricsHttpServer::Stop() { impl_->Stop(); }

}  // namespace prefixkv::server
