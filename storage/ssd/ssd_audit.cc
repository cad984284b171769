// ssd::TierImpl::Audit: recomputes every state counter from the records,
// compares it with the live and the persisted counters, verifies every
// payload (length and checksum, read from its segment), reports referenced
// segment files that are missing, and reports each disagreement. Chain links are checked
// by FindOrphans(): a missing parent is legal under the BlockTier contract (the caller
// may Remove it, or keep it in another tier), so it is not a finding.
//
// Block operations are paused (pause_ held exclusively) for the duration, so the records,
// the index and the counters describe one moment. The steps, in the order their findings
// are reported: ScanRecords (every metadata record against the index),
// ReportMissingSegments, VerifyPayloads (length and checksum, read from the segment),
// ReadPersistedCounters, CompareCounters (live and persisted against the recomputed ones)
// and ReportUnrecordedEntries (index entries without a record).
#include <rocksdb/iterator.h>

#include <set>

#include "ssd_layout.h"
#include "ssd_segment.h"
#include "ssd_tag_range.h"
#include "ssd_tier_impl.h"

namespace prefixkv {

// What the scan of the metadata records found (Audit's first step).
struct ssd::TierImpl::AuditScan {
  std::map<OwnerId, TierCounters> recomputed;              // from the records
  std::set<BlockKey> on_disk;                              // keys with a record
  std::map<uint64_t, uint64_t> segments_referenced;        // segment -> blocks
  std::vector<std::pair<BlockKey, IndexEntry>> to_verify;  // every record's payload
};

namespace {

void Compare(std::vector<AuditFinding>* findings, const std::string& what,
             uint64_t counter, uint64_t recomputed) {
  if (counter == recomputed) return;
  findings->push_back({what, "counter " + std::to_string(counter) + ", recomputed " +
                                 std::to_string(recomputed)});
}

// Segment files the records point into that are gone.
void ReportMissingSegments(const ssd::SegmentStore& store,
                           const std::map<uint64_t, uint64_t>& referenced,
                           std::vector<AuditFinding>* findings) {
  for (const auto& [segment, blocks] : referenced) {
    if (!store.Has(segment)) {
      // Listed but no regular file: its blocks stay (their reads fail).
      findings->push_back(
          {"segment " + ssd::SegmentFileName(segment),
           std::string(store.Unreadable(segment) ? "unreadable (not a regular file)"
                                                 : "missing") +
               "; referenced by " + std::to_string(blocks) + " blocks"});
    }
  }
}

// The persisted counters (merged records) per owner; a record that does not
// parse is a finding.
Status ReadPersistedCounters(rocksdb::DB* db, std::map<OwnerId, TierCounters>* persisted,
                             std::vector<AuditFinding>* findings) {
  ssd::TagRange range(db, ssd::kCounterTag);
  for (; range.Valid(); range.Next()) {
    OwnerId o;
    TierCounters c;
    if (ssd::ParseCounterKey(range.key(), &o) && ssd::DecodeCounters(range.value(), &c)) {
      (*persisted)[o] = c;
    } else {
      findings->push_back({"counter record", "malformed"});
    }
  }
  return range.status("audit counters");
}

// counters[o], or zeros for an owner without any.
TierCounters CountersOf(const std::map<OwnerId, TierCounters>& counters, OwnerId o) {
  auto it = counters.find(o);
  return it == counters.end() ? TierCounters{} : it->second;
}

}  // namespace

Status ssd::TierImpl::Audit(std::vector<AuditFinding>* findings) {
  PKV_RETURN_IF_ERROR(queue_->Flush());
  WriterLock paused(&pause_);
  AuditScan scan;
  PKV_RETURN_IF_ERROR(ScanRecords(&scan, findings));
  ReportMissingSegments(*store_, scan.segments_referenced, findings);
  VerifyPayloads(&scan, findings);
  std::map<OwnerId, TierCounters> persisted;
  PKV_RETURN_IF_ERROR(ReadPersistedCounters(db_.get(), &persisted, findings));
  MutexLock lock(&mu_);
  CompareCounters(scan.recomputed, persisted, findings);
  ReportUnrecordedEntries(scan.on_disk, findings);
  return Status::OK();
}

Status ssd::TierImpl::ScanRecords(AuditScan* scan, std::vector<AuditFinding>* findings) {
  // Bounded to the metadata range; payloads are verified one by one later
  // (VerifyPayloads), where a damaged one is a finding, not a failed scan.
  ssd::TagRange range(db_.get(), ssd::kMetaTag);
  for (; range.Valid(); range.Next()) {
    BlockKey ns, key;
    ssd::StoredMeta m;
    if (!ssd::ParseBlockRecordKey(range.key(), &ns, &key) ||
        !ssd::DecodeMeta(range.value(), &m).ok()) {
      continue;  // unknown versions are kept but not counted; see open_report()
    }
    scan->on_disk.insert(key);
    scan->segments_referenced[m.segment] += 1;
    {
      MutexLock lock(&mu_);
      const ssd::IndexEntry* live = index_.Find(key);
      if (live == nullptr || live->owner != m.owner || live->bytes != m.payload_bytes ||
          live->checksum != m.payload_xxh3 || live->segment != m.segment ||
          live->offset != m.offset) {
        findings->push_back({"block " + key.ToHex(), "record disagrees with the index"});
      }
    }
    scan->recomputed[m.owner].entries += 1;
    scan->recomputed[m.owner].bytes += m.payload_bytes;
    ssd::IndexEntry e{ns,           m.parent, m.owner,   m.payload_bytes, m.payload_xxh3,
                      m.access_seq, m.dirty,  m.segment, m.offset};
    scan->to_verify.push_back({key, e});  // verified later, outside the iterator
  }
  return range.status("audit scan");
}

void ssd::TierImpl::VerifyPayloads(AuditScan* scan, std::vector<AuditFinding>* findings) {
  for (const auto& [key, e] : scan->to_verify) {
    StatusOr<SharedBytes> read = ReadExtent(e);
    if (read.ok()) continue;
    // Drops and counts a damaged one; a read the medium failed keeps it.
    const Status failed = ReadFailed(key, e, read.status(), /*lookup=*/false);
    if (!read.status().IsNotFound() && !read.status().IsCorruption()) {
      // Still stored, and its bytes may be intact: not "checksum", which
      // the tools take for a block removed (audit and repair removed every
      // block chained below it, and it was counted out of the recomputed
      // counters; AuditTest.AnUnreadableSegmentLosesNoBlockToAuditOrRepair).
      findings->push_back({"block " + key.ToHex() + " unreadable", failed.ToString()});
      continue;
    }
    findings->push_back({"block " + key.ToHex() + " checksum", failed.ToString()});
    scan->recomputed[e.owner].entries -= 1;
    scan->recomputed[e.owner].bytes -= e.bytes;
  }
}

void ssd::TierImpl::CompareCounters(const std::map<OwnerId, TierCounters>& recomputed,
                                    const std::map<OwnerId, TierCounters>& persisted,
                                    std::vector<AuditFinding>* findings) {
  std::set<OwnerId> owners;
  for (const auto& [o, c] : index_.owners()) owners.insert(o);
  for (const auto& [o, c] : recomputed) owners.insert(o);
  for (const auto& [o, c] : persisted) owners.insert(o);
  for (OwnerId o : owners) {
    const TierCounters live = index_.OwnerCounters(o);
    const TierCounters r = CountersOf(recomputed, o);
    const TierCounters p = CountersOf(persisted, o);
    const std::string name = OwnerLabel(o);
    Compare(findings, name + " entries", live.entries, r.entries);
    Compare(findings, name + " bytes", live.bytes, r.bytes);
    Compare(findings, name + " persisted entries", p.entries, r.entries);
    Compare(findings, name + " persisted bytes", p.bytes, r.bytes);
  }
}

std::string ssd::TierImpl::OwnerLabel(OwnerId stored) const {
  // Stored ids are not this run's owner ids (docs/ssd.md "Owner names"): the
  // engine's audit lists the hot tier's findings by this run's id, so a bare
  // "owner 3" read as whichever owner has id 3 in this run. The name says
  // whose counters they are.
  MutexLock lock(&names_mu_);
  const std::string name = names_.NameOf(stored);
  return name.empty() ? "owner " + std::to_string(stored)
                      : "owner " + name + " (stored id " + std::to_string(stored) + ")";
}

void ssd::TierImpl::ReportUnrecordedEntries(const std::set<BlockKey>& on_disk,
                                            std::vector<AuditFinding>* findings) {
  for (const auto& [key, e] : index_.entries()) {
    if (on_disk.count(key) == 0) {
      findings->push_back({"block " + key.ToHex(), "indexed but not on disk"});
    }
  }
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
