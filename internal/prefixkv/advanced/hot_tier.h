// HotTier: the RAM tier every cache hit should come from.
//
// A HotTier is one owner's view of a SharedHotBudget: its own key space, its
// own counters and eviction listener, but bytes charged against the budget
// that every model shares (see shared_hot_budget.h). Payloads are immutable
// SharedBytes: Get() and Pin() hand out the very buffer that was Put (zero
// copy), and a replaced block's old bytes stay valid for whoever still holds
// them.
//
// Pinning: Pin() returns a move-only PinnedBlock; while any pin on a block is
// held the block is never evicted and Remove() of it is Busy. Put() on a
// pinned key still replaces it in place (the holder keeps the old bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "prefixkv/advanced/shared_hot_budget.h"
#include "prefixkv/advanced/tier.h"
#include "prefixkv/memory_resource.h"

namespace prefixkv {

namespace hot_internal {
struct HotEntry;
}  // namespace hot_internal

// Bytes charged per block on top of its payload, measured on x86-64 and
// rounded up: the entry (metadata, payload handle, policy facts, two
// ordered-set hooks: 200) in its hash-map node (+48 with allocator header),
// the payload's shared control block (~48), its parent's child-count slot
// (~56) and hash buckets (~16). Fixed here so accounting is exact and
// portable; storage/hot/hot_budget_state.h asserts the entry still fits.
inline constexpr uint64_t kHotEntryOverheadBytes = 384;

// THE charge of a hot block, used for every counter, quota and budget check:
// payload size (SharedBytes::size(), not the allocator's rounding) plus the
// fixed per-entry overhead.
constexpr uint64_t HotEntryCharge(uint64_t payload_bytes) {
  return payload_bytes + kHotEntryOverheadBytes;
}

// A held pin on a resident hot block. Move-only; unpins when destroyed or
// Release()d. Not thread-safe itself (one holder at a time), but holders on
// different threads may pin and release the same block concurrently.
// REQUIRES: released before its budget is destroyed.
class PinnedBlock {
 public:
  PinnedBlock(PinnedBlock&& other) noexcept;
  PinnedBlock& operator=(PinnedBlock&& other) noexcept;
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  ~PinnedBlock() { Release(); }

  // The payload as it was when pinned (the stored buffer itself).
  const SharedBytes& payload() const { return payload_; }
  const BlockMeta& meta() const { return meta_; }
  bool held() const { return entry_ != nullptr; }

  // Unpins now; later calls do nothing.
  void Release();

 private:
  friend class hot_internal::BudgetState;
  PinnedBlock(hot_internal::BudgetState* state, hot_internal::HotEntry* entry,
              BlockMeta meta, SharedBytes payload)
      : state_(state), entry_(entry), meta_(meta), payload_(std::move(payload)) {}

  hot_internal::BudgetState* state_ = nullptr;
  hot_internal::HotEntry* entry_ = nullptr;  // null once released or moved from
  BlockMeta meta_;
  SharedBytes payload_;
};

// Thread-safe: every method may be called concurrently (the budget's mutex).
class HotTier final : public BlockTier {
 public:
  // A view of `budget` for a registered `owner`. Several views of one owner
  // share its blocks, counters and listener. With `memory`, a clean payload
  // Put from elsewhere (an SSD read, a remote fetch) is copied into it first
  // (memory_resource.h); a dirty one is kept as it is (the stack above
  // tracks it by its buffer until it is written back). InvalidArgument for
  // an unknown owner or a null budget.
  static StatusOr<std::unique_ptr<HotTier>> Open(
      std::shared_ptr<SharedHotBudget> budget, OwnerId owner,
      std::shared_ptr<MemoryResource> memory = nullptr);
  // A view of every owner's blocks: Put charges meta.owner (InvalidArgument
  // for an unregistered one), lookups find any owner's block, misses count
  // against the thread's ReadOwnerScope (tier.h; unattributed without one),
  // and its eviction listener receives the victims of every owner that has
  // no listener of its own. The engine's one TierStack reads and writes
  // through such a view. `memory` as for Open. InvalidArgument for a null
  // budget.
  static StatusOr<std::unique_ptr<HotTier>> OpenShared(
      std::shared_ptr<SharedHotBudget> budget,
      std::shared_ptr<MemoryResource> memory = nullptr);
  // A tier with a private budget and a single owner "default" (id 0).
  static StatusOr<std::unique_ptr<HotTier>> Create(const SharedHotBudgetOptions& options);

