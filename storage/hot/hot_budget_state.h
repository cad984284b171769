// The state behind SharedHotBudget and its HotTier views (private header).
//
// One mutex guards everything: every owner's key map, the child counts that
// leaf-lru needs, the counters, and intrusive ordered sets of candidate
// entries sorted by (policy rank, last access): one across all owners (the
// global LRU) and, for owners with a quota, one per owner. An entry is linked
// exactly when it is not in flight and the policy may evict it; any change to
// the facts that decide its place goes through Unlink/mutate/Relink so the
// sets stay sorted. Pinned entries stay linked and are skipped when victims
// are chosen: a hit then costs one repositioning (the recency touch) and an
// unpin none, at the price of stepping over the (few, short-lived) pinned
// entries near the old end of the order during eviction.
//
// Victims are chosen tentatively (unlinked, marked in flight) and either
// committed or rolled back, so a failed insert changes nothing. Committed
// victims become Deliveries that the caller hands to listeners after
// releasing the mutex.
#pragma once

#include <boost/intrusive/set.hpp>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/shared_hot_budget.h"

namespace prefixkv {
class HotBudgetTestPeer;
}  // namespace prefixkv

namespace prefixkv::hot_internal {

namespace bi = boost::intrusive;
using OrderHook = bi::set_member_hook<bi::link_mode<bi::safe_link>>;

struct HotEntry {
  BlockMeta meta;           // meta.owner is the owner charged
  SharedBytes payload;      // immutable; replaced wholesale by Put
  EvictionCandidate facts;  // what the policy sees; charge lives here
  uint64_t rank = 0;        // policy Rank(facts) when last linked
  bool dirty = false;       // not yet stored in a lower tier
  bool in_flight = false;   // being replaced, or a tentative victim: never linked
  OrderHook global_hook;    // position in BudgetState::order_
  OrderHook owner_hook;     // position in OwnerState::order (owners with a quota)
};

// The charge's overhead estimate must cover at least the map node itself.
static_assert(sizeof(HotEntry) + sizeof(BlockKey) + 4 * sizeof(void*) <=
                  kHotEntryOverheadBytes,
              "HotEntry grew: revisit kHotEntryOverheadBytes in hot_tier.h");

// (rank, last access) is unique because every access takes a new sequence number.
struct EntryOrder {
  bool operator()(const HotEntry& a, const HotEntry& b) const {
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.facts.last_access_seq < b.facts.last_access_seq;
  }
};

using GlobalOrder =
    bi::set<HotEntry, bi::member_hook<HotEntry, OrderHook, &HotEntry::global_hook>,
            bi::compare<EntryOrder>>;
using OwnerOrder =
    bi::set<HotEntry, bi::member_hook<HotEntry, OrderHook, &HotEntry::owner_hook>,
            bi::compare<EntryOrder>>;

struct OwnerState {
  std::string name;
  std::optional<uint64_t> quota_bytes;  // nullopt: limited by the budget only
  TierCounters counters;
  // External charges (Charge/Uncharge): what Audit() recomputes
  // counters.external_bytes (and their share of counters.bytes) from.
  uint64_t charged_bytes = 0;
  EvictionListener* listener = nullptr;
  // Deliveries to `listener` committed but not yet returned; SetListener
  // waits for zero so a replaced listener is never called afterwards.
  uint32_t deliveries_in_flight = 0;
  // Keys of dirty victims handed to `listener` whose OnEvict has not returned:
  // for that moment the block is in neither tier, so lookups and removals of
  // such a key wait (WaitForSpill) instead of answering "absent".
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> spilling;
  // Node-based: entry addresses are stable, which pins and the orders rely on.
  std::unordered_map<BlockKey, HotEntry, BlockKeyHash> entries;
  // parent key -> resident entries naming it as parent (parent resident or not).
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> child_counts;
  // This owner's candidates, maintained only while it has a quota (only quota
  // eviction needs them). Declared last, destroyed first.
  OwnerOrder order;
};

// A victim to hand to its owner's listener once the mutex is released.
struct Delivery {
  EvictionListener* listener;
  BlockMeta meta;  // meta.owner: whose listener and in-flight count
  SharedBytes payload;
  bool dirty;
};

// Thread-safe: public methods lock mu_; private helpers REQUIRE it held.
class BudgetState {
 public:
  friend class prefixkv::HotBudgetTestPeer;  // tests/storage/hot_tier_test.cc

  explicit BudgetState(const SharedHotBudgetOptions& options);
  ~BudgetState();

  // Owners (shared_hot_budget.cc).
  StatusOr<OwnerId> RegisterOwner(const std::string& name,
                                  std::optional<uint64_t> quota_bytes);
  Status SetOwnerQuota(OwnerId owner, std::optional<uint64_t> quota_bytes);
  StatusOr<std::optional<uint64_t>> OwnerQuota(OwnerId owner) const;
  StatusOr<std::string> OwnerName(OwnerId owner) const;
  size_t owner_count() const;
  TierCounters Totals() const;
  TierCounters OwnerCounters(OwnerId owner) const;
  // Returns once no delivery to the previous listener is in flight.
  // REQUIRES: not called from an eviction listener.
  void SetListener(OwnerId owner, EvictionListener* listener);
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  std::string_view policy_name() const { return policy_->name(); }

