// ServedRestore: one connection's PKV.MATCH + PKV.GET sequence reported to the
// engine as one restore (Engine::RecordServedRestore), so the per-model restore
// histogram and restored-token counters cover RESP clients too.
#include "served_restore.h"

namespace prefixkv::server {

void ServedRestore::OnMatch(Engine* engine, const MatchResult& match,
                            uint32_t block_tokens, uint64_t start_nanos) {
  if (active_ && unread_ < keys_.size()) Record(engine);
  active_ = !match.keys.empty();
  if (!active_) return;
  ns_ = match.ns;
  start_nanos_ = last_read_nanos_ = start_nanos;
  keys_ = match.keys;
  tiers_ = match.tiers;
  tokens_.assign(keys_.size(), block_tokens);
  // Every matched block is full but perhaps a partial last one.
  tokens_.back() = match.tokens.size() - uint64_t{block_tokens} * (keys_.size() - 1);
  read_.assign(keys_.size(), false);
  unread_ = keys_.size();
  next_ = 0;
  read_tokens_ = {};
}

size_t ServedRestore::Find(const BlockKey& key) const {
  if (next_ < keys_.size() && keys_[next_] == key) return next_;
  for (size_t j = 0; j < keys_.size(); ++j) {
    if (keys_[j] == key) return j;
  }
  return keys_.size();
}

BlocksAfter ServedRestore::After(const Namespace& ns, const BlockKey& key) const {
  if (!active_ || ns.root != ns_.root) return {};
  const size_t i = Find(key);
  if (i == keys_.size()) return {};
  BlocksAfter after{.keys = std::span<const BlockKey>(keys_).subspan(i + 1)};
  for (size_t j = i + 1; j < tokens_.size(); ++j) after.tokens += tokens_[j];
  return after;
}

void ServedRestore::OnGet(Engine* engine, const Namespace& ns, const BlockKey& key,
                          uint64_t end_nanos) {
  if (!active_ || ns.root != ns_.root) return;
  const size_t i = Find(key);
  if (i == keys_.size() || read_[i]) return;  // not matched, or read already
  read_[i] = true;
  --unread_;
  next_ = i + 1;
  last_read_nanos_ = end_nanos;
  switch (tiers_[i]) {
    case TierLevel::kSsd:
      read_tokens_.restored_tokens_ssd += tokens_[i];
      break;
    case TierLevel::kRemote:
      read_tokens_.restored_tokens_remote += tokens_[i];
      break;
    default:
      read_tokens_.restored_tokens_hot += tokens_[i];
  }
  if (unread_ == 0) Record(engine);
}

void ServedRestore::Record(Engine* engine) {
  const uint64_t nanos =
      last_read_nanos_ > start_nanos_ ? last_read_nanos_ - start_nanos_ : 0;
  // NotFound only when the engine closed meanwhile: nothing to count then.
  (void)engine->RecordServedRestore(ns_, nanos, read_tokens_);
  active_ = false;
  keys_.clear();
  tiers_.clear();
  tokens_.clear();
  read_.clear();
}

}  // namespace prefixkv::server
