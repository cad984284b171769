// SessionManager, part 3: the bridge to the Engine's prefix cache (docs/session.md).
//
// Restore: Match + Restore the session's tokens, rebuild one LayerKvCache per
// owned layer from the restored LayerStates and open the session with them.
// Store: export the session's layers under its shared lock, turn them into
// LayerStates (namespace layer i = owned layer start + i) and Engine::Store
// them with the recorded tokens. Stores never run under a manager or session
// lock: removed sessions wait in State::removed until the public call that
// removed them returns (StoreRemovedOnExit).
#include "prefixkv/namespace_spec.h"
#include "session_internal.h"

namespace prefixkv {
namespace {

// A namespace of another layer count is not this shard's (every restore of it
// fails alike): an error, where a tip's refused state only means restore less.
Status CheckHoldsTheOwnedLayers(const KvCacheRecipe& recipe,
                                const RestoreResult& restored) {
  const size_t owned = recipe.owned_layers().size();
  if (restored.layers.size() == owned) return Status::OK();
  return Status::InvalidArgument("the prefix cache namespace holds " +
                                 std::to_string(restored.layers.size()) +
                                 " layers, the session owns " + std::to_string(owned));
}

// Restored LayerStates (one per namespace layer) -> caches of the owned layers.
// On a refusal, `refused` is the namespace layer refused.
// REQUIRES: CheckHoldsTheOwnedLayers(recipe, restored).ok().
StatusOr<std::vector<LayerKvCache>> CachesFromRestore(const KvCacheRecipe& recipe,
                                                      const RestoreResult& restored,
                                                      size_t* refused) {
  const std::vector<int> owned = recipe.owned_layers();
  std::vector<LayerKvCache> caches;
  caches.reserve(owned.size());
  for (size_t i = 0; i < owned.size(); ++i) {
    *refused = i;
    const LayerState& layer = restored.layers[i];
    const std::string where = "restored layer " + std::to_string(owned[i]);
    if (layer.placeholder || layer.tensors.size() != 2) {
      return Status::InvalidArgument(where + " carries no keys and values");
    }
    std::optional<RotatingMeta> meta;
    if (CacheTypeRegistry::IsRotatingFamily(layer.cache_type) ||
        CacheTypeRegistry::IsArraysFamily(layer.cache_type)) {
      StatusOr<RotatingMeta> parsed = RotatingMeta::Parse(layer.meta);
      if (!parsed.ok())
        return Status::InvalidArgument(where + ": " + parsed.status().message());
      meta = *parsed;
    }
    StatusOr<LayerKvCache> cache = LayerKvCache::Restore(
        recipe.layer_geometry(owned[i]), layer.tensors[0], layer.tensors[1], meta);
    if (!cache.ok())
      return Status::InvalidArgument(where + ": " + cache.status().message());
    if (cache->length() != static_cast<int64_t>(restored.restored_tokens)) {
      return Status::InvalidArgument(where + " holds " + std::to_string(cache->length()) +
                                     " positions, the restore " +
                                     std::to_string(restored.restored_tokens));
    }
    caches.push_back(std::move(*cache));
  }
  return caches;
}

// Whether the caches' refusal of restored layer `l` holds at every shorter
// prefix too: a full-attention layer's KV is checked against the chain's
// first block by every restore, so each prefix holds KV of that layout (only
// a tip's window or recurrent state is another at an earlier tip). Passed
// over a block at a time, such KV cost one restore of all the blocks before
// each block.
bool RefusedAtEveryPrefix(const RestoreResult& restored, size_t l) {
  StatusOr<CacheFamily> family = CacheTypeRegistry::Lookup(restored.layers[l].cache_type);
  return family.ok() && IsSliceable(*family);
}

std::string JoinReasons(const std::string& first, const std::string& then) {
  if (first.empty() || then.empty()) return first + then;
  return first + "; " + then;
}

// A session's exported layers -> LayerStates in namespace (owned layer) order.
std::vector<LayerState> LayerStatesFromExport(std::map<int, LayerKvExport> exports) {
  std::vector<LayerState> layers;
  layers.reserve(exports.size());
  for (auto& [layer, e] : exports) {
    LayerState s;
    s.cache_type = std::string(e.cache_type);
    // A full-attention layer's meta is its length (the keys' token axis); a
    // recurrent layer's is its conv ring's (keep, max_size, offset, idx), offset
    // being the position its state is valid at.
    s.meta = e.rotating_meta ? e.rotating_meta->ToStrings()
                             : std::vector<std::string>{std::to_string(e.length)};
    s.tensors = {std::move(e.keys), std::move(e.values)};
    layers.push_back(std::move(s));
  }
  return layers;
}

}  // namespace

NamespaceSpec SessionNamespaceSpec(const KvCacheRecipe& recipe, std::string model,
                                   uint32_t block_tokens) {
  NamespaceSpec spec;
  spec.model = std::move(model);
  if (recipe.start_layer() != 0 || recipe.end_layer() != recipe.total_layers() - 1) {
    spec.model += "/layers=" + std::to_string(recipe.start_layer()) + "-" +
                  std::to_string(recipe.end_layer());
  }
  spec.block_tokens = block_tokens;
  spec.dtype = DType::kFloat32;  // what LayerKvCache holds
  for (int layer : recipe.owned_layers()) {
    const LayerKvGeometry g = recipe.layer_geometry(layer);
    spec.layer_types.push_back(g.recurrent.is_recurrent() ? "ArraysCache"
                               : g.window_tokens > 0      ? "RotatingKVCache"
                                                          : "KVCache");
    // Every tensor shape is keyed (docs/format.md §5 "Shapes recorded later"
    // for directories written before): a recurrent layer's KV heads and head
    // dim are unused, so they are 0.
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    LayerShape shape;
    if (g.recurrent.is_recurrent()) {
      shape.conv_tokens = u32(g.recurrent.conv_tokens);
      shape.channels = u32(g.recurrent.channels);
      shape.state_heads = u32(g.recurrent.state_heads);
      shape.state_dim = u32(g.recurrent.state_dim);
    } else {
      shape.kv_heads = u32(g.n_kv_heads);
      shape.head_dim = u32(g.head_dim);
      shape.window_tokens = u32(g.window_tokens);
    }
    spec.layer_shapes.push_back(shape);
  }
  return spec;
}

StatusOr<std::shared_ptr<Session>> SessionManager::OpenFromPrefixCache(
    const std::string& id, uint64_t epoch, std::span<const int32_t> tokens,
    PrefixRestore* restore) {
  PrefixRestore local;
  PrefixRestore& r = restore != nullptr ? *restore : local;
  r = PrefixRestore{};
  // Opened by another caller since ours looked: returned as it is.
  if (std::shared_ptr<Session> live = LiveAt(id, epoch)) return live;
  const SessionPrefixCache& pc = config_.prefix_cache;
  SessionOpenOptions options;
  options.created = &r.created;
  if (pc.engine != nullptr && !tokens.empty()) {
    PKV_ASSIGN_OR_RETURN(MatchResult match, pc.engine->Match(pc.ns, tokens));
    r.matched_tokens = static_cast<int64_t>(match.matched_tokens());
    std::string refused;  // the deeper restores whose state was refused, and why
    while (!match.keys.empty()) {
      PKV_ASSIGN_OR_RETURN(RestoreResult restored, pc.engine->Restore(match));
      r.reason = JoinReasons(refused, restored.reason);
      if (restored.restored_tokens == 0) break;
      PKV_RETURN_IF_ERROR(CheckHoldsTheOwnedLayers(recipe_, restored));
      size_t refused_layer = 0;
      StatusOr<std::vector<LayerKvCache>> caches =
          CachesFromRestore(recipe_, restored, &refused_layer);
      if (!caches.ok()) {
        // A tip whose state the caches refuse (stored by another client or
        // framework: a state of another dtype, offset or ring length) is passed
        // over like a stripped one: restore less, never fail the prefill on it.
        refused = JoinReasons(
            refused, "the restore of " + std::to_string(restored.restored_tokens) +
                         " tokens was refused: " + caches.status().message());
        r.reason = refused;
        if (RefusedAtEveryPrefix(restored, refused_layer)) break;  // a clean miss
        // The prompt up to the refused tip's last token: its restore ends
        // before the tip, at an earlier tip on the chain or beside it. (A
        // match cut to the whole blocks before the tip left out an earlier
        // turn's partial tip in the block the refused one ends in or the one
        // before it: a miss where that turn was restorable.)
        const size_t before = restored.restored_tokens - 1;
        if (before == 0) break;
        PKV_ASSIGN_OR_RETURN(match, pc.engine->Match(pc.ns, tokens.first(before)));
        continue;
      }
      options.initial_layers = std::move(*caches);
      options.initial_tokens.assign(
          tokens.begin(),
          tokens.begin() + static_cast<int64_t>(restored.restored_tokens));
      r.restored_tokens = static_cast<int64_t>(restored.restored_tokens);
      r.restored_hot_tokens = static_cast<int64_t>(restored.tokens_from_hot);
      r.restored_ssd_tokens = static_cast<int64_t>(restored.tokens_from_ssd);
      r.restored_remote_tokens = static_cast<int64_t>(restored.tokens_from_remote);
      break;
    }
  }
  const bool prefilled = !options.initial_layers.empty();
  const OpenedFrom from{r.restored_tokens,
                        r.matched_tokens > 0 && r.restored_tokens == 0};
  StatusOr<std::shared_ptr<Session>> opened =
      OpenCounted(id, epoch, std::move(options), from);
  if (!opened.ok() && prefilled) {
    // A pre-filled open refuses a session opened meanwhile at this epoch.
    if (std::shared_ptr<Session> live = LiveAt(id, epoch)) {
      r = PrefixRestore{};
      return live;
    }
  }
  PKV_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, std::move(opened));
  if (!r.created) {
    r = PrefixRestore{};
    return session;
  }
  if (r.restored_tokens > 0) {
    // What was restored is in the prefix cache already.
    WriterLock session_lock(&session->state_->mu);
    session->state_->stored_len = r.restored_tokens;
  }
  return session;
}

