// Runs the real `prefixkv demo --json` binary in a temporary data directory
// and checks what the demo claims: later turns reuse cached KV and compute
// little more than their new message, the turn after the restart comes from
// SSD, replies (tokens and logits) equal stateless greedy decode, and the tiers
// audit clean. Every check runs on both demo models: "sliding" (window and full
// attention) and "hybrid" (window, recurrent and full attention layers).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/support/test_util.h"
#include "tests/tools/cli_json.h"

namespace prefixkv {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;
};

CliRun RunCli(const std::string& args) {
  CliRun run;
  const std::string cmd = std::string(PREFIXKV_CLI) + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) run.out.append(buf, n);
  const int status = pclose(p);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

using testing::Count;
using testing::Objects;
using testing::Value;

constexpr uint64_t kBlockTokens = 16;  // what the demo reports as block_tokens

// One demo run per model, shared by that model's tests.
class DemoIntegration : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto it = runs_->find(GetParam());
    if (it == runs_->end()) {
      testing::TempDir dir;
      it = runs_
               ->emplace(GetParam(), RunCli("demo --json --model " + GetParam() +
                                            " --data-dir " + dir.str()))
               .first;
    }
    run_ = &it->second;
  }
  static void SetUpTestSuite() { runs_ = new std::map<std::string, CliRun>(); }
  static void TearDownTestSuite() {
    delete runs_;
    runs_ = nullptr;
  }
  static inline std::map<std::string, CliRun>* runs_ = nullptr;
  const CliRun* run_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Models, DemoIntegration, ::testing::Values("sliding", "hybrid"));

TEST_P(DemoIntegration, ExitsZeroWithParityAndACleanAudit) {
  ASSERT_TRUE(std::filesystem::exists(PREFIXKV_CLI)) << "build the prefixkv binary first";
  EXPECT_EQ(run_->exit_code, 0) << run_->out;
  // The top-level "parity" is the last one: it follows the per-turn ones.
  EXPECT_EQ(Value(run_->out, "parity", run_->out.rfind("\"parity\":")), "true")
      << run_->out;
  EXPECT_EQ(Value(run_->out, "audit_ok"), "true") << run_->out;
  EXPECT_EQ(Value(run_->out, "block_tokens"), std::to_string(kBlockTokens));
  EXPECT_EQ(Value(run_->out, "model"), "\"" + GetParam() + "\"");
  // Logits, not only tokens, on every turn and the restart.
  std::vector<std::string> turns = Objects(Value(run_->out, "turns"));
  turns.push_back(Value(run_->out, "restart"));
  for (const std::string& t : turns) EXPECT_EQ(Value(t, "logit_parity"), "true") << t;
}

TEST_P(DemoIntegration, TheHybridModelHasEveryLayerKindAndReusesAsMuchAsTheSlidingOne) {
  const std::string kinds = Value(run_->out, "layer_kinds");
  EXPECT_NE(kinds.find('W'), std::string::npos) << kinds;
  EXPECT_NE(kinds.find('G'), std::string::npos) << kinds;
  EXPECT_EQ(kinds.find('R') != std::string::npos, GetParam() == "hybrid") << kinds;
  // Every turn restores all but its new message (plus at most a block), so the
  // hit ratio over the turns is far from the 0% hybrid models get elsewhere.
  EXPECT_GT(std::stod(Value(run_->out, "hit_ratio")), 0.75) << run_->out;
}

TEST_P(DemoIntegration, EveryLaterTurnRestoresAndComputesOnlyItsNewTokensPlusABlock) {
  const std::vector<std::string> turns = Objects(Value(run_->out, "turns"));
  ASSERT_EQ(turns.size(), 8u) << run_->out;
  EXPECT_EQ(Count(turns[0], "computed_tokens"), Count(turns[0], "prompt_tokens"));
  for (size_t i = 1; i < turns.size(); ++i) {
    const uint64_t restored =
        Count(turns[i], "restored_hot_tokens") + Count(turns[i], "restored_ssd_tokens");
    EXPECT_GT(restored, 0u) << "turn " << i + 1 << ": " << turns[i];
    EXPECT_EQ(restored + Count(turns[i], "computed_tokens"),
              Count(turns[i], "prompt_tokens"))
        << turns[i];
    EXPECT_LE(Count(turns[i], "computed_tokens"),
              Count(turns[i], "new_tokens") + kBlockTokens)
        << "turn " << i + 1 << ": " << turns[i];
  }
}

TEST_P(DemoIntegration, BeforeTheRestartTurnsRestoreFromBothHotAndSpilledSsdBlocks) {
  uint64_t from_hot = 0;
  uint64_t from_ssd = 0;
  for (const std::string& t : Objects(Value(run_->out, "turns"))) {
    from_hot += Count(t, "restored_hot_tokens");
    from_ssd += Count(t, "restored_ssd_tokens");
  }
  EXPECT_GT(from_hot, 0u) << run_->out;
  EXPECT_GT(from_ssd, 0u) << "the hot budget should have spilled: " << run_->out;
  EXPECT_GT(Count(run_->out, "hot_evictions"), 0u);
}

TEST_P(DemoIntegration, TheTurnAfterTheRestartIsRestoredFromSsd) {
  const std::string restart = Value(run_->out, "restart");
  ASSERT_FALSE(restart.empty()) << run_->out;
  EXPECT_GT(Count(restart, "restored_ssd_tokens"), 0u) << restart;
  EXPECT_EQ(Count(restart, "restored_hot_tokens"), 0u) << "the hot tier starts empty";
  EXPECT_LE(Count(restart, "computed_tokens"),
            Count(restart, "new_tokens") + kBlockTokens);
  EXPECT_EQ(Value(restart, "parity"), "true");
}

}  // namespace
}  // namespace prefixkv
