// Randomized conversations for the session stress tests. Each conversation
// grows by turns (a user message of random tokens, then a few greedy decode
// steps) through a KvBoundaryAdapter over the hybrid reference model; a turn
// whose session was lost (released, or evicted by the TTL, the session cap or
// the RAM budget) is redone at a new epoch whose prefill restores what the
// prefix cache holds. Checked on the way: every prefill restores less than its
// prompt and computes the rest, its hot and SSD shares add up, and every
// finished reply equals the model's stateless greedy decode of its prompt.
// The test owns the tiers and the manager and picks which operation runs.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "tests/session/session_cache_util.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

struct ConversationShape {
  // A conversation longer than this starts over under a new id, so every
  // stateless check stays cheap.
  size_t retire_after_tokens = 160;
  // A user message has 1 to this many tokens.
  int max_message_tokens = 9;
  // Printed with a failed step (why no step may fail in this test).
  std::string step_failure_note;
};

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

// Not thread-safe: one test thread drives every conversation.
class ConversationDriver {
 public:
  ConversationDriver(uint64_t seed, ConversationShape shape, int conversations = 4)
      : shape_(std::move(shape)),
        rng_(seed),
        model_(SeedModel(HybridModelConfig())),
        shard_(FullShard(model_)),
        recipe_(RecipeOf(*shard_)) {
    for (int i = 0; i < conversations; ++i)
      conversations_.push_back({"c" + std::to_string(i)});
  }

  // The test's source of randomness too: one seed replays the whole run.
  std::mt19937_64& rng() { return rng_; }
  const KvCacheRecipe& recipe() const { return recipe_; }

  // Runs the conversations' steps through `manager` (a new one after a
  // restart). Detach() before the manager goes away: its sessions are lost.
  void Attach(SessionManager* manager) {
    manager_ = manager;
    adapter_ = std::make_unique<KvBoundaryAdapter>(shard_.get(), manager);
  }
  void Detach() {
    adapter_.reset();
    manager_ = nullptr;
    for (Conversation& c : conversations_) c.live = false;
  }

  // A conversation picked at random.
  Conversation& Pick() { return conversations_[rng_() % conversations_.size()]; }

  // The open turn's next decode step, or a new turn once its reply is complete.
  void Continue(Conversation& c) {
    if (static_cast<int>(c.reply.size()) <= c.reply_steps) return Decode(c);
    StartTurn(c, /*retry=*/false);
  }

  // A new user message: the open turn's reply is checked and a new session opens.
  void NewTurn(Conversation& c) { StartTurn(c, /*retry=*/false); }

  // One decode step of the open turn; the turn is redone if its session was lost.
  void Decode(Conversation& c) {
    if (c.prompt.empty() || static_cast<int>(c.reply.size()) > c.reply_steps) return;
    if (!c.live) return StartTurn(c, /*retry=*/true);
    auto out = adapter_->Decode(c.id, c.epoch, Tokens({c.text.back()}));
    ASSERT_OK(out) << shape_.step_failure_note;
    if (std::holds_alternative<CacheMiss>(*out)) {
      c.live = false;  // evicted meanwhile: redo the turn
      return StartTurn(c, /*retry=*/true);
    }
    const int32_t next = std::get<TailOutput>(*out).token_id;
    c.reply.push_back(next);
    c.text.push_back(next);
  }

  // Stores the open session; one evicted meanwhile was stored by its eviction.
  void EndTurn(const Conversation& c) {
    if (!c.live) return;
    auto stored = adapter_->EndTurn(c.id, c.epoch);
    ASSERT_TRUE(stored.ok() || IsKvCacheMiss(stored.status()))
        << stored.status().ToString();
  }

  void Release(Conversation& c) {
    if (c.live) {
      ASSERT_OK(manager_->Release(c.id, c.epoch));
    }
    c.live = false;
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
    Release(c);
    if (retry) {
      c.text = c.prompt;
    } else {
      CheckReply(c);
      if (c.text.size() > shape_.retire_after_tokens) {
        c.text.clear();
        c.id += "+";
        c.epoch = 0;
      }
      const int n =
          1 + static_cast<int>(rng_() % static_cast<uint64_t>(shape_.max_message_tokens));
      for (int i = 0; i < n; ++i) c.text.push_back(static_cast<int32_t>(rng_() % 48));
      c.prompt = c.text;
      c.reply_steps = 1 + static_cast<int>(rng_() % 5);
    }
    c.reply.clear();
    c.epoch++;
    StepStats stats;
    auto out = adapter_->Prefill(c.id, c.epoch, Tokens(c.prompt), &stats);
    ASSERT_OK(out) << shape_.step_failure_note;
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

  const ConversationShape shape_;
  std::mt19937_64 rng_;
  std::shared_ptr<const ReferenceModel> model_;
  std::unique_ptr<ReferenceShard> shard_;
  KvCacheRecipe recipe_;
  SessionManager* manager_ = nullptr;
  std::unique_ptr<KvBoundaryAdapter> adapter_;
  std::vector<Conversation> conversations_;
  int replies_checked_ = 0;
  int64_t tokens_restored_ = 0;
  int64_t tokens_restored_ssd_ = 0;
};

}  // namespace prefixkv::testing
