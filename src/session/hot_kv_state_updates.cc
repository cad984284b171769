// HotKvStateManager, part 2: append, truncate, release and the counters.
//
// Append and truncate follow one pattern: resolve the session, take its exclusive
// lock, compute the new payload size, charge it (Recharge: under the manager
// lock against budget_bytes, or to the shared RAM budget, see
// hot_kv_state_memory.cc; evicting other sessions when needed) and only then
// change the layers. A failure at any step leaves both the session and the
// byte counters untouched.
#include <algorithm>
#include <shared_mutex>

#include "hot_kv_state_internal.h"

namespace prefixkv {
namespace {

uint64_t PayloadBytesAt(const std::map<int, LayerKvCache>& layers, int64_t length) {
  uint64_t total = 0;
  for (const auto& [layer, cache] : layers) total += cache.PayloadBytesAt(length);
  return total;
}

}  // namespace

StatusOr<std::optional<CacheMiss>> HotKvStateManager::State::Recharge(
    const HotKvStateConfig& config, const std::shared_ptr<HotKvSession>& session,
    uint64_t new_bytes) {
  State& s = *this;
  const std::string& id = session->session_id();
  std::lock_guard lock(s.mu);
  auto it = s.live.find(id);
  if (it == s.live.end() || it->second.session != session) {
    PKV_RETURN_IF_ERROR(s.CheckEpoch(id, session->route_epoch()));
    return std::optional<CacheMiss>(s.Find(id, session->route_epoch()).miss);
  }
  if (config.budget_bytes > 0 && new_bytes > config.budget_bytes) {
    return Status::NoSpace("kv budget exceeded: session '" + id + "' would hold " +
                           std::to_string(new_bytes) + " bytes, budget is " +
                           std::to_string(config.budget_bytes));
  }
  uint64_t old_bytes = it->second.bytes;
  s.EvictLruUntil(id, config.max_tombstones, [&] {
    return config.budget_bytes == 0 ||
           s.total_bytes - old_bytes + new_bytes <= config.budget_bytes;
  });
  s.total_bytes = s.total_bytes - old_bytes + new_bytes;
  it->second.bytes = new_bytes;  // `it` survives: eviction never removes `id`
  return std::optional<CacheMiss>();
}

StatusOr<SessionOrMiss> HotKvStateManager::Append(const std::string& id, uint64_t epoch,
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
  auto session = std::get<std::shared_ptr<HotKvSession>>(std::move(found));
  std::unique_lock session_lock(session->mu_);
  if (expected_seq_len && *expected_seq_len != session->seq_len_) {
    return SessionOrMiss(SeqLenMiss(id, epoch, *expected_seq_len, session->seq_len_));
  }
  uint64_t new_bytes = PayloadBytesAt(session->layers_, session->seq_len_ + tokens);
  PKV_ASSIGN_OR_RETURN(std::optional<CacheMiss> miss, Recharge(session, new_bytes));
  if (miss) return SessionOrMiss(std::move(*miss));
  for (auto& [layer, cache] : session->layers_) {
    const LayerKvChunk& chunk = chunks.at(layer);
    // Cannot fail: CheckChunks validated every chunk against this geometry.
    Status appended = cache.Append(chunk.keys, chunk.values);
    if (!appended.ok())
      return Status::Internal("validated append failed: " + appended.ToString());
  }
  session->seq_len_ += tokens;
  if (token_ids.empty()) {
    session->tokens_known_ = false;
    session->tokens_.clear();
    session->tokens_.shrink_to_fit();
  } else if (session->tokens_known_) {
    session->tokens_.insert(session->tokens_.end(), token_ids.begin(), token_ids.end());
  }
  return SessionOrMiss(std::move(session));
}

StatusOr<SessionOrMiss> HotKvStateManager::Truncate(const std::string& id, uint64_t epoch,
                                                    int64_t seq_len) {
  StoreRemovedOnExit store_removed(this);
  PKV_ASSIGN_OR_RETURN(SessionOrMiss found, Resolve(id, epoch));
  if (std::holds_alternative<CacheMiss>(found)) return found;
  auto session = std::get<std::shared_ptr<HotKvSession>>(std::move(found));
  std::unique_lock session_lock(session->mu_);
  if (seq_len < 0 || seq_len > session->seq_len_) {
    return Status::InvalidArgument("cannot truncate session '" + id + "' of " +
                                   std::to_string(session->seq_len_) + " positions to " +
                                   std::to_string(seq_len));
  }
  for (const auto& [layer, cache] : session->layers_) {
    if (!cache.CanTruncate(seq_len)) {
      return Status::InvalidArgument(
          "layer " + std::to_string(layer) +
          " is a rotating window that already wrapped; it cannot "
          "roll back to " +
          std::to_string(seq_len));
    }
  }
  uint64_t new_bytes = PayloadBytesAt(session->layers_, seq_len);
  PKV_ASSIGN_OR_RETURN(std::optional<CacheMiss> miss, Recharge(session, new_bytes));
  if (miss) return SessionOrMiss(std::move(*miss));
  for (auto& [layer, cache] : session->layers_) {
    Status truncated = cache.Truncate(seq_len);
    if (!truncated.ok())
      return Status::Internal("checked truncate failed: " + truncated.ToString());
  }
  session->seq_len_ = seq_len;
  if (session->tokens_known_) session->tokens_.resize(static_cast<size_t>(seq_len));
  // The prefix cache may hold a longer chain but not this length's tip state.
  session->stored_len_ = 0;
  return SessionOrMiss(std::move(session));
}

StatusOr<bool> HotKvStateManager::Release(const std::string& id, uint64_t epoch) {
  StoreRemovedOnExit store_removed(this);
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.SweepExpired(clock_->NowNanos(), config_.ttl_ms * 1'000'000, config_.max_tombstones);
  PKV_RETURN_IF_ERROR(s.CheckEpoch(id, epoch));
  auto it = s.live.find(id);
  if (it == s.live.end() || it->second.session->route_epoch() != epoch) return false;
  CacheMissReason reason = CacheMissReason::kReleased;
  s.Remove(id, &reason, config_.max_tombstones);
  s.stats.released++;
  return true;
}

void HotKvStateManager::Discard(const std::string& id, uint64_t epoch) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  auto it = s.live.find(id);
  if (it != s.live.end() && it->second.session->route_epoch() == epoch) {
    s.Remove(id, nullptr, config_.max_tombstones);
  }
}

