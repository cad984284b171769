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
//
// Kill loop (hybrid sessions): a child process (this binary re-executed) holds
// one conversation on a window + recurrent + full-attention model, storing and
// flushing the session at the end of every turn; the parent SIGKILLs it at a
// random moment, reopens the data directory and checks that the conversation
// restores at the last acknowledged turn's tip or at the one the child was
// storing, never elsewhere, with exact parity (a tip mixing a new KV slice
// with an old window or recurrent state would decode differently), and that
// the tiers audit clean.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "tests/session/conversation_driver.h"
#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::CacheStack;
using testing::Conversation;
using testing::ConversationDriver;
using testing::FullModelSessions;
using testing::Message;
using testing::RecurrentHybridModelConfig;
using testing::RunTurn;

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
    SessionManagerOptions config;
    config.ttl_ms = 1000;
    config.max_sessions = 3;
    config.prefix_cache = {stack_.engine.get(), stack_.Register(driver_.recipe())};
    manager_ = std::make_unique<SessionManager>(driver_.recipe(), config, &clock_);
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
    SessionStats stats = manager_->stats();
    EXPECT_EQ(stats.store_failures, 0u) << stats.last_store_error;
  }

  void Audit() { stack_.AuditTiers(); }

  const ConversationDriver& driver() const { return driver_; }

 private:
  const std::string dir_;
  ConversationDriver driver_;
  std::mt19937_64& rng_;
  FakeClock clock_;
  CacheStack stack_;
  std::unique_ptr<SessionManager> manager_;
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

// --- Kill loop of hybrid sessions ---

constexpr const char* kHybridChildEnv = "PREFIXKV_HYBRID_CRASH_CHILD";
constexpr int kCrashReply = 4;   // reply tokens per turn
constexpr int kCrashTurns = 24;  // then the child idles until killed

// Child -> parent: 'S' the tiers are open, 'T' turn `turns` is stored and flushed.
struct TurnReport {
  char type;
  char pad[3];
  int32_t turns;
};

void SendTurn(int fd, char type, int32_t turns) {
  TurnReport r{type, {}, turns};
  if (write(fd, &r, sizeof r) != sizeof r) _exit(3);
}

// The kill -9 child: one live session, each turn prefilled with its message,
// decoded, stored (EndTurn) and flushed, then acknowledged down the pipe.
[[noreturn]] void RunHybridChild(const std::string& spec) {
  char path[4096];
  int fd = -1;
  if (std::sscanf(spec.c_str(), "%4095[^|]|%d", path, &fd) != 2) _exit(2);
  CacheStack stack;
  stack.Open(path);
  if (stack.engine == nullptr) _exit(4);
  FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
  SendTurn(fd, 'S', 0);
  const int64_t vocab = s.model->config().vocab_size;
  for (int turn = 0; turn < kCrashTurns; ++turn) {
    RunTurn(*s.adapter, "chat", 0, Message(turn, vocab), kCrashReply);
    if (!s.adapter->EndTurn("chat", 0).ok()) _exit(6);
    if (!stack.engine->Flush().ok()) _exit(7);
    SendTurn(fd, 'T', turn + 1);
  }
  while (true) pause();
}

TEST(HybridSessionCrashChild, StoresTurnsUntilKilled) {
  const char* spec = std::getenv(kHybridChildEnv);
  if (spec == nullptr) GTEST_SKIP() << "only runs as the kill loop's child";
  RunHybridChild(spec);
}

// Runs a child on `dir` for `run_ms` after it opened the tiers, kills it (-9)
// and returns the turns it acknowledged, or -1 when it never opened them.
int RunHybridChildUntilKilled(const std::string& dir, uint64_t run_ms) {
  using Clock = std::chrono::steady_clock;
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a parent that was killed
    setenv(kHybridChildEnv, (dir + "|" + std::to_string(fds[1])).c_str(), 1);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);  // the child's gtest banner
    execl("/proc/self/exe", "session_prefix_cache_stress_test",
          "--gtest_filter=HybridSessionCrashChild.*", static_cast<char*>(nullptr));
    _exit(5);
  }
  close(fds[1]);
  bool started = false;
  int acked = 0;
  auto drain = [&](Clock::time_point deadline) {
    TurnReport r;
    while (Clock::now() < deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) continue;
      if (read(fds[0], &r, sizeof r) != sizeof r) return;  // EOF (reports are atomic)
      started = started || r.type == 'S';
      if (r.type == 'T') acked = r.turns;
    }
  };
  const auto open_deadline = Clock::now() + std::chrono::seconds(20);
  while (!started && Clock::now() < open_deadline)
    drain(Clock::now() + std::chrono::milliseconds(10));
  if (started) drain(Clock::now() + std::chrono::milliseconds(run_ms));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // The reports still in the pipe, to its end (the child is gone): 200 ms,
  // once, could run out on a loaded machine with reports unread, and the
  // turns acknowledged would be undercounted.
  drain(Clock::now() + std::chrono::seconds(30));
  close(fds[0]);
  EXPECT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  return started ? acked : -1;
}

