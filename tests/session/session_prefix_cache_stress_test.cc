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

}  // namespace
}  // namespace prefixkv
