// Sessions: per-session, per-route-epoch KV caches of one shard's owned
// layers, kept in RAM under a session cap, an idle TTL and a byte budget: the
// manager's own, or the engine's RAM budget shared with the cached blocks
// (SessionManagerOptions::memory).
//
// Optionally bound to an Engine namespace (SessionManagerOptions::prefix_cache):
// then a session can be opened from the longest cached prefix of its tokens
// (OpenFromPrefixCache), and a session's full blocks (plus the partial tail when
// the namespace opted in, so sliding-window state is kept at its exact end) are
// stored into the prefix cache on StoreToPrefixCache (end of a turn), Release,
// TTL/LRU eviction and supersession by a newer epoch. Sessions therefore record
// the token ids of their positions; a session whose tokens were not all given to
// Append cannot be named by chain keys and is never stored.
//
// A session is keyed by (session id, route epoch). The epoch increases when the
// router re-plans a session's route: a newer epoch supersedes the old state
// (freeing it at once), and any call naming an older epoch is rejected as stale.
// A lookup that finds nothing is a CacheMiss value with a reason, never an error.
//
// Error mapping (the seed's Python exceptions -> Status):
//   StaleRouteEpochError          InvalidArgument "stale route epoch: ..."
//   IsStaleRouteEpoch() IncompatibleCacheRecipeError  InvalidArgument "incompatible kv
//   cache recipe: ..."
//                                                                    IsIncompatibleRecipe()
//   KvCacheMissError (from Get)   NotFound "kv cache miss (<reason>): ..."
//   IsKvCacheMiss() KvBudgetExceededError         NoSpace  "kv budget exceeded: ..."
//   UncertifiedArchitectureError  NotSupported "uncertified architecture ..." (recipes)
//   KeyError (unowned layer)      NotFound "layer N is not owned ..."
//   ValueError (bad KV shape)     InvalidArgument
//   cancellation                  Aborted
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "prefixkv/clock.h"
#include "prefixkv/engine.h"
#include "prefixkv/kv_recipe.h"
#include "prefixkv/layer_kv_cache.h"
#include "prefixkv/shard_computation.h"
#include "prefixkv/status.h"

