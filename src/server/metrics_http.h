// MetricsHttpServer: the HTTP/1.1 endpoint Prometheus scrapes (`GET /metrics`),
// on its own acceptor and thread, apart from the RESP I/O threads, so a scrape
// never waits behind a command and a command never waits behind a scrape.
//
//   GET /metrics (any query string)  200, the body `render()` returns
//   any other path                   404
//   any other method on /metrics     405 (Allow: GET)
//   a request over kMaxRequestBytes  400, then the connection is closed
//
// Keep-alive is honoured. Slow or idle clients cannot keep a scrape out: a
// request must arrive whole within MetricsHttpOptions::request_timeout (from
// the connection's opening or the previous response), a response be taken
// within write_timeout, and at most max_connections are open; at the limit a
// new connection is still served: the one that has waited longest for a
// request is closed to make room (when every one is being answered, the
// oldest, its response cut). Sessions run concurrently on the listener's
// thread (asynchronous I/O); only rendering is one at a time.
// The Boost.Beast/Asio types stay in metrics_http.cc.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "prefixkv/status.h"

namespace prefixkv::server {

class MetricsHttpImpl;  // metrics_http.cc

struct MetricsHttpOptions {
  // Most connections open at once (Prometheus needs one or two).
  size_t max_connections = 16;
  // Time for a whole request (line, headers, body) to arrive, from the
  // connection's opening or the end of the previous response; then it is
  // closed (a silent keep-alive connection too).
  std::chrono::milliseconds request_timeout{10'000};
  // Time for the client to take a response.
  std::chrono::milliseconds write_timeout{10'000};
};

// Thread-safe: Start and Stop once each, from any thread.
class MetricsHttpServer {
 public:
  // Request line plus headers (and any body) of one request.
  static constexpr size_t kMaxRequestBytes = 8 << 10;

  // `render` returns the exposition text; it runs on the metrics thread, one
  // scrape at a time.
  explicit MetricsHttpServer(std::function<std::string()> render,
                             MetricsHttpOptions options = {});
  ~MetricsHttpServer();  // Stop()s
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds `address`:`port` (0 picks a free port) and starts the thread.
  // InvalidArgument for a bad address, IOError when it cannot be bound.
  Status Start(const std::string& address, uint16_t port);
  uint16_t port() const;
  // Closes the listener and every connection (a response being written is
  // cut), joins the thread. Idempotent.
  void Stop();

  // Connections closed to make room for a new one (see above).
  uint64_t evicted_connections() const;

 private:
  std::unique_ptr<MetricsHttpImpl> impl_;
};

}  // namespace prefixkv::server
