// Sessions on a PrefixCache (docs/session.md, issue #7): a Prefill that opens a
// session restores the longest cached prefix and computes only the rest; a
// session is stored at the end of a turn, on release, on TTL and LRU eviction
// and when a newer epoch supersedes it; a conversation continues after a
// restart from SSD; pipeline shards restore the same prefix or miss. Every
// continued conversation is checked token for token against the model's
// stateless greedy decode of the same prompt. The sessions' KV is charged to
// the engine's RAM budget alongside the blocks (CacheStack::Bind).
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::ExpectMiss;
using testing::ExpectTail;
using testing::FullModelSessions;
using testing::FullShard;
using testing::HybridModelConfig;
using testing::kSessionBlockTokens;
using testing::Message;
using testing::RecipeOf;
using testing::RecurrentHybridModelConfig;
using testing::RunTurn;
using testing::SeedModel;
using testing::StatelessGreedy;
using testing::TempDir;
using testing::Tokens;

constexpr int kReply = 6;

// Every test but the restart runs on a fresh hot + SSD stack.
class SessionPrefixCache : public ::testing::Test {
 protected:
  void SetUp() override { stack.Open(dir.str()); }
  void TearDown() override { stack.Close(); }

  TempDir dir;
  CacheStack stack;
};

// The conversation after `turns` turns of Message() + greedy reply.
struct Conversation {
  std::vector<int32_t> tokens;
  // Appends the next user message; returns the prompt.
  std::vector<int32_t> Ask(int turn, int64_t vocab) {
    std::vector<int32_t> msg = Message(turn, vocab);
    tokens.insert(tokens.end(), msg.begin(), msg.end());
    return tokens;
  }
  void Answer(const std::vector<int32_t>& reply) {
    tokens.insert(tokens.end(), reply.begin(), reply.end());
  }
};

void ExpectEachNewTurnRestoresOnlyItsMessage(FullModelSessions& s) {
  Conversation conv;
  const int64_t vocab = s.model->config().vocab_size;
  for (int turn = 0; turn < 5; ++turn) {
    const int64_t before = static_cast<int64_t>(conv.tokens.size());
    std::vector<int32_t> prompt = conv.Ask(turn, vocab);
    auto r = RunTurn(*s.adapter, "chat", static_cast<uint64_t>(turn), prompt, kReply);
    EXPECT_EQ(r.reply, StatelessGreedy(*s.model, prompt, kReply)) << "turn " << turn;
    // The partial tail keeps the exact end of the previous turn.
    EXPECT_EQ(r.prefill.restore.restored_tokens, before) << "turn " << turn;
    EXPECT_EQ(
        r.prefill.restore.restored_hot_tokens + r.prefill.restore.restored_ssd_tokens,
        before);
    EXPECT_EQ(r.prefill.computed_tokens, static_cast<int64_t>(prompt.size()) - before);
    conv.Answer(r.reply);
    ASSERT_TRUE(s.manager->Release("chat", static_cast<uint64_t>(turn)).value());
  }
  SessionStats stats = s.manager->stats();
  EXPECT_EQ(stats.sessions_stored, 5u);
  EXPECT_EQ(stats.prefix_restores, 4u);
  EXPECT_EQ(stats.store_failures, 0u) << stats.last_store_error;
  EXPECT_EQ(stats.prefix_unrestorable, 0u);
}

TEST_F(SessionPrefixCache, EachNewTurnRestoresTheConversationAndComputesOnlyItsMessage) {
  FullModelSessions s(stack);
  ExpectEachNewTurnRestoresOnlyItsMessage(s);
}

TEST_F(SessionPrefixCache, EachNewTurnOfARecurrentHybridModelComputesOnlyItsMessage) {
  // Windows, recurrent states and full KV restored together from each turn's tip.
  FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
  ExpectEachNewTurnRestoresOnlyItsMessage(s);
}

TEST_F(SessionPrefixCache, ARolledBackOpenIsNeitherCountedOpenedNorRestored) {
  FullModelSessions s(stack);
  Conversation conv;
  const int64_t vocab = s.model->config().vocab_size;
  conv.Answer(RunTurn(*s.adapter, "chat", 0, conv.Ask(0, vocab), kReply).reply);
  ASSERT_TRUE(s.manager->Release("chat", 0).value());
  // The next turn's first step restores the conversation, then is cancelled:
  // the adapter discards the session its open made.
  const std::vector<int32_t> prompt = conv.Ask(1, vocab);
  CancellationToken token;
  token.Cancel();
  StepInput cancelled = Tokens(prompt);
  cancelled.cancel = &token;
  StepTimings timings;
  EXPECT_EQ(s.adapter->Prefill("chat", 1, cancelled, &timings).status().code(),
            StatusCode::kAborted);
  ASSERT_GT(timings.restore.restored_tokens, 0);
  SessionStats stats = s.manager->stats();
  EXPECT_EQ(stats.opened, 1u);
  EXPECT_EQ(stats.prefix_restores, 0u);
  EXPECT_EQ(stats.prefix_restored_tokens, 0u);
  // Its retry is the one open and restore of the turn.
  auto retried = RunTurn(*s.adapter, "chat", 1, prompt, kReply);
  stats = s.manager->stats();
  EXPECT_EQ(stats.opened, 2u);
  EXPECT_EQ(stats.prefix_restores, 1u);
  EXPECT_EQ(stats.prefix_restored_tokens,
            static_cast<uint64_t>(retried.prefill.restore.restored_tokens));
  EXPECT_EQ(stats.opened, s.manager->session_count() + stats.released + stats.superseded +
                              stats.evicted_ttl + stats.evicted_lru);
}

TEST_F(SessionPrefixCache, TtlEvictedSessionResumesFromThePrefixCacheWithParity) {
  FakeClock clock;
  FullModelSessions s(stack, SessionManagerOptions{.ttl_ms = 1000}, &clock);
  Conversation conv;
  const int64_t vocab = s.model->config().vocab_size;
  std::vector<int32_t> prompt = conv.Ask(0, vocab);
  auto first = RunTurn(*s.adapter, "chat", 0, prompt, kReply);
  conv.Answer(first.reply);
  EXPECT_EQ(s.manager->stats().sessions_stored, 0u);  // still live: nothing stored

  clock.AdvanceMillis(1001);
  CacheMiss miss = ExpectMiss(s.manager->Resolve("chat", 0));
  EXPECT_EQ(miss.reason, CacheMissReason::kEvictedTtl);
  EXPECT_EQ(s.manager->stats().sessions_stored, 1u);  // stored on eviction
  // A decode of the evicted session misses; the caller prefills the next turn.
  EXPECT_EQ(ExpectMiss(s.adapter->Decode("chat", 0, Tokens({1}))).reason,
            CacheMissReason::kEvictedTtl);

  const int64_t cached = static_cast<int64_t>(conv.tokens.size());
  prompt = conv.Ask(1, vocab);
  auto second = RunTurn(*s.adapter, "chat", 0, prompt, kReply);
  EXPECT_EQ(second.prefill.restore.restored_tokens, cached);
  EXPECT_EQ(second.prefill.computed_tokens, static_cast<int64_t>(prompt.size()) - cached);
  EXPECT_EQ(second.reply, StatelessGreedy(*s.model, prompt, kReply));
}

