// TierStack: the hot tier on top of the SSD tier, seen as one block store.
//
// The prefix cache and the trace replayer never talk to a tier directly; they
// go through a TierStack, which owns the rules that span tiers:
//   Get     hot first, then SSD (the SSD tier verifies checksums); an SSD hit
//           is copied into the hot tier (clean) when promotion is on.
//   Put     into the hot tier as dirty (write-back: the block reaches the SSD
//           tier when the hot tier evicts it, or at Flush); straight to SSD
//           when there is no hot tier or the block does not fit in it (or
//           finds no room there now). A write-back Put of a key the SSD tier
//           holds removes that older SSD copy before it returns (after the
//           hot Put, so a failed SSD write keeps it), so a kill -9 cannot
//           bring it back.
//   Remove  from every tier holding the block.
//   Rewrite a block in place, in every tier that holds it, through each tier's
//           normal paths (hot: a replacing dirty Put of a copy only RAM
//           holds, else Remove + Put; SSD: one replacing Put, so a kill
//           -9 finds the old or the new copy, never neither), so every byte
//           counter stays exact (the supersede-on-extend tip strip uses this).
// Either tier may be absent (null), not both. The stack does not own tiers.
//
// Per-key operations that span tiers (Put, PutLowest, Rewrite, Remove, the
// SSD path of Get, each key of Flush) hold a striped per-key lock, so an SSD
// hit being promoted into the hot tier can never overwrite a newer value
// stored concurrently, a removed block never comes back through a promotion,
// and Flush never marks a newer dirty value clean. A hot hit takes no lock.
// The hot tier's dirty victims reach the SSD tier only while they are their
// key's newest copy, one at a time per key, and every direct SSD write or
// removal of a key first waits for such a write in flight: a late write-back
// never lands over a newer value or brings back a removed one.
//
// One stack serves every owner (the engine's models and its key-value space):
// the owner is a field of each block (BlockMeta::owner, charged by a
// budget-wide hot view, HotTier::OpenShared), and a read says whose it is
// (TierRead). The stack is the only eviction listener of the hot tier and,
// with a remote tier written on spill, of the SSD tier: every movement
// between tiers starts here. Raw values (namespace_id zero) never reach the
// remote tier (they are mutable; remote blocks are immutable by key).
// REQUIRES: dirty blocks enter the hot tier only through the stack.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "prefixkv/advanced/capacity_advisor.h"
#include "prefixkv/advanced/kv_event_sink.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/ssd_admission.h"
#include "prefixkv/advanced/tier.h"

