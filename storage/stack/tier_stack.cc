// TierStack: hot over SSD. The stack is the hot tier's eviction listener so it
// can keep its set of dirty keys exact (a key leaves the set when the hot tier
// evicts its dirty copy and the block goes below, or when Flush writes it).
//
// Per-key stripes: every path that reads one tier and then writes another for
// the same key (an SSD hit promoted into RAM, Flush copying RAM to SSD, a Put
// too large for RAM replacing the RAM copy by an SSD one) holds the key's
// stripe, and so does every writer of the key. Without it a promotion could
// copy an old SSD value over a newer one stored meanwhile, or bring back a
// value removed meanwhile. Hot hits need no stripe: the hot tier is atomic
// per key, and a writer under the stripe only ever makes it newer.
#include "prefixkv/advanced/tier_stack.h"

#include <cassert>
#include <utility>
#include <vector>

namespace prefixkv {

TierStack::TierStack(BlockTier* hot, BlockTier* ssd, EvictionListener* ssd_writer,
                     TierStackOptions options)
    : hot_(hot), ssd_(ssd), ssd_writer_(ssd_writer), options_(options) {
  assert(hot_ != nullptr || ssd_ != nullptr);
  if (hot_ != nullptr) hot_->SetEvictionListener(this);
  if (ssd_ != nullptr && SpillsToRemote()) ssd_->SetEvictionListener(&ssd_victims_);
}

TierStack::~TierStack() {
  if (hot_ != nullptr) hot_->SetEvictionListener(nullptr);
  if (ssd_ != nullptr && SpillsToRemote()) ssd_->SetEvictionListener(nullptr);
}

void TierStack::SetAdvisorTokens(OwnerId owner, uint32_t tokens) {
  if (owner < advisor_tokens_.size())
    advisor_tokens_[owner].store(tokens, std::memory_order_relaxed);
}

void TierStack::KeepLocal(const BlockKey& namespace_id) {
  MutexLock lock(&mu_);
  local_only_.insert(namespace_id);
  any_local_only_.store(true, std::memory_order_release);
}

bool TierStack::MayGoRemote(const BlockMeta& meta) const {
  if (meta.namespace_id.IsZero()) return false;  // a raw value: mutable, stays local
  if (!any_local_only_.load(std::memory_order_acquire)) return true;
  MutexLock lock(&mu_);
  return !local_only_.contains(meta.namespace_id);
}

uint32_t TierStack::AdvisorTokens(OwnerId owner) const {
  if (owner < advisor_tokens_.size()) {
    const uint32_t t = advisor_tokens_[owner].load(std::memory_order_relaxed);
    if (t > 0) return t;
  }
  return options_.advisor_block_tokens;
}

StatusOr<TierHit> TierStack::Get(const BlockKey& key, const TierRead& read) {
  StatusOr<TierHit> hit = GetFromTiers(key, read);
  if (CapacityAdvisor* a = options_.advisor; a != nullptr) {
    const uint32_t tokens = AdvisorTokens(read.owner);
    if (tokens > 0) {
      if (hit.ok()) a->Count(key, tokens);
      if (a->Sampled(key)) a->OnGet(key, hit.ok(), tokens);
    }
  }
  return hit;
}

StatusOr<TierHit> TierStack::GetFromTiers(const BlockKey& key, const TierRead& read) {
  const bool allow_promotion = read.promote;
  const bool allow_remote = read.remote && options_.remote != nullptr;
  ReadOwnerScope reader(read.owner);  // whose miss it is, in each tier
  if (hot_ != nullptr) {
    StatusOr<SharedBytes> hit = hot_->Get(key);
    if (hit.ok()) return TierHit{std::move(hit).value(), TierLevel::kHot};
  }
  if (ssd_ != nullptr) {
    MutexLock lock(&StripeFor(key));
    StatusOr<TierHit> hit =
        GetBelow(key, hot_ != nullptr && options_.promote_on_ssd_hit && allow_promotion,
                 read.owner);
    if (hit.ok() || !allow_remote) return hit;
  }
  if (allow_remote) {
    StatusOr<SharedBytes> hit = options_.remote->Get(key);
    if (hit.ok()) return TierHit{std::move(hit).value(), TierLevel::kRemote};
  }
  return Status::NotFound("block " + key.ToHex() + " not cached");
}

ReadAheadResult TierStack::ReadAhead(const BlockKey& key) {
  if (ssd_ == nullptr || (hot_ != nullptr && hot_->Contains(key)))
    return ReadAheadResult::kNone;
  return ssd_->ReadAhead(key);
}

StatusOr<TierHit> TierStack::PeekPayload(const BlockKey& key) {
  if (hot_ != nullptr) {
    StatusOr<SharedBytes> hit = hot_->PeekPayload(key);
    if (hit.ok()) return TierHit{std::move(hit).value(), TierLevel::kHot};
  }
  if (ssd_ != nullptr) {
    StatusOr<SharedBytes> hit = ssd_->PeekPayload(key);
    if (hit.ok()) return TierHit{std::move(hit).value(), TierLevel::kSsd};
    // Moved up meanwhile (a promotion or a Put): it is in the hot tier now.
    if (hot_ != nullptr) {
      StatusOr<SharedBytes> again = hot_->PeekPayload(key);
      if (again.ok()) return TierHit{std::move(again).value(), TierLevel::kHot};
    }
    // The SSD tier's miss, as Get gives it: a block found damaged (and
    // dropped) reads "corrupt: ...", which a generic miss hid from the
    // caller (EngineTest.AnExpireOfADamagedRecordNeverStoresTheOlderSchemesBytes).
    if (hit.status().IsNotFound()) return hit.status();
  }
  return Status::NotFound("block " + key.ToHex() + " not cached");
}

StatusOr<TierHit> TierStack::GetBelow(const BlockKey& key, bool promote, OwnerId reader) {
  // A Put may have landed in the hot tier between the miss and the stripe.
  if (hot_ != nullptr && hot_->Contains(key)) {
    StatusOr<SharedBytes> hit = hot_->Get(key);
    if (hit.ok()) return TierHit{std::move(hit).value(), TierLevel::kHot};
  }
  StatusOr<SharedBytes> hit = ssd_->Get(key);
  if (!hit.ok()) return hit.status();
  // No promotion while write-back fails: it could evict a dirty block the
  // tier below cannot take, past its queue's bound.
  if (promote && ssd_->WriteBackStatus().ok()) {
    StatusOr<BlockMeta> meta = ssd_->Peek(key);
    // The SSD tier's owner of the block may be nobody of this run (an
    // earlier run's owner not registered now, docs/ssd.md "Owner names"),
    // so the copy is the reader's.
    if (meta.ok() && reader != kEveryOwner) meta->owner = reader;
    // A promotion is an optimisation: when the block does not fit in the hot
    // tier (NoSpace) it is simply served from SSD.
    if (meta.ok()) (void)hot_->Put(*meta, *hit, /*dirty=*/false);
  }
  return TierHit{std::move(hit).value(), TierLevel::kSsd};
}

TierLevel TierStack::Locate(const BlockKey& key) const {
  if (hot_ != nullptr && hot_->Contains(key)) return TierLevel::kHot;
  if (ssd_ != nullptr && ssd_->Contains(key)) return TierLevel::kSsd;
  return TierLevel::kNone;
}

StatusOr<BlockMeta> TierStack::Peek(const BlockKey& key) const {
  if (hot_ != nullptr) {
    StatusOr<BlockMeta> meta = hot_->Peek(key);
    if (meta.ok()) return meta;
  }
  if (ssd_ != nullptr) return ssd_->Peek(key);
  return Status::NotFound("block " + key.ToHex() + " not cached");
}

Status TierStack::Put(const BlockMeta& meta, SharedBytes payload) {
  if (CapacityAdvisor* a = options_.advisor; a != nullptr) {
    if (const uint32_t tokens = AdvisorTokens(meta.owner); tokens > 0) {
      a->Count(meta.key, tokens);
      if (a->Sampled(meta.key)) a->OnPut(meta.key, tokens);
    }
  }
  MutexLock lock(&StripeFor(meta.key));
  ChangeStampOnExit changed(this, meta.key);
  if (options_.remote == nullptr || !options_.put_to_remote || !MayGoRemote(meta)) {
    return PutLocked(meta, std::move(payload));
  }
  PKV_RETURN_IF_ERROR(PutLocked(meta, payload));
  return options_.remote->Put(meta, std::move(payload), /*dirty=*/false);  // queued
}

std::vector<std::optional<SharedBytes>> TierStack::FetchRemote(
    std::span<const BlockKey> keys) {
  if (options_.remote == nullptr)
    return std::vector<std::optional<SharedBytes>>(keys.size());
  return options_.remote->GetMany(keys);
}

void TierStack::RejectRemote(const BlockKey& key, uint64_t bytes, std::string_view why) {
  if (options_.remote != nullptr) options_.remote->ReportDamaged(key, bytes, why);
}

Status TierStack::Promote(const BlockMeta& meta, SharedBytes payload) {
  MutexLock lock(&StripeFor(meta.key));
  ChangeStampOnExit changed(this, meta.key);
  // A copy stored here since the fetch missed it locally is this node's
  // newer one: a Store's tip with its window/recurrent state, where the
  // cluster may hold another node's interior copy (a placeholder). Replacing
  // it lost an acknowledged tip's state.
  if (ssd_ != nullptr) WaitForWriteBelow(meta.key);  // a copy being evicted lands first
  if (Locate(meta.key) != TierLevel::kNone) return Status::OK();
  return PutLocked(meta, std::move(payload));
}

Status TierStack::PutLocked(const BlockMeta& meta, SharedBytes payload) {
  if (hot_ == nullptr) return ssd_->Put(meta, std::move(payload), /*dirty=*/false);
  if (ssd_ != nullptr && options_.write_through) {
    // A dirty older copy (a Rewrite of a block only RAM held) stays marked
    // until the write succeeds, like PutBelowOnly's: a failed write leaves it
    // to Flush or its eviction (unmarked first, neither wrote it).
    (void)ClaimWriteBelow(meta.key, payload);
    Status stored = ssd_->Put(meta, payload, /*dirty=*/false);
    if (stored.ok()) MarkClean(meta.key);
    EndWriteBelow(meta.key);
    PKV_RETURN_IF_ERROR(stored);
    // The RAM copy is clean: the SSD tier holds the same bytes.
    Status cached = hot_->Put(meta, std::move(payload), /*dirty=*/false);
    return cached.IsNoSpace() ? DropStaleHotCopy(meta.key) : cached;
  }
  const bool write_back = ssd_ != nullptr;
  // Bytes the tier below cannot persist are not acknowledged: while its
  // write-back is failing, a new Put answers that error (docs/ssd.md).
  if (write_back) PKV_RETURN_IF_ERROR(ssd_->WriteBackStatus());
  if (!write_back) return hot_->Put(meta, std::move(payload), /*dirty=*/false);
  return PutWriteBack(meta, std::move(payload));
}

Status TierStack::PutWriteBack(const BlockMeta& meta, SharedBytes payload) {
  // Never held in RAM: written below before any older copy is dropped, so a
  // failed write leaves the key's old bytes (dropping the SSD copy first
  // lost them when the SSD write then failed).
  if (hot_->NeverHolds(meta, payload.size()))
    return PutBelowOnly(meta, std::move(payload));
  // Mark first: once in RAM the new copy may be evicted before the hot Put
  // returns, and its eviction must find it marked.
  const uint8_t* old_mark = SwapMark(meta.key, payload);
  // RAM first, the older SSD copy kept meanwhile: when the hot tier has no
  // room now (every other block pinned) the new bytes go below in its place,
  // and a failed write still leaves it. (Dropping it before the hot Put lost
  // the key's value when that write then failed.)
  Status s = hot_->Put(meta, payload, /*dirty=*/true);
  if (s.ok()) KeepMark(meta.key);
  if (!s.ok()) RestoreMark(meta.key, old_mark);  // nothing changed in the hot tier
  if (s.IsNoSpace()) return PutBelowOnly(meta, std::move(payload));
  if (!s.ok()) return s;
  // The new bytes live in RAM only until they are written back: an older
  // copy below must go before the Put returns, or a kill -9 would bring it
  // back as the key's value (a durable Remove).
  return DropOlderCopyBelow(meta, payload);
}

Status TierStack::PutBelowOnly(const BlockMeta& meta, SharedBytes payload) {
  // The SSD Put replaces a stored copy in place (one metadata batch), and an
  // older hot copy is dropped only after it. While it is written the older
  // copy keeps its dirty mark and this Put holds the key's write below, so
  // that copy's eviction meanwhile waits: when the write failed it is still
  // the key's dirty copy and goes below (its mark moved to the new bytes
  // first, the eviction dropped it and the failed Put lost the value); when
  // the write succeeded the mark is gone and it never lands over them.
  (void)ClaimWriteBelow(meta.key, payload);
  Status s = ssd_->Put(meta, std::move(payload), /*dirty=*/false);
  if (s.ok()) MarkClean(meta.key);
  EndWriteBelow(meta.key);
  if (!s.ok()) return s;
  // A pinned older copy stays in RAM (Busy), never to be written over the new
  // bytes. (Dropped outside the claim: a hot Remove waits for a spill of the
  // key, whose hand-over may be waiting for the claim.)
  return DropStaleHotCopy(meta.key);
}

Status TierStack::DropOlderCopyBelow(const BlockMeta& meta, const SharedBytes& payload) {
  // Holding the key's write below: an older copy on its way there has
  // landed, and the new copy's own write-back (should it be evicted now)
  // waits until the older copy is gone, so the removal never takes it.
  const bool in_ram = ClaimWriteBelow(meta.key, payload);
  Status s;
  if (in_ram && ssd_->Contains(meta.key)) {
    s = ssd_->Remove(meta.key);  // stored or queued
    if (s.IsNotFound()) s = Status::OK();
  }
  // Evicted meanwhile (its write-back handed below, or skipped by
  // admission), or the removal failed: the new bytes replace the older
  // copy in place, so it never outlives them.
  if (!in_ram || !s.ok()) {
    s = ssd_->Put(meta, payload, /*dirty=*/false);
    // Same bytes below: a RAM copy is clean, as after a Flush (a dirty copy
    // beside an SSD copy could later be written over a newer one).
    if (s.ok() && in_ram) {
      MarkCleanIf(meta.key, payload);
      (void)hot_->MarkStoredBelow(meta, payload);
    }
  }
  EndWriteBelow(meta.key);
  return s;
}

Status TierStack::DropStaleHotCopy(const BlockKey& key) {
  Status removed = hot_->Remove(key);
  if (!removed.ok() && !removed.IsNotFound()) return removed;  // Busy: pinned
  MarkClean(key);
  return Status::OK();
}

Status TierStack::PutLowest(const BlockMeta& meta, SharedBytes payload) {
  MutexLock lock(&StripeFor(meta.key));
  ChangeStampOnExit changed(this, meta.key);
  if (ssd_ == nullptr) return hot_->Put(meta, std::move(payload), /*dirty=*/false);
  WaitForWriteBelow(meta.key);
  return ssd_->Put(meta, std::move(payload), /*dirty=*/false);
}

Status TierStack::Rewrite(const BlockMeta& meta, SharedBytes payload,
                          KvRemoveReason reason) {
  MutexLock lock(&StripeFor(meta.key));
  ChangeStampOnExit changed(this, meta.key);
  KvReasonScope events_say(reason);
  // The hot tier evicts without the stripe, so a RAM copy can go below
  // after the check: a write-back (below) handles that, and a removal of the
  // hot copy that finds it gone leaves the SSD copy, already rewritten.
  if (ssd_ != nullptr) WaitForWriteBelow(meta.key);  // a copy being evicted lands first
  const bool in_hot = hot_ != nullptr && hot_->Contains(meta.key);
  const bool in_ssd = ssd_ != nullptr && ssd_->Contains(meta.key);
  if (!in_hot && !in_ssd)
    return Status::NotFound("block " + meta.key.ToHex() + " not cached");
  // The SSD copy is replaced in place: a replacing Put commits the new
  // version and journals the old one in one metadata batch, so a kill -9 at
  // any moment leaves one of the two. (Remove then Put left a window with
  // neither: the block's children orphaned and the chain through it cut.)
  if (in_ssd) PKV_RETURN_IF_ERROR(ssd_->Put(meta, payload, /*dirty=*/false));
  if (!in_hot) return Status::OK();
  // The RAM copy the only one: stored like a write-back Put, in RAM in
  // place of that copy (below when RAM cannot or now does not hold it: a
  // failed write keeps the block; removing the RAM copy first lost it,
  // and the chain through it cut). A pinned copy stays, as below.
  // Busy (a pinned older copy stays in RAM and is served until evicted,
  // the new bytes below) is answered as a Put answers it: an OK here was
  // an acknowledged Rewrite whose bytes were not read.
  if (!in_ssd && ssd_ != nullptr) return PutWriteBack(meta, payload);
  // The SSD copy holds the new bytes already (or there is no SSD tier):
  // the RAM copy is replaced by a clean one. Removed first: the old copy's
  // eviction, if it wins the race, still finds its own mark and goes below.
  Status removed = hot_->Remove(meta.key);
  if (removed.IsNotFound()) {
    if (in_ssd) return Status::OK();  // the copy below already holds the new bytes
    return removed;
  }
  // A pinned hot block cannot be removed; Put then replaces it in place and
  // the pin holder keeps the old bytes.
  if (!removed.ok() && !removed.IsBusy()) return removed;
  Status s = hot_->Put(meta, payload, /*dirty=*/false);
  // No room in RAM now: the copy below is the block once the old RAM copy is
  // gone. A pinned one stays and is served until evicted, so the Rewrite is
  // not acknowledged (Busy, as a Put's), and that copy is clean: never
  // written back over the new bytes.
  if (s.IsNoSpace() && in_ssd && removed.IsBusy()) {
    MarkClean(meta.key);
    return removed;
  }
  if (s.IsNoSpace() && in_ssd) return Status::OK();
  return s;
}

Status TierStack::Remove(const BlockKey& key, KvRemoveReason reason) {
  MutexLock lock(&StripeFor(key));
  ChangeStampOnExit changed(this, key);
  KvReasonScope events_say(reason);
  // A dirty RAM copy over an SSD copy: that copy below is older (a failed
  // write-back Put's, which could neither remove nor overwrite it) and goes
  // first, so a failed removal leaves the key as it was. (The RAM copy went
  // first, and the older copy, a value since replaced and read, was served
  // again.)
  bool older_removed = false;
  if (hot_ != nullptr && ssd_ != nullptr && IsMarkedDirty(key) && ssd_->Contains(key)) {
    Status older = ssd_->Remove(key);
    if (!older.ok() && !older.IsNotFound()) return older;
    older_removed = older.ok();
  }
  Status hot = hot_ != nullptr ? hot_->Remove(key) : Status::NotFound("no hot tier");
  // A pinned hot copy stays, and so does its mark (it is written back when
  // evicted). Any other copy being evicted must not come back below.
  if (!hot.IsBusy()) MarkClean(key);
  if (ssd_ != nullptr) WaitForWriteBelow(key);
  Status ssd = ssd_ != nullptr ? ssd_->Remove(key) : Status::NotFound("no ssd tier");
  if (hot.IsBusy()) return hot;
  // The SSD copy is still there, and served: not removed, whatever the hot
  // tier did (an OK here brought a deleted value back).
  if (!ssd.ok() && !ssd.IsNotFound()) return ssd;
  if (hot.ok() || ssd.ok() || older_removed) return Status::OK();
  if (!hot.IsNotFound()) return hot;
  if (!ssd.IsNotFound()) return ssd;
  return Status::NotFound("block " + key.ToHex() + " not cached");
}

void TierStack::MarkDirty(const BlockKey& key, const SharedBytes& payload) {
  MutexLock lock(&mu_);
  dirty_[key] = payload.data();
}

const uint8_t* TierStack::SwapMark(const BlockKey& key, const SharedBytes& payload) {
  MutexLock lock(&mu_);
  auto [it, inserted] = dirty_.try_emplace(key, payload.data());
  if (inserted) return nullptr;
  // Still the key's value should the hot Put fail: its eviction meanwhile
  // writes it below (dropped, a failed Put lost it). When the Put succeeds,
  // DropOlderCopyBelow removes what it wrote.
  replaced_[key] = it->second;
  return std::exchange(it->second, payload.data());
}

void TierStack::KeepMark(const BlockKey& key) {
  MutexLock lock(&mu_);
  replaced_.erase(key);
}

void TierStack::RestoreMark(const BlockKey& key, const uint8_t* old_mark) {
  MutexLock lock(&mu_);
  // Evicted meanwhile, the older copy went below (BeginWriteBelow took it
  // from replaced_): no RAM copy is left to mark.
  const bool written_below = old_mark != nullptr && replaced_.erase(key) == 0;
  if (old_mark == nullptr || written_below) {
    dirty_.erase(key);
  } else {
    dirty_[key] = old_mark;
  }
}

void TierStack::MarkClean(const BlockKey& key) {
  MutexLock lock(&mu_);
  dirty_.erase(key);
}

void TierStack::MarkCleanIf(const BlockKey& key, const SharedBytes& payload) {
  MutexLock lock(&mu_);
  auto it = dirty_.find(key);
  if (it != dirty_.end() && it->second == payload.data()) dirty_.erase(it);
}

bool TierStack::IsMarkedDirty(const BlockKey& key) const {
  MutexLock lock(&mu_);
  return dirty_.contains(key);
}

bool TierStack::BeginWriteBelow(const BlockKey& key, const SharedBytes& payload) {
  MutexLock lock(&mu_);
  // One write below at a time per key (an older copy's, or a Put's or a
  // Flush's holding the key), and only then the check: a victim still the
  // key's dirty copy when its turn comes is written, one that a newer Put, a
  // Remove or a Flush superseded meanwhile is not. (Checked before the wait,
  // it could be written after a successful Put of newer bytes below, or lost
  // after a failed one.)
  written_below_.Wait(lock,
                      [&]() REQUIRES(mu_) { return !writing_below_.contains(key); });
  auto it = dirty_.find(key);
  if (it != dirty_.end() && it->second == payload.data()) {
    dirty_.erase(it);
  } else if (auto r = replaced_.find(key);
             r != replaced_.end() && r->second == payload.data()) {
    replaced_.erase(r);  // a Put's hot Put still runs (SwapMark)
  } else {
    return false;
  }
  writing_below_.insert(key);
  return true;
}

void TierStack::EndWriteBelow(const BlockKey& key) {
  {
    MutexLock lock(&mu_);
    writing_below_.erase(key);
  }
  written_below_.NotifyAll();
}

bool TierStack::ClaimWriteBelow(const BlockKey& key, const SharedBytes& payload) {
  MutexLock lock(&mu_);
  written_below_.Wait(lock,
                      [&]() REQUIRES(mu_) { return !writing_below_.contains(key); });
  writing_below_.insert(key);
  auto it = dirty_.find(key);
  return it != dirty_.end() && it->second == payload.data();
}

void TierStack::WaitForWriteBelow(const BlockKey& key) {
  MutexLock lock(&mu_);
  written_below_.Wait(lock,
                      [&]() REQUIRES(mu_) { return !writing_below_.contains(key); });
}

size_t TierStack::dirty_blocks() const {
  MutexLock lock(&mu_);
  return dirty_.size();
}

Status TierStack::WriteBelow(const BlockMeta& meta, const SharedBytes& payload) {
  if (ssd_writer_ != nullptr) {
    ssd_writer_->OnEvict(meta, payload, /*dirty=*/true);
    return Status::OK();
  }
  return ssd_->Put(meta, payload, /*dirty=*/false);
}

void TierStack::OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) {
  // Clean victims are already stored below (or were never meant to be). Only
  // this copy's mark is cleared: a newer copy Put meanwhile keeps its own
  // (two copies share a buffer only when they are the same bytes).
  if (ssd_ == nullptr && SpillsToRemote()) SpillToRemote(meta, payload);  // the lowest
  if (!dirty || ssd_ == nullptr) return MarkCleanIf(meta.key, payload);
  // Called after the hot tier let go of its lock, so a newer Put, a Remove or
  // a Flush of the key may already have run: then this copy is stale.
  if (!BeginWriteBelow(meta.key, payload)) return;
  // A failed synchronous write loses a cached block, never correctness: the
  // next Match simply misses it. So does a victim admission skips.
  if (AdmitBelow(meta, payload.size())) (void)WriteBelow(meta, payload);
  EndWriteBelow(meta.key);
}