namespace prefixkv {

enum class CacheMissReason : uint8_t {
  kUnknownSession,  // never opened at this epoch (or forgotten)
  kReleased,        // released by its owner
  kEvictedTtl,      // idle longer than ttl_ms
  kEvictedLru,      // evicted as least recently used (session cap or byte budget)
  kSeqLenMismatch,  // the caller's sequence length disagrees with the cache
  // A non-head shard opening from the prefix cache could not restore exactly the
  // positions its upstream shard restored (detail says how many it holds).
  kPrefixUnavailable,
};
// "unknown-session", "released", "evicted-ttl", "evicted-lru", "seq-len-mismatch",
// "prefix-unavailable".
std::string_view CacheMissReasonName(CacheMissReason reason);

struct CacheMiss {
  CacheMissReason reason = CacheMissReason::kUnknownSession;
  std::string session_id;
  uint64_t route_epoch = 0;
  std::string detail;  // human-readable context, e.g. "expected 99, cache holds 3"
};

bool IsStaleRouteEpoch(const Status& status);
bool IsIncompatibleRecipe(const Status& status);
bool IsKvCacheMiss(const Status& status);

// An Engine namespace holding exactly the manager's owned layers, in layer
// order (SessionNamespaceSpec builds the spec). Both must outlive the manager.
struct SessionPrefixCache {
  Engine* engine = nullptr;  // null: sessions live in RAM only
  Namespace ns;
};

// The namespace spec of a manager's owned layers: float32 caches (what
// LayerKvCache holds), "RotatingKVCache" for windowed layers, "ArraysCache"
// for recurrent ones, "KVCache" otherwise, and every layer's tensor shape
// (layer_shapes: heads x head dim, window, recurrent state), so recipes that
// differ in any shape never share a key (docs/format.md §5.1 for data
// directories written before). A shard owning only part of the model gets
// "/layers=S-E" appended to `model`, so each shard of a pipeline has its own
// namespace.
NamespaceSpec SessionNamespaceSpec(const KvCacheRecipe& recipe, std::string model,
                                   uint32_t block_tokens);

struct SessionManagerOptions {
  // A session idle (no open/get/resolve/append/truncate) for longer than this is
  // evicted with reason kEvictedTtl. 0 disables the TTL, and so does a TTL
  // past the clock's reach (2^64 ns, about 584 years). Default 10 minutes.
  uint64_t ttl_ms = 600'000;
  // Most live sessions; opening one more evicts the least recently used. 0: no cap.
  size_t max_sessions = 64;
  // Most KV payload bytes over all sessions; growing past it evicts least recently
  // used other sessions. 0: no budget. Default 1 GiB. Ignored when `memory` is set.
  uint64_t budget_bytes = uint64_t{1} << 30;
  // How many released/evicted session ids are remembered to report the miss reason
  // (and reject stale epochs) after the state is gone; oldest forgotten first.
  size_t max_tombstones = 4096;
  // Where sessions are restored from and stored to; unset: RAM only.
  SessionPrefixCache prefix_cache;
  // Charges the sessions' KV payload bytes to an engine's RAM budget
  // (Engine::OpenMemoryCharge), so that live sessions and cached blocks share
  // one limit; `budget_bytes` is then ignored. A session that grows first
  // makes the budget evict cache blocks (dirty ones spill to SSD); when that
  // cannot make room, the least recently used other sessions are evicted
  // (reason evicted-lru, stored to the prefix cache when bound) and the charge
  // is retried. NoSpace, with nobody evicted, when the session alone would
  // exceed memory->limit_bytes() or evicting every other session would not be
  // enough. Null: sessions are limited by `budget_bytes` only.
  std::shared_ptr<MemoryCharge> memory;
};

// One (session, epoch)'s KV state for the owned layers, created by
// SessionManager. Thread-safe: readers share a lock, the manager takes it
// exclusively to append or truncate.
class Session {
 public:
  Session(std::string session_id, uint64_t route_epoch, std::vector<int> owned_layers,
          std::map<int, LayerKvCache> layers, int64_t seq_len);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& session_id() const { return session_id_; }
  uint64_t route_epoch() const { return route_epoch_; }
  const std::vector<int>& owned_layers() const { return owned_layers_; }
  int64_t seq_len() const;
  uint64_t payload_bytes() const;
  // Positions held by `layer`; NotFound when the layer is not owned.
  StatusOr<int64_t> LayerLength(int layer) const;
  // A copy of one layer's cache; NotFound when the layer is not owned.
  StatusOr<LayerKvCache> LayerSnapshot(int layer) const;
  // Every owned layer as tensors (for storing into the prefix cache).
  std::map<int, LayerKvExport> ExportLayers() const;
  // The token ids of positions 0..seq_len-1; nullopt when some Append did not
  // carry its tokens (such a session is never stored in the prefix cache).
  std::optional<std::vector<int32_t>> tokens() const;

  // Calls fn(seq_len, past) under the shared lock: the KV cannot change until fn
  // returns. The adapter computes inside fn and commits afterwards via Append.
  // REQUIRES: fn does not call Append or Truncate on this session (they wait for
  // this lock) and does not keep `past` pointers beyond its return.
  Status ReadLayers(
      const std::function<Status(int64_t seq_len, const PastKv& past)>& fn) const;

 private:
  friend class SessionManager;
  // The reader/writer lock and the KV state it guards (layers, length,
  // recorded tokens): src/session/session_internal.h.
  struct State;

