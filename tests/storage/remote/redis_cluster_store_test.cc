// The Redis Cluster client (storage/remote/redis_cluster_store.h) against a
// real 3-master cluster (tools/redis/local_redis_cluster.h): key slots, binary
// round trips over every master, TTLs, MOVED and ASK during a live slot
// migration, and the time bounds of a dead, a silent or an absent cluster.
#include "redis_cluster_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "tests/storage/remote/redis_test_util.h"
#include "tests/support/loopback.h"

extern char** environ;

namespace prefixkv {
namespace {

using testing::ClusterOptions;
using testing::KeyInSlot;
using testing::MillisSince;
using testing::NodeId;
using testing::OpenStore;
using testing::OwnerPort;
using testing::Raw;

TEST(RedisKeySlot, MatchesTheClusterSpecification) {
  EXPECT_EQ(RedisKeySlot("foo"), 12182);
  EXPECT_EQ(RedisKeySlot("bar"), 5061);
  EXPECT_EQ(RedisKeySlot("123456789"), 0x31C3 & 16383);  // the spec's CRC16 check value
  EXPECT_EQ(RedisKeySlot(""), 0);
  // Hash tags: only the first {...} with something inside counts.
  EXPECT_EQ(RedisKeySlot("{user1000}.following"), RedisKeySlot("{user1000}.followers"));
  EXPECT_EQ(RedisKeySlot("{user1000}.following"), RedisKeySlot("user1000"));
  EXPECT_EQ(RedisKeySlot("foo{bar}{zap}"), RedisKeySlot("bar"));
  EXPECT_EQ(RedisKeySlot("foo{{bar}}zap"), RedisKeySlot("{bar"));
  EXPECT_EQ(RedisKeySlot("foo{}{bar}"), RedisKeySlot(std::string("foo{}{bar}")));
  EXPECT_NE(RedisKeySlot("foo{}{bar}"), RedisKeySlot("bar"));
  EXPECT_EQ(RedisKeySlot("{a"), RedisKeySlot(std::string("{a")));
  EXPECT_EQ(RedisKeySlot(std::string("a\0b", 3)), RedisKeySlot(std::string("a\0b", 3)));
  EXPECT_NE(RedisKeySlot(std::string("a\0b", 3)), RedisKeySlot("a"));
}

TEST(ParseRedisSeeds, AcceptsTheUriAndBareListsAndNamesTheBadPart) {
  ASSERT_OK_AND_ASSIGN(auto seeds, ParseRedisSeeds("redis://127.0.0.1:7000,h2:7001"));
  EXPECT_EQ(seeds, (std::vector<std::string>{"127.0.0.1:7000", "h2:7001"}));
  ASSERT_OK_AND_ASSIGN(seeds, ParseRedisSeeds(" localhost:6379 "));
  EXPECT_EQ(seeds, (std::vector<std::string>{"localhost:6379"}));
  ASSERT_OK_AND_ASSIGN(seeds, ParseRedisSeeds("redis://[::1]:7000"));
  EXPECT_EQ(seeds, (std::vector<std::string>{"[::1]:7000"}));
  for (const char* bad :
       {"", "redis://", "host", "host:", ":7000", "host:0", "host:70000", "host:7x",
        "h:1,,h:2", "http://h:1", "rediss://h:1", "u@h:1"}) {
    StatusOr<std::vector<std::string>> parsed = ParseRedisSeeds(bad);
    EXPECT_TRUE(parsed.status().IsInvalidArgument()) << "'" << bad << "'";
  }
  EXPECT_NE(ParseRedisSeeds("redis://h:1,h:x").status().message().find("'h:x'"),
            std::string::npos);
}

TEST(OpenRedisClusterStore, RejectsBadOptions) {
  RedisClusterOptions options;
  EXPECT_TRUE(OpenRedisClusterStore(options).status().IsInvalidArgument());
  options.seeds = {"127.0.0.1:notaport"};
  EXPECT_TRUE(OpenRedisClusterStore(options).status().IsInvalidArgument());
  options.seeds = {"127.0.0.1:1"};
  options.request_timeout_ms = 0;
  EXPECT_TRUE(OpenRedisClusterStore(options).status().IsInvalidArgument());
}

// A node that accepts connections (the kernel completes them) but never
// answers: the slow or hung server. Counts the connections made to it.
class SilentNode {
 public:
  SilentNode() {
    fd_ = testing::BindLoopback(&port_, /*backlog=*/64, SOCK_NONBLOCK);
    EXPECT_GE(fd_, 0);
  }
  ~SilentNode() {
    for (int fd : accepted_) close(fd);
    close(fd_);
  }
  std::string seed() const { return "127.0.0.1:" + std::to_string(port_); }
  // Connections made so far (accepts what is pending).
  int Connections() {
    for (int fd; (fd = accept(fd_, nullptr, nullptr)) >= 0;) accepted_.push_back(fd);
    return static_cast<int>(accepted_.size());
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> accepted_;
};

// "Fast": no time bound of the store's is waited for. They are 10 s here, so
// a wait for one shows as 10 s against a bound of 5 s for the open and the 20
// calls together (once 50 ms a call, which a loaded machine overran). The
// port refuses connections for the whole test (one released at once could be
// taken by another test's server).
TEST(RedisClusterStoreAbsent, OpensAndFailsFastWithUnavailable) {
  constexpr uint32_t kTimeoutMs = 10'000;
  const testing::RefusingLoopbackPort absent;
  ASSERT_NE(absent.port(), 0);
  RedisClusterOptions options;
  options.seeds = {"127.0.0.1:" + std::to_string(absent.port())};
  options.request_timeout_ms = kTimeoutMs;
  options.write_timeout_ms = kTimeoutMs;
  options.connect_timeout_ms = kTimeoutMs;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RemoteStore> store,
                       OpenRedisClusterStore(options));
  EXPECT_NE(store->Describe().find("(unavailable)"), std::string::npos)
      << store->Describe();
  const std::vector<std::string> keys = {"a", "b"};
  std::vector<std::optional<std::string>> values;
  for (int i = 0; i < 20; ++i) {
    Status got = testing::MultiGetText(*store, keys, &values);
    EXPECT_TRUE(got.IsUnavailable()) << got.ToString();
    EXPECT_EQ(values,
              (std::vector<std::optional<std::string>>{std::nullopt, std::nullopt}));
  }
  const RemoteWrite write{"a", "1", 0};
  EXPECT_TRUE(store->MultiSet({&write, 1}).IsUnavailable());
  EXPECT_TRUE(store->Delete(keys).IsUnavailable());
  EXPECT_TRUE(store->IncrBy("n", 1, 0).status().IsUnavailable());
  EXPECT_LT(MillisSince(start), kTimeoutMs / 2) << "a time bound was waited for";
}

// A hung node costs one timeout; then it is down for down_backoff_ms (on the
// store's clock) and contacted again only after that. The timeout is 1 s so
// that "one, not two" and "none while the backoff runs" have a second of
// margin (they had 180 and 50 ms with a 20 ms timeout: a loaded machine's
// scheduling delays, not the store, could overrun them).
TEST(RedisClusterStoreAbsent, AHungSeedCostsOneTimeoutPerBackoff) {
  constexpr double kTimeoutMs = 1000;
  SilentNode silent;
  FakeClock clock;
  RedisClusterOptions options;
  options.seeds = {silent.seed()};
  options.request_timeout_ms = static_cast<uint32_t>(kTimeoutMs);
  options.down_backoff_ms = 1000;
  auto start = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RedisClusterStore> store,
                       OpenRedisClusterStoreWithClock(options, &clock));
  const double open_ms = MillisSince(start);
  EXPECT_GE(open_ms, kTimeoutMs - 1);  // it waited for CLUSTER SLOTS ...
  EXPECT_LT(open_ms, 2 * kTimeoutMs);  // ... one request timeout, not two
  EXPECT_EQ(silent.Connections(), 1);
  EXPECT_TRUE(store->IsNodeDown(silent.seed()));
  const std::vector<std::string> keys = {"k"};
  std::vector<std::optional<std::string>> values;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i)
    EXPECT_TRUE(testing::MultiGetText(*store, keys, &values).IsUnavailable());
  EXPECT_LT(MillisSince(start), kTimeoutMs);  // no timeout while the backoff runs
  EXPECT_EQ(silent.Connections(), 1);
  clock.AdvanceMillis(1001);
  EXPECT_TRUE(testing::MultiGetText(*store, keys, &values).IsUnavailable());
  EXPECT_EQ(silent.Connections(), 2);  // retried once after the backoff
  EXPECT_EQ(store->map_fetches(), 0u);
}

