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

#include "tests/session/conversation_driver.h"
#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::Conversation;
using testing::ConversationDriver;

class Harness {
 public:
  Harness(const std::string& dir, uint64_t seed)
      : dir_(dir),
        driver_(seed, {.retire_after_tokens = 160, .max_message_tokens = 9}),
        rng_(driver_.rng()) {
    Start();
  }
  ~Harness() {
    driver_.Detach();
    manager_.reset();
    stack_.Close();
  }

  // Sessions on the engine's prefix cache, charged to no budget but their own.
  void Start() {
    // About 40 blocks of this model fit: conversations spill to SSD.
    stack_.Open(dir_, 40 * HotEntryCharge(4 * 6 * 2 * 2 * 8 * 4));
    HotKvStateConfig config;
    config.ttl_ms = 1000;
    config.max_sessions = 3;
    config.prefix_cache = {stack_.engine.get(), stack_.Register(driver_.recipe())};
    manager_ = std::make_unique<HotKvStateManager>(driver_.recipe(), config, &clock_);
    driver_.Attach(manager_.get());
  }

  void Restart() {
    if (rng_() % 2 == 0) {
      ASSERT_OK(manager_->StoreLiveSessions());
    }
    driver_.Detach();
    manager_.reset();
    stack_.Close();
    Start();
  }

  void Step() {
    Conversation& c = driver_.Pick();
    switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
      case 3:
        return driver_.Continue(c);
      case 4:
        return driver_.Decode(c);
      case 5:
        return driver_.EndTurn(c);
      case 6:
        return driver_.Release(c);
      case 7:
        clock_.AdvanceMillis(rng_() % 3 == 0 ? 1500 : 200);
        return;
      case 8:
        return driver_.NewTurn(c);
      default:
        if (rng_() % 8 == 0) return Restart();
        return driver_.Decode(c);
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

  const ConversationDriver& driver() const { return driver_; }

 private:
  const std::string dir_;
  ConversationDriver driver_;
  std::mt19937_64& rng_;
  FakeClock clock_;
  CacheStack stack_;
  std::unique_ptr<HotKvStateManager> manager_;
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
  const ConversationDriver& d = h.driver();
  std::printf("replies checked %d, tokens restored %lld (from SSD %lld)\n",
              d.replies_checked(), static_cast<long long>(d.tokens_restored()),
              static_cast<long long>(d.tokens_restored_ssd()));
  EXPECT_GT(d.replies_checked(), 20);
  EXPECT_GT(d.tokens_restored(), 0);
  EXPECT_GT(d.tokens_restored_ssd(), 0);
}

}  // namespace
}  // namespace prefixkv