void TierStack::SpillToRemote(const BlockMeta& meta, const SharedBytes& payload) {
  if (!MayGoRemote(meta)) return;
  if (options_.remote_spill != nullptr) {
    options_.remote_spill->OnEvict(meta, payload, /*dirty=*/false);
  } else {
    (void)options_.remote->Put(meta, payload, /*dirty=*/false);
  }
}

bool TierStack::MaySkip(const BlockMeta& meta) const {
  return options_.admission != nullptr &&
         options_.admission->kind() != SsdAdmissionKind::kAll &&
         options_.admission_may_skip && !meta.namespace_id.IsZero();
}

bool TierStack::HasLocalChildren(const BlockKey& key) const {
  return (hot_ != nullptr && hot_->HasStoredChildren(key)) ||
         ssd_->HasStoredChildren(key);
}

bool TierStack::AdmitBelow(const BlockMeta& meta, uint64_t bytes) {
  SsdAdmission* admission = options_.admission;
  if (admission == nullptr) return true;
  const bool allowed = admission->Allows(meta.key, bytes);
  // Only a leaf may stay unwritten: a child in RAM would reach SSD with its
  // parent nowhere (an orphan), and one on SSD already would be one.
  if (!allowed && MaySkip(meta) && !HasLocalChildren(meta.key)) {
    admission->RecordSkipped(meta.key, bytes);
    return false;
  }
  admission->RecordWritten(bytes, /*forced=*/!allowed);
  return true;
}