// A single redis-server with cluster mode off owns every slot.
TEST(RedisClusterStoreStandalone, ANodeWithoutClusterModeOwnsEverySlot) {
  if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
  testing::StandaloneRedis server;
  ASSERT_NE(server.port(), 0) << "redis-server did not start";
  const std::string p = std::to_string(server.port());
  {
    RedisClusterOptions options;
    options.seeds = {"127.0.0.1:" + p};
    options.request_timeout_ms = 1000;
    auto store = OpenStore(options);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->Describe(),
              "redis 127.0.0.1:" + p + " (one node, cluster mode off)");
    EXPECT_EQ(store->NodeOfSlot(0), "127.0.0.1:" + p);
    EXPECT_EQ(store->NodeOfSlot(16383), "127.0.0.1:" + p);
    const std::vector<RemoteWrite> writes = {{"foo", "1", 0}, {"bar", "2", 0}};
    EXPECT_OK(store->MultiSet(writes));
    std::vector<std::optional<std::string>> values;
    EXPECT_OK(testing::MultiGetText(*store, std::vector<std::string>{"foo", "bar", "baz"},
                                    &values));
    EXPECT_EQ(values, (std::vector<std::optional<std::string>>{"1", "2", std::nullopt}));
  }
}

// One 3-master cluster for the suite.
class RedisClusterStoreTest : public testing::RedisClusterSuite<RedisClusterStoreTest> {};

