// Sessions on a PrefixCache under real threads (run under ThreadSanitizer by
// tools/run test): four conversations share one bound manager whose session cap
// is two, so opening a session LRU-evicts another thread's, and that eviction
// stores it from the evicting thread while its owner may be mid-step, and a
// fifth thread keeps storing every live session (StoreLiveSessions). Every
// reply must equal the stateless greedy decode, and the counters must add up.
// The sessions' KV is charged to the engine's RAM budget (CacheStack::Bind).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::FullModelSessions;
using testing::Message;
using testing::TempDir;
using testing::TurnCounts;

TEST(SessionPrefixCacheTsan, EvictionStoresRaceStepsOfOtherSessions) {
  TempDir dir;
  CacheStack stack;
  stack.Open(dir.str());
  FullModelSessions sessions(stack, {.max_sessions = 2});
  SessionManager& manager = *sessions.manager;

  constexpr int kThreads = 4;
  const int turns = static_cast<int>(testing::Iterations(3, 20));
  constexpr size_t kReply = 4;
  TurnCounts counts;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string sid = "conv-" + std::to_string(t);
      std::vector<int32_t> conversation;
      uint64_t epoch = 0;
      for (int turn = 0; turn < turns; ++turn) {
        std::vector<int32_t> msg = Message(turn * kThreads + t, 48);
        conversation.insert(conversation.end(), msg.begin(), msg.end());
        std::vector<int32_t> reply =
            testing::ConcurrentTurn(*sessions.adapter, *sessions.model, sid, &epoch,
                                    conversation, kReply, &counts);
        conversation.insert(conversation.end(), reply.begin(), reply.end());
        (void)manager.Release(sid, epoch);
      }
    });
  }
  // A shutdown-style store of every live session and a TTL sweep, racing the
  // conversations' steps, evictions and releases.
  std::atomic<bool> done{false};
  std::atomic<int> sweeper_errors{0};
  std::thread sweeper([&] {
    while (!done.load()) {
      if (!manager.StoreLiveSessions().ok()) sweeper_errors++;
      manager.EvictExpired();
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  done = true;
  sweeper.join();
  EXPECT_EQ(sweeper_errors.load(), 0);
  EXPECT_EQ(counts.mismatches.load(), 0);
  std::printf("turns given up after 8 evicted attempts: %d\n", counts.gave_up.load());
  EXPECT_LT(counts.gave_up.load(), kThreads * turns / 2);  // most turns were checked
  EXPECT_EQ(counts.errors.load(), 0);
  SessionStats stats = manager.stats();
  EXPECT_EQ(stats.store_failures, 0u) << stats.last_store_error;
  EXPECT_GT(stats.prefix_restores, 0u);
  EXPECT_GT(stats.sessions_stored, 0u);
  EXPECT_LE(manager.session_count(), 2u);
  stack.Close();
}

// Four prefills of the same new session race (each sets expected_seq_len 0:
// it believes the session new), with and without a cached prefix: exactly one
// commits the prompt, the others miss (at the open, the length check or the
// commit), none errs, and none discards the winner's session.
TEST(SessionPrefixCacheTsan, RacingPrefillsOfOneNewSessionCommitExactlyOnce) {
  TempDir dir;
  CacheStack stack;
  stack.Open(dir.str());
  FullModelSessions sessions(stack, {.max_sessions = 64});
  SessionManager& manager = *sessions.manager;
  KvBoundaryAdapter& adapter = *sessions.adapter;
  std::vector<int32_t> prompt = Message(1, 48);
  const std::vector<int32_t> more = Message(2, 48);
  for (uint64_t round = 0; round < 2; ++round) {
    if (round == 1) {  // the second round finds the first round's prompt cached
      ASSERT_TRUE(manager.Release("race", round - 1).value());
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
    std::atomic<int> tails{0}, misses{0}, errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        StepInput in;
        in.token_ids = prompt;
        in.expected_seq_len = 0;  // each caller believes the session new
        auto out = adapter.Prefill("race", round, in);
        if (!out.ok()) {
          errors++;
        } else if (std::holds_alternative<TailOutput>(*out)) {
          tails++;
        } else {
          misses++;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(errors.load(), 0) << round;
    EXPECT_EQ(tails.load(), 1) << round;
    EXPECT_EQ(misses.load(), 3) << round;
    auto session = manager.Get("race", round);
    ASSERT_OK(session) << "round " << round;
    EXPECT_EQ((*session)->seq_len(), static_cast<int64_t>(prompt.size())) << round;
    EXPECT_EQ(*(*session)->tokens(), prompt) << round;
  }
  stack.Close();
}

}  // namespace
}  // namespace prefixkv
