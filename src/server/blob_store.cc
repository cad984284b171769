// The server's hot-then-SSD lookup, write-back store and removal.
#include "blob_store.h"

#include "prefixkv/advanced/hash.h"

namespace prefixkv::server {

BlockKey BlobStore::RawKey(std::string_view key) {
  HashStream state(HashStream::Width::k128);
  state.Update("raw|", 4);
  state.Update(key.data(), key.size());
  return state.Digest128();
}

StatusOr<SharedBytes> BlobStore::Get(const BlockKey& key) {
  if (hot_ != nullptr) {
    StatusOr<SharedBytes> hit = hot_->Get(key);
    if (hit.ok() || !hit.status().IsNotFound() || ssd_ == nullptr) return hit;
  }
  return GetFromSsd(key);
}

StatusOr<SharedBytes> BlobStore::GetFromSsd(const BlockKey& key) {
  if (hot_ == nullptr) return ssd_->Get(key);
  std::lock_guard<std::mutex> lock(StripeFor(key));
  // A Put may have landed in the hot tier between the miss and the lock.
  if (hot_->Contains(key)) {
    StatusOr<SharedBytes> hit = hot_->Get(key);
    if (hit.ok()) return hit;
  }
  StatusOr<SharedBytes> hit = ssd_->Get(key);
  if (!hit.ok()) return hit;
  // Promotion is best effort: a block larger than the hot tier stays on SSD.
  StatusOr<BlockMeta> meta = ssd_->Peek(key);
  if (meta.ok()) (void)hot_->Put(*meta, *hit, /*dirty=*/false);
  return hit;
}

Status BlobStore::Put(const BlockMeta& meta, SharedBytes payload) {
  std::lock_guard<std::mutex> lock(StripeFor(meta.key));
  if (write_through_) {
    PKV_RETURN_IF_ERROR(ssd_->Put(meta, payload, /*dirty=*/false));
    if (hot_ == nullptr) return Status::OK();
    // The RAM copy is clean (the SSD holds it). When it does not fit, an older
    // hot copy must not shadow the new SSD one.
    Status cached = hot_->Put(meta, std::move(payload), /*dirty=*/false);
    if (cached.ok() || !cached.IsNoSpace()) return cached;
    Status removed = hot_->Remove(meta.key);
    return removed.IsNotFound() ? Status::OK() : removed;
  }
  if (hot_ != nullptr) {
    Status s = hot_->Put(meta, payload, /*dirty=*/ssd_ != nullptr);
    if (!s.IsNoSpace() || ssd_ == nullptr) return s;
    // Too large for RAM: the SSD copy becomes the only one, so an older hot
    // copy must not shadow it.
    Status removed = hot_->Remove(meta.key);
    if (!removed.ok() && !removed.IsNotFound()) return removed;
  }
  return ssd_->Put(meta, std::move(payload), /*dirty=*/false);
}

StatusOr<bool> BlobStore::Remove(const BlockKey& key) {
  std::lock_guard<std::mutex> lock(StripeFor(key));
  bool found = false;
  for (BlockTier* tier : tiers()) {
    Status s = tier->Remove(key);
    if (s.ok()) {
      found = true;
    } else if (!s.IsNotFound()) {
      return s;
    }
  }
  return found;
}

bool BlobStore::Contains(const BlockKey& key) const {
  return (hot_ != nullptr && hot_->Contains(key)) ||
         (ssd_ != nullptr && ssd_->Contains(key));
}

std::vector<BlockTier*> BlobStore::tiers() const {
  std::vector<BlockTier*> out;
  if (hot_ != nullptr) out.push_back(hot_);
  if (ssd_ != nullptr) out.push_back(ssd_);
  return out;
}

}  // namespace prefixkv::server