TEST_F(RedisClusterStoreTest, KeySlotAgreesWithClusterKeyslot) {
  std::mt19937_64 rng(testing::TestSeed("KeySlotAgreesWithClusterKeyslot"));
  const int port = cluster_->ports()[0];
  for (int i = 0; i < 300; ++i) {
    std::string key(rng() % 24, '\0');
    for (char& c : key) c = "ab{}\0\r\nxyz"[rng() % 10];
    EXPECT_EQ(std::to_string(RedisKeySlot(key)), Raw(port, {"CLUSTER", "KEYSLOT", key}))
        << "key of " << key.size() << " bytes";
  }
}

TEST_F(RedisClusterStoreTest, BinaryValuesRoundTripOverEveryMaster) {
  auto store = OpenStore(ClusterOptions(*cluster_));
  EXPECT_EQ(store->Describe(), "redis cluster " + cluster_->seeds() + " (3 masters)");
  std::mt19937_64 rng(testing::TestSeed("BinaryValuesRoundTripOverEveryMaster"));
  std::vector<RemoteWrite> writes;
  std::set<std::string> masters;
  for (int i = 0; i < 300; ++i) {
    std::string value(rng() % 3000, '\0');
    for (char& c : value) c = static_cast<char>(rng());
    value += std::string("\0\r\n", 3);
    writes.push_back({"rt/" + std::to_string(i) + std::string("\0\r\n", 3), value, 0});
    masters.insert(store->NodeOfSlot(RedisKeySlot(writes.back().key)));
  }
  EXPECT_EQ(masters.size(), 3u);
  ASSERT_OK(store->MultiSet(writes));
  std::vector<std::string> keys;
  for (const RemoteWrite& w : writes) {
    keys.push_back(w.key);
    keys.push_back(w.key + "/absent");
  }
  std::vector<std::optional<std::string>> values;
  ASSERT_OK(testing::MultiGetText(*store, keys, &values));
  ASSERT_EQ(values.size(), keys.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    EXPECT_EQ(values[2 * i], writes[i].value) << writes[i].key;
    EXPECT_EQ(values[2 * i + 1], std::nullopt);
  }
  // The values come in 64-byte aligned buffers of their own (taken from the
  // replies without a copy).
  std::vector<std::optional<SharedBytes>> raw;
  ASSERT_OK(store->MultiGet(keys, &raw));
  for (size_t i = 0; i < writes.size(); ++i) {
    ASSERT_TRUE(raw[2 * i].has_value());
    EXPECT_EQ(raw[2 * i]->view(), writes[i].value);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(raw[2 * i]->data()) % 64, 0u) << writes[i].key;
  }
  // MultiGetEach hands each value on as its reply is read: once per value
  // found, the very buffer MultiGet returns.
  std::vector<int> arrivals(keys.size(), 0);
  std::vector<const uint8_t*> arrived_at(keys.size(), nullptr);
  std::vector<bool> failed;
  ASSERT_OK(store->MultiGetEach(
      keys, &raw,
      [&](size_t i, const SharedBytes& value) {
        ASSERT_LT(i, keys.size());
        ++arrivals[i];
        arrived_at[i] = value.data();
      },
      &failed));
  ASSERT_EQ(failed.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_FALSE(failed[i]) << keys[i] << ": absent or found, read";
    EXPECT_EQ(arrivals[i], i % 2 == 0 ? 1 : 0) << keys[i];
    if (raw[i].has_value()) {
      EXPECT_EQ(arrived_at[i], raw[i]->data());
    }
  }
  ASSERT_OK(store->Delete(keys));  // absent keys too
  ASSERT_OK(testing::MultiGetText(*store, keys, &values));
  for (const auto& value : values) EXPECT_EQ(value, std::nullopt);
}

