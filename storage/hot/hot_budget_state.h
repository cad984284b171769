// The state behind SharedHotBudget and its HotTier views (private header).
//
// One mutex guards everything: the key map (one for every owner: a block's
// owner is a field of its entry), the child counts that leaf-lru needs, the
// counters, and intrusive ordered sets of candidate
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
//
// Locking (checked by clang's -Wthread-safety): BudgetState::mu_ is the only
// lock of this module's budget. It is a leaf: nothing else is locked, and no
// listener or callback other than ForEach's runs, while it is held. Listeners
// run after it is released (Deliver); waits for a spill in flight
// (WaitForSpill, SetListener) release it while they wait. OwnerState and
// HotEntry have no annotations of their own: they are reached only through
// owners_ and entries_ (GUARDED_BY mu_), via Owner() and Find(), which REQUIRE mu_, or,
// for a pinned entry, through Unpin(), which takes it.
#pragma once

#include <boost/intrusive/set.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/shared_hot_budget.h"

namespace prefixkv {
class HotBudgetTestPeer;
}  // namespace prefixkv

namespace prefixkv::hot_internal {

// SharedHotBudget befriends this (and nothing else of the module's): module
// code, and the tests of storage/hot that corrupt a budget to prove Audit()
// notices (tests/storage/hot/hot_budget_test_peer.h), reach a budget's
// state through it. Defined in shared_hot_budget.cc.
struct Access {
  static BudgetState& StateOf(SharedHotBudget& budget);
};

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

// One owner's part of the budget; every field is guarded by the BudgetState's
// mu_ (reached only through BudgetState::Owner(), which REQUIRES it). The
// blocks themselves are in BudgetState::entries_: one key space for every
// owner, as on the SSD tier (chain keys are rooted in a namespace, so two
// owners never name the same block); a block's owner is a field of it.
struct OwnerState {
  std::string name;
  std::optional<uint64_t> quota_bytes;  // nullopt: limited by the budget only
  TierCounters counters;
  // External charges (Charge/Uncharge): what Audit() recomputes
  // counters.external_bytes (and their share of counters.bytes) from.
  uint64_t charged_bytes = 0;
  // This owner's own listener (HotTier::Open views); null: the budget-wide
  // one (BudgetState::shared_listener_), if any.
  EvictionListener* listener = nullptr;
  // Deliveries to `listener` committed but not yet returned; SetListener
  // waits for zero so a replaced listener is never called afterwards.
  uint32_t deliveries_in_flight = 0;
  // This owner's candidates, maintained only while it has a quota (only quota
  // eviction needs them). Declared last, destroyed first.
  OwnerOrder order;
};

// parent key -> resident entries naming it as parent.
using ChildCountMap = std::unordered_map<BlockKey, uint32_t, BlockKeyHash>;

// A victim to hand to its owner's listener once the mutex is released.
struct Delivery {
  EvictionListener* listener;
  bool shared;     // `listener` is the budget-wide one (whose in-flight count)
  BlockMeta meta;  // meta.owner: whose listener and in-flight count
  SharedBytes payload;
  bool dirty;
};

// Thread-safe: public methods lock mu_ (EXCLUDES); private helpers REQUIRE it.
class BudgetState {
 public:
  // Corrupts a budget's counters and entries (under mu_) to prove Audit()
  // notices: tests/storage/hot/hot_budget_test_peer.h.
  friend class prefixkv::HotBudgetTestPeer;

  explicit BudgetState(const SharedHotBudgetOptions& options);
  ~BudgetState();

  // Owners (shared_hot_budget.cc).
  StatusOr<OwnerId> RegisterOwner(const std::string& name,
                                  std::optional<uint64_t> quota_bytes) EXCLUDES(mu_);
  Status SetOwnerQuota(OwnerId owner, std::optional<uint64_t> quota_bytes) EXCLUDES(mu_);
  StatusOr<std::optional<uint64_t>> OwnerQuota(OwnerId owner) const EXCLUDES(mu_);
  StatusOr<std::string> OwnerName(OwnerId owner) const EXCLUDES(mu_);
  size_t owner_count() const EXCLUDES(mu_);
  TierCounters Totals() const EXCLUDES(mu_);
  // Totals(), and each owner's counters into `owners` (by id), under one lock.
  TierCounters Totals(std::vector<TierCounters>* owners) const EXCLUDES(mu_);
  TierCounters OwnerCounters(OwnerId owner) const EXCLUDES(mu_);
  bool HoldsNow(OwnerId owner, const BlockKey& key) const EXCLUDES(mu_);
  // Returns once no delivery to the previous listener is in flight.
  // REQUIRES: not called from an eviction listener.
  void SetListener(OwnerId owner, EvictionListener* listener) EXCLUDES(mu_);
  void DetachEvents() EXCLUDES(mu_);
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  std::string_view policy_name() const { return policy_->name(); }