std::shared_ptr<Session> SessionManager::LiveAt(const std::string& id, uint64_t epoch) {
  MutexLock lock(&state_->mu);
  auto it = state_->live.find(id);
  if (it == state_->live.end() || it->second.session->route_epoch() != epoch) {
    return nullptr;
  }
  return it->second.session;
}

StatusOr<SessionStoreResult> SessionManager::StoreToPrefixCache(const std::string& id,
                                                                uint64_t epoch) {
  if (config_.prefix_cache.engine == nullptr) {
    return Status::InvalidArgument("the kv state manager has no prefix cache");
  }
  PKV_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Get(id, epoch));
  return state_->StoreSession(config_, session);
}

StatusOr<SessionStoreResult> SessionManager::State::StoreSession(
    const SessionManagerOptions& config, const std::shared_ptr<Session>& session) {
  SessionStoreResult result;
  std::vector<int32_t> tokens;
  std::map<int, LayerKvExport> exports;
  uint64_t read_at = 0;  // the session's changes when its layers were read
  {
    ReaderLock session_lock(&session->state_->mu);
    read_at = session->state_->changes;
    result.stored_tokens = session->state_->seq_len;
    if (!session->state_->tokens_known || session->state_->seq_len == 0 ||
        session->state_->seq_len == session->state_->stored_len) {
      result.skipped = true;
      if (!session->state_->tokens_known) {
        MutexLock lock(&mu);
        stats.stores_skipped_unknown_tokens++;
      }
      return result;
    }
    tokens = session->state_->tokens;
    for (const auto& [layer, cache] : session->state_->layers)
      exports.emplace(layer, cache.Export());
  }
  const SessionPrefixCache& pc = config.prefix_cache;
  PKV_ASSIGN_OR_RETURN(
      StoreResult stored,
      pc.engine->Store(pc.ns, tokens, LayerStatesFromExport(std::move(exports))));
  result.blocks_written = stored.blocks_written;
  result.blocks_deduplicated = stored.blocks_deduplicated;
  {
    WriterLock session_lock(&session->state_->mu);
    // Unless the session changed meanwhile (then the next store covers it):
    // the same length is not the same tokens after a truncate and an append.
    if (session->state_->changes == read_at)
      session->state_->stored_len = result.stored_tokens;
  }
  MutexLock lock(&mu);
  stats.sessions_stored++;
  stats.blocks_stored += stored.blocks_written;
  return result;
}