TEST_F(SessionPrefixCache, EvictExpiredStoresIdleSessionsWithoutOtherTraffic) {
  FakeClock clock;
  FullModelSessions s(stack, SessionManagerOptions{.ttl_ms = 1000}, &clock);
  std::vector<int32_t> prompt = Message(0, s.model->config().vocab_size);
  RunTurn(*s.adapter, "idle", 0, prompt, 2);
  clock.AdvanceMillis(500);
  EXPECT_EQ(s.manager->EvictExpired(), 0u);
  clock.AdvanceMillis(501);
  EXPECT_EQ(s.manager->EvictExpired(), 1u);
  EXPECT_EQ(s.manager->session_count(), 0u);
  EXPECT_EQ(s.manager->stats().sessions_stored, 1u);
}

TEST_F(SessionPrefixCache, StoreLiveSessionsPersistsEverySessionAndKeepsThemLive) {
  FullModelSessions s(stack);
  const int64_t vocab = s.model->config().vocab_size;
  RunTurn(*s.adapter, "a", 0, Message(0, vocab), 2);
  RunTurn(*s.adapter, "b", 0, Message(1, vocab), 2);
  auto stored = s.manager->StoreLiveSessions();
  ASSERT_OK(stored);
  EXPECT_EQ(*stored, 2u);
  EXPECT_EQ(s.manager->session_count(), 2u);
  EXPECT_EQ(*s.manager->StoreLiveSessions(), 0u);  // nothing new since
  for (const char* id : {"a", "b"}) {
    auto session = s.manager->Get(id, 0).value();
    auto match =
        stack.engine->Match(s.manager->config().prefix_cache.ns, *session->tokens());
    ASSERT_OK(match);
    EXPECT_EQ(match->matched_tokens(), static_cast<uint64_t>(session->seq_len())) << id;
  }
}

TEST_F(SessionPrefixCache, LruEvictedSessionResumesFromThePrefixCache) {
  FullModelSessions s(stack, SessionManagerOptions{.max_sessions = 1});
  const int64_t vocab = s.model->config().vocab_size;
  Conversation a;
  Conversation b;
  std::vector<int32_t> prompt_a = a.Ask(0, vocab);
  a.Answer(RunTurn(*s.adapter, "a", 0, prompt_a, kReply).reply);
  std::vector<int32_t> prompt_b = b.Ask(7, vocab);
  b.Answer(RunTurn(*s.adapter, "b", 0, prompt_b, kReply).reply);  // evicts "a"
  EXPECT_EQ(ExpectMiss(s.manager->Resolve("a", 0)).reason, CacheMissReason::kEvictedLru);

  const int64_t cached = static_cast<int64_t>(a.tokens.size());
  prompt_a = a.Ask(1, vocab);
  auto resumed = RunTurn(*s.adapter, "a", 0, prompt_a, kReply);  // evicts "b"
  EXPECT_EQ(resumed.prefill.restore.restored_tokens, cached);
  EXPECT_EQ(resumed.reply, StatelessGreedy(*s.model, prompt_a, kReply));
  EXPECT_EQ(s.manager->stats().evicted_lru, 2u);
  EXPECT_EQ(s.manager->stats().sessions_stored, 2u);
}

void ExpectConversationContinuesAfterARestart(const ModelConfig& config) {
  TempDir dir;
  Conversation conv;
  std::shared_ptr<const ReferenceModel> model = SeedModel(config);
  const int64_t vocab = model->config().vocab_size;
  {
    CacheStack stack;
    stack.Open(dir.str());
    FullModelSessions s(stack, {}, nullptr, config);
    for (int turn = 0; turn < 3; ++turn) {
      // The session stays live across turns: each prefill runs the new message.
      const size_t held = conv.tokens.size();
      std::vector<int32_t> prompt = conv.Ask(turn, vocab);
      std::vector<int32_t> message(prompt.begin() + static_cast<int64_t>(held),
                                   prompt.end());
      auto r = RunTurn(*s.adapter, "chat", 0, message, kReply);
      EXPECT_EQ(r.prefill.computed_tokens, static_cast<int64_t>(message.size()));
      EXPECT_EQ(r.reply, StatelessGreedy(*model, prompt, kReply)) << turn;
      conv.Answer(r.reply);
      ASSERT_OK(s.adapter->EndTurn("chat", 0));
    }
    // The session stays live: a restart loses it, not what EndTurn stored.
    s.manager.reset();
    stack.Close();
  }
  CacheStack stack;
  stack.Open(dir.str());
  FullModelSessions s(stack, {}, nullptr, config);
  const int64_t cached = static_cast<int64_t>(conv.tokens.size());
  std::vector<int32_t> prompt = conv.Ask(3, vocab);
  auto r = RunTurn(*s.adapter, "chat", 0, prompt, kReply);
  EXPECT_EQ(r.prefill.restore.restored_tokens, cached) << r.prefill.restore.reason;
  EXPECT_EQ(r.prefill.restore.restored_ssd_tokens, cached);  // the hot tier is new
  EXPECT_EQ(r.reply, StatelessGreedy(*s.model, prompt, kReply));
  stack.Close();
}

TEST(SessionPrefixCacheRestart, ConversationContinuesAfterARestartRestoredFromSsd) {
  ExpectConversationContinuesAfterARestart(HybridModelConfig());
}

TEST(SessionPrefixCacheRestart, ARecurrentHybridConversationContinuesAfterARestart) {
  ExpectConversationContinuesAfterARestart(RecurrentHybridModelConfig());
}

TEST_F(SessionPrefixCache, EndTurnStoresOnceAndReleaseAfterItStoresNothingNew) {
  FullModelSessions s(stack);
  Conversation conv;
  std::vector<int32_t> prompt = conv.Ask(0, s.model->config().vocab_size);
  RunTurn(*s.adapter, "chat", 0, prompt, kReply);
  auto stored = s.adapter->EndTurn("chat", 0);
  ASSERT_OK(stored);
  EXPECT_FALSE(stored->skipped);
  EXPECT_EQ(stored->stored_tokens, static_cast<int64_t>(prompt.size()) + kReply);
  EXPECT_GT(stored->blocks_written, 0u);
  auto again = s.adapter->EndTurn("chat", 0);
  ASSERT_OK(again);
  EXPECT_TRUE(again->skipped);
  ASSERT_TRUE(s.manager->Release("chat", 0).value());
  EXPECT_EQ(s.manager->stats().sessions_stored, 1u);
  EXPECT_EQ(s.manager->stats().blocks_stored, stored->blocks_written);
  // A session that is gone cannot be stored.
  EXPECT_TRUE(IsKvCacheMiss(s.adapter->EndTurn("chat", 0).status()));
}

