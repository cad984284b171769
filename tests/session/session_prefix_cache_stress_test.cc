// Randomized sessions on a PrefixCache: several conversations advance in a
// random interleaving of turns, decode steps, end-of-turn stores, releases,
// idle time past the TTL, session-cap evictions and whole-process restarts
// (tiers flushed, closed and reopened, a new manager), over a hot tier small
// enough to spill to SSD. After every completed reply the reference check is
// the model's stateless greedy decode of the same prompt: whatever was
// restored, from whichever tier, the cached decode must equal it. Also checked
// after every operation: what a prefill restored plus what it computed is the
// prompt; nothing is ever restored beyond the prompt's last token; the
// manager's byte total equals the sum of its live sessions; the tier audits
// stay clean. Prints its seed; PREFIXKV_SEED replays, PREFIXKV_LONG=1 runs more.
#include <gtest/gtest.h>

#include <random>

#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::HybridModelConfig;

struct Conversation {
  std::string id;
  // The conversation so far, including the last token the model produced
  // (which has not run yet while a turn is open).
  std::vector<int32_t> text;
  uint64_t epoch = 0;
  bool live = false;            // a session is open at `epoch`
  int reply_steps = 0;          // decode steps the open turn makes
  std::vector<int32_t> prompt;  // of the open turn
  std::vector<int32_t> reply;   // produced so far in the open turn
};

class Harness {
 public:
  Harness(const std::string& dir, uint64_t seed)
      : dir_(dir),
        rng_(seed),
        model_(testing::SeedModel(HybridModelConfig())),
        shard_(testing::FullShard(model_)),
        recipe_(testing::RecipeOf(*shard_)) {
    for (int i = 0; i < 4; ++i) conversations_.push_back({"c" + std::to_string(i)});
    Start();
  }
  ~Harness() { stack_.Close(); }

  void Start() {
    // About 40 blocks of this model fit: conversations spill to SSD.
    stack_.Open(dir_, 40 * HotEntryCharge(4 * 6 * 2 * 2 * 8 * 4));
    HotKvStateConfig config;
    config.ttl_ms = 1000;
    config.max_sessions = 3;
    config.prefix_cache = {stack_.engine.get(), stack_.Register(recipe_)};
    manager_ = std::make_unique<HotKvStateManager>(recipe_, config, &clock_);
    adapter_ = std::make_unique<KvBoundaryAdapter>(shard_.get(), manager_.get());
  }

  void Restart() {
    if (rng_() % 2 == 0) {
      ASSERT_OK(manager_->StoreLiveSessions());
    }
    adapter_.reset();
    manager_.reset();
    stack_.Close();
    for (Conversation& c : conversations_) c.live = false;
    Start();
  }

