// Model-based randomized test of the prefix cache: conversations that grow,
// fork and restore, over a small hot tier spilling to a lower tier. Tensor
// bytes are a function of the token prefix, so the expected restore of any
// prompt is known exactly. After every operation:
//   - a restore never serves a wrong byte: KV rows and the rotating window
//     equal the reference for the restored prefix, offset == restored tokens;
//   - a conversation nobody continued restores all of its exact prompt;
//   - the hot budget's and the lower tier's counters agree with their contents.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "tests/cache/cache_test_util.h"
#include "tests/support/mem_tier.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr int64_t kWindow = testing::kWindow;

// Running hash of the prefix ending at each position.
std::vector<uint32_t> PrefixHashes(const std::vector<int32_t>& tokens) {
  std::vector<uint32_t> h(tokens.size());
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < tokens.size(); ++i) {
    x = (x ^ static_cast<uint32_t>(tokens[i])) * 16777619u;
    h[i] = x;
  }
  return h;
}

// [1, 2, rows, 8] words: row r of head k holds hashes[r] + k * 8 + j.
Tensor Rows(const std::vector<uint32_t>& hashes, size_t rows, uint32_t salt) {
  std::vector<uint32_t> w(2 * rows * 8);
  for (size_t k = 0; k < 2; ++k) {
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < 8; ++j)
        w[(k * rows + r) * 8 + j] = hashes[r] + salt + k * 8 + j;
    }
  }
  return Tensor(DType::kFloat32, {1, 2, static_cast<int64_t>(rows), 8},
                SharedBytes::Copy(w.data(), w.size() * 4));
}

std::vector<LayerState> Reference(const std::vector<int32_t>& tokens) {
  const std::vector<uint32_t> h = PrefixHashes(tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  LayerState kv{"KVCache",
                {std::to_string(n)},
                false,
                {Rows(h, h.size(), 0), Rows(h, h.size(), 1)}};
  std::vector<uint32_t> last(kWindow, h.empty() ? 0 : h.back());
  LayerState rot{"RotatingKVCache",
                 RotatingMeta{0, kWindow, n, n % kWindow}.ToStrings(),
                 false,
                 {Rows(last, kWindow, 2), Rows(last, kWindow, 3)}};
  return {kv, rot};
}

struct Conversation {
  std::vector<int32_t> tokens;
};

// True when another conversation continued past all of `c`'s tokens: its
// stores may then legitimately strip c's tips (they are its grandparents).
bool ExtendedByAnother(const std::vector<Conversation>& convs, const Conversation& c) {
  for (const Conversation& d : convs) {
    if (&d != &c && d.tokens.size() > c.tokens.size() &&
        std::equal(c.tokens.begin(), c.tokens.end(), d.tokens.begin())) {
      return true;
    }
  }
  return false;
}

// Runs `ops` random operations on `cache`, checking every restore, and calls
// `audit(op, findings)` after each one.
void RunModel(PrefixCache& cache, Namespace ns, uint64_t ops, std::mt19937_64& rng,
              const std::function<void(uint64_t, std::vector<AuditFinding>*)>& audit) {
  std::vector<Conversation> convs(1);
  for (uint64_t op = 0; op < ops; ++op) {
    const uint64_t kind = rng() % 10;
    Conversation* c = &convs[rng() % convs.size()];
    if (kind < 2 && !c->tokens.empty()) {  // fork: a new conversation from a prefix
      const size_t keep = rng() % (c->tokens.size() + 1);
      convs.push_back(
          {std::vector<int32_t>(c->tokens.begin(), c->tokens.begin() + keep)});
      c = &convs.back();
    }
    if (kind < 7) {  // a turn: extend and store
      for (uint64_t n = 1 + rng() % 9; n > 0; --n) {
        c->tokens.push_back(static_cast<int32_t>(rng() % 5));
      }
      ASSERT_OK(cache.Store(ns, c->tokens, Reference(c->tokens)));
    }
    // A prompt: a prefix of a conversation, maybe with new tokens after it.
    std::vector<int32_t> prompt = c->tokens;
    if (rng() % 2) prompt.resize(rng() % (prompt.size() + 1));
    const bool exact = prompt.size() == c->tokens.size() && !ExtendedByAnother(convs, *c);
    if (rng() % 2) prompt.push_back(99);
    StatusOr<MatchResult> m = cache.Match(ns, prompt);
    ASSERT_OK(m);
    StatusOr<RestoreResult> r = cache.Restore(*m);
    ASSERT_OK(r);
    ASSERT_LE(r->restored_tokens, m->matched_tokens());
    if (exact && !c->tokens.empty()) {
      ASSERT_EQ(r->restored_tokens, c->tokens.size()) << "op " << op << ": " << r->reason;
    }
    if (r->restored_tokens > 0) {
      const std::vector<int32_t> restored(prompt.begin(),
                                          prompt.begin() + r->restored_tokens);
      const std::vector<LayerState> want = Reference(restored);
      ASSERT_EQ(r->layers[0], want[0]) << "op " << op;
      ASSERT_EQ(r->layers[1].tensors, want[1].tensors) << "op " << op;
      ASSERT_EQ(r->layers[1].meta, want[1].meta) << "op " << op;
    }
    std::vector<AuditFinding> findings;
    audit(op, &findings);
    for (const AuditFinding& f : findings)
      FAIL() << "op " << op << ": " << f.what << " " << f.detail;
  }
}

Namespace RegisterWithTail(PrefixCache& cache) {
  NamespaceOptions options;
  options.store_partial_tail = true;
  return cache.RegisterModel(testing::HybridSpec(), options).value();
}

TEST(PrefixCacheModel, RandomConversationsNeverRestoreAWrongByte) {
  std::mt19937_64 rng(testing::TestSeed("PrefixCacheModel"));
  MemTier lower;
  auto budget = SharedHotBudget::Create({.capacity_bytes = 48 * 1024}).value();
  auto hot = HotTier::Open(budget, budget->RegisterOwner("m").value()).value();
  TierStack stack(hot.get(), &lower);
  PrefixCache cache(&stack);
  RunModel(cache, RegisterWithTail(cache), testing::Iterations(300, 20000), rng,
           [&](uint64_t, std::vector<AuditFinding>* findings) {
             ASSERT_OK(budget->Audit(findings));
             ASSERT_OK(lower.Audit(findings));
           });
  EXPECT_GT(hot->Totals().evictions, 0u) << "the hot tier should have spilled";
}

TEST(PrefixCacheModel, RandomConversationsOverTheSsdTier) {
  std::mt19937_64 rng(testing::TestSeed("PrefixCacheModelSsd"));
  testing::TempDir dir;
  testing::TestTiers tiers(24 * 1024, dir.str());
  PrefixCache& cache = tiers.cache();
  const Namespace ns =
      tiers.Register(testing::HybridSpec(), {.store_partial_tail = true}).value();
  RunModel(cache, ns, testing::Iterations(120, 3000), rng,
           [&](uint64_t op, std::vector<AuditFinding>* findings) {
             ASSERT_OK(tiers.budget->Audit(findings));
             if (op % 30 == 29) {
               ASSERT_OK(tiers.ssd->Audit(findings));
             }
           });
  EXPECT_GT(tiers.hot->Totals().evictions, 0u);
  EXPECT_GT(tiers.ssd->Totals().hits, 0u) << "restores should have read from SSD";
}

}  // namespace
}  // namespace prefixkv