  std::string_view name() const override { return "hot"; }

  // Stores or replaces a block charged to this view's owner (meta.owner is
  // ignored and reported back as the view's owner; a budget-wide view
  // charges meta.owner). The budget has one key space: a Put of a key
  // another owner holds replaces that block and takes over its charge. Makes
  // room by evicting, in policy order, first this owner's blocks while it
  // would exceed its quota, then any owner's blocks while the budget would be
  // exceeded. The block being inserted and, under leaf-lru, its resident
  // parent are never victims. NoSpace when the charge exceeds the budget or
  // the quota, or when not enough unpinned blocks are evictable: then nothing
  // changes (also when the view's memory resource has no room for the copy).
  Status Put(const BlockMeta& meta, SharedBytes payload, bool dirty) override;

  // The stored SharedBytes itself; a hit makes the block most recently used.
  StatusOr<SharedBytes> Get(const BlockKey& key) override;

  // A hit that also pins the block (counted as a hit; nullopt is a miss).
  std::optional<PinnedBlock> Pin(const BlockKey& key);

  StatusOr<BlockMeta> Peek(const BlockKey& key) const override;
  bool Contains(const BlockKey& key) const override;
  // A resident block of this owner has `key` as its parent.
  bool HasStoredChildren(const BlockKey& key) const override;
  bool NeverHolds(const BlockMeta& meta, uint64_t bytes) const override;
  // NotFound when absent; Busy when pinned (nothing changes).
  Status Remove(const BlockKey& key) override;
  // Sets EvictionCandidate::unlikely_reuse (the block keeps its last access;
  // a hit or pin clears the hint). Works under every policy.
  bool HintUnlikelyReuse(const BlockKey& key) override;
  // No hit counted, no touch (BlockTier).
  StatusOr<SharedBytes> PeekPayload(const BlockKey& key) override;
  bool MarkStoredBelow(const BlockMeta& meta, const SharedBytes& payload) override;

  // This owner's counters (Totals() of a view is its owner's share; the
  // budget's Totals() sums all owners, as does a budget-wide view's).
  // OwnerCounters(o) is zero for o other than owner() (a budget-wide view
  // gives every owner's).
  TierCounters Totals() const override;
  TierCounters OwnerCounters(OwnerId owner) const override;
  // Audits the whole budget (its state is shared by all views).
  Status Audit(std::vector<AuditFinding>* findings) override;
  void ForEach(
      const std::function<void(const BlockMeta&, uint64_t bytes)>& fn) const override;
  // Returns once every dirty victim (any owner's) being handed to its
  // eviction listener at the call has been taken (its OnEvict returned).
  // Such a victim is in no walk: ForEach's no more, the tier below's not yet.
  // A walk of this tier, then this call, then a walk of the tier below
  // misses none. REQUIRES: not called from an eviction listener.
  void WaitForHandOvers() const;
  // This owner's listener; it receives every capacity or quota victim of this
  // owner, whoever's insert caused the eviction. Dirty victims count as spills.
  // Returns only when no call to the previous listener is still running, so
  // the caller may destroy it right after. REQUIRES: not called from inside
  // an eviction listener.
  void SetEvictionListener(EvictionListener* listener) override;

  // kEveryOwner for a budget-wide view.
  OwnerId owner() const { return owner_; }
  SharedHotBudget& budget() const { return *budget_; }

 private:
  HotTier(std::shared_ptr<SharedHotBudget> budget, OwnerId owner,
          std::shared_ptr<MemoryResource> memory)
      : budget_(std::move(budget)), owner_(owner), memory_(std::move(memory)) {}
  hot_internal::BudgetState& state() const { return *budget_->state_; }

  std::shared_ptr<SharedHotBudget> budget_;
  OwnerId owner_;
  std::shared_ptr<MemoryResource> memory_;  // null: payloads stay where they are
};

}  // namespace prefixkv
