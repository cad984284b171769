// The router's block index (router_state.h): events in, per-node prefix
// lengths out. Tiers other than RAM and SSD (the shared remote tier) are not
// a node's and are ignored.
#include "router_state.h"

namespace prefixkv::internal {

RouterIndex::RouterIndex(size_t nodes, size_t max_blocks)
    : nodes_(nodes), max_blocks_(max_blocks) {}

uint64_t* RouterIndex::TierMask(Masks& m, TierLevel tier) {
  if (tier == TierLevel::kHot) return &m.hot;
  if (tier == TierLevel::kSsd) return &m.ssd;
  return nullptr;
}

void RouterIndex::Set(size_t node, const BlockKey& key, TierLevel tier,
                      RouterStats* stats) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (map_.size() >= max_blocks_) {
      ++stats->dropped_blocks;
      return;
    }
    it = map_.emplace(key, Masks{}).first;
  }
  *TierMask(it->second, tier) |= uint64_t{1} << node;
}

void RouterIndex::Clear(size_t node, const BlockKey& key, TierLevel tier) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  *TierMask(it->second, tier) &= ~(uint64_t{1} << node);
  if (it->second.hot == 0 && it->second.ssd == 0) map_.erase(it);
}

void RouterIndex::ClearAll(uint64_t hot_clear, uint64_t ssd_clear) {
  for (auto it = map_.begin(); it != map_.end();) {
    it->second.hot &= ~hot_clear;
    it->second.ssd &= ~ssd_clear;
    it = (it->second.hot == 0 && it->second.ssd == 0) ? map_.erase(it) : std::next(it);
  }
}

void RouterIndex::Forget(size_t node) {
  const uint64_t bit = uint64_t{1} << node;
  ClearAll(bit, bit);
}

void RouterIndex::Apply(size_t node, const KvEvent& e, RouterStats* stats) {
  const bool tier_ok = e.tier == TierLevel::kHot || e.tier == TierLevel::kSsd;
  if (node >= nodes_ || !tier_ok) {
    ++stats->ignored_events;
    return;
  }
  ++stats->events;
  switch (e.kind) {
    case KvEventKind::kStored:
      Set(node, e.key, e.tier, stats);
      break;
    case KvEventKind::kRemoved:
      Clear(node, e.key, e.tier);
      break;
    case KvEventKind::kMoved:
      if (e.from == TierLevel::kHot || e.from == TierLevel::kSsd)
        Clear(node, e.key, e.from);
      Set(node, e.key, e.tier, stats);
      break;
    case KvEventKind::kCleared: {
      const uint64_t bit = uint64_t{1} << node;
      ClearAll(e.tier == TierLevel::kHot ? bit : 0, e.tier == TierLevel::kSsd ? bit : 0);
      break;
    }
  }
}

void RouterIndex::Match(std::span<const BlockKey> keys, std::vector<size_t>* ram,
                        std::vector<size_t>* local) const {
  const size_t nodes = nodes_;
  ram->assign(nodes, 0);
  local->assign(nodes, 0);
  const uint64_t all = nodes == 64 ? ~uint64_t{0} : (uint64_t{1} << nodes) - 1;
  uint64_t ram_alive = all, local_alive = all;  // nodes whose prefix goes on
  // A node's prefix ends at the first block it lacks: record the length when
  // its bit drops out.
  auto record = [](uint64_t dropped, size_t length, std::vector<size_t>* out) {
    for (; dropped != 0; dropped &= dropped - 1) {
      (*out)[static_cast<size_t>(__builtin_ctzll(dropped))] = length;
    }
  };
  size_t i = 0;
  for (; i < keys.size() && local_alive != 0; ++i) {
    auto it = map_.find(keys[i]);
    const Masks m = it == map_.end() ? Masks{} : it->second;
    record(ram_alive & ~m.hot, i, ram);
    record(local_alive & ~(m.hot | m.ssd), i, local);
    ram_alive &= m.hot;
    local_alive &= m.hot | m.ssd;
  }
  record(ram_alive, i, ram);
  record(local_alive, i, local);
}

bool RouterIndex::Holds(size_t node, const BlockKey& key, TierLevel tier) const {
  auto it = map_.find(key);
  if (node >= nodes_ || it == map_.end()) return false;
  const uint64_t mask = tier == TierLevel::kHot   ? it->second.hot
                        : tier == TierLevel::kSsd ? it->second.ssd
                                                  : 0;
  return (mask >> node) & 1;
}

}  // namespace prefixkv::internal