// A store reads the session's tokens, then writes without any lock. When the
// session is truncated and grown back to the same length meanwhile (another
// turn rewrote its end), the store must not mark the new tokens stored: the
// next EndTurn stores them. (The store marked them stored when the length
// matched, so every later store of that conversation was skipped as "nothing
// appended" and its new end was never cached.) The rewrite is run from the
// first hot-tier event of the store, on the storing thread, while the store
// is writing the blocks it read.
TEST(SessionPrefixCacheStore, ATurnRewrittenWhileItsStoreRunsIsStoredNextTime) {
  TempDir dir;
  const std::thread::id storing = std::this_thread::get_id();
  std::function<void()> during_store;  // run once
  EngineOptions o;
  o.data_dir = dir.str();
  o.hot_capacity_bytes = 1 << 20;
  o.log = [](std::string_view) {};
  o.on_kv_event = [&](const KvEvent& e) {
    if (e.kind != KvEventKind::kStored || e.tier != TierLevel::kHot ||
        std::this_thread::get_id() != storing || !during_store) {
      return;
    }
    std::function<void()> run = std::move(during_store);
    during_store = nullptr;
    run();
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> engine, Engine::Open(o));
  auto model = SeedModel();
  auto shard = FullShard(model);
  const KvCacheRecipe recipe = RecipeOf(*shard);
  ASSERT_OK_AND_ASSIGN(
      Namespace ns,
      engine->RegisterModel(SessionNamespaceSpec(recipe, "full", kSessionBlockTokens),
                            {.store_partial_tail = true}));
  SessionManager manager(recipe, {.prefix_cache = {engine.get(), ns}});
  KvBoundaryAdapter adapter(shard.get(), &manager);
  const int64_t vocab = model->config().vocab_size;
  std::vector<int32_t> first = Message(0, vocab);
  for (int32_t t : Message(1, vocab)) first.push_back(t);  // 13 tokens
  ExpectTail(adapter.Prefill("chat", 1, Tokens(first)));
  const std::vector<int32_t> kept(first.begin(), first.begin() + 6);
  std::vector<int32_t> rewritten = kept;
  const std::vector<int32_t> other_end(first.begin() + 6, first.end() - 1);
  for (int32_t t : other_end) rewritten.push_back((t + 1) % static_cast<int32_t>(vocab));
  rewritten.push_back(first.back());  // the same length again, other tokens
  during_store = [&] {
    ASSERT_OK(manager.Truncate("chat", 1, 6).status());
    const std::vector<int32_t> tail(rewritten.begin() + 6, rewritten.end());
    ExpectTail(adapter.Prefill("chat", 1, Tokens(tail)));
  };
  ASSERT_OK_AND_ASSIGN(SessionStoreResult stored, adapter.EndTurn("chat", 1));
  EXPECT_FALSE(stored.skipped);
  EXPECT_EQ(during_store, nullptr) << "the rewrite ran during the store";
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> session, manager.Get("chat", 1));
  ASSERT_EQ(session->tokens(), std::optional(rewritten));
  // The rewritten conversation was never stored: the next EndTurn stores it.
  ASSERT_OK_AND_ASSIGN(SessionStoreResult again, adapter.EndTurn("chat", 1));
  EXPECT_FALSE(again.skipped) << "the rewritten turn is taken for stored";
  ASSERT_OK_AND_ASSIGN(MatchResult m, engine->Match(ns, rewritten));
  EXPECT_EQ(m.matched_tokens(), rewritten.size());
}

TEST_F(SessionPrefixCache, ANewerEpochStoresTheSupersededState) {
  FullModelSessions s(stack);
  Conversation conv;
  const int64_t vocab = s.model->config().vocab_size;
  std::vector<int32_t> prompt = conv.Ask(0, vocab);
  conv.Answer(RunTurn(*s.adapter, "chat", 0, prompt, kReply).reply);
  // Re-planning opens epoch 1; the epoch-0 state is stored as it is dropped,
  // and a later fresh prefill finds it.
  ASSERT_OK(s.manager->Open("chat", 1));
  EXPECT_EQ(s.manager->stats().superseded, 1u);
  EXPECT_EQ(s.manager->stats().sessions_stored, 1u);
  ASSERT_TRUE(s.manager->Release("chat", 1).value());  // empty: nothing to store
  const int64_t cached = static_cast<int64_t>(conv.tokens.size());
  prompt = conv.Ask(1, vocab);
  auto r = RunTurn(*s.adapter, "chat", 2, prompt, kReply);
  EXPECT_EQ(r.prefill.restore.restored_tokens, cached);
  EXPECT_EQ(r.reply, StatelessGreedy(*s.model, prompt, kReply));
}

// Full-attention layers restore at any block boundary; sliding-window layers
// only at a stored tip (see the next tests).
TEST_F(SessionPrefixCache, MaxRestoreTokensBoundsTheRestore) {
  FullModelSessions s(stack, {}, nullptr, ModelConfig{});
  Conversation conv;
  const int64_t vocab = s.model->config().vocab_size;
  std::vector<int32_t> prompt = conv.Ask(0, vocab);
  conv.Answer(RunTurn(*s.adapter, "chat", 0, prompt, kReply).reply);
  ASSERT_TRUE(s.manager->Release("chat", 0).value());
  prompt = conv.Ask(1, vocab);
  for (int64_t cap : {int64_t{0}, int64_t{5}}) {
    StepInput in = Tokens(prompt);
    in.max_restore_tokens = cap;
    StepStats stats;
    ExpectTail(s.adapter->Prefill("capped", static_cast<uint64_t>(cap), in, &stats));
    // 5 is inside the second block: the restore stops at the boundary 4.
    EXPECT_EQ(stats.restore.restored_tokens, cap == 0 ? 0 : 4) << cap;
    EXPECT_EQ(stats.computed_tokens,
              static_cast<int64_t>(prompt.size()) - stats.restore.restored_tokens);
    ASSERT_OK(s.manager->Release("capped", static_cast<uint64_t>(cap)));
  }
}