  const std::string session_id_;
  const uint64_t route_epoch_;
  const std::vector<int> owned_layers_;
  const std::unique_ptr<State> state_;
};

using SessionOrMiss = std::variant<std::shared_ptr<Session>, CacheMiss>;

struct SessionOpenOptions {
  // When set, must be compatible with the manager's recipe (IsIncompatibleRecipe).
  const KvCacheRecipe* recipe = nullptr;
  // Pre-filled state (a restored prefix): exactly one cache per owned layer, all of
  // the same length(). Empty: an empty session.
  std::vector<LayerKvCache> initial_layers;
  // The token ids of the initial positions (what names them in the prefix
  // cache). Empty with non-empty initial_layers: unknown, the session is never
  // stored. Otherwise exactly the initial length.
  std::vector<int32_t> initial_tokens;
  // Out, optional: set to whether this call created the session (false: it was
  // already open at this epoch and is returned as it is).
  bool* created = nullptr;
};

// What OpenFromPrefixCache restored. hot + ssd + remote == restored_tokens.
struct PrefixRestore {
  // This call created the session. False: another caller had opened it at this
  // epoch meanwhile; it is returned as it is and nothing was restored.
  bool created = false;
  int64_t matched_tokens = 0;   // cached prefix found by Match
  int64_t restored_tokens = 0;  // positions the session opened with
  int64_t restored_hot_tokens = 0;
  int64_t restored_ssd_tokens = 0;
  int64_t restored_remote_tokens = 0;  // blocks another node computed (remote tier)
  // Why restored < matched, if so: Engine::Restore's reason, after the deeper
  // restores whose state LayerKvCache::Restore refused (restored less instead).
  std::string reason;
};

// What one store of a session into the prefix cache did.
struct SessionStoreResult {
  int64_t stored_tokens = 0;  // the session's length when exported
  size_t blocks_written = 0;
  size_t blocks_deduplicated = 0;
  bool skipped = false;  // nothing new since the last store, or tokens unknown
};

struct SessionStats {
  // Sessions opened. An open rolled back (Discard, DiscardIfUnchanged: a
  // failed or cancelled first step) is not counted, nor what it restored
  // (prefix_restores, prefix_restored_tokens, prefix_unrestorable): so
  // opened == live sessions + released + superseded + evicted_ttl +
  // evicted_lru.
  uint64_t opened = 0;
  uint64_t released = 0;
  uint64_t superseded = 0;
  uint64_t evicted_ttl = 0;
  uint64_t evicted_lru = 0;
  // CacheMiss values the manager returned: Resolve's, Get's (as its error),
  // Append's and Truncate's, a seq-len-mismatch of Append's expected length
  // included. A KvBoundaryAdapter step's own checks (its length check before
  // computing, prefix-unavailable) are the adapter's, not counted here.
  uint64_t misses = 0;
  // Prefix cache traffic (zero without SessionPrefixCache):
  uint64_t prefix_restores = 0;         // sessions opened with a restored prefix
  uint64_t prefix_restored_tokens = 0;  // positions those sessions opened with
  // Opens whose Match found a cached prefix but that restored none of it: its
  // window or recurrent state was stripped or is gone, or its first block failed
  // validation, or every tip's state was refused by LayerKvCache::Restore
  // (PrefixRestore::reason says which). A clean miss: the session opens empty
  // and computes the whole prompt.
  uint64_t prefix_unrestorable = 0;
  uint64_t sessions_stored = 0;  // stores that reached Engine::Store
  uint64_t blocks_stored = 0;    // blocks those stores wrote
  uint64_t stores_skipped_unknown_tokens = 0;
  uint64_t store_failures = 0;  // automatic stores (release, eviction) that failed
  std::string last_store_error;
};

// Thread-safe. Lock order: a session's lock before the manager's; the manager
// never waits for a session lock while holding its own, and never charges
// SessionManagerOptions::memory while holding its own (a charge may wait for the
// SSD tier's write-back).
class SessionManager {
 public:
  // `clock` must outlive the manager; null means Clock::System().
  explicit SessionManager(KvCacheRecipe recipe, SessionManagerOptions config = {},
                          Clock* clock = nullptr);
  ~SessionManager();
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  // Opens (session, epoch), or returns it when already open at that epoch (then
  // initial_layers must be empty). A newer epoch supersedes and frees the old one.
  // Errors: stale epoch, incompatible recipe, a manager recipe whose KV dtype
  // is not float32 (what LayerKvCache holds), bad initial layers (InvalidArgument),
  // initial state larger than the whole budget (NoSpace; nothing is created).
  StatusOr<std::shared_ptr<Session>> Open(const std::string& session_id, uint64_t epoch,
                                          SessionOpenOptions options = {});
  // Opens (session, epoch) pre-filled with the longest prefix of `tokens` the
  // prefix cache can restore (all of `tokens` at most); `tokens` become the
  // session's recorded tokens up to that length. Without a SessionPrefixCache,
  // or when nothing is cached, the session opens empty. A tip whose state the
  // layers' caches refuse (another dtype, offset or ring length) is passed
  // over: the open restores an earlier tip or nothing (docs/session.md).
  // Errors as Open, plus the prefix cache's (a namespace of another layer
  // count is InvalidArgument: it does not hold this shard's layers). A
  // session already live at this epoch is returned as it is (restore->created
  // false).
  StatusOr<std::shared_ptr<Session>> OpenFromPrefixCache(
      const std::string& session_id, uint64_t epoch, std::span<const int32_t> tokens,
      PrefixRestore* restore = nullptr);
  // Stores the live session's full blocks (and partial tail, see
  // NamespaceOptions) in the prefix cache now: the end of a turn. Skipped when
  // nothing was appended since the last store or the tokens are unknown.
  // Errors: no SessionPrefixCache (InvalidArgument), a session that is not live
  // (IsKvCacheMiss), stale epoch, the prefix cache's errors.
  StatusOr<SessionStoreResult> StoreToPrefixCache(const std::string& session_id,
                                                  uint64_t epoch);
  // The live session or a CacheMiss. Errors: stale epoch, incompatible recipe.
  StatusOr<SessionOrMiss> Resolve(const std::string& session_id, uint64_t epoch,
                                  const KvCacheRecipe* recipe = nullptr);
  // Like Resolve, but a miss is an error (IsKvCacheMiss).
  StatusOr<std::shared_ptr<Session>> Get(const std::string& session_id, uint64_t epoch);
  // Appends one run's KV to every owned layer, all or nothing. A set
  // expected_seq_len that differs from the session's length is a kSeqLenMismatch
  // miss (how a computation that raced another append is refused). Errors: stale
  // epoch, chunks that do not cover exactly the owned layers with one token count
  // (InvalidArgument), a session that alone would exceed the budget (NoSpace).
  // `tokens`: the ids of the appended positions (one per chunk token), recorded
  // for the prefix cache; empty marks the session's tokens unknown.
  StatusOr<SessionOrMiss> Append(const std::string& session_id, uint64_t epoch,
                                 const KvChunks& chunks,
                                 std::optional<int64_t> expected_seq_len = std::nullopt,
                                 std::span<const int32_t> tokens = {});
  // Rolls every owned layer back to `seq_len` positions. InvalidArgument when
  // seq_len exceeds the length or a rotating layer cannot roll back exactly.
  StatusOr<SessionOrMiss> Truncate(const std::string& session_id, uint64_t epoch,
                                   int64_t seq_len);
  // Frees the session (storing it in the prefix cache first when bound, see
  // above); later lookups miss with kReleased. False when nothing was live. A
  // failed store does not fail the release: it is counted in stats().
  StatusOr<bool> Release(const std::string& session_id, uint64_t epoch);
  // Evicts the sessions idle longer than ttl_ms now (every other call sweeps
  // too; a server calls this from a timer so idle sessions are stored and
  // freed without traffic). Returns how many were evicted.
  size_t EvictExpired();
  // Stores every live session in the prefix cache (a graceful shutdown: live
  // sessions are otherwise lost with the process); they stay live. Returns how
  // many stores ran, or the first error (the others are still attempted).
  StatusOr<size_t> StoreLiveSessions();
  // Removes a session without storing it (rolling back an Open that the
  // caller's first computation failed to fill): its epoch then misses as
  // unknown-session, as if never opened (its open and restore are taken out
  // of stats()), and older epochs stay stale (the open superseded them).
  void Discard(const std::string& session_id, uint64_t epoch);
  // Discard, but only while `session` is still the live state of its id and
  // holds exactly `opened_len` positions: a step rolling back its own open
  // must not drop a session that a racing step has filled meanwhile. True when
  // it was removed.
  bool DiscardIfUnchanged(const std::shared_ptr<Session>& session, int64_t opened_len);