Status TierStack::FlushKey(const BlockKey& key, uint64_t* bytes) {
  *bytes = 0;
  if (!IsMarkedDirty(key)) {
    // Its eviction took it (before this call or meanwhile): written below, or
    // still on its way (unmarked, not yet handed to the tier below). It is
    // there once that write ends; under the stripe no newer copy can start one.
    WaitForWriteBelow(key);
    return Status::OK();
  }
  // Maintenance reads: no hit counted, the eviction order left alone.
  StatusOr<BlockMeta> meta = hot_->Peek(key);
  StatusOr<SharedBytes> payload = hot_->PeekPayload(key);
  if (!meta.ok() || !payload.ok()) {  // evicted meanwhile: written by OnEvict
    MarkClean(key);
    return Status::OK();
  }
  // The copy read above is the newest (no Put of the key runs under the
  // stripe), and it stays marked while it is written: its eviction meanwhile
  // waits for this write and then writes it itself, so a failed write here
  // never loses it. (Unmarked first, its eviction dropped it.)
  if (!ClaimWriteBelow(key, *payload)) {  // evicted and written below meanwhile
    MarkClean(key);                       // or a stale mark: the copy read is the newest
    EndWriteBelow(key);
    return Status::OK();
  }
  *bytes = payload->size();
  Status s = ssd_->Put(*meta, *payload, /*dirty=*/false);
  if (s.ok()) {
    // Same bytes, now clean: a later eviction need not write them again.
    MarkCleanIf(key, *payload);
    (void)hot_->MarkStoredBelow(*meta, *payload);
  }
  EndWriteBelow(key);
  return s;
}

