// Helpers for the Redis Cluster client's tests: a store over a LocalRedisCluster,
// raw commands to one node (to inspect or reshard behind the client's back),
// and keys that fall into a chosen slot.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/advanced/remote_store.h"
#include "redis_cluster_store.h"
#include "redis_connection.h"
#include "tests/support/test_util.h"
#include "tools/redis/local_redis_cluster.h"

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

inline double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                   start)
      .count();
}

}  // namespace prefixkv::testing