TEST(SessionPrefixCacheStress, KillNineDuringHybridTurnsLeavesTheNewTipOrThePreviousOne) {
  if (std::getenv(kHybridChildEnv) != nullptr) GTEST_SKIP();
  const uint64_t cycles = testing::Iterations(4, 40);
  std::mt19937_64 rng(testing::TestSeed("SessionPrefixCacheStress.KillNine"));
  std::shared_ptr<const ReferenceModel> model =
      testing::SeedModel(RecurrentHybridModelConfig());
  const int64_t vocab = model->config().vocab_size;
  // conversation[k]: the tokens after k turns, as the child builds them.
  std::vector<std::vector<int32_t>> conversation = {{}};
  int on_new_tip = 0;
  size_t orphans = 0;
  for (uint64_t cycle = 0; cycle < cycles && !HasFailure(); ++cycle) {
    testing::TempDir dir;
    const std::string path = dir.str() + "/tiers";
    const int acked = RunHybridChildUntilKilled(path, 1 + rng() % 80);
    ASSERT_GE(acked, 0) << "child did not open the tiers";
    const int turns = std::min(acked + 1, kCrashTurns);
    while (static_cast<int>(conversation.size()) <= turns) {
      std::vector<int32_t> next = conversation.back();
      const std::vector<int32_t> msg =
          Message(static_cast<int>(conversation.size()) - 1, vocab);
      next.insert(next.end(), msg.begin(), msg.end());
      const std::vector<int32_t> reply =
          testing::StatelessGreedy(*model, next, kCrashReply);
      next.insert(next.end(), reply.begin(), reply.end());
      conversation.push_back(std::move(next));
    }
    CacheStack stack;
    stack.Open(path);
    ASSERT_NE(stack.engine, nullptr);
    auto audit = stack.engine->Audit();
    ASSERT_OK(audit);
    for (const AuditFinding& f : audit->findings)
      ADD_FAILURE() << f.what << ": " << f.detail;
    // An orphan is legal when its parent was only in RAM (docs/ssd.md, "Orphans"):
    // a block of the unacknowledged turn spilled to SSD before its parent was
    // flushed. No block of the acknowledged conversation may be one.
    orphans += audit->orphans.size();
    {
      const Namespace ns = stack.Register(testing::RecipeOf(*testing::FullShard(model)));
      const std::vector<int32_t>& done = conversation[static_cast<size_t>(acked)];
      const std::vector<BlockKey> chain =
          ChainKeys(ns.root, done, testing::kSessionBlockTokens);
      std::set<BlockKey> acknowledged(chain.begin(), chain.end());
      for (int k = 1; k <= acked; ++k) {  // each turn's partial tip
        const size_t n = conversation[static_cast<size_t>(k)].size();
        const size_t j = n / testing::kSessionBlockTokens;
        const size_t rest = n % testing::kSessionBlockTokens;
        if (rest == 0) continue;
        acknowledged.insert(
            ChainKey(j == 0 ? ns.root : chain[j - 1],
                     std::span<const int32_t>(done).subspan(n - rest, rest)));
      }
      for (const BlockKey& o : audit->orphans) {
        EXPECT_EQ(acknowledged.count(o), 0u)
            << "cycle " << cycle << ": acknowledged block " << o.ToHex()
            << " lost its parent";
      }
    }
    {
      FullModelSessions s(stack, {}, nullptr, RecurrentHybridModelConfig());
      // The conversation through the turn that may have been in flight, plus a
      // new message: restores at the last acknowledged tip or at the new one.
      std::vector<int32_t> prompt = conversation[static_cast<size_t>(turns)];
      const std::vector<int32_t> msg = Message(turns, vocab);
      prompt.insert(prompt.end(), msg.begin(), msg.end());
      auto r = RunTurn(*s.adapter, "check", 0, prompt, 3);
      const int64_t restored = r.prefill.restore.restored_tokens;
      const auto previous =
          static_cast<int64_t>(conversation[static_cast<size_t>(acked)].size());
      const auto newest =
          static_cast<int64_t>(conversation[static_cast<size_t>(turns)].size());
      EXPECT_TRUE(restored == previous || restored == newest)
          << "cycle " << cycle << ": restored " << restored << ", acknowledged tip "
          << previous << ", in-flight tip " << newest << "; " << r.prefill.restore.reason;
      EXPECT_EQ(r.reply, testing::StatelessGreedy(*model, prompt, 3))
          << "cycle " << cycle;
      on_new_tip += restored == newest && newest != previous ? 1 : 0;
      std::printf("cycle %llu: %d turns acknowledged, restored %lld of %zu tokens\n",
                  static_cast<unsigned long long>(cycle), acked,
                  static_cast<long long>(restored), prompt.size());
    }
    stack.Close();
  }
  std::printf(
      "%d of %llu kills landed after the in-flight tip was whole; %zu orphans of "
      "unacknowledged turns\n",
      on_new_tip, static_cast<unsigned long long>(cycles), orphans);
}

