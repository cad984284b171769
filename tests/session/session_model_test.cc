// Model-based randomized test of SessionManager: random open / append /
// truncate / release / resolve / clock steps run against the manager and against
// a plain in-test oracle of the documented semantics (route epochs, tombstones,
// TTL, LRU session cap, LRU byte budget); every observable result and every
// counter (SessionStats included, recounted from the operations) is compared
// after every operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "prefixkv/session.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

constexpr uint64_t kTtlMs = 50;
constexpr size_t kMaxSessions = 3;
constexpr int64_t kBudgetTokens = 12;

KvCacheRecipe TinyRecipe() {  // 2 layers x 1 head x 2 dims: 32 bytes per token
  return KvCacheRecipe::Make({"dense-llama", DType::kFloat32, 1, 2, 2, 0, 1, {}}).value();
}

KvChunks Chunks(int64_t tokens) {
  KvChunks chunks;
  for (int layer : {0, 1}) {
    Tensor t =
        Tensor::Filled(DType::kFloat32, {1, tokens, 2}, static_cast<uint8_t>(tokens));
    chunks[layer] = {t, t};
  }
  return chunks;
}

// The documented semantics, written as plainly as possible.
class Oracle {
 public:
  struct Live {
    uint64_t epoch;
    int64_t seq_len;
    uint64_t last_ms;
  };
  std::map<std::string, Live> live;
  std::vector<std::string> lru;  // front: most recent
  std::map<std::string, std::pair<uint64_t, CacheMissReason>> tombstones;
  uint64_t now_ms = 0;
  uint64_t bytes_per_token = 32;
  // SessionStats recounted from the operations (no prefix cache: its counters
  // stay 0): every removal by its reason, every CacheMiss a call returns.
  SessionStats stats;

  uint64_t TotalBytes() const {
    uint64_t total = 0;
    for (const auto& [id, s] : live)
      total += static_cast<uint64_t>(s.seq_len) * bytes_per_token;
    return total;
  }
  // `reason` unset: superseded by a newer epoch.
  void Remove(const std::string& id, std::optional<CacheMissReason> reason) {
    if (!reason) {
      stats.superseded++;
    } else if (*reason == CacheMissReason::kReleased) {
      stats.released++;
    } else {
      (*reason == CacheMissReason::kEvictedTtl ? stats.evicted_ttl : stats.evicted_lru)++;
    }
    if (reason) tombstones[id] = {live.at(id).epoch, *reason};
    live.erase(id);
    lru.erase(std::find(lru.begin(), lru.end(), id));
  }
  // A rolled-back open: its open is uncounted (no other counter moves), its
  // epoch misses as never opened and stays current (older epochs are stale).
  void Discard(const std::string& id) {
    stats.opened--;
    tombstones[id] = {live.at(id).epoch, CacheMissReason::kUnknownSession};
    live.erase(id);
    lru.erase(std::find(lru.begin(), lru.end(), id));
  }
  void Touch(const std::string& id) {
    lru.erase(std::find(lru.begin(), lru.end(), id));
    lru.insert(lru.begin(), id);
    live.at(id).last_ms = now_ms;
  }
  void Sweep() {
    while (!lru.empty() && now_ms - live.at(lru.back()).last_ms > kTtlMs) {
      Remove(lru.back(), CacheMissReason::kEvictedTtl);
    }
  }
  bool Stale(const std::string& id, uint64_t epoch) const {
    if (auto it = live.find(id); it != live.end()) return epoch < it->second.epoch;
    if (auto t = tombstones.find(id); t != tombstones.end())
      return epoch < t->second.first;
    return false;
  }
  // The live session's id, or the miss reason.
  std::optional<CacheMissReason> Find(const std::string& id, uint64_t epoch) const {
    if (auto it = live.find(id); it != live.end() && it->second.epoch == epoch) return {};
    if (auto t = tombstones.find(id); t != tombstones.end() && t->second.first == epoch) {
      return t->second.second;
    }
    return CacheMissReason::kUnknownSession;
  }
  template <typename Fits>
  void EvictLruUntil(const std::string& keep, Fits fits) {
    for (size_t i = lru.size(); i-- > 0 && !fits();) {
      if (lru[i] != keep) Remove(lru[i], CacheMissReason::kEvictedLru);
    }
  }
  void Recharge(const std::string& id, int64_t new_len) {
    uint64_t budget = kBudgetTokens * bytes_per_token;
    uint64_t old = static_cast<uint64_t>(live.at(id).seq_len) * bytes_per_token;
    uint64_t now = static_cast<uint64_t>(new_len) * bytes_per_token;
    EvictLruUntil(id, [&] { return TotalBytes() - old + now <= budget; });
    live.at(id).seq_len = new_len;
  }
};