TEST_F(SessionPrefixCache, TheHeadNeverRestoresTheWholePrompt) {
  FullModelSessions s(stack, {}, nullptr, ModelConfig{});
  std::vector<int32_t> prompt = Message(0, s.model->config().vocab_size);
  prompt.insert(prompt.end(), prompt.begin(), prompt.end());  // 10 tokens
  RunTurn(*s.adapter, "one", 0, prompt, 0);                   // stores the prompt
  ASSERT_TRUE(s.manager->Release("one", 0).value());
  // The same prompt again: everything is cached, but its last token must run.
  auto r = RunTurn(*s.adapter, "two", 0, prompt, 3);
  // 9 tokens may be restored: two full blocks (8); the stored partial tail
  // holds tokens 8..9 and is not a prefix of the 9.
  EXPECT_EQ(r.prefill.restore.restored_tokens, 8);
  EXPECT_EQ(r.prefill.computed_tokens, 2);
  EXPECT_EQ(r.reply, StatelessGreedy(*s.model, prompt, 3));
}

void ExpectAResentPromptRestoresOnlyAtAnEarlierTip(FullModelSessions& s) {
  const int64_t vocab = s.model->config().vocab_size;
  // Two blocks: the first store's tip is a full block, which the next store
  // extends (a tip off the chain, such as a partial tail, would not be found).
  std::vector<int32_t> first = Message(0, vocab);
  first.resize(2 * testing::kSessionBlockTokens, 11);
  RunTurn(*s.adapter, "one", 0, first, 0);  // a tip at first.size()
  ASSERT_TRUE(s.manager->Release("one", 0).value());
  std::vector<int32_t> prompt = first;
  prompt.insert(prompt.end(), first.begin(), first.end());
  RunTurn(*s.adapter, "two", 0, prompt, 0);  // extends it: a tip at prompt.size()
  ASSERT_TRUE(s.manager->Release("two", 0).value());
  // The same prompt again: its own tip would include the last token, which must
  // run, and the rotating windows cannot roll back, so the restore walks back
  // to the previous tip (supersede-on-extend keeps it whole for this).
  auto r = RunTurn(*s.adapter, "three", 0, prompt, 3);
  EXPECT_EQ(r.prefill.restore.restored_tokens, static_cast<int64_t>(first.size()));
  EXPECT_EQ(r.reply, StatelessGreedy(*s.model, prompt, 3));
}

TEST_F(SessionPrefixCache, AResentPromptOfAHybridModelRestoresOnlyAtAnEarlierTip) {
  FullModelSessions s(stack);
  ExpectAResentPromptRestoresOnlyAtAnEarlierTip(s);
}

TEST_F(SessionPrefixCache, AResentPromptOfARecurrentHybridModelRestoresAtAnEarlierTip) {
  // A recurrent state cannot roll back either: the same walk-back.
  FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
  ExpectAResentPromptRestoresOnlyAtAnEarlierTip(s);
}

// `n` tokens: `prefix`, then filler `fill` up to n.
std::vector<int32_t> Extended(std::vector<int32_t> prefix, size_t n, int32_t fill) {
  prefix.resize(n, fill);
  return prefix;
}

TEST_F(SessionPrefixCache,
       ARecurrentHybridPrefixWhoseStateWasStrippedIsACleanCountedMiss) {
  FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
  const int64_t vocab = s.model->config().vocab_size;
  constexpr size_t b = testing::kSessionBlockTokens;
  // Three stores, each extending the last by two blocks, each a tip on the chain:
  // the third supersedes the first, whose window and recurrent layers are
  // stripped to placeholders (supersede-on-extend); the second stays whole.
  const std::vector<int32_t> t1 = Extended(Message(0, vocab), 2 * b, 11);
  const std::vector<int32_t> t2 = Extended(t1, 4 * b, 13);
  const std::vector<int32_t> t3 = Extended(t2, 6 * b, 17);
  int id = 0;
  for (const std::vector<int32_t>* t : {&t1, &t2, &t3}) {
    RunTurn(*s.adapter, "turn" + std::to_string(id), 0, *t, 0);
    ASSERT_TRUE(s.manager->Release("turn" + std::to_string(id++), 0).value());
  }
  // A prompt that leaves the conversation right after t1: its only tip is t1's,
  // which lost its recurrent state, so nothing is restored (never a wrong state),
  // the session opens empty, and the miss is counted.
  auto forked = RunTurn(*s.adapter, "fork1", 0, Extended(t1, 2 * b + 3, 29), 4);
  EXPECT_EQ(forked.prefill.restore.matched_tokens, static_cast<int64_t>(2 * b));
  EXPECT_EQ(forked.prefill.restore.restored_tokens, 0);
  EXPECT_NE(forked.prefill.restore.reason.find("no matched block carries real"),
            std::string::npos)
      << forked.prefill.restore.reason;
  EXPECT_EQ(forked.prefill.computed_tokens, static_cast<int64_t>(2 * b + 3));
  EXPECT_EQ(forked.reply, StatelessGreedy(*s.model, Extended(t1, 2 * b + 3, 29), 4));
  EXPECT_EQ(s.manager->stats().prefix_unrestorable, 1u);
  // Leaving right after t2 restores t2's tip: the walk-back fallback kept whole.
  auto after_t2 = RunTurn(*s.adapter, "fork2", 0, Extended(t2, 4 * b + 3, 29), 4);
  EXPECT_EQ(after_t2.prefill.restore.restored_tokens, static_cast<int64_t>(4 * b));
  EXPECT_EQ(after_t2.reply, StatelessGreedy(*s.model, Extended(t2, 4 * b + 3, 29), 4));
  EXPECT_EQ(s.manager->stats().prefix_unrestorable, 1u);
}

// A recurrent layer's offset one position short of the tip's end.
void OffsetShortOfTheTip(LayerState& state) {
  RotatingMeta meta = RotatingMeta::Parse(state.meta).value();
  meta.offset -= 1;
  state.meta = meta.ToStrings();
}

// A recurrent state in bfloat16 (a framework's, under a bfloat16 model).
void StateInBFloat16(LayerState& state) {
  state.tensors[1] = Tensor::Filled(DType::kBFloat16, state.tensors[1].shape(), 0);
}

// KV with a leading batch axis, [1, heads, tokens, head_dim] (as mlx-lm
// keeps it): the spec's shapes name the last three dimensions, so Store takes
// it; LayerKvCache::Restore takes [heads, tokens, head_dim] only.
void KvWithABatchAxis(LayerState& kv) {
  for (Tensor& t : kv.tensors) {
    std::vector<int64_t> shape = t.shape();
    shape.insert(shape.begin(), 1);
    t = Tensor(t.dtype(), shape, t.bytes());
  }
}

