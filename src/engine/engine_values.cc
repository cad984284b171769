// Engine's key-value space: values by name in their own hot owner ("values")
// over the shared SSD tier, each stored as a value record (value_record.h:
// the name, the expiry and the bytes, under ValueKey(name)), so the tiers
// keep what SCAN lists and what TTL reads, across restarts. Values of the
// previous scheme (the bare bytes under LegacyValueKey(name)) still read, as
// values without expiry; any write of the key replaces them.
//
// Expiry is lazy plus a bounded sweep: a read of an expired value removes it
// and answers absent; each SetValue then removes up to kSweepPerWrite values
// the catalog knows to be due, and forgets as many catalog entries of values
// evicted meanwhile (value_catalog.h). The writers of one key and
// the removal of an expired one hold that key's stripe of value_locks_, so
// SET NX, KEEPTTL and EXPIRE read and write as one step; plain reads do not.
#include <algorithm>
#include <optional>
#include <unordered_set>
#include <vector>

#include "engine_impl.h"
#include "value_record.h"

namespace prefixkv {
namespace {

using internal::EngineImpl;
using internal::ValueRecord;

constexpr size_t kSweepPerWrite = 4;

Mutex& StripeOf(EngineImpl& impl, const BlockKey& key) {
  return impl.value_locks_[key.lo % impl.value_locks_.size()];
}

// Whether any tier may hold older-scheme value bytes in this run
// (EngineImpl::legacy_values_possible_); false: no name has any.
bool MayHoldLegacy(const EngineImpl& impl) {
  return impl.legacy_values_possible_.load(std::memory_order_acquire);
}

// Drops `name`'s older-scheme bytes, which its record shadowed, now that the
// record was found gone (dropped as damaged, evicted): a read finding no
// record serves the older bytes as the value (until 2026-12-07 it did;
// EngineTest.ADamagedRecordNeverUncoversTheOlderSchemesBytes). REQUIRES:
// ValueKey(name)'s stripe held.
Status DropUncoveredLegacy(TierStack& stack, std::string_view name) {
  Status s = stack.Remove(internal::LegacyValueKey(name), KvRemoveReason::kSuperseded);
  return s.IsNotFound() ? Status::OK() : s;
}

// Whether `s` is a tier's answer for a block it found damaged and dropped
// (tier.h: NotFound with a "corrupt" reason).
bool DroppedAsCorrupt(const Status& s) {
  return s.IsNotFound() && s.message().rfind("corrupt", 0) == 0;
}

// What a key holds, as its writers see it.
struct Presence {
  bool present = false;  // a live value (not expired)
  bool expired = false;  // a record whose expiry has passed (to remove)
  bool legacy = false;   // a copy is under LegacyValueKey (the value, or
                         // older bytes a record shadows): a write drops it
  uint64_t expires_at_ms = 0;
};

// The record under `key` (ValueKey of some name), decoded; NotFound when no
// tier holds it. Notes it in the catalog. `promote`: read it as GET does (a
// hit, an SSD copy promoted), for a reader that will likely GET it next.
// REQUIRES: the key's stripe held.
StatusOr<ValueRecord> PeekRecord(EngineImpl& impl, TierStack& stack, const BlockKey& key,
                                 SharedBytes* payload, bool promote = false) {
  PKV_ASSIGN_OR_RETURN(
      TierHit hit, promote ? stack.Get(key, impl.ValueRead()) : stack.PeekPayload(key));
  *payload = std::move(hit.payload);
  PKV_ASSIGN_OR_RETURN(ValueRecord r, internal::DecodeValueRecord(*payload, key));
  impl.value_catalog_.NoteIfUnknown(key, r.name, r.expires_at_ms);
  return r;
}

// REQUIRES: ValueKey(name)'s stripe held (the catalog is exact for the keys
// it knows, so a known key's expiry needs no read; an unknown one's record is
// read once, promoted when `promote`).
StatusOr<Presence> Probe(EngineImpl& impl, TierStack& stack, std::string_view name,
                         uint64_t now_ms, bool promote = false) {
  const BlockKey key = internal::ValueKey(name);
  Presence p;
  if (stack.Contains(key)) {
    std::optional<uint64_t> expiry = impl.value_catalog_.ExpiryOf(key);
    if (!expiry.has_value()) {
      SharedBytes payload;
      StatusOr<ValueRecord> r = PeekRecord(impl, stack, key, &payload, promote);
      // A record that does not decode is replaced by a write (GET reports it).
      if (r.ok() || r.status().IsCorruption()) expiry = r.ok() ? r->expires_at_ms : 0;
      if (!r.ok() && !r.status().IsNotFound() && !r.status().IsCorruption()) {
        return r.status();
      }
      // Held a moment ago, gone now (dropped as damaged, evicted): any older
      // bytes it shadowed go too, and the key is absent.
      if (r.status().IsNotFound()) {
        PKV_RETURN_IF_ERROR(DropUncoveredLegacy(stack, name));
        return p;
      }
    }
    if (expiry.has_value()) {
      p.expires_at_ms = *expiry;
      p.expired = *expiry != 0 && *expiry <= now_ms;
      p.present = !p.expired;
      // Older bytes a crash or a failed removal left beside the record.
      p.legacy = stack.Contains(internal::LegacyValueKey(name));
      return p;
    }
  }
  p.legacy = p.present = stack.Contains(internal::LegacyValueKey(name));
  return p;
}

// Removes both forms of `name`, the older first: while the record is there
// it shadows the older bytes, so a removal failing halfway never uncovers
// them. REQUIRES: its stripe held.
Status RemoveBoth(EngineImpl& impl, TierStack& stack, std::string_view name,
                  KvRemoveReason reason = KvRemoveReason::kRemoved) {
  const BlockKey key = internal::ValueKey(name);
  for (const BlockKey& k : {internal::LegacyValueKey(name), key}) {
    Status s = stack.Remove(k, reason);
    if (!s.ok() && !s.IsNotFound()) return s;
  }
  impl.value_catalog_.Forget(key);
  return Status::OK();
}

// Removes the record under `key` if it is expired at `now_ms` (or forgets a
// key no tier holds any more); whether it removed one. REQUIRES: its stripe
// held.
StatusOr<bool> RemoveIfExpiredLocked(EngineImpl& impl, TierStack& stack,
                                     const BlockKey& key, uint64_t now_ms) {
  std::optional<uint64_t> expiry = impl.value_catalog_.ExpiryOf(key);
  if (!expiry.has_value()) {
    SharedBytes payload;
    StatusOr<ValueRecord> r = PeekRecord(impl, stack, key, &payload);
    // Gone, or a record that does not decode (GET reports it): nothing due.
    if (r.status().IsNotFound() || r.status().IsCorruption()) return false;
    PKV_RETURN_IF_ERROR(r.status());
    expiry = r->expires_at_ms;
  }
  if (!stack.Contains(key)) {
    impl.value_catalog_.Forget(key);
    return false;
  }
  if (*expiry == 0 || *expiry > now_ms) return false;
  // Older bytes of its name that the record shadows (a crash or a failed
  // removal left them) expire with it, first: a read would find them next.
  std::optional<std::string> name = impl.value_catalog_.NameOf(key);
  if (name.has_value() && stack.Contains(internal::LegacyValueKey(*name))) {
    Status s = stack.Remove(internal::LegacyValueKey(*name), KvRemoveReason::kExpired);
    if (!s.ok() && !s.IsNotFound()) return s;
  }
  Status s = stack.Remove(key, KvRemoveReason::kExpired);
  if (!s.ok() && !s.IsNotFound()) return s;
  impl.value_catalog_.Forget(key);
  return s.ok();
}

// RemoveIfExpiredLocked, taking the key's stripe.
StatusOr<bool> RemoveIfExpired(EngineImpl& impl, TierStack& stack, const BlockKey& key,
                               uint64_t now_ms) {
  MutexLock lock(&StripeOf(impl, key));
  return RemoveIfExpiredLocked(impl, stack, key, now_ms);
}

// Stores `name`'s record and drops a legacy copy. REQUIRES: its stripe held.
Status WriteRecord(EngineImpl& impl, TierStack& stack, std::string_view name,
                   uint64_t expires_at_ms, const SharedBytes& value, bool drop_legacy) {
  BlockMeta meta;
  meta.key = internal::ValueKey(name);
  meta.owner = impl.ValueRead().owner;
  PKV_RETURN_IF_ERROR(stack.Put(
      meta, internal::EncodeValueRecord(name, expires_at_ms, value, impl.memory_)));
  impl.value_catalog_.Note(meta.key, name, expires_at_ms);
  if (!drop_legacy) return Status::OK();
  Status s = stack.Remove(internal::LegacyValueKey(name), KvRemoveReason::kSuperseded);
  return s.IsNotFound() ? Status::OK() : s;
}

// `name`'s older-scheme bytes when no record holds the name, read as the
// one lookup of its GET; nullopt when a record holds it (or neither form).
// REQUIRES: its stripe held, so no write stores a record and drops these
// bytes between the look and the read.
std::optional<StatusOr<SharedBytes>> ReadOnlyLegacyLocked(EngineImpl& impl,
                                                          TierStack& stack,
                                                          std::string_view name,
                                                          bool promote) {
  const BlockKey legacy = internal::LegacyValueKey(name);
  if (stack.Contains(internal::ValueKey(name)) || !stack.Contains(legacy)) {
    return std::nullopt;
  }
  StatusOr<TierHit> old =
      promote ? stack.Get(legacy, impl.ValueRead()) : stack.PeekPayload(legacy);
  if (!old.ok()) return old.status();
  return std::move(old->payload);
}

// The value of `name`, whichever form holds it; NotFound when absent or
// expired (an expired record is removed). `probed_at_ms`: the caller holds
// the key's stripe and found the key present at that time, which the read
// then also uses: the key may have expired since, and its removal must not
// take the stripe again (a self-deadlock).
StatusOr<SharedBytes> ReadValue(EngineImpl& impl, TierStack& stack, std::string_view name,
                                bool promote,
                                std::optional<uint64_t> probed_at_ms = std::nullopt) {
  const BlockKey key = internal::ValueKey(name);
  // A name only older-scheme bytes hold is read there alone: one GET is one
  // lookup, one hit or one miss (it missed the record, then hit these bytes:
  // two lookups, a miss and a hit, in RAM). An uncounted look first: almost
  // no name has such bytes, and only those take the stripe; none at all
  // after an open that found none (MayHoldLegacy).
  if (MayHoldLegacy(impl) && stack.Contains(internal::LegacyValueKey(name))) {
    std::optional<StatusOr<SharedBytes>> old;
    if (probed_at_ms.has_value()) {
      old = ReadOnlyLegacyLocked(impl, stack, name, promote);
    } else {
      MutexLock lock(&StripeOf(impl, key));
      old = ReadOnlyLegacyLocked(impl, stack, name, promote);
    }
    if (old.has_value()) return std::move(*old);
  }
  StatusOr<TierHit> hit =
      promote ? stack.Get(key, impl.ValueRead()) : stack.PeekPayload(key);
  if (DroppedAsCorrupt(hit.status())) {
    // The record held the value: older bytes it shadowed are not it.
    if (probed_at_ms.has_value()) {
      PKV_RETURN_IF_ERROR(DropUncoveredLegacy(stack, name));
    } else {
      MutexLock lock(&StripeOf(impl, key));
      PKV_RETURN_IF_ERROR(DropUncoveredLegacy(stack, name));
    }
    return hit.status();
  }
  // A record held a moment ago and gone now (removed, evicted): older bytes
  // it shadowed are not the value, and the name is absent.
  PKV_RETURN_IF_ERROR(hit.status());
  PKV_ASSIGN_OR_RETURN(ValueRecord r, internal::DecodeValueRecord(hit->payload, key));
  const uint64_t now_ms =
      probed_at_ms.has_value() ? *probed_at_ms : impl.clock_->UnixMillis();
  if (r.ExpiredAt(now_ms)) {
    PKV_RETURN_IF_ERROR((probed_at_ms.has_value()
                             ? RemoveIfExpiredLocked(impl, stack, key, now_ms)
                             : RemoveIfExpired(impl, stack, key, now_ms))
                            .status());
    return Status::NotFound("expired");
  }
  return std::move(r.value);
}

// Notes every record the tiers hold, once after an open (SCAN's guarantee
// needs every name; the sweep every expiry).
Status FillCatalog(EngineImpl& impl, TierStack& stack) {
  if (impl.value_catalog_.filled()) return Status::OK();
  PKV_ASSIGN_OR_RETURN(std::vector<BlockKey> keys, impl.ValueKeysInRam());
  if (SsdTier* ssd = impl.ssd_.get()) {
    ssd->ForEachIncludingQueued([&](const BlockMeta& meta, uint64_t) {
      if (meta.namespace_id.IsZero()) keys.push_back(meta.key);
    });
  }
  for (const BlockKey& key : keys) {
    if (impl.value_catalog_.Knows(key)) continue;
    MutexLock lock(&StripeOf(impl, key));
    SharedBytes payload;
    // A legacy value (no record) or one removed meanwhile is skipped.
    StatusOr<ValueRecord> r = PeekRecord(impl, stack, key, &payload);
    if (!r.ok() && !r.status().IsNotFound() && !r.status().IsCorruption()) {
      return r.status();
    }
  }
  impl.value_catalog_.MarkFilled();
  return Status::OK();
}

// Forgets the catalog entry of a value no tier holds (evicted for capacity).
// Checked again under the key's stripe: a SET meanwhile keeps its entry.
void ForgetIfGone(EngineImpl& impl, TierStack& stack, const BlockKey& key) {
  if (stack.Contains(key)) return;
  MutexLock lock(&StripeOf(impl, key));
  if (!stack.Contains(key)) impl.value_catalog_.Forget(key);
}

// Removes up to `max_keys` values whose expiry passed, and forgets up to as
// many catalog entries whose values the tiers evicted (the catalog's hand
// goes round, so it stays about the size of what the tiers hold).
StatusOr<uint64_t> SweepDue(EngineImpl& impl, TierStack& stack, size_t max_keys) {
  const uint64_t now_ms = impl.clock_->UnixMillis();
  uint64_t removed = 0;
  for (const BlockKey& key : impl.value_catalog_.DueBy(now_ms, max_keys)) {
    PKV_ASSIGN_OR_RETURN(bool gone, RemoveIfExpired(impl, stack, key, now_ms));
    removed += gone ? 1 : 0;
  }
  for (const BlockKey& key : impl.value_catalog_.NextAfterHand(max_keys)) {
    ForgetIfGone(impl, stack, key);
  }
  return removed;
}

bool ExpiryConditionHolds(ExpiryCondition c, uint64_t current, uint64_t wanted) {
  // 0 is "never": later than any time.
  switch (c) {
    case ExpiryCondition::kAlways:
      return true;
    case ExpiryCondition::kIfNone:
      return current == 0;
    case ExpiryCondition::kIfSet:
      return current != 0;
    case ExpiryCondition::kIfLater:
      return current != 0 && (wanted == 0 || wanted > current);
    case ExpiryCondition::kIfEarlier:
      return wanted != 0 && (current == 0 || wanted < current);
    case ExpiryCondition::kIfSetAndEarlier:
      return current != 0 && wanted != 0 && wanted < current;
  }
  return false;
}

// Engine::ValueTtlMillis (ContainsValue's too, which is const), or with
// `absolute` Engine::ValueExpiresAtMillis: the time left, or the Unix ms of the
// deadline, read at the same clock reading that decides the key has not expired.
StatusOr<int64_t> TtlMillis(EngineImpl& impl, std::string_view name,
                            bool absolute = false) {
  PKV_RETURN_IF_ERROR(impl.CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl.Values());
  MutexLock lock(&StripeOf(impl, internal::ValueKey(name)));
  const uint64_t now_ms = impl.clock_->UnixMillis();
  PKV_ASSIGN_OR_RETURN(Presence p, Probe(impl, *stack, name, now_ms, /*promote=*/true));
  if (p.expired)
    PKV_RETURN_IF_ERROR(RemoveBoth(impl, *stack, name, KvRemoveReason::kExpired));
  if (!p.present) return int64_t{-2};
  if (p.expires_at_ms == 0) return int64_t{-1};
  if (absolute) return static_cast<int64_t>(p.expires_at_ms);
  return static_cast<int64_t>(p.expires_at_ms - now_ms);
}

}  // namespace

StatusOr<std::vector<BlockKey>> internal::EngineImpl::ValueKeysInRam() {
  std::vector<BlockKey> keys;
  // Queued ones are stored (a write-back failure is reported). Not all: a
  // value evicted after the Flush began may still be queued when the SSD
  // tier is walked, so the callers walk its queue too
  // (ForEachIncludingQueued;
  // EngineTest.AWholeSpaceWalkSeesAValueQueuedForWriteBackAfterItsFlush).
  if (ssd_ != nullptr) PKV_RETURN_IF_ERROR(ssd_->Flush());
  PKV_RETURN_IF_ERROR(Values().status());
  HotTier* hot = nullptr;
  {
    MutexLock lock(&mu_);
    hot = values_->hot.get();
  }
  if (hot == nullptr) return keys;
  // Collected first: the SSD tier is not asked under the hot tier's lock.
  hot->ForEach([&](const BlockMeta& meta, uint64_t) {
    if (meta.namespace_id.IsZero()) keys.push_back(meta.key);
  });
  // A dirty value the hot tier let go of before the walk, whose hand-over
  // to the SSD tier has not ended, is in neither tier's walk: the callers
  // walk the SSD tier (queue, then index) after it has. (DBSIZE undercounted
  // such a value, and FLUSHDB left it to be written and served again;
  // EngineTest.AWholeSpaceWalkSeesAValueBeingHandedToTheSsdTier.)
  hot->WaitForHandOvers();
  return keys;
}

// SsdTier's flag of a DropShadowedLegacyValues that left no older copy.
constexpr std::string_view kLegacyValuesSwept = "legacy-values-swept";

void internal::EngineImpl::DropShadowedLegacyValues() {
  // Older bytes beside a record (a crash between a write-through SET's
  // record and their removal, or that removal failing) are shadowed only
  // while the record is there: one that left the SSD tier before any read of
  // its key (evicted for capacity, dropped as damaged by another read: an
  // audit, a SCAN, a compaction) uncovered them, and GET served them as the
  // value of a key overwritten since
  // (EngineTest.ARecordEvictedBeforeAnyReadNeverUncoversTheOlderSchemesBytes,
  // EngineTest.ARecordDroppedByAnotherReadNeverUncoversTheOlderSchemesBytes).
  // So every record is read once here, before anything can evict, and the
  // older copy of its name dropped. A damaged record is left in place (its
  // name cannot be read): the read of its own key drops the older bytes with
  // it (DropUncoveredLegacy). Best effort: a failure leaves that copy as it was.
  // Once: no code writes the older scheme any more, so after one sweep that
  // left no copy behind no record shadows one (an open read every value on
  // SSD each time, minutes for a tier of many gigabytes of values).
  //
  // The same walk decides legacy_values_possible_: no value on SSD, or none
  // but sound records by this sweep, means no older-scheme bytes for the
  // whole run, and GET and SET skip their look (an uncounted lookup in RAM
  // and on SSD: a hash and 2 locks, a third of a hot GET hit in process;
  // docs/benchmarks.md, "values"). Any other open (a value on SSD, the sweep done
  // before) keeps the look: an older binary may have written the older
  // scheme since (EngineTest.OlderSchemeValuesWrittenBetweenTwoOpensStillRead).
  SsdTier* ssd = ssd_.get();
  if (ssd == nullptr) return;
  std::vector<BlockKey> keys;
  ssd->ForEach([&](const BlockMeta& meta, uint64_t) {
    if (meta.namespace_id.IsZero()) keys.push_back(meta.key);
  });
  if (keys.empty()) return;
  legacy_values_possible_.store(true, std::memory_order_release);
  if (!drop_shadowed_legacy_) return;
  StatusOr<bool> swept = ssd->HasFlag(kLegacyValuesSwept);
  if (!swept.ok() || *swept) return;
  bool left = false;   // a copy this sweep could not decide on or remove
  bool older = false;  // bytes that are no sound record (older-scheme, damaged)
  for (const BlockKey& key : keys) {
    StatusOr<SharedBytes> payload = ssd->PeekIntact(key);
    if (!payload.ok()) {
      const bool damaged = !payload.status().IsNotFound();  // its name unknown
      left = left || damaged;
      older = older || damaged;
      continue;
    }
    StatusOr<ValueRecord> r = internal::DecodeValueRecord(*payload, key);
    if (!r.ok()) {  // older-scheme bytes themselves
      older = true;
      continue;
    }
    const BlockKey legacy = internal::LegacyValueKey(r->name);
    if (!ssd->Contains(legacy)) continue;
    Status s = stack_->Remove(legacy, KvRemoveReason::kSuperseded);
    if (!s.ok() && !s.IsNotFound()) {
      left = true;
      if (options_.log) {
        options_.log("older-scheme value beside the record " + key.ToHex() +
                     " not removed: " + s.ToString());
      }
    }
  }
  if (!left) (void)ssd->SetFlag(kLegacyValuesSwept);  // else the next open tries again
  if (!older) legacy_values_possible_.store(false, std::memory_order_release);
}

StatusOr<TierStack*> internal::EngineImpl::Values() {
  if (TierStack* stack = values_stack_.load(std::memory_order_acquire)) return stack;
  MutexLock lock(&mu_);
  if (values_ == nullptr) {
    PKV_ASSIGN_OR_RETURN(
        EngineOwner owner,
        NewOwner(std::string(kValuesOwnerName), std::nullopt,
                 /*advisor_block_tokens=*/0, /*namespace_id=*/BlockKey{}));
    values_ = std::make_unique<EngineOwner>(std::move(owner));
    values_owner_.store(values_->owner, std::memory_order_release);
    values_stack_.store(stack_.get(), std::memory_order_release);
  }
  return stack_.get();
}

Clock* Engine::clock() const { return impl_->clock_; }

Status Engine::CheckValueKey(std::string_view key) {
  if (key.size() > internal::kMaxValueNameBytes) {
    return Status::InvalidArgument("key of " + std::to_string(key.size()) +
                                   " bytes is longer than the limit of 64 KiB");
  }
  return Status::OK();
}

StatusOr<SharedBytes> Engine::GetValue(std::string_view key) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  return ReadValue(*impl_, *stack, key, /*promote=*/true);
}