class ManagerModelTest : public ::testing::Test {
 protected:
  ManagerModelTest()
      : manager_(TinyRecipe(), Config(), &clock_),
        rng_(testing::TestSeed("HotKvStateModel")) {}

  static SessionManagerOptions Config() {
    SessionManagerOptions c;
    c.ttl_ms = kTtlMs;
    c.max_sessions = kMaxSessions;
    c.budget_bytes = kBudgetTokens * 32;
    return c;
  }

  // Compares a manager result that is a session or a miss with the oracle.
  void ExpectSame(const StatusOr<SessionOrMiss>& got, std::optional<CacheMissReason> want,
                  const std::string& id) {
    ASSERT_OK(got);
    if (want) {
      ASSERT_TRUE(std::holds_alternative<CacheMiss>(*got)) << id << " should miss";
      EXPECT_EQ(std::get<CacheMiss>(*got).reason, *want) << id;
    } else {
      ASSERT_TRUE(std::holds_alternative<std::shared_ptr<Session>>(*got)) << id;
      EXPECT_EQ(std::get<std::shared_ptr<Session>>(*got)->seq_len(),
                oracle_.live.at(id).seq_len);
    }
  }

  void Step();
  void CheckCounters() {
    ASSERT_NO_FATAL_FAILURE(ExpectSameStats(manager_.stats(), oracle_.stats));
    ASSERT_EQ(manager_.total_bytes(), oracle_.TotalBytes());
    ASSERT_EQ(manager_.session_count(), oracle_.live.size());
    std::vector<std::pair<std::string, uint64_t>> keys;
    for (const auto& [id, s] : oracle_.live) keys.emplace_back(id, s.epoch);
    ASSERT_EQ(manager_.session_keys(), keys);
  }

  static void ExpectSameStats(const SessionStats& got, const SessionStats& want) {
    ASSERT_EQ(got.opened, want.opened);
    ASSERT_EQ(got.released, want.released);
    ASSERT_EQ(got.superseded, want.superseded);
    ASSERT_EQ(got.evicted_ttl, want.evicted_ttl);
    ASSERT_EQ(got.evicted_lru, want.evicted_lru);
    ASSERT_EQ(got.misses, want.misses);
    ASSERT_EQ(got.prefix_restores, want.prefix_restores);
    ASSERT_EQ(got.prefix_restored_tokens, want.prefix_restored_tokens);
    ASSERT_EQ(got.prefix_unrestorable, want.prefix_unrestorable);
    ASSERT_EQ(got.sessions_stored, want.sessions_stored);
    ASSERT_EQ(got.blocks_stored, want.blocks_stored);
    ASSERT_EQ(got.stores_skipped_unknown_tokens, want.stores_skipped_unknown_tokens);
    ASSERT_EQ(got.store_failures, want.store_failures);
    ASSERT_EQ(got.last_store_error, want.last_store_error);
  }

  FakeClock clock_;
  SessionManager manager_;
  Oracle oracle_;
  std::mt19937_64 rng_;
  uint64_t steps_ = 0;
};

