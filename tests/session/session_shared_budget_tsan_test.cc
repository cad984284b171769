// Sessions and cached blocks on one RAM budget under real threads (run under
// ThreadSanitizer by tools/run test): three conversations grow sessions whose
// KV is charged to the engine's budget (SessionManagerOptions::memory), evicting
// cached blocks and each other's sessions, while a fourth thread stores and
// reads opaque values in the same hot tier and a fifth samples the engine's
// statistics. The budget is never exceeded, every reply equals the stateless
// greedy decode, every value reads back intact, and afterwards the sessions
// owner holds exactly the manager's bytes and the audits are clean.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "tests/session/session_cache_util.h"
#include "tests/support/rocksdb_tsan_suppressions.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::FullModelSessions;
using testing::Message;
using testing::TempDir;
using testing::TurnCounts;

constexpr uint64_t kCapacity = 32 << 10;
constexpr int kThreads = 3;
constexpr size_t kReply = 4;

// One conversation of `turns` turns; a turn whose session is evicted mid-way
// is retried at a new epoch (restoring what the cache holds).
void Converse(const FullModelSessions& sessions, int t, int turns, TurnCounts* counts) {
  std::string sid = "conv-" + std::to_string(t);
  std::vector<int32_t> conversation;
  uint64_t epoch = 0;
  for (int turn = 0; turn < turns; ++turn) {
    // Conversations stay short enough that one session, another one's pinned
    // restore and a third session's growth always fit the budget together
    // once the other sessions are evicted: no NoSpace is legitimate here.
    if (conversation.size() > 30) {
      (void)sessions.manager->Release(sid, epoch);
      conversation.clear();
      sid += "+";
      epoch = 0;
    }
    std::vector<int32_t> msg = Message(turn * kThreads + t, 48);
    conversation.insert(conversation.end(), msg.begin(), msg.end());
    std::vector<int32_t> reply = testing::ConcurrentTurn(
        *sessions.adapter, *sessions.model, sid, &epoch, conversation, kReply, counts);
    conversation.insert(conversation.end(), reply.begin(), reply.end());
    if (turn % 2 == 0) (void)sessions.adapter->EndTurn(sid, epoch);
    if (turn % 3 == 2) (void)sessions.manager->Release(sid, epoch);
  }
}

TEST(SessionSharedBudgetTsan, SessionsChargeWhileBlocksAreStoredConcurrently) {
  TempDir dir;
  CacheStack stack;
  stack.Open(dir.str(), kCapacity);
  FullModelSessions sessions(stack, {.max_sessions = 0});
  SessionManager& manager = *sessions.manager;

  const int turns = static_cast<int>(testing::Iterations(4, 20));
  TurnCounts counts;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { Converse(sessions, t, turns, &counts); });
  }
  std::atomic<bool> done{false};
  std::atomic<int> value_errors{0}, over_budget{0};
  std::thread values([&] {
    for (uint64_t i = 0; !done.load(); ++i) {
      const std::string key = "v" + std::to_string(i % 16);
      const char fill = static_cast<char>('a' + i % 16);
      if (!stack.engine->PutValue(key, SharedBytes::Copy(std::string(2000, fill))).ok())
        value_errors++;
      auto got = stack.engine->GetValue(key);
      if (!got.ok() || got->size() != 2000 ||
          got->data()[0] != static_cast<uint8_t>(fill))
        value_errors++;
    }
  });
  std::thread observer([&] {
    while (!done.load()) {
      if (stack.engine->Stats().hot.bytes > kCapacity) over_budget++;
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  done = true;
  values.join();
  observer.join();

  EXPECT_EQ(over_budget.load(), 0);
  EXPECT_EQ(value_errors.load(), 0);
  EXPECT_EQ(counts.mismatches.load(), 0);
  EXPECT_EQ(counts.errors.load(), 0);
  std::printf("turns given up after 8 evicted attempts: %d; sessions evicted: %llu\n",
              counts.gave_up.load(),
              static_cast<unsigned long long>(manager.stats().evicted_lru));
  EXPECT_LT(counts.gave_up.load(), kThreads * turns / 2);
  const SessionStats stats = manager.stats();
  EXPECT_EQ(stats.store_failures, 0u) << stats.last_store_error;
  EXPECT_EQ(stack.sessions->charged_bytes(), manager.total_bytes());
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, stack.engine->Audit());
  for (const AuditFinding& f : audit.findings)
    ADD_FAILURE() << f.what << ": " << f.detail;
  stack.Close();
}

}  // namespace
}  // namespace prefixkv
