// `prefixkv demo`: the end-to-end walk through of demo_conversation.h, a
// conversation on the reference model whose KV is stored in and restored from a
// real engine (hot RAM spilling to SSD, then a restart). Also the one-turn entry
// point the two-node demo's child processes call (RunDemoNodeTurn), so both
// demos run the same model, messages and checks. Every reply is compared with
// the model's stateless greedy decode of the same prompt: the demo checks that
// restored KV answers as recomputing everything would, not only that it runs.
#include "tools/cli/demo_conversation.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <variant>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/boundary_adapter.h"
#include "prefixkv/clock.h"
#include "prefixkv/engine.h"
#include "prefixkv/kv_recipe.h"
#include "prefixkv/layer_kv_cache.h"
#include "prefixkv/namespace_spec.h"
#include "prefixkv/reference_model.h"
#include "prefixkv/session.h"

namespace prefixkv::cli {
namespace {

// Small enough to run in seconds, big enough to have real structure: 8 layers
// of which layers 3 and 7 are global and the rest use a 32-token window; the
// hybrid model turns layers 1 and 5 into recurrent layers.
ModelConfig DemoModel(const std::string& layer_kinds = "") {
  ModelConfig c;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.n_layers = 8;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.intermediate_size = 128;
  c.seed = 20261202;
  c.sliding_window_tokens = 32;
  c.global_layer_every = 4;
  c.layer_kinds = layer_kinds;
  return c;
}

constexpr const char* kHybridKinds = "WRWGWRWG";

// One letter per layer of `model`: R recurrent, W windowed, G full attention.
std::string KindsOf(const ReferenceModel& model) {
  std::string kinds;
  for (int l = 0; l < model.config().n_layers; ++l) {
    kinds += model.IsRecurrentLayer(l) ? 'R' : model.LayerWindowTokens(l) > 0 ? 'W' : 'G';
  }
  return kinds;
}

constexpr uint32_t kBlockTokens = 16;
constexpr int kReplyTokens = 12;
constexpr int kMaxMessageTokens = 53;  // UserMessage: 30..53
// About 80 blocks' worth of KV would be needed to keep the whole conversation
// hot; the model's blocks may hold this fraction of the RAM budget (its
// quota), so the oldest blocks spill to SSD.
constexpr uint64_t kHotCapacityBytes = 96 * 1024;

// The RAM budget also holds the live session's KV (SessionManagerOptions::memory):
// one session is live at a time, holding at most the whole conversation. The
// budget gets that much room on top of the blocks' quota, so a session never
// pushes blocks out and the table shows what the prefix cache alone did.
uint64_t MaxSessionBytes(const KvCacheRecipe& recipe, int turns) {
  const int64_t tokens =
      static_cast<int64_t>(turns + 1) * (kMaxMessageTokens + kReplyTokens);
  uint64_t bytes = 0;
  for (int layer : recipe.owned_layers()) {
    bytes += LayerKvCache(recipe.layer_geometry(layer)).PayloadBytesAt(tokens);
  }
  return bytes;
}

// Deterministic user messages of 30..53 tokens (splitmix64 stream).
std::vector<int32_t> UserMessage(int turn, int64_t vocab) {
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(turn + 1);
  auto next = [&x] {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<int32_t> msg(30 + next() % 24);
  for (int32_t& t : msg) t = static_cast<int32_t>(next() % static_cast<uint64_t>(vocab));
  return msg;
}

// The engine over `dir`: one RAM budget of kHotCapacityBytes for the demo
// model's blocks (its quota; they spill to the SSD tier) plus `session_bytes`
// for the live session's KV (the owner "sessions"), and the demo model's
// namespace (partial tail on: sliding windows). With `remote`, its remote tier
// (--nodes 2).
struct DemoTiers {
  std::unique_ptr<Engine> engine;
  Namespace ns;
  std::shared_ptr<MemoryCharge> sessions;

  Status Open(const std::string& dir, const NamespaceSpec& spec, uint64_t session_bytes,
              const EngineOptions* remote = nullptr) {
    EngineOptions o;
    if (remote != nullptr) {
      o.remote = remote->remote;
      o.remote_write = remote->remote_write;
      o.remote_limits = remote->remote_limits;
      o.remote_timeout_ms = remote->remote_timeout_ms;
    }
    o.data_dir = dir;
    o.hot_capacity_bytes = kHotCapacityBytes + session_bytes;
    // No promotion on SSD hits: a restore reads the conversation oldest block
    // first, and promoting those would push out the newer blocks still hot
    // before the same restore reaches them (a scan evicting its own tail).
    o.promote_on_ssd_hit = false;
    o.log = [](std::string_view) {};  // the demo reports what matters itself
    EngineHooks hooks;
    hooks.configure_ssd = [](SsdTierOptions& ssd) { ssd.write_buffer_bytes = 4 << 20; };
    PKV_ASSIGN_OR_RETURN(engine, OpenEngine(o, std::move(hooks)));
    PKV_ASSIGN_OR_RETURN(
        ns, engine->RegisterModel(spec, {.store_partial_tail = true,
                                         .hot_quota_bytes = kHotCapacityBytes}));
    PKV_ASSIGN_OR_RETURN(sessions, engine->OpenMemoryCharge("sessions"));
    return Status::OK();
  }

  Status Close() {
    Status closed = engine != nullptr ? engine->Close() : Status::OK();
    engine.reset();
    sessions.reset();
    return closed;
  }

  // The engine's audit (it flushes first), as "what: detail" lines.
  Status Audit(std::vector<std::string>* findings) {
    PKV_ASSIGN_OR_RETURN(EngineAudit audit, engine->Audit());
    for (const AuditFinding& f : audit.findings)
      findings->push_back(f.what + ": " + f.detail);
    for (const BlockKey& k : audit.orphans) findings->push_back("orphan " + k.ToHex());
    return Status::OK();
  }
};

class DemoConversation {
 public:
  // `layer_kinds` empty: the sliding-window model.
  static StatusOr<std::unique_ptr<DemoConversation>> Create(
      const std::string& layer_kinds = "") {
    PKV_ASSIGN_OR_RETURN(std::shared_ptr<const ReferenceModel> model,
                         ReferenceModel::Create(DemoModel(layer_kinds)));
    const int last = model->config().n_layers - 1;
    PKV_ASSIGN_OR_RETURN(std::unique_ptr<ReferenceShard> shard,
                         ReferenceShard::Create(model, 0, last));
    PKV_ASSIGN_OR_RETURN(KvCacheRecipe recipe, KvRecipeFor(*shard));
    return std::unique_ptr<DemoConversation>(
        new DemoConversation(std::move(model), std::move(shard), std::move(recipe)));
  }

  // One namespace for the whole model: "RotatingKVCache" for the windowed
  // layers, "ArraysCache" for the recurrent ones, "KVCache" for the global ones.
  NamespaceSpec Spec() const {
    const bool hybrid = !model_->config().layer_kinds.empty();
    return SessionNamespaceSpec(recipe_, hybrid ? "demo-hybrid" : "demo-llama",
                                kBlockTokens);
  }

  std::string LayerKinds() const { return KindsOf(*model_); }

  // The RAM the demo's live session may need (DemoTiers::Open).
  uint64_t SessionRoomBytes(int turns) const { return MaxSessionBytes(recipe_, turns); }

  // A session manager (and its adapter) whose sessions restore from and are
  // stored to `tiers`' prefix cache and are charged to its RAM budget: what a
  // server process holds. A restart binds a new one, as a new process would.
  void Bind(DemoTiers& tiers) {
    adapter_.reset();
    manager_.reset();
    SessionManagerOptions config;
    config.prefix_cache = {tiers.engine.get(), tiers.ns};
    config.memory = tiers.sessions;
    manager_ = std::make_unique<SessionManager>(recipe_, config);
    adapter_ = std::make_unique<KvBoundaryAdapter>(shard_.get(), manager_.get());
  }

  // Continues `conversation` (another process served its turns: --nodes 2).
  void SetConversation(std::vector<int32_t> conversation) {
    conversation_ = std::move(conversation);
  }

  // Serve(), then the reply's parity with the model's stateless greedy decode:
  // every reply token, and the logits it was picked from, bit for bit.
  StatusOr<DemoTurn> Turn(int turn) {
    std::vector<int32_t> reply;
    std::vector<std::vector<float>> logits;
    PKV_ASSIGN_OR_RETURN(DemoTurn out, Serve(turn, &reply, &logits));
    // The conversation is now the prompt followed by the reply.
    out.parity = reply.size() == kReplyTokens && logits.size() == reply.size();
    out.logit_parity = out.parity;
    for (size_t i = 0; i < reply.size() && out.parity; ++i) {
      const std::span<const int32_t> prefix(conversation_.data(), out.prompt_tokens + i);
      PKV_ASSIGN_OR_RETURN(std::vector<float> stateless, model_->NextTokenLogits(prefix));
      out.parity = ArgMax(stateless) == reply[i];
      out.logit_parity = out.logit_parity && stateless.size() == logits[i].size() &&
                         std::memcmp(stateless.data(), logits[i].data(),
                                     stateless.size() * sizeof(float)) == 0;
    }
    return out;
  }

  // One turn: appends `turn`'s user message and serves the whole conversation
  // as a new session. Its Prefill restores the cached prefix (the previous
  // turns, hot, from SSD or remote) and computes only the rest; the reply is
  // decoded greedily into `reply`; EndTurn stores the session's blocks (partial
  // tail on, so the sliding-window state is kept at the exact end) and the
  // session is released. Parity is left to the caller; `logits_out` (optional)
  // gets the logits each reply token was picked from.
  StatusOr<DemoTurn> Serve(int turn, std::vector<int32_t>* reply_out,
                           std::vector<std::vector<float>>* logits_out = nullptr) {
    const std::vector<int32_t> msg = UserMessage(turn, model_->config().vocab_size);
    conversation_.insert(conversation_.end(), msg.begin(), msg.end());
    const std::vector<int32_t> prompt = conversation_;
    DemoTurn out;
    out.prompt_tokens = prompt.size();
    out.new_tokens = msg.size();
    const uint64_t start_ns = Clock::System()->NowNanos();

    // One session epoch per turn (a released session's epoch may not be reused).
    const uint64_t epoch = static_cast<uint64_t>(turn);
    StepInput step;
    step.token_ids = prompt;
    StepStats prefill;
    std::vector<std::vector<float>> logits(1);
    PKV_ASSIGN_OR_RETURN(int32_t next,
                         Step(/*prefill=*/true, epoch, step, &prefill, &logits.back()));
    out.restored_hot_tokens = static_cast<uint64_t>(prefill.restore.restored_hot_tokens);
    out.restored_ssd_tokens = static_cast<uint64_t>(prefill.restore.restored_ssd_tokens);
    out.restored_remote_tokens =
        static_cast<uint64_t>(prefill.restore.restored_remote_tokens);
    out.computed_tokens = static_cast<uint64_t>(prefill.computed_tokens);
    std::vector<int32_t> reply;
    while (true) {
      reply.push_back(next);
      conversation_.push_back(next);
      // The last reply token also runs so the stored caches cover it.
      step.token_ids = {next};
      step.expected_seq_len = static_cast<int64_t>(conversation_.size()) - 1;
      logits.emplace_back();
      PKV_ASSIGN_OR_RETURN(next,
                           Step(/*prefill=*/false, epoch, step, nullptr, &logits.back()));
      if (reply.size() == kReplyTokens) break;
    }
    logits.pop_back();  // the step after the last reply token picked nothing
    PKV_ASSIGN_OR_RETURN(SessionStoreResult stored, adapter_->EndTurn(kSession, epoch));
    PKV_RETURN_IF_ERROR(manager_->Release(kSession, epoch).status());
    if (stored.stored_tokens != static_cast<int64_t>(conversation_.size())) {
      return Status::Internal("stored " + std::to_string(stored.stored_tokens) +
                              " of the conversation's " +
                              std::to_string(conversation_.size()) + " tokens");
    }
    out.seconds = static_cast<double>(Clock::System()->NowNanos() - start_ns) / 1e9;
    out.reply_tokens = reply.size();
    *reply_out = std::move(reply);
    if (logits_out != nullptr) *logits_out = std::move(logits);
    return out;
  }

 private:
  static constexpr const char* kSession = "demo-conversation";

  DemoConversation(std::shared_ptr<const ReferenceModel> model,
                   std::unique_ptr<ReferenceShard> shard, KvCacheRecipe recipe)
      : model_(std::move(model)), shard_(std::move(shard)), recipe_(std::move(recipe)) {}

  // One adapter step of the head+tail shard: the greedy next token (and its
  // logits into `logits`).
  StatusOr<int32_t> Step(bool prefill, uint64_t epoch, const StepInput& input,
                         StepStats* stats, std::vector<float>* logits) {
    PKV_ASSIGN_OR_RETURN(StepOutput output,
                         prefill ? adapter_->Prefill(kSession, epoch, input, stats)
                                 : adapter_->Decode(kSession, epoch, input, stats));
    if (TailOutput* tail = std::get_if<TailOutput>(&output)) {
      *logits = std::move(tail->logits);
      return tail->token_id;
    }
    return Status::Internal(std::holds_alternative<CacheMiss>(output)
                                ? "the session's KV went missing mid-turn"
                                : "the full-model shard returned a boundary bundle");
  }

  std::shared_ptr<const ReferenceModel> model_;
  std::unique_ptr<ReferenceShard> shard_;
  KvCacheRecipe recipe_;
  std::unique_ptr<SessionManager> manager_;
  std::unique_ptr<KvBoundaryAdapter> adapter_;
  std::vector<int32_t> conversation_;
};

// Restored tokens over prompt tokens across `turns`.
double HitRatio(const std::vector<DemoTurn>& turns) {
  uint64_t restored = 0;
  uint64_t prompt = 0;
  for (const DemoTurn& t : turns) {
    restored += t.restored_hot_tokens + t.restored_ssd_tokens + t.restored_remote_tokens;
    prompt += t.prompt_tokens;
  }
  return prompt == 0 ? 0 : static_cast<double>(restored) / static_cast<double>(prompt);
}

}  // namespace

StatusOr<std::string> DemoLayerKinds(const std::string& model) {
  if (model == "sliding") {
    PKV_ASSIGN_OR_RETURN(std::shared_ptr<const ReferenceModel> m,
                         ReferenceModel::Create(DemoModel()));
    return KindsOf(*m);
  }
  if (model == "hybrid") return std::string(kHybridKinds);
  return Status::InvalidArgument("unknown demo model '" + model +
                                 "' (sliding or hybrid)");
}

namespace {

// The ModelConfig::layer_kinds a demo model is built with ("" for the
// sliding-window model, whose kinds follow its window rule).
StatusOr<std::string> CreateKinds(const std::string& model) {
  PKV_ASSIGN_OR_RETURN(const std::string kinds, DemoLayerKinds(model));
  return model == "hybrid" ? kinds : std::string();
}

}  // namespace

StatusOr<DemoReport> RunDemoConversation(const DemoOptions& options) {
  PKV_ASSIGN_OR_RETURN(const std::string kinds, CreateKinds(options.model));
  std::error_code ec;
  std::filesystem::remove_all(options.dir, ec);
  if (ec) return Status::IOError("cannot wipe " + options.dir + ": " + ec.message());
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return Status::IOError("cannot create " + options.dir + ": " + ec.message());

  PKV_ASSIGN_OR_RETURN(std::unique_ptr<DemoConversation> conv,
                       DemoConversation::Create(kinds));
  const NamespaceSpec spec = conv->Spec();
  DemoReport report;
  report.model = options.model;
  report.layer_kinds = conv->LayerKinds();  // of the model that ran
  report.block_tokens = kBlockTokens;
  report.hot_capacity_bytes = kHotCapacityBytes;
  report.parity = true;

  // One session per turn: the restart turn holds the longest conversation.
  const uint64_t session_bytes = conv->SessionRoomBytes(options.turns);
  DemoTiers tiers;
  PKV_RETURN_IF_ERROR(tiers.Open(options.dir, spec, session_bytes));
  conv->Bind(tiers);
  for (int t = 0; t < options.turns; ++t) {
    PKV_ASSIGN_OR_RETURN(DemoTurn turn, conv->Turn(t));
    report.parity = report.parity && turn.parity && turn.logit_parity;
    report.turns.push_back(turn);
  }
  report.hot_evictions = tiers.engine->Stats().hot.evictions;
  PKV_RETURN_IF_ERROR(tiers.Close());

  PKV_RETURN_IF_ERROR(tiers.Open(options.dir, spec, session_bytes));  // the restart
  conv->Bind(tiers);
  report.ssd_blocks_after_restart = EngineSsdTier(*tiers.engine)->open_report().blocks;
  PKV_ASSIGN_OR_RETURN(report.restart, conv->Turn(options.turns));
  report.parity = report.parity && report.restart.parity && report.restart.logit_parity;
  std::vector<DemoTurn> all = report.turns;
  all.push_back(report.restart);
  report.hit_ratio = HitRatio(all);
  PKV_RETURN_IF_ERROR(tiers.Audit(&report.audit_findings));
  report.audit_ok = report.audit_findings.empty();
  PKV_RETURN_IF_ERROR(tiers.Close());
  return report;
}

uint32_t DemoBlockTokens() { return kBlockTokens; }
uint64_t DemoHotCapacityBytes() { return kHotCapacityBytes; }

StatusOr<DemoNodeTurn> RunDemoNodeTurn(const DemoNodeTurnOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return Status::IOError("cannot create " + options.dir + ": " + ec.message());
  PKV_ASSIGN_OR_RETURN(const std::string kinds, CreateKinds(options.model));
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<DemoConversation> conv,
                       DemoConversation::Create(kinds));
  DemoTiers tiers;
  PKV_RETURN_IF_ERROR(tiers.Open(options.dir, conv->Spec(),
                                 conv->SessionRoomBytes(options.turns), &options.remote));
  conv->Bind(tiers);
  conv->SetConversation(options.conversation);
  DemoNodeTurn out;
  StatusOr<DemoTurn> turn = conv->Serve(options.turn, &out.reply);
  // Flush waits for the remote write queue: the next node reads what this
  // one stored.
  Status flushed = turn.ok() ? tiers.engine->Flush() : Status::OK();
  if (tiers.engine != nullptr) out.remote = tiers.engine->Stats().remote;
  Status closed = tiers.Close();
  PKV_RETURN_IF_ERROR(turn.status());
  PKV_RETURN_IF_ERROR(flushed);
  PKV_RETURN_IF_ERROR(closed);
  out.turn = *turn;
  return out;
}

std::vector<int32_t> DemoPrompt(std::span<const int32_t> conversation, int turn) {
  std::vector<int32_t> prompt(conversation.begin(), conversation.end());
  const std::vector<int32_t> msg = UserMessage(turn, DemoModel().vocab_size);
  prompt.insert(prompt.end(), msg.begin(), msg.end());
  return prompt;
}

StatusOr<std::vector<int32_t>> DemoStatelessReply(std::span<const int32_t> prompt,
                                                  const std::string& model_name) {
  PKV_ASSIGN_OR_RETURN(const std::string kinds, CreateKinds(model_name));
  PKV_ASSIGN_OR_RETURN(std::shared_ptr<const ReferenceModel> model,
                       ReferenceModel::Create(DemoModel(kinds)));
  return model->StatelessGreedy(prompt, kReplyTokens);
}

}  // namespace prefixkv::cli
