// `prefixkv route`: a RESP listener that answers ROUTE requests from a
// PrefixRouter fed by the nodes' event streams (event_feed.h; docs/router.md).
//
//   ROUTE <model> <token> [token ...]  -> [node "host:port", node index,
//                                          RAM prefix blocks, local prefix blocks]
//                                          among the nodes whose feed is connected;
//                                          an error when none is
//   ROUTE.DONE <node index> <tokens>   -> OK: the request routed there is done
//   ROUTE.STATS                        -> "name:value" lines
//   PING, QUIT, COMMAND (an empty list, for redis-cli)
//
// A request weighs its token count: ROUTE adds it to the node's in-flight
// load and ROUTE.DONE takes it off. The tokens are cut into the model's
// blocks and chain-hashed as the engine does (ChainKeys, block_key.h), so the
// keys are the ones the nodes' events carry.
//
// One thread per connection (a router holds few), one per node feed, one
// accepting. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/block_key.h"
#include "prefixkv/namespace_spec.h"
#include "prefixkv/router.h"
#include "tools/route/event_feed.h"

namespace prefixkv::route {

struct RouteServerOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;                  // 0: a free one (port())
  std::vector<std::string> nodes;     // "host:port" each, 1..kMaxRouterNodes
  std::vector<NamespaceSpec> models;  // the models ROUTE knows, by NamespaceSpec::model
  RouterOptions router;               // `nodes` is set from nodes.size()
  EventFeedOptions feed;              // block_ms, count, timeouts of every feed
  size_t max_connections = 256;
  size_t max_request_bytes = size_t{16} << 20;
};

// Parses "host:port" (port 1..65535). InvalidArgument otherwise.
Status ParseHostPort(const std::string& text, std::string* host, int* port);

class RouteServer {
 public:
  // InvalidArgument for bad options (no nodes, a bad address, an invalid or
  // repeated model); IOError when the port cannot be bound.
  static StatusOr<std::unique_ptr<RouteServer>> Start(const RouteServerOptions& options);
  ~RouteServer();  // Stop()
  void Stop();

  uint16_t port() const { return port_; }
  PrefixRouter& router() { return *router_; }
  const std::vector<std::unique_ptr<EventFeed>>& feeds() const { return feeds_; }

 private:
  struct Model {
    std::string name;
    BlockKey root;
    uint32_t block_tokens = 0;
  };
  struct Conn {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  RouteServer() = default;
  void Accept();
  void Serve(Conn* conn);
  // One command's reply, RESP-encoded; sets `close` for QUIT.
  std::string Execute(const std::vector<std::string>& args, bool* close);
  std::string Route(const std::vector<std::string>& args);
  std::string Done(const std::vector<std::string>& args);
  std::string StatsText() const;

  RouteServerOptions options_;
  std::vector<Model> models_;
  std::unique_ptr<PrefixRouter> router_;
  std::vector<std::unique_ptr<EventFeed>> feeds_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  Mutex mu_;
  std::vector<std::unique_ptr<Conn>> conns_ GUARDED_BY(mu_);
};

}  // namespace prefixkv::route