namespace prefixkv {

struct TierStackOptions {
  // Copy a block found only on SSD into the hot tier (clean: the SSD copy
  // stays) when Get serves it. Default: on.
  bool promote_on_ssd_hit = true;
  // Put writes the SSD tier synchronously first, then a clean copy into the
  // hot tier. Default off: write-back, the SSD tier sees a block when the hot
  // tier evicts it or at Flush().
  bool write_through = false;
  // The tier shared with other nodes, below the local ones (remote_tier.h;
  // not owned; null: none). Get falls back to it after hot and SSD (serving
  // the block without promoting it: the stack cannot know a remote block's
  // owner); the prefix cache fetches whole chains from it in one batch at
  // Match and stores them locally with Promote(). The stack never removes
  // or rewrites a remote block: blocks are immutable by key and other
  // nodes may still use them.
  BlockTier* remote = nullptr;
  // Every Put also hands the block to `remote` (RemoteWriteMode::kAlways).
  // Otherwise `remote` receives the blocks the lowest local tier evicts:
  // the SSD tier's victims (the stack is then the SSD tier's eviction
  // listener), or the hot tier's when there is no SSD tier: both go to
  // `remote_spill` (the remote tier as an EvictionListener, which knows a
  // victim from a new block; null: Put on `remote`).
  bool put_to_remote = false;
  EvictionListener* remote_spill = nullptr;
  // Which of the hot tier's dirty victims are written to `ssd` (not owned;
  // null: every one). Under SsdAdmissionKind::kBudget a victim is left
  // unwritten, and counted, only when all of these hold: the budget is spent;
  // admission_may_skip; it is a prefix block (namespace_id not zero: a raw
  // value is an acknowledged write and always written); and it is a leaf:
  // no child of it is in the hot tier or on SSD (BlockTier::
  // HasStoredChildren), so no stored block loses its parent. Flush and
  // write-through never skip.
  SsdAdmission* admission = nullptr;
  bool admission_may_skip = true;
  // The capacity advisor (capacity_advisor.h; not owned; null: none) sees
  // every Get and Put of a sampled key, each weighing its owner's block
  // tokens (SetAdvisorTokens; `advisor_block_tokens` for an owner without
  // any). Keys not sampled cost one hash and one compare.
  CapacityAdvisor* advisor = nullptr;
  uint32_t advisor_block_tokens = 0;
};

// Whose read a lookup is, and how far it may go.
struct TierRead {
  // The reader (a model's owner, the key-value space's): a miss counts
  // against it, and the advisor weighs the block by its tokens. kEveryOwner:
  // nobody's in particular.
  OwnerId owner = kEveryOwner;
  // An SSD hit is copied into the hot tier (when the options promote).
  bool promote = true;
  // A miss of the local tiers asks the remote tier. Off for raw values: the
  // remote tier never holds them.
  bool remote = true;
};

// A payload and the tier it came from.
struct TierHit {
  SharedBytes payload;
  TierLevel level = TierLevel::kNone;
};

// Thread-safe: every method may be called concurrently (the tiers are
// thread-safe; per-key operations hold a key stripe, the dirty-key set mu_).
class TierStack final : private EvictionListener {
 public:
  // `hot` and `ssd` may each be null, not both. `ssd_writer` receives the hot
  // tier's dirty victims (normally the SSD tier itself, which queues them for
  // its background writers); when null and `ssd` is set, the stack writes
  // victims to `ssd` synchronously with Put. The stack registers itself as the
  // hot tier's eviction listener. REQUIRES: the tiers outlive the stack.
  TierStack(BlockTier* hot, BlockTier* ssd, EvictionListener* ssd_writer = nullptr,
            TierStackOptions options = {});
  ~TierStack() override;
  TierStack(const TierStack&) = delete;
  TierStack& operator=(const TierStack&) = delete;

  BlockTier* hot() const { return hot_; }
  BlockTier* ssd() const { return ssd_; }
  // Whether a remote tier is below the local ones (reached only through
  // Get, FetchRemote and the write paths: the stack is its one road).
  bool has_remote() const { return options_.remote != nullptr; }
  // The tier that survives a restart: the SSD tier when present, else hot.
  BlockTier* lowest() const { return ssd_ != nullptr ? ssd_ : hot_; }
  const TierStackOptions& options() const { return options_; }

