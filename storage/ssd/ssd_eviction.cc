// SsdTier capacity eviction: least recently used chain leaves first.
//
// Only leaves (blocks with no stored or in-flight child) are candidates, so an
// ancestor always outlives its stored descendants and no stored block is left
// without its parent. Access order is the persisted access sequence, so the
// order survives restarts. Eviction runs after each Put on the putting thread.
#include "ssd_layout.h"
#include "ssd_tier_impl.h"

namespace prefixkv {

void ssd::TierImpl::SetEvictionListener(EvictionListener* l) {
  MutexLock lock(&mu_);
  listener_ = l;
  // After return the old listener is never called again: it may be destroyed.
  listener_idle_.Wait(lock, [&]() REQUIRES(mu_) { return listener_calls_ == 0; });
}

void ssd::TierImpl::EndListenerCall() {
  MutexLock lock(&mu_);
  if (--listener_calls_ == 0) listener_idle_.NotifyAll();
}

void ssd::TierImpl::EnforceCapacity() {
  while (true) {
    std::optional<BlockKey> victim;
    {
      MutexLock lock(&mu_);
      // Payload bytes within the capacity, and (docs/ssd.md "Space") the
      // live extents within the disk budget.
      if (index_.bytes() <= options_.capacity_bytes &&
          (!DiskBounded() || index_.live_total() <= LiveBudget())) {
        return;
      }
      victim = index_.ClaimVictim();
    }
    if (!victim) return;  // everything left is pinned by in-flight children
    if (!Evict(*victim).ok()) {
      MutexLock lock(&mu_);
      index_.Release(*victim);
      return;  // counted and logged by Commit; retried at the next Put
    }
  }
}

Status ssd::TierImpl::Evict(const BlockKey& key) {
  BlockMeta meta;
  SharedBytes payload;
  bool dirty = false;
  EvictionListener* listener = nullptr;
  // Once counted in listener_calls_ (below, with the listener read under
  // mu_), this eviction uncounts itself on every return path, after the call:
  // SetEvictionListener waits for the count to drop to zero.
  struct ListenerUse {
    TierImpl* impl = nullptr;
    ~ListenerUse() {
      if (impl != nullptr) impl->EndListenerCall();
    }
  } use;  // declared first: outlives the call
  {
    BlockLock block_lock(this, key);
    ssd::IndexEntry e;
    {
      MutexLock lock(&mu_);
      const ssd::IndexEntry* found = index_.Find(key);
      if (found == nullptr) return Status::OK();  // removed meanwhile
      if (index_.ChildCount(key) > 0) {           // gained a child meanwhile
        index_.Release(key);
        return Status::OK();
      }
      e = *found;
      listener = listener_;
      if (listener != nullptr) {
        ++listener_calls_;
        use.impl = this;
      }
    }
    meta = BlockMeta{key, e.parent, e.namespace_id, e.owner};
    dirty = e.dirty;
    if (listener != nullptr) {
      StatusOr<SharedBytes> read = ReadVerified(key, e, /*lookup=*/false);
      if (!read.ok()) return read.status().IsNotFound() ? Status::OK() : read.status();
      payload = *read;
    }
    TierCounters events;
    events.evictions = 1;
    events.spills = listener != nullptr && dirty ? 1 : 0;
    PKV_RETURN_IF_ERROR(DropEntry(key, e, events, /*erase_on_failure=*/false));
  }
  // Outside every lock: the listener may block (its own backpressure).
  if (listener != nullptr) listener->OnEvict(Run(meta), payload, dirty);
  return Status::OK();
}

}  // namespace prefixkv