TEST_F(RedisClusterStoreTest, WritesCarryTheirTtl) {
  auto store = OpenStore(ClusterOptions(*cluster_));
  const std::vector<RemoteWrite> writes = {
      {"ttl/a", "x", 100}, {"ttl/b", "y", 0}, {"ttl/c", "z", 1}};
  ASSERT_OK(store->MultiSet(writes));
  auto ttl_of = [&](const std::string& key) {
    return std::stoll(Raw(OwnerPort(*cluster_, RedisKeySlot(key)), {"PTTL", key}));
  };
  EXPECT_GT(ttl_of("ttl/a"), 90'000);
  EXPECT_LE(ttl_of("ttl/a"), 100'000);
  EXPECT_EQ(ttl_of("ttl/b"), -1);  // no expiry
  EXPECT_GT(ttl_of("ttl/c"), 0);
  EXPECT_LE(ttl_of("ttl/c"), 1000);
}

TEST_F(RedisClusterStoreTest, IncrByCreatesWithTtlAndAddsWithoutResettingIt) {
  auto store = OpenStore(ClusterOptions(*cluster_));
  const std::vector<std::string> keys = {"ctr/ttl", "ctr/plain"};
  ASSERT_OK(store->Delete(keys));
  ASSERT_OK_AND_ASSIGN(int64_t value, store->IncrBy("ctr/ttl", 5, 100));
  EXPECT_EQ(value, 5);
  const int port = OwnerPort(*cluster_, RedisKeySlot("ctr/ttl"));
  EXPECT_GT(std::stoll(Raw(port, {"PTTL", "ctr/ttl"})), 90'000);
  ASSERT_EQ(Raw(port, {"PEXPIRE", "ctr/ttl", "500000"}), "1");
  ASSERT_OK_AND_ASSIGN(value, store->IncrBy("ctr/ttl", 5, 100));
  EXPECT_EQ(value, 10);
  EXPECT_GT(std::stoll(Raw(port, {"PTTL", "ctr/ttl"})), 400'000);  // not reset to 100 s
  ASSERT_OK_AND_ASSIGN(value, store->IncrBy("ctr/plain", -3, 0));
  EXPECT_EQ(value, -3);
  EXPECT_EQ(Raw(OwnerPort(*cluster_, RedisKeySlot("ctr/plain")), {"PTTL", "ctr/plain"}),
            "-1");
  const RemoteWrite text{"ctr/text", "not a number", 0};
  ASSERT_OK(store->MultiSet({&text, 1}));
  EXPECT_TRUE(store->IncrBy("ctr/text", 1, 0).status().IsIOError());
}

// A quota counter whose INCRBY ran but whose EXPIRE never did (its reply was
// lost past the timeout, or the process died between the two) gets its TTL
// from the next IncrBy: without one it would never expire, and a namespace
// over its byte limit would stay refused by the remote tier for good.
TEST_F(RedisClusterStoreTest, IncrByGivesACounterLeftWithoutExpiryItsTtl) {
  auto store = OpenStore(ClusterOptions(*cluster_));
  const std::string key = "ctr/orphan";
  const int port = OwnerPort(*cluster_, RedisKeySlot(key));
  ASSERT_EQ(Raw(port, {"DEL", key}).size(), 1u);
  ASSERT_EQ(Raw(port, {"INCRBY", key, "5"}), "5");  // created, no EXPIRE after it
  ASSERT_EQ(Raw(port, {"PTTL", key}), "-1");
  ASSERT_OK_AND_ASSIGN(int64_t value, store->IncrBy(key, 5, 100));
  EXPECT_EQ(value, 10);
  const long long ttl = std::stoll(Raw(port, {"PTTL", key}));
  EXPECT_GT(ttl, 90'000) << "the counter must expire with its window";
  EXPECT_LE(ttl, 100'000);
}

// A read of large values keeps two replies in flight per master (the read
// window, kReadWindowBytes, of 300 KB values) once the master's value size
// is known, so the master builds two replies at a time instead of the
// batch's megabytes; small values still go all at once. Every value arrives
// whole.
TEST_F(RedisClusterStoreTest, ALargeValueReadKeepsTheReadWindowInFlightPerMaster) {
  std::mt19937_64 rng(
      testing::TestSeed("ALargeValueReadKeepsTheReadWindowInFlightPerMaster"));
  std::vector<RemoteWrite> large, small;
  std::vector<std::string> large_keys, small_keys;
  for (int i = 0; i < 12; ++i) {
    std::string value(300'000, '\0');
    for (char& c : value) c = static_cast<char>(rng());
    large.push_back({KeyInSlot(901, "/large" + std::to_string(i)), value, 0});
    large_keys.push_back(large.back().key);
    small.push_back(
        {KeyInSlot(902, "/small" + std::to_string(i)), value.substr(0, 100), 0});
    small_keys.push_back(small.back().key);
  }
  auto writer = OpenStore(ClusterOptions(*cluster_));
  ASSERT_OK(writer->MultiSet(large));
  ASSERT_OK(writer->MultiSet(small));
  std::vector<std::optional<std::string>> values;
  const auto expect_values = [&](const std::vector<RemoteWrite>& writes) {
    ASSERT_EQ(values.size(), writes.size());
    for (size_t i = 0; i < writes.size(); ++i) EXPECT_EQ(values[i], writes[i].value);
  };

  auto store = OpenStore(ClusterOptions(*cluster_));
  // The master's value size is not known yet: the whole batch goes at once.
  ASSERT_OK(testing::MultiGetText(*store, large_keys, &values));
  expect_values(large);
  EXPECT_EQ(store->max_in_flight(), 12u);
  auto learnt = OpenStore(ClusterOptions(*cluster_));
  ASSERT_OK(testing::MultiGetText(*learnt, std::span(large_keys).first(1), &values));
  ASSERT_OK(testing::MultiGetText(*learnt, large_keys, &values));
  expect_values(large);
  EXPECT_EQ(learnt->max_in_flight(), 2u) << "512 KiB of 300 KB values: at least 2";
  // Writes are not windowed (their replies are +OK), small values neither.
  auto small_reader = OpenStore(ClusterOptions(*cluster_));
  ASSERT_OK(testing::MultiGetText(*small_reader, small_keys, &values));
  ASSERT_OK(testing::MultiGetText(*small_reader, small_keys, &values));
  expect_values(small);
  EXPECT_EQ(small_reader->max_in_flight(), 12u);
}

// Moves `slot` (and its keys) from the master on `from` to the one on `to`,
// steps as redis-cli --cluster reshard does them. `finish` false stops in the
// middle: `from` MIGRATING, `to` IMPORTING, only `move_keys` moved.
void MigrateSlot(const LocalRedisCluster& cluster, int slot, int from, int to,
                 const std::vector<std::string>& move_keys, bool finish) {
  const std::string s = std::to_string(slot);
  if (!move_keys.empty() || !finish) {
    ASSERT_EQ(Raw(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", NodeId(from)}), "OK");
    ASSERT_EQ(Raw(from, {"CLUSTER", "SETSLOT", s, "MIGRATING", NodeId(to)}), "OK");
  }
  for (const std::string& key : move_keys) {
    ASSERT_EQ(Raw(from, {"MIGRATE", "127.0.0.1", std::to_string(to), key, "0", "5000"}),
              "OK");
  }
  if (!finish) return;
  for (int port : {to, from}) {
    ASSERT_EQ(Raw(port, {"CLUSTER", "SETSLOT", s, "NODE", NodeId(to)}), "OK");
  }
  for (int port : cluster.ports()) {
    if (port != from && port != to)
      Raw(port, {"CLUSTER", "SETSLOT", s, "NODE", NodeId(to)});
  }
}

TEST_F(RedisClusterStoreTest, FollowsMovedAndRefreshesTheMap) {
  // A store that learnt the map from one seed, then the slot moves.
  RedisClusterOptions options = ClusterOptions(*cluster_);
  options.seeds.resize(1);
  auto store = OpenStore(options);
  const int slot = 4242;
  const std::string key = KeyInSlot(slot, "/moved");
  const RemoteWrite write{key, "value", 0};
  ASSERT_OK(store->MultiSet({&write, 1}));
  const int from = OwnerPort(*cluster_, slot);
  const int to =
      from == cluster_->ports()[0] ? cluster_->ports()[1] : cluster_->ports()[0];
  ASSERT_EQ(store->NodeOfSlot(slot), "127.0.0.1:" + std::to_string(from));
  ASSERT_NO_FATAL_FAILURE(MigrateSlot(*cluster_, slot, from, to, {key}, true));
  const uint64_t fetches = store->map_fetches();

  std::vector<std::optional<std::string>> values;
  ASSERT_OK(testing::MultiGetText(*store, std::vector<std::string>{key},
                                  &values));  // -MOVED, followed
  EXPECT_EQ(values[0], "value");
  EXPECT_EQ(store->NodeOfSlot(slot), "127.0.0.1:" + std::to_string(to));
  ASSERT_OK(testing::MultiGetText(*store, std::vector<std::string>{key}, &values));
  EXPECT_EQ(store->map_fetches(), fetches + 1);  // the whole map, once
  const RemoteWrite again{key, "new", 0};
  ASSERT_OK(store->MultiSet({&again, 1}));
  EXPECT_EQ(Raw(to, {"GET", key}), "new");
}

// A node that has no endpoint of the others to give redirects to "?:port"
// (cluster-preferred-endpoint-type hostname, no hostname announced) or to
// ":port" (unknown-endpoint): the port on the address the client reached it
// at. "?" was taken for a host: the key failed (Unavailable, a node "?:port"
// marked down) and the slot pointed there until the map was fetched again.
TEST_F(RedisClusterStoreTest, FollowsRedirectsToAnUnknownEndpointOnTheAddressItReached) {
  struct RestoreEndpoints {
    const LocalRedisCluster& cluster;
    ~RestoreEndpoints() {
      for (int port : cluster.ports())
        Raw(port, {"CONFIG", "SET", "cluster-preferred-endpoint-type", "ip"});
    }
  } restore{*cluster_};
  int slot = 5151;
  for (const std::string type : {"hostname", "unknown-endpoint"}) {
    SCOPED_TRACE(type);
    RedisClusterOptions options = ClusterOptions(*cluster_);
    options.seeds.resize(1);
    auto store = OpenStore(options);  // its map has the nodes' addresses
    ASSERT_NE(store, nullptr);
    const std::string moved = KeyInSlot(++slot, "/moved");
    const std::string asked = KeyInSlot(++slot, "/asked");
    const std::vector<RemoteWrite> writes = {{moved, "m", 0}, {asked, "a", 0}};
    ASSERT_OK(store->MultiSet(writes));
    for (int port : cluster_->ports()) {
      ASSERT_EQ(Raw(port, {"CONFIG", "SET", "cluster-preferred-endpoint-type", type}),
                "OK");
    }
    const int from = OwnerPort(*cluster_, RedisKeySlot(moved));
    const int to =
        from == cluster_->ports()[0] ? cluster_->ports()[1] : cluster_->ports()[0];
    ASSERT_NO_FATAL_FAILURE(
        MigrateSlot(*cluster_, RedisKeySlot(moved), from, to, {moved}, true));
    const std::string endpoint = type == "hostname" ? "?:" : ":";
    ASSERT_EQ(Raw(from, {"GET", moved}),
              "MOVED " + std::to_string(RedisKeySlot(moved)) + " " + endpoint +
                  std::to_string(to));
    const int ask_from = OwnerPort(*cluster_, RedisKeySlot(asked));
    const int ask_to =
        ask_from == cluster_->ports()[0] ? cluster_->ports()[1] : cluster_->ports()[0];
    ASSERT_NO_FATAL_FAILURE(
        MigrateSlot(*cluster_, RedisKeySlot(asked), ask_from, ask_to, {asked}, false));
    ASSERT_EQ(Raw(ask_from, {"GET", asked}),
              "ASK " + std::to_string(RedisKeySlot(asked)) + " " + endpoint +
                  std::to_string(ask_to));

    std::vector<std::optional<std::string>> values;
    EXPECT_OK(
        testing::MultiGetText(*store, std::vector<std::string>{moved, asked}, &values));
    EXPECT_EQ(values, (std::vector<std::optional<std::string>>{"m", "a"}));
    EXPECT_EQ(store->NodeOfSlot(RedisKeySlot(moved)), "127.0.0.1:" + std::to_string(to));
    EXPECT_FALSE(store->IsNodeDown("?:" + std::to_string(to)));
    // The map fetched again (its endpoints "?" or empty) routes to the same address.
    EXPECT_OK(testing::MultiGetText(*store, std::vector<std::string>{moved}, &values));
    EXPECT_EQ(store->NodeOfSlot(RedisKeySlot(moved)), "127.0.0.1:" + std::to_string(to));
    ASSERT_NO_FATAL_FAILURE(
        MigrateSlot(*cluster_, RedisKeySlot(asked), ask_from, ask_to, {}, true));
  }
}

TEST_F(RedisClusterStoreTest, FollowsAskDuringAMigrationWithoutChangingTheMap) {
  auto store = OpenStore(ClusterOptions(*cluster_));
  const int slot = 777;
  const std::string moved = KeyInSlot(slot, "/moved");
  const std::string stays = KeyInSlot(slot, "/stays");
  const std::string fresh = KeyInSlot(slot, "/fresh");
  const std::vector<RemoteWrite> writes = {{moved, "m", 0}, {stays, "s", 0}};
  ASSERT_OK(store->MultiSet(writes));
  const int from = OwnerPort(*cluster_, slot);
  const int to =
      from == cluster_->ports()[0] ? cluster_->ports()[1] : cluster_->ports()[0];
  ASSERT_NO_FATAL_FAILURE(MigrateSlot(*cluster_, slot, from, to, {moved}, false));
  ASSERT_EQ(Raw(from, {"GET", moved}).rfind("ASK ", 0), 0u);

  std::vector<std::optional<std::string>> values;
  ASSERT_OK(
      testing::MultiGetText(*store, std::vector<std::string>{moved, stays}, &values));
  EXPECT_EQ(values[0], "m");  // -ASK, then ASKING + GET on the importing node
  EXPECT_EQ(values[1], "s");
  const RemoteWrite write{fresh, "f", 0};
  ASSERT_OK(store->MultiSet({&write, 1}));  // a new key goes to the importing node
  EXPECT_EQ(Raw(from, {"GET", fresh}).rfind("ASK ", 0), 0u);  // not on the old one
  EXPECT_EQ(store->NodeOfSlot(slot), "127.0.0.1:" + std::to_string(from));

  ASSERT_NO_FATAL_FAILURE(MigrateSlot(*cluster_, slot, from, to, {stays}, true));
  ASSERT_OK(testing::MultiGetText(*store, std::vector<std::string>{moved, stays, fresh},
                                  &values));
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>{"m", "s", "f"}));
  EXPECT_EQ(store->NodeOfSlot(slot), "127.0.0.1:" + std::to_string(to));
}

}  // namespace
}  // namespace prefixkv
