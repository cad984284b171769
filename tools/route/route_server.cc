// RouteServer (route_server.h): the listening socket, a thread per
// connection reading RESP arrays (hiredis's reader parses requests as it
// parses replies: both are arrays of bulk strings), and the ROUTE commands.
#include "tools/route/route_server.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

namespace prefixkv::route {
namespace {

std::string Error(const std::string& text) { return "-ERR " + text + "\r\n"; }
std::string Int(uint64_t v) { return ":" + std::to_string(v) + "\r\n"; }
std::string Bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

bool ParseUint(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 20 ||
      s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0 || v > max) return false;
  *out = v;
  return true;
}

bool ParseToken(const std::string& s, int32_t* out) {
  const bool negative = !s.empty() && s[0] == '-';
  uint64_t v = 0;
  if (!ParseUint(negative ? s.substr(1) : s, negative ? 2147483648ull : 2147483647ull,
                 &v))
    return false;
  *out =
      static_cast<int32_t>(negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v));
  return true;
}

bool SendAll(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// A request from the reader: an array of strings, else empty.
std::vector<std::string> Arguments(const redisReply* r) {
  std::vector<std::string> args;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return args;
  for (size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_STRING) return {};
    args.emplace_back(e->str, e->len);
  }
  return args;
}

}  // namespace

Status ParseHostPort(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  uint64_t p = 0;
  if (colon == std::string::npos || colon == 0 ||
      !ParseUint(text.substr(colon + 1), 65535, &p) || p == 0)
    return Status::InvalidArgument("'" + text + "' is not host:port");
  *host = text.substr(0, colon);
  *port = static_cast<int>(p);
  return Status::OK();
}

StatusOr<std::unique_ptr<RouteServer>> RouteServer::Start(const RouteServerOptions& o) {
  std::unique_ptr<RouteServer> s(new RouteServer());
  s->options_ = o;
  if (o.nodes.empty()) return Status::InvalidArgument("no nodes to route to");
  RouterOptions ro = o.router;
  ro.nodes = o.nodes.size();
  PKV_ASSIGN_OR_RETURN(s->router_, PrefixRouter::Open(ro));
  std::set<std::string> names;
  for (const NamespaceSpec& spec : o.models) {
    PKV_ASSIGN_OR_RETURN(BlockKey root, NamespaceRoot(spec));
    if (!names.insert(spec.model).second)
      return Status::InvalidArgument("model '" + spec.model + "' given twice");
    s->models_.push_back({spec.model, root, spec.block_tokens});
  }
  std::vector<EventFeedOptions> feeds;
  for (size_t i = 0; i < o.nodes.size(); ++i) {
    EventFeedOptions f = o.feed;
    PKV_RETURN_IF_ERROR(ParseHostPort(o.nodes[i], &f.host, &f.port));
    f.node = i;
    feeds.push_back(f);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(o.port);
  if (::inet_pton(AF_INET, o.bind_address.c_str(), &addr.sin_addr) != 1)
    return Status::InvalidArgument("bind address '" + o.bind_address + "' is not IPv4");
  s->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof addr;
  if (s->listen_fd_ < 0 || ::bind(s->listen_fd_, (sockaddr*)&addr, sizeof addr) != 0 ||
      ::listen(s->listen_fd_, 64) != 0 ||
      ::getsockname(s->listen_fd_, (sockaddr*)&addr, &len))
    return Status::IOError("cannot listen on " + o.bind_address + ":" +
                           std::to_string(o.port) + ": " + std::strerror(errno));
  s->port_ = ntohs(addr.sin_port);
  for (const EventFeedOptions& f : feeds)
    s->feeds_.push_back(std::make_unique<EventFeed>(f, s->router_.get()));
  s->acceptor_ = std::thread([p = s.get()] { p->Accept(); });
  return s;
}

RouteServer::~RouteServer() { Stop(); }

void RouteServer::Stop() {
  if (stop_.exchange(true)) return;
  // Each feed may be in a call of up to its XREAD BLOCK plus a timeout (a
  // node that does not answer): told to stop together, the feeds end in
  // one such wait instead of one per node.
  for (auto& f : feeds_) f->RequestStop();
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  std::vector<std::unique_ptr<Conn>> conns;
  {
    MutexLock lock(&mu_);
    conns.swap(conns_);
    for (auto& c : conns) ::shutdown(c->fd, SHUT_RDWR);
  }
  for (auto& c : conns) {
    c->thread.join();
    ::close(c->fd);
  }
  for (auto& f : feeds_) f->Stop();
}

void RouteServer::Accept() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    MutexLock lock(&mu_);
    // Reap the connections that ended.
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (!(*it)->done) {
        ++it;
        continue;
      }
      (*it)->thread.join();
      ::close((*it)->fd);
      it = conns_.erase(it);
    }
    if (conns_.size() >= options_.max_connections) {
      SendAll(fd, Error("max number of clients reached"));
      ::close(fd);
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    Conn* c = conn.get();
    conns_.push_back(std::move(conn));
    c->thread = std::thread([this, c] { Serve(c); });
  }
}