  uint64_t total_bytes() const;
  size_t session_count() const;
  // (session id, epoch) of live sessions, sorted.
  std::vector<std::pair<std::string, uint64_t>> session_keys() const;
  SessionStats stats() const;
  const KvCacheRecipe& recipe() const { return recipe_; }
  const SessionManagerOptions& config() const { return config_; }

 private:
  class State;
  // What an open took from the prefix cache: counted in stats() with the open
  // itself, under the same lock, so a rollback (Discard) uncounts both.
  struct OpenedFrom {
    int64_t restored_tokens = 0;
    bool unrestorable = false;  // Match found a prefix, none of it restored
  };
  StatusOr<std::shared_ptr<Session>> OpenCounted(const std::string& session_id,
                                                 uint64_t epoch,
                                                 SessionOpenOptions options,
                                                 OpenedFrom from);
  StatusOr<std::shared_ptr<Session>> MakeSession(const std::string& session_id,
                                                 uint64_t epoch,
                                                 std::vector<LayerKvCache> layers,
                                                 std::vector<int32_t> tokens) const;
  Status CheckChunks(const KvChunks& chunks, int64_t* tokens) const;
  // The session live at exactly this epoch, or null; no sweep, no counters.
  std::shared_ptr<Session> LiveAt(const std::string& session_id, uint64_t epoch);
  class StoreRemovedOnExit;

  const KvCacheRecipe recipe_;
  const SessionManagerOptions config_;
  Clock* const clock_;
  // The locks, the session table and the helpers that need a lock held or
  // not held (charging, storing): src/session/session_internal.h.
  std::unique_ptr<State> state_;
};

}  // namespace prefixkv