// Stores `tokens` as another client may: their state (computed by a session
// that is then discarded, so never stored by the manager) with each layer of
// `spoiled_type` changed by `spoil`. Store takes such a tip;
// LayerKvCache::Restore refuses its state.
void StoreATipWhoseStateTheCachesRefuse(FullModelSessions& s,
                                        const std::vector<int32_t>& tokens,
                                        void (*spoil)(LayerState&),
                                        const std::string& spoiled_type = "ArraysCache") {
  RunTurn(*s.adapter, "other-client", 0, tokens, 0);
  std::shared_ptr<Session> other = s.manager->Get("other-client", 0).value();
  std::vector<LayerState> layers;
  for (auto& [layer, e] : other->ExportLayers()) {
    LayerState state;
    state.cache_type = std::string(e.cache_type);
    state.meta = {std::to_string(e.length)};
    if (e.rotating_meta) state.meta = e.rotating_meta->ToStrings();
    state.tensors = {std::move(e.keys), std::move(e.values)};
    if (state.cache_type == spoiled_type) spoil(state);
    layers.push_back(std::move(state));
  }
  s.manager->Discard("other-client", 0);
  const prefixkv::SessionPrefixCache& pc = s.manager->config().prefix_cache;
  ASSERT_TRUE(pc.engine->Store(pc.ns, tokens, layers).ok());
}

// A first turn of `first` tokens run and stored by the manager, then the
// conversation extended to `second` tokens stored by another client with a
// tip whose state the caches refuse (OffsetShortOfTheTip); that prompt.
std::vector<int32_t> AnEarlierTurnThenARefusedTip(FullModelSessions& s, size_t first,
                                                  size_t second) {
  const std::vector<int32_t> t1 =
      Extended(Message(0, s.model->config().vocab_size), first, 11);
  RunTurn(*s.adapter, "turn1", 0, t1, 0);
  EXPECT_TRUE(s.manager->Release("turn1", 0).value());
  const std::vector<int32_t> t2 = Extended(t1, second, 13);
  StoreATipWhoseStateTheCachesRefuse(s, t2, OffsetShortOfTheTip);
  return t2;
}

TEST_F(SessionPrefixCache, ATipWhoseStateTheCachesRefuseRestoresAnEarlierTipOrNothing) {
  FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
  const int64_t vocab = s.model->config().vocab_size;
  constexpr size_t b = testing::kSessionBlockTokens;
  std::vector<int32_t> t2;
  ASSERT_NO_FATAL_FAILURE(t2 = AnEarlierTurnThenARefusedTip(s, 2 * b, 4 * b));
  // Past t2: its tip is passed over (never a wrong state, never a failed
  // prefill) and t1's, kept whole, is restored.
  const std::vector<int32_t> after_t2 = Extended(t2, 4 * b + 3, 29);
  auto turn = RunTurn(*s.adapter, "turn2", 0, after_t2, 4);
  EXPECT_EQ(turn.prefill.restore.matched_tokens, static_cast<int64_t>(4 * b));
  EXPECT_EQ(turn.prefill.restore.restored_tokens, static_cast<int64_t>(2 * b))
      << turn.prefill.restore.reason;
  EXPECT_NE(turn.prefill.restore.reason.find("refused"), std::string::npos)
      << turn.prefill.restore.reason;
  EXPECT_EQ(turn.reply, StatelessGreedy(*s.model, after_t2, 4));
  EXPECT_EQ(s.manager->stats().prefix_restores, 1u);
  // A conversation whose only tip is refused: a clean miss, counted.
  const std::vector<int32_t> lone = Extended(Message(1, vocab), 2 * b, 19);
  ASSERT_NO_FATAL_FAILURE(StoreATipWhoseStateTheCachesRefuse(s, lone, StateInBFloat16));
  const std::vector<int32_t> after_lone = Extended(lone, 2 * b + 3, 29);
  auto missed = RunTurn(*s.adapter, "lone", 0, after_lone, 4);
  EXPECT_EQ(missed.prefill.restore.matched_tokens, static_cast<int64_t>(2 * b));
  EXPECT_EQ(missed.prefill.restore.restored_tokens, 0);
  EXPECT_EQ(missed.prefill.computed_tokens, static_cast<int64_t>(2 * b + 3));
  EXPECT_EQ(missed.reply, StatelessGreedy(*s.model, after_lone, 4));
  EXPECT_EQ(s.manager->stats().prefix_unrestorable, 1u);
  EXPECT_EQ(s.manager->stats().prefix_restores, 1u);
}

// The turn before a refused tip usually ends in the block before it (or in
// the same one): its partial tip sits beside the chain there. The pass-over
// cut the match to the whole blocks before the refused tip, which left that
// tip out of reach: a miss (0 restored) where its 6 tokens were restorable.
TEST_F(SessionPrefixCache, ARefusedTipPassesOverToAnEarlierPartialTipInTheBlockBefore) {
  FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
  constexpr size_t b = testing::kSessionBlockTokens;
  std::vector<int32_t> t2;
  ASSERT_NO_FATAL_FAILURE(t2 = AnEarlierTurnThenARefusedTip(s, b + 2, 2 * b));
  const std::vector<int32_t> after_t2 = Extended(t2, 2 * b + 3, 29);
  auto turn = RunTurn(*s.adapter, "turn2", 0, after_t2, 4);
  EXPECT_EQ(turn.prefill.restore.restored_tokens, static_cast<int64_t>(b + 2))
      << turn.prefill.restore.reason;
  EXPECT_EQ(turn.reply, StatelessGreedy(*s.model, after_t2, 4));
}

// The restores the engine made of `s`'s namespace, and the tokens they counted.
std::pair<uint64_t, uint64_t> EngineRestores(FullModelSessions& s) {
  const prefixkv::SessionPrefixCache& pc = s.manager->config().prefix_cache;
  const std::string model = pc.engine->ModelSpec(pc.ns).value().model;
  for (const EngineOwnerStats& owner : pc.engine->Stats().owners) {
    if (owner.name != model) continue;
    const PrefixTokenCounters& t = owner.prefix_tokens.value();
    return {owner.restore_latency->count(),
            t.restored_tokens_hot + t.restored_tokens_ssd + t.restored_tokens_remote};
  }
  ADD_FAILURE() << "no owner " << model;
  return {};
}

// KV the caches refuse is refused at every shorter prefix too (a restore
// checks every block's KV against the chain's first block): the open passed
// over it one block at a time, one Engine::Restore of all the blocks before
// each (6 restores of 21 blocks counted restored for a miss of 6 blocks; a
// prompt of n blocks cost n restores and n^2 / 2 block reads). It now gives up
// at the first refusal of a full-attention layer.
TEST_F(SessionPrefixCache, KvTheCachesRefuseCostsOneRestoreNotOnePerBlock) {
  ModelConfig config = HybridModelConfig();
  config.layer_kinds = "GGGGGG";
  FullModelSessions s(stack, {}, nullptr, config);
  constexpr size_t b = testing::kSessionBlockTokens;
  const std::vector<int32_t> t =
      Extended(Message(0, s.model->config().vocab_size), 6 * b, 11);
  ASSERT_NO_FATAL_FAILURE(
      StoreATipWhoseStateTheCachesRefuse(s, t, KvWithABatchAxis, "KVCache"));
  const auto [restores, tokens] = EngineRestores(s);
  const std::vector<int32_t> after = Extended(t, 6 * b + 3, 29);
  auto missed = RunTurn(*s.adapter, "client", 0, after, 4);
  EXPECT_EQ(missed.prefill.restore.matched_tokens, static_cast<int64_t>(6 * b));
  EXPECT_EQ(missed.prefill.restore.restored_tokens, 0);
  EXPECT_NE(missed.prefill.restore.reason.find("refused"), std::string::npos)
      << missed.prefill.restore.reason;
  EXPECT_EQ(missed.reply, StatelessGreedy(*s.model, after, 4));
  EXPECT_EQ(s.manager->stats().prefix_unrestorable, 1u);
  EXPECT_EQ(EngineRestores(s), std::make_pair(restores + 1, tokens + 6 * b));
}