  // Hot, then SSD, then the remote tier. NotFound (a miss) when no tier has
  // the block. An SSD hit is promoted when the options and `read.promote`
  // say so; the remote tier is asked when `read.remote`. Either way the read
  // counts as a hit and touches recency (PeekPayload does neither).
  StatusOr<TierHit> Get(const BlockKey& key, const TierRead& read);
  // Nobody's read; `allow_promotion` false also skips the remote tier.
  StatusOr<TierHit> Get(const BlockKey& key, bool allow_promotion = true) {
    return Get(key, TierRead{.promote = allow_promotion, .remote = allow_promotion});
  }
  // Read-ahead for a restore about to Get `key` (BlockTier::ReadAhead): the
  // SSD tier starts reading it unless the hot tier holds it. Counts nothing.
  ReadAheadResult ReadAhead(const BlockKey& key);
  void CancelReadAhead(const BlockKey& key) {
    if (ssd_ != nullptr) ssd_->CancelReadAhead(key);
  }
  // The tokens one block of `owner` weighs for the capacity advisor (set when
  // the owner registers; 0: the advisor does not see its blocks).
  void SetAdvisorTokens(OwnerId owner, uint32_t tokens);
  // Blocks of namespace `namespace_id` never go to the remote tier (a
  // namespace kept from before its layer shapes were keyed: other nodes may
  // hold other shapes under the same keys). Its reads ask with
  // TierRead::remote false.
  void KeepLocal(const BlockKey& namespace_id);
  // A block as stored, for the cache's own bookkeeping (the tip lineage's
  // checks during a store): hot, then SSD, through BlockTier::PeekPayload, so
  // no hit or miss is counted, no recency or reuse fact changes and nothing
  // is promoted; the remote tier is not asked. NotFound when neither holds it.
  StatusOr<TierHit> PeekPayload(const BlockKey& key);
  // Where the block is locally (hot or SSD; never asks the remote tier),
  // without counting a hit or touching recency.
  TierLevel Locate(const BlockKey& key) const;
  bool Contains(const BlockKey& key) const { return Locate(key) != TierLevel::kNone; }
  // Metadata from the first tier holding the block; NotFound when none does.
  StatusOr<BlockMeta> Peek(const BlockKey& key) const;
  // A number that changes whenever the local bytes of `key` may have
  // changed: every Put, Promote, PutLowest, Rewrite and Remove of it (or of
  // another key sharing its slot, of kChangeSlots) adds one after its work,
  // under the key's stripe. A copy moving between tiers keeps its bytes and
  // the number. Read it before reading a block: equal again later, nothing
  // replaced the bytes read (the prefix cache's memo of blocks whose shapes
  // it checked, docs/prefix_cache.md).
  uint64_t LocalChangeStamp(const BlockKey& key) const {
    return change_stamps_[ChangeSlot(key)].load(std::memory_order_acquire);
  }
  static constexpr size_t kChangeSlots = 4096;

  // Stores or replaces a block (see the header comment). A block too large
  // for the hot tier goes to SSD only, and an older hot copy of the key is
  // removed so it cannot shadow the new one (Busy when that copy is pinned).
  // NoSpace when no tier can hold it.
  Status Put(const BlockMeta& meta, SharedBytes payload);
  // Reads `keys` from the remote tier in one batch (pipelined: one round trip
  // per cluster master); nullopt for a miss, and for every key without a
  // remote tier. Nothing is stored locally: the caller checks that each
  // payload is the block it asked for, then Promote()s it.
  std::vector<std::optional<SharedBytes>> FetchRemote(std::span<const BlockKey> keys);
  // A payload FetchRemote (or Get, a restore's read) returned that the caller
  // refused (its record is damaged, or not the block asked for): the remote
  // tier counts it as a corruption and drops it (BlockTier::ReportDamaged).
  void RejectRemote(const BlockKey& key, uint64_t bytes, std::string_view why);
  // Stores a block fetched from the remote tier into the local tiers: Put,
  // without handing it back to the remote tier. A block a local tier holds
  // by then (stored here during the fetch) is kept as it is: a local tip
  // carries state the cluster's copy may lack.
  Status Promote(const BlockMeta& meta, SharedBytes payload);
  // Stores into the lowest tier only (bypassing the hot tier): for small
  // records that must survive a restart.
  Status PutLowest(const BlockMeta& meta, SharedBytes payload);
  // Replaces a block's payload in every tier that holds it (the SSD copy by one
  // replacing Put, a hot copy also below by Remove + Put, one only RAM holds
  // like a write-back Put). A hot copy evicted meanwhile is replaced where it
  // went; a new hot copy that no longer fits in RAM is stored below instead (a
  // failed write keeps the old block; Busy when the old RAM copy is pinned
  // then: it is served until evicted, the new bytes below). NotFound when no
  // tier holds it. `reason`: what the
  // KV events of the replacement say (kStripped for a tip's state stripped in place).
  Status Rewrite(const BlockMeta& meta, SharedBytes payload,
                 KvRemoveReason reason = KvRemoveReason::kNone);
  // Removes from every tier. NotFound when no tier held it; Busy when the hot
  // copy is pinned (the SSD copy is removed anyway); the SSD tier's error
  // when its removal failed (its copy stays, and is served). `reason`: what the KV
  // events of the removal say (kExpired, kSuperseded...).
  Status Remove(const BlockKey& key, KvRemoveReason reason = KvRemoveReason::kRemoved);
  // Passes the hint to the hot tier (BlockTier::HintUnlikelyReuse); the SSD
  // and remote tiers keep their order. Whether the hot tier took it.
  bool HintUnlikelyReuse(const BlockKey& key) {
    return hot_ != nullptr && hot_->HintUnlikelyReuse(key);
  }

