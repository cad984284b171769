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

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
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

// Runs operations 0..ops-1 (each with its checks) until the first failure,
// which it names; false after a failure.
bool RunUntilFailure(uint64_t ops, const std::function<void(uint64_t op)>& run) {
  for (uint64_t op = 0; op < ops; ++op) {
    run(op);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failure at operation " << op;
      return false;
    }
  }
  return true;
}

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
  const bool passed = RunUntilFailure(ops, [&](uint64_t) {
    harness.Step();
    harness.CheckInvariants();
  });
  if (passed) harness.Finish();
}


// --- Several models on one budget: forks, regenerations and restarts ---

// Conversations of three models with different layer kinds (full attention;
// 6-token windows on 5-token blocks; window + recurrent + full attention on
// 4-token blocks) on one engine whose small hot budget they share (the
// full-attention model's live sessions charged to it too), so blocks of every
// model spill to SSD mid-conversation. Conversations start from a shared
// system prompt or not, take turns with sampled (not only greedy) replies,
// fork (a second continuation of the same turn, the prompt of its last reply,
// the end of an earlier stored turn, any cut), regenerate their last reply (a
// truncate where the layers allow it, else a new epoch that supersedes the
// old state), store, release, are evicted by the session cap or the budget,
// and the engine closes and reopens between turns. After every prefill and
// decode step the logits must equal the reference model's stateless logits of
// the whole conversation bit for bit: a window or recurrent state of another
// branch or position would differ. Every restore is also checked against what
// was stored: on a model with windows or recurrent layers it must end exactly
// at the longest tip the test's own model of supersede-on-extend says still
// holds real state (a stripped tip's stale state restored, or a live tip
// passed over, fails, though either would decode exactly); on the
// full-attention model it must reach the longest stored prefix of the prompt
// (cut to whole blocks where the prompt leaves that prefix mid-block).
// PREFIXKV_SEED replays; PREFIXKV_LONG=1 runs 20,000 operations.
class ModelsHarness {
 public:
  struct Slot {
    std::string name;
    std::shared_ptr<const ReferenceModel> model;
    std::unique_ptr<ReferenceShard> shard;
    std::optional<KvCacheRecipe> recipe;  // has no default
    uint32_t block_tokens = 4;
    bool charged = false;  // live sessions on the engine's budget
    std::vector<int32_t> system_prompt;
    std::unique_ptr<SessionManager> manager;
    std::unique_ptr<KvBoundaryAdapter> adapter;
    std::vector<std::vector<int32_t>> stored;  // texts stored (full attention only)
    bool tip_only = false;
    // The supersede-on-extend lineage as docs/prefix_cache.md states it
    // (tip-only models): each tip with real state, by its text, and the tip
    // it extended. A restore reaches exactly the longest of them the prompt
    // (but its last token) starts with.
    std::map<std::vector<int32_t>, std::vector<int32_t>> tips;
  };
  struct Conv {
    size_t slot = 0;
    uint64_t epoch = 0;
    std::vector<int32_t> text;  // the whole conversation; the last token never ran
    size_t reply_start = 0;     // where the last reply begins (its prompt's end)
    bool live = false;
    size_t stored_len = 0;  // the session's length at its last store or restore
    std::vector<size_t> stored_ends;  // the lengths it was stored at (tips)
  };

  ModelsHarness(const std::string& dir, uint64_t seed) : dir_(dir), rng_(seed) {
    ModelConfig full;
    full.n_kv_heads = 2;
    AddSlot("full", full, 4, true);
    AddSlot("windows", testing::HybridModelConfig(), 5, false);
    AddSlot("wrgwrg", testing::RecurrentHybridModelConfig(), 4, false);
    Start();
  }
  ~ModelsHarness() { Stop(); }

  void Op() {
    if (convs_.empty() || rng_() % 12 == 0) return NewConversation();
    Conv& c = Pick();
    switch (rng_() % 12) {
      case 0:
      case 1:
      case 2:
        return Turn(c);
      case 3:
        return Decode(c, 1 + rng_() % 3);
      case 4:
      case 5:
        return Fork(c);
      case 6:
        return Regenerate(c);
      case 7:
      case 8:
        return EndTurn(c, rng_() % 2 == 0);
      case 9:
        return Release(c);
      case 10:
        if (rng_() % 3 == 0) return Restart();
        return Turn(c);
      default:
        if (convs_.size() > 10) return Retire();
        return NewConversation();
    }
  }