Status Engine::PutValue(std::string_view key, SharedBytes value) {
  return SetValue(key, std::move(value), SetValueOptions{}).status();
}

StatusOr<SetValueResult> Engine::SetValue(std::string_view key, SharedBytes value,
                                          const SetValueOptions& options) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_RETURN_IF_ERROR(CheckValueKey(key));
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  SetValueResult result;
  {
    MutexLock lock(&StripeOf(*impl_, internal::ValueKey(key)));
    const uint64_t now_ms = impl_->clock_->UnixMillis();
    using Condition = SetValueOptions::Condition;
    // A plain SET needs no look at the old value (after a restart that could
    // mean reading a record from SSD): only whether a legacy copy is to drop.
    Presence p;
    if (options.condition != Condition::kAlways || options.keep_ttl ||
        options.return_old) {
      PKV_ASSIGN_OR_RETURN(p, Probe(*impl_, *stack, key, now_ms));
    } else {
      p.legacy = MayHoldLegacy(*impl_) && stack->Contains(internal::LegacyValueKey(key));
    }
    if (options.return_old && p.present) {
      PKV_ASSIGN_OR_RETURN(SharedBytes old,
                           ReadValue(*impl_, *stack, key, false, now_ms));
      result.old = std::move(old);
    }
    if ((options.condition == Condition::kIfAbsent && p.present) ||
        (options.condition == Condition::kIfPresent && !p.present)) {
      return result;
    }
    const uint64_t expires_at_ms =
        options.keep_ttl ? (p.present ? p.expires_at_ms : 0) : options.expires_at_unix_ms;
    if (expires_at_ms != 0 && expires_at_ms <= now_ms) {
      PKV_RETURN_IF_ERROR(RemoveBoth(*impl_, *stack, key));
    } else {
      PKV_RETURN_IF_ERROR(
          WriteRecord(*impl_, *stack, key, expires_at_ms, value, p.legacy));
    }
    result.written = true;
  }
  // The write is done: a failing sweep step is retried by the next one.
  StatusOr<uint64_t> swept = SweepDue(*impl_, *stack, kSweepPerWrite);
  static_cast<void>(swept);
  impl_->SyncEvents();
  return result;
}