void ExpectRegeneratingRestoresTheConversationBeforeIt(FullModelSessions& s) {
  const int64_t vocab = s.model->config().vocab_size;
  Conversation conv;
  std::vector<int32_t> first = conv.Ask(0, vocab);
  conv.Answer(RunTurn(*s.adapter, "chat", 0, first, kReply).reply);
  ASSERT_TRUE(s.manager->Release("chat", 0).value());
  const int64_t before = static_cast<int64_t>(conv.tokens.size());
  ASSERT_NE(before % testing::kSessionBlockTokens, 0) << "pick an unaligned turn";
  std::vector<int32_t> second = conv.Ask(1, vocab);
  RunTurn(*s.adapter, "chat", 1, second, kReply);
  ASSERT_TRUE(s.manager->Release("chat", 1).value());
  // "Regenerate": the same second prompt again. Its own tip lies past its last
  // token, so the restore goes back to the first turn's partial tip, which the
  // second turn's full blocks cover (it sits beside the chain).
  auto again = RunTurn(*s.adapter, "chat", 2, second, kReply);
  EXPECT_EQ(again.prefill.restore.restored_tokens, before)
      << again.prefill.restore.reason;
  EXPECT_EQ(again.reply, StatelessGreedy(*s.model, second, kReply));
}

TEST_F(SessionPrefixCache, RegeneratingAnAnswerRestoresTheConversationBeforeIt) {
  FullModelSessions s(stack);
  ExpectRegeneratingRestoresTheConversationBeforeIt(s);
}

TEST_F(SessionPrefixCache, RegeneratingARecurrentHybridAnswerRestoresTheTurnBeforeIt) {
  FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
  ExpectRegeneratingRestoresTheConversationBeforeIt(s);
}

TEST_F(SessionPrefixCache, PipelineShardsRestoreTheSamePrefix) {
  auto model = SeedModel(HybridModelConfig());
  auto head_shard = testing::Shard(model, 0, 2);
  auto tail_shard = testing::Shard(model, 3, 5);
  auto bound = [&](const ShardComputation& shard) {
    KvCacheRecipe recipe = RecipeOf(shard);
    SessionManagerOptions config;
    config = stack.Bind(config, stack.Register(recipe));
    return std::make_unique<SessionManager>(recipe, config);
  };
  auto head_mgr = bound(*head_shard);
  auto tail_mgr = bound(*tail_shard);
  KvBoundaryAdapter head(head_shard.get(), head_mgr.get());
  KvBoundaryAdapter tail(tail_shard.get(), tail_mgr.get());
  // Every step gives both shards the same token ids.
  auto step = [&](bool prefill, uint64_t epoch, std::vector<int32_t> ids,
                  StepStats* head_stats, StepStats* tail_stats) {
    StepInput in = Tokens(ids);
    auto h = prefill ? head.Prefill("p", epoch, in, head_stats)
                     : head.Decode("p", epoch, in, head_stats);
    StepInput next = testing::Boundary(testing::ExpectBundle(h));
    next.token_ids = ids;
    return prefill ? tail.Prefill("p", epoch, next, tail_stats)
                   : tail.Decode("p", epoch, next, tail_stats);
  };
  Conversation conv;
  const int64_t vocab = model->config().vocab_size;
  for (uint64_t turn = 0; turn < 3; ++turn) {
    const int64_t cached = static_cast<int64_t>(conv.tokens.size());
    std::vector<int32_t> prompt = conv.Ask(static_cast<int>(turn), vocab);
    StepStats hs;
    StepStats ts;
    TailOutput out = ExpectTail(step(true, turn, prompt, &hs, &ts));
    EXPECT_EQ(hs.restore.restored_tokens, cached) << turn;
    EXPECT_EQ(ts.restore.restored_tokens, cached) << turn;
    std::vector<int32_t> reply;
    for (int i = 0; i < kReply; ++i) {
      reply.push_back(out.token_id);
      out = ExpectTail(step(false, turn, {out.token_id}, nullptr, nullptr));
    }
    EXPECT_EQ(reply, StatelessGreedy(*model, prompt, kReply)) << turn;
    conv.Answer(reply);
    ASSERT_TRUE(head_mgr->Release("p", turn).value());
    ASSERT_TRUE(tail_mgr->Release("p", turn).value());
  }
  EXPECT_EQ(head_mgr->stats().sessions_stored, 3u);
  EXPECT_EQ(tail_mgr->stats().sessions_stored, 3u);
}

TEST_F(SessionPrefixCache, AShardThatCannotRestoreTheBoundaryPrefixMisses) {
  auto model = SeedModel(HybridModelConfig());
  auto head_shard = testing::Shard(model, 0, 2);
  auto tail_shard = testing::Shard(model, 3, 5);
  KvCacheRecipe head_recipe = RecipeOf(*head_shard);
  KvCacheRecipe tail_recipe = RecipeOf(*tail_shard);
  SessionManagerOptions head_config;
  head_config = stack.Bind(head_config, stack.Register(head_recipe));
  SessionManagerOptions tail_config;  // the tail's namespace never gets a store
  tail_config = stack.Bind(tail_config, stack.Register(tail_recipe));
  SessionManager head_mgr(head_recipe, head_config);
  SessionManager tail_mgr(tail_recipe, tail_config);
  KvBoundaryAdapter head(head_shard.get(), &head_mgr);
  KvBoundaryAdapter tail(tail_shard.get(), &tail_mgr);
  // Only the head's layers of a first turn are stored.
  std::vector<int32_t> first = Message(0, model->config().vocab_size);
  auto bundle = testing::ExpectBundle(head.Prefill("p", 0, Tokens(first)));
  ASSERT_TRUE(head_mgr.Release("p", 0).value());
  std::vector<int32_t> prompt = first;
  prompt.push_back(3);
  StepInput in = Tokens(prompt);
  bundle = testing::ExpectBundle(head.Prefill("p", 1, in));
  EXPECT_EQ(bundle.positions.front(), static_cast<int64_t>(first.size()));
  StepInput next = testing::Boundary(bundle);
  next.token_ids = prompt;
  CacheMiss miss = ExpectMiss(tail.Prefill("p", 1, next));
  EXPECT_EQ(miss.reason, CacheMissReason::kPrefixUnavailable);
  EXPECT_NE(miss.detail.find("restores 0"), std::string::npos) << miss.detail;
  EXPECT_EQ(tail_mgr.session_count(), 0u);  // nothing left behind
  // The caller re-runs the head with the tail's limit: full parity.
  ASSERT_TRUE(head_mgr.Release("p", 1).value());
  in.max_restore_tokens = 0;
  next = testing::Boundary(testing::ExpectBundle(head.Prefill("p", 2, in)));
  next.token_ids = prompt;
  TailOutput out = ExpectTail(tail.Prefill("p", 2, next));
  EXPECT_EQ(out.token_id, model->WholeModelNextToken(prompt).value());
}