size_t SessionManager::EvictExpired() {
  StoreRemovedOnExit store_removed(this);
  MutexLock lock(&state_->mu);
  const uint64_t before = state_->stats.evicted_ttl;
  state_->SweepExpired(clock_->NowNanos(), TtlNanos(config_.ttl_ms),
                       config_.max_tombstones);
  return static_cast<size_t>(state_->stats.evicted_ttl - before);
}

StatusOr<size_t> SessionManager::StoreLiveSessions() {
  if (config_.prefix_cache.engine == nullptr) {
    return Status::InvalidArgument("the kv state manager has no prefix cache");
  }
  std::vector<std::shared_ptr<Session>> live;
  {
    MutexLock lock(&state_->mu);
    for (const auto& [id, entry] : state_->live) live.push_back(entry.session);
  }
  size_t stored = 0;
  Status first_error;
  for (const std::shared_ptr<Session>& session : live) {
    StatusOr<SessionStoreResult> r = state_->StoreSession(config_, session);
    if (!r.ok()) {
      if (first_error.ok()) first_error = r.status();
      continue;
    }
    if (!r->skipped) ++stored;
  }
  if (!first_error.ok()) return first_error;
  return stored;
}

void SessionManager::State::StoreRemoved(const SessionManagerOptions& config) {
  if (!store_removed) return;
  std::vector<std::shared_ptr<Session>> to_store;
  {
    MutexLock lock(&mu);
    to_store.swap(removed);
  }
  for (const std::shared_ptr<Session>& session : to_store) {
    StatusOr<SessionStoreResult> stored = StoreSession(config, session);
    if (stored.ok()) continue;
    MutexLock lock(&mu);
    stats.store_failures++;
    stats.last_store_error = "session '" + session->session_id() + "' epoch " +
                             std::to_string(session->route_epoch()) + ": " +
                             stored.status().ToString();
  }
}

}  // namespace prefixkv
