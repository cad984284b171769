// MetricsHttpServer: the HTTP/1.1 endpoint Prometheus scrapes (`GET /metrics`),
// on its own acceptor and thread, apart from the RESP I/O threads, so a scrape
// never waits behind a command and a command never waits behind a scrape.
//
//   GET /metrics (any query string)  200, the body `render()` returns
//   any other path                   404
//   any other method on /metrics     405 (Allow: GET)
//   a request over kMaxRequestBytes  400, then the connection is closed
//
// Keep-alive is honoured; a connection silent for kIdleTimeout is closed, and
// at most kMaxConnections are open at once (others are closed at accept).
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

// Thread-safe: Start and Stop once each, from any thread.
class MetricsHttpServer {
 public:
  // Request line plus headers (and any body) of one request.
  static constexpr size_t kMaxRequestBytes = 8 << 10;
  static constexpr size_t kMaxConnections = 64;
  static constexpr std::chrono::seconds kIdleTimeout{30};

  // `render` returns the exposition text; it runs on the metrics thread, one
  // scrape at a time.
  explicit MetricsHttpServer(std::function<std::string()> render);
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

 private:
  std::unique_ptr<MetricsHttpImpl> impl_;
};

}  // namespace prefixkv::server