void ManagerModelTest::Step() {
  std::string id = "s" + std::to_string(rng_() % 5);
  // Routes are re-planned over time: the epochs in play slowly move up.
  uint64_t epoch = ++steps_ / 100 + rng_() % 3;
  uint64_t op = rng_() % 9;
  if (op == 5) {  // time passes; expired sessions are reclaimed by the next call
    uint64_t ms = rng_() % 30;
    clock_.AdvanceMillis(ms);
    oracle_.now_ms += ms;
    return;
  }
  if (op == 8) {  // discard: rolls back an open; the one call that does not sweep
    manager_.Discard(id, epoch);
    auto it = oracle_.live.find(id);
    if (it != oracle_.live.end() && it->second.epoch == epoch) oracle_.Discard(id);
    return;
  }
  oracle_.Sweep();  // every other operation sweeps expired sessions first
  bool stale = oracle_.Stale(id, epoch);
  std::optional<CacheMissReason> found = oracle_.Find(id, epoch);
  // Every call that looks the session up (all but open and release) returns
  // its miss as a CacheMiss (Get: as its error).
  if (!stale && found && op != 0 && op != 3) oracle_.stats.misses++;
  switch (op) {
    case 0: {  // open
      auto got = manager_.Open(id, epoch);
      ASSERT_EQ(IsStaleRouteEpoch(got.status()), stale) << got.status().ToString();
      if (stale) return;
      ASSERT_OK(got);
      if (!found) return oracle_.Touch(id);
      oracle_.stats.opened++;
      if (oracle_.live.count(id)) oracle_.Remove(id, std::nullopt);  // superseded
      oracle_.tombstones.erase(id);
      oracle_.EvictLruUntil(id, [&] { return oracle_.live.size() < kMaxSessions; });
      oracle_.live[id] = {epoch, 0, oracle_.now_ms};
      oracle_.lru.insert(oracle_.lru.begin(), id);
      return;
    }
    case 1:
    case 6: {  // append; op 6 names the length the caller believes the session has
      int64_t tokens = 1 + static_cast<int64_t>(rng_() % 5);
      std::optional<int64_t> expected;
      if (op == 6) {
        int64_t held = found ? 0 : oracle_.live.at(id).seq_len;
        expected = held + static_cast<int64_t>(rng_() % 2);  // right or one too many
      }
      auto got = manager_.Append(id, epoch, Chunks(tokens), expected);
      ASSERT_EQ(IsStaleRouteEpoch(got.status()), stale) << got.status().ToString();
      if (stale) return;
      if (found) return ExpectSame(got, found, id);
      oracle_.Touch(id);
      if (expected && *expected != oracle_.live.at(id).seq_len) {
        oracle_.stats.misses++;
        return ExpectSame(got, CacheMissReason::kSeqLenMismatch, id);
      }
      int64_t new_len = oracle_.live.at(id).seq_len + tokens;
      if (new_len > kBudgetTokens) {
        ASSERT_TRUE(got.status().IsNoSpace()) << got.status().ToString();
        return;
      }
      oracle_.Recharge(id, new_len);
      return ExpectSame(got, std::nullopt, id);
    }
    case 2: {  // truncate
      int64_t len = static_cast<int64_t>(rng_() % 4);
      auto got = manager_.Truncate(id, epoch, len);
      ASSERT_EQ(IsStaleRouteEpoch(got.status()), stale) << got.status().ToString();
      if (stale) return;
      if (found) return ExpectSame(got, found, id);
      oracle_.Touch(id);
      if (len > oracle_.live.at(id).seq_len) {
        ASSERT_TRUE(got.status().IsInvalidArgument());
        return;
      }
      oracle_.Recharge(id, len);
      return ExpectSame(got, std::nullopt, id);
    }
    case 3: {  // release
      auto got = manager_.Release(id, epoch);
      ASSERT_EQ(IsStaleRouteEpoch(got.status()), stale) << got.status().ToString();
      if (stale) return;
      ASSERT_EQ(*got, !found);
      if (!found) oracle_.Remove(id, CacheMissReason::kReleased);
      return;
    }
    case 7: {  // get: a miss is its error
      auto got = manager_.Get(id, epoch);
      ASSERT_EQ(IsStaleRouteEpoch(got.status()), stale) << got.status().ToString();
      if (stale) return;
      ASSERT_EQ(IsKvCacheMiss(got.status()), found.has_value())
          << got.status().ToString();
      if (!found) oracle_.Touch(id);
      return;
    }
    default: {  // resolve
      auto got = manager_.Resolve(id, epoch);
      ASSERT_EQ(IsStaleRouteEpoch(got.status()), stale) << got.status().ToString();
      if (stale) return;
      if (!found) oracle_.Touch(id);
      return ExpectSame(got, found, id);
    }
  }
}

TEST_F(ManagerModelTest, RandomOperationsMatchTheDocumentedSemantics) {
  uint64_t ops = testing::Iterations(3000, 300000);
  for (uint64_t i = 0; i < ops; ++i) {
    ASSERT_NO_FATAL_FAILURE(Step()) << "operation " << i;
    ASSERT_NO_FATAL_FAILURE(CheckCounters()) << "after operation " << i;
  }
  SessionStats stats = manager_.stats();
  // The run must have exercised every eviction path, or it proves little.
  EXPECT_GT(stats.evicted_ttl, 0u);
  EXPECT_GT(stats.evicted_lru, 0u);
  EXPECT_GT(stats.released, 0u);
  EXPECT_GT(stats.superseded, 0u);
  EXPECT_GT(stats.misses, 0u);
}

}  // namespace
}  // namespace prefixkv