  // Writes every dirty hot block to the SSD tier (and marks the hot copy
  // clean), so a restart finds it, and waits for the dirty blocks an eviction
  // is handing to the SSD tier meanwhile (the tier's writer has them when it
  // returns). No-op without an SSD tier. Tries every block; an error names
  // how many blocks (and bytes) are still only in RAM.
  Status Flush();
  // Hot blocks not yet written below.
  size_t dirty_blocks() const;

 private:
  // EvictionListener (the hot tier's victims).
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override;
  // The SSD tier's victims, with a remote tier written on spill: to it.
  class SsdVictims final : public EvictionListener {
   public:
    explicit SsdVictims(TierStack* stack) : stack_(stack) {}
    void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override {
      stack_->SpillToRemote(meta, payload);
    }

   private:
    TierStack* const stack_;
  };
  // Hands a block the lowest local tier evicted to the remote tier (a raw
  // value never goes there).
  void SpillToRemote(const BlockMeta& meta, const SharedBytes& payload);
  bool SpillsToRemote() const {
    return options_.remote != nullptr && !options_.put_to_remote;
  }
  uint32_t AdvisorTokens(OwnerId owner) const;
  // A block that may be written to the remote tier (not a raw value, not of
  // a KeepLocal namespace).
  bool MayGoRemote(const BlockMeta& meta) const EXCLUDES(mu_);
  // The dirty-key set remembers which copy of a key is dirty (its payload
  // buffer), so the late eviction of an older copy cannot unmark a newer one.
  void MarkDirty(const BlockKey& key, const SharedBytes& payload);
  void MarkClean(const BlockKey& key);
  void MarkCleanIf(const BlockKey& key, const SharedBytes& payload);
  // Marks `payload` as the key's dirty copy and returns the copy marked
  // before (nullptr: none), for RestoreMark when its write fails.
  // Until the Put's hot Put returns (RestoreMark or KeepMark), the copy
  // marked before is still written below when evicted: the Put may yet fail
  // and leave it the key's value.
  const uint8_t* SwapMark(const BlockKey& key, const SharedBytes& payload);
  void RestoreMark(const BlockKey& key, const uint8_t* old_mark);
  void KeepMark(const BlockKey& key);
  bool IsMarkedDirty(const BlockKey& key) const;
  // Write-back of an evicted dirty copy: waits for the key's write below in
  // flight, then false (and nothing to write) when a newer copy, a Remove or
  // a Flush superseded it; else it is the key's write below until
  // EndWriteBelow.
  bool BeginWriteBelow(const BlockKey& key, const SharedBytes& payload);
  void EndWriteBelow(const BlockKey& key);
  // Makes this thread the key's write below (after the one in flight) until
  // EndWriteBelow, so no write-back of the key runs meanwhile; whether
  // `payload` is still the key's dirty copy (not yet evicted).
  bool ClaimWriteBelow(const BlockKey& key, const SharedBytes& payload);
  // Waits until no write-back of `key` is in flight. REQUIRES: its stripe held
  // and its mark cleared, so that no older copy can start one afterwards.
  void WaitForWriteBelow(const BlockKey& key);
  Status WriteBelow(const BlockMeta& meta, const SharedBytes& payload);
  // Admission of one evicted dirty victim (TierStackOptions::admission):
  // whether to write it; counts the decision.
  bool AdmitBelow(const BlockMeta& meta, uint64_t bytes);
  // Admission may leave this block unwritten (a prefix block under a budget).
  bool MaySkip(const BlockMeta& meta) const;
  // A child of `key` is in the hot tier or stored (or queued) on SSD. Never
  // waits for a spill: called from the eviction listener.
  bool HasLocalChildren(const BlockKey& key) const;
  // A promoted copy is charged to `reader` (kEveryOwner: to the owner the
  // SSD tier recorded). REQUIRES: the key's stripe held.
  StatusOr<TierHit> GetBelow(const BlockKey& key, bool promote, OwnerId reader);
  StatusOr<TierHit> GetFromTiers(const BlockKey& key, const TierRead& read);
  Status PutLocked(const BlockMeta& meta, SharedBytes payload);
  Status DropStaleHotCopy(const BlockKey& key);
  // Write-back Put of a block the hot tier may hold: dirty into RAM (in
  // place of an older copy), then an older SSD copy dropped; below only when
  // RAM cannot or now does not hold it. REQUIRES: the stripe held, an SSD
  // tier.
  Status PutWriteBack(const BlockMeta& meta, SharedBytes payload);
  // Write-back Put of a block the hot tier cannot take (now): written to SSD,
  // then an older hot copy dropped (Busy when pinned); a failed write changes
  // nothing. REQUIRES: the stripe held, the key's mark that of the older copy.
  Status PutBelowOnly(const BlockMeta& meta, SharedBytes payload);
  // Write-back Put, after the new copy went into RAM (dirty, marked with
  // `payload`): removes the older SSD copy (stored or queued), or, when the
  // new copy was evicted meanwhile or the removal failed, writes the new
  // bytes over it. REQUIRES: the stripe held.
  Status DropOlderCopyBelow(const BlockMeta& meta, const SharedBytes& payload);
  // `bytes`: the payload size of a block it tried to write (0 if none).
  Status FlushKey(const BlockKey& key, uint64_t* bytes);