// --- Branches, truncations and restarts against the stateless model ---

// Conversations that fork off each other at any point (a block boundary, a
// previous turn's end or mid-block), truncate and re-append, are stored,
// released, evicted and restarted from SSD, on three models (full attention;
// windows; windows + recurrent + full) and block sizes below, equal to and
// above the 6-token window. Every step's logits (prefill and decode) must
// equal the stateless runner's on the same tokens bit for bit: a restored
// window or recurrent state from another position or branch would differ.
class BranchHarness {
 public:
  BranchHarness(const std::string& dir, uint64_t seed, ModelConfig model_config,
                uint32_t block_tokens)
      : dir_(dir),
        rng_(seed),
        block_tokens_(block_tokens),
        model_(testing::SeedModel(model_config)),
        shard_(testing::FullShard(model_)),
        recipe_(testing::RecipeOf(*shard_)) {
    Start();
  }
  ~BranchHarness() {
    adapter_.reset();
    manager_.reset();
    stack_.Close();
  }

  void Start() {
    stack_.Open(dir_, 30 * HotEntryCharge(4 * 6 * 2 * 2 * 8 * 4));
    auto ns = stack_.engine->RegisterModel(
        SessionNamespaceSpec(recipe_, "branches", block_tokens_),
        {.store_partial_tail = true});
    ASSERT_OK(ns);
    SessionManagerOptions config;
    config.max_sessions = 3;
    config.prefix_cache = {stack_.engine.get(), *ns};
    manager_ = std::make_unique<SessionManager>(recipe_, config);
    adapter_ = std::make_unique<KvBoundaryAdapter>(shard_.get(), manager_.get());
    live_.clear();
  }

  void Restart() {
    if (rng_() % 2 == 0) {
      ASSERT_OK(manager_->StoreLiveSessions());
    }
    adapter_.reset();
    manager_.reset();
    stack_.Close();
    Start();
  }

  // The logits a step returned must be the stateless runner's on `text`.
  void CheckLogits(const std::vector<int32_t>& text, const TailOutput& out,
                   const std::string& what) {
    auto expected = model_->NextTokenLogits(text);
    ASSERT_OK(expected);
    ++steps_checked_;
    EXPECT_TRUE(*expected == out.logits)
        << what << ": logits differ after " << text.size() << " tokens";
  }

  std::vector<int32_t> Message() {
    std::vector<int32_t> msg(1 + rng_() % 7);
    for (int32_t& t : msg) t = static_cast<int32_t>(rng_() % 6);  // branches collide
    return msg;
  }