bool HotKvStateManager::DiscardIfUnchanged(const std::shared_ptr<HotKvSession>& session,
                                           int64_t opened_len) {
  // The session's lock first (lock order), held across the removal so no
  // append can land in between.
  std::shared_lock session_lock(session->mu_);
  if (session->seq_len_ != opened_len) return false;
  State& s = *state_;
  std::lock_guard lock(s.mu);
  auto it = s.live.find(session->session_id());
  if (it == s.live.end() || it->second.session != session) return false;
  s.Remove(session->session_id(), nullptr, config_.max_tombstones);
  return true;
}

uint64_t HotKvStateManager::total_bytes() const {
  std::lock_guard lock(state_->mu);
  return state_->total_bytes;
}

size_t HotKvStateManager::session_count() const {
  std::lock_guard lock(state_->mu);
  return state_->live.size();
}

std::vector<std::pair<std::string, uint64_t>> HotKvStateManager::session_keys() const {
  std::lock_guard lock(state_->mu);
  std::vector<std::pair<std::string, uint64_t>> keys;
  for (const auto& [id, entry] : state_->live)
    keys.emplace_back(id, entry.session->route_epoch());
  std::sort(keys.begin(), keys.end());
  return keys;
}

HotKvStats HotKvStateManager::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

}  // namespace prefixkv
