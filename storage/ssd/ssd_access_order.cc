// SsdTier access order: reads reorder eviction in the index at once, and the
// metadata records (access sequence, chain reuse count) in batches. A hit
// that committed its record itself cost one RocksDB write per read; a batch
// writes the records of up to kAccessBatch blocks at once, never synced.
// What a kill loses of the pending updates only ages those blocks (docs/ssd.md
// "Reads"); Close() writes them before its clean marker.
#include <rocksdb/write_batch.h>

#include "ssd_layout.h"
#include "ssd_tier_impl.h"

namespace prefixkv {

bool ssd::TierImpl::NoteAccess(const BlockKey& key) {
  const uint64_t now = options_.clock->NowNanos();
  if (access_pending_.empty()) access_pending_since_nanos_ = now;
  access_pending_.insert(key);
  return access_pending_.size() >= kAccessBatch ||
         now - access_pending_since_nanos_ >= kAccessIntervalNanos;
}

Status ssd::TierImpl::FlushAccessOrder() {
  std::vector<BlockKey> keys;
  {
    MutexLock lock(&mu_);
    keys.assign(access_pending_.begin(), access_pending_.end());
    access_pending_.clear();
  }
  if (keys.empty()) return Status::OK();
  // The stripes from reading the entries until the batch is written: a
  // Remove, an eviction or a Store of one of these keys commits under its
  // stripe, so none can land between this read of its entry and the write
  // (which would bring a removed record back, or an old one over a new one).
  BatchLock batch_lock(this, keys);
  rocksdb::WriteBatch batch;
  OwnerId owner = 0;
  {
    MutexLock lock(&mu_);
    for (const BlockKey& key : keys) {
      const IndexEntry* e = index_.Find(key);
      if (e == nullptr) continue;  // gone meanwhile: its record stays gone
      const ssd::StoredMeta m{
          e->owner,    e->parent,     e->bytes,
          e->checksum, e->access_seq, e->dirty,
          e->segment,  e->offset,     ssd::PersistedChainHits(e->chain_hits)};
      batch.Put(ssd::BlockRecordKey(ssd::kMetaTag, e->namespace_id, key),
                ssd::EncodeMeta(m));
      owner = e->owner;
    }
  }
  if (batch.Count() == 0) return Status::OK();
  return Commit(&batch, {}, owner, /*relaxed=*/true);
}

}  // namespace prefixkv
