// Randomized sessions and cached blocks on one RAM budget: four conversations
// grow in a random interleaving of new turns, decode steps, end-of-turn
// stores, releases and idle time past the TTL, while opaque values are stored
// into the same hot tier and read back. The manager charges its sessions to
// the engine's budget (SessionManagerOptions::memory), so sessions push blocks to
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

#include "tests/session/conversation_driver.h"
#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::Conversation;
using testing::ConversationDriver;

constexpr uint64_t kCapacity = 64 << 10;

class Harness {
 public:
  Harness(const std::string& dir, uint64_t seed)
      : driver_(seed, {.retire_after_tokens = 110,
                       .max_message_tokens = 12,
                       .step_failure_note =
                           "no room although other sessions could be evicted"}),
        rng_(driver_.rng()) {
    stack_.Open(dir, kCapacity);
    SessionManagerOptions config;
    config.ttl_ms = 1000;
    config.max_sessions = 0;  // only the budget and the TTL evict
    manager_ = std::make_unique<SessionManager>(
        driver_.recipe(), stack_.Bind(config, stack_.Register(driver_.recipe())),
        &clock_);
    driver_.Attach(manager_.get());
  }
  ~Harness() {
    driver_.Detach();
    manager_.reset();
    stack_.Close();
  }

  void Step() {
    Conversation& c = driver_.Pick();
    switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
        return driver_.Continue(c);
      case 3:
        return driver_.NewTurn(c);
      case 4:
        return driver_.EndTurn(c);
      case 5:
        return driver_.Release(c);
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
    const SessionStats s = manager_->stats();
    EXPECT_EQ(s.store_failures, 0u) << s.last_store_error;
  }

  void Finish() {
    ASSERT_OK_AND_ASSIGN(EngineAudit audit, stack_.engine->Audit());
    for (const AuditFinding& f : audit.findings)
      ADD_FAILURE() << f.what << ": " << f.detail;
    EXPECT_TRUE(audit.orphans.empty());
    const EngineStats stats = stack_.engine->Stats();
    const SessionStats s = manager_->stats();
    std::printf(
        "[shared budget] replies checked %d, sessions evicted by the budget %llu (ttl "
        "%llu), hot evictions %llu, values %zu, restored tokens %lld (ssd %lld)\n",
        driver_.replies_checked(), static_cast<unsigned long long>(s.evicted_lru),
        static_cast<unsigned long long>(s.evicted_ttl),
        static_cast<unsigned long long>(stats.hot.evictions), values_.size(),
        static_cast<long long>(driver_.tokens_restored()),
        static_cast<long long>(driver_.tokens_restored_ssd()));
    EXPECT_GT(stats.hot.evictions, 0u) << "the budget never filled: a vacuous run";
  }

 private:
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

  ConversationDriver driver_;
  std::mt19937_64& rng_;
  FakeClock clock_;
  CacheStack stack_;
  std::unique_ptr<SessionManager> manager_;
  std::map<std::string, std::pair<char, size_t>> values_;  // key -> fill, size
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
