// Helpers for the tests of sessions on a PrefixCache: a hybrid sliding-window
// reference model, a real hot tier over an SSD tier under a PrefixCache, a
// manager bound to it, and conversation turns run through a KvBoundaryAdapter
// (one thread, or racing other threads).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/shared_hot_budget.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/boundary_adapter.h"
#include "prefixkv/engine.h"
#include "prefixkv/session.h"
#include "tests/session/session_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

inline constexpr uint32_t kSessionBlockTokens = 4;

// 6 layers, GQA (4 query heads over 2 KV heads), 6-token windows on every layer
// but each third: rotating state that wraps within a few blocks.
inline ModelConfig HybridModelConfig() {
  ModelConfig c;
  c.n_kv_heads = 2;
  c.sliding_window_tokens = 6;
  c.global_layer_every = 3;
  return c;
}

// HybridModelConfig with every kind of layer: 6-token windows (W), recurrent
// layers (R: a conv kernel of 4 and a 4 x 8 x 8 state) and full attention (G).
inline ModelConfig RecurrentHybridModelConfig() {
  ModelConfig c = HybridModelConfig();
  c.layer_kinds = "WRGWRG";
  return c;
}

// An engine over `dir`: a hot tier spilling to the SSD tier, no promotion on
// SSD hits. Namespaces register with the partial tail on (sliding windows).
// `sessions` charges live sessions' KV to the same RAM budget (Bind).
struct CacheStack {
  std::unique_ptr<Engine> engine;
  SharedHotBudget* budget = nullptr;
  SsdTier* ssd = nullptr;
  std::shared_ptr<MemoryCharge> sessions;  // the budget owner "sessions"

  void Open(const std::string& dir, uint64_t hot_capacity_bytes = 1 << 20) {
    EngineOptions o;
    o.data_dir = dir;
    o.hot_capacity_bytes = hot_capacity_bytes;
    o.promote_on_ssd_hit = false;
    o.log = [](std::string_view) {};
    auto opened = Engine::Open(o);
    ASSERT_OK(opened);
    engine = std::move(opened).value();
    budget = EngineHotBudget(*engine);
    ssd = EngineSsdTier(*engine);
    auto charge = engine->OpenMemoryCharge("sessions");
    ASSERT_OK(charge);
    sessions = std::move(charge).value();
  }

  // `config` restoring from and storing to `ns`, its sessions' KV charged to
  // the engine's RAM budget alongside the cached blocks.
  SessionManagerOptions Bind(SessionManagerOptions config, Namespace ns) const {
    config.prefix_cache = {engine.get(), ns};
    config.memory = sessions;
    return config;
  }

  // The namespace of a manager's owned layers.
  Namespace Register(const KvCacheRecipe& recipe, const std::string& model = "hybrid") {
    auto ns =
        engine->RegisterModel(SessionNamespaceSpec(recipe, model, kSessionBlockTokens),
                              {.store_partial_tail = true});
    EXPECT_OK(ns);
    return ns.ok() ? *ns : Namespace{};
  }

  // Flushes, then audits the hot budget and the SSD tier: every finding fails
  // the test.
  void AuditTiers() {
    ASSERT_OK(engine->Flush());
    std::vector<AuditFinding> findings;
    ASSERT_OK(budget->Audit(&findings));
    ASSERT_OK(ssd->Audit(&findings));
    for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
  }

  // Flushes and closes everything (a clean shutdown).
  void Close() {
    if (engine) {
      Status closed = engine->Close();
      EXPECT_OK(closed);
    }
    engine.reset();
    budget = nullptr;
    ssd = nullptr;
    sessions.reset();
  }
};

// A full-model shard, its manager bound to a namespace of `stack`'s cache
// (CacheStack::Bind: restoring from and storing to it, the sessions' KV
// charged to the engine's RAM budget).
struct FullModelSessions {
  std::shared_ptr<const ReferenceModel> model;
  std::unique_ptr<ReferenceShard> shard;
  std::unique_ptr<SessionManager> manager;
  std::unique_ptr<KvBoundaryAdapter> adapter;

