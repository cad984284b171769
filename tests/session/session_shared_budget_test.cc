// Sessions on the engine's one RAM budget (SessionManagerOptions::memory, issue
// #12): live sessions' KV is an owner of the same budget as the cached
// blocks. A growing session pushes cached blocks to SSD (where they stay
// restorable); when the budget cannot make room that way the manager evicts
// its least recently used other session, stored to the prefix cache first;
// when even that would not be enough, or the session alone exceeds the
// owner's limit, the call fails with NoSpace and nobody is evicted. The
// engine's statistics show one total that never exceeds the capacity.
#include <gtest/gtest.h>

#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::ExpectMiss;
using testing::ExpectTail;
using testing::HybridModelConfig;
using testing::Message;
using testing::RecipeOf;
using testing::RunTurn;
using testing::SeedModel;
using testing::StatelessGreedy;
using testing::TempDir;
using testing::Tokens;

constexpr uint64_t kCapacity = 48 << 10;
constexpr int kReply = 6;

// `n` tokens of a conversation no Message() turn starts with.
std::vector<int32_t> LongPrompt(int n, int salt) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = (i * 7 + salt * 13 + 1) % 48;
  return p;
}

// The budget owner "sessions" in the engine's statistics.
EngineOwnerStats SessionsOwner(Engine& engine) {
  for (const EngineOwnerStats& o : engine.Stats().owners) {
    if (o.name == "sessions") return o;
  }
  ADD_FAILURE() << "no owner named sessions";
  return {};
}

class SessionSharedBudget : public ::testing::Test {
 protected:
  void SetUp() override {
    stack.Open(dir.str(), kCapacity);
    ns = stack.Register(recipe);
    manager = std::make_unique<SessionManager>(recipe, stack.Bind({}, ns));
    adapter = std::make_unique<KvBoundaryAdapter>(shard.get(), manager.get());
  }
  void TearDown() override {
    adapter.reset();
    manager.reset();
    stack.Close();
  }

  // The sessions' charge is the manager's total, and the budget holds.
  void ExpectOneBudget() {
    const EngineStats stats = stack.engine->Stats();
    EXPECT_LE(stats.hot.bytes, kCapacity);
    const EngineOwnerStats sessions = SessionsOwner(*stack.engine);
    EXPECT_EQ(sessions.hot.bytes, manager->total_bytes());
    EXPECT_EQ(sessions.hot.external_bytes, manager->total_bytes());
    std::vector<AuditFinding> findings;
    ASSERT_OK(stack.budget->Audit(&findings));
    for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
  }

  TempDir dir;
  CacheStack stack;
  std::shared_ptr<const ReferenceModel> model = SeedModel(HybridModelConfig());
  std::unique_ptr<ReferenceShard> shard = testing::FullShard(model);
  KvCacheRecipe recipe = RecipeOf(*shard);
  Namespace ns;
  std::unique_ptr<SessionManager> manager;
  std::unique_ptr<KvBoundaryAdapter> adapter;
};

TEST_F(SessionSharedBudget, EngineStatsShowTheSessionsAsOneOwnerOfTheBudget) {
  RunTurn(*adapter, "a", 0, LongPrompt(4, 0), 1);  // within the 6-token windows
  const uint64_t held = manager->total_bytes();
  ASSERT_GT(held, 0u);
  const EngineStats stats = stack.engine->Stats();
  const EngineOwnerStats owner = SessionsOwner(*stack.engine);
  EXPECT_EQ(owner.hot.bytes, held);
  EXPECT_EQ(owner.hot.external_bytes, held);
  EXPECT_EQ(owner.hot.entries, 0u) << "sessions are charged, not blocks";
  EXPECT_EQ(stats.hot.external_bytes, held);
  EXPECT_EQ(stats.owners.size(), 2u) << "the model and the sessions";
  ExpectOneBudget();

  ASSERT_OK(manager->Truncate("a", 0, 2));
  EXPECT_LT(manager->total_bytes(), held);
  ExpectOneBudget();
  ASSERT_OK(manager->Release("a", 0));
  EXPECT_EQ(SessionsOwner(*stack.engine).hot.bytes, 0u);

  RunTurn(*adapter, "b", 0, LongPrompt(20, 1), 2);
  ASSERT_GT(SessionsOwner(*stack.engine).hot.bytes, 0u);
  adapter.reset();
  manager.reset();
  EXPECT_EQ(SessionsOwner(*stack.engine).hot.bytes, 0u)
      << "a destroyed manager returns its live sessions' bytes";
}

