// Concurrent stores, matches and restores on one namespace (also run under
// ThreadSanitizer): every conversation restores its newest tip, the lineage
// strips only grandparents, and the hot tier's counters stay exact.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/cache/cache_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::HybridLayers;

std::vector<int32_t> Conversation(int id, size_t num_blocks) {
  std::vector<int32_t> t = testing::Tokens(num_blocks);
  for (int32_t& x : t) x += id * 100000;
  return t;
}

TEST(PrefixCacheConcurrency, ConversationsStoreAndRestoreInParallel) {
  testing::TestTiers tiers(64u << 20, "");
  PrefixCache& cache = tiers.cache();
  const Namespace ns = tiers.Register(testing::HybridSpec()).value();
  constexpr int kThreads = 4;
  const size_t turns = testing::Iterations(12, 200);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      for (size_t turn = 1; turn <= turns; ++turn) {
        const std::vector<int32_t> tokens = Conversation(id, turn);
        const int64_t n = static_cast<int64_t>(tokens.size());
        if (!cache.Store(ns, tokens, HybridLayers(n)).ok()) ++failures;
        // The conversation's own newest tip is real: all of it restores.
        StatusOr<MatchResult> m = cache.Match(ns, tokens);
        StatusOr<RestoreResult> r = m.ok() ? cache.Restore(*m) : m.status();
        if (!r.ok() || r->restored_tokens != tokens.size()) ++failures;
        // Another conversation, whatever state it is in, never fails.
        StatusOr<MatchResult> other =
            cache.Match(ns, Conversation((id + 1) % kThreads, turn));
        if (!other.ok() || !cache.Restore(*other).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // Two heavy tips per conversation remain recorded.
  EXPECT_EQ(cache.RecordedTips(ns)->size(), static_cast<size_t>(2 * kThreads));
  std::vector<AuditFinding> findings;
  ASSERT_OK(tiers.budget->Audit(&findings));
  for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
  EXPECT_EQ(tiers.hot->Totals().entries, kThreads * turns + 1);  // + the lineage record
}

}  // namespace
}  // namespace prefixkv