  // A prefix of a known text to fork off: its whole, a block boundary, or any cut.
  std::vector<int32_t> ForkPoint() {
    if (texts_.empty() || rng_() % 6 == 0) return {};
    std::vector<int32_t> base = texts_[rng_() % texts_.size()];
    size_t cut = base.size();
    switch (rng_() % 3) {
      case 0:
        break;
      case 1:
        cut = (rng_() % (base.size() / block_tokens_ + 1)) * block_tokens_;
        break;
      default:
        cut = rng_() % (base.size() + 1);
    }
    base.resize(std::min(cut, base.size()));
    return base;
  }

  // A new session on a fork of a known text plus a message, then a few decodes.
  void Fork() {
    std::vector<int32_t> text = ForkPoint();
    if (text.size() > 70) text.resize(70);
    const std::vector<int32_t> msg = Message();
    text.insert(text.end(), msg.begin(), msg.end());
    const std::string id = "s" + std::to_string(next_id_++);
    StepStats stats;
    auto out = adapter_->Prefill(id, 1, testing::Tokens(text), &stats);
    ASSERT_OK(out);
    const auto* tail = std::get_if<TailOutput>(&*out);
    ASSERT_NE(tail, nullptr) << "a new session's prefill missed";
    EXPECT_EQ(stats.restore.restored_tokens + stats.computed_tokens,
              static_cast<int64_t>(text.size()));
    restored_ += stats.restore.restored_tokens;
    CheckLogits(text, *tail,
                id + " prefill (restored " +
                    std::to_string(stats.restore.restored_tokens) + ": " +
                    stats.restore.reason + ")");
    text.push_back(tail->token_id);
    live_[id] = text;
    Decode(id, rng_() % 4);
  }

  // `n` decode steps of a live session (its last token runs first).
  void Decode(const std::string& id, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      auto it = live_.find(id);
      if (it == live_.end()) return;
      auto out = adapter_->Decode(id, 1, testing::Tokens({it->second.back()}));
      ASSERT_OK(out);
      if (std::holds_alternative<CacheMiss>(*out)) return Lost(id);
      const TailOutput& tail = std::get<TailOutput>(*out);
      CheckLogits(it->second, tail, id + " decode");
      it->second.push_back(tail.token_id);
    }
  }

  // A session evicted by the cap: it was stored; its text is a fork point.
  void Lost(const std::string& id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    std::vector<int32_t> text = std::move(it->second);
    text.pop_back();  // the last token never ran
    texts_.push_back(std::move(text));
    live_.erase(it);
  }

  std::string PickLive() {
    if (live_.empty()) return "";
    auto it = live_.begin();
    std::advance(it, static_cast<long>(rng_() % live_.size()));
    return it->first;
  }

  // Truncates a live session (when its layers allow) and continues it with a
  // new message: the truncated part must never come back.
  void TruncateAndContinue() {
    const std::string id = PickLive();
    if (id.empty()) return;
    std::vector<int32_t>& text = live_[id];
    const size_t held = text.size() - 1;  // the last token has not run
    size_t to = rng_() % (held + 1);
    auto truncated = manager_->Truncate(id, 1, static_cast<int64_t>(to));
    if (!truncated.ok()) {
      ASSERT_TRUE(truncated.status().IsInvalidArgument())
          << truncated.status().ToString();
      to = held;  // a wrapped window or a recurrent state: continue instead
    } else if (std::holds_alternative<CacheMiss>(*truncated)) {
      return Lost(id);
    }
    text.resize(to);
    if (rng_() % 2 == 0 && to > 0) {
      auto stored = manager_->StoreToPrefixCache(id, 1);
      ASSERT_OK(stored);
      texts_.push_back(text);
    }
    const std::vector<int32_t> msg = Message();
    text.insert(text.end(), msg.begin(), msg.end());
    StepInput in = testing::Tokens(msg);
    in.expected_seq_len = static_cast<int64_t>(to);
    auto out = adapter_->Prefill(id, 1, in);
    ASSERT_OK(out);
    if (std::holds_alternative<CacheMiss>(*out)) return Lost(id);
    const TailOutput& tail = std::get<TailOutput>(*out);
    CheckLogits(text, tail, id + " continued after truncating to " + std::to_string(to));
    text.push_back(tail.token_id);
  }

  void Step() {
    switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
        return Fork();
      case 3:
      case 4: {
        const std::string id = PickLive();
        if (!id.empty()) Decode(id, 1 + rng_() % 3);
        return;
      }
      case 5:
        return TruncateAndContinue();
      case 6: {  // end of turn: stored, stays live
        const std::string id = PickLive();
        if (id.empty()) return;
        auto stored = adapter_->EndTurn(id, 1);
        ASSERT_OK(stored);
        std::vector<int32_t> text = live_[id];
        text.pop_back();
        texts_.push_back(std::move(text));
        return;
      }
      case 7:
      case 8: {
        const std::string id = PickLive();
        if (id.empty()) return;
        ASSERT_OK(manager_->Release(id, 1));
        return Lost(id);
      }
      default:
        if (rng_() % 3 == 0) return Restart();
        return Fork();
    }
  }

  // Sessions the cap evicted behind the test's back.
  void ForgetEvicted() {
    std::set<std::string> keys;
    for (const auto& [id, epoch] : manager_->session_keys()) keys.insert(id);
    std::vector<std::string> gone;
    for (const auto& [id, text] : live_)
      if (keys.count(id) == 0) gone.push_back(id);
    for (const std::string& id : gone) Lost(id);
    SessionStats stats = manager_->stats();
    EXPECT_EQ(stats.store_failures, 0u) << stats.last_store_error;
  }

  int steps_checked() const { return steps_checked_; }
  int64_t restored() const { return restored_; }

 private:
  const std::string dir_;
  std::mt19937_64 rng_;
  const uint32_t block_tokens_;
  std::shared_ptr<const ReferenceModel> model_;
  std::unique_ptr<ReferenceShard> shard_;
  KvCacheRecipe recipe_;
  CacheStack stack_;
  std::unique_ptr<SessionManager> manager_;
  std::unique_ptr<KvBoundaryAdapter> adapter_;
  std::map<std::string, std::vector<int32_t>> live_;  // text incl. the unrun token
  std::vector<std::vector<int32_t>> texts_;           // stored texts to fork off
  int next_id_ = 0;
  int steps_checked_ = 0;
  int64_t restored_ = 0;
};

