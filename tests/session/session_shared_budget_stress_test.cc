// Randomized sessions and cached blocks on one RAM budget: four conversations
// grow in a random interleaving of new turns, decode steps, end-of-turn
// stores, releases and idle time past the TTL, while opaque values are stored
// into the same hot tier and read back. The manager charges its sessions to
// the engine's budget (HotKvStateConfig::memory), so sessions push blocks to
// SSD and, when blocks cannot make room, evict each other.
//
// Checked after EVERY operation: the engine's hot bytes (blocks and sessions)
// never exceed the capacity and equal the sum of its owners; the sessions
// owner holds exactly the manager's total bytes; the budget's audit is clean;
// no step fails for lack of room (evicting sessions always can make it). Every
// finished reply equals the stateless greedy decode of its prompt, and every
// value reads back intact. Prints its seed; PREFIXKV_SEED replays,
// PREFIXKV_LONG=1 runs more.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::HybridModelConfig;

constexpr uint64_t kCapacity = 64 << 10;

struct Conversation {
  std::string id;
  std::vector<int32_t> text;  // the conversation, with the open turn's tokens
  std::vector<int32_t> prompt;
  std::vector<int32_t> reply;
  uint64_t epoch = 0;
  bool live = false;
  int reply_steps = 0;
};

class Harness {
 public:
  Harness(const std::string& dir, uint64_t seed)
      : rng_(seed),
        model_(testing::SeedModel(HybridModelConfig())),
        shard_(testing::FullShard(model_)),
        recipe_(testing::RecipeOf(*shard_)) {
    stack_.Open(dir, kCapacity);
    HotKvStateConfig config;
    config.ttl_ms = 1000;
    config.max_sessions = 0;  // only the budget and the TTL evict
    manager_ = std::make_unique<HotKvStateManager>(
        recipe_, stack_.Bind(config, stack_.Register(recipe_)), &clock_);
    adapter_ = std::make_unique<KvBoundaryAdapter>(shard_.get(), manager_.get());
    for (int i = 0; i < 4; ++i) conversations_.push_back({"c" + std::to_string(i)});
  }
  ~Harness() {
    adapter_.reset();
    manager_.reset();
    stack_.Close();
  }