TEST_F(SessionSharedBudget, AGrowingSessionSpillsCachedBlocksToSsdAndTheyStayRestorable) {
  std::vector<int32_t> conv;
  for (int turn = 0; turn < 3; ++turn) {
    std::vector<int32_t> msg = Message(turn, model->config().vocab_size);
    conv.insert(conv.end(), msg.begin(), msg.end());
    auto r = RunTurn(*adapter, "a", static_cast<uint64_t>(turn), conv, kReply);
    conv.insert(conv.end(), r.reply.begin(), r.reply.end());
    ASSERT_OK(adapter->EndTurn("a", static_cast<uint64_t>(turn)));
    ASSERT_OK(manager->Release("a", static_cast<uint64_t>(turn)));
  }
  const EngineStats before = stack.engine->Stats();
  ASSERT_GT(before.hot.entries, 0u);
  ASSERT_EQ(before.hot.external_bytes, 0u);

  // About 38 KiB of KV: the conversation's blocks must make room.
  RunTurn(*adapter, "b", 0, LongPrompt(140, 2), 1);
  EXPECT_GT(manager->total_bytes(), kCapacity - before.hot.bytes);
  const EngineStats during = stack.engine->Stats();
  EXPECT_GT(during.hot.evictions, before.hot.evictions);
  EXPECT_EQ(manager->stats().evicted_lru, 0u) << "blocks make room before sessions";
  ExpectOneBudget();

  ASSERT_OK(manager->Release("b", 0));
  std::vector<int32_t> msg = Message(3, model->config().vocab_size);
  std::vector<int32_t> prompt = conv;
  prompt.insert(prompt.end(), msg.begin(), msg.end());
  auto resumed = RunTurn(*adapter, "a", 3, prompt, kReply);
  EXPECT_EQ(resumed.prefill.restore.restored_tokens, static_cast<int64_t>(conv.size()))
      << resumed.prefill.restore.reason;
  EXPECT_GT(resumed.prefill.restore.restored_ssd_tokens, 0);
  EXPECT_EQ(resumed.reply, StatelessGreedy(*model, prompt, kReply));
  ExpectOneBudget();
}

TEST_F(SessionSharedBudget, AChargeThatCannotFitEvictsTheOldestSessionStoredFirst) {
  const std::vector<int32_t> old_prompt = LongPrompt(100, 3);
  auto old_turn = RunTurn(*adapter, "old", 0, old_prompt, 1);
  const int64_t old_len = static_cast<int64_t>(old_prompt.size()) + 1;
  EXPECT_EQ(manager->stats().sessions_stored, 0u);

  // Both sessions cannot be live together, and no block can make room.
  RunTurn(*adapter, "new", 0, LongPrompt(100, 4), 1);
  EXPECT_EQ(ExpectMiss(manager->Resolve("old", 0)).reason, CacheMissReason::kEvictedLru);
  EXPECT_EQ(manager->stats().evicted_lru, 1u);
  EXPECT_EQ(manager->stats().sessions_stored, 1u) << "stored on its eviction";
  EXPECT_EQ(manager->session_count(), 1u);
  ExpectOneBudget();

  ASSERT_OK(manager->Release("new", 0));
  std::vector<int32_t> prompt = old_prompt;
  prompt.push_back(old_turn.reply[0]);
  prompt.push_back(3);  // the next user token
  auto resumed = RunTurn(*adapter, "old", 1, prompt, kReply);
  EXPECT_EQ(resumed.prefill.restore.restored_tokens, old_len)
      << resumed.prefill.restore.reason;
  EXPECT_EQ(resumed.reply, StatelessGreedy(*model, prompt, kReply));
  ExpectOneBudget();
}