StatusOr<bool> Engine::DeleteValue(std::string_view key) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  MutexLock lock(&StripeOf(*impl_, internal::ValueKey(key)));
  PKV_ASSIGN_OR_RETURN(Presence p,
                       Probe(*impl_, *stack, key, impl_->clock_->UnixMillis()));
  if (!p.present && !p.expired) return false;
  PKV_RETURN_IF_ERROR(RemoveBoth(*impl_, *stack, key));
  impl_->SyncEvents();
  return p.present;
}

bool Engine::ContainsValue(std::string_view key) const {
  StatusOr<int64_t> ttl = TtlMillis(*impl_, key);
  return ttl.ok() && *ttl != -2;
}

StatusOr<int64_t> Engine::ValueTtlMillis(std::string_view key) {
  return TtlMillis(*impl_, key);
}

StatusOr<int64_t> Engine::ValueExpiresAtMillis(std::string_view key) {
  return TtlMillis(*impl_, key, /*absolute=*/true);
}

StatusOr<bool> Engine::SetValueExpiry(std::string_view key, uint64_t expires_at_unix_ms,
                                      ExpiryCondition condition) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  MutexLock lock(&StripeOf(*impl_, internal::ValueKey(key)));
  const uint64_t now_ms = impl_->clock_->UnixMillis();
  PKV_ASSIGN_OR_RETURN(Presence p, Probe(*impl_, *stack, key, now_ms));
  if (p.expired)
    PKV_RETURN_IF_ERROR(RemoveBoth(*impl_, *stack, key, KvRemoveReason::kExpired));
  if (!p.present ||
      !ExpiryConditionHolds(condition, p.expires_at_ms, expires_at_unix_ms)) {
    return false;
  }
  if (expires_at_unix_ms == 0 && p.expires_at_ms == 0) return false;  // PERSIST
  if (expires_at_unix_ms != 0 && expires_at_unix_ms <= now_ms) {
    PKV_RETURN_IF_ERROR(RemoveBoth(*impl_, *stack, key));
    impl_->SyncEvents();
    return true;
  }
  PKV_ASSIGN_OR_RETURN(SharedBytes value, ReadValue(*impl_, *stack, key, false, now_ms));
  PKV_RETURN_IF_ERROR(
      WriteRecord(*impl_, *stack, key, expires_at_unix_ms, value, p.legacy));
  impl_->SyncEvents();
  return true;
}