TEST(SessionPrefixCacheStress, RandomBranchesTruncationsAndRestartsDecodeExactly) {
  const uint64_t seed = testing::TestSeed("SessionPrefixCacheStress.Branches");
  struct Case {
    const char* name;
    ModelConfig config;
    uint32_t block_tokens;
  };
  ModelConfig full;
  full.n_kv_heads = 2;
  // Blocks of the window's size: the window wraps exactly at block boundaries.
  const Case cases[] = {
      {"full attention, 4-token blocks", full, 4},
      {"windows of 6, 6-token blocks", testing::HybridModelConfig(), 6},
      {"WRGWRG, 4-token blocks", RecurrentHybridModelConfig(), 4},
      // Blocks longer than the window and the conv ring: a tip's window holds
      // only the last part of its block.
      {"WRGWRG, 7-token blocks", RecurrentHybridModelConfig(), 7},
  };
  const uint64_t ops = testing::Iterations(120, 5000);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    BranchHarness h(dir.str() + "/tiers", seed, c.config, c.block_tokens);
    for (uint64_t i = 0; i < ops && !::testing::Test::HasFatalFailure(); ++i) {
      h.Step();
      h.ForgetEvicted();
    }
    std::printf("%s: %d steps checked, %lld tokens restored\n", c.name, h.steps_checked(),
                static_cast<long long>(h.restored()));
  }
}

// Pipelines: a head shard (layers 0-2) and a tail shard (3-5), each with its
// own manager and namespace, hold forking conversations; either shard's
// session may be released or evicted alone, the engine restarts; a turn whose
// session was lost is prefilled again at a new epoch (with the head's restore
// cut to nothing when the tail cannot restore the head's prefix). The tail's
// logits must be the stateless runner's at every step.
class PipelineHarness {
 public:
  PipelineHarness(const std::string& dir, uint64_t seed, ModelConfig model_config,
                  uint32_t block_tokens)
      : dir_(dir),
        rng_(seed),
        block_tokens_(block_tokens),
        model_(testing::SeedModel(model_config)),
        head_shard_(testing::Shard(model_, 0, 2)),
        tail_shard_(testing::Shard(model_, 3, 5)) {
    Start();
  }
  ~PipelineHarness() { Stop(); }