TEST_F(SessionSharedBudget, WhenEvictingEveryOtherSessionCannotMakeRoomNobodyIsEvicted) {
  // Another owner's charge takes most of the budget; the blocks cannot help.
  auto other = stack.engine->OpenMemoryCharge("other");
  ASSERT_OK(other);
  ASSERT_OK((*other)->Charge(30 << 10, nullptr));
  RunTurn(*adapter, "small", 0, LongPrompt(40, 5), 1);
  const uint64_t held = manager->total_bytes();

  auto refused = adapter->Prefill("big", 0, Tokens(LongPrompt(70, 6)));
  EXPECT_TRUE(refused.status().IsNoSpace()) << refused.status().ToString();
  EXPECT_EQ(manager->stats().evicted_lru, 0u);
  EXPECT_EQ(manager->session_keys(),
            (std::vector<std::pair<std::string, uint64_t>>{{"small", 0}}))
      << "the refused session was discarded, the other one kept";
  EXPECT_EQ(manager->total_bytes(), held);
  ExpectOneBudget();
}

TEST_F(SessionSharedBudget, ASessionLargerThanTheQuotaIsRefusedBeforeAnybodyIsEvicted) {
  auto quota = stack.engine->OpenMemoryCharge("capped", uint64_t{16} << 10);
  ASSERT_OK(quota);
  EXPECT_EQ((*quota)->limit_bytes(), uint64_t{16} << 10);
  SessionManagerOptions config = stack.Bind({}, ns);
  config.memory = *quota;
  SessionManager capped(recipe, config);
  KvBoundaryAdapter capped_adapter(shard.get(), &capped);
  RunTurn(capped_adapter, "fits", 0, LongPrompt(30, 7), 1);
  auto refused = capped_adapter.Prefill("too-big", 0, Tokens(LongPrompt(80, 8)));
  EXPECT_TRUE(refused.status().IsNoSpace()) << refused.status().ToString();
  EXPECT_EQ(capped.session_count(), 1u);
  EXPECT_EQ(capped.stats().evicted_lru, 0u);
  EXPECT_EQ((*quota)->charged_bytes(), capped.total_bytes());
}

TEST_F(SessionSharedBudget, ANewerEpochOfASessionTooLargeToHoldTwiceSupersedesIt) {
  RunTurn(*adapter, "other", 0, LongPrompt(12, 10), 1);
  // A conversation taking most of the budget, stored at the end of its turn.
  const std::vector<int32_t> first = LongPrompt(100, 9);
  auto turn = RunTurn(*adapter, "c", 0, first, 1);
  ASSERT_OK(adapter->EndTurn("c", 0));
  // Re-routed (a new epoch) while epoch 0 is still live: the new epoch restores
  // what epoch 0 holds and supersedes it, so the two never need room at once
  // and no other session is evicted for epoch 0's bytes (as under budget_bytes).
  std::vector<int32_t> prompt = first;
  prompt.push_back(turn.reply[0]);
  prompt.push_back(5);
  auto resumed = RunTurn(*adapter, "c", 1, prompt, kReply);
  EXPECT_EQ(resumed.prefill.restore.restored_tokens,
            static_cast<int64_t>(first.size()) + 1)
      << resumed.prefill.restore.reason;
  EXPECT_EQ(resumed.reply, StatelessGreedy(*model, prompt, kReply));
  EXPECT_TRUE(IsStaleRouteEpoch(manager->Resolve("c", 0).status()));
  EXPECT_EQ(manager->stats().superseded, 1u);
  EXPECT_EQ(manager->stats().evicted_lru, 0u);
  EXPECT_EQ(manager->session_keys(),
            (std::vector<std::pair<std::string, uint64_t>>{{"c", 1}, {"other", 0}}));
  ExpectOneBudget();
}

}  // namespace
}  // namespace prefixkv
