// The Redis Cluster client under concurrency (run under TSan in CI): four
// threads share one store and its pools (one idle connection per node, so
// connections are opened and closed beyond it), writing and reading their own
// keys and common ones, counting on a shared counter, while another thread
// reads the slot map and Describe().
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/storage/remote/redis_test_util.h"

namespace prefixkv {
namespace {

class RedisClusterStoreTsanTest
    : public testing::RedisClusterSuite<RedisClusterStoreTsanTest> {};

TEST_F(RedisClusterStoreTsanTest, FourThreadsShareOneStore) {
  RedisClusterOptions options = testing::ClusterOptions(*cluster_);
  options.pool_per_node = 1;
  auto store = testing::OpenStore(options);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Delete(std::vector<std::string>{"tsan/counter"}));
  const int iterations = static_cast<int>(testing::Iterations(60, 1000));
  constexpr int kThreads = 4;
  constexpr int kKeys = 24;
  std::atomic<bool> done{false};
  std::thread observer([&] {
    while (!done.load()) {
      EXPECT_NE(store->Describe().find("(3 masters)"), std::string::npos);
      store->MaybeRefreshMap();
      EXPECT_FALSE(store->NodeOfSlot(static_cast<uint16_t>(RedisKeySlot("x"))).empty());
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < iterations; ++i) {
        std::vector<RemoteWrite> writes;
        std::vector<std::string> keys;
        for (int k = 0; k < kKeys; ++k) {
          const bool common = k % 4 == 0;
          std::string key = "tsan/" +
                            (common ? std::string("common") : std::to_string(t)) + "/" +
                            std::to_string(k);
          writes.push_back({key, std::to_string(t) + ":" + std::to_string(i), 60});
          keys.push_back(std::move(key));
        }
        ASSERT_OK(store->MultiSet(writes));
        std::vector<std::optional<std::string>> values;
        ASSERT_OK(testing::MultiGetText(*store, keys, &values));
        for (int k = 0; k < kKeys; ++k) {
          ASSERT_TRUE(values[k].has_value()) << keys[k];
          if (k % 4 != 0) {
            EXPECT_EQ(*values[k], writes[k].value);  // own keys: own value
          }
        }
        ASSERT_OK(store->IncrBy("tsan/counter", 1, 60).status());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  observer.join();
  ASSERT_OK_AND_ASSIGN(int64_t total, store->IncrBy("tsan/counter", 0, 0));
  EXPECT_EQ(total, kThreads * iterations);
}

}  // namespace
}  // namespace prefixkv
