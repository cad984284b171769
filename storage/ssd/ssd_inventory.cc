// The SSD tier's inventory: live counters, iteration, per-namespace usage and
// the namespace purge. All of it reads the index under mu_ and copies what it
// needs before calling out (ForEach's callback may be slow, and runs without
// the lock). PurgeNamespace removes through Remove, so each removal is
// journaled and counted like any other, then deletes by key range the records
// the index never loaded (unknown layout versions).
#include <rocksdb/write_batch.h>

#include <map>
#include <unordered_set>

#include "ssd_layout.h"
#include "ssd_tier_impl.h"

namespace prefixkv {

TierCounters ssd::TierImpl::Totals() const {
  MutexLock lock(&mu_);
  return index_.Totals();
}

TierCounters ssd::TierImpl::OwnerCounters(OwnerId owner) const {
  MutexLock lock(&mu_);
  MutexLock names(&names_mu_);  // after mu_, as ForEach takes them
  return OwnerCountersLocked(owner);
}

TierCounters ssd::TierImpl::OwnerCountersLocked(OwnerId owner) const {
  OwnerId stored = 0;
  if (!names_.CountsUnder(owner, &stored)) return TierCounters{};  // another's id
  TierCounters c = index_.OwnerCounters(stored);
  for (OwnerId id : names_.Adopted(owner)) ssd::AddCounters(&c, index_.OwnerCounters(id));
  return c;
}

TierCounters ssd::TierImpl::Totals(OwnerId owners,
                                   std::vector<TierCounters>* counters) const {
  MutexLock lock(&mu_);
  MutexLock names(&names_mu_);  // after mu_, as ForEach takes them
  counters->clear();
  for (OwnerId o = 0; o < owners; ++o) counters->push_back(OwnerCountersLocked(o));
  return index_.Totals();
}

void ssd::TierImpl::ForEach(
    const std::function<void(const BlockMeta&, uint64_t)>& fn) const {
  std::vector<std::pair<BlockMeta, uint64_t>> copy;
  {
    MutexLock lock(&mu_);
    MutexLock names(&names_mu_);  // this run's owner of each
    copy.reserve(index_.size());
    for (const auto& [key, e] : index_.entries()) {
      copy.push_back(
          {BlockMeta{key, e.parent, e.namespace_id, names_.Run(e.owner)}, e.bytes});
    }
  }
  for (const auto& [meta, bytes] : copy) fn(meta, bytes);  // no lock: fn may be slow
}

void ssd::TierImpl::ForEachIncludingQueued(
    const std::function<void(const BlockMeta&, uint64_t)>& fn) const {
  // The queue before the index: a block leaves the queue only once its write
  // committed it to the index, so one written between the two looks is in
  // the second (and skipped there), and none is missed.
  std::vector<std::pair<BlockMeta, uint64_t>> queued = queue_->Contents();
  std::unordered_set<BlockKey> seen;
  {
    MutexLock names(&names_mu_);  // the queue holds stored ids too
    for (auto& [meta, bytes] : queued) {
      meta.owner = names_.Run(meta.owner);
      seen.insert(meta.key);
    }
  }
  for (const auto& [meta, bytes] : queued) fn(meta, bytes);
  ForEach([&](const BlockMeta& meta, uint64_t bytes) {
    if (!seen.contains(meta.key)) fn(meta, bytes);
  });
}

std::vector<SsdNamespaceUsage> ssd::TierImpl::Namespaces() const {
  std::map<BlockKey, SsdNamespaceUsage> by_ns;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, e] : index_.entries()) {
      SsdNamespaceUsage& u = by_ns[e.namespace_id];
      u.namespace_id = e.namespace_id;
      u.blocks += 1;
      u.bytes += e.bytes;
    }
  }
  std::vector<SsdNamespaceUsage> out;
  for (const auto& [ns, u] : by_ns) out.push_back(u);
  return out;
}

StatusOr<uint64_t> ssd::TierImpl::PurgeNamespace(const BlockKey& ns) {
  PKV_RETURN_IF_ERROR(queue_->Flush());  // queued blocks of `ns` go too
  std::vector<BlockKey> keys;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, e] : index_.entries()) {
      if (e.namespace_id == ns) keys.push_back(key);
    }
  }
  uint64_t removed = 0;
  for (const BlockKey& key : keys) {
    Status s = Remove(key);
    if (s.ok()) ++removed;
    if (!s.ok() && !s.IsNotFound()) return s;
  }
  // Records the index never loaded (unknown layout versions) go by range.
  rocksdb::WriteBatch batch;
  const std::string begin = ssd::NamespacePrefix(ssd::kMetaTag, ns);
  batch.DeleteRange(begin, begin + std::string(17, '\xff'));
  PKV_RETURN_IF_ERROR(Commit(&batch, {}, 0));
  Log("purged namespace " + ns.ToHex() + ": " + std::to_string(removed) + " blocks");
  return removed;
}

}  // namespace prefixkv