  // Sessions the managers evicted behind the test's back were stored.
  void CheckAfterOp() {
    for (auto& [id, c] : convs_) {
      if (!c.live) continue;
      const auto keys = slots_[c.slot].manager->session_keys();
      if (std::find(keys.begin(), keys.end(), std::make_pair(id, c.epoch)) == keys.end())
        Lost(c);
    }
    for (const Slot& s : slots_) {
      const SessionStats stats = s.manager->stats();
      EXPECT_EQ(stats.store_failures, 0u) << s.name << ": " << stats.last_store_error;
    }
    const EngineStats stats = stack_.engine->Stats();
    EXPECT_LE(stats.hot.bytes, kModelsCapacity);
  }

  CacheStack& stack() { return stack_; }

  void Report() const {
    std::printf(
        "[models] steps checked %d, opens %d restoring %lld tokens (%lld from SSD), "
        "forks %d (%d right after their store), regenerations %d (%d by truncate), "
        "restarts %d, sessions lost to eviction %d, hot evictions %llu\n",
        steps_checked_, opens_, static_cast<long long>(restored_),
        static_cast<long long>(restored_ssd_), forks_, fresh_forks_, regenerations_,
        truncations_, restarts_, lost_, static_cast<unsigned long long>(hot_evictions()));
  }
  int steps_checked() const { return steps_checked_; }
  int64_t restored_ssd() const { return restored_ssd_; }
  // Blocks the budget evicted (to SSD), over every engine opened so far.
  uint64_t hot_evictions() const {
    return hot_evictions_ + (stack_.engine ? stack_.engine->Stats().hot.evictions : 0);
  }

 private:
  static constexpr uint64_t kModelsCapacity = 160 << 10;
  static constexpr size_t kMaxText = 90;

  void AddSlot(const std::string& name, ModelConfig config, uint32_t block_tokens,
               bool charged) {
    Slot s;
    s.name = name;
    s.model = testing::SeedModel(config);
    s.shard = testing::FullShard(s.model);
    s.recipe = testing::RecipeOf(*s.shard);
    s.block_tokens = block_tokens;
    s.charged = charged;
    s.tip_only = config.sliding_window_tokens > 0 || !config.layer_kinds.empty();
    for (int i = 0; i < 11; ++i)
      s.system_prompt.push_back(static_cast<int32_t>(rng_() % config.vocab_size));
    slots_.push_back(std::move(s));
  }

  void Start() {
    stack_.Open(dir_, kModelsCapacity);
    for (Slot& s : slots_) {
      auto ns = stack_.engine->RegisterModel(
          SessionNamespaceSpec(*s.recipe, "models-" + s.name, s.block_tokens),
          {.store_partial_tail = true});
      ASSERT_OK(ns);
      SessionManagerOptions config;
      config.max_sessions = 3;
      config.prefix_cache = {stack_.engine.get(), *ns};
      if (s.charged) {
        auto charge = stack_.engine->OpenMemoryCharge("sessions-" + s.name);
        ASSERT_OK(charge);
        config.memory = *charge;
      }
      s.manager = std::make_unique<SessionManager>(*s.recipe, config);
      s.adapter = std::make_unique<KvBoundaryAdapter>(s.shard.get(), s.manager.get());
    }
    for (auto& [id, c] : convs_) c.live = false;
  }

  void Stop() {
    if (stack_.engine) hot_evictions_ += stack_.engine->Stats().hot.evictions;
    for (Slot& s : slots_) {
      s.adapter.reset();
      s.manager.reset();
    }
    stack_.Close();
  }

  void Restart() {
    ++restarts_;
    if (rng_() % 2 == 0) {
      // One by one, in an order the lineage oracle knows (StoreLiveSessions
      // takes them in hash order).
      for (auto& [id, c] : convs_) {
        if (!c.live) continue;
        ASSERT_OK(slots_[c.slot].manager->StoreToPrefixCache(id, c.epoch));
        Stored(c);
      }
    }
    Stop();
    Start();
  }

  Conv& Pick() {
    auto it = convs_.begin();
    std::advance(it, static_cast<long>(rng_() % convs_.size()));
    return it->second;
  }

  const ReferenceModel& ModelOf(const Conv& c) const { return *slots_[c.slot].model; }

