// The SSD tier's namespace records: manifests ('n' | root -> the engine's
// manifest bytes) and the removal history ('r' | slot -> one removed block),
// both in the metadata database beside the blocks' records (docs/ssd.md).
// The history is a ring of removal_history_entries slots: sequence s goes to
// slot s % entries, so it stays bounded without deleting anything, and each
// record is written in the batch that removes its block, so a block is never
// gone without its reason (or the reason without the removal).
#include <rocksdb/write_batch.h>

#include <algorithm>

#include "ssd_layout.h"
#include "ssd_tag_range.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace {

std::string SlotKey(uint32_t slot) {
  std::string k(1, ssd::kRemovalTag);
  for (int i = 3; i >= 0; --i) k.push_back(static_cast<char>(slot >> (8 * i)));
  return k;
}

SsdRemovalReason ReasonOf(const TierCounters& events) {
  if (events.corruptions > 0) return SsdRemovalReason::kCorrupt;
  if (events.evictions > 0) return SsdRemovalReason::kEvicted;
  return SsdRemovalReason::kRemoved;
}

std::string EncodeRemoval(const SsdRemoval& r) {
  std::string v(ssd::kRemovalBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(v.data());
  p[0] = ssd::kRemovalVersion;
  p[1] = static_cast<uint8_t>(r.reason);
  ssd::StoreLE64(p + 2, r.sequence);
  r.key.EncodeTo(p + 10);
  r.namespace_id.EncodeTo(p + 26);
  return v;
}

// False for a record of another version or length (skipped, never trusted).
bool DecodeRemoval(std::string_view v, SsdRemoval* r) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  if (v.size() != ssd::kRemovalBytes || p[0] != ssd::kRemovalVersion) return false;
  if (p[1] < 1 || p[1] > 3) return false;
  r->reason = static_cast<SsdRemovalReason>(p[1]);
  r->sequence = ssd::LoadLE64(p + 2);
  r->key = BlockKey::DecodeFrom(p + 10);
  r->namespace_id = BlockKey::DecodeFrom(p + 26);
  return true;
}

}  // namespace

std::string_view SsdRemovalReasonName(SsdRemovalReason reason) {
  static constexpr std::string_view kNames[] = {"unknown", "evicted", "removed",
                                                "corrupt"};
  const size_t i = static_cast<size_t>(reason);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

Status ssd::TierImpl::PutManifest(const BlockKey& ns, std::string_view manifest) {
  rocksdb::WriteBatch batch;
  batch.Put(ssd::NamespacePrefix(ssd::kManifestTag, ns), rocksdb::Slice(manifest));
  return Commit(&batch, {}, 0);
}

StatusOr<std::vector<std::pair<BlockKey, std::string>>> ssd::TierImpl::Manifests() const {
  std::vector<std::pair<BlockKey, std::string>> out;
  ssd::TagRange range(db_.get(), ssd::kManifestTag);
  for (; range.Valid(); range.Next()) {
    BlockKey ns;
    if (!ssd::ParseNamespacePrefix(range.key(), &ns)) continue;
    out.emplace_back(ns, std::string(range.value()));
  }
  PKV_RETURN_IF_ERROR(range.status("read manifests"));
  return out;
}

StatusOr<bool> ssd::TierImpl::HasFlag(std::string_view name) const {
  std::string value;
  const rocksdb::Status rs = db_->Get(
      rocksdb::ReadOptions(), std::string(ssd::kFlagPrefix) + std::string(name), &value);
  if (rs.IsNotFound()) return false;
  PKV_RETURN_IF_ERROR(FromRocks(rs, "read a flag"));
  return true;
}

Status ssd::TierImpl::SetFlag(std::string_view name) {
  rocksdb::WriteBatch batch;  // Commit refuses a read-only tier
  batch.Put(std::string(ssd::kFlagPrefix) + std::string(name), "1");
  return Commit(&batch, {}, 0);
}

StatusOr<std::vector<SsdRemoval>> ssd::TierImpl::Removals() const {
  std::vector<SsdRemoval> out;
  ssd::TagRange range(db_.get(), ssd::kRemovalTag);
  for (; range.Valid(); range.Next()) {
    SsdRemoval r;
    if (DecodeRemoval(range.value(), &r)) out.push_back(r);
  }
  PKV_RETURN_IF_ERROR(range.status("read the removal history"));
  {
    MutexLock lock(&unwritten_removals_mu_);
    out.insert(out.end(), unwritten_removals_.begin(), unwritten_removals_.end());
  }
  std::sort(out.begin(), out.end(), [](const SsdRemoval& a, const SsdRemoval& b) {
    return a.sequence < b.sequence;
  });
  return out;
}

void ssd::TierImpl::AddRemovalRecord(rocksdb::WriteBatch* batch, const BlockKey& key,
                                     const BlockKey& ns, const TierCounters& events) {
  const uint32_t entries = options_.removal_history_entries;
  if (entries == 0 || ns.IsZero()) return;
  SsdRemoval r{key, ns, ReasonOf(events), 0};
  {
    MutexLock lock(&removal_mu_);
    if (!next_removal_seq_.has_value()) {
      StatusOr<std::vector<SsdRemoval>> stored = Removals();
      next_removal_seq_ =
          stored.ok() && !stored->empty() ? stored->back().sequence + 1 : 1;
    }
    r.sequence = (*next_removal_seq_)++;
  }
  if (options_.read_only) {
    // The batch's commit is refused. A damaged block is dropped all the
    // same (DropCorrupt); any other removal then did not happen.
    if (r.reason != SsdRemovalReason::kCorrupt) return;
    MutexLock lock(&unwritten_removals_mu_);
    unwritten_removals_.push_back(r);
    return;
  }
  batch->Put(SlotKey(static_cast<uint32_t>(r.sequence % entries)), EncodeRemoval(r));
}

}  // namespace prefixkv
