// ssd::TierImpl::Audit: recomputes every state counter from the records,
// compares it with the live and the persisted counters, verifies every
// payload (length and checksum, read from its segment), reports referenced
// segment files that are missing, and reports each disagreement. Chain links are checked
// by FindOrphans(): a missing parent is legal under the BlockTier contract (the caller
// may Remove it, or keep it in another tier), so it is not a finding.
//
// Block operations are paused (pause_ held exclusively) for the duration, so the records,
// the index and the counters describe one moment.
#include <rocksdb/iterator.h>

#include <set>

#include "ssd_layout.h"
#include "ssd_segment.h"
#include "ssd_tier_impl.h"

namespace prefixkv {
namespace {

void Compare(std::vector<AuditFinding>* findings, const std::string& what,
             uint64_t counter, uint64_t recomputed) {
  if (counter == recomputed) return;
  findings->push_back({what, "counter " + std::to_string(counter) + ", recomputed " +
                                 std::to_string(recomputed)});
}

}  // namespace

Status ssd::TierImpl::Audit(std::vector<AuditFinding>* findings) {
  PKV_RETURN_IF_ERROR(queue_->Flush());
  WriterLock paused(&pause_);

  // 1. Every metadata record against the index; every payload verified.
  std::map<OwnerId, TierCounters> recomputed;
  std::set<BlockKey> on_disk;
  std::map<uint64_t, uint64_t> segments_referenced;  // segment -> blocks
  std::vector<std::pair<BlockKey, ssd::IndexEntry>> corrupt;
  // Bounded to the metadata range; payloads are verified one by one below,
  // where a damaged one is a finding, not a failed scan.
  rocksdb::ReadOptions meta_ro;
  const std::string meta_end(1, static_cast<char>(ssd::kMetaTag + 1));
  const rocksdb::Slice meta_upper(meta_end);
  meta_ro.iterate_upper_bound = &meta_upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(meta_ro));
  const std::string begin(1, ssd::kMetaTag);
  for (it->Seek(begin); it->Valid() && it->key().starts_with(begin); it->Next()) {
    BlockKey ns, key;
    ssd::StoredMeta m;
    if (!ssd::ParseBlockRecordKey(it->key().ToStringView(), &ns, &key) ||
        !ssd::DecodeMeta(it->value().ToStringView(), &m).ok()) {
      continue;  // unknown versions are kept but not counted; see open_report()
    }
    on_disk.insert(key);
    ssd::IndexEntry e{ns,           m.parent, m.owner,   m.payload_bytes, m.payload_xxh3,
                      m.access_seq, m.dirty,  m.segment, m.offset};
    segments_referenced[m.segment] += 1;
    {
      MutexLock lock(&mu_);
      const ssd::IndexEntry* live = index_.Find(key);
      if (live == nullptr || live->owner != m.owner || live->bytes != m.payload_bytes ||
          live->checksum != m.payload_xxh3 || live->segment != m.segment ||
          live->offset != m.offset) {
        findings->push_back({"block " + key.ToHex(), "record disagrees with the index"});
      }
    }
    recomputed[m.owner].entries += 1;
    recomputed[m.owner].bytes += m.payload_bytes;
    corrupt.push_back({key, e});  // verified below, outside the iterator
  }
  PKV_RETURN_IF_ERROR(FromRocks(it->status(), "audit scan"));
  for (const auto& [segment, blocks] : segments_referenced) {
    if (!store_->Has(segment)) {
      findings->push_back(
          {"segment " + ssd::SegmentFileName(segment),
           "missing; referenced by " + std::to_string(blocks) + " blocks"});
    }
  }
  for (const auto& [key, e] : corrupt) {
    StatusOr<SharedBytes> read = ReadVerified(key, e);  // drops and counts a bad one
    if (read.ok()) continue;
    findings->push_back({"block " + key.ToHex() + " checksum", read.status().ToString()});
    recomputed[e.owner].entries -= 1;
    recomputed[e.owner].bytes -= e.bytes;
  }

  // 2. Persisted counters (merged records).
  std::map<OwnerId, TierCounters> persisted;
  rocksdb::ReadOptions counter_ro;
  const std::string counter_end(1, static_cast<char>(ssd::kCounterTag + 1));
  const rocksdb::Slice counter_upper(counter_end);
  counter_ro.iterate_upper_bound = &counter_upper;
  std::unique_ptr<rocksdb::Iterator> cit(db_->NewIterator(counter_ro));
  const std::string cbegin(1, ssd::kCounterTag);
  for (cit->Seek(cbegin); cit->Valid() && cit->key().starts_with(cbegin); cit->Next()) {
    OwnerId o;
    TierCounters c;
    if (ssd::ParseCounterKey(cit->key().ToStringView(), &o) &&
        ssd::DecodeCounters(cit->value().ToStringView(), &c)) {
      persisted[o] = c;
    } else {
      findings->push_back({"counter record", "malformed"});
    }
  }
  PKV_RETURN_IF_ERROR(FromRocks(cit->status(), "audit counters"));

  // 3. Live and persisted state counters against the recomputed ones.
  MutexLock lock(&mu_);
  std::set<OwnerId> owners;
  for (const auto& [o, c] : index_.owners()) owners.insert(o);
  for (const auto& [o, c] : recomputed) owners.insert(o);
  for (const auto& [o, c] : persisted) owners.insert(o);
  for (OwnerId o : owners) {
    const TierCounters live = index_.OwnerCounters(o);
    const TierCounters& r = recomputed[o];
    const TierCounters& p = persisted[o];
    const std::string name = "owner " + std::to_string(o);
    Compare(findings, name + " entries", live.entries, r.entries);
    Compare(findings, name + " bytes", live.bytes, r.bytes);
    Compare(findings, name + " persisted entries", p.entries, r.entries);
    Compare(findings, name + " persisted bytes", p.bytes, r.bytes);
  }
  // 4. Index entries without records.
  for (const auto& [key, e] : index_.entries()) {
    if (on_disk.count(key) == 0) {
      findings->push_back({"block " + key.ToHex(), "indexed but not on disk"});
    }
  }
  return Status::OK();
}

std::vector<BlockKey> ssd::TierImpl::FindOrphans() const {
  std::vector<BlockKey> out;
  MutexLock lock(&mu_);
  for (const auto& [key, e] : index_.entries()) {
    if (!index_.HasStoredParent(e)) out.push_back(key);
  }
  return out;
}

}  // namespace prefixkv