  std::vector<int32_t> Message(const Conv& c) {
    std::vector<int32_t> msg(1 + rng_() % 8);
    const int64_t vocab = rng_() % 2 == 0 ? 6 : ModelOf(c).config().vocab_size;
    for (int32_t& t : msg) t = static_cast<int32_t>(rng_() % vocab);
    return msg;
  }

  // The next token of a reply: greedy, or sampled (any token) as a server
  // with a temperature would, so forks and regenerations differ.
  int32_t Sample(const Conv& c, const TailOutput& out) {
    if (rng_() % 2 == 0) return out.token_id;
    return static_cast<int32_t>(rng_() % ModelOf(c).config().vocab_size);
  }

  void CheckLogits(const Conv& c, const std::vector<int32_t>& text, const TailOutput& out,
                   const std::string& what) {
    auto expected = ModelOf(c).NextTokenLogits(text);
    ASSERT_OK(expected);
    ++steps_checked_;
    EXPECT_TRUE(*expected == out.logits)
        << slots_[c.slot].name << " " << what << ": logits differ after " << text.size()
        << " tokens";
  }

  // The session held text[0, size - 1) when it was stored. A store with
  // nothing new since the last store or the restore is skipped.
  void Stored(Conv& c) {
    Slot& s = slots_[c.slot];
    const size_t held = c.text.size() - 1;
    if (held == c.stored_len) return;
    c.stored_len = held;
    c.stored_ends.push_back(held);
    std::vector<int32_t> text(c.text.begin(), c.text.end() - 1);
    if (!s.tip_only) {
      s.stored.push_back(std::move(text));
      return;
    }
    if (s.tips.count(text) != 0) return;  // the same tip stored again
    // Its previous tip: the longest recorded tip it extends. That one's own
    // previous tip (the grandparent) loses its state.
    std::vector<int32_t> previous;
    for (const auto& [tip, before] : s.tips) {
      if (tip.size() < text.size() && tip.size() > previous.size() &&
          std::equal(tip.begin(), tip.end(), text.begin()))
        previous = tip;
    }
    if (!previous.empty()) {
      const std::vector<int32_t> grandparent = s.tips[previous];
      if (!grandparent.empty()) s.tips.erase(grandparent);
    }
    s.tips[text] = previous;
  }

  // The restore the lineage oracle expects of `prompt` on a tip-only model.
  static int64_t ExpectedTip(const Slot& s, const std::vector<int32_t>& prompt) {
    size_t best = 0;
    for (const auto& [tip, before] : s.tips) {
      if (tip.size() < prompt.size() && tip.size() > best &&
          std::equal(tip.begin(), tip.end(), prompt.begin()))
        best = tip.size();
    }
    return static_cast<int64_t>(best);
  }

  void Lost(Conv& c) {
    ++lost_;
    Stored(c);  // evicted sessions are stored
    c.live = false;
  }

  // What a new session's restore of `prompt` must reach on the full-attention
  // model: every stored text that the prompt (but its last token) extends,
  // and the whole blocks of the longest stored prefix it shares.
  int64_t StoredPrefix(const Slot& s, const std::vector<int32_t>& prompt) const {
    const size_t usable = prompt.size() - 1;
    size_t best = 0;
    for (const std::vector<int32_t>& text : s.stored) {
      size_t n = 0;
      while (n < text.size() && n < usable && text[n] == prompt[n]) ++n;
      best = std::max(best, n == text.size() ? n : n / s.block_tokens * s.block_tokens);
    }
    return static_cast<int64_t>(best);
  }

