// SessionManager, part 1: construction, open, resolve and chunk validation.
// Part 2 (session_updates.cc) changes live sessions. See
// session_internal.h for the invariants.
#include "session_internal.h"

namespace prefixkv {

Status IncompatibleRecipeError(const KvCacheRecipe& want, const KvCacheRecipe& got) {
  return Status::InvalidArgument("incompatible kv cache recipe: manager holds " +
                                 want.fingerprint() + ", request carries " +
                                 got.fingerprint());
}

CacheMiss SeqLenMiss(const std::string& id, uint64_t epoch, int64_t expected,
                     int64_t held) {
  return {
      CacheMissReason::kSeqLenMismatch, id, epoch,
      "expected " + std::to_string(expected) + ", cache holds " + std::to_string(held)};
}

SessionManager::SessionManager(KvCacheRecipe recipe, SessionManagerOptions config,
                               Clock* clock)
    : recipe_(std::move(recipe)),
      config_(config),
      clock_(clock ? clock : Clock::System()),
      state_(std::make_unique<State>(config_)) {}

// The live sessions' bytes go back to the shared budget with them.
SessionManager::~SessionManager() {
  MutexLock lock(&state_->mu);
  state_->Refund(state_->total_bytes);
}

StatusOr<std::shared_ptr<Session>> SessionManager::MakeSession(
    const std::string& id, uint64_t epoch, std::vector<LayerKvCache> initial,
    std::vector<int32_t> initial_tokens) const {
  std::map<int, LayerKvCache> layers;
  int64_t seq_len = initial.empty() ? 0 : initial.front().length();
  for (LayerKvCache& cache : initial) {
    int layer = cache.layer();
    LayerKvGeometry want = recipe_.layer_geometry(layer);
    const LayerKvGeometry& got = cache.geometry();
    if (!recipe_.owns_layer(layer) || got.n_kv_heads != want.n_kv_heads ||
        got.head_dim != want.head_dim || got.window_tokens != want.window_tokens ||
        got.recurrent != want.recurrent) {
      return Status::InvalidArgument("initial layer " + std::to_string(layer) +
                                     " does not match the recipe " +
                                     recipe_.fingerprint());
    }
    if (cache.length() != seq_len) {
      return Status::InvalidArgument("initial layers disagree in length");
    }
    if (!layers.emplace(layer, std::move(cache)).second) {
      return Status::InvalidArgument("initial layer " + std::to_string(layer) +
                                     " given twice");
    }
  }
  if (!initial.empty() && layers.size() != recipe_.owned_layers().size()) {
    return Status::InvalidArgument("initial layers must cover every owned layer");
  }
  for (int layer : recipe_.owned_layers()) {
    layers.try_emplace(layer, recipe_.layer_geometry(layer));
  }
  bool tokens_known = initial_tokens.size() == static_cast<size_t>(seq_len);
  if (!initial_tokens.empty() && !tokens_known) {
    return Status::InvalidArgument(
        "initial tokens (" + std::to_string(initial_tokens.size()) +
        ") do not match the initial length " + std::to_string(seq_len));
  }
  auto session = std::make_shared<Session>(id, epoch, recipe_.owned_layers(),
                                           std::move(layers), seq_len);
  {
    WriterLock lock(&session->state_->mu);  // not shared yet; the lock states the rule
    session->state_->tokens = std::move(initial_tokens);
    session->state_->tokens_known = tokens_known;
  }
  return session;
}

StatusOr<std::shared_ptr<Session>> SessionManager::Open(const std::string& id,
                                                        uint64_t epoch,
                                                        SessionOpenOptions options) {
  return OpenCounted(id, epoch, std::move(options), OpenedFrom{});
}

StatusOr<std::shared_ptr<Session>> SessionManager::OpenCounted(const std::string& id,
                                                               uint64_t epoch,
                                                               SessionOpenOptions options,
                                                               OpenedFrom from) {
  StoreRemovedOnExit store_removed(this);
  if (options.recipe && !recipe_.is_compatible(*options.recipe)) {
    return IncompatibleRecipeError(recipe_, *options.recipe);
  }
  // LayerKvCache holds float32: a session of another KV dtype would hold (and
  // store) float32 bytes under a recipe, charge and namespace that say otherwise.
  if (recipe_.kv_dtype() != DType::kFloat32) {
    return Status::InvalidArgument(
        "the session manager holds float32 KV; a recipe of KV dtype " +
        std::string(DTypeName(recipe_.kv_dtype())) + " is refused");
  }
  bool prefilled = !options.initial_layers.empty();
  PKV_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                       MakeSession(id, epoch, std::move(options.initial_layers),
                                   std::move(options.initial_tokens)));
  const uint64_t bytes = session->payload_bytes();
  MemoryCharge* const memory = config_.memory.get();
  const uint64_t limit = memory != nullptr ? memory->limit_bytes() : config_.budget_bytes;
  State& s = *state_;
  uint64_t now = 0;
  std::shared_ptr<Session> already_open;
  // Under s.mu: the checks a new session must pass; sets `already_open` when
  // the session is open at this epoch (returned as it is).
  auto check = [&]() REQUIRES(s.mu) -> Status {
    now = clock_->NowNanos();
    s.SweepExpired(now, TtlNanos(config_.ttl_ms), config_.max_tombstones);
    PKV_RETURN_IF_ERROR(s.CheckEpoch(id, epoch));
    // Checked before superseding anything: a refused open changes nothing.
    if (limit > 0 && bytes > limit) {
      return Status::NoSpace("kv budget exceeded: session '" + id + "' needs " +
                             std::to_string(bytes) + " bytes, budget is " +
                             std::to_string(limit));
    }
    auto it = s.live.find(id);
    if (it == s.live.end() || it->second.session->route_epoch() != epoch) {
      return Status::OK();
    }
    if (prefilled) {
      return Status::InvalidArgument("session '" + id + "' is already open at epoch " +
                                     std::to_string(epoch));
    }
    s.Touch(it->second, now);
    already_open = it->second.session;
    return Status::OK();
  };
  // Under s.mu, after check(): records the new session (and what `pending`
  // charged for it), or returns the one already open.
  auto commit = [&](PendingCharge* pending)
                    REQUIRES(s.mu) -> StatusOr<std::shared_ptr<Session>> {
    if (already_open != nullptr) {
      if (options.created != nullptr) *options.created = false;
      return already_open;
    }
    // A newer epoch supersedes; the old state is stored like a released one.
    s.Supersede(id, config_.max_tombstones);
    s.tombstones.erase(id);
    if (config_.max_sessions > 0) {
      s.EvictLruUntil(id, config_.max_sessions - 1, UINT64_MAX, config_.max_tombstones);
    }
    if (memory == nullptr && config_.budget_bytes > 0) {
      // check() refused bytes > budget_bytes.
      s.EvictLruUntil(id, SIZE_MAX, config_.budget_bytes - bytes, config_.max_tombstones);
    }
    s.lru.push_front(id);
    s.live[id] = State::Entry{session, bytes, now, s.lru.begin(), from};
    s.total_bytes += bytes;
    if (pending != nullptr) pending->Commit();
    s.CountOpen(from, +1);
    if (options.created != nullptr) *options.created = true;
    return session;
  };
  MutexLock lock(&s.mu);
  PKV_RETURN_IF_ERROR(check());
  if (already_open == nullptr && memory != nullptr && bytes > 0) {
    // A shared budget is charged outside s.mu (it may wait for the SSD tier's
    // write-back), then everything is checked again. charge_mu is held until
    // the table records the charge or it is refunded.
    lock.Unlock();
    MutexLock charging(&s.charge_mu);
    PKV_RETURN_IF_ERROR(s.ChargeMemory(config_, id, bytes, &epoch));
    PendingCharge pending(memory, bytes);
    lock.Lock();
    PKV_RETURN_IF_ERROR(check());
    return commit(&pending);
  }
  return commit(nullptr);
}