  FullModelSessions(CacheStack& stack, SessionManagerOptions config = {},
                    Clock* clock = nullptr,
                    ModelConfig model_config = HybridModelConfig())
      : model(SeedModel(model_config)), shard(FullShard(model)) {
    KvCacheRecipe recipe = RecipeOf(*shard);
    config = stack.Bind(config, stack.Register(recipe));
    manager = std::make_unique<SessionManager>(recipe, config, clock);
    adapter = std::make_unique<KvBoundaryAdapter>(shard.get(), manager.get());
  }
};

// Deterministic user message `turn` of 5..9 tokens.
inline std::vector<int32_t> Message(int turn, int64_t vocab) {
  std::vector<int32_t> msg(static_cast<size_t>(5 + (turn * 3) % 5));
  for (size_t i = 0; i < msg.size(); ++i)
    msg[i] = static_cast<int32_t>((turn * 31 + static_cast<int>(i) * 7 + 3) % vocab);
  return msg;
}

struct TurnResult {
  std::vector<int32_t> reply;
  StepStats prefill;  // what the opening Prefill restored and computed
};

// One turn on a full-model adapter: Prefill `prompt` (the whole conversation
// so far: the session is expected to be new) and decode `n_reply` tokens,
// running the last one too so the session covers prompt + reply.
inline TurnResult RunTurn(KvBoundaryAdapter& adapter, const std::string& sid,
                          uint64_t epoch, const std::vector<int32_t>& prompt,
                          int n_reply) {
  TurnResult r;
  TailOutput out = ExpectTail(adapter.Prefill(sid, epoch, Tokens(prompt), &r.prefill));
  for (int i = 0; i < n_reply; ++i) {
    r.reply.push_back(out.token_id);
    out = ExpectTail(adapter.Decode(sid, epoch, Tokens({out.token_id})));
  }
  return r;
}

// What the turns of ConcurrentTurn came to, counted across threads.
struct TurnCounts {
  std::atomic<int> mismatches{0};  // a reply other than the stateless decode
  std::atomic<int> gave_up{0};     // evicted mid-turn on every attempt: not checked
  std::atomic<int> errors{0};      // a step failed (printed)
};

// One turn of `n_reply` tokens on `prompt` (the whole conversation so far)
// while other threads step, evict and store sessions of the same manager: a
// new epoch per attempt (++*epoch), so an eviction mid-turn makes the turn
// retry from the prefix cache, at most 8 attempts. A complete reply is checked
// against the stateless greedy decode of `prompt`. Returns the reply, short
// when the turn was given up. Thread-safe for distinct `sid`s.
inline std::vector<int32_t> ConcurrentTurn(KvBoundaryAdapter& adapter,
                                           const ReferenceModel& model,
                                           const std::string& sid, uint64_t* epoch,
                                           const std::vector<int32_t>& prompt,
                                           size_t n_reply, TurnCounts* counts) {
  std::vector<int32_t> reply;
  for (int attempt = 0; attempt < 8 && reply.size() < n_reply; ++attempt) {
    ++*epoch;
    reply.clear();
    auto out = adapter.Prefill(sid, *epoch, Tokens(prompt));
    while (out.ok() && std::holds_alternative<TailOutput>(*out)) {
      reply.push_back(std::get<TailOutput>(*out).token_id);
      if (reply.size() == n_reply) break;
      out = adapter.Decode(sid, *epoch, Tokens({reply.back()}));
    }
    if (!out.ok()) {
      std::printf("%s: %s\n", sid.c_str(), out.status().ToString().c_str());
      counts->errors++;
    }
  }
  if (reply.size() < n_reply) {
    counts->gave_up++;
  } else if (reply != model.StatelessGreedy(prompt, static_cast<int>(n_reply)).value()) {
    counts->mismatches++;
  }
  return reply;
}

}  // namespace prefixkv::testing