Status TierStack::Flush() {
  if (ssd_ == nullptr || hot_ == nullptr) return Status::OK();
  std::vector<BlockKey> keys;
  {
    MutexLock lock(&mu_);
    keys.reserve(dirty_.size() + writing_below_.size());
    for (const auto& [key, bytes] : dirty_) keys.push_back(key);
    // Evicted dirty copies on their way below: stored before this call, so
    // waited for (FlushKey), though no longer marked. (What evicts may hold
    // no stripe Flush takes: a promotion, a memory charge, a write-through Put.)
    for (const BlockKey& key : writing_below_) {
      if (!dirty_.contains(key)) keys.push_back(key);
    }
  }
  // Every block is tried, so the error says exactly what is not below (at
  // shutdown: what is lost).
  Status first;
  uint64_t failed = 0, failed_bytes = 0;
  for (const BlockKey& key : keys) {
    // Under the stripe no Put of the key runs, so the copy written below is
    // the newest and marking it clean loses nothing.
    MutexLock lock(&StripeFor(key));
    uint64_t bytes = 0;
    Status s = FlushKey(key, &bytes);
    if (s.ok()) continue;
    if (first.ok()) first = s;
    ++failed;
    failed_bytes += bytes;
  }
  if (first.ok()) return first;
  return first.WithContext(std::to_string(failed) + " of " + std::to_string(keys.size()) +
                           " dirty blocks (" + std::to_string(failed_bytes) +
                           " bytes) not written below");
}

}  // namespace prefixkv
