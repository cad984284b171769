// Concurrency of the session manager (also run under ThreadSanitizer): sessions on
// real threads stay isolated, racing steps on one session never interleave their
// KV, and eviction churn keeps the byte counters exact.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "tests/session/session_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::ExpectTail;
using testing::FullShard;
using testing::ManagerFor;
using testing::SeedModel;
using testing::Tokens;

TEST(SessionManagerThreads, FourSessionsOnRealThreadsStayIsolated) {
  auto model = SeedModel();
  auto shard = FullShard(model);
  SessionManagerOptions config;
  config.max_sessions = 8;
  auto manager = ManagerFor(*shard, config);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  std::map<std::string, std::vector<int32_t>> prompts = {{"t-alpha", {3, 14, 1, 5}},
                                                         {"t-bravo", {2, 27, 18, 4}},
                                                         {"t-charlie", {9, 9, 1, 2}},
                                                         {"t-delta", {44, 6, 30, 11}}};
  const int n_new = 8;
  std::map<std::string, std::vector<int32_t>> results;
  std::map<std::string, std::vector<std::vector<float>>> logits;
  for (const auto& [sid, prompt] : prompts) {
    results[sid];  // no map writes while threads run
    logits[sid];
  }
  std::vector<std::thread> threads;
  for (const auto& [sid, prompt] : prompts) {
    threads.emplace_back([&, sid = sid, prompt = prompt] {
      results[sid] = testing::CachedGreedy(adapter, sid, 0, prompt, n_new, &logits[sid]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& [sid, prompt] : prompts) {
    EXPECT_EQ(results[sid], testing::StatelessGreedy(*model, prompt, n_new)) << sid;
    // Bit for bit: the tiny model's greedy tokens barely vary between sessions.
    SCOPED_TRACE(sid);
    testing::ExpectStatelessLogits(*model, prompt, results[sid], logits[sid]);
  }
  EXPECT_EQ(manager->total_bytes(),
            4 * (4 + n_new - 1) * manager->recipe().bytes_per_token());
}

TEST(SessionManagerThreads, RacingDecodesOnOneSessionNeverInterleaveTheirKv) {
  auto model = SeedModel();
  auto shard = FullShard(model);
  auto manager = ManagerFor(*shard);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  ExpectTail(adapter.Prefill("shared", 0, Tokens({1, 2, 3})));
  std::atomic<int> committed{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        auto out = adapter.Decode("shared", 0, Tokens({t + 1}));
        ASSERT_OK(out);
        if (std::holds_alternative<TailOutput>(*out)) {
          committed++;
        } else {
          // Computed against a length another thread had already extended.
          EXPECT_EQ(std::get<CacheMiss>(*out).reason, CacheMissReason::kSeqLenMismatch);
          refused++;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(committed + refused, 40);
  auto session = manager->Get("shared", 0).value();
  EXPECT_EQ(session->seq_len(), 3 + committed.load());
  for (int layer : session->owned_layers()) {
    EXPECT_EQ(session->LayerLength(layer).value(), session->seq_len());
  }
  EXPECT_EQ(manager->total_bytes(), session->payload_bytes());
}

TEST(SessionManagerThreads, EvictionChurnKeepsCountersExact) {
  auto shard = FullShard(SeedModel());
  SessionManagerOptions config;
  config.max_sessions = 3;
  config.budget_bytes = testing::RecipeOf(*shard).bytes_per_token() * 20;
  auto manager = ManagerFor(*shard, config);
  KvBoundaryAdapter adapter(shard.get(), manager.get());
  uint64_t seed = testing::TestSeed("EvictionChurnKeepsCountersExact");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
      for (int i = 0; i < 40; ++i) {
        std::string sid = "s" + std::to_string(rng() % 6);
        int32_t token = static_cast<int32_t>(rng() % 48);
        // A session may outgrow the budget on its own: NoSpace is the one error expected.
        auto step_ok = [](const StatusOr<StepOutput>& out) {
          return out.ok() || out.status().IsNoSpace();
        };
        switch (rng() % 5) {
          case 0:
            EXPECT_TRUE(step_ok(adapter.Prefill(sid, 0, Tokens({token, 1, 2}))));
            break;
          case 1:
            EXPECT_TRUE(step_ok(adapter.Decode(sid, 0, Tokens({token}))));
            break;
          case 2:
            EXPECT_OK(manager->Release(sid, 0));
            break;
          case 3:
            EXPECT_OK(manager->Truncate(sid, 0, 0));
            break;
          default:
            EXPECT_OK(manager->Resolve(sid, 0));
            break;
        }
        EXPECT_LE(manager->total_bytes(), config.budget_bytes);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  uint64_t sum = 0;
  for (const auto& [sid, epoch] : manager->session_keys()) {
    sum += manager->Get(sid, epoch).value()->payload_bytes();
  }
  EXPECT_EQ(manager->total_bytes(), sum);
  EXPECT_LE(manager->session_count(), config.max_sessions);
}

}  // namespace
}  // namespace prefixkv