StatusOr<SessionOrMiss> SessionManager::Resolve(const std::string& id, uint64_t epoch,
                                                const KvCacheRecipe* recipe) {
  StoreRemovedOnExit store_removed(this);
  if (recipe && !recipe_.is_compatible(*recipe))
    return IncompatibleRecipeError(recipe_, *recipe);
  State& s = *state_;
  MutexLock lock(&s.mu);
  uint64_t now = clock_->NowNanos();
  s.SweepExpired(now, TtlNanos(config_.ttl_ms), config_.max_tombstones);
  PKV_RETURN_IF_ERROR(s.CheckEpoch(id, epoch));
  State::Lookup found = s.Find(id, epoch);
  if (found.entry == nullptr) return SessionOrMiss(found.miss);
  s.Touch(*found.entry, now);
  return SessionOrMiss(found.entry->session);
}

StatusOr<std::shared_ptr<Session>> SessionManager::Get(const std::string& id,
                                                       uint64_t epoch) {
  PKV_ASSIGN_OR_RETURN(SessionOrMiss found, Resolve(id, epoch));
  if (auto* miss = std::get_if<CacheMiss>(&found)) {
    return Status::NotFound("kv cache miss (" +
                            std::string(CacheMissReasonName(miss->reason)) +
                            "): session '" + id + "' epoch " + std::to_string(epoch));
  }
  return std::get<std::shared_ptr<Session>>(std::move(found));
}

Status SessionManager::CheckChunks(const KvChunks& chunks, int64_t* tokens) const {
  std::vector<int> owned = recipe_.owned_layers();
  if (chunks.size() != owned.size() || chunks.begin()->first != owned.front() ||
      chunks.rbegin()->first != owned.back()) {
    return Status::InvalidArgument("append must carry KV for exactly layers " +
                                   std::to_string(owned.front()) + ".." +
                                   std::to_string(owned.back()));
  }
  *tokens = -1;
  for (const auto& [layer, chunk] : chunks) {
    PKV_RETURN_IF_ERROR(
        LayerKvCache(recipe_.layer_geometry(layer)).CheckChunk(chunk.keys, chunk.values));
    if (*tokens >= 0 && chunk.keys.dim(1) != *tokens) {
      return Status::InvalidArgument("append layers disagree in token count");
    }
    *tokens = chunk.keys.dim(1);
  }
  return Status::OK();
}

}  // namespace prefixkv
