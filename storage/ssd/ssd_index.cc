// SsdIndex (ssd_index.h): the SSD tier's in-memory view of its records, so
// lookups, eviction choices and reclamation never read RocksDB. Besides the
// entries it keeps three derived structures in step with every Insert, Erase
// and Relocate: the live counters per owner, the live payload bytes per segment
// (which the reclaimer compacts by) and the set of chain leaves in eviction
// order (a block with a stored or in-flight child is never a victim, so no
// stored block loses its parent to eviction).
#include "ssd_index.h"

#include <algorithm>
#include <cstdint>

#include "prefixkv/tier_counter_fields.h"
#include "ssd_segment.h"

namespace prefixkv::ssd {

const IndexEntry* SsdIndex::Find(const BlockKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void SsdIndex::Insert(const BlockKey& key, const IndexEntry& entry, bool inherit) {
  uint32_t chain_hits = entry.chain_hits;
  if (const IndexEntry* old = Find(key); inherit && old != nullptr)
    chain_hits = std::max(chain_hits, old->chain_hits);
  if (const IndexEntry* parent = Find(entry.parent); inherit && parent != nullptr) {
    chain_hits = std::max(chain_hits, parent->chain_hits);  // frequency per chain
  }
  Erase(key);
  IndexEntry& e = entries_.emplace(key, entry).first->second;
  e.chain_hits = chain_hits;
  e.children = 0;
  if (auto it = absent_children_.find(key); it != absent_children_.end()) {
    e.children = it->second;  // children stored before their parent
    absent_children_.erase(it);
  }
  TierCounters& o = owners_[entry.owner];
  o.entries += 1;
  o.bytes += entry.bytes;
  total_bytes_ += entry.bytes;
  live_[entry.segment] += ExtentBytes(entry.bytes);
  live_total_ += ExtentBytes(entry.bytes);
  max_seq_ = std::max(max_seq_, entry.access_seq);
  AddChild(entry.parent);
  AddLeaf(key);
}

bool SsdIndex::Erase(const BlockKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  const IndexEntry e = it->second;
  DropLeaf(key);
  claimed_.erase(key);
  if (e.children > 0) absent_children_[key] = e.children;
  entries_.erase(it);
  TierCounters& o = owners_[e.owner];
  o.entries -= 1;
  o.bytes -= e.bytes;
  total_bytes_ -= e.bytes;
  DropLive(e.segment, e.bytes);
  DropChild(e.parent);
  return true;
}

void SsdIndex::DropLive(uint64_t segment, uint64_t payload_bytes) {
  auto it = live_.find(segment);
  if (it == live_.end()) return;
  it->second -= ExtentBytes(payload_bytes);
  live_total_ -= ExtentBytes(payload_bytes);
  if (it->second == 0) live_.erase(it);
}

void SsdIndex::Relocate(const BlockKey& key, uint64_t segment, uint64_t offset) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  DropLive(it->second.segment, it->second.bytes);
  it->second.segment = segment;
  it->second.offset = offset;
  live_[segment] += ExtentBytes(it->second.bytes);
  live_total_ += ExtentBytes(it->second.bytes);
}

uint64_t SsdIndex::LiveBytes(uint64_t segment) const {
  auto it = live_.find(segment);
  return it == live_.end() ? 0 : it->second;
}

std::vector<BlockKey> SsdIndex::KeysIn(uint64_t segment) const {
  std::vector<BlockKey> out;
  for (const auto& [key, e] : entries_) {
    if (e.segment == segment) out.push_back(key);
  }
  return out;
}

void SsdIndex::Touch(const BlockKey& key, uint64_t access_seq, bool hit) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  DropLeaf(key);
  it->second.access_seq = access_seq;
  if (hit && it->second.chain_hits < UINT32_MAX) ++it->second.chain_hits;
  max_seq_ = std::max(max_seq_, access_seq);
  AddLeaf(key);
}

std::optional<BlockKey> SsdIndex::ClaimVictim() {
  if (leaves_.empty()) return std::nullopt;
  BlockKey key = leaves_.begin()->second;
  leaves_.erase(leaves_.begin());
  claimed_.insert(key);
  return key;
}

void SsdIndex::Release(const BlockKey& key) {
  if (claimed_.erase(key) > 0) AddLeaf(key);
}

void SsdIndex::BeginPendingChild(const BlockKey& parent) { AddChild(parent); }
void SsdIndex::EndPendingChild(const BlockKey& parent) { DropChild(parent); }

bool SsdIndex::HasStoredParent(const IndexEntry& e) const {
  return e.parent.IsZero() || e.parent == e.namespace_id || entries_.count(e.parent) > 0;
}

uint32_t SsdIndex::ChildCount(const BlockKey& key) const {
  if (const IndexEntry* e = Find(key)) return e->children;
  auto it = absent_children_.find(key);
  return it == absent_children_.end() ? 0 : it->second;
}

TierCounters SsdIndex::OwnerCounters(OwnerId owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? TierCounters{} : it->second;
}

TierCounters SsdIndex::Totals() const {
  TierCounters t;
  for (const auto& [owner, c] : owners_) AddTierCounters(&t, c);
  return t;
}

bool SsdIndex::IsLeaf(const BlockKey& key) const {
  return entries_.count(key) > 0 && ChildCount(key) == 0 && claimed_.count(key) == 0;
}

void SsdIndex::AddChild(const BlockKey& parent) {
  if (parent.IsZero()) return;
  auto it = entries_.find(parent);
  if (it == entries_.end()) {
    ++absent_children_[parent];
  } else if (it->second.children == 0) {
    DropLeaf(parent);
    it->second.children = 1;
  } else {
    ++it->second.children;
  }
}

void SsdIndex::DropChild(const BlockKey& parent) {
  if (parent.IsZero()) return;
  auto it = entries_.find(parent);
  if (it == entries_.end()) {
    auto absent = absent_children_.find(parent);
    if (absent != absent_children_.end() && --absent->second == 0)
      absent_children_.erase(absent);
    return;
  }
  if (it->second.children == 0) return;
  if (--it->second.children == 0) AddLeaf(parent);
}

uint64_t SsdIndex::Rank(const IndexEntry& e) const {
  // The chain policy: a reused chain's leaf sorts as if accessed as many
  // blocks later as the tier holds blocks of its size (the hot tier's rank,
  // docs/eviction.md). The window is fixed, so a rank never changes unseen.
  if (chain_capacity_ == 0 || e.chain_hits == 0) return e.access_seq;
  const uint64_t window = chain_capacity_ / std::max<uint64_t>(e.bytes, 1);
  return e.access_seq > UINT64_MAX - window ? UINT64_MAX : e.access_seq + window;
}

void SsdIndex::AddLeaf(const BlockKey& key) {
  if (!IsLeaf(key)) return;
  leaves_.emplace(Rank(entries_.at(key)), key);
}

void SsdIndex::DropLeaf(const BlockKey& key) {
  auto it = entries_.find(key);
  if (it != entries_.end()) leaves_.erase({Rank(it->second), key});
}

}  // namespace prefixkv::ssd
