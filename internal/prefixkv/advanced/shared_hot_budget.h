// SharedHotBudget: one RAM byte budget shared by every model in the process.
//
// Each model registers as an owner; a block's owner is a field of it
// (BlockMeta::owner), and all owners' blocks share ONE key space (as on the
// SSD tier: chain keys are rooted in their namespace) and ONE eviction order,
// so an insert by owner A may evict owner B's least recently used block; that
// victim goes to B's eviction listener if B has one (a HotTier::Open view's),
// else to the budget-wide listener (the engine's one TierStack, through a
// HotTier::OpenShared view), never to A's. An optional per-owner quota caps
// one owner's share, so a small auxiliary model cannot take half the cache.
//
// The limit is soft in one sense only: unpinned blocks are evicted to make
// room; when what remains is pinned, the insert fails with NoSpace and
// changes nothing. The budget's charged bytes never exceed capacity_bytes.
//
// Besides blocks, an owner may hold external charges (Charge/Uncharge):
// bytes of memory kept elsewhere, such as live sessions' KV caches, that
// count against the same capacity (and the owner's quota). The budget
// cannot evict them; it evicts unpinned blocks to make room for them.
//
// Counters (TierCounters) are kept per owner and in total; the total always
// equals the sum of the owners, and Audit() proves it. External charges are
// in `bytes` and `external_bytes`, never in `entries` or the event counters.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prefixkv/advanced/eviction_policy.h"
#include "prefixkv/advanced/kv_event_sink.h"
#include "prefixkv/advanced/tier.h"
#include "prefixkv/status.h"

namespace prefixkv {

namespace hot_internal {
class BudgetState;
struct Access;  // storage/hot/hot_budget_state.h: the module's own way to the state
}  // namespace hot_internal

struct SharedHotBudgetOptions {
  // Maximum charged bytes resident across all owners; must be > 0.
  uint64_t capacity_bytes = uint64_t{1} << 30;
  // Which blocks leave first (see eviction_policy.h).
  EvictionPolicyKind policy = EvictionPolicyKind::kLru;
  // Receives a kStored event for every Put and a kRemoved one for every Remove
  // and eviction, under the budget's lock (kv_event_sink.h; not owned; null:
  // none).
  KvEventSink* events = nullptr;
  // A clean block has a copy in a lower tier (an SSD tier is below every
  // owner): removal events of clean blocks say copy_remains.
  bool clean_blocks_are_below = false;
};

// Thread-safe: every method may be called concurrently. All owners share one
// mutex (a hit holds it for well under a microsecond); eviction listeners are
// called after it is released.
class SharedHotBudget {
 public:
  // InvalidArgument when capacity_bytes is 0.
  static StatusOr<std::shared_ptr<SharedHotBudget>> Create(
      const SharedHotBudgetOptions& options);
  // REQUIRES: no PinnedBlock of this budget is still held.
  ~SharedHotBudget();
  SharedHotBudget(const SharedHotBudget&) = delete;
  SharedHotBudget& operator=(const SharedHotBudget&) = delete;

  // Adds an owner (normally one per model) and returns its id; ids are dense,
  // starting at 0, in registration order. `quota_bytes`: the most charged
  // bytes this owner may hold (nullopt: limited only by the budget).
  // InvalidArgument for an empty or already registered name, or a zero quota.
  StatusOr<OwnerId> RegisterOwner(const std::string& name,
                                  std::optional<uint64_t> quota_bytes = std::nullopt);

  // Changes an owner's quota. Lowering it evicts the owner's unpinned blocks
  // (through its listener) until it fits; pinned blocks may keep the owner
  // above the quota until they are released, and its inserts fail meanwhile.
  // InvalidArgument for an unknown owner or a zero quota.
  Status SetOwnerQuota(OwnerId owner, std::optional<uint64_t> quota_bytes);

  // NotFound for an unknown owner.
  StatusOr<std::optional<uint64_t>> OwnerQuota(OwnerId owner) const;
  StatusOr<std::string> OwnerName(OwnerId owner) const;
  size_t owner_count() const;

  uint64_t capacity_bytes() const;
  std::string_view policy_name() const;

  // Charges `owner` for `bytes` held outside its blocks. Makes room as an
  // insert does (the owner's own blocks while its quota would be exceeded,
  // then anyone's while the budget would be), in policy order, handing
  // victims to their owners' listeners after the lock is released (this call
  // may therefore block on a listener's backpressure: call it holding no lock
  // a listener or a store could need). Returns OK once charged; NoSpace when
  // even evicting every evictable block would not make room: then nothing
  // changes and `*shortfall_bytes` (if not null) is set to the bytes still
  // missing after such an eviction, that is how much the owner must uncharge
  // (or other owners free) first; UINT64_MAX when `bytes` alone exceeds the
  // capacity or the owner's quota. A zero charge is OK and changes nothing.
  // InvalidArgument for an unknown owner.
  Status Charge(OwnerId owner, uint64_t bytes, uint64_t* shortfall_bytes = nullptr);
  // Returns `bytes` of the owner's external charges. Never evicts or blocks.
  // InvalidArgument, changing nothing, for an unknown owner or more bytes than
  // it has charged.
  Status Uncharge(OwnerId owner, uint64_t bytes);

  // Whether `owner` (kEveryOwner: anyone) holds `key` right now, without
  // waiting for a spill of it in flight (which then counts as gone): for the
  // KV events' copy_remains.
  bool HoldsNow(OwnerId owner, const BlockKey& key) const;

  // Stops reporting KV events (SharedHotBudgetOptions::events): the sink is
  // going away while the budget may live on (an Engine's Close, with a
  // memory charge or a restore plan still holding the budget, whose charges
  // may then evict the blocks left in it). Returns once no event is being
  // reported; nothing is reported afterwards.
  void DetachEvents();

  // Sum over all owners.
  TierCounters Totals() const;
  // The same, and every owner's counters into `owners` (indexed by id), read
  // at one moment: they add up to the totals (Engine::Stats: a scrape that
  // read the totals and then each owner under load did not add up).
  TierCounters Totals(std::vector<TierCounters>* owners) const;
  // One owner's counters; all zero for an unknown owner.
  TierCounters OwnerCounters(OwnerId owner) const;

  // Recomputes every owner's state counters (entries, bytes, pinned_bytes,
  // external_bytes) and each block's charge, child count and eviction-order
  // membership from the blocks themselves and the owner's external charges;
  // checks that the total equals the sum of the owners for every counter and
  // that the budget (blocks and charges) is not exceeded. Appends one
  // finding per disagreement. Always OK (an in-memory audit cannot fail to
  // run). Holds the budget's lock for a walk over every block.
  Status Audit(std::vector<AuditFinding>* findings) const;

 private:
  friend class HotTier;
  friend struct hot_internal::Access;
  explicit SharedHotBudget(const SharedHotBudgetOptions& options);

  std::unique_ptr<hot_internal::BudgetState> state_;
};

}  // namespace prefixkv