StatusOr<ValueScanPage> Engine::ScanValues(uint64_t cursor, size_t count) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  PKV_RETURN_IF_ERROR(FillCatalog(*impl_, *stack));
  internal::ValueCatalog::Page page = impl_->value_catalog_.From(cursor, count);
  const uint64_t now_ms = impl_->clock_->UnixMillis();
  ValueScanPage out;
  out.next_cursor = page.next_cursor;
  for (internal::ValueCatalog::Entry& e : page.entries) {
    if (e.expires_at_ms != 0 && e.expires_at_ms <= now_ms) continue;  // the sweep's
    if (!stack->Contains(e.key)) {
      ForgetIfGone(*impl_, *stack, e.key);  // evicted for capacity
      continue;
    }
    out.keys.push_back(std::move(e.name));
  }
  return out;
}

StatusOr<uint64_t> Engine::RemoveExpiredValues(size_t max_keys) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  PKV_RETURN_IF_ERROR(FillCatalog(*impl_, *stack));
  return SweepDue(*impl_, *stack, max_keys);
}

StatusOr<uint64_t> Engine::CountValues() {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(std::vector<BlockKey> hot, impl_->ValueKeysInRam());
  SsdTier* ssd = impl_->ssd_.get();
  // A RAM key counts unless the SSD walk counted it. (Asked of the SSD tier
  // after the walk, a key evicted from RAM since, written below after the
  // walk looked, counted in neither: DBSIZE undercounted;
  // EngineTest.DbsizeCountsAValueEvictedAfterItsWalkOfTheSsdTier.)
  std::unordered_set<BlockKey> on_ssd;
  if (ssd != nullptr) {
    ssd->ForEachIncludingQueued([&](const BlockMeta& meta, uint64_t) {
      if (meta.namespace_id.IsZero()) on_ssd.insert(meta.key);
    });
  }
  if (impl_->hooks_.after_count_values_ssd_walk) {
    impl_->hooks_.after_count_values_ssd_walk();
  }
  uint64_t n = on_ssd.size();
  for (const BlockKey& key : hot) n += on_ssd.contains(key) ? 0 : 1;
  return n;
}

StatusOr<uint64_t> Engine::ClearValues() {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(std::vector<BlockKey> keys, impl_->ValueKeysInRam());
  if (SsdTier* ssd = impl_->ssd_.get()) {
    ssd->ForEachIncludingQueued([&](const BlockMeta& meta, uint64_t) {
      if (meta.namespace_id.IsZero()) keys.push_back(meta.key);
    });
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  PKV_ASSIGN_OR_RETURN(TierStack * stack, impl_->Values());
  uint64_t removed = 0;
  for (const BlockKey& key : keys) {
    Status s = stack->Remove(key);
    impl_->value_catalog_.Forget(key);
    if (s.ok()) {
      ++removed;
    } else if (!s.IsNotFound()) {
      return s;
    }
  }
  impl_->SyncEvents();
  return removed;
}

}  // namespace prefixkv