TEST_F(SessionPrefixCache, SessionsWithUnknownTokensAreNeverStored) {
  FullModelSessions s(stack);
  // A non-head-like append without token ids: the positions cannot be named.
  std::vector<int32_t> prompt = Message(0, s.model->config().vocab_size);
  ExpectTail(s.adapter->Prefill("chat", 0, Tokens(prompt)));
  auto session = s.manager->Get("chat", 0).value();
  ASSERT_TRUE(session->tokens().has_value());
  EXPECT_EQ(*session->tokens(), prompt);
  KvChunks one;
  for (const auto& [layer, e] : session->ExportLayers()) {
    std::vector<int64_t> shape = {e.keys.dim(0), 1, e.keys.dim(2)};
    one.emplace(layer,
                LayerKvChunk{Tensor::Filled(DType::kFloat32, shape, uint8_t{0x3f}),
                             Tensor::Filled(DType::kFloat32, shape, uint8_t{0x3f})});
  }
  ASSERT_OK(s.manager->Append("chat", 0, one));
  EXPECT_FALSE(session->tokens().has_value());
  // A token count that disagrees with the chunks is refused.
  std::vector<int32_t> two = {1, 2};
  EXPECT_EQ(s.manager->Append("chat", 0, one, std::nullopt, two).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.manager->Release("chat", 0).value());
  EXPECT_EQ(s.manager->stats().sessions_stored, 0u);
  EXPECT_EQ(s.manager->stats().stores_skipped_unknown_tokens, 1u);
  auto match = stack.engine->Match(s.manager->config().prefix_cache.ns, prompt);
  ASSERT_OK(match);
  EXPECT_EQ(match->matched_tokens(), 0u);
}

TEST_F(SessionPrefixCache, AFailedAutomaticStoreIsCountedAndDoesNotFailTheRelease) {
  auto model = SeedModel(HybridModelConfig());
  auto shard = testing::FullShard(model);
  auto half = testing::Shard(model, 0, 2);
  KvCacheRecipe recipe = RecipeOf(*shard);
  SessionManagerOptions config;
  // A namespace of three layers for a six-layer session: every store fails.
  config = stack.Bind(config, stack.Register(RecipeOf(*half)));
  SessionManager manager(recipe, config);
  KvBoundaryAdapter adapter(shard.get(), &manager);
  ExpectTail(adapter.Prefill("chat", 0, Tokens(Message(0, 48))));
  EXPECT_FALSE(adapter.EndTurn("chat", 0).ok());
  ASSERT_TRUE(manager.Release("chat", 0).value());
  EXPECT_EQ(manager.stats().store_failures, 1u);
  EXPECT_NE(manager.stats().last_store_error.find("chat"), std::string::npos);
  EXPECT_EQ(manager.session_count(), 0u);
}

TEST_F(SessionPrefixCache, NamespaceSpecNamesTheShardAndItsLayerTypes) {
  auto model = SeedModel(HybridModelConfig());
  NamespaceSpec whole =
      SessionNamespaceSpec(RecipeOf(*testing::FullShard(model)), "m", 16);
  EXPECT_EQ(whole.model, "m");
  EXPECT_EQ(whole.dtype, DType::kFloat32);
  EXPECT_EQ(whole.layer_types,
            (std::vector<std::string>{"RotatingKVCache", "RotatingKVCache", "KVCache",
                                      "RotatingKVCache", "RotatingKVCache", "KVCache"}));
  NamespaceSpec part =
      SessionNamespaceSpec(RecipeOf(*testing::Shard(model, 3, 5)), "m", 16);
  EXPECT_EQ(part.model, "m/layers=3-5");
  EXPECT_EQ(part.layer_types.size(), 3u);
  NamespaceSpec hybrid = SessionNamespaceSpec(
      RecipeOf(*testing::FullShard(SeedModel(RecurrentHybridModelConfig()))), "m", 16);
  EXPECT_EQ(hybrid.layer_types,
            (std::vector<std::string>{"RotatingKVCache", "ArraysCache", "KVCache",
                                      "RotatingKVCache", "ArraysCache", "KVCache"}));
}

// HybridModelConfig with 8 query heads of 4 elements (the same 6 layers,
// windows, KV heads, block size and dtype): only the layer shapes differ.
ModelConfig OtherShapeConfig(ModelConfig c = HybridModelConfig()) {
  c.n_heads = 8;
  return c;
}

// One conversation turn on `s` (a new session at `epoch`), released (stored).
std::vector<int32_t> ReleasedTurn(FullModelSessions& s,
                                  const std::vector<int32_t>& prompt, uint64_t epoch,
                                  int64_t expected_restored) {
  auto r = RunTurn(*s.adapter, "chat", epoch, prompt, kReply);
  EXPECT_EQ(r.reply, StatelessGreedy(*s.model, prompt, kReply));
  EXPECT_EQ(r.prefill.restore.restored_tokens, expected_restored);
  EXPECT_TRUE(s.manager->Release("chat", epoch).value());
  return r.reply;
}