  void Step() {
    Conversation& c = conversations_[rng_() % conversations_.size()];
    switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
      case 3:
        return static_cast<int>(c.reply.size()) <= c.reply_steps ? Decode(c) : NewTurn(c);
      case 4:
        return Decode(c);
      case 5:
        if (c.live) {
          auto stored = adapter_->EndTurn(c.id, c.epoch);
          // A session evicted meanwhile was stored by its eviction.
          ASSERT_TRUE(stored.ok() || IsKvCacheMiss(stored.status()))
              << stored.status().ToString();
        }
        return;
      case 6:
        if (c.live) {
          ASSERT_OK(manager_->Release(c.id, c.epoch));
        }
        c.live = false;
        return;
      case 7:
        clock_.AdvanceMillis(rng_() % 3 == 0 ? 1500 : 200);
        return;
      case 8:
        return NewTurn(c);
      default:
        if (rng_() % 8 == 0) return Restart();
        return Decode(c);
    }
  }

  void CheckInvariants() {
    uint64_t sum = 0;
    for (const auto& [id, epoch] : manager_->session_keys()) {
      auto session = manager_->Get(id, epoch);
      if (session.ok()) sum += (*session)->payload_bytes();
    }
    EXPECT_EQ(manager_->total_bytes(), sum);
    HotKvStats stats = manager_->stats();
    EXPECT_EQ(stats.store_failures, 0u) << stats.last_store_error;
  }

  void Audit() {
    ASSERT_OK(stack_.engine->Flush());
    std::vector<AuditFinding> findings;
    ASSERT_OK(stack_.budget->Audit(&findings));
    ASSERT_OK(stack_.ssd->Audit(&findings));
    for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
  }

  int replies_checked() const { return replies_checked_; }
  int64_t tokens_restored() const { return tokens_restored_; }
  int64_t tokens_restored_ssd() const { return tokens_restored_ssd_; }

 private:
  // Checks the open turn's reply so far against the stateless decode.
  void CheckReply(const Conversation& c) {
    if (c.reply.empty()) return;
    auto expected = model_->StatelessGreedy(c.prompt, static_cast<int>(c.reply.size()));
    ASSERT_OK(expected);
    EXPECT_EQ(c.reply, *expected) << c.id << " prompt of " << c.prompt.size();
    replies_checked_++;
  }

  // A new user message, or (retry) the open turn again after its session was
  // lost: a fresh session at a new epoch whose prefill restores what is cached.
  void StartTurn(Conversation& c, bool retry) {
    if (c.live) {
      ASSERT_OK(manager_->Release(c.id, c.epoch));
    }
    c.live = false;
    if (retry) {
      c.text = c.prompt;
    } else {
      CheckReply(c);
      // Bounded conversations keep every stateless check cheap: a long one
      // is retired and the slot starts a new conversation under a new id.
      if (c.text.size() > 160) {
        c.text.clear();
        c.id += "+";
        c.epoch = 0;
      }
      const int n = 1 + static_cast<int>(rng_() % 9);
      for (int i = 0; i < n; ++i) c.text.push_back(static_cast<int32_t>(rng_() % 48));
      c.prompt = c.text;
      c.reply_steps = 1 + static_cast<int>(rng_() % 5);
    }
    c.reply.clear();
    c.epoch++;
    StepInput in;
    in.token_ids = c.prompt;
    StepStats stats;
    auto out = adapter_->Prefill(c.id, c.epoch, in, &stats);
    ASSERT_OK(out);
    const auto* tail = std::get_if<TailOutput>(&*out);
    ASSERT_NE(tail, nullptr) << "a fresh prefill missed";
    const int64_t p = static_cast<int64_t>(c.prompt.size());
    EXPECT_LT(stats.restore.restored_tokens, p);
    EXPECT_EQ(stats.restore.restored_tokens + stats.computed_tokens, p);
    EXPECT_EQ(stats.restore.restored_hot_tokens + stats.restore.restored_ssd_tokens,
              stats.restore.restored_tokens);
    tokens_restored_ += stats.restore.restored_tokens;
    tokens_restored_ssd_ += stats.restore.restored_ssd_tokens;
    c.live = true;
    c.reply.push_back(tail->token_id);
    c.text.push_back(tail->token_id);
  }

  void NewTurn(Conversation& c) { StartTurn(c, /*retry=*/false); }

  void Decode(Conversation& c) {
    if (c.prompt.empty() || static_cast<int>(c.reply.size()) > c.reply_steps) return;
    if (!c.live) return StartTurn(c, /*retry=*/true);
    StepInput in;
    in.token_ids = {c.text.back()};
    auto out = adapter_->Decode(c.id, c.epoch, in);
    ASSERT_OK(out);
    if (std::holds_alternative<CacheMiss>(*out)) {
      c.live = false;  // evicted (TTL or the session cap): redo the turn
      return StartTurn(c, /*retry=*/true);
    }
    const int32_t next = std::get<TailOutput>(*out).token_id;
    c.reply.push_back(next);
    c.text.push_back(next);
  }

  const std::string dir_;
  std::mt19937_64 rng_;
  FakeClock clock_;
  std::shared_ptr<const ReferenceModel> model_;
  std::unique_ptr<ReferenceShard> shard_;
  KvCacheRecipe recipe_;
  CacheStack stack_;
  std::unique_ptr<HotKvStateManager> manager_;
  std::unique_ptr<KvBoundaryAdapter> adapter_;
  std::vector<Conversation> conversations_;
  int replies_checked_ = 0;
  int64_t tokens_restored_ = 0;
  int64_t tokens_restored_ssd_ = 0;
};

TEST(SessionPrefixCacheStress, RandomTurnsEvictionsAndRestartsKeepDecodeExact) {
  const uint64_t seed = testing::TestSeed("SessionPrefixCacheStress");
  testing::TempDir dir;
  Harness h(dir.str() + "/tiers", seed);
  const uint64_t ops = testing::Iterations(1000, 50000);
  for (uint64_t i = 0; i < ops && !::testing::Test::HasFatalFailure(); ++i) {
    h.Step();
    h.CheckInvariants();
    if (i % 100 == 99) h.Audit();
  }
  h.Audit();
  std::printf("replies checked %d, tokens restored %lld (from SSD %lld)\n",
              h.replies_checked(), static_cast<long long>(h.tokens_restored()),
              static_cast<long long>(h.tokens_restored_ssd()));
  EXPECT_GT(h.replies_checked(), 20);
  EXPECT_GT(h.tokens_restored(), 0);
  EXPECT_GT(h.tokens_restored_ssd(), 0);
}

}  // namespace
}  // namespace prefixkv
