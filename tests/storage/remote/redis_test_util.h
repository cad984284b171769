// Helpers for the Redis Cluster client's tests: a store over a LocalRedisCluster,
// raw commands to one node (to inspect or reshard behind the client's back),
// and keys that fall into a chosen slot.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "prefixkv/advanced/remote_store.h"
#include "prefixkv/advanced/remote_tier.h"
#include "redis_cluster_store.h"
#include "redis_connection.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"
#include "tools/redis/local_redis_cluster.h"

extern char** environ;

namespace prefixkv::testing {

// Options for a store over `cluster` with generous timeouts (sanitizer builds
// on a busy machine); tests of the time bounds set their own.
inline RedisClusterOptions ClusterOptions(const LocalRedisCluster& cluster) {
  RedisClusterOptions options;
  std::stringstream seeds(cluster.seeds());
  for (std::string seed; std::getline(seeds, seed, ',');) options.seeds.push_back(seed);
  options.request_timeout_ms = 1000;
  options.connect_timeout_ms = 1000;
  return options;
}

// A reply as text: a string, a status, an error, an integer in decimal, an
// array's elements separated by spaces.
inline std::string ReplyText(const redisReply& r) {
  if (r.type == REDIS_REPLY_INTEGER) return std::to_string(r.integer);
  if (r.type == REDIS_REPLY_NIL) return "(nil)";
  if (r.type == REDIS_REPLY_ARRAY) {
    std::string out;
    for (size_t i = 0; i < r.elements; ++i) {
      out += (i == 0 ? "" : " ") + ReplyText(*r.element[i]);
    }
    return out;
  }
  return r.str == nullptr ? "" : std::string(r.str, r.len);
}

// A store on the system clock; null (and a test failure) when it did not open.
inline std::unique_ptr<RedisClusterStore> OpenStore(const RedisClusterOptions& options) {
  auto store = OpenRedisClusterStoreWithClock(options, Clock::System());
  EXPECT_OK(store);
  return store.ok() ? std::move(store).value() : nullptr;
}

// MultiGet with the values as text (the tests compare strings).
inline Status MultiGetText(RemoteStore& store, std::span<const std::string> keys,
                           std::vector<std::optional<std::string>>* values) {
  std::vector<std::optional<SharedBytes>> bytes;
  const Status s = store.MultiGet(keys, &bytes);
  values->clear();
  for (const std::optional<SharedBytes>& b : bytes) {
    values->push_back(b.has_value() ? std::optional<std::string>(std::string(b->view()))
                                    : std::nullopt);
  }
  return s;
}

// One command to 127.0.0.1:`port`, bypassing the client under test; the
// reply as ReplyText.
inline std::string Raw(int port, std::initializer_list<std::string_view> args) {
  auto connection = RedisConnection::Connect("127.0.0.1", port, 1000, "");
  if (!connection.ok()) return "connect: " + connection.status().ToString();
  auto reply = (*connection)->Call(args, RedisNowNanos() + 2'000'000'000ull);
  if (!reply.ok()) return "reply: " + reply.status().ToString();
  return ReplyText(**reply);
}

// One redis-server with cluster mode off on a free loopback port, killed and
// reaped with this object. port() is 0 when it did not answer PING.
class StandaloneRedis {
 public:
  StandaloneRedis() {
    const int port = ClosedLoopbackPort();
    const std::string p = std::to_string(port);
    std::vector<std::string> args = {"/usr/bin/redis-server",
                                     "--port",
                                     p,
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--logfile",
                                     "/dev/null"};
    if (access(args[0].c_str(), X_OK) != 0) args[0] = "redis-server";
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (port == 0 ||
        posix_spawnp(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      return;
    }
    for (int i = 0; i < 250 && Raw(port, {"PING"}) != "PONG"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (Raw(port, {"PING"}) == "PONG") port_ = port;
  }
  ~StandaloneRedis() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  StandaloneRedis(const StandaloneRedis&) = delete;
  StandaloneRedis& operator=(const StandaloneRedis&) = delete;

  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// A loopback TCP proxy in front of 127.0.0.1:`target_port` (one thread;
// every connection forwarded both ways), which can lose the replies of SETs:
// while LoseSetReplies(true), a connection that carries a SET to the server
// forwards nothing back from then on. The server runs the SET; its reply
// never comes, as from a master silent past the timeout after it stored the
// value (SIGSTOP or CLIENT PAUSE hold the command itself, not its reply).
// port() is 0 when it could not listen.
class ReplyLosingProxy {
 public:
  explicit ReplyLosingProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = BindLoopback(&port_, 16, SOCK_NONBLOCK);
    if (listen_fd_ >= 0) thread_ = std::thread([this] { Run(); });
  }
  ~ReplyLosingProxy() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  ReplyLosingProxy(const ReplyLosingProxy&) = delete;
  ReplyLosingProxy& operator=(const ReplyLosingProxy&) = delete;

  int port() const { return listen_fd_ >= 0 ? port_ : 0; }
  void LoseSetReplies(bool lose) { lose_ = lose; }

 private:
  struct Pair {
    int client = -1;
    int server = -1;
    bool losing = false;  // carried a SET while lose_: nothing goes back
  };

  void Run() {
    std::vector<Pair> pairs;
    std::vector<pollfd> fds;
    while (!stop_) {
      fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
      for (const Pair& p : pairs) {
        fds.push_back(pollfd{p.client, POLLIN, 0});
        fds.push_back(pollfd{p.server, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 10) <= 0) continue;
      for (size_t i = 0; i < pairs.size(); ++i) {
        Pair& p = pairs[i];
        bool open = fds[1 + 2 * i].revents == 0 || Forward(p, /*to_server=*/true);
        open = open && (fds[2 + 2 * i].revents == 0 || Forward(p, /*to_server=*/false));
        if (!open) Close(p);
      }
      std::erase_if(pairs, [](const Pair& p) { return p.client < 0; });
      if (fds[0].revents != 0) Accept(&pairs);
    }
    for (Pair& p : pairs) Close(p);
  }

  void Accept(std::vector<Pair>* pairs) {
    Pair p;
    p.client = ::accept(listen_fd_, nullptr, nullptr);
    if (p.client < 0) return;
    p.server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (p.server < 0 ||
        ::connect(p.server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Close(p);
      return;
    }
    pairs->push_back(p);
  }

  // Moves what one side has to the other; false when the connection ended.
  bool Forward(Pair& p, bool to_server) {
    char buffer[64 << 10];
    const ssize_t n = ::recv(to_server ? p.client : p.server, buffer, sizeof(buffer), 0);
    if (n <= 0) return false;
    const std::string_view chunk(buffer, static_cast<size_t>(n));
    if (to_server && lose_ && chunk.find("$3\r\nSET\r\n") != std::string_view::npos) {
      p.losing = true;
    }
    if (!to_server && p.losing) return true;  // the reply is lost
    for (size_t sent = 0; sent < chunk.size();) {
      const ssize_t m = ::send(to_server ? p.server : p.client, chunk.data() + sent,
                               chunk.size() - sent, MSG_NOSIGNAL);
      if (m <= 0) return false;
      sent += static_cast<size_t>(m);
    }
    return true;
  }

  static void Close(Pair& p) {
    if (p.client >= 0) ::close(p.client);
    if (p.server >= 0) ::close(p.server);
    p.client = p.server = -1;
  }

  const int target_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> lose_{false};
  std::thread thread_;
};

// A key whose slot is `slot`: "{tagN}suffix" with the first N that hashes there.
inline std::string KeyInSlot(int slot, const std::string& suffix) {
  for (int n = 0;; ++n) {
    std::string tag = "t" + std::to_string(n);
    if (RedisKeySlot(tag) == slot) return "{" + tag + "}" + suffix;
  }
}

// The port of the master that serves `slot`: the one node that does not
// answer a GET there with -MOVED. -1 when every node does.
inline int OwnerPort(const LocalRedisCluster& cluster, int slot) {
  const std::string key = KeyInSlot(slot, "");
  for (int port : cluster.ports()) {
    if (Raw(port, {"GET", key}).rfind("MOVED", 0) != 0) return port;
  }
  return -1;
}

// CLUSTER MYID of the node on `port`.
inline std::string NodeId(int port) { return Raw(port, {"CLUSTER", "MYID"}); }

// One 3-master LocalRedisCluster per test suite: `class MySuite : public
// RedisClusterSuite<MySuite>`. Tests skip when redis-server is not installed
// and fail with the launcher's error when the cluster did not start.
template <typename Suite>
class RedisClusterSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!LocalRedisCluster::Available()) return;
    auto cluster = LocalRedisCluster::Start({});
    if (cluster.ok()) {
      cluster_ = std::move(cluster).value();
    } else {
      start_error_ = cluster.status().ToString();
    }
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override {
    if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
    ASSERT_NE(cluster_, nullptr) << start_error_;
  }

  static inline std::unique_ptr<LocalRedisCluster> cluster_;
  static inline std::string start_error_;
};

// A remote tier over a cluster (down_backoff_ms 50) that wrote 60 blocks of
// one namespace: each taken for present (written within
// known_present_seconds).
struct TierThatWrote {
  std::unique_ptr<RemoteTier> tier;
  RedisClusterStore* router = nullptr;  // owned by `tier`
  std::vector<BlockMeta> blocks;
  SharedBytes payload = SharedBytes::Copy("a block's bytes");

  // How many of the blocks the master on `port` holds (by the store's map).
  uint64_t BlocksOn(int port) const {
    const std::string node = "127.0.0.1:" + std::to_string(port);
    uint64_t n = 0;
    for (const BlockMeta& b : blocks)
      n += router->NodeOfSlot(RedisKeySlot(tier->StoreKey(b.key))) == node;
    return n;
  }
};

inline void WriteBlocksThroughATier(const LocalRedisCluster& cluster,
                                    const std::string& key_prefix, TierThatWrote* w) {
  RedisClusterOptions options = ClusterOptions(cluster);
  options.down_backoff_ms = 50;
  std::unique_ptr<RedisClusterStore> store = OpenStore(options);
  ASSERT_NE(store, nullptr);
  w->router = store.get();
  RemoteTierOptions tier_options;
  tier_options.key_prefix = key_prefix;
  w->tier = RemoteTier::Open(std::move(store), tier_options);
  const BlockKey ns{11, 11};
  for (uint64_t i = 0; i < 60; ++i)
    w->blocks.push_back({BlockKey{11, 100 + i}, ns, ns, 1});
  for (const BlockMeta& b : w->blocks) ASSERT_OK(w->tier->Put(b, w->payload, false));
  w->tier->Flush();
  ASSERT_EQ(w->tier->Counters().writes, w->blocks.size());
}

// After a master lost `lost` of the blocks `w` wrote, a Match of another
// prompt (absent everywhere) meets the loss; then every block leaves this
// node (OnEvict): none of the lost ones is skipped, and every block is in
// the cluster again.
inline void ExpectLostBlocksWrittenAgainWhenEvicted(const LocalRedisCluster& cluster,
                                                    TierThatWrote& w, uint64_t lost) {
  ASSERT_GT(lost, 0u);
  std::vector<BlockKey> other;
  for (uint64_t i = 0; i < 30; ++i) other.push_back(BlockKey{12, i});
  (void)w.tier->GetMany(other);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the backoff
  for (const BlockMeta& b : w.blocks) w.tier->OnEvict(b, w.payload, false);
  w.tier->Flush();
  EXPECT_LE(w.tier->Counters().rewrites_skipped, w.blocks.size() - lost)
      << "taken for present on the master that lost them";
  for (const BlockMeta& b : w.blocks) {
    const std::string key = w.tier->StoreKey(b.key);
    EXPECT_EQ(Raw(OwnerPort(cluster, RedisKeySlot(key)), {"EXISTS", key}), "1") << key;
  }
}

inline double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                   start)
      .count();
}

}  // namespace prefixkv::testing
