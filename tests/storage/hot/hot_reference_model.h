// The plain reference model of a SharedHotBudget for the model-based stress
// test: maps and linear scans, no trees, no tentative victims. It states the
// budget's contract as directly as possible:
//   - a Put first evicts the inserting owner's least recently used unpinned
//     candidates while it would exceed its quota, then anyone's while the
//     budget would be exceeded; the block itself is never a victim, and a new
//     block counts as its parent's resident child during its own insert;
//   - a candidate is unpinned and, under leaf-lru and chain, has no resident
//     child of the same owner; recency is refreshed by inserts, replacements,
//     hits and pins (not by unpins, Peek or Contains);
//   - under chain, candidates leave in order of last access plus, for a block
//     whose chain was reused (hits and pins count one each; a new block starts
//     from its resident parent's count), capacity / charge accesses;
//   - a block hinted unlikely to be reused (HintUnlikelyReuse) ranks before
//     every block without the hint, oldest access first, until a hit or pin
//     clears the hint (a replacement keeps it);
//   - when not enough can be evicted, nothing changes;
//   - victims of an owner with a listener are handed over (dirty ones count
//     as spills); all count as evictions;
//   - an external charge makes room as an insert does (without a block of its
//     own), counts in `bytes` and `external_bytes`, is never a victim, and
//     when it cannot fit reports the bytes still missing after evicting
//     everything it could (UINT64_MAX when it exceeds capacity or quota).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"

namespace prefixkv::hot_test {

struct Victim {
  OwnerId owner;
  uint64_t id;
  bool dirty;
  bool operator==(const Victim&) const = default;
};

// One budget's expected state. Each method mirrors one real call and returns
// what that call must return; TakeVictims() yields the listener deliveries
// the calls must have made, in order.
class Model {
 public:
  struct Entry {
    uint64_t charge, seq, parent, version;
    uint32_t pins = 0;
    bool dirty;
    uint32_t chain_hits = 0;
    bool unlikely = false;  // HintUnlikelyReuse since the last hit or pin
  };
  struct Owner {
    std::optional<uint64_t> quota;
    bool has_listener = true;
    std::map<uint64_t, Entry> entries;
    uint64_t charged = 0;  // external charges
    TierCounters events;   // event counters only; state is recomputed
  };

  // `owners` owners sharing `capacity_bytes`; `silent_owner` has no listener.
  Model(bool leaf, OwnerId owners, uint64_t capacity_bytes, OwnerId silent_owner,
        bool chain = false)
      : leaf_(leaf || chain), chain_(chain), capacity_(capacity_bytes), owners_(owners) {
    owners_[silent_owner].has_listener = false;
  }

  Owner& owner(OwnerId o) { return owners_[o]; }
  std::vector<Victim> TakeVictims() { return std::exchange(victims_, {}); }

  TierCounters Counters(OwnerId o) const {
    TierCounters c = owners_[o].events;
    for (const auto& [id, e] : owners_[o].entries) {
      ++c.entries;
      c.bytes += e.charge;
      if (e.pins > 0) c.pinned_bytes += e.charge;
    }
    c.bytes += owners_[o].charged;
    c.external_bytes = owners_[o].charged;
    return c;
  }

  // False: the Put must fail with NoSpace (and change nothing).
  bool Put(OwnerId o, uint64_t id, uint64_t parent, uint64_t size, bool dirty,
           uint64_t ver) {
    const uint64_t charge = HotEntryCharge(size);
    Owner& own = owners_[o];
    if (charge > capacity_ || (own.quota && charge > *own.quota)) return false;
    auto existing = own.entries.find(id);
    const uint64_t old = existing != own.entries.end() ? existing->second.charge : 0;
    Plan plan{o, id, existing == own.entries.end() ? parent : 0, {}, {}};
    plan.children = ChildCounts(plan);
    uint64_t owner_after = Bytes(o) - old + charge,
             total_after = TotalBytes() - old + charge;
    while (own.quota && owner_after > *own.quota) {
      auto v = Oldest(plan, o);
      if (!v) return false;
      const uint64_t freed = Doom(&plan, *v);
      owner_after -= freed;
      total_after -= freed;
    }
    while (total_after > capacity_) {
      auto v = Oldest(plan, std::nullopt);
      if (!v) return false;
      total_after -= Doom(&plan, *v);
    }
    for (const auto& [vo, vid] : plan.doomed) Evict(vo, vid);
    const bool is_new = !own.entries.contains(id);
    Entry& e = own.entries[id];
    uint32_t hits = e.chain_hits;
    if (is_new && parent != id && own.entries.contains(parent))
      hits = own.entries.at(parent).chain_hits;
    e = Entry{charge, ++seq_, parent, ver, e.pins, dirty, hits, !is_new && e.unlikely};
    ++own.events.inserts;
    return true;
  }

  // False: the Charge must fail with NoSpace (changing nothing) and report
  // `*shortfall`.
  bool Charge(OwnerId o, uint64_t bytes, uint64_t* shortfall) {
    Owner& own = owners_[o];
    *shortfall = 0;
    if (bytes == 0) return true;  // nothing to make room for, even over quota
    if (bytes > capacity_ || (own.quota && bytes > *own.quota)) {
      *shortfall = UINT64_MAX;
      return false;
    }
    Plan plan{o, 0, 0, {}, {}};
    plan.children = ChildCounts(plan);
    uint64_t owner_after = Bytes(o) + bytes, total_after = TotalBytes() + bytes;
    while (own.quota && owner_after > *own.quota) {
      auto v = Oldest(plan, o);
      if (!v) break;
      const uint64_t freed = Doom(&plan, *v);
      owner_after -= freed;
      total_after -= freed;
    }
    const uint64_t quota_excess =
        own.quota && owner_after > *own.quota ? owner_after - *own.quota : 0;
    while (total_after > capacity_) {
      auto v = Oldest(plan, std::nullopt);
      if (!v) break;
      total_after -= Doom(&plan, *v);
    }
    const uint64_t capacity_excess =
        total_after > capacity_ ? total_after - capacity_ : 0;
    *shortfall = std::max(quota_excess, capacity_excess);
    if (*shortfall != 0) return false;
    for (const auto& [vo, vid] : plan.doomed) Evict(vo, vid);
    own.charged += bytes;
    return true;
  }