  void Stop() {
    head_.reset();
    tail_.reset();
    head_mgr_.reset();
    tail_mgr_.reset();
    stack_.Close();
  }

  void Start() {
    stack_.Open(dir_, 30 * HotEntryCharge(4 * 3 * 2 * 2 * 8 * 4));
    head_mgr_ = Bound(*head_shard_);
    tail_mgr_ = Bound(*tail_shard_);
    head_ = std::make_unique<KvBoundaryAdapter>(head_shard_.get(), head_mgr_.get());
    tail_ = std::make_unique<KvBoundaryAdapter>(tail_shard_.get(), tail_mgr_.get());
    for (auto& [id, c] : convs_) c.live = false;
  }

  std::unique_ptr<SessionManager> Bound(const ShardComputation& shard) {
    KvCacheRecipe recipe = testing::RecipeOf(shard);
    auto ns = stack_.engine->RegisterModel(
        SessionNamespaceSpec(recipe, "pipeline", block_tokens_),
        {.store_partial_tail = true});
    EXPECT_OK(ns);
    SessionManagerOptions config;
    config.max_sessions = 2 + rng_() % 2;  // the shards evict apart
    config.prefix_cache = {stack_.engine.get(), ns.ok() ? *ns : Namespace{}};
    return std::make_unique<SessionManager>(recipe, config);
  }

  struct Conv {
    std::vector<int32_t> text;  // the last token has not run
    uint64_t epoch = 0;
    bool live = false;
  };

  // One step through both shards: the tail's output or its miss.
  StatusOr<StepOutput> Step(bool prefill, const std::string& id, uint64_t epoch,
                            const std::vector<int32_t>& ids,
                            std::optional<int64_t> max_restore) {
    StepInput in = testing::Tokens(ids);
    in.max_restore_tokens = max_restore;
    auto h = prefill ? head_->Prefill(id, epoch, in) : head_->Decode(id, epoch, in);
    if (!h.ok() || std::holds_alternative<CacheMiss>(*h)) return h;
    StepInput next = testing::Boundary(std::get<BoundaryBundle>(*h));
    next.token_ids = ids;
    return prefill ? tail_->Prefill(id, epoch, next) : tail_->Decode(id, epoch, next);
  }

  void Check(const std::vector<int32_t>& text, const TailOutput& out,
             const std::string& what) {
    auto expected = model_->NextTokenLogits(text);
    ASSERT_OK(expected);
    ++steps_checked_;
    EXPECT_TRUE(*expected == out.logits)
        << what << ": logits differ after " << text.size() << " tokens";
  }