  void Step() {
    Conversation& c = conversations_[rng_() % conversations_.size()];
    switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
        return static_cast<int>(c.reply.size()) <= c.reply_steps ? Decode(c)
                                                                 : StartTurn(c, false);
      case 3:
        return StartTurn(c, false);
      case 4:
        if (c.live) {
          auto stored = adapter_->EndTurn(c.id, c.epoch);
          ASSERT_TRUE(stored.ok() || IsKvCacheMiss(stored.status()))
              << stored.status().ToString();
        }
        return;
      case 5:
        if (c.live) {
          ASSERT_OK(manager_->Release(c.id, c.epoch));
        }
        c.live = false;
        return;
      case 6:
        clock_.AdvanceMillis(rng_() % 10 == 0 ? 1500 : 100);
        return;
      case 7:
      case 8:
        return PutValue();
      default:
        return CheckValue();
    }
  }

  void CheckInvariants() {
    const EngineStats stats = stack_.engine->Stats();
    EXPECT_LE(stats.hot.bytes, kCapacity);
    uint64_t sum = 0, sessions = UINT64_MAX;
    for (const EngineOwnerStats& o : stats.owners) {
      sum += o.hot.bytes;
      if (o.name == "sessions") sessions = o.hot.bytes;
    }
    EXPECT_EQ(stats.hot.bytes, sum);
    EXPECT_EQ(sessions, manager_->total_bytes());
    EXPECT_EQ(stats.hot.external_bytes, manager_->total_bytes());
    std::vector<AuditFinding> findings;
    ASSERT_OK(stack_.budget->Audit(&findings));
    for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
    const HotKvStats s = manager_->stats();
    EXPECT_EQ(s.store_failures, 0u) << s.last_store_error;
  }

  void Finish() {
    ASSERT_OK_AND_ASSIGN(EngineAudit audit, stack_.engine->Audit());
    for (const AuditFinding& f : audit.findings)
      ADD_FAILURE() << f.what << ": " << f.detail;
    EXPECT_TRUE(audit.orphans.empty());
    const EngineStats stats = stack_.engine->Stats();
    const HotKvStats s = manager_->stats();
    std::printf(
        "[shared budget] replies checked %d, sessions evicted by the budget %llu (ttl "
        "%llu), hot evictions %llu, values %zu, restored tokens %lld (ssd %lld)\n",
        replies_checked_, static_cast<unsigned long long>(s.evicted_lru),
        static_cast<unsigned long long>(s.evicted_ttl),
        static_cast<unsigned long long>(stats.hot.evictions), values_.size(),
        static_cast<long long>(restored_), static_cast<long long>(restored_ssd_));
    EXPECT_GT(stats.hot.evictions, 0u) << "the budget never filled: a vacuous run";
  }

 private:
  void CheckReply(const Conversation& c) {
    if (c.reply.empty()) return;
    auto expected = model_->StatelessGreedy(c.prompt, static_cast<int>(c.reply.size()));
    ASSERT_OK(expected);
    EXPECT_EQ(c.reply, *expected) << c.id << " prompt of " << c.prompt.size();
    replies_checked_++;
  }

  // A new user message or (retry) the open turn again after its session was
  // evicted: a new epoch whose prefill restores what the cache holds.
  void StartTurn(Conversation& c, bool retry) {
    if (c.live) {
      ASSERT_OK(manager_->Release(c.id, c.epoch));
    }
    c.live = false;
    if (retry) {
      c.text = c.prompt;
    } else {
      CheckReply(c);
      if (c.text.size() > 110) {  // retire a long conversation
        c.text.clear();
        c.id += "+";
        c.epoch = 0;
      }
      const int n = 1 + static_cast<int>(rng_() % 12);
      for (int i = 0; i < n; ++i) c.text.push_back(static_cast<int32_t>(rng_() % 48));
      c.prompt = c.text;
      c.reply_steps = 1 + static_cast<int>(rng_() % 5);
    }
    c.reply.clear();
    c.epoch++;
    StepStats stats;
    auto out = adapter_->Prefill(c.id, c.epoch, testing::Tokens(c.prompt), &stats);
    ASSERT_OK(out) << "no room although other sessions could be evicted";
    const auto* tail = std::get_if<TailOutput>(&*out);
    ASSERT_NE(tail, nullptr) << "a fresh prefill missed";
    restored_ += stats.restore.restored_tokens;
    restored_ssd_ += stats.restore.restored_ssd_tokens;
    c.live = true;
    c.reply.push_back(tail->token_id);
    c.text.push_back(tail->token_id);
  }

  void Decode(Conversation& c) {
    if (c.prompt.empty() || static_cast<int>(c.reply.size()) > c.reply_steps) return;
    if (!c.live) return StartTurn(c, /*retry=*/true);
    auto out = adapter_->Decode(c.id, c.epoch, testing::Tokens({c.text.back()}));
    ASSERT_OK(out) << "no room although other sessions could be evicted";
    if (std::holds_alternative<CacheMiss>(*out)) {
      c.live = false;  // evicted (budget or TTL): redo the turn
      return StartTurn(c, /*retry=*/true);
    }
    c.reply.push_back(std::get<TailOutput>(*out).token_id);
    c.text.push_back(c.reply.back());
  }

  void PutValue() {
    const std::string key = "v" + std::to_string(rng_() % 24);
    const char fill = static_cast<char>('a' + rng_() % 26);
    const size_t size = 500 + rng_() % 6000;
    ASSERT_OK(stack_.engine->PutValue(key, SharedBytes::Copy(std::string(size, fill))));
    values_[key] = {fill, size};
  }

  void CheckValue() {
    if (values_.empty()) return;
    auto it = values_.begin();
    std::advance(it, static_cast<long>(rng_() % values_.size()));
    ASSERT_OK_AND_ASSIGN(SharedBytes got, stack_.engine->GetValue(it->first));
    EXPECT_EQ(got.size(), it->second.second) << it->first;
    EXPECT_EQ(got.data()[0], static_cast<uint8_t>(it->second.first)) << it->first;
  }

  std::mt19937_64 rng_;
  FakeClock clock_;
  std::shared_ptr<const ReferenceModel> model_;
  std::unique_ptr<ReferenceShard> shard_;
  KvCacheRecipe recipe_;
  CacheStack stack_;
  std::unique_ptr<HotKvStateManager> manager_;
  std::unique_ptr<KvBoundaryAdapter> adapter_;
  std::vector<Conversation> conversations_;
  std::map<std::string, std::pair<char, size_t>> values_;  // key -> fill, size
  int replies_checked_ = 0;
  int64_t restored_ = 0;
  int64_t restored_ssd_ = 0;
};

TEST(SessionSharedBudgetStress, SessionsAndBlocksNeverExceedTheCapacityTogether) {
  const uint64_t seed = testing::TestSeed("SessionSharedBudgetStress");
  const uint64_t ops = testing::Iterations(600, 30000);
  testing::TempDir dir;
  Harness harness(dir.str(), seed);
  for (uint64_t op = 0; op < ops; ++op) {
    harness.Step();
    harness.CheckInvariants();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failure at operation " << op;
      return;
    }
  }
  harness.Finish();
}

}  // namespace
}  // namespace prefixkv