  // One owner's blocks (hot_budget_ops.cc, hot_budget_insert.cc).
  // REQUIRES for all: `owner` registered.
  Status Put(OwnerId owner, const BlockMeta& meta, SharedBytes payload, bool dirty)
      EXCLUDES(mu_);
  StatusOr<SharedBytes> Get(OwnerId owner, const BlockKey& key) EXCLUDES(mu_);
  std::optional<PinnedBlock> Pin(OwnerId owner, const BlockKey& key) EXCLUDES(mu_);
  void Unpin(HotEntry* entry) EXCLUDES(mu_);
  StatusOr<BlockMeta> Peek(OwnerId owner, const BlockKey& key) const EXCLUDES(mu_);
  bool Contains(OwnerId owner, const BlockKey& key) const EXCLUDES(mu_);
  // A resident block of `owner` has `key` as its parent (resident or not).
  // Never waits for a spill: safe from an eviction listener.
  bool HasResidentChildren(OwnerId owner, const BlockKey& key) const EXCLUDES(mu_);
  Status Remove(OwnerId owner, const BlockKey& key) EXCLUDES(mu_);
  // Sets the block's unlikely_reuse fact and repositions it; false when the
  // block is not resident.
  bool HintUnlikelyReuse(OwnerId owner, const BlockKey& key) EXCLUDES(mu_);
  // The payload without counting a hit or touching the block.
  StatusOr<SharedBytes> PeekPayload(OwnerId owner, const BlockKey& key) const
      EXCLUDES(mu_);
  // Clears the dirty flag when the block's payload is still `payload`;
  // counts nothing, moves nothing. Whether it did.
  bool MarkClean(OwnerId owner, const BlockKey& key, const SharedBytes& payload)
      EXCLUDES(mu_);
  // Calls `fn` under mu_: it must not call back into the budget.
  void ForEach(OwnerId owner,
               const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const
      EXCLUDES(mu_);
  // Waits for the dirty deliveries in flight now (HotTier::WaitForHandOvers).
  void WaitForHandOvers() const EXCLUDES(mu_);

  // External charges (hot_budget_charge.cc); see SharedHotBudget.
  Status Charge(OwnerId owner, uint64_t bytes, uint64_t* shortfall_bytes) EXCLUDES(mu_);
  Status Uncharge(OwnerId owner, uint64_t bytes) EXCLUDES(mu_);

  // hot_budget_audit.cc.
  void Audit(std::vector<AuditFinding>* findings) const EXCLUDES(mu_);

 private:
  OwnerState& Owner(OwnerId id) REQUIRES(mu_) { return *owners_[id]; }
  const OwnerState& Owner(OwnerId id) const REQUIRES(mu_) { return *owners_[id]; }
  HotEntry* Find(OwnerId owner, const BlockKey& key) REQUIRES(mu_);
  // The entry of `key` once no spill of it is in flight (WaitForSpill); null
  // when absent.
  const HotEntry* FindSettled(MutexLock& lock, OwnerId owner, const BlockKey& key) const
      REQUIRES(mu_);

  // Ordered-set maintenance. Linkable: belongs in the orders (pinned or not).
  bool Linkable(const HotEntry& e) const REQUIRES(mu_) {
    return !e.in_flight && policy_->MayEvict(e.facts);
  }
  // The first entry of `order` that is not pinned: the next victim, or null.
  // REQUIRES: mu_ held (an order is guarded by it; static, so not annotated).
  template <typename Order>
  static HotEntry* FirstUnpinned(Order& order) {
    for (HotEntry& e : order) {
      if (e.facts.pins == 0) return &e;
    }
    return nullptr;
  }
  void Unlink(HotEntry& e) REQUIRES(mu_);
  void Relink(HotEntry& e) REQUIRES(mu_);
  void Touch(HotEntry& e) REQUIRES(mu_);
  // Adds `delta` to the resident-children count of `child`'s parent and
  // refreshes the parent's place in the orders if it is resident.
  void AddChildRef(const BlockMeta& child, int delta) REQUIRES(mu_);
  // Counts a miss against the lookup's owner: `owner`, or for a budget-wide
  // lookup the thread's ReadOwnerScope when it names a registered owner.
  void CountMiss(OwnerId owner) REQUIRES(mu_);
  // Moves a resident block's charge (and pinned charge) to `to` (a Put of
  // its key by another owner). REQUIRES: `e` unlinked.
  void TransferOwner(HotEntry& e, OwnerId to) REQUIRES(mu_);

  // Victim selection (hot_budget_insert.cc). TakeVictim unlinks `victim`
  // (the first unpinned entry of an order) tentatively and returns its charge.
  uint64_t TakeVictim(HotEntry& victim, std::vector<HotEntry*>* victims) REQUIRES(mu_);
  void CommitVictims(const std::vector<HotEntry*>& victims, std::vector<Delivery>* out)
      REQUIRES(mu_);
  // Calls every delivery's listener, then releases their in-flight counts.
  void Deliver(const std::vector<Delivery>& deliveries) EXCLUDES(mu_);
  void RollbackVictims(const std::vector<HotEntry*>& victims) REQUIRES(mu_);
  // Tentatively evicts until `owner` holding `owner_after` bytes fits its
  // quota and the budget holding `total_after` fits its capacity. Returns the
  // bytes still missing once nothing more can be evicted (the larger of the
  // two excesses); 0 when it fits. Non-zero: the victims must be rolled back.
  uint64_t PlanRoom(OwnerState& owner, uint64_t owner_after, uint64_t total_after,
                    std::vector<HotEntry*>* victims) REQUIRES(mu_);
  void Replace(OwnerState& owner, HotEntry& e, const BlockMeta& meta, SharedBytes payload,
               bool dirty) REQUIRES(mu_);
  void InsertNew(OwnerState& owner, const BlockMeta& meta, SharedBytes payload,
                 bool dirty) REQUIRES(mu_);

  // Audit helpers (hot_budget_audit.cc).
  void AuditOwner(OwnerId id, const ChildCountMap& children, TierCounters* recomputed,
                  size_t* linked_count, std::vector<AuditFinding>* findings) const
      REQUIRES(mu_);

  // Blocks until no dirty delivery of `key` is in flight (see OwnerState::
  // spilling), releasing mu_ while it waits. REQUIRES: not called from an
  // eviction listener for the key it is delivering.
  void WaitForSpill(MutexLock& lock, OwnerId owner, const BlockKey& key) const
      REQUIRES(mu_) {
    (void)owner;
    deliveries_done_.Wait(lock, [&]() REQUIRES(mu_) { return !spilling_.contains(key); });
  }

  // Reports a change of `e`'s block (kv_event_sink.h), under mu_.
  void EmitEvent(KvEventKind kind, const HotEntry& e, KvRemoveReason reason)
      REQUIRES(mu_);

  const uint64_t capacity_bytes_;
  const std::unique_ptr<EvictionPolicy> policy_;
  KvEventSink* events_ GUARDED_BY(mu_);  // null once detached (DetachEvents)
  const bool clean_blocks_are_below_;

  mutable Mutex mu_;
  // Signalled (after mu_ is released) when in-flight counts drop.
  mutable CondVar deliveries_done_;
  std::vector<std::unique_ptr<OwnerState>> owners_ GUARDED_BY(mu_);  // index = OwnerId
  // Every owner's blocks. Node-based: entry addresses are stable, which pins
  // and the orders rely on.
  std::unordered_map<BlockKey, HotEntry, BlockKeyHash> entries_ GUARDED_BY(mu_);
  // parent key -> resident entries naming it as parent (parent resident or not).
  ChildCountMap child_counts_ GUARDED_BY(mu_);
  // Keys of dirty victims handed to a listener whose OnEvict has not
  // returned: for that moment the block is in neither tier, so lookups and
  // removals of such a key wait (WaitForSpill) instead of answering "absent".
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> spilling_ GUARDED_BY(mu_);
  // The listener of every owner without its own (the engine's one TierStack:
  // HotTier::OpenShared views), and its deliveries not yet returned.
  EvictionListener* shared_listener_ GUARDED_BY(mu_) = nullptr;
  uint32_t shared_deliveries_in_flight_ GUARDED_BY(mu_) = 0;
  // Misses of budget-wide lookups made without a registered read owner
  // (ReadOwnerScope): part of total_, in no owner's counters.
  uint64_t unattributed_misses_ GUARDED_BY(mu_) = 0;
  TierCounters total_ GUARDED_BY(mu_);
  uint64_t access_seq_ GUARDED_BY(mu_) = 0;
  GlobalOrder order_ GUARDED_BY(mu_);  // every owner's candidates, pinned or not
};

}  // namespace prefixkv::hot_internal
