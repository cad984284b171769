// TierStack: hot over SSD. The stack is the hot tier's eviction listener so it
// can keep its set of dirty keys exact (a key leaves the set when the hot tier
// evicts it and the block goes below, or when Flush writes it).
#include "prefixkv/advanced/tier_stack.h"

#include <cassert>
#include <vector>

namespace prefixkv {

TierStack::TierStack(BlockTier* hot, BlockTier* ssd, EvictionListener* ssd_writer,
                     TierStackOptions options)
    : hot_(hot), ssd_(ssd), ssd_writer_(ssd_writer), options_(options) {
  assert(hot_ != nullptr || ssd_ != nullptr);
  if (hot_ != nullptr) hot_->SetEvictionListener(this);
}

TierStack::~TierStack() {
  if (hot_ != nullptr) hot_->SetEvictionListener(nullptr);
}

StatusOr<TierHit> TierStack::Get(const BlockKey& key, bool allow_promotion) {
  if (hot_ != nullptr) {
    StatusOr<SharedBytes> hit = hot_->Get(key);
    if (hit.ok()) return TierHit{std::move(hit).value(), TierLevel::kHot};
  }
  if (ssd_ == nullptr) return Status::NotFound("block " + key.ToHex() + " not cached");
  StatusOr<SharedBytes> hit = ssd_->Get(key);
  if (!hit.ok()) return hit.status();
  if (hot_ != nullptr && options_.promote_on_ssd_hit && allow_promotion) {
    StatusOr<BlockMeta> meta = ssd_->Peek(key);
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
  if (hot_ == nullptr) return ssd_->Put(meta, std::move(payload), /*dirty=*/false);
  const bool write_back = ssd_ != nullptr && !options_.write_through;
  if (ssd_ != nullptr && options_.write_through) {
    PKV_RETURN_IF_ERROR(ssd_->Put(meta, payload, /*dirty=*/false));
  }
  // Mark first: the hot Put may evict the block itself before it returns
  // (a listener call that then clears the mark).
  if (write_back) MarkDirty(meta.key, true);
  Status s = hot_->Put(meta, payload, /*dirty=*/write_back);
  if (s.ok()) return s;
  if (write_back) MarkDirty(meta.key, false);
  // Too big for the hot tier: it can still live on SSD.
  if (s.IsNoSpace() && ssd_ != nullptr) {
    return write_back ? ssd_->Put(meta, std::move(payload), /*dirty=*/false)
                      : Status::OK();
  }
  return s;
}

Status TierStack::PutLowest(const BlockMeta& meta, SharedBytes payload) {
  if (ssd_ != nullptr) return ssd_->Put(meta, std::move(payload), /*dirty=*/false);
  return hot_->Put(meta, std::move(payload), /*dirty=*/false);
}

Status TierStack::RewriteIn(BlockTier* tier, const BlockMeta& meta,
                            const SharedBytes& payload, bool dirty) {
  Status removed = tier->Remove(meta.key);
  // A pinned hot block cannot be removed; Put then replaces it in place and
  // the pin holder keeps the old bytes.
  if (!removed.ok() && !removed.IsBusy()) return removed;
  return tier->Put(meta, payload, dirty);
}

Status TierStack::Rewrite(const BlockMeta& meta, SharedBytes payload) {
  const bool in_hot = hot_ != nullptr && hot_->Contains(meta.key);
  const bool in_ssd = ssd_ != nullptr && ssd_->Contains(meta.key);
  if (!in_hot && !in_ssd)
    return Status::NotFound("block " + meta.key.ToHex() + " not cached");
  if (in_ssd) PKV_RETURN_IF_ERROR(RewriteIn(ssd_, meta, payload, /*dirty=*/false));
  if (in_hot) {
    // The hot copy is dirty unless the SSD tier holds the same new bytes.
    const bool dirty = ssd_ != nullptr && !in_ssd;
    if (dirty) MarkDirty(meta.key, true);
    Status s = RewriteIn(hot_, meta, payload, dirty);
    if (!s.ok() && dirty) MarkDirty(meta.key, false);
    PKV_RETURN_IF_ERROR(s);
  }
  return Status::OK();
}

Status TierStack::Remove(const BlockKey& key) {
  Status hot = hot_ != nullptr ? hot_->Remove(key) : Status::NotFound("no hot tier");
  if (hot.ok()) MarkDirty(key, false);
  Status ssd = ssd_ != nullptr ? ssd_->Remove(key) : Status::NotFound("no ssd tier");
  if (hot.IsBusy()) return hot;
  if (hot.ok() || ssd.ok()) return Status::OK();
  if (!hot.IsNotFound()) return hot;
  if (!ssd.IsNotFound()) return ssd;
  return Status::NotFound("block " + key.ToHex() + " not cached");
}

void TierStack::MarkDirty(const BlockKey& key, bool dirty) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dirty) {
    dirty_.insert(key);
  } else {
    dirty_.erase(key);
  }
}

size_t TierStack::dirty_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
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
  MarkDirty(meta.key, false);
  // Clean victims are already stored below (or were never meant to be).
  if (!dirty || ssd_ == nullptr) return;
  // A failed synchronous write loses a cached block, never correctness: the
  // next Match simply misses it.
  (void)WriteBelow(meta, payload);
}

Status TierStack::Flush() {
  if (ssd_ == nullptr || hot_ == nullptr) return Status::OK();
  std::vector<BlockKey> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys.assign(dirty_.begin(), dirty_.end());
  }
  for (const BlockKey& key : keys) {
    StatusOr<BlockMeta> meta = hot_->Peek(key);
    StatusOr<SharedBytes> payload = hot_->Get(key);
    if (!meta.ok() || !payload.ok()) {  // evicted meanwhile: written by OnEvict
      MarkDirty(key, false);
      continue;
    }
    PKV_RETURN_IF_ERROR(ssd_->Put(*meta, *payload, /*dirty=*/false));
    MarkDirty(key, false);
    // Same bytes, now clean: a later eviction need not write them again.
    (void)hot_->Put(*meta, *payload, /*dirty=*/false);
  }
  return Status::OK();
}

}  // namespace prefixkv