  // One owner's blocks (hot_budget_ops.cc, hot_budget_insert.cc).
  // REQUIRES for all: `owner` registered.
  Status Put(OwnerId owner, const BlockMeta& meta, SharedBytes payload, bool dirty);
  StatusOr<SharedBytes> Get(OwnerId owner, const BlockKey& key);
  std::optional<PinnedBlock> Pin(OwnerId owner, const BlockKey& key);
  void Unpin(HotEntry* entry);
  StatusOr<BlockMeta> Peek(OwnerId owner, const BlockKey& key) const;
  bool Contains(OwnerId owner, const BlockKey& key) const;
  Status Remove(OwnerId owner, const BlockKey& key);
  void ForEach(OwnerId owner,
               const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const;

  // External charges (hot_budget_charge.cc); see SharedHotBudget.
  Status Charge(OwnerId owner, uint64_t bytes, uint64_t* shortfall_bytes);
  Status Uncharge(OwnerId owner, uint64_t bytes);

  // hot_budget_audit.cc.
  void Audit(std::vector<AuditFinding>* findings) const;

 private:
  OwnerState& Owner(OwnerId id) { return *owners_[id]; }
  const OwnerState& Owner(OwnerId id) const { return *owners_[id]; }
  HotEntry* Find(OwnerId owner, const BlockKey& key);

  // Ordered-set maintenance. Linkable: belongs in the orders (pinned or not).
  bool Linkable(const HotEntry& e) const {
    return !e.in_flight && policy_->MayEvict(e.facts);
  }
  // The first entry of `order` that is not pinned: the next victim, or null.
  template <typename Order>
  static HotEntry* FirstUnpinned(Order& order) {
    for (HotEntry& e : order) {
      if (e.facts.pins == 0) return &e;
    }
    return nullptr;
  }
  void Unlink(HotEntry& e);
  void Relink(HotEntry& e);
  void Touch(HotEntry& e);
  // Adds `delta` to the resident-children count of `child`'s parent and
  // refreshes the parent's place in the orders if it is resident.
  void AddChildRef(OwnerState& owner, const BlockMeta& child, int delta);

  // Victim selection (hot_budget_insert.cc). TakeVictim unlinks `victim`
  // (the first unpinned entry of an order) tentatively and returns its charge.
  uint64_t TakeVictim(HotEntry& victim, std::vector<HotEntry*>* victims);
  void CommitVictims(const std::vector<HotEntry*>& victims, std::vector<Delivery>* out);
  // Calls every delivery's listener, then releases their in-flight counts.
  // REQUIRES: mu_ NOT held.
  void Deliver(const std::vector<Delivery>& deliveries);
  void RollbackVictims(const std::vector<HotEntry*>& victims);
  // Tentatively evicts until `owner` holding `owner_after` bytes fits its
  // quota and the budget holding `total_after` fits its capacity. Returns the
  // bytes still missing once nothing more can be evicted (the larger of the
  // two excesses); 0 when it fits. Non-zero: the victims must be rolled back.
  uint64_t PlanRoom(OwnerState& owner, uint64_t owner_after, uint64_t total_after,
                    std::vector<HotEntry*>* victims);
  void Replace(OwnerState& owner, HotEntry& e, const BlockMeta& meta, SharedBytes payload,
               bool dirty);
  void InsertNew(OwnerState& owner, const BlockMeta& meta, SharedBytes payload,
                 bool dirty);

  // Audit helpers (hot_budget_audit.cc).
  void AuditOwner(OwnerId id, TierCounters* recomputed, size_t* linked_count,
                  std::vector<AuditFinding>* findings) const;

  const uint64_t capacity_bytes_;
  const std::unique_ptr<EvictionPolicy> policy_;
  // Blocks until no dirty delivery of `key` is in flight (see OwnerState::
  // spilling). REQUIRES: `lock` holds mu_; not called from an eviction
  // listener for the key it is delivering.
  void WaitForSpill(std::unique_lock<std::mutex>& lock, OwnerId owner,
                    const BlockKey& key) const {
    deliveries_done_.wait(lock, [&] { return !Owner(owner).spilling.contains(key); });
  }

  mutable std::mutex mu_;
  // Signalled when in-flight counts drop.
  mutable std::condition_variable deliveries_done_;
  std::vector<std::unique_ptr<OwnerState>> owners_;  // index = OwnerId; GUARDED_BY(mu_)
  TierCounters total_;                               // GUARDED_BY(mu_)
  uint64_t access_seq_ = 0;                          // GUARDED_BY(mu_)
  GlobalOrder order_;  // every owner's candidates, pinned or not; GUARDED_BY(mu_)
};

}  // namespace prefixkv::hot_internal