  // Prefills `prompt` (the whole conversation) into a new epoch of `c`.
  void Open(const std::string& id, Conv& c, std::vector<int32_t> prompt,
            int64_t at_least) {
    Slot& s = slots_[c.slot];
    if (!s.tip_only) at_least = std::max(at_least, StoredPrefix(s, prompt));
    const int64_t expected = s.tip_only ? ExpectedTip(s, prompt) : -1;
    // The newer epoch supersedes the live one, stored after the restore.
    std::optional<Conv> superseded;
    if (c.live) superseded = c;
    ++c.epoch;
    StepStats stats;
    auto out = s.adapter->Prefill(id, c.epoch, testing::Tokens(prompt), &stats);
    ASSERT_OK(out);
    const auto* tail = std::get_if<TailOutput>(&*out);
    ASSERT_NE(tail, nullptr) << "a new session's prefill missed";
    ++opens_;
    const PrefixRestore& r = stats.restore;
    restored_ += r.restored_tokens;
    restored_ssd_ += r.restored_ssd_tokens;
    EXPECT_EQ(r.restored_tokens + stats.computed_tokens,
              static_cast<int64_t>(prompt.size()));
    EXPECT_LT(r.restored_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_GE(r.restored_tokens, at_least)
        << s.name << " " << id << ": a stored prefix was not restored (" << r.reason
        << ")";
    if (expected >= 0) {
      EXPECT_EQ(r.restored_tokens, expected)
          << s.name << " " << id << ": the restore is not at the longest tip with "
          << "real state (" << r.reason << ")";
    }
    if (superseded) Stored(*superseded);
    CheckLogits(c, prompt, *tail,
                id + " prefill restoring " + std::to_string(r.restored_tokens) + " (" +
                    r.reason + ")");
    c.text = std::move(prompt);
    c.reply_start = c.text.size();
    c.text.push_back(Sample(c, *tail));
    c.live = true;
    c.stored_len = static_cast<size_t>(r.restored_tokens);
  }

  void NewConversation() {
    Conv c;
    c.slot = rng_() % slots_.size();
    if (rng_() % 2 == 0) c.text = slots_[c.slot].system_prompt;
    const std::string id = "c" + std::to_string(next_id_++);
    Conv& added = convs_[id] = c;
    std::vector<int32_t> prompt = added.text;
    const std::vector<int32_t> msg = Message(added);
    prompt.insert(prompt.end(), msg.begin(), msg.end());
    Open(id, added, std::move(prompt), 0);
    Decode(added, rng_() % 4);
  }

  std::string IdOf(const Conv& c) const {
    for (const auto& [id, conv] : convs_)
      if (&conv == &c) return id;
    return "";
  }

  // A new message: a continuation of the live session, or the whole
  // conversation again at a new epoch when its session is gone.
  void Turn(Conv& c) {
    if (c.text.size() > kMaxText) return Retire(c);
    const std::string id = IdOf(c);
    const std::vector<int32_t> msg = Message(c);
    std::vector<int32_t> prompt = c.text;
    prompt.insert(prompt.end(), msg.begin(), msg.end());
    if (c.live) {
      std::vector<int32_t> run = {c.text.back()};
      run.insert(run.end(), msg.begin(), msg.end());
      StepInput in = testing::Tokens(run);
      in.expected_seq_len = static_cast<int64_t>(c.text.size()) - 1;
      auto out = slots_[c.slot].adapter->Prefill(id, c.epoch, in);
      ASSERT_OK(out);
      if (const auto* tail = std::get_if<TailOutput>(&*out)) {
        CheckLogits(c, prompt, *tail, id + " turn");
        c.text = std::move(prompt);
        c.reply_start = c.text.size();
        c.text.push_back(Sample(c, *tail));
        return Decode(c, rng_() % 5);
      }
      Lost(c);
    }
    Open(id, c, std::move(prompt), 0);
    Decode(c, rng_() % 5);
  }

  void Decode(Conv& c, size_t n) {
    const std::string id = IdOf(c);
    for (size_t i = 0; i < n && c.live; ++i) {
      auto out = slots_[c.slot].adapter->Decode(id, c.epoch, testing::Tokens({c.text.back()}));
      ASSERT_OK(out);
      if (std::holds_alternative<CacheMiss>(*out)) return Lost(c);
      const TailOutput& tail = std::get<TailOutput>(*out);
      CheckLogits(c, c.text, tail, id + " decode");
      c.text.push_back(Sample(c, tail));
    }
  }

  // Another conversation off `c`: its whole text (a second continuation of
  // the same turn), the prompt of its last reply, the end of a turn it
  // stored (perhaps superseded since), or any cut.
  void Fork(const Conv& c, int64_t at_least = 0) {
    ++forks_;
    Conv d;
    d.slot = c.slot;
    d.text = c.text;
    switch (rng_() % 5) {
      case 0:
      case 1:
        break;
      case 2:
        d.text.resize(c.reply_start);
        break;
      case 3:
        if (!c.stored_ends.empty())
          d.text.resize(std::min(c.text.size(),
                                 c.stored_ends[rng_() % c.stored_ends.size()]));
        break;
      default:
        d.text.resize(rng_() % (c.text.size() + 1));
    }
    if (d.text.size() != c.text.size()) at_least = 0;
    const std::string id = "c" + std::to_string(next_id_++);
    Conv& added = convs_[id] = d;
    std::vector<int32_t> prompt = added.text;
    const std::vector<int32_t> msg = Message(added);
    prompt.insert(prompt.end(), msg.begin(), msg.end());
    Open(id, added, std::move(prompt), at_least);
    Decode(added, rng_() % 4);
  }

  // Rolls the last reply back and samples another: a truncate to its prompt
  // where the layers can roll back, else the prompt again at a new epoch.
  void Regenerate(Conv& c) {
    ++regenerations_;
    const std::string id = IdOf(c);
    std::vector<int32_t> prompt(c.text.begin(),
                                c.text.begin() + static_cast<int64_t>(c.reply_start));
    if (c.live && prompt.size() >= 2) {
      const int64_t keep = static_cast<int64_t>(prompt.size()) - 1;
      auto truncated = slots_[c.slot].manager->Truncate(id, c.epoch, keep);
      if (truncated.ok() && std::holds_alternative<CacheMiss>(*truncated)) {
        Lost(c);
      } else if (truncated.ok()) {
        StepInput in = testing::Tokens({prompt.back()});
        in.expected_seq_len = keep;
        auto out = slots_[c.slot].adapter->Prefill(id, c.epoch, in);
        ASSERT_OK(out);
        c.stored_len = 0;  // a truncate forgets the last store
        if (const auto* tail = std::get_if<TailOutput>(&*out)) {
          ++truncations_;
          CheckLogits(c, prompt, *tail, id + " regenerated after a truncate");
          c.text = std::move(prompt);
          c.text.push_back(Sample(c, *tail));
          return Decode(c, rng_() % 4);
        }
        Lost(c);
      } else {
        ASSERT_TRUE(truncated.status().IsInvalidArgument())
            << truncated.status().ToString();
      }
    }
    Open(id, c, std::move(prompt), 0);
    Decode(c, rng_() % 4);
  }

  // The end of a turn: stored, and perhaps forked at once (the fork must
  // restore everything the store just acknowledged).
  void EndTurn(Conv& c, bool fork_now) {
    if (!c.live) return;
    auto stored = slots_[c.slot].adapter->EndTurn(IdOf(c), c.epoch);
    ASSERT_TRUE(stored.ok() || IsKvCacheMiss(stored.status())) << stored.status().ToString();
    if (!stored.ok()) return Lost(c);
    Stored(c);
    // A skipped store (nothing new since the last) acknowledged nothing now:
    // later stores may have superseded that tip since.
    if (!fork_now || stored->skipped) return;
    ++fresh_forks_;
    Fork(c, static_cast<int64_t>(c.text.size()) - 1);
  }

  void Release(Conv& c) {
    if (!c.live) return;
    ASSERT_OK(slots_[c.slot].manager->Release(IdOf(c), c.epoch));
    Stored(c);
    c.live = false;
  }

  void Retire(Conv& c) {
    Release(c);
    convs_.erase(IdOf(c));
  }
  void Retire() { Retire(Pick()); }

  const std::string dir_;
  std::mt19937_64 rng_;
  std::vector<Slot> slots_;
  CacheStack stack_;
  std::map<std::string, Conv> convs_;
  int next_id_ = 0;
  int steps_checked_ = 0, opens_ = 0, forks_ = 0, fresh_forks_ = 0;
  int regenerations_ = 0, truncations_ = 0, restarts_ = 0, lost_ = 0;
  int64_t restored_ = 0, restored_ssd_ = 0;
  uint64_t hot_evictions_ = 0;
};

TEST(SessionSharedBudgetStress, ForksRegenerationsAndRestartsOfSeveralModelsDecodeExactly) {
  const uint64_t seed = testing::TestSeed("SessionSharedBudgetStress.Models");
  const uint64_t ops = testing::Iterations(300, 20000);
  testing::TempDir dir;
  ModelsHarness h(dir.str(), seed);
  RunUntilFailure(ops, [&](uint64_t op) {
    h.Op();
    h.CheckAfterOp();
    if (op % 100 == 99) h.stack().AuditTiers();
  });
  h.stack().AuditTiers();
  h.Report();
  EXPECT_GT(h.steps_checked(), 100);
  EXPECT_GT(h.restored_ssd(), 0) << "nothing restored from SSD: a vacuous run";
  EXPECT_GT(h.hot_evictions(), 0u) << "the budget never filled: a vacuous run";
}

}  // namespace
}  // namespace prefixkv