  // The whole text again at a new epoch (the turn's session was lost, or a
  // new conversation): a prefix-unavailable miss retries without a restore.
  void Reopen(const std::string& id, Conv& c) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      ++c.epoch;
      auto out = Step(true, id, c.epoch, c.text,
                      attempt == 0 ? std::nullopt : std::optional<int64_t>(0));
      ASSERT_OK(out);
      if (const auto* miss = std::get_if<CacheMiss>(&*out)) {
        ASSERT_EQ(miss->reason, CacheMissReason::kPrefixUnavailable) << miss->detail;
        ++unavailable_;
        continue;
      }
      const TailOutput& tail = std::get<TailOutput>(*out);
      Check(c.text, tail, id + " prefill");
      c.text.push_back(tail.token_id);
      c.live = true;
      return;
    }
    ADD_FAILURE() << id << ": a prefill without a restore missed";
  }

  void Decode(const std::string& id, Conv& c) {
    if (!c.live) return Reopen(id, c);
    auto out = Step(false, id, c.epoch, {c.text.back()}, std::nullopt);
    ASSERT_OK(out);
    if (std::holds_alternative<CacheMiss>(*out)) {
      c.live = false;  // one shard lost it: the other's state is superseded
      return Reopen(id, c);
    }
    const TailOutput& tail = std::get<TailOutput>(*out);
    Check(c.text, tail, id + " decode");
    c.text.push_back(tail.token_id);
  }

  std::string PickConv() {
    auto it = convs_.begin();
    std::advance(it, static_cast<long>(rng_() % convs_.size()));
    return it->first;
  }

  void Fork() {
    Conv c;
    if (!convs_.empty() && rng_() % 5 != 0) {
      c.text = convs_[PickConv()].text;
      c.text.pop_back();
      size_t cut = c.text.size();
      if (rng_() % 2 == 0) {
        cut = (rng_() % (cut / block_tokens_ + 1)) * block_tokens_;
      } else if (rng_() % 2 == 0) {
        cut = rng_() % (cut + 1);
      }
      c.text.resize(std::min<size_t>(cut, 60));
    }
    const size_t n = 1 + rng_() % 6;
    for (size_t i = 0; i < n; ++i) c.text.push_back(static_cast<int32_t>(rng_() % 6));
    const std::string id = "p" + std::to_string(next_id_++);
    Reopen(id, convs_[id] = c);
  }

  void Op() {
    switch (rng_() % 10) {
      case 0:
      case 1:
        return Fork();
      case 2:
      case 3:
      case 4: {
        if (convs_.empty()) return Fork();
        const std::string id = PickConv();
        return Decode(id, convs_[id]);
      }
      case 5: {  // end of turn on both shards
        if (convs_.empty()) return;
        const std::string id = PickConv();
        Conv& c = convs_[id];
        if (!c.live) return;
        for (KvBoundaryAdapter* a : {head_.get(), tail_.get()}) {
          auto stored = a->EndTurn(id, c.epoch);
          ASSERT_TRUE(stored.ok() || IsKvCacheMiss(stored.status()))
              << stored.status().ToString();
        }
        return;
      }
      case 6:
      case 7: {  // a release of one shard's session or both
        if (convs_.empty()) return;
        const std::string id = PickConv();
        Conv& c = convs_[id];
        if (!c.live) return;
        const uint64_t which = rng_() % 3;
        if (which != 1) {
          ASSERT_OK(head_mgr_->Release(id, c.epoch));
        }
        if (which != 0) {
          ASSERT_OK(tail_mgr_->Release(id, c.epoch));
        }
        c.live = false;
        return;
      }
      case 8:
        if (rng_() % 3 == 0) {
          if (rng_() % 2 == 0) {
            ASSERT_OK(head_mgr_->StoreLiveSessions());
            ASSERT_OK(tail_mgr_->StoreLiveSessions());
          }
          Stop();
          return Start();
        }
        return Fork();
      default:
        if (convs_.size() > 12) convs_.erase(PickConv());
        return Fork();
    }
  }

  void CheckCounters() {
    for (SessionManager* m : {head_mgr_.get(), tail_mgr_.get()}) {
      SessionStats stats = m->stats();
      EXPECT_EQ(stats.store_failures, 0u) << stats.last_store_error;
    }
  }

  int steps_checked() const { return steps_checked_; }
  int unavailable() const { return unavailable_; }

 private:
  const std::string dir_;
  std::mt19937_64 rng_;
  const uint32_t block_tokens_;
  std::shared_ptr<const ReferenceModel> model_;
  std::unique_ptr<ReferenceShard> head_shard_, tail_shard_;
  CacheStack stack_;
  std::unique_ptr<SessionManager> head_mgr_, tail_mgr_;
  std::unique_ptr<KvBoundaryAdapter> head_, tail_;
  std::map<std::string, Conv> convs_;
  int next_id_ = 0;
  int steps_checked_ = 0;
  int unavailable_ = 0;
};

TEST(SessionPrefixCacheStress, RandomPipelineBranchesDecodeExactly) {
  const uint64_t seed = testing::TestSeed("SessionPrefixCacheStress.Pipeline");
  struct Case {
    const char* name;
    ModelConfig config;
    uint32_t block_tokens;
  };
  const Case cases[] = {
      {"windows of 6, 4-token blocks", testing::HybridModelConfig(), 4},
      {"WRGWRG, 6-token blocks", RecurrentHybridModelConfig(), 6},
  };
  const uint64_t ops = testing::Iterations(120, 5000);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    PipelineHarness h(dir.str() + "/tiers", seed, c.config, c.block_tokens);
    for (uint64_t i = 0; i < ops && !::testing::Test::HasFatalFailure(); ++i) {
      h.Op();
      h.CheckCounters();
    }
    std::printf("%s: %d steps checked, %d prefix-unavailable misses\n", c.name,
                h.steps_checked(), h.unavailable());
  }
}

}  // namespace
}  // namespace prefixkv