TEST_F(SessionPrefixCache, RecipesDifferingOnlyInALayerShapeNeverShareBlocks) {
  FullModelSessions a(stack);
  FullModelSessions b(stack, {}, nullptr, OtherShapeConfig());
  std::vector<int32_t> conv = Message(0, a.model->config().vocab_size);
  std::vector<int32_t> reply = ReleasedTurn(a, conv, 1, 0);
  conv.insert(conv.end(), reply.begin(), reply.end());
  // The remote tier only sees keys: the namespaces' keys differ from the root on.
  EXPECT_NE(a.manager->config().prefix_cache.ns.root,
            b.manager->config().prefix_cache.ns.root);
  EXPECT_EQ(
      stack.engine->Match(a.manager->config().prefix_cache.ns, conv)->matched_tokens(),
      conv.size());
  EXPECT_EQ(
      stack.engine->Match(b.manager->config().prefix_cache.ns, conv)->matched_tokens(),
      0u);
  ReleasedTurn(b, conv, 1, 0);  // computed from scratch, with parity
  // Every layer's shape is keyed and named.
  const NamespaceSpec spec_a = SessionNamespaceSpec(RecipeOf(*a.shard), "hybrid", 4);
  const NamespaceSpec spec_b = SessionNamespaceSpec(RecipeOf(*b.shard), "hybrid", 4);
  ASSERT_EQ(spec_a.layer_shapes.size(), 6u);
  EXPECT_EQ(spec_a.layer_shapes[0].ToString(), "2x8w6");
  EXPECT_EQ(spec_b.layer_shapes[0].ToString(), "2x4w6");
  EXPECT_EQ(spec_a.layer_shapes[2].ToString(), "2x8");
  std::vector<ManifestDifference> diff = DiffSpecs(spec_a, spec_b);
  ASSERT_EQ(diff.size(), 6u);
  EXPECT_EQ(diff[0].field, "layer 0 shape");
  // A recurrent layer's conv ring and state are keyed too.
  ModelConfig shorter_conv = RecurrentHybridModelConfig();
  shorter_conv.conv_kernel = 3;
  const NamespaceSpec recurrent = SessionNamespaceSpec(
      RecipeOf(*FullShard(SeedModel(RecurrentHybridModelConfig()))), "hybrid", 4);
  const NamespaceSpec recurrent_b =
      SessionNamespaceSpec(RecipeOf(*FullShard(SeedModel(shorter_conv))), "hybrid", 4);
  EXPECT_EQ(recurrent.layer_shapes.at(1).ToString(), "0x0r3x32:4x8");
  EXPECT_EQ(recurrent_b.layer_shapes.at(1).ToString(), "0x0r2x32:4x8");
  EXPECT_NE(NamespaceRoot(recurrent).value(), NamespaceRoot(recurrent_b).value());
}

// SessionNamespaceSpec as it was before it keyed the layer shapes.
NamespaceSpec LegacySessionSpec(const KvCacheRecipe& recipe) {
  NamespaceSpec spec = SessionNamespaceSpec(recipe, "hybrid", kSessionBlockTokens);
  spec.layer_shapes.clear();
  return spec;
}

// A directory written under the spec without shapes by a model of `config`
// (`layout`: its family letters): kept by the spec with shapes on two opens,
// never given to a model of other head dims that registers first.
void ExpectAnOldDirectoryIsKeptForItsShapesOnly(const ModelConfig& config,
                                                const std::string& layout) {
  TempDir dir;
  auto model = SeedModel(config);
  const KvCacheRecipe recipe = RecipeOf(*FullShard(model));
  const NamespaceSpec legacy = LegacySessionSpec(recipe);
  // The fingerprint data directories were written under.
  EXPECT_EQ(legacy.Fingerprint().value(),
            "prefixkv/v1|model=hybrid|layers=6|block=4|dtype=float32|layout=" + layout +
                "|salt=");
  const BlockKey legacy_root = NamespaceRoot(legacy).value();
  std::vector<int32_t> conv = Message(0, model->config().vocab_size);
  {
    CacheStack old;
    old.Open(dir.str());
    const Namespace ns =
        old.engine->RegisterModel(legacy, {.store_partial_tail = true}).value();
    auto shard = FullShard(model);
    SessionManager manager(recipe, old.Bind({}, ns));
    KvBoundaryAdapter adapter(shard.get(), &manager);
    auto r = RunTurn(adapter, "chat", 1, conv, kReply);
    conv.insert(conv.end(), r.reply.begin(), r.reply.end());
    ASSERT_TRUE(manager.Release("chat", 1).value());
    old.Close();
  }
  for (int open = 0; open < 2; ++open) {  // adopting it, then adopted
    SCOPED_TRACE("open " + std::to_string(open));
    CacheStack stack;
    stack.Open(dir.str());
    {
      // Another shape first (the second time): never the adopted namespace.
      FullModelSessions other(stack, {}, nullptr, OtherShapeConfig(config));
      const Namespace ns = other.manager->config().prefix_cache.ns;
      EXPECT_NE(ns.root, legacy_root);
      EXPECT_EQ(stack.engine->Match(ns, conv)->matched_tokens(), 0u);
      if (open == 1) ReleasedTurn(other, conv, 1, 0);
    }
    FullModelSessions s(stack, {}, nullptr, config);
    const Namespace ns = s.manager->config().prefix_cache.ns;
    EXPECT_EQ(ns.root, legacy_root);
    // Found by its spec (as PKV.REGISTER's model limit finds it), not by the
    // spec's own root.
    const NamespaceSpec shaped =
        SessionNamespaceSpec(recipe, "hybrid", kSessionBlockTokens);
    ASSERT_OK_AND_ASSIGN(Namespace by_spec, stack.engine->FindModel(shaped));
    EXPECT_EQ(by_spec.root, legacy_root);
    EXPECT_NE(NamespaceRoot(shaped).value(), legacy_root);
    EXPECT_FALSE(stack.engine->FindModel(NamespaceRoot(shaped).value()).ok());
    EXPECT_EQ(stack.engine->Match(ns, conv)->matched_tokens(), conv.size());
    std::vector<int32_t> prompt = conv;
    std::vector<int32_t> msg = Message(1 + open, model->config().vocab_size);
    prompt.insert(prompt.end(), msg.begin(), msg.end());
    std::vector<int32_t> reply =
        ReleasedTurn(s, prompt, 10 + open, static_cast<int64_t>(conv.size()));
    conv = prompt;
    conv.insert(conv.end(), reply.begin(), reply.end());
    // The manifest now records the shapes the old blocks are served for.
    bool found = false;
    auto manifests = stack.engine->Manifests();
    ASSERT_OK(manifests);
    for (const StoredManifest& m : *manifests) {
      if (m.root != legacy_root) continue;
      found = true;
      ASSERT_OK(m.decoded);
      EXPECT_TRUE(m.decoded->shapes_recorded_later);
      EXPECT_EQ(m.decoded->spec.layer_shapes,
                SessionNamespaceSpec(recipe, "hybrid", kSessionBlockTokens).layer_shapes);
    }
    EXPECT_TRUE(found);
    stack.Close();
  }
}

TEST(SessionNamespaceMigration,
     ADirectoryFromBeforeShapesKeepsHittingAndRefusesOtherShapes) {
  ExpectAnOldDirectoryIsKeptForItsShapesOnly(HybridModelConfig(), "RRKRRK");
}

TEST(SessionNamespaceMigration, ARecurrentHybridDirectoryFromBeforeShapesToo) {
  // The recurrent layers' conv ring and state are checked against the shapes.
  ExpectAnOldDirectoryIsKeptForItsShapesOnly(RecurrentHybridModelConfig(), "RAKRAK");
}

}  // namespace
}  // namespace prefixkv
