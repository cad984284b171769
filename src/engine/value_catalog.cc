// ValueCatalog: an ordered map of key -> (name, expiry) and an ordered set of
// (expiry, key) for the sweep; both under one mutex, never held while a tier
// is called.
#include "value_catalog.h"

#include <algorithm>

namespace prefixkv::internal {

void ValueCatalog::Note(const BlockKey& key, std::string_view name,
                        uint64_t expires_at_ms) {
  MutexLock lock(&mu_);
  ForgetLocked(key);
  InsertLocked(key, name, expires_at_ms);
}

void ValueCatalog::NoteIfUnknown(const BlockKey& key, std::string_view name,
                                 uint64_t expires_at_ms) {
  MutexLock lock(&mu_);
  if (by_key_.count(key) == 0) InsertLocked(key, name, expires_at_ms);
}

void ValueCatalog::InsertLocked(const BlockKey& key, std::string_view name,
                                uint64_t expires_at_ms) {
  by_key_.emplace(key, Entry{key, std::string(name), expires_at_ms});
  if (expires_at_ms != 0) by_expiry_.emplace(expires_at_ms, key);
}

std::optional<uint64_t> ValueCatalog::ExpiryOf(const BlockKey& key) const {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second.expires_at_ms;
}

std::optional<std::string> ValueCatalog::NameOf(const BlockKey& key) const {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second.name;
}

void ValueCatalog::Forget(const BlockKey& key) {
  MutexLock lock(&mu_);
  ForgetLocked(key);
}

void ValueCatalog::ForgetLocked(const BlockKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  if (it->second.expires_at_ms != 0) by_expiry_.erase({it->second.expires_at_ms, key});
  by_key_.erase(it);
}

bool ValueCatalog::Knows(const BlockKey& key) const {
  MutexLock lock(&mu_);
  return by_key_.count(key) != 0;
}

ValueCatalog::Page ValueCatalog::From(uint64_t cursor, size_t count) const {
  MutexLock lock(&mu_);
  Page page;
  if (count == 0) count = 1;
  auto it = by_key_.lower_bound(BlockKey{cursor, 0});
  for (; it != by_key_.end(); ++it) {
    const bool full = page.entries.size() >= count;
    if (full && it->first.hi != page.entries.back().key.hi) break;
    page.entries.push_back(it->second);
  }
  // The next key's high half exceeds a returned one's, so it is never 0.
  page.next_cursor = it == by_key_.end() ? 0 : it->first.hi;
  return page;
}

std::vector<BlockKey> ValueCatalog::NextAfterHand(size_t n) {
  MutexLock lock(&mu_);
  std::vector<BlockKey> keys;
  auto it = by_key_.upper_bound(hand_);
  while (keys.size() < std::min(n, by_key_.size())) {
    if (it == by_key_.end()) it = by_key_.begin();
    keys.push_back(it->first);
    hand_ = it->first;
    ++it;
  }
  return keys;
}

std::vector<BlockKey> ValueCatalog::DueBy(uint64_t now_ms, size_t max) const {
  MutexLock lock(&mu_);
  std::vector<BlockKey> due;
  for (auto it = by_expiry_.begin();
       it != by_expiry_.end() && it->first <= now_ms && due.size() < max; ++it) {
    due.push_back(it->second);
  }
  return due;
}

}  // namespace prefixkv::internal