  static size_t ChangeSlot(const BlockKey& key) {
    return BlockKeyHash()(key) / 64 % kChangeSlots;  // bits StripeFor does not use
  }
  // Adds one to the key's LocalChangeStamp when it goes out of scope: declared
  // after the stripe's lock, so after the operation's last change.
  class ChangeStampOnExit {
   public:
    ChangeStampOnExit(TierStack* stack, const BlockKey& key)
        : slot_(&stack->change_stamps_[ChangeSlot(key)]) {}
    ~ChangeStampOnExit() { slot_->fetch_add(1, std::memory_order_acq_rel); }
    ChangeStampOnExit(const ChangeStampOnExit&) = delete;
    ChangeStampOnExit& operator=(const ChangeStampOnExit&) = delete;

   private:
    std::atomic<uint64_t>* const slot_;
  };

  // The lock serialising per-key operations on `key`. Never taken by the
  // eviction listener (a victim is another key, and its writer must not wait
  // for a stripe held by the Put that evicts it).
  Mutex& StripeFor(const BlockKey& key) {
    return stripes_[BlockKeyHash()(key) % stripes_.size()];
  }

  BlockTier* const hot_;
  BlockTier* const ssd_;
  EvictionListener* const ssd_writer_;
  const TierStackOptions options_;
  std::array<Mutex, 64> stripes_;  // ChangeSlot skips the bits choosing one
  mutable Mutex mu_;               // after a stripe, never before
  CondVar written_below_;
  std::unordered_map<BlockKey, const uint8_t*, BlockKeyHash> dirty_ GUARDED_BY(mu_);
  // The dirty copies a write-back Put's mark replaced while its hot Put runs
  // (SwapMark): their eviction meanwhile writes them below.
  std::unordered_map<BlockKey, const uint8_t*, BlockKeyHash> replaced_ GUARDED_BY(mu_);
  std::unordered_set<BlockKey, BlockKeyHash> writing_below_ GUARDED_BY(mu_);
  // By owner (the first 256; later ones weigh advisor_block_tokens); 0: the
  // default. Read on every Get without a lock.
  std::array<std::atomic<uint32_t>, 256> advisor_tokens_{};
  std::unordered_set<BlockKey, BlockKeyHash> local_only_ GUARDED_BY(mu_);
  std::atomic<bool> any_local_only_{false};
  SsdVictims ssd_victims_{this};
  std::array<std::atomic<uint64_t>, kChangeSlots> change_stamps_{};
};

}  // namespace prefixkv
