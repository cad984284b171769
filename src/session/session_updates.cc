// SessionManager, part 2: append, truncate, release and the counters.
//
// Append and truncate follow one pattern: resolve the session, take its exclusive
// lock, compute the new payload size, charge it (Recharge: under the manager
// lock against budget_bytes, or to the shared RAM budget, see
// session_memory.cc; evicting other sessions when needed) and only then
// change the layers. A failure at any step leaves both the session and the
// byte counters untouched.
#include <algorithm>
#include <cstdint>

#include "session_internal.h"

namespace prefixkv {
namespace {

uint64_t PayloadBytesAt(const std::map<int, LayerKvCache>& layers, int64_t length) {
  uint64_t total = 0;
  for (const auto& [layer, cache] : layers) total += cache.PayloadBytesAt(length);
  return total;
}

}  // namespace

StatusOr<std::optional<CacheMiss>> SessionManager::State::RechargeWithinBudget(
    const SessionManagerOptions& config, const std::shared_ptr<Session>& session,
    uint64_t new_bytes) {
  const std::string& id = session->session_id();
  MutexLock lock(&mu);
  auto it = live.find(id);
  if (it == live.end() || it->second.session != session) {
    PKV_RETURN_IF_ERROR(CheckEpoch(id, session->route_epoch()));
    return std::optional<CacheMiss>(Find(id, session->route_epoch()).miss);
  }
  if (config.budget_bytes > 0 && new_bytes > config.budget_bytes) {
    return Status::NoSpace("kv budget exceeded: session '" + id + "' would hold " +
                           std::to_string(new_bytes) + " bytes, budget is " +
                           std::to_string(config.budget_bytes));
  }
  uint64_t old_bytes = it->second.bytes;
  if (config.budget_bytes > 0) {
    // Until total - old + new <= budget (new <= budget: checked above).
    EvictLruUntil(id, SIZE_MAX, config.budget_bytes - new_bytes + old_bytes,
                  config.max_tombstones);
  }
  total_bytes = total_bytes - old_bytes + new_bytes;
  it->second.bytes = new_bytes;  // `it` survives: eviction never removes `id`
  return std::optional<CacheMiss>();
}

StatusOr<SessionOrMiss> SessionManager::Append(const std::string& id, uint64_t epoch,
                                               const KvChunks& chunks,
                                               std::optional<int64_t> expected_seq_len,
                                               std::span<const int32_t> token_ids) {
  StoreRemovedOnExit store_removed(this);
  PKV_ASSIGN_OR_RETURN(SessionOrMiss found, Resolve(id, epoch));
  if (std::holds_alternative<CacheMiss>(found)) return found;
  int64_t tokens = 0;
  PKV_RETURN_IF_ERROR(CheckChunks(chunks, &tokens));
  if (!token_ids.empty() && static_cast<int64_t>(token_ids.size()) != tokens) {
    return Status::InvalidArgument("append carries " + std::to_string(token_ids.size()) +
                                   " token ids for " + std::to_string(tokens) +
                                   " positions");
  }
  auto session = std::get<std::shared_ptr<Session>>(std::move(found));
  WriterLock session_lock(&session->state_->mu);
  if (expected_seq_len && *expected_seq_len != session->state_->seq_len) {
    return SessionOrMiss(state_->CountMiss(
        SeqLenMiss(id, epoch, *expected_seq_len, session->state_->seq_len)));
  }
  uint64_t new_bytes =
      PayloadBytesAt(session->state_->layers, session->state_->seq_len + tokens);
  PKV_ASSIGN_OR_RETURN(std::optional<CacheMiss> miss,
                       state_->Recharge(config_, session, new_bytes));
  if (miss) return SessionOrMiss(std::move(*miss));
  for (auto& [layer, cache] : session->state_->layers) {
    const LayerKvChunk& chunk = chunks.at(layer);
    // Cannot fail: CheckChunks validated every chunk against this geometry.
    Status appended = cache.Append(chunk.keys, chunk.values);
    if (!appended.ok())
      return Status::Internal("validated append failed: " + appended.ToString());
  }
  session->state_->seq_len += tokens;
  ++session->state_->changes;
  if (token_ids.empty()) {
    session->state_->tokens_known = false;
    session->state_->tokens.clear();
    session->state_->tokens.shrink_to_fit();
  } else if (session->state_->tokens_known) {
    session->state_->tokens.insert(session->state_->tokens.end(), token_ids.begin(),
                                   token_ids.end());
  }
  return SessionOrMiss(std::move(session));
}

StatusOr<SessionOrMiss> SessionManager::Truncate(const std::string& id, uint64_t epoch,
                                                 int64_t seq_len) {
  StoreRemovedOnExit store_removed(this);
  PKV_ASSIGN_OR_RETURN(SessionOrMiss found, Resolve(id, epoch));
  if (std::holds_alternative<CacheMiss>(found)) return found;
  auto session = std::get<std::shared_ptr<Session>>(std::move(found));
  WriterLock session_lock(&session->state_->mu);
  if (seq_len < 0 || seq_len > session->state_->seq_len) {
    return Status::InvalidArgument("cannot truncate session '" + id + "' of " +
                                   std::to_string(session->state_->seq_len) +
                                   " positions to " + std::to_string(seq_len));
  }
  for (const auto& [layer, cache] : session->state_->layers) {
    if (!cache.CanTruncate(seq_len)) {
      return Status::InvalidArgument(
          "layer " + std::to_string(layer) +
          " is a rotating window that already wrapped; it cannot "
          "roll back to " +
          std::to_string(seq_len));
    }
  }
  uint64_t new_bytes = PayloadBytesAt(session->state_->layers, seq_len);
  PKV_ASSIGN_OR_RETURN(std::optional<CacheMiss> miss,
                       state_->Recharge(config_, session, new_bytes));
  if (miss) return SessionOrMiss(std::move(*miss));
  for (auto& [layer, cache] : session->state_->layers) {
    Status truncated = cache.Truncate(seq_len);
    if (!truncated.ok())
      return Status::Internal("checked truncate failed: " + truncated.ToString());
  }
  session->state_->seq_len = seq_len;
  ++session->state_->changes;
  if (session->state_->tokens_known) {
    session->state_->tokens.resize(static_cast<size_t>(seq_len));
  }
  // The prefix cache may hold a longer chain but not this length's tip state.
  session->state_->stored_len = 0;
  return SessionOrMiss(std::move(session));
}

StatusOr<bool> SessionManager::Release(const std::string& id, uint64_t epoch) {
  StoreRemovedOnExit store_removed(this);
  State& s = *state_;
  MutexLock lock(&s.mu);
  s.SweepExpired(clock_->NowNanos(), TtlNanos(config_.ttl_ms), config_.max_tombstones);
  PKV_RETURN_IF_ERROR(s.CheckEpoch(id, epoch));
  auto it = s.live.find(id);
  if (it == s.live.end() || it->second.session->route_epoch() != epoch) return false;
  CacheMissReason reason = CacheMissReason::kReleased;
  s.Remove(id, &reason, config_.max_tombstones);
  s.stats.released++;
  return true;
}

void SessionManager::Discard(const std::string& id, uint64_t epoch) {
  State& s = *state_;
  MutexLock lock(&s.mu);
  auto it = s.live.find(id);
  if (it != s.live.end() && it->second.session->route_epoch() == epoch) {
    s.RemoveDiscarded(id, config_.max_tombstones);
  }
}

bool SessionManager::DiscardIfUnchanged(const std::shared_ptr<Session>& session,
                                        int64_t opened_len) {
  // The session's lock first (lock order), held across the removal so no
  // append can land in between.
  ReaderLock session_lock(&session->state_->mu);
  if (session->state_->seq_len != opened_len) return false;
  State& s = *state_;
  MutexLock lock(&s.mu);
  auto it = s.live.find(session->session_id());
  if (it == s.live.end() || it->second.session != session) return false;
  s.RemoveDiscarded(session->session_id(), config_.max_tombstones);
  return true;
}

uint64_t SessionManager::total_bytes() const {
  MutexLock lock(&state_->mu);
  return state_->total_bytes;
}

size_t SessionManager::session_count() const {
  MutexLock lock(&state_->mu);
  return state_->live.size();
}

std::vector<std::pair<std::string, uint64_t>> SessionManager::session_keys() const {
  MutexLock lock(&state_->mu);
  std::vector<std::pair<std::string, uint64_t>> keys;
  for (const auto& [id, entry] : state_->live)
    keys.emplace_back(id, entry.session->route_epoch());
  std::sort(keys.begin(), keys.end());
  return keys;
}

SessionStats SessionManager::stats() const {
  MutexLock lock(&state_->mu);
  return state_->stats;
}

}  // namespace prefixkv