void RouteServer::Serve(Conn* conn) {
  redisReader* reader = redisReaderCreate();
  size_t pending = 0;  // bytes fed since the last whole request
  char buf[16384];
  bool close = false;
  while (!close && !stop_) {
    const ssize_t n = ::recv(conn->fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    pending += static_cast<size_t>(n);
    if (pending > options_.max_request_bytes) {
      SendAll(conn->fd, Error("request larger than " +
                              std::to_string(options_.max_request_bytes) + " bytes"));
      break;
    }
    redisReaderFeed(reader, buf, static_cast<size_t>(n));
    std::string out;
    while (!close) {
      void* reply = nullptr;
      if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
        out += Error("Protocol error: send commands as RESP arrays of bulk strings");
        close = true;
        break;
      }
      if (reply == nullptr) break;
      pending = 0;
      const std::vector<std::string> args = Arguments(static_cast<redisReply*>(reply));
      freeReplyObject(reply);
      out += args.empty() ? Error("Protocol error: expected an array of bulk strings")
                          : Execute(args, &close);
    }
    if (!SendAll(conn->fd, out)) break;
  }
  redisReaderFree(reader);
  conn->done = true;
}

std::string RouteServer::Execute(const std::vector<std::string>& args, bool* close) {
  std::string name = args[0];
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  if (name == "PING") return "+PONG\r\n";
  if (name == "QUIT") {
    *close = true;
    return "+OK\r\n";
  }
  if (name == "COMMAND") return "*0\r\n";
  if (name == "ROUTE") return Route(args);
  if (name == "ROUTE.DONE") return Done(args);
  if (name == "ROUTE.STATS") return Bulk(StatsText());
  return Error("unknown command '" + args[0] + "'");
}

std::string RouteServer::Route(const std::vector<std::string>& args) {
  if (args.size() < 3)
    return Error("wrong number of arguments: ROUTE model token [token ...]");
  auto m = std::find_if(models_.begin(), models_.end(),
                        [&](const Model& x) { return x.name == args[1]; });
  if (m == models_.end()) return Error("unknown model '" + args[1] + "'");
  std::vector<int32_t> tokens(args.size() - 2);
  for (size_t i = 2; i < args.size(); ++i) {
    if (!ParseToken(args[i], &tokens[i - 2]))
      return Error("token '" + args[i] + "' is not a 32-bit integer");
  }
  const std::vector<BlockKey> keys = ChainKeys(m->root, tokens, m->block_tokens);
  const RouteChoice c = router_->Route(keys, tokens.size());
  // No node's stream is readable: an error the client can act on (retry,
  // back off) rather than a node that is likely down.
  if (c.no_node) return Error("no node to route to: no node's event feed is connected");
  return "*4\r\n" + Bulk(options_.nodes[c.node]) + Int(c.node) + Int(c.ram_blocks) +
         Int(c.local_blocks);
}

std::string RouteServer::Done(const std::vector<std::string>& args) {
  uint64_t node = 0, load = 0;
  if (args.size() != 3) return Error("wrong number of arguments: ROUTE.DONE node tokens");
  if (!ParseUint(args[1], options_.nodes.size() - 1, &node))
    return Error("node '" + args[1] + "' is not a node index (0.." +
                 std::to_string(options_.nodes.size() - 1) + ")");
  if (!ParseUint(args[2], UINT64_MAX, &load))
    return Error("tokens '" + args[2] + "' is not a count");
  router_->Finish(node, load);
  return "+OK\r\n";
}

std::string RouteServer::StatsText() const {
  const RouterStats s = router_->Stats();
  std::string out = "events:" + std::to_string(s.events) +
                    "\r\nignored_events:" + std::to_string(s.ignored_events) +
                    "\r\ndropped_blocks:" + std::to_string(s.dropped_blocks) +
                    "\r\nnode_resets:" + std::to_string(s.node_resets) +
                    "\r\nblocks:" + std::to_string(s.blocks) +
                    "\r\nrouted:" + std::to_string(s.routed) +
                    "\r\nrouted_by_prefix:" + std::to_string(s.routed_by_prefix) +
                    "\r\nskipped_unavailable:" + std::to_string(s.skipped_unavailable) +
                    "\r\nno_node_available:" + std::to_string(s.no_node_available) +
                    "\r\n";
  for (size_t i = 0; i < feeds_.size(); ++i) {
    const EventFeed& f = *feeds_[i];
    out += "node" + std::to_string(i) + ":addr=" + options_.nodes[i] +
           ",connected=" + (f.connected() ? "1" : "0") +
           ",applied=" + std::to_string(f.applied()) +
           ",reconnects=" + std::to_string(f.reconnects()) +
           ",resnapshots=" + std::to_string(f.resnapshots()) +
           ",bad_replies=" + std::to_string(f.bad_replies()) +
           ",in_flight=" + std::to_string(router_->in_flight(i)) + "\r\n";
  }
  return out;
}

}  // namespace prefixkv::route