  // False: the Uncharge must fail with InvalidArgument (changing nothing).
  bool Uncharge(OwnerId o, uint64_t bytes) {
    if (bytes > owners_[o].charged) return false;
    owners_[o].charged -= bytes;
    return true;
  }

  std::optional<Entry> Lookup(OwnerId o, uint64_t id, bool pin) {
    auto it = owners_[o].entries.find(id);
    if (it == owners_[o].entries.end()) {
      ++owners_[o].events.misses;
      return std::nullopt;
    }
    ++owners_[o].events.hits;
    it->second.seq = ++seq_;
    ++it->second.chain_hits;
    it->second.unlikely = false;
    if (pin) ++it->second.pins;
    return it->second;
  }

  // False: the block is not resident (HintUnlikelyReuse returns false).
  bool Hint(OwnerId o, uint64_t id) {
    auto it = owners_[o].entries.find(id);
    if (it == owners_[o].entries.end()) return false;
    it->second.unlikely = true;
    return true;
  }

  void Unpin(OwnerId o, uint64_t id) { --owners_[o].entries.at(id).pins; }

  // 0 ok, 1 not found, 2 busy.
  int Remove(OwnerId o, uint64_t id) {
    auto it = owners_[o].entries.find(id);
    if (it == owners_[o].entries.end()) return 1;
    if (it->second.pins > 0) return 2;
    owners_[o].entries.erase(it);
    ++owners_[o].events.removes;
    return 0;
  }

  void SetQuota(OwnerId o, std::optional<uint64_t> quota) {
    owners_[o].quota = quota;
    Plan plan{o, 0, 0, {}, {}};
    plan.children = ChildCounts(plan);
    uint64_t bytes = Bytes(o);
    while (quota && bytes > *quota) {
      auto v = Oldest(plan, o);
      if (!v) break;
      bytes -= Doom(&plan, *v);
    }
    for (const auto& [vo, vid] : plan.doomed) Evict(vo, vid);
  }

 private:
  using Slot = std::pair<OwnerId, uint64_t>;
  struct Plan {
    OwnerId owner;
    uint64_t id;          // the block being inserted (never a victim); 0 for none
    uint64_t new_parent;  // a new block's parent: counts as having a child
    std::vector<Slot> doomed;
    std::map<Slot, uint32_t> children;  // resident children, doomed excluded
  };

  std::map<Slot, uint32_t> ChildCounts(const Plan& plan) const {
    std::map<Slot, uint32_t> counts;
    for (OwnerId o = 0; o < owners_.size(); ++o) {
      for (const auto& [id, e] : owners_[o].entries) {
        if (e.parent != 0 && e.parent != id) ++counts[{o, e.parent}];
      }
    }
    if (plan.new_parent != 0 && plan.new_parent != plan.id) {
      ++counts[{plan.owner, plan.new_parent}];
    }
    return counts;
  }

  std::optional<Slot> Oldest(const Plan& plan, std::optional<OwnerId> only) const {
    std::optional<Slot> best;
    std::pair<uint64_t, uint64_t> best_rank{UINT64_MAX, UINT64_MAX};  // (rank, seq)
    for (OwnerId o = 0; o < owners_.size(); ++o) {
      if (only && *only != o) continue;
      for (const auto& [id, e] : owners_[o].entries) {
        const Slot slot{o, id};
        const uint64_t window =
            chain_ && e.chain_hits > 0 ? capacity_ / std::max<uint64_t>(e.charge, 1) : 0;
        // A hinted block ranks 0: before every other, oldest access first.
        const std::pair<uint64_t, uint64_t> rank{e.unlikely ? 0 : e.seq + window, e.seq};
        if ((o == plan.owner && id == plan.id) || e.pins > 0 || rank >= best_rank)
          continue;
        if (std::find(plan.doomed.begin(), plan.doomed.end(), slot) != plan.doomed.end())
          continue;
        auto c = plan.children.find(slot);
        if (leaf_ && c != plan.children.end() && c->second > 0) continue;
        best = slot;
        best_rank = rank;
      }
    }
    return best;
  }

  uint64_t Doom(Plan* plan, const Slot& v) {
    const Entry& e = owners_[v.first].entries.at(v.second);
    if (e.parent != 0 && e.parent != v.second) --plan->children[{v.first, e.parent}];
    plan->doomed.push_back(v);
    return e.charge;
  }

  void Evict(OwnerId o, uint64_t id) {
    Owner& own = owners_[o];
    const Entry e = own.entries.at(id);
    own.entries.erase(id);
    ++own.events.evictions;
    if (own.has_listener) {
      if (e.dirty) ++own.events.spills;
      victims_.push_back({o, id, e.dirty});
    }
  }

  uint64_t Bytes(OwnerId o) const { return Counters(o).bytes; }
  uint64_t TotalBytes() const {
    uint64_t sum = 0;
    for (OwnerId o = 0; o < owners_.size(); ++o) sum += Bytes(o);
    return sum;
  }

  const bool leaf_;
  const bool chain_;
  const uint64_t capacity_;
  std::vector<Owner> owners_;
  uint64_t seq_ = 0;
  std::vector<Victim> victims_;
};

}  // namespace prefixkv::hot_test
